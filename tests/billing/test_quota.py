"""Quota pool allocation against a plain event-by-event reference implementation (lives here)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing.balances import balances_at
from billing.calendar import local_dates, period_start
from billing.quota import allocate
from billing.tokens import split_pro_rata
from schemas.catalog import parse_catalog
from tests.reference_billing import period_of, split

CATALOG = parse_catalog(
    {
        "currency": "USD",
        "models": [
            {"id": "m1", "launched": dt.date(2026, 1, 1)},
            {"id": "m2", "launched": dt.date(2026, 1, 1)},
            {"id": "m3", "launched": dt.date(2026, 1, 1)},
        ],
        "plans": [
            {
                "id": "a",
                "monthly_fee": "10",
                "pools": [
                    {"id": "daily", "models": ["*"], "allowance_tokens": 300, "period": "day", "priority": 1},
                    {
                        "id": "m1week",
                        "models": ["m1"],
                        "allowance_tokens": 700,
                        "period": "week",
                        "priority": 1,
                    },
                    {
                        "id": "month",
                        "models": ["*"],
                        "exclude_models": ["m2"],
                        "allowance_tokens": 900,
                        "period": "month",
                        "priority": 2,
                    },
                ],
            },
            {
                "id": "b",
                "monthly_fee": "20",
                "pools": [
                    {"id": "own", "models": ["m2"], "allowance_tokens": 400, "period": "week", "priority": 1},
                    {
                        "id": "main",
                        "models": ["*"],
                        "exclude_models": ["m2"],
                        "allowance_tokens": 500,
                        "period": "week",
                        "priority": 2,
                    },
                ],
            },
        ],
    }
)
KINDS = ("input", "cached_input", "output")


def reference(events: list[dict], catalog=CATALOG):  # type: ignore[no-untyped-def]
    """The billing rule, one event at a time."""
    balances: dict[tuple, int] = {}
    included, overage = {}, {}
    for e in sorted(events, key=lambda e: (e["account_id"], e["event_time"], e["event_id"])):
        kinds = [e["input_tokens"] - e["cached_input_tokens"], e["cached_input_tokens"], e["output_tokens"]]
        left = sum(kinds)
        if e["plan"] is not None:
            for pool in catalog.plan(e["plan"]).pools_in_draw_order():
                if not pool.covers(e["model"]):
                    continue
                key = (e["account_id"], e["plan"], pool.id, period_of(e["local_day"], pool.period))
                take = min(left, pool.allowance_tokens - balances.get(key, 0))
                balances[key] = balances.get(key, 0) + take
                left -= take
        inc = split(sum(kinds) - left, kinds)
        included[e["event_id"]] = inc
        overage[e["event_id"]] = [k - i for k, i in zip(kinds, inc, strict=True)]
    return included, overage, balances


def _table(events: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(
        events,
        schema=pa.schema(
            [
                ("event_id", pa.string()),
                ("event_time", pa.timestamp("us", tz="UTC")),
                ("account_id", pa.string()),
                ("model", pa.string()),
                ("input_tokens", pa.int64()),
                ("cached_input_tokens", pa.int64()),
                ("output_tokens", pa.int64()),
                ("plan", pa.string()),
                ("local_day", pa.date32()),
            ]
        ),
    )


def _check(events: list[dict]):  # type: ignore[no-untyped-def]
    result = allocate(_table(events), CATALOG)
    inc, over, balances = reference(events)
    for i, e in enumerate(events):
        assert result.included[i].tolist() == inc[e["event_id"]], e
        assert result.overage[i].tolist() == over[e["event_id"]], e
    # Invariants: every token exactly once; no negative pieces; pools never over their allowance.
    kinds = np.array(
        [
            [e["input_tokens"] - e["cached_input_tokens"], e["cached_input_tokens"], e["output_tokens"]]
            for e in events
        ]
    ).reshape(-1, 3)
    assert (result.included + result.overage == kinds).all()
    assert (result.included >= 0).all() and (result.overage >= 0).all()
    pools = result.pools.to_pylist()
    assert all(
        0 <= p["used"] <= p["allowance"] and p["remaining"] == p["allowance"] - p["used"] for p in pools
    )
    got = {(p["account_id"], p["plan"], p["pool"], p["period_start"]): p["used"] for p in pools}
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in balances.items() if v}
    drawn = result.draws.group_by("event_index").aggregate([("tokens", "sum")]).to_pylist()
    for row in drawn:
        assert row["tokens_sum"] == sum(result.included[row["event_index"]])
    return result


@st.composite
def event_lists(draw):  # type: ignore[no-untyped-def]
    n = draw(st.integers(1, 60))
    start = dt.datetime(2026, 3, 25, tzinfo=dt.UTC)  # spans a month end and several ISO weeks
    plans = {a: draw(st.sampled_from(["a", "b", None])) for a in ("x", "y", "z")}
    events = []
    for i in range(n):
        account = draw(st.sampled_from(["x", "y", "z"]))
        t = start + dt.timedelta(minutes=draw(st.integers(0, 60 * 24 * 16)))
        inp = draw(st.integers(0, 400))
        events.append(
            {
                "event_id": f"e{i:03d}",
                "event_time": t,
                "account_id": account,
                "model": draw(st.sampled_from(["m1", "m2", "m3"])),
                "input_tokens": inp,
                "cached_input_tokens": draw(st.integers(0, inp)),
                "output_tokens": draw(st.integers(0, 300)),
                "plan": plans[account],
                "local_day": t.date(),
            }
        )
    return events


@settings(max_examples=150, deadline=None)
@given(event_lists())
def test_vectorized_allocation_equals_the_reference(events):
    _check(events)


def _by_key(table: pa.Table) -> dict:
    return {
        (r["account_id"], r["plan"], r["pool"], r["period_start"]): (r["used"], r["exhausted_at"])
        for r in table.to_pylist()
    }


@settings(max_examples=150, deadline=None)
@given(event_lists(), st.integers(0, 16), st.integers(0, 3))
def test_starting_from_the_balances_of_a_day_equals_metering_every_event(events, cut, more):
    """A run that starts from the balances at the end of a local day and meters only the later days
    gives those days' events, draws and pool rows exactly as one run over every event does."""
    split = dt.date(2026, 3, 25) + dt.timedelta(days=cut)  # the last day of the first run
    last = max(e["local_day"] for e in events) + dt.timedelta(days=more)
    before = [e for e in events if e["local_day"] <= split]
    after = [e for e in events if e["local_day"] > split]
    whole = allocate(_table(events), CATALOG)
    state = balances_at(allocate(_table(before), CATALOG).balances, split, split)
    # The state holds the keys whose period goes on after the split day, each at its balance then.
    assert all(r["period_start"] <= split < r["period_end"] for r in state.to_pylist())
    assert set(state["local_day"].to_pylist()) <= {split}
    rest = allocate(_table(after), CATALOG, state)
    index = {e["event_id"]: i for i, e in enumerate(events)}
    for j, e in enumerate(after):
        assert rest.included[j].tolist() == whole.included[index[e["event_id"]]].tolist(), e
        assert rest.overage[j].tolist() == whole.overage[index[e["event_id"]]].tolist(), e
    # Pool rows of every period that goes on after the split day: the same used and exhausted_at.
    ongoing = whole.pools.filter(pc.greater(whole.pools["period_end"], pa.scalar(split, pa.date32())))
    assert _by_key(rest.pools) == _by_key(ongoing)
    draws = [(events[d["event_index"]]["event_id"], d["pool"], d["tokens"]) for d in whole.draws.to_pylist()]
    late = {e["event_id"] for e in after}
    rest_draws = [
        (after[d["event_index"]]["event_id"], d["pool"], d["tokens"]) for d in rest.draws.to_pylist()
    ]
    assert sorted(rest_draws) == sorted(d for d in draws if d[0] in late)
    # The balances of each later day are the same whichever way they were reached.
    assert _by_day(balances_at(rest.balances, split + dt.timedelta(days=1), last)) == _by_day(
        balances_at(whole.balances, split + dt.timedelta(days=1), last)
    )


