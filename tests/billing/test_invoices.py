"""Rate cards and invoice lines, pure: prices by tier and day, rounding, proration, adjustments."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing.invoices import (
    BILLABLE_SCHEMA,
    LINE_SCHEMA,
    PLAN_SCHEMA,
    build_lines,
    difference,
    plan_fee_lines,
    plan_periods,
    totals,
)
from billing.pricing import (
    MissingPriceError,
    amounts,
    applied_prices,
    cents,
    price_in_force,
    rate_from,
    unit_prices,
)
from schemas.catalog import parse_catalog

CATALOG = parse_catalog(
    {
        "currency": "USD",
        "models": [
            {"id": "m", "launched": dt.date(2026, 1, 1)},
            {"id": "n", "launched": dt.date(2026, 1, 1)},
        ],
        "prices": [
            {
                "model": "m",
                "tier": "standard",
                "effective_from": dt.date(2026, 1, 1),
                "input": "1.25",
                "cached_input": "0.125",
                "output": "10.00",
            },
            {
                "model": "m",
                "tier": "standard",
                "effective_from": dt.date(2026, 3, 15),
                "input": "1.00",
                "cached_input": "0.10",
                "output": "8.00",
            },
            {
                "model": "m",
                "tier": "ultrafast",
                "effective_from": dt.date(2026, 3, 10),
                "input": "6.00",
                "cached_input": "0.60",
                "output": "48.00",
            },
            {
                "model": "n",
                "tier": "standard",
                "effective_from": dt.date(2026, 1, 1),
                "input": "0.333333",
                "cached_input": "0.01",
                "output": "0.000001",
            },
        ],
        "plans": [
            {"id": "pro", "monthly_fee": "200.00", "pools": []},
            {"id": "plus", "monthly_fee": "20.00", "pools": []},
        ],
    }
)

BILLABLE, PLANS = BILLABLE_SCHEMA, PLAN_SCHEMA


def _days(*days: str) -> np.ndarray:
    return np.array(days, dtype="datetime64[D]")


def test_the_price_in_force_is_the_newest_for_exactly_that_tier():
    model = pa.array(["m", "m", "m", "m", "m", "n"])
    tier = pa.array(["standard", "standard", "standard", "ultrafast", "ultrafast", "priority"])
    out = rate_from(
        CATALOG,
        model,
        tier,
        _days("2026-03-14", "2026-03-15", "2025-12-31", "2026-03-09", "2026-03-10", "2026-03-10"),
    )
    expected = _days("2026-01-01", "2026-03-15", "NaT", "NaT", "2026-03-10", "NaT")
    assert np.array_equal(out, expected, equal_nan=True)


def test_a_missing_price_names_model_tier_kind_and_day_and_never_falls_back_to_another_tier():
    with pytest.raises(MissingPriceError, match=r"model m, tier ultrafast, token kind output on 2026-03-09"):
        unit_prices(
            CATALOG,
            pa.array(["m"]),
            pa.array(["ultrafast"]),
            pa.array(["output"]),
            pa.array([dt.date(2026, 3, 9)], pa.date32()),
        )
    with pytest.raises(MissingPriceError, match="tier priority"):
        unit_prices(
            CATALOG,
            pa.array(["n"]),
            pa.array(["priority"]),
            pa.array(["input"]),
            pa.array([dt.date(2026, 3, 9)], pa.date32()),
        )


def _dates(*days: str) -> pa.Array:
    return pa.array([dt.date.fromisoformat(d) if d else None for d in days], pa.date32())


def test_invoicing_charges_the_price_metering_applied_and_refuses_when_the_catalog_changed_since():
    one = pa.array(["m"])
    standard, kind = pa.array(["standard"]), pa.array(["input"])
    # metered before and after the standard price change of Mar 15: each row keeps its own price
    price = applied_prices(
        CATALOG,
        pa.array(["m", "m"]),
        pa.array(["standard"] * 2),
        pa.array(["input"] * 2),
        _dates("2026-01-01", "2026-03-15"),
        _dates("2026-03-01", "2026-03-20"),
        _dates("2026-03-14", "2026-03-31"),
    )
    assert price.to_pylist() == [Decimal("1.25"), Decimal("1")]
    # a price that starts inside the days a row was metered for: the catalog changed after metering
    with pytest.raises(
        MissingPriceError, match=r"changed after metering: metering applied the price effective"
    ):
        applied_prices(
            CATALOG, one, standard, kind, _dates("2026-01-01"), _dates("2026-03-01"), _dates("2026-03-20")
        )
    # metered with no price in force, but the catalog has one now
    with pytest.raises(MissingPriceError, match="metering applied no price"):
        applied_prices(CATALOG, one, standard, kind, _dates(None), _dates("2026-03-01"))
    # the applied price is gone and none is in force: named as unit_prices names a gap
    with pytest.raises(
        MissingPriceError, match=r"no price for model m, tier ultrafast, token kind output on 2026-03-09"
    ):
        applied_prices(
            CATALOG,
            one,
            pa.array(["ultrafast"]),
            pa.array(["output"]),
            _dates("2026-03-01"),
            _dates("2026-03-09"),
        )


def test_amounts_round_half_up_to_cents_exactly():
    q = pa.array([400, 399, 1_000_000, 3, 10**15], pa.int64())
    p = pa.array(
        [Decimal("12.5"), Decimal("12.5"), Decimal("0.333333"), Decimal("0.000001"), Decimal("48")],
        pa.decimal128(18, 6),
    )
    assert amounts(q, p).to_pylist() == [
        Decimal("0.01"),  # 0.005 -> 0.01
        Decimal("0.00"),  # 0.0049875 -> 0.00
        Decimal("0.33"),
        Decimal("0.00"),
        Decimal("48000000000.00"),
    ]
    assert cents(Decimal("0.125")) == Decimal("0.13") and cents(Decimal("2.675")) == Decimal("2.68")


def test_plan_fee_is_prorated_by_active_days_and_rounded_half_up():
    plans = pa.Table.from_pylist(
        [
            {"account_id": "a", "plan": "pro", "active_from": dt.date(2026, 1, 1), "active_until": None},
            {"account_id": "b", "plan": "pro", "active_from": dt.date(2026, 3, 15), "active_until": None},
            {
                "account_id": "c",
                "plan": "plus",
                "active_from": dt.date(2026, 2, 1),
                "active_until": dt.date(2026, 3, 10),
            },
            {"account_id": "c", "plan": "pro", "active_from": dt.date(2026, 3, 11), "active_until": None},
            {"account_id": "d", "plan": None, "active_from": dt.date(2026, 1, 1), "active_until": None},
        ],
        schema=PLANS,
    )
    lines = plan_fee_lines(plans, CATALOG, "2026-03").sort_by(
        [("account_id", "ascending"), ("quantity", "ascending")]
    )
    got = list(
        zip(
            lines["account_id"].to_pylist(),
            lines["quantity"].to_pylist(),
            lines["amount"].to_pylist(),
            strict=True,
        )
    )
    assert got == [
        ("a", 31, Decimal("200.00")),
        ("b", 17, Decimal("109.68")),  # 200 x 17 / 31 = 109.677...
        ("c", 10, Decimal("6.45")),  # 20 x 10 / 31 = 6.4516...
        ("c", 21, Decimal("135.48")),  # 200 x 21 / 31 = 135.4838...
    ]


def test_a_fee_change_splits_the_plan_period_and_each_piece_is_billed_at_its_fee():
    dated = parse_catalog(
        {
            **CATALOG.model_dump(mode="python", exclude={"plans"}),
            "plans": [
                {
                    "id": "plus",
                    "monthly_fee": "20.00",
                    "fees": [
                        {"effective_from": dt.date(2026, 3, 15), "monthly_fee": "25.00"},
                        {"effective_from": dt.date(2026, 4, 1), "monthly_fee": "30.00"},
                    ],
                },
                {"id": "pro", "monthly_fee": "200.00"},
            ],
        }
    )
    plans = pa.Table.from_pylist(
        [
            {"account_id": "a", "plan": "plus", "active_from": dt.date(2026, 1, 1), "active_until": None},
            {"account_id": "b", "plan": "plus", "active_from": dt.date(2026, 3, 20), "active_until": None},
            {"account_id": "c", "plan": "pro", "active_from": dt.date(2026, 1, 1), "active_until": None},
        ],
        schema=PLANS,
    )
    lines = plan_fee_lines(plans, dated, "2026-03").sort_by(
        [("account_id", "ascending"), ("quantity", "descending")]
    )
    got = [
        (a, q, p, m)
        for a, q, p, m in zip(
            *(lines[c].to_pylist() for c in ("account_id", "quantity", "unit_price", "amount")), strict=True
        )
    ]
    assert got == [
        ("a", 17, Decimal("25.00"), Decimal("13.71")),  # 25 x 17 / 31 = 13.709...
        ("a", 14, Decimal("20.00"), Decimal("9.03")),  # 20 x 14 / 31 = 9.032...
        ("b", 12, Decimal("25.00"), Decimal("9.68")),  # from its start, at the fee then in force
        ("c", 31, Decimal("200.00"), Decimal("200.00")),  # a plan without fee rows: as ever
    ]
    periods = plan_periods(plans, ["a"], dated, "2026-03").to_pylist()
    assert [(p["active_from"].day, p["active_until"].day, p["monthly_fee"]) for p in periods] == [
        (1, 14, Decimal("20.00")),
        (15, 31, Decimal("25.00")),
    ]
    april = plan_fee_lines(plans, dated, "2026-04")
    assert set(april["unit_price"].to_pylist()) == {Decimal("30.00"), Decimal("200.00")}
    with pytest.raises(ValueError, match="fees must be listed by effective_from"):
        parse_catalog(
            {
                **CATALOG.model_dump(mode="python", exclude={"plans"}),
                "plans": [
                    {
                        "id": "plus",
                        "monthly_fee": "20.00",
                        "fees": [
                            {"effective_from": dt.date(2026, 4, 1), "monthly_fee": "25.00"},
                            {"effective_from": dt.date(2026, 3, 1), "monthly_fee": "30.00"},
                        ],
                    }
                ],
            }
        )


def _billable(rows: list[tuple]) -> pa.Table:
    """(account, model, tier, kind, rate_day, included, overage) rows, with the price the meter applies
    on rate_day as their price_from."""
    out = []
    for account, model, tier, kind, day, included, overage in rows:
        price = price_in_force(CATALOG, model, tier, day)
        start = price.effective_from if price else None
        out.append((account, model, tier, kind, start, day, day, included, overage))
    return pa.Table.from_pylist([dict(zip(BILLABLE.names, r, strict=True)) for r in out], schema=BILLABLE)


def test_overage_lines_split_by_unit_price_and_total_is_the_sum_of_rounded_lines():
    d1, d2 = dt.date(2026, 3, 14), dt.date(2026, 3, 15)  # the standard price drops on the 15th
    billable = _billable(
        [
            ("a", "m", "standard", "input", d1, 100, 1_000_001),
            ("a", "m", "standard", "input", d2, 0, 2_000_000),
            ("a", "m", "ultrafast", "output", d2, 5, 1_234_567),
            ("a", "n", "standard", "input", d2, 7, 0),
        ]
    )
    plans = pa.Table.from_pylist(
        [{"account_id": "a", "plan": "plus", "active_from": dt.date(2026, 1, 1), "active_until": None}],
        schema=PLANS,
    )
    lines = build_lines(billable, plans, CATALOG, "2026-03")
    rows = [
        (
            r["line_no"],
            r["line_type"],
            r["model"],
            r["speed_tier"],
            r["token_kind"],
            r["quantity"],
            r["unit_price"],
            r["amount"],
        )
        for r in lines.to_pylist()
    ]
    assert rows == [
        (1, "plan_fee", None, None, None, 31, Decimal("20"), Decimal("20.00")),
        (2, "overage_usage", "m", "standard", "input", 2_000_000, Decimal("1"), Decimal("2.00")),
        (3, "overage_usage", "m", "standard", "input", 1_000_001, Decimal("1.25"), Decimal("1.25")),
        (4, "overage_usage", "m", "ultrafast", "output", 1_234_567, Decimal("48"), Decimal("59.26")),
        (5, "included_usage", "m", "standard", "input", 100, Decimal("0"), Decimal("0")),
        (6, "included_usage", "m", "ultrafast", "output", 5, Decimal("0"), Decimal("0")),
        (7, "included_usage", "n", "standard", "input", 7, Decimal("0"), Decimal("0")),
    ]
    t = totals(lines).to_pylist()
    assert t == [{"account_id": "a", "subtotal": Decimal("82.51"), "total": Decimal("82.51")}]


line_rows = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(["overage_usage", "included_usage", "plan_fee"]),
        st.sampled_from(["m", "n"]),
        st.sampled_from(["input", "output"]),
        st.integers(0, 10**9),
        st.sampled_from([Decimal("1.25"), Decimal("0.333333"), Decimal("48")]),
    ),
    max_size=12,
)


def _lines(rows: list[tuple]) -> pa.Table:
    out = []
    for account, line_type, model, kind, quantity, price in rows:
        fee = line_type == "plan_fee"
        out.append(
            {
                "account_id": account,
                "line_type": line_type,
                "adjusted_type": None,
                "model": None if fee else model,
                "speed_tier": None if fee else "standard",
                "token_kind": None if fee else kind,
                "description": line_type,
                "quantity": quantity,
                "unit_price": price,
                "amount": cents(quantity * price / 10**6) if line_type != "included_usage" else Decimal(0),
            }
        )
    return pa.Table.from_pylist(out, schema=LINE_SCHEMA)


def _net(*tables: pa.Table) -> dict:
    out: dict = {}
    for t in tables:
        for r in t.to_pylist():
            key = (
                r["account_id"],
                r["adjusted_type"] or r["line_type"],
                r["model"],
                r["token_kind"],
                r["unit_price"],
            )
            q, a = out.get(key, (0, Decimal(0)))
            out[key] = (q + r["quantity"], a + r["amount"])
    return {k: v for k, v in out.items() if v != (0, Decimal(0))}


@settings(max_examples=150, deadline=None)
@given(truth=line_rows, billed=line_rows)
def test_billed_plus_adjustments_equals_the_recomputed_truth(truth, billed):
    truth_t, billed_t = _lines(truth), _lines(billed)
    adjustment = difference(truth_t, billed_t)
    assert set(adjustment["line_type"].to_pylist()) <= {"adjustment"}
    assert _net(billed_t, adjustment) == _net(truth_t)
    assert all(
        q != 0 or a != 0
        for q, a in zip(adjustment["quantity"].to_pylist(), adjustment["amount"].to_pylist(), strict=True)
    )
    # each adjustment line is a whole line, billed again or reversed: its quantity and unit price
    # still give its amount (these lines' unit size is 1M), which a difference of rounded amounts
    # would not
    for r in adjustment.to_pylist():
        rate = Decimal(0) if r["adjusted_type"] == "included_usage" else r["unit_price"]
        assert r["amount"] == cents(r["quantity"] * rate / 10**6), r


def test_nothing_changed_means_no_adjustment_lines():
    lines = _lines(
        [
            ("a", "overage_usage", "m", "input", 5_000_000, Decimal("1.25")),
            ("a", "plan_fee", "m", "input", 31, Decimal("20")),
        ]
    )
    assert difference(lines, lines).num_rows == 0


def _multiset(table: pa.Table) -> dict:
    out: dict = defaultdict(int)
    for r in table.to_pylist():
        key = (r["account_id"], r["adjusted_type"] or r["line_type"], r["model"], r["token_kind"])
        out[(*key, r["unit_price"], r["quantity"], r["amount"])] += 1
    return {k: v for k, v in out.items() if v}


@settings(max_examples=100, deadline=None)
@given(first=line_rows, second=line_rows, third=line_rows)
def test_a_second_adjustment_reverses_only_what_is_still_billed(first, second, third):
    """Invoice ``first``; the truth becomes ``second`` (adjustment 1), then ``third`` (adjustment 2).
    Adjustment 2 is exactly what turns ``second`` into ``third``: the lines adjustment 1 reversed are
    not reversed again, and the lines it billed are reversed only if they changed again."""
    invoice, truth2, truth3 = _lines(first), _lines(second), _lines(third)
    adjustment1 = difference(truth2, invoice)
    adjustment2 = difference(truth3, pa.concat_tables([invoice, adjustment1.drop_columns(["line_no"])]))
    assert _net(invoice, adjustment1, adjustment2) == _net(truth3)
    assert _multiset(adjustment2.drop_columns(["line_no"])) == _multiset(
        difference(truth3, truth2).drop_columns(["line_no"])
    )


def test_a_line_against_its_types_sign_is_never_billed():
    """The line-type registry's sign: a charge (plan fee, usage) never has a negative amount."""
    from billing.invoices import LINE_SCHEMA, check_signs

    def line(line_type: str, amount: str) -> dict:
        return dict.fromkeys(LINE_SCHEMA.names) | {
            "account_id": "a",
            "line_type": line_type,
            "description": "x",
            "quantity": 1,
            "unit_price": Decimal("1"),
            "amount": Decimal(amount),
        }

    fine = pa.Table.from_pylist([line("plan_fee", "1.00"), line("overage_usage", "0.00")], schema=LINE_SCHEMA)
    check_signs(fine)
    wrong = pa.Table.from_pylist([line("plan_fee", "1.00"), line("plan_fee", "-0.01")], schema=LINE_SCHEMA)
    with pytest.raises(ValueError, match=r"a plan_fee line of a has amount -0\.01"):
        check_signs(wrong)
