"""A run killed at each checkpoint, two runs at once, a database connection killed.

Each checkpoint of `run-day` is stopped once. Two of them are real SIGKILLs of a child process of the
``usage-billing`` command (``USAGE_BILLING_FAULT``, ``pipelines/runtime/faults.py``, makes it kill itself
or pause at a named point); the others are stopped in the test's process by an exception no handler
catches. The tests compare the lake and the warehouse with those of an uninterrupted run.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from sqlalchemy import text

from pipelines import lake
from pipelines.cli import main
from pipelines.settings import Settings
from pipelines.warehouse.binding import rebind
from pipelines.warehouse.engine import make_engine, upgrade
from schemas.warehouse import (
    Base,
    BillableUsage,
    MeteredDay,
    ModelDaily,
    PoolUsage,
    UsageDaily,
    UsageDailyError,
)
from tests.conftest import CATALOG_PATH, ROOT, cli_args, close_month, table_rows
from tests.warehouse.test_fencing import lose_lock

pytestmark = pytest.mark.slow

BIN = str(Path(sys.executable).with_name("usage-billing"))
DAY1, DAY2 = dt.date(2026, 3, 2), dt.date(2026, 3, 3)  # DAY2 carries late events of DAY1
MONTH = "2026-03"
TABLES = (UsageDaily, UsageDailyError, ModelDaily, BillableUsage, PoolUsage, MeteredDay)


def _env(settings: Settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("USAGE_BILLING_")}
    env.update(
        USAGE_BILLING_CONFIG=settings.config,
        USAGE_BILLING_DATABASE_URL=settings.database_url,
        USAGE_BILLING_LAKE=settings.lake,
        USAGE_BILLING_LANDING=settings.landing,
        GX_ANALYTICS_ENABLED="false",
        **extra,
    )
    return env


def cli(
    settings: Settings, *args: str, fault: str | None = None, **extra: str
) -> subprocess.CompletedProcess:
    env = _env(settings, **extra)
    if fault:
        env["USAGE_BILLING_FAULT"] = fault
    return subprocess.run([BIN, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)


def ok(settings: Settings, *args: str) -> None:
    """A step that must succeed, in this process (what a real process adds, its exit code, its one line
    on stderr, a kill, is what ``cli`` is for)."""

    assert main([*cli_args(settings), *args]) == 0, args


def lake_state(root: str) -> dict:
    """Each committed partition's rows in a stable order: what a reader of the lake sees."""
    state = {}
    for dataset in (lake.EVENTS, lake.QUARANTINE, "allocations"):
        for day in lake.partition_dates(root, dataset):
            files = lake.list_files(lake.partition(root, dataset, day))
            tables = [lake.read_parquet(f) for f in files]
            rows = pa.concat_tables(tables).to_pylist() if tables else []
            state[(dataset, day)] = sorted(rows, key=repr)
    return state


def _plain(value: object) -> object:
    """One spelling per value whichever the database: SQLite returns REAL and naive UTC datetimes."""
    if isinstance(value, float | Decimal | int) and not isinstance(value, bool):
        return str(Decimal(str(value)).normalize())
    if isinstance(value, dt.datetime):
        return (
            value.replace(tzinfo=None)
            if value.tzinfo is None
            else value.astimezone(dt.UTC).replace(tzinfo=None)
        )
    return value


def _rows(rows: list) -> list[tuple]:
    return [tuple(_plain(v) for v in r) for r in rows]


def warehouse_state(url: str) -> dict:
    state = {t.__tablename__: _rows(table_rows(url, t)) for t in TABLES}
    engine = make_engine(url)
    with engine.connect() as conn:
        state["invoices"] = _rows(
            conn.execute(
                text(
                    "SELECT account_id, period, sequence, status, invoice_number, subtotal, total "
                    "FROM invoices ORDER BY account_id, period, sequence"
                )
            ).all()
        )
        state["invoice_lines"] = _rows(
            conn.execute(
                text(
                    "SELECT i.account_id, i.period, i.sequence, l.line_type, l.model, l.speed_tier, "
                    "l.token_kind, l.quantity, l.unit_price, l.amount "
                    "FROM invoice_lines l JOIN invoices i USING (invoice_id) "
                    "ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10"
                )
            ).all()
        )
        state["counters"] = _rows(
            conn.execute(text("SELECT period, last_number FROM invoice_counters")).all()
        )
    engine.dispose()
    return state