def _by_day(table: pa.Table) -> set:
    return {tuple(r.values()) for r in table.to_pylist()}


def test_split_is_exact_and_prefers_largest_remainders_then_kind_order():
    got = split_pro_rata(np.array([10, 7, 0, 5]), np.array([[1, 1, 1], [10, 5, 5], [3, 3, 3], [0, 0, 0]]))
    assert got.tolist() == [[4, 3, 3], [3, 2, 2], [0, 0, 0], [0, 0, 0]]  # 7 x (10,5,5)/20 = 3.5, 1.75, 1.75
    for total, kinds in ((1, [1, 1, 1]), (2, [1, 1, 1]), (5, [7, 0, 3]), (9, [4, 4, 1])):
        assert split_pro_rata(np.array([total]), np.array([kinds]))[0].tolist() == split(total, kinds)


def _ev(i, t, account="x", model="m1", inp=100, cached=0, out=0, plan="a", day=None):  # type: ignore[no-untyped-def]
    return {
        "event_id": f"e{i}",
        "event_time": t,
        "account_id": account,
        "model": model,
        "input_tokens": inp,
        "cached_input_tokens": cached,
        "output_tokens": out,
        "plan": plan,
        "local_day": day or t.date(),
    }


T = dt.datetime(2026, 3, 2, 9, tzinfo=dt.UTC)  # a Monday


