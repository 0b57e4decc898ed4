"""Adding speed tiers is a catalog edit and nothing else.

A catalog gains two tiers, one slower than standard (``flex``) and one faster than ultrafast
(``turbo``, priced from the middle of the generated days), with their labels and prices. From the
generator's landing files to a finalized, exported and rendered month, nothing else changes: events
at the new tiers pass ingest and the data-quality gate, are aggregated and metered, priced at their
own rates (never another tier's), shown with their labels on customer documents and in the preview,
and offered by ``retirement preview --tier``. The generator draws a tier only on days it has a price.
"""

from __future__ import annotations

import csv
import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import func, select

from pipelines.cli import main
from pipelines.jobs.generate import GeneratorConfig, generate
from pipelines.jobs.landing import write_landing
from pipelines.warehouse.accounts import load_accounts
from pipelines.warehouse.engine import make_engine, upgrade
from schemas.catalog import load_catalog
from schemas.warehouse import BillableUsage, DqResult, InvoiceLine, UsageDaily
from tests.browser import measure
from tests.conftest import CATALOG_PATH, cli_args, close_month, run_day, sqlite_at

pytestmark = pytest.mark.slow
MONTH = "2026-03"
TURBO_FROM = dt.date(2026, 3, 4)
CFG = GeneratorConfig(start=dt.date(2026, 3, 2), days=4, accounts=60, events_per_day=1500, seed=5)
TIERS = """
[[tiers]]
id = "flex"
label = "Flex (best effort)"

[[tiers]]
id = "standard"
label = "Standard"

[[tiers]]
id = "priority"
label = "Priority"

[[tiers]]
id = "ultrafast"
label = "Ultrafast"

[[tiers]]
id = "turbo"
label = "Turbo"
"""
PRICES = f"""
[[prices]]
model = "gpt-5.6-sol"
tier = "flex"
effective_from = 2026-01-15
input = "0.70"
cached_input = "0.07"
output = "5.50"

[[prices]]
model = "gpt-5.6-sol"
tier = "turbo"
effective_from = {TURBO_FROM}
input = "11.00"
cached_input = "1.10"
output = "90.00"
"""