def more_state(url: str) -> dict:
    """What the other steps of ``run-day`` load: the pools' draws, the week's effectiveness (without
    the time it was computed)."""
    state = {}
    engine = make_engine(url)
    with engine.connect() as conn:
        for table in ("pool_draws", "task_effectiveness", "effectiveness_weeks"):
            columns = [c.name for c in Base.metadata.tables[table].columns if c.name != "computed_at"]
            rows = conn.execute(text(f"SELECT {', '.join(columns)} FROM {table}")).all()
            state[table] = sorted(_rows(rows), key=repr)
    engine.dispose()
    return state


def _copy(src: Settings, dest: Path) -> Settings:
    """A copy of a SQLite warehouse and its lake (the state after DAY1) to run a scenario on."""
    dest.mkdir(parents=True)
    db = dest / "warehouse.db"
    source = Path(src.database_url.removeprefix("sqlite:///"))
    for part in source.parent.glob(source.name + "*"):  # the database, its WAL and shared memory
        if part.is_file():
            shutil.copy(part, dest / part.name.replace(source.name, db.name))
    shutil.copytree(src.lake, dest / "lake")
    copy = Settings(
        config=src.config, database_url=f"sqlite:///{db}", lake=str(dest / "lake"), landing=src.landing
    )
    engine = make_engine(copy.database_url)
    rebind(engine, copy.lake, "a scenario runs on its own copy of the warehouse and the lake")
    engine.dispose()
    return copy


@pytest.fixture(scope="module")
def after_day1(tmp_path_factory, small_landing) -> Settings:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("day1")
    url = f"sqlite:///{root / 'warehouse.db'}"
    upgrade(make_engine(url))
    s = Settings(
        config=str(CATALOG_PATH), database_url=url, lake=str(root / "lake"), landing=str(small_landing)
    )
    ok(s, "accounts", "load", str(Path(small_landing) / "accounts.csv"))
    ok(s, "run-day", "--date", DAY1.isoformat())
    return s


@pytest.fixture(scope="module")
def reference(after_day1, tmp_path_factory) -> dict:  # type: ignore[no-untyped-def]
    """Uninterrupted: DAY2, then the month drafted and finalized."""
    s = _copy(after_day1, tmp_path_factory.mktemp("reference") / "run")
    ok(s, "run-day", "--date", DAY2.isoformat())
    day2 = {
        "lake": lake_state(s.lake),
        "warehouse": warehouse_state(s.database_url),
        "more": more_state(s.database_url),
    }
    close_month(s, MONTH, Path(s.lake).parent)
    ok(s, "invoices", "draft", "--month", MONTH)
    drafted = warehouse_state(s.database_url)
    ok(s, "invoices", "finalize", "--month", MONTH)
    return {
        "day1": warehouse_state(after_day1.database_url),
        "day1_lake": lake_state(after_day1.lake),
        "day2": day2,
        "drafted": drafted,
        "finalized": warehouse_state(s.database_url),
    }


class _Stopped(BaseException):
    """Ends a run at a checkpoint in this process: no handler of the code under test catches it, so
    what it leaves is what a crash there leaves (open transactions roll back with their connection)."""


def _stopped_in_process(monkeypatch, s: Settings, fault: str) -> None:  # type: ignore[no-untyped-def]
    from pipelines.runtime import faults

    point, _, nth = fault.partition(":kill")
    seen = {"n": 0}

    def stop(name: str) -> None:
        if name == point:
            seen["n"] += 1
            if seen["n"] == int(nth.lstrip(":") or 1):
                raise _Stopped(name)

    monkeypatch.setattr(faults, "checkpoint", stop)
    with pytest.raises(_Stopped):
        main([*cli_args(s), "run-day", "--date", DAY2.isoformat()])
    monkeypatch.undo()


