"""billing.effectiveness against the reference written from the contract (tests/reference_effectiveness):
the attribution rule and its ties, the request window, nearest-rank percentiles, the rounding and the
cost rule, on hand-made cases and on random tasks."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from billing import effectiveness as eff
from billing.effectiveness_groups import group_metrics, wilson
from billing.pricing import MissingPriceError
from schemas.events import TIMESTAMP
from tests import reference_effectiveness as ref

UTC = dt.UTC
DAY = dt.datetime(2026, 8, 18, 12, tzinfo=UTC)  # a Tuesday: week of 2026-08-17, with ultrafast on sale
PAIRS = [
    ("gpt-5.6-sol", "standard"),
    ("gpt-5.6-sol", "priority"),
    ("gpt-5.6-sol", "ultrafast"),
    ("gpt-5.3-codex-spark", "standard"),
    ("gpt-5.3-codex-spark", "priority"),
    ("gpt-5.5-mini", "standard"),
]
REQUEST_SCHEMA = pa.schema(
    [
        ("account_id", pa.string()),
        ("task_id", pa.string()),
        ("event_time", TIMESTAMP),
        ("model", pa.string()),
        ("speed_tier", pa.string()),
        ("input_tokens", pa.int64()),
        ("cached_input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("duration_ms", pa.int64()),
    ]
)
OUTCOME_SCHEMA = pa.schema(
    [
        ("account_id", pa.string()),
        ("task_id", pa.string()),
        ("task_class", pa.string()),
        ("started_at", TIMESTAMP),
        ("completed_at", TIMESTAMP),
        ("outcome", pa.string()),
        ("rework", pa.bool_()),
        ("rework_ms", pa.int64()),
    ]
)


def req(task: str, model: str, tier: str, out: int, at: dt.datetime = DAY, **kw) -> dict:  # type: ignore[no-untyped-def]
    base = {
        "account_id": kw.pop("account_id", "a1"),
        "task_id": task,
        "event_time": at,
        "model": model,
        "speed_tier": tier,
        "input_tokens": 1000,
        "cached_input_tokens": 100,
        "output_tokens": out,
        "duration_ms": 500,
    }
    base.update(kw)
    return base


def outcome(task: str, **kw) -> dict:  # type: ignore[no-untyped-def]
    base = {
        "account_id": "a1",
        "task_id": task,
        "task_class": "multi_file",
        "started_at": DAY - dt.timedelta(minutes=5),
        "completed_at": DAY + dt.timedelta(minutes=5),
        "outcome": "accepted",
        "rework": False,
        "rework_ms": 0,
    }
    base.update(kw)
    return base


def compute(outcomes: list[dict], requests: list[dict], catalog, per_hour=Decimal("90")):  # type: ignore[no-untyped-def]
    o = pa.Table.from_pylist(outcomes, schema=OUTCOME_SCHEMA)
    r = pa.Table.from_pylist(requests, schema=REQUEST_SCHEMA)
    tasks = eff.tasks(o, eff.task_requests(o, r), catalog)
    return tasks, group_metrics(tasks, per_hour)


def _keyed(groups: list[dict]) -> dict[tuple, dict]:
    return {tuple(g[k] for k in eff.GROUP_KEYS): g for g in groups}


def test_attribution_takes_most_output_then_the_lower_model_then_the_slower_tier(catalog):
    requests = [
        req("t1", "gpt-5.6-sol", "ultrafast", 300),
        req("t1", "gpt-5.6-sol", "ultrafast", 200),  # 500 in all: beats 400 below
        req("t1", "gpt-5.3-codex-spark", "standard", 400),
        req("t2", "gpt-5.6-sol", "standard", 100),  # a tie: the lower model id wins
        req("t2", "gpt-5.3-codex-spark", "priority", 100),
        req("t3", "gpt-5.6-sol", "ultrafast", 100),  # a tie within one model: the slower tier
        req("t3", "gpt-5.6-sol", "priority", 100),
        req("t4", "gpt-5.5-mini", "standard", 50),  # one (model, tier): not mixed
    ]
    tasks, _ = compute([outcome(t) for t in ("t1", "t2", "t3", "t4")], requests, catalog)
    got = {r["task_id"]: (r["model"], r["speed_tier"], r["mixed"]) for r in tasks.to_pylist()}
    assert got == {
        "t1": ("gpt-5.6-sol", "ultrafast", True),
        "t2": ("gpt-5.3-codex-spark", "priority", True),
        "t3": ("gpt-5.6-sol", "priority", True),
        "t4": ("gpt-5.5-mini", "standard", False),
    }


def test_the_slower_tier_is_the_catalogs_order_not_a_list_in_code(catalog):
    """Reversed tiers in the catalog reverse the tie-break: "slower" is the catalog's order. A tier the
    catalog adds (``flex``, listed first) wins a tie against every other."""
    from schemas.catalog import Tier

    prices = [*catalog.prices, catalog.prices[0].model_copy(update={"model": "gpt-5.6-sol", "tier": "flex"})]
    tiers = [Tier(id="flex", label="Flex"), *reversed(catalog.tiers)]
    edited = catalog.model_copy(update={"tiers": tiers, "prices": prices})
    requests = [
        req("t1", "gpt-5.6-sol", "ultrafast", 100),
        req("t1", "gpt-5.6-sol", "priority", 100),
        req("t2", "gpt-5.6-sol", "standard", 100),
        req("t2", "gpt-5.6-sol", "flex", 100),
    ]
    outcomes = [outcome("t1"), outcome("t2")]
    got = {r["task_id"]: r["speed_tier"] for r in compute(outcomes, requests, edited)[0].to_pylist()}
    assert got == {"t1": "ultrafast", "t2": "flex"}
    default = {
        r["task_id"]: r["speed_tier"] for r in compute(outcomes[:1], requests[:2], catalog)[0].to_pylist()
    }
    assert default == {"t1": "priority"}


def test_requests_outside_the_task_dates_or_of_another_account_are_not_joined(catalog):
    start = DAY - dt.timedelta(minutes=5)
    requests = [
        req("t1", "gpt-5.6-sol", "standard", 10, at=DAY),
        req("t1", "gpt-5.6-sol", "priority", 999, at=DAY - dt.timedelta(days=1)),  # the day before the start
        req("t1", "gpt-5.6-sol", "priority", 999, at=DAY + dt.timedelta(days=2)),  # after the completion date
        req("t1", "gpt-5.6-sol", "priority", 999, at=DAY, account_id="a2"),  # another account's t1
        req("t2", "gpt-5.6-sol", "priority", 5, at=DAY - dt.timedelta(days=3)),  # t2's only request, outside
        req(None, "gpt-5.6-sol", "priority", 5),  # no task
    ]
    outcomes = [outcome("t1", started_at=start), outcome("t2")]
    tasks, _ = compute(outcomes, requests, catalog)
    assert tasks["task_id"].to_pylist() == ["t1"]  # t2 is an orphan: no request in its dates
    row = tasks.to_pylist()[0]
    assert (row["speed_tier"], row["mixed"], row["model_ms"]) == ("standard", False, 500)
    expected, orphans = ref.task_rows(outcomes, requests, catalog)
    assert orphans == 1 and len(expected) == 1


def test_a_task_spanning_days_takes_the_requests_of_each_of_its_dates(catalog):
    requests = [req("t1", "gpt-5.6-sol", "standard", 10, at=DAY + dt.timedelta(days=d)) for d in range(3)]
    o = outcome("t1", completed_at=DAY + dt.timedelta(days=2, hours=1))
    tasks, _ = compute([o], requests, catalog)
    assert tasks["model_ms"].to_pylist() == [1500]


def test_percentiles_are_nearest_rank_and_means_half_up(catalog):
    # e2e of 10 tasks: 1..10 minutes and 0.5 ms on the first (a microsecond span: exact milliseconds)
    outcomes, requests = [], []
    for i in range(1, 11):
        extra = dt.timedelta(microseconds=500) if i == 1 else dt.timedelta(0)
        outcomes.append(outcome(f"t{i}", started_at=DAY, completed_at=DAY + dt.timedelta(minutes=i) + extra))
        requests.append(req(f"t{i}", "gpt-5.6-sol", "standard", 10, duration_ms=i))
    _, groups = compute(outcomes, requests, catalog)
    g = _keyed(groups)[(dt.date(2026, 8, 17), "gpt-5.6-sol", "standard", "*")]
    assert g["e2e_ms_p50"] == Decimal("300000")  # ceil(0.5 x 10) = 5th: 5 minutes
    assert g["e2e_ms_p90"] == Decimal("540000")  # ceil(0.9 x 10) = 9th
    assert g["e2e_ms_mean"] == 330000  # 3,300,000.5 / 10 = 330,000.05 -> 330,000
    assert g["model_ms_mean"] == 6  # 55 / 10 = 5.5 -> half up
    one = compute(outcomes[:1], requests[:1], catalog)[1][0]
    assert one["e2e_ms_p50"] == one["e2e_ms_p90"] == Decimal("60000.5")  # one task: its own value, exact
    assert one["e2e_ms_mean"] == 60001  # 60,000.5 -> half up


def test_costs_round_half_up_from_exact_sums_and_abandoned_tasks_count_in_the_cost(catalog):
    # gpt-5.6-sol standard from 2026-06-01; the reference computes the prices on its own.
    outcomes = [
        outcome("ok", rework=True, rework_ms=60_000),  # one minute of rework at 90/hour = 1.50
        outcome("gone", outcome="abandoned"),  # its tokens still count
        outcome("once"),
    ]
    requests = [req(t, "gpt-5.6-sol", "standard", 3333) for t in ("ok", "gone", "once")]
    _, groups = compute(outcomes, requests, catalog)
    g = _keyed(groups)[(dt.date(2026, 8, 17), "gpt-5.6-sol", "standard", "multi_file")]
    expected = ref.groups(ref.task_rows(outcomes, requests, catalog)[0], Decimal("90"))
    r = expected[(dt.date(2026, 8, 17), "gpt-5.6-sol", "standard", "multi_file")]
    assert (g["token_cost"], g["rework_cost"], g["cost_per_accepted_task"]) == (
        r["token_cost"],
        r["rework_cost"],
        r["cost_per_accepted_task"],
    )
    assert g["rework_cost"] == Decimal("1.50") and (g["one_pass"], g["reworked"], g["abandoned"]) == (1, 1, 1)
    none = compute([outcome("x", outcome="abandoned")], [req("x", "gpt-5.6-sol", "standard", 1)], catalog)[1][
        0
    ]
    assert none["cost_per_accepted_task"] is None and none["one_pass_rate"] == 0


def test_rework_not_costed_counts_zero(catalog):
    _, groups = compute(
        [outcome("t", rework=True, rework_ms=3_600_000)],
        [req("t", "gpt-5.6-sol", "standard", 1)],
        catalog,
        Decimal("0"),
    )
    assert groups[0]["rework_cost"] == Decimal("0.00") and groups[0]["rework_ms_total"] == 3_600_000


def test_a_missing_price_is_the_invoices_error(catalog):
    early = dt.datetime(2026, 8, 10, 12, tzinfo=UTC)  # ultrafast has no price before 2026-08-13
    with pytest.raises(
        MissingPriceError, match=r"no price for model gpt-5\.6-sol, tier ultrafast, token kind"
    ):
        compute(
            [outcome("t", started_at=early, completed_at=early + dt.timedelta(minutes=1))],
            [req("t", "gpt-5.6-sol", "ultrafast", 1, at=early)],
            catalog,
        )


def test_random_tasks_match_the_reference(catalog):
    rng = np.random.default_rng(26)
    outcomes, requests = [], []
    for i in range(600):
        account = f"a{rng.integers(0, 30)}"
        start = DAY + dt.timedelta(days=int(rng.integers(-1, 12)), seconds=int(rng.integers(0, 40_000)))
        span = dt.timedelta(microseconds=int(rng.integers(1, 3 * 86_400_000_000)))
        done = start + span
        verdict = rng.choice(["accepted", "accepted", "abandoned"])
        rework = bool(verdict == "accepted" and rng.random() < 0.3)
        outcomes.append(
            outcome(
                f"t{i}",
                account_id=account,
                task_class=rng.choice(["completion", "multi_file", "tool_chain", None]),
                started_at=start,
                completed_at=done,
                outcome=str(verdict),
                rework=rework,
                rework_ms=int(rng.integers(0, span // dt.timedelta(milliseconds=1) + 1)) if rework else 0,
            )
        )
        for _ in range(int(rng.integers(0, 5))):  # 0 requests: an orphan
            model, tier = PAIRS[int(rng.integers(0, len(PAIRS)))]
            at = start + dt.timedelta(seconds=int(rng.integers(-86_400, span.total_seconds() + 86_400)))
            inp = int(rng.integers(0, 20_000))
            requests.append(
                req(
                    f"t{i}",
                    model,
                    tier,
                    int(rng.integers(0, 3) * 100),  # often equal: ties
                    at=at,
                    account_id=account,
                    input_tokens=inp,
                    cached_input_tokens=int(rng.integers(0, inp + 1)),
                    duration_ms=None if rng.random() < 0.1 else int(rng.integers(0, 60_000)),
                )
            )
    tasks, groups = compute(outcomes, requests, catalog, Decimal("87.35"))
    # the requests in three parts, each joined and summed alone (a worker per part): the same tasks
    o = pa.Table.from_pylist(outcomes, schema=OUTCOME_SCHEMA)
    part = rng.integers(0, 3, len(requests))
    pairs = []
    for k in range(3):
        mine = pa.Table.from_pylist(
            [r for r, p in zip(requests, part, strict=True) if p == k], schema=REQUEST_SCHEMA
        )
        pairs.append(eff.task_pairs(eff.task_requests(o, mine), catalog))
    assert eff.tasks_from_pairs(o, pa.concat_tables(pairs), catalog).equals(tasks)
    want_tasks, orphans = ref.task_rows(outcomes, requests, catalog)
    assert tasks.num_rows == len(want_tasks) and len(outcomes) - tasks.num_rows == orphans > 0
    want = ref.groups(want_tasks, Decimal("87.35"))
    got = _keyed(groups)
    assert got.keys() == want.keys()
    for key, w in want.items():
        g = got[key]
        for name, value in w.items():
            if name in ("e2e_ms_p50", "e2e_ms_p90"):
                assert g[name] == Decimal(value.numerator) / Decimal(value.denominator), (key, name)
            elif isinstance(value, float):
                assert g[name] == pytest.approx(value, rel=1e-12), (key, name)
            else:
                assert g[name] == value, (key, name)


def test_wilson_interval_and_complete_weeks():
    lo, hi = wilson(58, 100)
    assert round(lo, 4) == 0.4821 and round(hi, 4) == 0.6720
    assert wilson(0, 0) == (0.0, 0.0) and wilson(10, 10)[1] == 1.0
    assert eff.complete_weeks(dt.date(2026, 8, 5), dt.date(2026, 8, 30)) == [
        dt.date(2026, 8, 10),
        dt.date(2026, 8, 17),
        dt.date(2026, 8, 24),
    ]
    assert eff.complete_weeks(dt.date(2026, 8, 11), dt.date(2026, 8, 16)) == []
