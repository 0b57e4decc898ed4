"""The retirement report's sentences agree with the data they are built from: distinct accounts, a
near tie called one, the catalog's retirement date, no step for zero heavy accounts."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from pipelines.adoption.candidate import successor_facts
from pipelines.adoption.html import successor_note
from pipelines.adoption.retirement import _timeline
from pipelines.adoption.weekly import destinations
from schemas.catalog import parse_catalog

D = dt.date
CATALOG = parse_catalog(
    {
        "currency": "USD",
        "models": [
            {"id": "fast", "launched": D(2026, 1, 1), "retires": D(2026, 9, 11), "successor": "big"},
            {"id": "big", "launched": D(2026, 1, 1)},
            {"id": "mid", "launched": D(2026, 1, 1)},
        ],
    }
)


def _usage(rows: list[tuple]) -> pa.Table:
    """(day, account, model, tokens) rows as load_usage returns them."""
    return pa.table(
        {
            "day": pa.array([r[0] for r in rows], pa.date32()),
            "account_id": [r[1] for r in rows],
            "model": [r[2] for r in rows],
            "speed_tier": ["standard"] * len(rows),
            "requests": [1] * len(rows),
            "input_tokens": [r[3] for r in rows],
            "output_tokens": [0] * len(rows),
        }
    )


def test_accounts_that_left_are_counted_once_however_often_they_left():
    weeks = [D(2026, 3, 2) + dt.timedelta(weeks=i) for i in range(4)]
    rows = []
    # acct a leaves fast for big twice (weeks 2 and 4); b leaves for mid once
    for week, model in ((0, "fast"), (1, "big"), (2, "fast"), (3, "big")):
        rows.append((weeks[week], "a", model, 100))
    rows += [(weeks[0], "b", "fast", 100), (weeks[1], "b", "mid", 100)]
    went = destinations(_usage(rows), weeks, weeks[1:])
    counts = {
        (f, t): n
        for f, t, n in zip(
            *(went[c].to_pylist() for c in ("from_model", "to_model", "accounts")), strict=True
        )
    }
    assert counts[("fast", "big")] == 1 and counts[("fast", "mid")] == 1


def test_a_one_account_lead_is_a_near_tie_and_the_note_says_so():
    went = pa.table(
        {"from_model": ["fast"] * 2, "to_model": ["mid", "big"], "accounts": [12, 11], "tokens": [5, 4]}
    )
    facts = successor_facts(CATALOG, "fast", went)
    assert facts["near_tie"]["to_model"] == "big" and facts["agrees"]
    note = successor_note(facts)
    assert "near tie" in note and "most went to" not in note and "distinct accounts" in note
    clear = successor_facts(
        CATALOG,
        "fast",
        pa.table(
            {"from_model": ["fast"] * 2, "to_model": ["mid", "big"], "accounts": [40, 11], "tokens": [5, 4]}
        ),
    )
    assert (
        clear["near_tie"] is None
        and not clear["agrees"]
        and "most went to mid (40 accounts)" in successor_note(clear)
    )


def test_the_timeline_keeps_the_catalog_date_and_never_asks_to_contact_zero_accounts():
    facts = {"last_week": {"heavy_accounts": 0}}
    steps = _timeline(D(2026, 8, 24), CATALOG, facts, "fast")
    assert steps[-1]["date"] == "2026-09-11" and "2026-09-11" in steps[0]["step"]
    assert not any("the 0 heavy" in s["step"] for s in steps)
