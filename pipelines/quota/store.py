"""What the meter keeps: allocation records and pool balances in the lake, spilled per shard and
committed per local day, the stored balances (with their stamps) that the next run starts from instead
of reading its whole window again, and the checked load of its rows into the warehouse."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
from collections.abc import Iterator
from concurrent.futures import Executor

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import and_, delete, insert, select

from billing.billable import sum_by
from billing.calendar import Coupling
from pipelines import lake
from pipelines.errors import UsageBillingError
from pipelines.ingest.hashing import HASH, runs, shard_segments, stable_hash
from pipelines.notify.pools import record_pools
from pipelines.quota.checks import EVENTS_ALLOCATED, EVENTS_READ, check_events_conserved, check_totals
from pipelines.warehouse.engine import as_date, insert_arrow, replace_rows
from pipelines.warehouse.locks import Fence
from pipelines.warehouse.remeter import plans_digest
from schemas.catalog import Catalog
from schemas.lake import ALLOCATION_SCHEMA, BALANCE_SCHEMA
from schemas.warehouse import BillableUsage, MeteredDate, MeteredDay, MeterQueue, PoolDraw, PoolUsage

log = logging.getLogger(__name__)
SHARD_ROWS = 250_000  # events allocated at once; each shard stages 7 objects the driver reads back

ALLOCATIONS = "allocations"


POOL_STATE = "pool_state"


STATE_STAMP = "_stamp.json"


STATE_VERSION = 2  # bump when the allocation rule changes: older states are then not used


STATE_DAYS = 8  # the last dates of a run whose balances are kept (see state_dates)


def read_window(dates: list[dt.date], catalog: Catalog) -> tuple[dt.date, dt.date]:
    """UTC dates to read: from the earliest local day the balances of the first date depend on (the
    chain of coupled pool periods, ``Coupling.depends_from``), to the last local date + 1 (local
    dates are UTC-12 .. UTC+14 of a UTC date)."""
    earliest = Coupling(catalog).depends_from(dates[0])
    return earliest - dt.timedelta(days=1), dates[-1] + dt.timedelta(days=1)


def dependent_days(engine, catalog: Catalog, last: dt.date) -> list[dt.date]:
    """Days after ``last`` that were metered already and whose balances events up to ``last`` can
    change (up to ``Coupling.affects_until``): a run of dates through ``last`` meters them again."""
    until = Coupling(catalog).affects_until(last)
    if until <= last:
        return []
    m = MeteredDate.__table__.c
    with engine.connect() as conn:
        days = conn.execute(select(m.local_day).where(m.local_day > last, m.local_day <= until)).scalars()
        return sorted(as_date(d) for d in days)


def _day_runs(rows: pa.Table) -> tuple[pa.Table, list[tuple[dt.date, tuple[int, int]]]]:
    """``rows`` sorted by local_day (stable) and each day's (start, end) in them: one slice per day,
    not one scan of the rows per day."""
    rows = rows.take(pc.sort_indices(rows["local_day"]))
    days = rows["local_day"].to_numpy().astype("datetime64[D]")
    return rows, [(days[start].item(), (start, end)) for start, end in runs(days)]


# One record per (event, pool) that covered tokens of it: lake ``allocations/date=L/``.
ALLOCATION_SPILL = "_allocations"  # per shard: the records as Arrow IPC, one segment per local day


STATE_SPILL = "_pool_state"  # per shard: the kept balances, the same way


ROWS_PER_GROUP = 256 * 1024  # allocation records per row group of a day's file


def pool_draws(records: pa.Table, model: pa.Array | pa.ChunkedArray) -> pa.Table:
    """The allocation records of a shard summed per local day, account, plan, pool and model: what
    each pool covered of each model's usage (the backup tank), as ``pool_draws`` holds it."""
    table = records.select(["local_day", "account_id", "plan", "pool", "tokens"]).append_column(
        "model", pc.cast(model, pa.string())
    )
    keys = ["local_day", "account_id", "plan", "pool", "model"]
    g = table.group_by(keys, use_threads=False).aggregate([("tokens", "sum")])
    return g.rename_columns([*keys, "tokens"])


def spill_days(rows: pa.Table, folder: str, name: str) -> None:
    """A shard's rows, sorted by local day, as one spill file with a segment per day, and a
    sidecar naming each day's range: the driver joins every shard's day into one file of its own."""
    if rows.num_rows == 0:
        return
    rows, days = _day_runs(rows)
    path = lake.join(folder, f"{name}.arrow")
    ranges = lake.write_ipc_segments(path, rows, [(start, end - start) for _, (start, end) in days])
    lake.write_json(
        lake.join(folder, f"{name}.json"),
        {day.isoformat(): list(byte_range) for (day, _), byte_range in zip(days, ranges, strict=True)},
    )