def test_an_event_that_exhausts_a_pool_mid_event_spills_to_the_next():
    result = _check(
        [_ev(1, T, model="m3", inp=250), _ev(2, T + dt.timedelta(minutes=1), model="m3", inp=200, out=100)]
    )
    draws = result.draws.to_pylist()
    assert [(d["event_index"], d["pool"], d["tokens"]) for d in draws] == [
        (0, "daily", 250),
        (1, "daily", 50),
        (1, "month", 250),
    ]
    exhausted = {p["pool"]: p["exhausted_at"] for p in result.pools.to_pylist()}
    assert exhausted["daily"] == T + dt.timedelta(minutes=1) and exhausted["month"] is None


def test_equal_priorities_draw_in_plan_order():
    result = _check([_ev(1, T, model="m1", inp=350)])
    assert [(d["pool"], d["tokens"]) for d in result.draws.to_pylist()] == [("daily", 300), ("m1week", 50)]


def test_a_weekly_period_straddles_a_month_end():
    mon = dt.datetime(2026, 3, 30, 9, tzinfo=dt.UTC)  # week of Mon 30 Mar .. Sun 5 Apr
    result = _check(
        [
            _ev(1, mon, account="y", model="m2", plan="b", inp=300),
            _ev(2, mon + dt.timedelta(days=3), account="y", model="m2", plan="b", inp=300),
        ]
    )
    own = [p for p in result.pools.to_pylist() if p["pool"] == "own"]
    assert [(p["period_start"], p["period_end"], p["used"]) for p in own] == [
        (dt.date(2026, 3, 30), dt.date(2026, 4, 5), 400)
    ]
    assert result.overage.sum() == 200


def test_local_dates_near_a_week_boundary_in_utc_minus_10_and_utc_plus_14():
    t = pa.array(
        [dt.datetime(2026, 3, 8, 20, tzinfo=dt.UTC), dt.datetime(2026, 3, 9, 9, 30, tzinfo=dt.UTC)],
        pa.timestamp("us", tz="UTC"),
    )
    honolulu = local_dates(t, pa.array(["Pacific/Honolulu"] * 2))
    kiritimati = local_dates(t, pa.array(["Pacific/Kiritimati"] * 2))
    assert honolulu.tolist() == [dt.date(2026, 3, 8), dt.date(2026, 3, 8)]  # both still Sunday
    assert kiritimati.tolist() == [dt.date(2026, 3, 9), dt.date(2026, 3, 9)]  # both already Monday
    assert period_start(honolulu, "week").tolist() == [dt.date(2026, 3, 2)] * 2
    assert period_start(kiritimati, "week").tolist() == [dt.date(2026, 3, 9)] * 2