# Each checkpoint once; two of them as a real SIGKILL of a child process (no cleanup, no `finally`,
# one of them inside the Beam pipeline), the others stopped in this process (cheaper, same state).
@pytest.mark.parametrize(
    "fault, sigkill",
    [
        ("lake.write:kill:3", True),  # ingest: staging files half written, nothing committed
        ("lake.commit:kill:1", False),  # ingest: the first past partition swapped, the others not
        ("warehouse.load.dq_results:kill:1", False),  # quality gate writing its results
        ("warehouse.load.usage_daily:kill:1", False),  # aggregate: usage_daily loaded, transaction open
        ("warehouse.load.billable_usage:kill:1", True),  # meter: usage_daily committed, metering not
    ],
)
def test_a_run_day_killed_at_any_step_leaves_no_partial_state_and_the_rerun_equals_an_uninterrupted_run(
    after_day1, reference, tmp_path, fault, sigkill, monkeypatch
):
    s = _copy(after_day1, tmp_path / "run")
    if sigkill:
        killed = cli(s, "run-day", "--date", DAY2.isoformat(), fault=fault)
        assert killed.returncode == -9, f"the fault {fault} was not reached: {killed.stderr}"
    else:
        _stopped_in_process(monkeypatch, s, fault)

    # No partial partition: every partition a reader sees is the one before the run or the one after.
    seen = lake_state(s.lake)
    before, after = reference["day1_lake"], reference["day2"]["lake"]
    for key in set(seen) | set(after):
        assert seen.get(key) in (before.get(key), after.get(key)), f"partition {key} is half-written"
    # No half-loaded date: each table holds its rows from before the run or from after it.
    tables = warehouse_state(s.database_url)
    for name in (t.__tablename__ for t in TABLES):
        assert tables[name] in (reference["day1"][name], reference["day2"]["warehouse"][name]), name

    if sigkill:
        ok(s, "run-day", "--date", DAY2.isoformat())
    else:  # the rerun in this process too, after the stop
        from pipelines.cli import main

        assert main([*cli_args(s), "run-day", "--date", DAY2.isoformat()]) == 0
    assert lake_state(s.lake) == reference["day2"]["lake"]
    assert warehouse_state(s.database_url) == reference["day2"]["warehouse"]
    assert not lake.list_files(lake.join(s.lake, lake.STAGING), "*"), "the rerun left staging behind"
    with make_engine(s.database_url).connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM recompute_queue")).scalar_one() == 0


# The tasks' checkpoints of every step of run-day (``pipelines/runtime/faults.py``).
IN_TASKS = (
    "ingest.staged",
    "gate.checked",
    "aggregate.staged",
    "meter.spilled",
    "meter.staged",
    "effectiveness.staged",
)


def test_a_dask_worker_lost_in_each_step_is_replaced_and_the_run_equals_an_uninterrupted_one(
    after_day1, reference, tmp_path
):
    """A worker killed once in the tasks of each step (six kills in one run): its nanny starts it
    again and Dask runs again the tasks it was running and those whose results it held. Every task
    writes what it staged under the same names each time it runs, so the run finishes with the rows of
    a run nothing interrupted, and nothing counted twice."""
    import distributed

    s = _copy(after_day1, tmp_path / "run")
    marker = tmp_path / "killed"
    fault = ",".join(f"{point}:kill-once" for point in IN_TASKS)
    env = {"USAGE_BILLING_FAULT": fault, "USAGE_BILLING_FAULT_FILE": str(marker)}
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, env=env
    ) as cluster:
        runner = "--runner=apache_beam.runners.dask.dask_runner.DaskRunner"
        ok(
            s,
            "run-day",
            "--date",
            DAY2.isoformat(),
            "--",
            runner,
            f"--dask_client_address={cluster.scheduler_address}",
        )
    killed = sorted(p.name.removeprefix("killed.") for p in tmp_path.glob("killed.*"))
    assert killed == sorted(IN_TASKS), "a worker was killed in each step's tasks"
    assert lake_state(s.lake) == reference["day2"]["lake"]
    assert warehouse_state(s.database_url) == reference["day2"]["warehouse"]
    assert more_state(s.database_url) == reference["day2"]["more"]


def test_a_killed_ingest_commit_is_finished_by_the_next_ingest_and_its_dates_recomputed(after_day1, tmp_path):
    """Kill between ingest and aggregate (inside ingest's commit): the plain `events ingest` rerun
    finishes the commit, and the next run-day takes the late date (DAY1) downstream from the queue."""
    s = _copy(after_day1, tmp_path / "run")
    assert cli(s, "events", "ingest", "--date", DAY2.isoformat(), fault="lake.commit:kill:1").returncode == -9
    again = cli(s, "events", "ingest", "--date", DAY2.isoformat())
    assert again.returncode == 0, again.stderr
    assert "finishing the commit of ingest run" in again.stderr
    engine = make_engine(s.database_url)
    with engine.connect() as conn:
        runs = conn.execute(
            text("SELECT clean, duplicates FROM ingest_runs WHERE landing_date = :d AND dataset = 'events'"),
            {"d": DAY2},
        ).all()
        queued = {r.day for r in conn.execute(text("SELECT day FROM recompute_queue"))}
    clean, dups = max(runs)  # the killed run, recorded when its commit was finished
    assert clean > 0 and sorted(runs) == [(0, clean + dups), (clean, dups)]  # the rerun found it all stored
    assert {str(d) for d in queued} == {DAY1.isoformat(), DAY2.isoformat()}