def _commit_allocations(
    lake_root: str, stage: str, run_id: str, dates: list[dt.date], executor: Executor | None
) -> int:
    """The allocation records of each local day, joined from every shard's spill, replace the day's
    partition; a day without records commits an empty partition. Returns the rows."""
    rows = _join_spilled(stage, ALLOCATION_SPILL, ALLOCATIONS, ALLOCATION_SCHEMA, dates, executor)
    for day in dates:
        staged = lake.partition(lake.join(stage, "_commit"), ALLOCATIONS, day)
        lake.commit(staged, lake.partition(lake_root, ALLOCATIONS, day), run_id)
    return rows


def _join_spilled(
    stage: str, spill: str, dataset: str, schema: pa.Schema, days: list[dt.date], executor: Executor | None
) -> int:
    """Each day's rows of every shard's spill (``spill_days``) as one staged file of the day's
    partition (``part-0000.parquet``), row groups of ``ROWS_PER_GROUP``: not one small file per shard
    and day (metering 10M events over 28 days wrote 100 per day). A day at a time is a task of
    ``executor`` (the run's Dask cluster: the driver reads and writes none of the rows), or of this
    process without one; it holds one row group at a time. A day without rows gets no file. Returns
    the rows."""
    folder = lake.join(stage, spill)
    pieces: dict[str, list[tuple[str, int, int]]] = {}
    for sidecar in lake.list_files(folder, "*.json"):
        data = sidecar.removesuffix(".json") + ".arrow"
        for day, (first, end) in lake.read_json(sidecar).items():
            pieces.setdefault(day, []).append((data, first, end))
    todo = [(day, pieces[day.isoformat()]) for day in days if day.isoformat() in pieces]
    if executor is None:  # the days share the open spill files (one mapping per file, not per day)
        with lake.IpcSegments() as spills:
            return sum(_join_day(stage, dataset, schema, day, day_pieces, spills) for day, day_pieces in todo)
    joins = [executor.submit(_join_day, stage, dataset, schema, day, day_pieces) for day, day_pieces in todo]
    return sum(join.result() for join in joins)


def _join_day(
    stage: str, dataset: str, schema: pa.Schema, day: dt.date, pieces: list[lake.Segment],
    shared: lake.IpcSegments | None = None,
) -> int:
    """One day of ``_join_spilled`` (read through ``shared`` open spill files, or its own); the rows."""
    rows = 0
    staged = lake.partition(lake.join(stage, "_commit"), dataset, day)
    with contextlib.nullcontext(shared) if shared is not None else lake.IpcSegments() as spills:
        writer = lake.ParquetAppender(lake.join(staged, "part-0000.parquet"), schema)
        buffer: list[pa.Table] = []
        try:
            for table in _read_pieces(spills, pieces):
                buffer.append(table)
                if sum(t.num_rows for t in buffer) >= ROWS_PER_GROUP:
                    rows += _flush(writer, buffer)
            rows += _flush(writer, buffer)
        finally:
            writer.close()
    return rows


def _read_pieces(spills: lake.IpcSegments, pieces: list[lake.Segment]) -> Iterator[pa.Table]:
    """The pieces' rows in order: a local file's mapped, an object store's requested many at a time
    (each request mostly waits on the server), ``lake.READ_BATCH_BYTES`` held at once."""
    if all(lake.is_local(path) for path, _, _ in pieces):
        yield from (spills.read(*piece) for piece in pieces)
        return
    for batch in lake.in_batches(pieces, lambda piece: piece[2] - piece[1], lake.READ_BATCH_BYTES):
        yield from lake.read_ipc_segments(batch)


def _flush(writer: lake.ParquetAppender, buffer: list[pa.Table]) -> int:
    if not buffer:
        return 0
    table = pa.concat_tables(buffer).combine_chunks()  # spilled in the file's schema already
    buffer.clear()
    writer.write(table)
    return table.num_rows


def _commit_days(lake_root: str, stage: str, run_id: str, dates: list[dt.date], dataset: str) -> int:
    """One partition per local day: the day's rows (one file per shard, staged by the pipeline)
    replace the previous ones; a day without rows commits an empty partition. Returns the rows."""
    rows = 0
    for day in dates:
        staged = lake.partition(lake.join(stage, "_commit"), dataset, day)
        rows += sum(lake.open_parquet(f).metadata.num_rows for f in lake.list_files(staged))
        lake.commit(staged, lake.partition(lake_root, dataset, day), run_id)
    return rows