def test_a_daylight_saving_change_keeps_local_days_right():
    # Europe/Berlin moves to summer time at 01:00 UTC on 2026-03-29.
    t = pa.array(
        [dt.datetime(2026, 3, 28, 22, 59, tzinfo=dt.UTC), dt.datetime(2026, 3, 29, 22, 1, tzinfo=dt.UTC)],
        pa.timestamp("us", tz="UTC"),
    )
    assert local_dates(t, pa.array(["Europe/Berlin"] * 2)).tolist() == [
        dt.date(2026, 3, 28),
        dt.date(2026, 3, 30),
    ]


# Zones whose offsets are not whole hours, change by 30 minutes, or changed at odd instants long ago
# (Amsterdam's +00:19:32 and +01:19:32 until 1937: its changes fall inside a quarter hour).
ZONES = [
    "UTC",
    "Pacific/Honolulu",
    "Pacific/Kiritimati",
    "Europe/Berlin",
    "America/St_Johns",
    "Asia/Kathmandu",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Europe/Amsterdam",
]
# Instants near offset changes: daylight saving (2026), Amsterdam leaving +01:19:32 (1937).
_ANCHORS = st.sampled_from(
    [
        dt.datetime(2026, 3, 29, 1, tzinfo=dt.UTC),  # Europe/Berlin
        dt.datetime(2026, 4, 4, 15, tzinfo=dt.UTC),  # Australia/Lord_Howe (30 minutes)
        dt.datetime(2026, 4, 4, 14, 45, tzinfo=dt.UTC),  # Pacific/Chatham (+12:45)
        dt.datetime(2026, 3, 8, 5, 30, tzinfo=dt.UTC),  # America/St_Johns (-3:30)
        dt.datetime(1937, 6, 30, 22, 40, 28, tzinfo=dt.UTC),  # Europe/Amsterdam
        dt.datetime(1969, 12, 31, 23, tzinfo=dt.UTC),  # before the epoch: floor division
    ]
)
_DAY_US = 86_400_000_000


@settings(max_examples=80, deadline=None)
@given(
    _ANCHORS,
    st.lists(
        st.tuples(st.integers(-2 * _DAY_US, 2 * _DAY_US), st.sampled_from(ZONES)), min_size=1, max_size=300
    ),
)
def test_local_dates_equal_a_conversion_of_every_event(anchor, rows):
    """Offsets looked up per quarter hour give the dates of converting each event on its own."""
    from billing.calendar import _local_dates_per_event

    base = int(anchor.timestamp() * 1_000_000)
    times = pa.array([base + delta for delta, _ in rows], pa.timestamp("us", tz="UTC"))
    zones = pa.array([zone for _, zone in rows])
    assert local_dates(times, zones).tolist() == _local_dates_per_event(times, zones).tolist()


def test_local_dates_take_timestamps_of_any_unit():
    at = dt.datetime(2026, 3, 29, 22, 30, tzinfo=dt.UTC)  # 00:30 the next day in Berlin (summer time)
    for unit in ("s", "ms", "us", "ns"):
        times = pa.array([at], pa.timestamp(unit, tz="UTC"))
        assert local_dates(times, pa.array(["Europe/Berlin"])).tolist() == [dt.date(2026, 3, 30)], unit


def test_local_dates_over_a_century_convert_every_event(monkeypatch):
    """More zone x quarter-hour cells than the lookup holds: every event is converted on its own.
    (Not past 2037: Arrow's time zone database applies no daylight saving after 2037.)"""
    from billing import calendar

    looked_up = []
    monkeypatch.setattr(calendar, "_offsets", lambda us, zone: looked_up.append(zone))  # must not be used
    times = pa.array(
        [
            dt.datetime(1930, 1, 1, 23, tzinfo=dt.UTC),
            dt.datetime(2037, 7, 1, 22, 30, tzinfo=dt.UTC),
            dt.datetime(2000, 1, 1, tzinfo=dt.UTC),
        ],
        pa.timestamp("us", tz="UTC"),
    )
    zones = pa.array(["Europe/Berlin", "Europe/Berlin", "UTC"])
    assert local_dates(times, zones).tolist() == [
        dt.date(1930, 1, 2),
        dt.date(2037, 7, 2),
        dt.date(2000, 1, 1),
    ]
    assert looked_up == []


