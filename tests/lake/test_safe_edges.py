"""Issue 22: no operator mistake can wipe, invent or block billing. Points 1 (the lake a warehouse is
bound to), 2 (only closed months are invoiced), 6 (usage mistakes) and 7 (locks), on SQLite and
PostgreSQL where the point involves the warehouse."""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from pipelines.cli import main
from pipelines.invoicing.months import month_lock
from pipelines.settings import Settings
from pipelines.warehouse.engine import make_engine
from pipelines.warehouse.locks import step_lock
from schemas.warehouse import BillableUsage, IngestRun, Invoice, LakeBinding, RecomputeQueue, UsageDaily
from tests.conftest import Built, build_once, cli_args, close_month, small_dates

DAYS = [d.isoformat() for d in small_dates()[:2]]


def _cli(capsys, s: Settings, *argv: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    code = main([*cli_args(s), *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line(code: int, err: str, *expected: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for needle in expected:
        assert needle in lines[0], lines[0]
    return lines[0]


def _count(url: str, table) -> int:  # type: ignore[no-untyped-def]
    engine = make_engine(url)
    with engine.connect() as conn:
        n = conn.execute(select(func.count()).select_from(table)).scalar_one()
    engine.dispose()
    return n


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def built_once(request, tmp_path_factory, small_landing) -> Iterator[Built]:  # type: ignore[no-untyped-def]
    """A warehouse built from two generated days (accounts, ingest, aggregate, meter), once per
    backend; each test gets a copy of it."""
    yield from build_once(
        request.param,
        tmp_path_factory.mktemp(f"built-{request.param}"),
        small_landing,
        [
            ["accounts", "load", str(Path(small_landing) / "accounts.csv")],
            *(["events", "ingest", "--date", day] for day in DAYS),
            ["usage", "aggregate", "--from", DAYS[0], "--to", DAYS[-1]],
            ["quota", "meter", "--from", DAYS[0], "--to", DAYS[-1]],
        ],
    )


@pytest.fixture
def built(built_once, tmp_path, request, capsys) -> Settings:  # type: ignore[no-untyped-def]
    settings = built_once.copy(tmp_path, request)
    capsys.readouterr()  # the build's output is not the test's
    return settings


def _state(s: Settings) -> tuple[int, int]:
    return _count(s.database_url, UsageDaily.__table__), _count(s.database_url, BillableUsage.__table__)


def test_a_mistyped_lake_changes_nothing_in_any_step(built, capsys, tmp_path):
    before = _state(built)
    assert before[0] > 0 and before[1] > 0
    typo = Settings(built.config, built.database_url, built.lake + "-laek", built.landing)
    steps = [
        ("usage", "aggregate", "--from", DAYS[0], "--to", DAYS[-1]),
        ("quota", "meter", "--from", DAYS[0], "--to", DAYS[-1]),
        ("run-day", "--date", DAYS[-1]),
        ("events", "ingest", "--date", DAYS[-1]),
        ("dq", "check", "--date", DAYS[0]),
        ("retirement", "report", "--as-of", DAYS[-1], "--out", str(tmp_path / "r")),
    ]
    for step in steps:
        code, _, err = _cli(capsys, typo, *step)
        _one_line(code, err, "no lake at", "nothing changed", str(Path(built.lake).resolve()))
    assert _state(built) == before
    assert not Path(typo.lake).exists()  # not even created


def test_another_lake_or_an_emptied_one_is_refused(built, capsys, tmp_path):
    before = _state(built)
    other = tmp_path / "other-warehouse.db"
    elsewhere = Settings(built.config, f"sqlite:///{other}", str(tmp_path / "lake2"), built.landing)
    assert main(["--database-url", elsewhere.database_url, "db", "upgrade"]) == 0
    assert _cli(capsys, elsewhere, "events", "ingest", "--date", DAYS[0])[0] == 0  # a second lake
    foreign = Settings(built.config, built.database_url, elsewhere.lake, built.landing)
    code, _, err = _cli(capsys, foreign, "usage", "aggregate", "--date", DAYS[0])
    _one_line(code, err, "but this warehouse was built from lake", "nothing changed")
    shutil.rmtree(Path(built.lake) / "events")
    code, _, err = _cli(capsys, built, "usage", "aggregate", "--date", DAYS[0])
    _one_line(code, err, "holds no events partition")
    assert _state(built) == before


def test_a_removed_partition_is_not_aggregated_to_nothing(built, capsys):
    before = _state(built)
    shutil.rmtree(Path(built.lake) / "events" / f"date={DAYS[0]}")
    code, _, err = _cli(capsys, built, "usage", "aggregate", "--date", DAYS[0])
    _one_line(code, err, f"no events partition for {DAYS[0]}", "usage_daily holds")
    code, _, err = _cli(capsys, built, "quota", "meter", "--from", DAYS[0], "--to", DAYS[-1])
    _one_line(code, err, "quota meter", f"no events partition for {DAYS[0]}")
    assert _state(built) == before


def test_a_rerun_with_fewer_landing_files_keeps_the_quarantine_of_the_others(built, capsys, tmp_path):
    from tests.data.bad.corpus import event, line

    day = "2026-03-04"
    landing = tmp_path / "landing"
    (landing / day).mkdir(parents=True)
    for name in ("one", "two"):
        bad = event(f"{name}-bad", event_time=f"{day}T10:00:00Z", output_tokens=-1)
        (landing / day / f"{name}.jsonl").write_bytes(line(bad) + b"\n")
    here = Settings(built.config, built.database_url, built.lake, str(landing))
    assert _cli(capsys, here, "events", "ingest", "--date", day)[0] == 0
    assert _quarantine_files(built.lake, day) == {"one.jsonl": 1, "two.jsonl": 1}
    (landing / day / "two.jsonl").unlink()  # the rerun reads one file only (a folder partly restored)
    (landing / day / "one.jsonl").write_bytes(line(event("one-bad", event_time=f"{day}T10:00:00Z")) + b"\n")
    assert _cli(capsys, here, "events", "ingest", "--date", day)[0] == 0
    assert _quarantine_files(built.lake, day) == {"two.jsonl": 1}  # one.jsonl fixed, two.jsonl kept


def _quarantine_files(lake_root: str, day: str) -> dict[str, int]:
    from collections import Counter

    from pipelines.ingest.commit import committed_quarantine

    table = committed_quarantine(lake_root, dt.date.fromisoformat(day))
    return dict(Counter(table["source_file"].to_pylist())) if table.num_rows else {}


def test_a_moved_lake_needs_a_recorded_rebind(built, capsys, tmp_path):
    moved = tmp_path / "moved-lake"
    shutil.move(built.lake, moved)
    there = Settings(built.config, built.database_url, str(moved), built.landing)
    code, _, err = _cli(capsys, there, "usage", "aggregate", "--date", DAYS[0])
    _one_line(code, err, "lake rebind")
    code, _, err = _cli(capsys, there, "lake", "rebind", "--reason", "")
    _one_line(code, err, "needs a --reason")
    code, out, _ = _cli(capsys, there, "lake", "rebind", "--reason", "moved to the bigger disk")
    assert code == 0 and str(moved.resolve()) in out
    assert _cli(capsys, there, "usage", "aggregate", "--date", DAYS[0])[0] == 0
    engine = make_engine(built.database_url)
    with engine.connect() as conn:
        rows = conn.execute(select(LakeBinding).order_by(LakeBinding.bound_at)).all()
    engine.dispose()
    assert len(rows) == 2 and rows[0].lake_id == rows[1].lake_id
    assert rows[1].lake_path == str(moved.resolve()) and "moved to the bigger disk" in rows[1].reason
    assert "@" in rows[1].bound_by
    code, out, _ = _cli(capsys, there, "lake", "show")
    assert code == 0 and rows[1].lake_id in out


# -- point 2: only closed months are invoiced ---------------------------------------------------------


def test_open_future_and_out_of_range_months_are_refused(built, capsys):
    code, _, err = _cli(capsys, built, "invoices", "draft", "--month", "9999-12")
    _one_line(code, err, "outside the supported range")
    code, _, err = _cli(capsys, built, "invoices", "draft", "--month", "2099-12")
    _one_line(code, err, "has not started yet")
    code, _, err = _cli(capsys, built, "invoices", "draft", "--month", "2026-03")
    line = _one_line(code, err, "is not closed", "--open-month")
    assert "landing date 2026-03-04 is not ingested" in line  # the first missing day, named
    code, out, _ = _cli(capsys, built, "invoices", "draft", "--month", "2026-03", "--open-month")
    assert code == 0 and "OPEN MONTH" in out
    engine = make_engine(built.database_url)
    with engine.connect() as conn:
        marks = set(conn.execute(select(Invoice.open_month).where(Invoice.period == "2026-03")).scalars())
    engine.dispose()
    assert marks == {True}
    code, _, err = _cli(capsys, built, "invoices", "finalize", "--month", "2026-03")
    _one_line(code, err, "cannot finalize 2026-03", "not closed")
    code, _, err = _cli(capsys, built, "invoices", "finalize", "--month", "2026-05")
    _one_line(code, err, "cannot finalize 2026-05")


def test_a_closed_month_needs_every_day_metered_after_its_last_ingest(built, capsys, tmp_path):
    close_month(built, "2026-03", tmp_path)
    code, out, _ = _cli(capsys, built, "invoices", "draft", "--month", "2026-03", "--open-month")
    assert code == 0 and "OPEN MONTH" not in out  # closed: an ordinary draft
    engine = make_engine(built.database_url)
    with engine.begin() as conn:  # an ingest changed a March UTC day after metering
        conn.execute(
            insert(RecomputeQueue.__table__).values(
                day=dt.date(2026, 3, 10), run_id="ingest-later", queued_at=dt.datetime.now(dt.UTC)
            )
        )
    engine.dispose()
    code, _, err = _cli(capsys, built, "invoices", "finalize", "--month", "2026-03")
    _one_line(code, err, "UTC day 2026-03-10 changed", "quota meter --month 2026-03")
    assert _cli(capsys, built, "quota", "meter", "--month", "2026-03")[0] == 0
    code, _, err = _cli(capsys, built, "invoices", "finalize", "--month", "2026-03")
    assert code == 0, err
    engine = make_engine(built.database_url)
    with engine.connect() as conn:
        numbered = conn.execute(
            select(func.count()).where(Invoice.period == "2026-03", Invoice.invoice_number.is_not(None))
        ).scalar_one()
    engine.dispose()
    assert numbered > 0


def test_drafts_of_an_open_month_are_never_numbered_even_once_it_closes(built, capsys, tmp_path):
    assert _cli(capsys, built, "invoices", "draft", "--month", "2026-03", "--open-month")[0] == 0
    close_month(built, "2026-03", tmp_path)
    code, _, err = _cli(capsys, built, "invoices", "finalize", "--month", "2026-03")
    _one_line(code, err, "made while the month was open", "invoices draft --month 2026-03")
    assert _cli(capsys, built, "invoices", "draft", "--month", "2026-03")[0] == 0
    assert _cli(capsys, built, "invoices", "finalize", "--month", "2026-03")[0] == 0


# -- point 7: every writing step takes the same kind of lock; no other role can take it ---------------


def test_a_second_invoice_run_of_a_month_exits_75(built, capsys):
    engine = make_engine(built.database_url)
    with step_lock(engine, month_lock("2026-03")):
        for argv in (
            ("invoices", "draft", "--month", "2026-03", "--open-month"),
            ("invoices", "finalize", "--month", "2026-03"),
            ("invoices", "void", "--number", "INV-202603-000001", "--reason", "test"),
        ):
            code, _, err = _cli(capsys, built, *argv)
            assert code == 75 and "another run of invoices 2026-03 is in progress" in err, err
            assert len(err.strip().splitlines()) == 1
        code, _, err = _cli(capsys, built, "invoices", "draft", "--month", "2026-04", "--open-month")
        assert code != 75  # another month is another lock
    engine.dispose()


@pytest.mark.postgres
def test_the_finance_role_can_neither_take_nor_block_the_pipelines_locks(postgres_settings, capsys):
    s = postgres_settings
    assert _cli(capsys, s, "accounts", "load", str(Path(s.landing) / "accounts.csv"))[0] == 0
    assert _cli(capsys, s, "events", "ingest", "--date", DAYS[0])[0] == 0
    reader = make_engine(str(make_url(s.database_url).set(username="finance_reader")))
    with reader.connect() as conn:
        with pytest.raises(DBAPIError, match="permission denied"):
            conn.execute(text("SELECT name FROM pipeline_locks FOR UPDATE NOWAIT"))
        conn.rollback()
        with pytest.raises(DBAPIError, match="permission denied"):
            conn.execute(text("LOCK TABLE pipeline_locks IN ACCESS EXCLUSIVE MODE NOWAIT"))
        conn.rollback()
        # Every advisory key it can think of, held: the pipeline does not use advisory locks.
        for name in ("usage aggregate", "quota meter", "invoices 2026-03", f"events ingest into {s.lake}"):
            conn.execute(text("SELECT pg_advisory_lock(hashtext(:n))"), {"n": name})
        conn.commit()
        assert _cli(capsys, s, "usage", "aggregate", "--date", DAYS[0])[0] == 0
        assert _cli(capsys, s, "quota", "meter", "--date", DAYS[0])[0] == 0
    reader.dispose()


# -- point 3: unpriced usage stops at the door, and quarantined rows can be replayed ------------------


def test_quarantined_rows_are_replayed_once_their_cause_is_fixed(sqlite_settings, capsys, tmp_path):
    from tests.data.bad.corpus import event, line

    s = sqlite_settings
    assert _cli(capsys, s, "accounts", "load", str(Path(s.landing) / "accounts.csv"))[0] == 0
    day = "2026-03-04"
    landing = tmp_path / "landing"
    (landing / day).mkdir(parents=True)
    rows = [
        event("ok-1", event_time=f"{day}T09:00:00Z", account_id="acct-00001"),
        event("fast-1", event_time=f"{day}T10:00:00Z", account_id="acct-00001", speed_tier="ultrafast"),
        event("fast-2", event_time=f"{day}T11:00:00Z", account_id="acct-00002", speed_tier="ultrafast"),
        event("neg-1", event_time=f"{day}T12:00:00Z", output_tokens=-1),
    ]
    (landing / day / "batch.jsonl").write_bytes(b"\n".join(line(r) for r in rows) + b"\n")
    here = Settings(s.config, s.database_url, s.lake, str(landing))
    code, out, _ = _cli(capsys, here, "run-day", "--date", day)
    assert code == 0 and "quarantined 3" in out

    code, _, err = _cli(capsys, here, "events", "replay", "--date", day, "--reason", "no_price")
    assert code == 0, err  # nothing changed yet: replayed and quarantined again
    assert _quarantine_reasons(s.lake, day) == {"no_price": 2, "negative_tokens": 1}

    priced = tmp_path / "catalog.toml"  # the fix: the ultrafast tier priced from March
    priced.write_text(
        Path(s.config).read_text()
        + '\n[[prices]]\nmodel = "gpt-5.6-sol"\ntier = "ultrafast"\neffective_from = 2026-03-01\n'
        'input = "6.00"\ncached_input = "0.60"\noutput = "48.00"\n'
    )
    fixed = Settings(str(priced), s.database_url, s.lake, str(landing))
    code, out, err = _cli(capsys, fixed, "events", "replay", "--date", day, "--reason", "no_price")
    assert code == 0, err
    assert "replayed 2 quarantined rows" in out and "1 quarantine rows left" in out
    assert _quarantine_reasons(s.lake, day) == {"negative_tokens": 1}
    engine = make_engine(s.database_url)
    with engine.connect() as conn:
        runs = conn.execute(
            select(IngestRun.rows_read, IngestRun.clean, IngestRun.quarantined, IngestRun.duplicates)
            .where(IngestRun.landing_date == dt.date.fromisoformat(day))
            .order_by(IngestRun.started_at)
        ).all()
        ultrafast = conn.execute(
            select(func.sum(UsageDaily.requests)).where(UsageDaily.speed_tier == "ultrafast")
        ).scalar_one()
    engine.dispose()
    assert [tuple(r) for r in runs] == [(4, 1, 3, 0), (2, 0, 2, 0), (2, 2, 0, 0)]  # each run conserves
    assert ultrafast == 2  # aggregated: the replay ran the recompute
    code, _, err = _cli(capsys, fixed, "events", "replay", "--date", day, "--reason", "no_price")
    _one_line(code, err, "no replayable quarantined row with reason no_price")
    code, _, err = _cli(capsys, fixed, "events", "replay", "--date", day)  # the rest fails again
    assert code == 0 and _quarantine_reasons(s.lake, day) == {"negative_tokens": 1}


def _quarantine_reasons(lake_root: str, day: str) -> dict[str, int]:
    from collections import Counter

    from pipelines.ingest.commit import committed_quarantine

    table = committed_quarantine(lake_root, dt.date.fromisoformat(day))
    return dict(Counter(table["reason"].to_pylist())) if table.num_rows else {}


# -- point 4: a landing file that changes while it is read is read again, never in part --------------


def test_a_parquet_file_replaced_after_the_listing_is_read_again_whole(sqlite_settings, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.data.bad.corpus import event
    from tests.runtime.test_faults import _paused

    s = sqlite_settings
    day = "2026-03-04"
    landing = tmp_path / "landing"
    (landing / day).mkdir(parents=True)
    path = landing / day / "gateway.parquet"
    ten = [event(f"first-{i}", event_time=f"{day}T10:00:00Z") for i in range(10)]
    pq.write_table(pa.Table.from_pylist(ten), path)
    here = Settings(s.config, s.database_url, s.lake, str(landing))
    flag = tmp_path / "paused"
    proc = _paused(here, flag, "ingest.listed", "events", "ingest", "--date", day)
    fifty = [event(f"second-{i}", event_time=f"{day}T11:00:00Z") for i in range(50)]
    pq.write_table(pa.Table.from_pylist(fifty), path.with_suffix(".tmp"), row_group_size=10)
    path.with_suffix(".tmp").rename(path)  # the producer replaces the file: 5 row groups now
    flag.unlink()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "read 50 rows: clean 50" in out  # the new file, whole (not 10 rows of it)
    assert "changed while this run read it" in err  # said, and read again


def test_reading_a_changed_file_refuses_instead_of_mixing(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines.ingest.parquet_files import read_parquet_unit
    from pipelines.ingest.readers import LandingFileChanged, read_json_file, stamp
    from tests.data.bad.corpus import event, line

    path = tmp_path / "a.parquet"
    pq.write_table(pa.Table.from_pylist([event("a")]), path)
    listed = stamp(str(path))
    pq.write_table(pa.Table.from_pylist([event("a"), event("b")]), path)
    with pytest.raises(LandingFileChanged, match="changed while this run read it"):
        read_parquet_unit(str(path), 0, dt.date(2026, 3, 4), listed)
    jsonl = tmp_path / "b.jsonl"
    jsonl.write_bytes(line(event("c")) + b"\n")
    listed = stamp(str(jsonl))
    jsonl.write_bytes(line(event("c")) + b"\n" + line(event("d")) + b"\n")
    with pytest.raises(LandingFileChanged):
        list(read_json_file(str(jsonl), dt.date(2026, 3, 4), listed))
    jsonl.unlink()
    with pytest.raises(LandingFileChanged, match="disappeared"):
        list(read_json_file(str(jsonl), dt.date(2026, 3, 4), listed))


# -- point 6: every mistake is one line and exit 2; database failures too ----------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["frobnicate"],
        ["invoices", "draft"],
        ["invoices", "draft", "--mnth", "2026-03"],
        ["events", "generate", "--days", "abc"],
        [],
        ["invoices"],
        ["quota", "meter", "--month", "9999-12"],
        ["usage", "aggregate", "--date", "9999-12-31"],
        ["invoices", "draft", "--month", "0001-01"],
        ["--database-url", "postgresql://relu:p@zz9q@127.0.0.1/test", "db", "upgrade"],
        # Beam flags after -- are held to the bounds of the command line: no whole day quarantined
        ["events", "ingest", "--date", "2026-03-02", "--", "--lateness_days=-1"],
        ["events", "ingest", "--date", "2026-03-02", "--", "--lateness_days=100000"],
        ["events", "ingest", "--date", "2026-03-02", "--", "--max_tokens_per_event=0"],
        ["usage", "aggregate", "--date", "2026-03-02", "--", "--run_id=../../outside"],
    ],
)
def test_usage_mistakes_are_one_line_and_exit_2(argv, capsys, tmp_path):
    own_url = argv[:1] == ["--database-url"]
    code = main(argv if own_url else ["--database-url", f"sqlite:///{tmp_path / 'w.db'}", *argv])
    err = capsys.readouterr().err
    _one_line(code, err)
    assert "zz9q" not in err


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("usage-billing ")


@pytest.mark.slow
@pytest.mark.postgres
def test_a_statement_timeout_ends_with_one_line_and_a_rollback(postgres_settings):
    from tests.runtime.test_faults import cli, ok

    s = postgres_settings
    ok(s, "accounts", "load", str(Path(s.landing) / "accounts.csv"))
    ok(s, "events", "ingest", "--date", DAYS[0])
    ok(s, "usage", "aggregate", "--date", DAYS[0])
    before = _count(s.database_url, UsageDaily.__table__)
    engine = make_engine(s.database_url)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM usage_daily"))  # the rerun must load them again, via COPY
    engine.dispose()
    done = cli(s, "usage", "aggregate", "--date", DAYS[0], PGOPTIONS="-c statement_timeout=1")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    # PostgreSQL's own timeout, or the client's cancel of the same statement when it gives up first
    # on a loaded machine ("canceling statement due to user request"): either way, one line.
    assert "canceling statement due to" in lines[0] or "timeout" in lines[0], lines[0]
    assert _count(s.database_url, UsageDaily.__table__) == 0  # rolled back, nothing half loaded
    ok(s, "usage", "aggregate", "--date", DAYS[0])
    assert _count(s.database_url, UsageDaily.__table__) == before


def test_a_warehouse_file_removed_during_a_run_is_not_reported_as_success(sqlite_settings, tmp_path):
    from tests.runtime.test_faults import _paused, ok

    s = sqlite_settings
    ok(s, "accounts", "load", str(Path(s.landing) / "accounts.csv"))
    ok(s, "events", "ingest", "--date", DAYS[0])
    flag = tmp_path / "paused"
    proc = _paused(s, flag, "warehouse.load.usage_daily", "usage", "aggregate", "--date", DAYS[0])
    db = Path(s.database_url.removeprefix("sqlite:///"))
    for part in db.parent.glob(db.name + "*"):
        if part.is_file():
            part.unlink()
    flag.unlink()
    _, err = proc.communicate(timeout=300)
    lines = err.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "removed or replaced" in lines[0], err


def test_an_accounts_file_with_a_column_twice_is_refused(sqlite_settings, capsys, tmp_path):
    bad = tmp_path / "accounts.csv"
    bad.write_text("account_id,plan,timezone,active_from,active_until,plan\na1,plus,UTC,2026-03-01,,pro\n")
    code, _, err = _cli(capsys, sqlite_settings, "accounts", "load", str(bad))
    _one_line(code, err, "column 'plan' appears more than once")
    bad.write_text("account_id,plan,timezone,active_from,active_until\na\x00b,plus,UTC,2026-03-01,\n")
    code, _, err = _cli(capsys, sqlite_settings, "accounts", "load", str(bad))
    _one_line(code, err, "control character U+0000")
    bad.write_text("account_id,plan,timezone,active_from,active_until\nab,plus,UTC,1900-03-01,\n")
    code, _, err = _cli(capsys, sqlite_settings, "accounts", "load", str(bad))
    _one_line(code, err, "outside the supported range")
    bad.write_bytes(
        b"\xef\xbb\xbfaccount_id,plan,timezone,active_from,active_until\nab,plus,UTC,2026-03-01,\n"
    )
    assert (
        _cli(capsys, sqlite_settings, "accounts", "load", str(bad))[0] == 0
    )  # a spreadsheet's BOM is no column
    bad.write_bytes(b"account_id,plan,timezone,active_from,active_until\na\xffb,plus,UTC,2026-03-01,\n")
    code, _, err = _cli(capsys, sqlite_settings, "accounts", "load", str(bad))
    _one_line(code, err, "not UTF-8")