class StateStamps:
    """What the balances at the end of a local day were computed from: the allocation rule's version,
    the catalog's plans, the accounts, and the event files of the UTC days the balances going on the
    next day depend on (``read_window``). Equal stamps: the state is still right."""

    def __init__(
        self, lake_root: str, catalog: Catalog, accounts: pa.Table, held: frozenset[dt.date] = frozenset()
    ) -> None:
        # ``held``: dates the data-quality gate holds back, read as empty: their stamp says so, so a
        # state made while one was held is not used once it is accepted
        self.lake_root, self.catalog, self.held = lake_root, catalog, held
        ordered = accounts.sort_by([(c, "ascending") for c in accounts.column_names])
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, ordered.schema) as writer:
            writer.write_table(ordered)
        self.base = {
            "version": STATE_VERSION,
            "plans": plans_digest(catalog),
            "accounts": hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest(),
        }
        self._days: dict[dt.date, str] = {}

    def _files(self, day: dt.date) -> str:
        if day in self.held:
            return "held back by the data-quality gate"
        if day not in self._days:
            folder = lake.partition(self.lake_root, lake.EVENTS, day)
            listing = [
                (p.rsplit("/", 1)[-1], size, mtime) for p, size, mtime in lake.stamps(lake.list_files(folder))
            ]
            self._days[day] = hashlib.sha256(json.dumps(listing).encode()).hexdigest()
        return self._days[day]

    def of(self, day: dt.date) -> dict:
        # UTC days from the earliest day the next day's balances depend on (coupled periods included,
        # minus a day for zones east of UTC) to the next day (local ``day`` ends there west of UTC).
        lo, hi = read_window([day + dt.timedelta(days=1)], self.catalog)[0], day + dt.timedelta(days=1)
        events = [self._files(lo + dt.timedelta(days=i)) for i in range((hi - lo).days + 1)]
        return {
            **self.base,
            "day": day.isoformat(),
            "events": hashlib.sha256("".join(events).encode()).hexdigest(),
        }


def state_dates(lake_root: str, dates: list[dt.date]) -> list[dt.date]:
    """The dates whose end-of-day balances a run keeps: where a later run can start. Only dates whose
    next UTC day has events (until those arrive, the stamp is bound to change); of those, the last
    ``STATE_DAYS`` (a daily run starts the day before its earliest late event) and each month's last
    day (``--month``). Not every day of a long backfill: a file per date."""
    ready = [
        d
        for d in dates
        if lake.folder_exists(lake.partition(lake_root, lake.EVENTS, d + dt.timedelta(days=1)))
    ]
    return [
        d for i, d in enumerate(ready) if i >= len(ready) - STATE_DAYS or (d + dt.timedelta(days=1)).day == 1
    ]


def usable_state(lake_root: str, day: dt.date, stamps: StateStamps) -> list[str] | None:
    """The files of the balances at the end of ``day`` if their stamp still matches and they are all
    there, else None."""
    folder = lake.partition(lake_root, POOL_STATE, day)
    marker = lake.partition_file(folder, STATE_STAMP)
    if not lake.exists(marker):
        return None
    try:
        stamp = lake.read_json(marker)
        files = lake.list_files(folder)
        rows = _file_rows(files)
    except (ValueError, OSError, pa.ArrowException, UsageBillingError) as exc:  # unreadable: no state
        log.warning("not using the pool balances of %s: %s", day, exc)
        return None
    if not isinstance(stamp, dict) or stamp.pop("files", None) != rows or stamp != stamps.of(day):
        return None
    return files


def _file_rows(files: list[str]) -> dict[str, int]:
    """File name -> rows: what a state's stamp says it holds (a lost or extra file makes it unusable)."""
    return {f.rsplit("/", 1)[-1]: lake.open_parquet(f).metadata.num_rows for f in files}


