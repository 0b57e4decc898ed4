"""What this machine allows: the least work a 10M-event ingest and a 10M-event metering run must do,
each piece timed alone with pyarrow and sqlite3 (no checks, no duplicate search, no allocation, no
Beam), beside the time the targets leave for the whole run.

    .venv/bin/python -m benchmarks.floor [--events 10000000] [--workdir /tmp/ub-bench-floor]

- start-up: a Python process that imports what every Beam step imports, and nothing else;
- ingest (1.5M events/s from Parquet): the benchmark's landing Parquet files read and written back
  as the lake's zstd Parquet on two threads (again with statistics of every column, and with no
  compression and no statistics, to show how much of it is the encoding); every row spilled to Arrow
  IPC and read back (peak memory bounded by a shard means the rows leave memory between the read and
  the dedup); every event_id hashed and the hashes sorted;
- metering (2M events/s): the lake columns metering reads, the per-event allocation records and the
  ``billable_usage`` rows a real ``quota meter`` run wrote, the records written as the lake writes
  them on two threads, the rows loaded into a fresh SQLite warehouse by the project's own loader,
  and by its insert loop alone on rows already in key order: with the warehouse's WAL and sync, and
  with nothing kept through a crash (no journal, no sync: what SQLite cannot do faster).

Each piece is the best of three. The pieces' sum is a floor, not an estimate: a run does all of it and
more (validation, dedup, allocation, the commit), and SQLite has one writer, so its load runs on one
core whatever the rest does.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as dt
import shutil
import sqlite3
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import create_engine

from benchmarks import ingest as ingest_bench
from benchmarks import meter as meter_bench
from benchmarks.common import command_line, machine, run_measured, timed, write_section
from pipelines import lake
from pipelines.ingest.hashing import stable_hash
from pipelines.lake.parquet import _parquet_options
from pipelines.warehouse.engine import (
    _sqlite_executemany,
    insert_arrow,
    key_order,
    make_engine,
    read_arrow,
    upgrade,
)
from schemas.warehouse import BillableUsage

THREADS = 2
T = TypeVar("T")
IMPORTS = "import apache_beam, pyarrow.parquet, sqlalchemy"


def _startup() -> float:
    """Wall of a Python process importing Beam, pyarrow's Parquet and SQLAlchemy (best of 3)."""
    return min(run_measured([sys.executable, "-c", IMPORTS])[0] for _ in range(3))


def _on_threads(fn: Callable[[T], int], items: Iterable[T]) -> int:
    """``fn`` of every item, ``THREADS`` at a time: the sum of what they return (rows)."""
    with cf.ThreadPoolExecutor(THREADS) as pool:
        return sum(pool.map(fn, items))


def _fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def _copy(files: list[Path], out: Path, **options: object) -> int:
    """Read each file whole and write it back with ``options``."""

    def one(item: tuple[int, Path]) -> int:
        table = pq.read_table(item[1])
        pq.write_table(table, out / f"part-{item[0]:04d}.parquet", **options)
        return table.num_rows

    _fresh(out)
    return _on_threads(one, enumerate(files))