def test_local_dates_convert_one_by_one_where_the_offset_changes_inside_a_lookup_cell(monkeypatch):
    """No zone in use changes its offset inside a quarter hour, so the per-event path is checked on a
    coarser grid: with one lookup per UTC day, the day of Berlin's change to summer time (01:00 UTC)
    holds both offsets, and its events must still get their own."""
    from billing import calendar

    t = pa.array(
        [dt.datetime(2026, 3, 29, 0, 30, tzinfo=dt.UTC), dt.datetime(2026, 3, 29, 22, 30, tzinfo=dt.UTC)],
        pa.timestamp("us", tz="UTC"),
    )
    zones = pa.array(["Europe/Berlin"] * 2)
    monkeypatch.setattr(calendar, "QUARTER_HOUR_US", calendar.DAY_US)
    assert local_dates(t, zones).tolist() == [dt.date(2026, 3, 29), dt.date(2026, 3, 30)]


def test_a_plan_change_mid_week_starts_new_balances():
    wed = T + dt.timedelta(days=2)
    result = _check(
        [
            _ev(1, T, account="z", model="m3", plan="a", inp=300),
            _ev(2, wed, account="z", model="m3", plan="b", inp=300),
        ]
    )
    keys = {(p["plan"], p["pool"]): p["used"] for p in result.pools.to_pylist()}
    assert keys == {("a", "daily"): 300, ("a", "month"): 0, ("b", "main"): 300}


def test_an_event_exactly_at_a_period_start_belongs_to_the_new_period():
    sunday_end = dt.datetime(2026, 3, 8, 23, 59, 59, 999999, tzinfo=dt.UTC)
    monday = dt.datetime(2026, 3, 9, 0, 0, tzinfo=dt.UTC)
    result = _check([_ev(1, sunday_end, model="m1", inp=1000), _ev(2, monday, model="m1", inp=1000)])
    weeks = sorted((p["period_start"], p["used"]) for p in result.pools.to_pylist() if p["pool"] == "m1week")
    assert weeks == [(dt.date(2026, 3, 2), 700), (dt.date(2026, 3, 9), 700)]


def test_pay_as_you_go_pays_every_token():
    result = _check([_ev(1, T, plan=None, inp=100, cached=40, out=7)])
    assert result.included.sum() == 0 and result.overage[0].tolist() == [60, 40, 7]
    assert result.draws.num_rows == 0


@pytest.mark.parametrize("n", [0])
def test_no_events(n):
    result = allocate(_table([]), CATALOG)
    assert result.included.shape == (0, 3) and result.pools.num_rows == 0