def shard_count(units: list[lake.Unit]) -> int:
    """Account shards for this run: the window's rows over ``SHARD_ROWS``, so that a shard holds about
    that many events (or one account's, if an account has more) however long the window is."""
    rows = 0
    for path in sorted({p for unit in units for p, _ in unit}):
        rows += lake.open_parquet(path).metadata.num_rows
    return max(1, min(-(-rows // SHARD_ROWS), 4096))


def spill_by_account(table: pa.Table, spill_root: str, name: str, shards: int, kind: str):
    """Write ``table`` as one spill file, one segment per account shard; yields
    (shard, (kind, file, first byte, end byte))."""
    # An account has many events: hash each account once (2.6x faster than hashing every row).
    accounts = table["account_id"].combine_chunks()
    if accounts.null_count:  # not expected (a required field): each row's text
        hashes = stable_hash(accounts.cast(pa.string()))
    else:
        if not pa.types.is_dictionary(accounts.type):
            accounts = pc.dictionary_encode(accounts)
        hashes = stable_hash(accounts.dictionary)[accounts.indices.to_numpy()]
    table = table.append_column(HASH, pa.array(hashes, pa.uint64()))
    table, segments = shard_segments(table, shards)
    if not segments:
        return
    spill = lake.join(spill_root, hashlib.sha1(f"{kind}:{name}".encode()).hexdigest()[:20] + ".arrow")
    ranges = lake.write_ipc_segments(spill, table, [(o, n) for _, o, n in segments])
    for (shard, _, _), (first, end) in zip(segments, ranges, strict=True):
        yield shard, (kind, spill, first, end)


# Text columns of the staged billable rows read as the dictionaries Parquet stores them as: millions of
# rows of a few distinct accounts, models, tiers and kinds, which the loader sorts by and writes out.
BILLABLE_TEXT = ["account_id", "model", "speed_tier", "token_kind"]


def _staged(stage: str, name: str, read_dictionary: list[str] | None = None) -> pa.Table | None:
    tables = lake.read_parquet_files(lake.list_files(lake.join(stage, name)), read_dictionary)
    tables = [t for t in tables if t.num_rows]
    return pa.concat_tables(tables) if tables else None


def load_warehouse(
    engine,
    catalog: Catalog,
    stage: str,
    dates: list[dt.date],
    run_id: str,
    started: dt.datetime,
    fence: Fence | None = None,
) -> dict[str, int]:
    """The staged rows, checked, into the warehouse in one transaction: billable usage, the local x UTC
    day bridge, the metered dates (with what they reflect) and the pool balances of their periods."""
    first, last = dates[0], dates[-1]
    billable = _staged(stage, "billable", BILLABLE_TEXT)
    pools, days = _staged(stage, "pools"), _staged(stage, "metered_days")
    draws = _staged(stage, "pool_draws")
    crossings = _staged(stage, "crossings")
    if days is not None:
        days = sum_by(days, ["local_day", "utc_day"])
    check_events_conserved(_staged(stage, EVENTS_READ), _staged(stage, EVENTS_ALLOCATED))
    check_totals(billable, days)
    with engine.begin() as conn:
        replace_rows(
            conn,
            BillableUsage.__table__,
            "local_day",
            dates,
            billable if billable is not None else pa.table({}),
        )
        replace_rows(
            conn, MeteredDay.__table__, "local_day", dates, days if days is not None else pa.table({})
        )
        replace_rows(
            conn, PoolDraw.__table__, "local_day", dates, draws if draws is not None else pa.table({})
        )
        covered = MeteredDate.__table__
        conn.execute(delete(covered).where(covered.c.local_day.between(first, last)))
        basis = plans_digest(catalog)
        conn.execute(
            insert(covered),
            [{"local_day": d, "run_id": run_id, "metered_at": started, "basis": basis} for d in dates],
        )
        q = MeterQueue.__table__.c
        conn.execute(
            delete(MeterQueue.__table__).where(q.local_day.between(first, last), q.queued_at <= started)
        )
        pt = PoolUsage.__table__
        conn.execute(delete(pt).where(and_(pt.c.period_end >= first, pt.c.period_start <= last)))
        if pools is not None:
            insert_arrow(conn, pt, pools)
        written = record_pools(conn, crossings, first, last, f"quota meter {run_id}")
        if fence is not None:
            fence.check(conn)  # the last statement: a run that lost its lock commits nothing
    return {
        "billable_usage": 0 if billable is None else billable.num_rows,
        "pool_usage": 0 if pools is None else pools.num_rows,
        "pool_draws": 0 if draws is None else draws.num_rows,
        "notifications": written["crossed"] + written["retracted"],
    }


def commit_lake(
    lake_root: str, stage: str, run_id: str, dates: list[dt.date], new_stamps: dict, executor: Executor | None
) -> int:
    """Commit the allocation records and the kept balances (each with its stamp) of ``dates``, each
    day's joined by ``executor`` (``_join_spilled``); returns the allocation records committed."""
    allocations = _commit_allocations(lake_root, stage, run_id, dates, executor)
    _join_spilled(stage, STATE_SPILL, POOL_STATE, BALANCE_SCHEMA, sorted(new_stamps), executor)
    for day in dates:  # a date without a stamp commits an empty partition: no state
        staged = lake.partition(lake.join(stage, "_commit"), POOL_STATE, day)
        if day in new_stamps:
            stamp = {**new_stamps[day], "files": _file_rows(lake.list_files(staged))}
            lake.write_json(lake.join(staged, STATE_STAMP), stamp)
        else:
            lake.discard(staged)
    _commit_days(lake_root, stage, run_id, dates, POOL_STATE)
    return allocations