def _spill(table: pa.Table, path: Path) -> int:
    """Every row to an Arrow IPC file and back."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    with pa.OSFile(str(path)) as source:
        return pa.ipc.open_file(source).read_all().num_rows


def _hash_and_sort(table: pa.Table) -> int:
    hashes = stable_hash(table["event_id"])
    hashes.sort()
    return len(hashes)


def _ingest_rows(workdir: Path, size: int) -> tuple[list[str], int, tuple[float, float]]:
    """Returns table rows, the events, and the copy as the lake does it and the spill and hash."""
    folder = workdir / f"ingest-{size}"
    if not (folder / "parquet").exists():
        ingest_bench._generate(folder, size)
    files = sorted((folder / "parquet" / ingest_bench.DAY.isoformat()).iterdir())
    events = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    lake_options = _parquet_options(pq.read_schema(files[0]))
    rows = []
    for what, options in (
        ("read + write as the lake does (zstd, statistics of dates and times)", lake_options),
        ("read + write, zstd, statistics of every column", {**lake_options, "write_statistics": True}),
        (
            "read + write, no compression, no statistics",
            {**lake_options, "compression": "none", "write_statistics": False},
        ),
    ):
        seconds, n = timed(lambda options=options: _copy(files, workdir / "copy", **options), repeat=3)
        assert n == events
        rows.append((what, seconds))
    shutil.rmtree(workdir / "copy", ignore_errors=True)
    copy = rows[0][1]
    tables = [pq.read_table(f) for f in files]
    folder = _fresh(workdir / "spill")
    spill, n = timed(
        lambda: _on_threads(lambda it: _spill(it[1], folder / f"part-{it[0]:04d}.arrow"), enumerate(tables)),
        repeat=3,
    )
    assert n == events
    rows.append(
        ("every row to Arrow IPC and back (the spill bounded memory asks for before the dedup)", spill)
    )
    hashed, n = timed(lambda: _on_threads(_hash_and_sort, tables), repeat=3)
    assert n == events
    rows.append(("every event_id hashed (the pipeline's own hash) and the hashes sorted", hashed))
    shutil.rmtree(folder, ignore_errors=True)
    return [f"| {events:,} | {what} | {s:.2f} s |" for what, s in rows], events, (copy, spill + hashed)


def _arrow_schema(table) -> pa.Schema:  # type: ignore[no-untyped-def]
    types = {str: pa.string(), int: pa.int64(), dt.date: pa.date32()}
    return pa.schema([(c.name, types[c.type.python_type]) for c in table.columns])


def _meter_rows(workdir: Path, size: int) -> tuple[list[str], int, float, float, float]:
    """Returns table rows, the events, the read and the records' write, the fastest durable load and
    the load with nothing kept through a crash."""
    from pipelines.quota.transforms import COLUMNS

    root = workdir / f"meter-{size}"
    if not (root / "accounts.csv").exists():
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        meter_bench._generate(root, size)
    meter_bench._ours(root, [])  # a real run: its allocation records and billable rows are what is written
    events_files = sorted((root / "lake" / "events").glob("date=*/*.parquet"))
    events = sum(pq.ParquetFile(f).metadata.num_rows for f in events_files)
    read_s, n = timed(
        lambda: _on_threads(lambda f: pq.read_table(f, columns=COLUMNS).num_rows, events_files), repeat=3
    )
    assert n == events

    allocation_files = sorted((root / "lake" / "allocations").glob("date=*/*.parquet"))
    records = [pq.read_table(f) for f in allocation_files]
    out = workdir / "records"

    def write_records() -> None:
        _fresh(out)

        def one(item: tuple[int, pa.Table]) -> int:
            lake.write_parquet(str(out / f"part-{item[0]:04d}.parquet"), item[1])
            return item[1].num_rows

        _on_threads(one, enumerate(records))

    write_s, _ = timed(write_records, repeat=3)
    shutil.rmtree(out, ignore_errors=True)

    engine = make_engine(f"sqlite:///{root / 'w.db'}")
    table = BillableUsage.__table__
    with engine.connect() as conn:
        billable = read_arrow(conn, table.select(), _arrow_schema(table))
    engine.dispose()

    def load() -> None:
        db = workdir / "floor.db"
        _remove_database(db)
        fresh = make_engine(f"sqlite:///{db}")
        upgrade(fresh)
        with fresh.begin() as conn:
            insert_arrow(conn, table, billable)
        fresh.dispose()

    load_s, _ = timed(load, repeat=3)
    _remove_database(workdir / "floor.db")
    durable_s = _sqlite_bare(billable, root / "w.db", workdir / "bare.db", DURABLE)
    bare_s = _sqlite_bare(billable, root / "w.db", workdir / "bare.db", NOTHING)
    n_records = sum(t.num_rows for t in records)
    rows = [
        f"| {events:,} | read the columns metering reads ({len(COLUMNS)}) | {read_s:.2f} s |",
        f"| {n_records:,} | write the allocation records as the lake does (zstd) | {write_s:.2f} s |",
        f"| {billable.num_rows:,} | load the billable_usage rows into a fresh SQLite warehouse, the project's loader | {load_s:.2f} s |",
        f"| {billable.num_rows:,} | the same rows already in key order, the loader's insert loop alone, the warehouse's WAL and sync | {durable_s:.2f} s |",
        f"| {billable.num_rows:,} | the same, no journal, no sync, 64 KiB pages (nothing kept through a crash) | {bare_s:.2f} s |",
    ]
    return rows, events, read_s + write_s, min(load_s, durable_s), bare_s


DURABLE = ("PRAGMA journal_mode = WAL", "PRAGMA synchronous = NORMAL")  # the warehouse's own
NOTHING = ("PRAGMA page_size = 65536", "PRAGMA journal_mode = OFF", "PRAGMA synchronous = OFF")


def _sqlite_bare(billable: pa.Table, source: Path, target: Path, pragmas: tuple[str, ...]) -> float:
    """The billable rows loaded from Arrow by the warehouse's own insert loop
    (``warehouse._sqlite_executemany``: Python values per distinct text, 50 rows per INSERT, one
    transaction) and nothing else: the rows already in primary key order, a plain SQLAlchemy engine
    without the warehouse's connection pragmas, ``pragmas`` instead (best of 3). ``DURABLE``: what the
    warehouse keeps through a crash; ``NOTHING``: no journal, no sync, 64 KiB pages (15% faster than
    4 KiB without a journal, no different with WAL), the least SQLite can be asked to do."""
    table = BillableUsage.__table__
    with sqlite3.connect(source) as src:
        ddl = src.execute("SELECT sql FROM sqlite_master WHERE name = 'billable_usage'").fetchone()[0]
    billable = billable.take(key_order(billable, [c.name for c in table.primary_key.columns]))

    def load() -> None:
        _remove_database(target)
        engine = create_engine(f"sqlite:///{target}")
        try:
            with engine.begin() as conn:  # pysqlite opens the transaction at the first INSERT
                for statement in (*pragmas, ddl):
                    conn.exec_driver_sql(statement)
                _sqlite_executemany(conn, table, billable)
            with engine.connect() as conn:
                assert (
                    conn.exec_driver_sql("SELECT count(*) FROM billable_usage").scalar() == billable.num_rows
                )
        finally:
            engine.dispose()

    seconds, _ = timed(load, repeat=3)
    _remove_database(target)
    return seconds


def _remove_database(path: Path) -> None:
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        name.unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", default="/tmp/ub-bench-floor")
    parser.add_argument(
        "--events", type=int, default=10_000_000, help="events of each run (data kept per size)"
    )
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    startup = _startup()
    ingest_rows, ingest_events, (ingest_copy, ingest_dedup) = _ingest_rows(workdir, args.events)
    meter_rows, meter_events, meter_io, durable, bare = _meter_rows(workdir, args.events)
    ingest_budget = ingest_events / 1_500_000
    meter_budget = meter_events / 2_000_000
    body = f"""