def test_attach_accounts_gives_local_day_and_the_plan_in_force():
    from billing.plan import attach_accounts

    events = pa.table(
        {
            "event_id": ["a", "b", "c", "d"],
            "account_id": ["h", "h", "k", "unknown"],
            "event_time": pa.array(
                [
                    dt.datetime(2026, 3, 15, 8, tzinfo=dt.UTC),  # 14 Mar 22:00 in HST
                    dt.datetime(2026, 3, 16, 12, tzinfo=dt.UTC),
                    dt.datetime(2026, 3, 1, 11, tzinfo=dt.UTC),  # 2 Mar 01:00 in LINT
                    dt.datetime(2026, 3, 1, 11, tzinfo=dt.UTC),
                ],
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )
    accounts = pa.table(
        {
            "account_id": ["h", "h", "k"],
            "plan": ["plus", "pro", None],
            "timezone": ["Pacific/Honolulu", "Pacific/Honolulu", "Pacific/Kiritimati"],
            "active_from": [dt.date(2026, 2, 1), dt.date(2026, 3, 15), dt.date(2026, 2, 1)],
            "active_until": [dt.date(2026, 3, 14), None, None],
        }
    )
    out = attach_accounts(events, accounts).to_pylist()
    assert [(r["event_id"], r["local_day"], r["plan"]) for r in out] == [
        ("a", dt.date(2026, 3, 14), "plus"),
        ("b", dt.date(2026, 3, 16), "pro"),
        ("c", dt.date(2026, 3, 2), None),
        ("d", dt.date(2026, 3, 1), None),
    ]


@st.composite
def _accounts_and_events(draw):  # type: ignore[no-untyped-def]
    """Accounts of one to three rows (gaps between them, open ends, dates before 1970) and events
    on days around their ranges, some of unknown accounts."""
    accounts = []
    for a in range(draw(st.integers(1, 6))):
        day = dt.date(1969, 12, 1) + dt.timedelta(days=draw(st.integers(0, 60)))
        for last in [i == 0 for i in reversed(range(draw(st.integers(1, 3))))]:
            until = day + dt.timedelta(days=draw(st.integers(0, 20)))
            open_end = last and draw(st.booleans())
            plan = draw(st.sampled_from(["plus", "pro", None]))
            accounts.append((f"acct-{a}", plan, None if open_end else until, day))
            day = until + dt.timedelta(days=draw(st.integers(1, 5)))
    names = [*sorted({a for a, *_ in accounts}), "nobody"]
    events = [
        (draw(st.sampled_from(names)), dt.date(1969, 11, 25) + dt.timedelta(days=draw(st.integers(0, 150))))
        for _ in range(draw(st.integers(1, 40)))
    ]
    return accounts, events


@settings(max_examples=200, deadline=None)
@given(_accounts_and_events())
def test_attach_accounts_finds_the_row_in_force_like_a_plain_search(case):
    """The plan attached to each event is the one of its account's row whose dates hold the event's
    day, searched row by row: for accounts of one row (looked up directly) and of several."""
    from billing.plan import attach_accounts

    accounts, events = case
    table = pa.table(
        {
            "account_id": [a for a, *_ in accounts],
            "plan": pa.array([p for _, p, *_ in accounts], pa.string()),
            "timezone": ["UTC"] * len(accounts),
            "active_from": pa.array([start for *_, start in accounts], pa.date32()),
            "active_until": pa.array([until for _, _, until, _ in accounts], pa.date32()),
        }
    )
    times = [dt.datetime.combine(day, dt.time(12), tzinfo=dt.UTC) for _, day in events]
    events_table = pa.table(
        {
            "event_id": [str(i) for i in range(len(events))],
            "account_id": [a for a, _ in events],
            "event_time": pa.array(times, pa.timestamp("us", tz="UTC")),
        }
    )
    out = attach_accounts(events_table, table)
    expected = [
        next(
            (
                p
                for a, p, until, start in accounts
                if a == account and start <= day and (until is None or day <= until)
            ),
            None,
        )
        for account, day in events
    ]
    assert out["local_day"].to_pylist() == [day for _, day in events]
    assert out["plan"].to_pylist() == expected
    # Accounts as a dictionary array (how metering reads them): the same plans and days.
    encoded = events_table.set_column(1, "account_id", events_table["account_id"].dictionary_encode())
    again = attach_accounts(encoded, table)
    assert again["plan"].to_pylist() == expected and again["local_day"].equals(out["local_day"])


def test_attach_accounts_without_any_account_meters_in_utc_without_a_plan():
    from billing.plan import attach_accounts

    events = pa.table(
        {
            "account_id": ["h", "k"],
            "event_time": pa.array(
                [
                    dt.datetime(2026, 3, 15, 23, 30, tzinfo=dt.UTC),
                    dt.datetime(2026, 3, 16, 0, 0, tzinfo=dt.UTC),
                ],
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )
    none = pa.table(
        {
            "account_id": pa.array([], pa.string()),
            "plan": pa.array([], pa.string()),
            "timezone": pa.array([], pa.string()),
            "active_from": pa.array([], pa.date32()),
            "active_until": pa.array([], pa.date32()),
        }
    )
    out = attach_accounts(events, none)
    assert out["local_day"].to_pylist() == [dt.date(2026, 3, 15), dt.date(2026, 3, 16)]
    assert out["plan"].to_pylist() == [None, None] and out["plan"].type == pa.string()


def test_backup_tank_share_counts_use_after_the_main_pool_ran_out():
    from billing.plan import backup_tank_weekly, own_pool_models

    catalog = parse_catalog(
        {
            "currency": "USD",
            "models": [
                {"id": "fast", "launched": dt.date(2026, 1, 1)},
                {"id": "big", "launched": dt.date(2026, 1, 1)},
            ],
            "plans": [
                {
                    "id": "pro",
                    "monthly_fee": "1",
                    "pools": [
                        {
                            "id": "fast",
                            "models": ["fast"],
                            "allowance_tokens": 10_000,
                            "period": "week",
                            "priority": 1,
                        },
                        {
                            "id": "main",
                            "models": ["*"],
                            "exclude_models": ["fast"],
                            "allowance_tokens": 100,
                            "period": "week",
                            "priority": 2,
                        },
                    ],
                }
            ],
        }
    )
    assert own_pool_models(catalog) == ["fast"]
    t0 = dt.datetime(2026, 3, 2, 8, tzinfo=dt.UTC)
    events = _table(
        [
            _ev(1, t0, account="x", model="fast", inp=10, plan="pro"),  # before main ran out
            _ev(
                2, t0 + dt.timedelta(hours=1), account="x", model="big", inp=150, plan="pro"
            ),  # exhausts main
            _ev(3, t0 + dt.timedelta(hours=2), account="x", model="fast", inp=30, plan="pro"),  # backup tank
            _ev(
                4, t0 + dt.timedelta(hours=2), account="y", model="fast", inp=60, plan="pro"
            ),  # y's main is fine
        ]
    )
    result = allocate(events, catalog)
    weekly = backup_tank_weekly(events, result.pools, catalog, "fast").to_pylist()
    assert weekly == [
        {
            "week_start": dt.date(2026, 3, 2),
            "tokens": 100,
            "backup_tokens": 30,
            "accounts": 2,
            "backup_accounts": 1,
            "exhausted_accounts": 1,  # x's main pool ran out that week; y's did not
        }
    ]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 12), st.integers(0, 12), st.integers(0, 12), st.integers(0, 100)),
        min_size=1,
        max_size=40,
    )
)
def test_split_equals_the_reference_row_by_row(rows):
    """Small counts, so that equal remainders (the tie rule) come up often."""
    kinds = np.array([r[:3] for r in rows], dtype=np.int64)
    total = np.array([r[3] * sum(r[:3]) // 100 for r in rows], dtype=np.int64)  # never above demand
    got = split_pro_rata(total, kinds)
    assert got.tolist() == [split(int(t), k.tolist()) for t, k in zip(total, kinds, strict=True)]


def test_a_threshold_is_crossed_by_the_event_that_reaches_it_exactly_once_per_period():
    """0.8 of the main pool (500) is 400 tokens: reached exactly by the 4th event; 1.0 by the 5th
    (the exhaustion: where spill-over to the model's own pool starts); each once, and a state that
    starts past them crosses nothing again."""
    catalog = CATALOG.model_copy(
        update={
            "notifications": CATALOG.notifications.model_copy(
                update={"pool_thresholds": [Decimal("0.8"), Decimal("1")]}
            )
        }
    )
    events = [_ev(i, T + dt.timedelta(minutes=i), model="m1", inp=100, plan="b") for i in range(7)]
    result = allocate(_table(events), catalog)
    crossed = [(c["event_index"], c["pool"], c["threshold"], c["used"]) for c in result.crossings.to_pylist()]
    assert crossed == [(3, "main", "0.8", 400), (4, "main", "1", 500)]
    assert (
        result.pools.filter(pc.equal(result.pools["pool"], "main"))["exhausted_at"][0].as_py()
        == events[4]["event_time"]
    )
    state = balances_at(result.balances, T.date(), T.date())
    later = [_ev(9, T + dt.timedelta(hours=5), model="m1", inp=50, plan="b")]
    assert allocate(_table(later), catalog, state).crossings.num_rows == 0
