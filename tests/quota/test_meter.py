"""Quota metering end to end on generated data: conservation, order independence, idempotency."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from sqlalchemy import and_, func, select

from billing.plan import attach_accounts
from pipelines import lake
from pipelines.quota import meter, store
from pipelines.settings import Settings
from pipelines.warehouse.accounts import load_accounts, load_accounts_table
from pipelines.warehouse.engine import make_engine, upgrade
from schemas.lake import ALLOCATION_SCHEMA
from schemas.warehouse import Account, BillableUsage, Notification, PoolDraw, PoolUsage
from tests.conftest import CATALOG_PATH, Built, build_once, date_args, small_dates, table_rows


@pytest.fixture(scope="module")
def ingested_once(tmp_path_factory, small_landing) -> Iterator[Built]:  # type: ignore[no-untyped-def]
    """The small landing days' accounts loaded and events ingested, built once for the module; no
    metering yet: the tests meter."""
    yield from build_once(
        "sqlite",
        tmp_path_factory.mktemp("meter"),
        small_landing,
        [
            ["accounts", "load", str(Path(small_landing) / "accounts.csv")],
            ["events", "ingest", *date_args(small_dates())],
        ],
    )


@pytest.fixture
def ingested(ingested_once, tmp_path, request) -> Settings:  # type: ignore[no-untyped-def]
    return ingested_once.copy(tmp_path, request)


def _meter(settings, dates):  # type: ignore[no-untyped-def]
    return meter.main([*settings.argv(), *date_args(dates)]).counts


def test_every_token_of_the_metered_days_is_included_or_overage_once(ingested):
    dates = small_dates()
    _meter(ingested, dates)
    engine = make_engine(ingested.database_url)
    events = ds.dataset(f"{ingested.lake}/events", format="parquet").to_table()
    events = attach_accounts(events, load_accounts_table(engine))
    local = events["local_day"]
    sel = events.filter(pc.and_(pc.greater_equal(local, dates[0]), pc.less_equal(local, dates[-1])))
    b = BillableUsage.__table__
    with engine.connect() as conn:
        inc, over = conn.execute(select(func.sum(b.c.included_tokens), func.sum(b.c.overage_tokens))).one()
        pools = conn.execute(select(PoolUsage.__table__)).all()
    assert inc + over == pc.sum(sel["input_tokens"]).as_py() + pc.sum(sel["output_tokens"]).as_py()
    assert inc > 0 and over > 0
    assert all(0 <= p.used <= p.allowance and p.remaining == p.allowance - p.used for p in pools)
    assert any(p.exhausted_at is not None for p in pools)
    records = ds.dataset(f"{ingested.lake}/allocations", format="parquet").to_table()
    assert pc.sum(records["tokens"]).as_py() == inc
    # pool_draws: the same allocation per local day, pool and model; it adds up to the included
    # tokens of each day and model, and to what each pool period of the metered days used
    d = PoolDraw.__table__.c
    with engine.connect() as conn:
        drawn = dict(
            ((r.local_day, r.model), int(r.tokens))
            for r in conn.execute(
                select(d.local_day, d.model, func.sum(d.tokens).label("tokens")).group_by(
                    d.local_day, d.model
                )
            )
        )
        included = dict(
            ((r.local_day, r.model), int(r.tokens))
            for r in conn.execute(
                select(b.c.local_day, b.c.model, func.sum(b.c.included_tokens).label("tokens"))
                .group_by(b.c.local_day, b.c.model)
                .having(func.sum(b.c.included_tokens) > 0)
            )
        )
        by_period = {
            (r.account_id, r.plan, r.pool, r.period_start): int(r.used)
            for r in pools
            if dates[0] <= r.period_start and r.period_end <= dates[-1]
        }
        periods = conn.execute(
            select(d.account_id, d.plan, d.pool, d.local_day, d.tokens).where(d.tokens > 0)
        ).all()
    assert drawn == included
    spans: dict = {}
    for p in pools:
        spans.setdefault((p.account_id, p.plan, p.pool), []).append((p.period_start, p.period_end))
    summed: dict = {}
    for r in periods:
        start = next(a for a, z in spans[(r.account_id, r.plan, r.pool)] if a <= r.local_day <= z)
        key = (r.account_id, r.plan, r.pool, start)
        summed[key] = summed.get(key, 0) + r.tokens
    assert {k: v for k, v in by_period.items() if v} == {
        k: summed.get(k, 0) for k, v in by_period.items() if v
    }


def test_metering_day_by_day_equals_all_at_once_and_reruns_change_nothing(ingested, tmp_path, catalog):
    dates = small_dates()
    result = meter.main([*ingested.argv(), *date_args(dates)])
    first = result.counts
    once = (table_rows(ingested.database_url, BillableUsage), table_rows(ingested.database_url, PoolUsage))
    said = _said(ingested.database_url)
    assert result.notifications == len(said) > 0  # the pools' thresholds crossed, in the same load
    again = meter.main([*ingested.argv(), *date_args(dates)])
    assert again.counts == first and again.notifications == 0  # a rerun crosses nothing new
    assert (
        table_rows(ingested.database_url, BillableUsage),
        table_rows(ingested.database_url, PoolUsage),
    ) == once

    other = replace(ingested, database_url=f"sqlite:///{tmp_path / 'daily.db'}")  # same lake, fresh warehouse
    engine = make_engine(other.database_url)
    upgrade(engine)
    load_accounts(engine, Path(ingested.landing) / "accounts.csv", catalog)
    started = []
    for day in dates:
        started.append(meter.main([*other.argv(), *date_args([day])]).notes)
    # After the first day each run starts from the balances the day before left (nothing changed).
    assert started[0] == [] and all(
        n == [f"started from the pool balances at the end of {d - dt.timedelta(days=1)}"]
        for n, d in zip(started[1:], dates[1:], strict=True)
    )
    assert (table_rows(other.database_url, BillableUsage), table_rows(other.database_url, PoolUsage)) == once
    assert _said(other.database_url) == said  # the same crossings, ids and figures, day by day


def _said(url: str) -> list[tuple]:
    """What the outbox says (not when or by which run)."""
    n = Notification.__table__.c
    engine = make_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            select(n.notification_id, n.type, n.account_id, n.pool, n.period_start, n.threshold, n.data)
        ).all()
    engine.dispose()
    return sorted(tuple(r) for r in rows)


@pytest.mark.slow
def test_balances_are_not_used_once_what_they_came_from_changed(ingested, catalog, tmp_path):
    """A rewritten event file of the period, another plan for an account, or another catalog: the
    run reads from the period starts again, and gives the rows of a run from scratch."""
    import os

    dates = small_dates()
    _meter(ingested, dates[:1])

    def started(settings=ingested, config=None) -> bool:  # type: ignore[no-untyped-def]
        argv = [*settings.argv(), *date_args(dates[1:2])]
        if config is not None:
            argv[argv.index("--config") + 1] = str(config)
        return bool(meter.main(argv).notes)

    assert started()
    # A file two UTC days later holds no event of the state's days: the state stays usable (late
    # events of the last days arrive every day).
    later = lake.list_files(lake.partition(ingested.lake, lake.EVENTS, dates[2]))[0]
    os.utime(later, ns=(os.stat(later).st_atime_ns, os.stat(later).st_mtime_ns + 1))
    assert started()
    state = lake.partition(ingested.lake, store.POOL_STATE, dates[0])
    assert lake.list_files(state) and lake.exists(lake.join(state, store.STATE_STAMP))
    rows = _outputs(ingested)

    path = lake.list_files(lake.partition(ingested.lake, lake.EVENTS, dates[0]))[0]
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 1))  # rewritten
    assert not started()
    assert _outputs(ingested) == rows
    _meter(ingested, dates[:1])  # a fresh state for the day
    assert started()
    os.remove(lake.list_files(state)[0])  # a state file lost: the others are not the state
    assert not started()
    _meter(ingested, dates[:1])
    assert started()
    for name, garbage in ((store.STATE_STAMP, b"{not json"), (Path(lake.list_files(state)[0]).name, b"PAR1")):
        _meter(ingested, dates[:1])
        Path(state, name).write_bytes(garbage)  # unreadable: metered from the period starts
        assert not started()

    engine = make_engine(ingested.database_url)
    with engine.begin() as conn:  # one account moves to another plan
        a = Account.__table__
        one = conn.execute(select(a.c.account_id, a.c.plan).where(a.c.plan.is_not(None))).first()
        other_plan = next(p.id for p in catalog.plans if p.id != one.plan)
        conn.execute(a.update().where(a.c.account_id == one.account_id).values(plan=other_plan))
    assert not started()

    _meter(ingested, dates[:1])
    assert started()
    text = Path(ingested.config).read_text()
    changed = tmp_path / "catalog.toml"
    changed.write_text(text.replace("allowance_tokens = 400_000", "allowance_tokens = 300_000", 1))
    assert changed.read_text() != text
    assert not started(config=changed)

    # No balances are kept for a date whose next UTC day has no events yet: its stamp would change.
    _meter(ingested, dates[-1:])
    after = dates[-1] + dt.timedelta(days=1)
    assert not lake.list_files(lake.partition(ingested.lake, lake.EVENTS, after))
    assert not lake.list_files(lake.partition(ingested.lake, store.POOL_STATE, dates[-1]), "*")


def test_the_shard_count_follows_the_window_and_changes_no_row(ingested, tmp_path, catalog, monkeypatch):
    """A run's account shards come from its window's size; many small shards give the rows one gives."""
    dates = small_dates()
    monkeypatch.setattr(store, "SHARD_ROWS", 10**9)
    assert store.shard_count(lake.row_group_units(_files(ingested.lake))) == 1
    one = _meter(ingested, dates)
    outputs = _outputs(ingested)
    monkeypatch.setattr(store, "SHARD_ROWS", 300)
    assert store.shard_count(lake.row_group_units(_files(ingested.lake))) >= 10
    assert _meter(ingested, dates) == one
    assert _outputs(ingested) == outputs


def _outputs(settings) -> tuple:  # type: ignore[no-untyped-def]
    """What a metering run leaves: billable_usage and pool_usage rows, allocation records."""
    return (
        table_rows(settings.database_url, BillableUsage),
        table_rows(settings.database_url, PoolUsage),
        _allocations(settings.lake),
    )


def test_row_group_units_batch_small_row_groups_in_order(tmp_path):
    table = pa.table({"n": list(range(10))})
    a, b = str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")
    pq.write_table(table, a, row_group_size=3)  # row groups of 3, 3, 3, 1
    pq.write_table(table.slice(0, 8), b, row_group_size=8)
    units = lake.row_group_units([a, b], max_rows=6)
    assert units == [((a, 0), (a, 1)), ((a, 2), (a, 3)), ((b, 0),)]  # 8 rows > 6: a unit of its own
    assert [lake.read_unit(u)["n"].to_pylist() for u in units] == [
        [0, 1, 2, 3, 4, 5],
        [6, 7, 8, 9],
        list(range(8)),
    ]
    assert lake.row_group_units([a], max_rows=1) == [((a, i),) for i in range(4)]
    assert lake.row_group_units([]) == []


def test_the_size_of_read_units_changes_no_row(ingested, monkeypatch):
    dates = small_dates()
    assert len(lake.row_group_units(_files(ingested.lake))) < len(lake.row_groups(_files(ingested.lake)))
    batched = _meter(ingested, dates)
    outputs = _outputs(ingested)
    monkeypatch.setattr(lake.parquet, "UNIT_ROWS", 1)  # one row group per unit
    assert _meter(ingested, dates) == batched
    assert _outputs(ingested) == outputs


def test_the_read_window_starts_at_the_longest_pool_period_of_the_catalog(catalog):
    sunday = dt.date(2026, 3, 15)
    assert store.read_window([sunday], catalog) == (dt.date(2026, 3, 8), dt.date(2026, 3, 16))  # weekly pools
    monthly = catalog.model_copy(
        update={
            "plans": [
                p.model_copy(update={"pools": [q.model_copy(update={"period": "month"}) for q in p.pools]})
                for p in catalog.plans
            ]
        }
    )
    assert store.read_window([sunday], monthly) == (dt.date(2026, 2, 28), dt.date(2026, 3, 16))


def _files(lake_root: str) -> list[str]:
    return [
        f
        for d in lake.partition_dates(lake_root, lake.EVENTS)
        for f in lake.list_files(lake.partition(lake_root, lake.EVENTS, d))
    ]


def _allocations(lake_root: str) -> list:
    t = ds.dataset(f"{lake_root}/allocations", format="parquet").to_table()
    return sorted(t.to_pylist(), key=lambda r: (r["event_id"], r["pool"]))


def test_quota_show_prints_each_pool(ingested, capsys):
    from pipelines.cli import main

    _meter(ingested, small_dates())
    engine = make_engine(ingested.database_url)
    p = PoolUsage.__table__
    with engine.connect() as conn:
        row = conn.execute(select(p).where(p.c.used > 0).order_by(p.c.account_id)).first()
    code = main(
        [
            "--database-url",
            ingested.database_url,
            "quota",
            "show",
            "--account",
            row.account_id,
            "--at",
            f"{row.period_start}T12:00:00+00:00",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"plan {row.plan}" in out and f"{row.pool}" in out and "resets" in out
    code = main(["--database-url", ingested.database_url, "quota", "show", "--account", "nobody"])
    assert code == 2


def test_run_day_meters_to_the_end_of_the_periods_its_dates_touch(catalog):
    from pipelines.jobs.steps import meter_dates_for

    got = meter_dates_for([dt.date(2026, 3, 4)], catalog)  # weekly pools: Wed -> through Sunday 8 March
    assert got[0] == dt.date(2026, 3, 3) and got[-1] == dt.date(2026, 3, 8) and len(got) == 6


@pytest.mark.slow
def test_a_late_event_through_run_day_gives_the_same_rows_as_a_full_remeter(
    sqlite_settings, catalog, tmp_path
):
    import json

    from tests.conftest import run_day

    engine = make_engine(sqlite_settings.database_url)
    load_accounts(engine, Path(sqlite_settings.landing) / "accounts.csv", catalog)
    dates = small_dates()
    landing = tmp_path / "landing"
    shutil.copytree(sqlite_settings.landing, landing)
    settings = replace(sqlite_settings, landing=str(landing))
    run_day(settings, dates)  # all four days metered
    day4 = dates[3]

    def rows_of_day4() -> list[tuple]:
        return [r for r in table_rows(settings.database_url, BillableUsage) if r[3] == day4]

    # The busiest pro account in UTC on the fourth day: a big request earlier in its week changes it.
    b = BillableUsage.__table__
    with engine.connect() as conn:
        busy = (
            conn.execute(
                select(b.c.account_id)
                .where(b.c.local_day == day4, b.c.included_tokens > 0)
                .group_by(b.c.account_id)
                .order_by(func.sum(b.c.included_tokens).desc())
            )
            .scalars()
            .all()
        )
    utc_pro = {
        line.split(",")[0]
        for line in (landing / "accounts.csv").read_text().splitlines()
        if ",pro,UTC," in line
    }
    account = next(a for a in busy if a in utc_pro)
    before = rows_of_day4()
    late = {
        "event_id": "late-heavy",
        "event_time": f"{dates[0]}T12:00:00Z",
        "account_id": account,
        "model": "gpt-5.6-sol",
        "speed_tier": "standard",
        "input_tokens": 1_990_000,
        "cached_input_tokens": 0,
        "output_tokens": 10_000,
        "status": "ok",
    }
    # It arrives with the second landing date: the fourth day's rows (same week) must be re-metered.
    (landing / dates[1].isoformat() / "late.jsonl").write_text(json.dumps(late) + "\n")
    run_day(settings, [dates[1]])
    assert rows_of_day4() != before  # the late request used the week's allowance: day 4 moved to overage
    incremental = table_rows(settings.database_url, BillableUsage)

    full = replace(settings, database_url=f"sqlite:///{tmp_path / 'full.db'}")
    upgrade(make_engine(full.database_url))
    load_accounts(make_engine(full.database_url), landing / "accounts.csv", catalog)
    last = max(r[3] for r in incremental)
    meter.main(
        [*full.argv(), "--from", (dates[0] - dt.timedelta(days=1)).isoformat(), "--to", last.isoformat()]
    )
    assert incremental == table_rows(full.database_url, BillableUsage)


def test_balances_are_kept_for_the_last_days_with_data_and_month_ends(tmp_path):
    """Where a later run can start: the last days whose next UTC day has events, and month ends;
    not every day of a long backfill."""
    start = dt.date(2026, 1, 20)
    days = [start + dt.timedelta(days=i) for i in range(60)]  # to 20 March
    for d in days[:45]:  # events up to 5 March
        (tmp_path / lake.EVENTS / f"date={d}").mkdir(parents=True)
    kept = store.state_dates(str(tmp_path), days)
    ready_last = dt.date(2026, 3, 4)  # the last date whose next day has events
    tail = [ready_last - dt.timedelta(days=i) for i in range(store.STATE_DAYS)][::-1]
    assert kept == [dt.date(2026, 1, 31), *tail]
    assert store.state_dates(str(tmp_path), days[40:44]) == days[40:44]


def _account_days_with_overage(engine, n: int) -> list[tuple]:  # type: ignore[no-untyped-def]
    """(account, local day) of ``n`` account-days that have both included and overage tokens."""
    b = BillableUsage.__table__
    query = (
        select(b.c.account_id, b.c.local_day)
        .group_by(b.c.account_id, b.c.local_day)
        .having(and_(func.sum(b.c.included_tokens) > 0, func.sum(b.c.overage_tokens) > 0))
        .order_by(func.count())
        .limit(n)
    )
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(query)]


def test_quota_explain_adds_up_to_the_billable_rows_of_its_events(ingested, catalog):
    """Explaining every event of some account-days (from the stored allocation records, nothing
    re-metered) gives back exactly their billable_usage rows, pool by pool and kind by kind."""
    from pipelines.quota.explain import explain_event

    dates = small_dates()
    _meter(ingested, dates)
    engine = make_engine(ingested.database_url)
    groups = _account_days_with_overage(engine, 3)
    assert len(groups) == 3
    events = attach_accounts(
        ds.dataset(f"{ingested.lake}/events", format="parquet").to_table(), load_accounts_table(engine)
    )
    wanted = set(groups)
    ids = [
        (r["event_id"], r["event_time"].date())
        for r in events.select(["event_id", "event_time", "account_id", "local_day"]).to_pylist()
        if (r["account_id"], r["local_day"]) in wanted
    ]
    assert 0 < len(ids) <= 80
    explained: dict[tuple, list[int]] = {}
    exhausted_by_one = 0
    for event_id, utc_day in ids:
        charge = explain_event(engine, ingested.lake, catalog, event_id, utc_day)
        assert charge.metered
        e = charge.event
        for kind in charge.tokens:
            assert charge.included[kind] + charge.overage[kind] == charge.tokens[kind] >= 0
            key = (e["account_id"], e["model"], e["speed_tier"], charge.local_day, kind)
            sums = explained.setdefault(key, [0, 0])
            sums[0] += charge.included[kind]
            sums[1] += charge.overage[kind]
        assert sum(p.drew for p in charge.pools) == sum(charge.included.values())
        assert all(p.used is not None and 0 <= p.drew <= p.used <= p.allowance for p in charge.pools)
        exhausted_by_one += any(p.drew and p.exhausted_at == e["event_time"] for p in charge.pools)
        if sum(charge.overage.values()):
            assert charge.amount is not None and charge.amount > 0
    assert exhausted_by_one >= 1  # an account-day with overage after included: some event ran a pool dry
    b = BillableUsage.__table__
    stored: dict[tuple, list[int]] = {}
    with engine.connect() as conn:
        for account, day in groups:
            rows = conn.execute(select(b).where(and_(b.c.account_id == account, b.c.local_day == day))).all()
            for r in rows:
                sums = stored.setdefault(
                    (r.account_id, r.model, r.speed_tier, r.local_day, r.token_kind), [0, 0]
                )
                sums[0] += r.included_tokens
                sums[1] += r.overage_tokens
    assert explained == stored


def test_quota_explain_on_the_command_line(ingested, capsys, tmp_path):
    from pipelines.cli import main

    events = ds.dataset(f"{ingested.lake}/events", format="parquet").to_table(
        columns=["event_id", "event_time"]
    )
    noon = dt.datetime.combine(small_dates()[1], dt.time(12), dt.UTC)  # the same local day in any zone
    event = next(r for r in events.to_pylist() if abs(r["event_time"] - noon) < dt.timedelta(hours=1))
    event_id, utc_day = event["event_id"], event["event_time"].date().isoformat()
    base = ["--database-url", ingested.database_url, "--lake", ingested.lake, "quota", "explain"]

    assert main([*base, "--event-id", event_id]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"event {event_id}" in out and "not metered yet" in out and "quota meter --date" in out

    assert main([*base, "--event-id", event_id, "--json"]) == 0
    before = json.loads(capsys.readouterr().out)
    assert (
        before["metered"] is False and before["included"] is None and before["event"]["event_id"] == event_id
    )

    _meter(ingested, small_dates())
    assert main([*base, "--event-id", event_id, "--json"]) == 0
    after = json.loads(capsys.readouterr().out)
    assert after["metered"] is True and after["stale"] is False
    assert all(after["included"][k] + after["overage"][k] == after["tokens"][k] for k in after["tokens"])
    assert sum(p["covered"] for p in after["pools"]) == sum(after["included"].values())
    if after["price"] is not None:
        assert Decimal(after["price"]["overage_amount_unrounded"]) >= 0
    assert main([*base, "--event-id", event_id, "--date", utc_day]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"event {event_id}" in out and "included" in out and "overage" in out and "not metered" not in out

    # A late event rewrote the event's partition after that metering run: the records may be stale.
    folder = lake.partition(ingested.lake, lake.EVENTS, dt.date.fromisoformat(utc_day))
    (shard_file,) = [
        f
        for f in lake.list_files(folder)
        if event_id in pq.read_table(f, columns=["event_id"])["event_id"].to_pylist()
    ]
    later = Path(shard_file).stat().st_mtime + 60
    os.utime(shard_file, (later, later))
    assert main([*base, "--event-id", event_id]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "changed after the last metering" in out and "included" not in out

    assert main([*base, "--event-id", "no-such-event"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: no event 'no-such-event' in any date") and len(err.strip().splitlines()) == 1
    )
    assert main([*base, "--event-id", event_id, "--date", "2020-01-01"]) == 2
    assert "no event" in capsys.readouterr().err
    assert main([*base, "--event-id", event_id, "--date", "yesterday"]) == 2
    assert "invalid --date 'yesterday'" in capsys.readouterr().err

    # The catalog lost the account's plan since metering: one line, not a traceback.
    assert main([*base, "--event-id", event_id, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert plan is not None
    changed = tmp_path / "catalog.toml"
    changed.write_text(CATALOG_PATH.read_text().replace(f'id = "{plan}"', 'id = "renamed"'))
    assert main(["--config", str(changed), *base, "--event-id", event_id]) == 2
    err = capsys.readouterr().err
    assert f"on plan '{plan}', which the catalog does not have" in err and "Traceback" not in err


def _kept_balances(lake_root: str) -> list[dict]:
    rows = [
        row
        for day in lake.partition_dates(lake_root, store.POOL_STATE)
        for f in lake.list_files(lake.partition(lake_root, store.POOL_STATE, day))
        for row in lake.read_parquet(f).to_pylist()
    ]
    return sorted(rows, key=repr)


def test_allocation_records_and_kept_balances_are_one_file_per_local_day(ingested, monkeypatch):
    """Every shard's records of a day are joined into one file (row groups of ROWS_PER_GROUP, the
    driver holding one at a time), not one small file per shard and day; so are the balances kept
    for later runs; the rows do not change."""
    dates = small_dates()
    _meter(ingested, dates)
    whole = _allocations(ingested.lake)
    balances = _kept_balances(ingested.lake)
    monkeypatch.setattr(store, "ROWS_PER_GROUP", 64)
    monkeypatch.setattr(store, "SHARD_ROWS", 500)  # many shards: many pieces per day
    monkeypatch.setattr(lake.IpcSegments, "OPEN", 3)  # and spill files closed while their rows wait
    _meter(ingested, dates)
    assert _allocations(ingested.lake) == whole and len(whole) > 0
    assert _kept_balances(ingested.lake) == balances and len(balances) > 0
    kept = 0
    for day in dates:
        files = lake.list_files(lake.partition(ingested.lake, store.POOL_STATE, day), "*")
        assert [Path(f).name for f in files] in ([], [store.STATE_STAMP, "part-0000.parquet"])
        kept += len(files) > 0
    assert kept > 1
    groups = 0
    for day in dates:
        files = lake.list_files(lake.partition(ingested.lake, store.ALLOCATIONS, day), "*")
        assert [Path(f).name for f in files] in ([], ["part-0000.parquet"])
        if files:
            metadata = pq.ParquetFile(files[0]).metadata
            groups = max(groups, metadata.num_row_groups)
            assert pq.ParquetFile(files[0]).schema_arrow == ALLOCATION_SCHEMA
    assert groups > 1
    assert not (Path(ingested.lake) / "_staging").exists() or not any(
        (Path(ingested.lake) / "_staging").iterdir()
    )