def test_finalize_killed_before_commit_numbers_nothing_and_the_rerun_numbers_like_an_uninterrupted_one(
    after_day1, reference, postgres_settings, tmp_path
):
    """On PostgreSQL: the month's drafts, then finalize killed after numbering, before COMMIT."""
    s = Settings(
        config=postgres_settings.config,
        database_url=postgres_settings.database_url,
        lake=str(tmp_path / "lake"),
        landing=after_day1.landing,
    )
    ok(s, "accounts", "load", str(Path(s.landing) / "accounts.csv"))
    for day in (DAY1, DAY2):
        ok(s, "run-day", "--date", day.isoformat())
    close_month(s, MONTH, Path(s.lake).parent)
    ok(s, "invoices", "draft", "--month", MONTH)
    drafted = warehouse_state(s.database_url)
    assert drafted["invoices"] == reference["drafted"]["invoices"]
    killed = cli(s, "invoices", "finalize", "--month", MONTH, fault="invoices.finalize:kill")
    assert killed.returncode == -9
    assert warehouse_state(s.database_url) == drafted  # no number given, no counter moved
    ok(s, "invoices", "finalize", "--month", MONTH)
    assert warehouse_state(s.database_url) == reference["finalized"]


# -- two runs at once (PostgreSQL) -------------------------------------------------------------------


