from __future__ import annotations

import copy
import datetime as dt
import re
import tomllib
from decimal import Decimal

import pytest

from billing.pricing import price_in_force, tiers_sold
from schemas.catalog import CatalogError, load_catalog, parse_catalog
from tests.conftest import CATALOG_PATH


@pytest.fixture
def raw() -> dict:
    return tomllib.loads(CATALOG_PATH.read_text())


def test_default_catalog_tells_the_scenario(catalog):
    spark = catalog.model("gpt-5.3-codex-spark")
    assert spark.launched == dt.date(2026, 2, 12)
    assert spark.retires == dt.date(2026, 9, 11)
    assert spark.successor == "gpt-5.6-sol"
    assert sorted(m.retires for m in catalog.models if m.retires)[:2] == [
        dt.date(2026, 6, 2),
        dt.date(2026, 8, 31),
    ]
    assert len(catalog.models) >= 4
    assert {p.id for p in catalog.plans} == {"free", "plus", "pro", "team"}
    assert catalog.plan("team").minimum_monthly == Decimal("1000.00")  # a commitment
    assert all(p.minimum_monthly is None for p in catalog.plans if p.id != "team")
    assert tiers_sold(catalog, "gpt-5.6-sol", dt.date(2026, 8, 12)) == ["standard", "priority"]
    assert tiers_sold(catalog, "gpt-5.6-sol", dt.date(2026, 8, 13)) == ["standard", "priority", "ultrafast"]
    pro = catalog.plan("pro")
    spark_pool = next(p for p in pro.pools if p.id == "spark")
    main_pool = next(p for p in pro.pools if p.id == "main")
    assert spark_pool.covers("gpt-5.3-codex-spark") and not main_pool.covers("gpt-5.3-codex-spark")
    assert main_pool.covers("gpt-5.6-sol") and not spark_pool.covers("gpt-5.6-sol")


def test_every_model_has_a_price_for_each_day_it_is_sold(catalog):
    for m in catalog.models:
        assert tiers_sold(catalog, m.id, m.launched), m.id


def test_prices_are_decimal_and_effective_dated(catalog):
    before = price_in_force(catalog, "gpt-5.6-sol", "standard", dt.date(2026, 5, 31))
    after = price_in_force(catalog, "gpt-5.6-sol", "standard", dt.date(2026, 6, 1))
    assert before.per_million("output") == Decimal("12.00") and after.per_million("output") == Decimal(
        "10.00"
    )
    assert isinstance(after.per_million("cached_input"), Decimal)
    assert price_in_force(catalog, "gpt-5.6-sol", "ultrafast", dt.date(2026, 8, 12)) is None


def _broken(raw, mutate):  # type: ignore[no-untyped-def]
    data = copy.deepcopy(raw)
    mutate(data)
    with pytest.raises(CatalogError) as info:
        parse_catalog(data, "catalog.toml")
    message = str(info.value)
    assert "\n" not in message
    return message


def test_unknown_model_in_a_price(raw):
    msg = _broken(raw, lambda d: d["prices"][0].update(model="gpt-9"))
    assert "unknown model 'gpt-9'" in msg


def test_duplicate_price(raw):
    msg = _broken(raw, lambda d: d["prices"].append(dict(d["prices"][0])))
    assert "duplicate price for gpt-5.1 / standard" in msg


def test_non_positive_allowance(raw):
    msg = _broken(raw, lambda d: d["plans"][1]["pools"][0].update(allowance_tokens=0))
    assert "plans[1] (plus).pools[0] (spark).allowance_tokens" in msg and "positive" in msg


def test_successor_must_exist(raw):
    msg = _broken(raw, lambda d: d["models"][0].update(successor="gpt-nope"))
    assert "successor 'gpt-nope'" in msg


def test_float_prices_are_refused(raw):
    msg = _broken(raw, lambda d: d["prices"][0].update(input=1.25))
    assert "not floats" in msg


def test_unknown_tier_and_pool_model_and_period(raw):
    assert "tier" in _broken(raw, lambda d: d["prices"][0].update(tier="turbo"))
    assert "unknown model 'nope'" in _broken(raw, lambda d: d["plans"][2]["pools"][0].update(models=["nope"]))
    assert "period" in _broken(raw, lambda d: d["plans"][2]["pools"][0].update(period="year"))


def test_tiers_are_the_catalogs_and_a_price_names_a_listed_one(raw):
    msg = _broken(raw, lambda d: d["prices"][0].update(tier="flex"))
    assert "names tier 'flex', which [[tiers]] does not list (tiers: standard, priority, ultrafast)" in msg
    assert "listed twice" in _broken(raw, lambda d: d["tiers"].append(dict(d["tiers"][0])))
    assert "tiers[0]" in _broken(raw, lambda d: d["tiers"][0].update(id="Fast Lane"))
    assert "cached_input" in _broken(raw, lambda d: d["prices"][0].pop("cached_input"))  # every kind priced
    assert "holds '|'" in _broken(raw, lambda d: d["tiers"][0].update(label="Fast | cheap"))  # breaks tables
    without = copy.deepcopy(raw)
    del without["tiers"]  # absent: the three tiers, with their labels
    listed = parse_catalog(without, "catalog.toml")
    assert listed.tier_labels == {"standard": "Standard", "priority": "Priority", "ultrafast": "Ultrafast"}


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(CatalogError, match="catalog file not found"):
        load_catalog(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("currency = \n")
    with pytest.raises(CatalogError, match="not valid TOML"):
        load_catalog(bad)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seller": {"name": ""}}, "seller.name"),
        ({"seller": {"name": "S", "vat": "1"}}, "seller.vat: Extra inputs are not permitted"),
        ({"seller": {"name": "S\x00"}}, "seller.name: holds a control character"),
        ({"payment_terms_days": -1}, "payment_terms_days: Input should be greater than or equal to 0"),
        ({"payment_terms_days": "30"}, "payment_terms_days: Input should be a valid integer"),
        ({"payment_terms_days": 400}, "payment_terms_days: Input should be less than or equal to 365"),
    ],
)
def test_seller_and_payment_terms_are_checked_in_one_line(change, message):
    data = tomllib.loads(CATALOG_PATH.read_text()) | change
    with pytest.raises(CatalogError, match=re.escape(message)):
        parse_catalog(data)


def test_the_default_seller_and_terms():
    data = tomllib.loads(CATALOG_PATH.read_text())
    data.pop("seller"), data.pop("payment_terms_days")
    catalog = parse_catalog(data)
    assert catalog.payment_terms_days == 30 and catalog.seller.name