def _catalog(folder: Path) -> Path:
    """The default catalog with two more tiers and their prices: a catalog edit, nothing else."""
    text = CATALOG_PATH.read_text(encoding="utf-8")
    start, end = text.index("[[tiers]]"), text.index("# -- models")
    path = folder / "catalog.toml"
    path.write_text(text[:start] + TIERS.strip() + "\n\n" + text[end:] + PRICES, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def month(tmp_path_factory) -> dict:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("tiers")
    path = _catalog(root)
    catalog = load_catalog(path)
    generated = generate(catalog, CFG)
    landing = root / "landing"
    write_landing(generated, CFG, str(landing))
    settings = sqlite_at(root, landing)
    settings = type(settings)(str(path), settings.database_url, settings.lake, settings.landing)
    engine = make_engine(settings.database_url)
    upgrade(engine)
    load_accounts(engine, landing / "accounts.csv", catalog)
    dates = [CFG.start + dt.timedelta(days=i) for i in range(CFG.days)]
    from pipelines.ingest import quality

    quality._gate(load_catalog(CATALOG_PATH), 3.0, False)  # as an earlier command of this process would
    run_day(settings, dates)
    close_month(settings, MONTH, root)
    args = cli_args(settings)
    assert main([*args, "invoices", "draft", "--month", MONTH]) == 0
    assert main([*args, "invoices", "finalize", "--month", MONTH]) == 0
    exports = root / "exports"
    export = ["invoices", "export", "--month", MONTH, "--out", str(exports), "--format", "csv,html"]
    assert main([*args, *export]) == 0
    return {
        "root": root,
        "catalog": catalog,
        "events": generated.events,
        "engine": engine,
        "args": args,
        "exports": exports,
    }


def test_the_generator_draws_a_tier_only_on_days_it_has_a_price(month):
    events = month["events"].to_pylist()
    turbo_days = {e["event_time"].date() for e in events if e["speed_tier"] == "turbo"}
    assert {e["speed_tier"] for e in events} == {"flex", "standard", "priority", "turbo"}
    assert turbo_days and min(turbo_days) >= TURBO_FROM
    flex_models = {e["model"] for e in events if e["speed_tier"] == "flex"}
    assert flex_models == {"gpt-5.6-sol"}  # the only model with a flex price


def test_the_gate_of_a_catalog_with_other_tiers_is_its_own(month):
    """A process keeps one data-quality suite per catalog shape: one built for the default tiers (by an
    earlier command in the same process) never judges events of a catalog that added tiers."""
    from pipelines.ingest import quality

    default = quality._gate(load_catalog(CATALOG_PATH), 3.0, False)
    edited = quality._gate(month["catalog"], 3.0, False)
    accepted = {
        g: next(c for c in gate.checks if c.name == "speed_tier_accepted").kwargs["value_set"]
        for g, gate in (("default", default), ("edited", edited))
    }
    assert accepted == {
        "default": ["standard", "priority", "ultrafast"],
        "edited": ["flex", "standard", "priority", "ultrafast", "turbo"],
    }


def test_new_tiers_pass_the_gate_and_are_aggregated_and_metered(month):
    engine = month["engine"]
    with engine.connect() as conn:
        checks = conn.execute(
            select(DqResult.check_name, DqResult.success).where(DqResult.check_name == "speed_tier_accepted")
        ).all()
        used = dict(
            conn.execute(
                select(UsageDaily.speed_tier, func.sum(UsageDaily.requests)).group_by(UsageDaily.speed_tier)
            ).all()
        )
        billable = set(conn.execute(select(BillableUsage.speed_tier).distinct()).scalars())
    assert checks and all(ok for _, ok in checks)
    sent = {}
    for e in month["events"].to_pylist():
        sent.setdefault(e["speed_tier"], set()).add(e["event_id"])
    assert {t: used.get(t, 0) for t in ("flex", "turbo")} == {t: len(sent[t]) for t in ("flex", "turbo")}
    assert {"flex", "turbo"} <= billable


def test_new_tiers_are_priced_at_their_own_rates_and_exported(month):
    catalog, engine = month["catalog"], month["engine"]
    rates = {
        (p.tier, kind): p.per_million(kind)
        for p in catalog.prices
        if p.model == "gpt-5.6-sol" and p.tier in ("flex", "turbo")
        for kind in ("input", "cached_input", "output")
    }
    with engine.connect() as conn:
        lines = conn.execute(
            select(InvoiceLine.speed_tier, InvoiceLine.token_kind, InvoiceLine.unit_price)
            .where(InvoiceLine.line_type == "overage_usage", InvoiceLine.speed_tier.in_(["flex", "turbo"]))
            .distinct()
        ).all()
    assert {t for t, _, _ in lines} == {"flex", "turbo"}
    for tier, kind, price in lines:
        assert Decimal(str(price)) == rates[(tier, kind)], (tier, kind, price)
    with open(month["exports"] / "invoice_lines.csv", newline="") as f:
        exported = {r["speed_tier"] for r in csv.DictReader(f)}
    assert {"flex", "turbo"} <= exported


def test_a_customer_document_shows_the_new_tiers_by_their_labels(month, tmp_path):
    with open(month["exports"] / "invoice_lines.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    both = [
        n
        for n in {r["invoice_number"] for r in rows}
        if {"flex", "turbo"} <= {r["speed_tier"] for r in rows if r["invoice_number"] == n}
    ]
    assert both, "no document bills both new tiers"
    page = month["exports"] / "html" / f"{sorted(both)[0]}.html"
    text = measure(page, tmp_path, "document.body.innerText")
    assert "gpt-5.6-sol \u00b7 Flex (best effort)" in text
    assert "gpt-5.6-sol \u00b7 Turbo" in text
    assert "\u00b7 flex" not in text and "\u00b7 turbo" not in text  # the label, never the id


def test_the_preview_offers_the_new_tiers_and_prints_their_labels(month, capsys):
    out = month["root"] / "preview"
    args = month["args"]
    base = [*args, "retirement", "preview", "--model", "gpt-5.3-codex-spark", "--month", MONTH]
    assert main([*base, "--tier", "flex", "--out", str(out)]) == 0
    assert "| Flex (best effort) |" in (out / "preview.md").read_text(encoding="utf-8")
    capsys.readouterr()
    assert main([*base, "--tier", "scale", "--out", str(month["root"] / "none")]) != 0
    err = capsys.readouterr().err
    assert "flex, standard, priority, ultrafast, turbo, keep, all" in " ".join(err.split())