def _paused(settings: Settings, flag: Path, fault: str, *args: str) -> subprocess.Popen:
    """Start a run that pauses at the checkpoint ``fault`` (holding its lock) until ``flag`` is removed."""
    env = _env(settings, USAGE_BILLING_FAULT=f"{fault}:pause", USAGE_BILLING_FAULT_FILE=str(flag))
    proc = subprocess.Popen(
        [BIN, *args], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while not flag.exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the run never reached its pause"
        time.sleep(0.1)
    return proc


def test_a_second_ingest_at_the_same_time_exits_with_a_clear_message_or_waits(postgres_settings, tmp_path):
    s = postgres_settings
    flag = tmp_path / "paused"
    first = _paused(s, flag, "lake.commit", "events", "ingest", "--date", DAY2.isoformat())
    try:
        busy = cli(s, "events", "ingest", "--date", DAY2.isoformat())
        assert busy.returncode == 75
        lines = busy.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: another run of events ingest into ")
        assert "is in progress (PostgreSQL backend" in lines[0] and "USAGE_BILLING_LOCK_WAIT" in lines[0]

        waiting = subprocess.Popen(
            [BIN, "events", "ingest", "--date", DAY2.isoformat()],
            env=_env(s, USAGE_BILLING_LOCK_WAIT="120"),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(3)
        assert waiting.poll() is None, "the second run did not wait for the lock"
    finally:
        flag.unlink()
    assert first.wait(timeout=300) == 0, first.communicate()[1]
    assert waiting.wait(timeout=300) == 0, waiting.communicate()[1]

    engine = make_engine(s.database_url)
    with engine.connect() as conn:
        runs = conn.execute(
            text(
                "SELECT rows_read, clean, duplicates, quarantined FROM ingest_runs "
                "WHERE dataset = 'events' ORDER BY started_at"
            )
        ).all()
    engine.dispose()
    assert len(runs) == 2
    (read, clean, _, quarantined), second = runs
    assert clean > 0 and second == (
        read,
        0,
        read - quarantined,
        quarantined,
    )  # the waiter found it all stored
    ids = pa.concat_tables(
        lake.read_parquet(f, columns=["event_id"])
        for d in lake.partition_dates(s.lake, lake.EVENTS)
        for f in lake.list_files(lake.partition(s.lake, lake.EVENTS, d))
    )["event_id"]
    assert len(ids) == len(set(ids.to_pylist())) == clean


def test_two_meters_at_once_one_runs_one_exits_and_rows_are_not_doubled(postgres_settings, tmp_path):
    s = postgres_settings
    ok(s, "accounts", "load", str(Path(s.landing) / "accounts.csv"))
    ok(s, "run-day", "--date", DAY1.isoformat())
    ok(s, "quota", "meter", "--date", DAY1.isoformat())
    before = warehouse_state(s.database_url)
    first = _paused(
        s, tmp_path / "f", "warehouse.load.billable_usage", "quota", "meter", "--date", DAY1.isoformat()
    )
    second = cli(s, "quota", "meter", "--date", DAY1.isoformat())
    (tmp_path / "f").unlink()
    assert first.wait(timeout=300) == 0
    assert second.returncode == 75 and "another run of quota meter is in progress" in second.stderr
    assert warehouse_state(s.database_url) == before


def test_a_meter_that_loses_its_lock_stops_before_it_commits(postgres_settings, tmp_path):
    """Its lock connection terminated mid-run, a second meter takes the lock and commits; the first,
    resumed, finds its fencing token moved and commits nothing (exit 75)."""
    s = postgres_settings
    ok(s, "accounts", "load", str(Path(s.landing) / "accounts.csv"))
    ok(s, "run-day", "--date", DAY1.isoformat())
    flag = tmp_path / "paused"
    first = _paused(s, flag, "meter.load", "quota", "meter", "--date", DAY1.isoformat())
    try:
        engine = make_engine(s.database_url)
        lose_lock(engine, "quota meter")  # as an operator or a timeout would end its connection
        engine.dispose()
        second = cli(s, "quota", "meter", "--date", DAY1.isoformat())
        assert second.returncode == 0, second.stderr
        after_second = warehouse_state(s.database_url)
    finally:
        flag.unlink()
    code = first.wait(timeout=300)
    err = first.communicate()[1]
    assert code == 75, err
    assert "lost its lock" in err and "nothing was committed" in err and "Traceback" not in err, err
    assert warehouse_state(s.database_url) == after_second


def test_on_sqlite_a_second_run_finds_the_lock_file_held_and_names_the_holder(after_day1, tmp_path):
    s = _copy(after_day1, tmp_path / "run")
    flag = tmp_path / "paused"
    first = _paused(s, flag, "warehouse.load.usage_daily", "usage", "aggregate", "--date", DAY1.isoformat())
    try:
        second = cli(s, "usage", "aggregate", "--date", DAY1.isoformat())
    finally:
        flag.unlink()
    assert first.wait(timeout=300) == 0
    lines = second.stderr.strip().splitlines()
    assert second.returncode == 75 and len(lines) == 1, second.stderr
    assert lines[0].startswith(f"error: another run of usage aggregate is in progress (pid {first.pid} on ")
    assert (
        cli(s, "usage", "aggregate", "--date", DAY1.isoformat()).returncode == 0
    )  # released with the process


# -- the database connection killed mid-run (PostgreSQL) ---------------------------------------------


def test_a_connection_killed_mid_load_fails_clearly_rolls_back_and_the_rerun_is_correct(
    postgres_settings, sqlite_settings, tmp_path
):
    s = postgres_settings
    ok(s, "events", "ingest", "--date", DAY1.isoformat())
    flag = tmp_path / "paused"
    proc = _paused(s, flag, "warehouse.load.usage_daily", "usage", "aggregate", "--date", DAY1.isoformat())
    admin = make_engine(s.database_url)
    with admin.connect() as conn:
        killed = conn.execute(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'usage-billing' AND datname = current_database() "
                "AND pid <> pg_backend_pid()"
            )
        ).scalar_one()
    assert killed >= 1
    flag.unlink()
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 2
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr
    assert lines[-1].startswith("error: database operation failed, its transaction was rolled back: ")
    assert "terminat" in lines[-1] or "closed" in lines[-1]
    with admin.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM usage_daily")).scalar_one() == 0  # rolled back
    admin.dispose()

    ok(s, "usage", "aggregate", "--date", DAY1.isoformat())
    ref = sqlite_settings
    ok(ref, "events", "ingest", "--date", DAY1.isoformat())
    ok(ref, "usage", "aggregate", "--date", DAY1.isoformat())
    assert table_rows(s.database_url, UsageDaily) == table_rows(ref.database_url, UsageDaily)
    assert table_rows(s.database_url, ModelDaily) == table_rows(ref.database_url, ModelDaily)
