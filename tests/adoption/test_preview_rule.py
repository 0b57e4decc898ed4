"""The migration preview on a scenario computed by hand: a model with its own pool that spills into
the main pool, a plan fee, a pay-as-you-go account, and a successor priced per tier.

Catalog: F (successor S) and S. Plan ``pro``: 30.00 a month; pool ``fast`` (F only, 1,000,000 tokens a
month, drawn first), pool ``main`` ("*", 2,000,000 a month). Prices per 1M: F standard input 1.00,
output 4.00; S standard input 2.00, output 8.00; S priority input 4.00, output 16.00; no S ultrafast.

Account A (pro, UTC), June 2026:
  e1 Jun 3  F standard  800,000 input    now: fast 800k                   S: main 800k
  e2 Jun 5  S standard  1,500,000 input  now: main 1.5M                   S: main 1.2M, over 300k input
  e3 Jun 10 F standard  600,000 output   now: fast 200k, main 400k (spill) S: over 600k output
  e4 Jun 12 S standard  300,000 output   now: main 100k, over 200k output  S: over 300k output
  now: 30.00 + 200k x 8.00 = 31.60 (main pool out on Jun 12)
  on S standard: 30.00 + 300k x 2.00 + 900k x 8.00 = 30.00 + 0.60 + 7.20 = 37.80 (main out on Jun 5)
  on S priority: 30.00 + 0.60 (e2) + 600k x 16.00 (e3) + 300k x 8.00 (e4) = 42.60
Account B (no plan): e5 Jun 4 F standard 100,000 input: now 0.10; S standard 0.20; S priority 0.40.
Account C uses only S: not affected, not in the preview.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from billing.invoices import BILLABLE_SCHEMA
from pipelines.adoption.preview import ALL, KEEP, compute, resolve
from pipelines.errors import UsageBillingError
from schemas.catalog import parse_catalog
from schemas.events import LAKE_SCHEMA

D = dt.date


def _price(model: str, tier: str, inp: str, out: str) -> dict:
    return {
        "model": model,
        "tier": tier,
        "effective_from": D(2026, 1, 1),
        "input": inp,
        "cached_input": "0.10",
        "output": out,
    }


CATALOG = parse_catalog(
    {
        "currency": "USD",
        "models": [
            {"id": "f", "launched": D(2026, 1, 1), "successor": "s"},
            {"id": "s", "launched": D(2026, 1, 1)},
        ],
        "prices": [
            _price("f", "standard", "1.00", "4.00"),
            _price("s", "standard", "2.00", "8.00"),
            _price("s", "priority", "4.00", "16.00"),
        ],
        "plans": [
            {
                "id": "pro",
                "monthly_fee": "30.00",
                "pools": [
                    {
                        "id": "fast",
                        "models": ["f"],
                        "allowance_tokens": 1_000_000,
                        "period": "month",
                        "priority": 1,
                    },
                    {
                        "id": "main",
                        "models": ["*"],
                        "allowance_tokens": 2_000_000,
                        "period": "month",
                        "priority": 2,
                    },
                ],
            }
        ],
    }
)
ACCOUNTS = pa.table(
    {
        "account_id": ["a", "c"],
        "active_from": pa.array([D(2026, 1, 1), D(2026, 1, 1)], pa.date32()),
        "active_until": pa.nulls(2, pa.date32()),
        "plan": ["pro", "pro"],
        "timezone": ["UTC", "UTC"],
    }
)
EVENTS = [  # id, day, hour, account, model, input, output
    ("e1", 3, 9, "a", "f", 800_000, 0),
    ("e2", 5, 9, "a", "s", 1_500_000, 0),
    ("e3", 10, 9, "a", "f", 0, 600_000),
    ("e4", 12, 9, "a", "s", 0, 300_000),
    ("e5", 4, 9, "b", "f", 100_000, 0),
    ("c1", 4, 10, "c", "s", 50_000, 10_000),
]


@pytest.fixture(scope="module")
def lake_root(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("preview-lake")
    by_day: dict[int, list] = {}
    for event in EVENTS:
        by_day.setdefault(event[1], []).append(event)
    for day, events in by_day.items():
        rows = [
            {
                "event_id": i,
                "event_time": dt.datetime(2026, 6, day, hour, tzinfo=dt.UTC),
                "account_id": a,
                "model": m,
                "speed_tier": "standard",
                "input_tokens": inp,
                "cached_input_tokens": 0,
                "output_tokens": out,
                "status": "ok",
            }
            for i, _, hour, a, m, inp, out in events
        ]
        columns = ["event_id", "event_time", "account_id", "model", "speed_tier"]
        columns += ["input_tokens", "cached_input_tokens", "output_tokens", "status"]
        schema = pa.schema([LAKE_SCHEMA.field(c) for c in columns])
        folder = Path(root) / "events" / f"date=2026-06-{day:02d}"
        folder.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), folder / "shard-0000.parquet")
    return str(root)


def _run(lake_root: str, tier: str, successor: str | None = None):  # type: ignore[no-untyped-def]
    request = resolve(CATALOG, "f", "2026-06", successor, tier)
    return compute(CATALOG, lake_root, ACCOUNTS, request, tier)


def _by(result, tier: str) -> dict:  # type: ignore[no-untyped-def]
    return {r["account_id"]: r for r in result.rows if r["tier"] == tier}


def test_the_hand_computed_scenario_per_tier(lake_root):
    result = _run(lake_root, ALL)
    assert list(result.tiers) == ["standard", "priority"]  # no ultrafast price: not offered
    standard, priority = _by(result, "standard"), _by(result, "priority")
    assert sorted(standard) == ["a", "b"]  # C never used F
    a, b = standard["a"], standard["b"]
    assert (a["current_total"], a["projected_total"], a["delta"]) == (
        Decimal("31.60"),
        Decimal("37.80"),
        Decimal("6.20"),
    )
    assert (b["current_total"], b["projected_total"], b["delta"]) == (
        Decimal("0.10"),
        Decimal("0.20"),
        Decimal("0.10"),
    )
    assert priority["a"]["projected_total"] == Decimal("42.60")
    assert priority["b"]["projected_total"] == Decimal("0.40")
    assert (a["moved_tokens"], b["moved_tokens"]) == (1_400_000, 100_000)
    assert (a["current_overage_tokens"], a["projected_overage_tokens"]) == (200_000, 1_200_000)
    assert (a["current_main_pool_exhausted"], a["projected_main_pool_exhausted"]) == (
        "2026-06-12",
        "2026-06-05",
    )
    s = result.tiers["standard"]
    assert s["accounts"] == 2 and s["accounts_paying_more"] == 2
    assert s["delta"] == Decimal("6.30") and s["median_delta"] == Decimal("0.10")  # the lower middle
    assert s["current_total"] == Decimal("31.70") and s["projected_total"] == Decimal("38.00")
    assert result.tiers["priority"]["delta"] == Decimal("11.30")


def test_the_identity_changes_no_bill(lake_root):
    result = _run(lake_root, KEEP, successor="f")
    assert result.rows and all(r["delta"] == 0 for r in result.rows)
    assert all(r["current_overage_tokens"] == r["projected_overage_tokens"] for r in result.rows)
    assert (
        result.tiers == {"keep": result.tiers["keep"]} and result.tiers["keep"]["accounts_paying_more"] == 0
    )


def test_a_tier_without_a_price_is_named_as_drafting_names_it(lake_root):
    with pytest.raises(UsageBillingError) as exc:
        _run(lake_root, "ultrafast")
    assert str(exc.value) == (
        "cannot preview 2026-06: no price for model s, tier ultrafast, token kind input on 2026-06-03"
    )


@pytest.mark.parametrize(
    ("model", "successor", "tier", "says"),
    [
        ("X", None, ALL, "model 'X' is not in the catalog"),
        ("s", None, ALL, "model s has no successor in the catalog"),
        ("f", "Z", ALL, "successor 'Z' is not a model in the catalog"),
        ("f", None, "fastest", "--tier must be one of"),
    ],
)
def test_mistakes_are_one_line(model, successor, tier, says):
    with pytest.raises(UsageBillingError, match=says):
        resolve(CATALOG, model, "2026-06", successor, tier)


def test_a_month_without_the_model_is_one_line(lake_root):
    request = resolve(CATALOG, "f", "2026-07", None, ALL)
    with pytest.raises(UsageBillingError, match="no account used f on a local day of 2026-07"):
        compute(CATALOG, lake_root, ACCOUNTS, request, ALL)


def test_transition_credits_make_the_move_free_for_those_who_would_pay_more(lake_root, tmp_path):
    from billing.credits import GRANT_SCHEMA
    from billing.invoices import build_lines
    from pipelines.adoption.preview_files import transition_grants, write_credits

    result = _run(lake_root, ALL)
    # the largest increase over the previewed tiers (priority: a 42.60 - 31.60, b 0.40 - 0.10), x 3
    grants = {g["account_id"]: g for g in transition_grants(result, 3)}
    assert sorted(grants) == ["a", "b"]
    a = grants["a"]
    assert (a["amount"], grants["b"]["amount"]) == ("33.00", "0.90")
    assert (a["kind"], a["models"], a["effective_from"], a["expires"]) == (
        "promotional",
        "s",
        "2026-07-01",  # the first day after the month
        "2026-10-01",  # three months later: eligible for July, August and September
    )
    assert write_credits(result, tmp_path / "credits.csv", 3) == (2, Decimal("33.90"))
    assert transition_grants(_run(lake_root, KEEP, successor="f"), 3) == []  # nobody pays more
    # July, with June's use of f on s at standard: the grant covers the successor's charges
    row = {"account_id": "a", "model": "s", "speed_tier": "standard", "price_from": D(2026, 1, 1)}
    row |= {"rate_day": D(2026, 7, 5), "last_rate_day": D(2026, 7, 12), "included_tokens": 0}
    billable = pa.Table.from_pylist(
        [
            {**row, "token_kind": kind, "overage_tokens": n}
            for kind, n in (("input", 300_000), ("output", 900_000))
        ],
        schema=BILLABLE_SCHEMA,
    )
    given = {k: a[k] for k in ("grant_id", "account_id", "kind", "reason", "models")}
    given |= {"effective_from": D(2026, 7, 1), "expires": D(2026, 10, 1), "priority": 0}
    grant = pa.Table.from_pylist([{**given, "remaining": Decimal("33.00")}], schema=GRANT_SCHEMA)
    plans = ACCOUNTS.select(["account_id", "plan", "active_from", "active_until"]).slice(0, 1)
    lines = build_lines(billable, plans, CATALOG, "2026-07", grant).to_pylist()
    credit = [r for r in lines if r["line_type"] == "credit"]
    assert [(r["grant_id"], r["amount"]) for r in credit] == [(a["grant_id"], Decimal("-7.80"))]
    assert sum(r["amount"] for r in lines) == Decimal("30.00")  # the plan fee: the move cost nothing