Command: `{command_line("benchmarks.floor")}`
Machine: {machine()}
Date: {dt.date.today().isoformat()}

The least work a run at each target must do, each piece alone with pyarrow (and sqlite3), {THREADS}
threads, best of 3; no checks, no duplicate search, no allocation, no Beam. Start-up: a Python process importing
apache_beam, pyarrow.parquet and sqlalchemy, and nothing else: {startup:.2f} s.

Ingest, target 1.5M events/s: {ingest_events:,} events leave {ingest_budget:.2f} s for the run.

| events | piece | wall |
|---:|---|---:|
{chr(10).join(ingest_rows)}

Start-up, the copy as the lake does it, the spill and the hash: {startup + ingest_copy + ingest_dedup:.2f} s against
{ingest_budget:.2f} s; what a run does beyond them (reading every file whole aside: validation, finding the
duplicates among the sorted hashes, the quarantine, Beam and the commit) has the
{ingest_budget - startup - ingest_copy - ingest_dedup:.2f} s left, on two cores.

Metering, target 2M events/s: {meter_events:,} events leave {meter_budget:.2f} s for the run.

| rows | piece | wall |
|---:|---|---:|
{chr(10).join(meter_rows)}

Start-up, the read, the records' write and the fastest durable load: {startup + meter_io + durable:.2f} s against
{meter_budget:.2f} s. With the load that keeps nothing through a crash instead: {startup + meter_io + bare:.2f} s, which
leaves {meter_budget - startup - meter_io - bare:.2f} s to allocate and price the events.
"""
    write_section("What the machine allows (issues 3 and 5)", body)


if __name__ == "__main__":
    main()
