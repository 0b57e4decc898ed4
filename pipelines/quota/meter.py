"""Quota metering: lake events -> pool balances, billable usage and per-event allocation records.

    usage-billing quota meter --date 2026-03-02
    usage-billing quota meter --month 2026-03

The dates are account-local days. A pool balance depends on every earlier event of its period, and
on the pools drawn before it, whose periods need not line up with its own (a weekly pool beside a
monthly one): the run reads from the earliest day the balances of its first date depend on
(``billing.quota.Coupling.depends_from``, minus a day for timezones), however far back that chain
of periods goes, and allocates each account's events in order; events after the last date are left
out, so the result for a date never depends on later data. Metering a period day by day or all at
once therefore gives the same rows. The other way round, the dates' events reach forward to
``Coupling.affects_until`` of the last date: days up to there that were metered already are metered
again in the same run, so that no stored day or pool balance is left computed from other events.

Each run checks its own result before loading it (``check_allocation``): every event's included and
overage tokens add up to its tokens and to what its pools covered, every balance's used tokens are
what was drawn from it, within its allowance. A failed check stops the run; nothing is loaded.

Shape (runner-portable, like ingest): read row groups, attach plan and local day, spill by account
shard (Arrow IPC, refs through the GroupByKey), allocate per shard with ``billing.quota.allocate``
(vectorized): the composite ``MeterQuota`` returns each shard's billable usage, day bridge and pool
balances, which ``run`` stages (``StageMetered``); the driver loads them in one transaction
(``store.load_warehouse``) and joins each local day's allocation records and kept balances (spilled
per shard) into one file of that day's partition (``store.commit_lake``).

Starting from balances: every run also leaves, for the dates where a later run can start
(``state_dates``), each open balance key's state at the end of that day (lake ``pool_state/date=D``)
with a stamp of what it was computed from (the catalog's plans, the accounts, the event files that
can hold events of its periods, the state's own files). A run whose first date's eve has a state
with a stamp that still matches reads only its own dates' events and starts each key from that
balance: the same rows as reading from the period starts, without the month-to-date window. Any
difference in the stamp (a late event rewrote a partition, an account changed plan, the catalog
changed, a state file is lost) means reading from the period starts, as before.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
from dataclasses import dataclass

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.options.pipeline_options import PipelineOptions

from billing.balances import balances_at
from billing.billable import billable_rows, metered_days
from billing.plan import AccountIndex, attach_accounts
from billing.quota import allocate
from pipelines import lake
from pipelines.errors import UsageBillingError
from pipelines.ingest.dedup import HASH
from pipelines.quota.checks import check_allocation
from pipelines.quota.store import (
    ALLOCATION_SPILL,
    STATE_SPILL,
    StateStamps,
    commit_lake,
    dependent_days,
    load_warehouse,
    pool_draws,
    read_window,
    shard_count,
    spill_by_account,
    spill_days,
    state_dates,
    usable_state,
)
from pipelines.runtime import faults
from pipelines.runtime.options import CommonOptions, date_range, parse_date, pipeline_options, run_pipeline
from pipelines.runtime.staging import fresh_stage, new_run_id
from pipelines.warehouse.accounts import ACCOUNTS_LOCK, load_accounts_table
from pipelines.warehouse.binding import require_lake, require_partitions
from pipelines.warehouse.engine import make_engine, require_schema
from pipelines.warehouse.gate import held_back
from pipelines.warehouse.locks import Fence, database_lock, lock_wait, step_lock
from pipelines.warehouse.recompute import mark_metered
from pipelines.warehouse.unknown import unknown_note
from schemas import tokens
from schemas.catalog import Catalog, load_catalog
from schemas.events import LAKE_SCHEMA
from schemas.lake import ALLOCATION_SCHEMA, BALANCE_SCHEMA

COLUMNS = [
    "event_id",
    "event_time",
    "account_id",
    "model",
    "speed_tier",
    *tokens.fields(),
]
log = logging.getLogger(__name__)
FEW_VALUES = ["account_id", "model", "speed_tier"]  # read as dictionary arrays (see ReadAndSpill)
# What ReadAndSpill hands to AllocateShard: the columns above, the local day and plan, the shard hash
# (FEW_VALUES spilled as dictionary arrays, plain text again in AllocateShard).
SPILL_SCHEMA = pa.schema(
    [LAKE_SCHEMA.field(c).remove_metadata() for c in COLUMNS]
    + [pa.field("local_day", pa.date32()), pa.field("plan", pa.string()), pa.field(HASH, pa.uint64())]
)


class MeterOptions(CommonOptions, PipelineOptions):  # a direct subclass too: see CommonOptions
    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        parser.add_argument("--month", default=None, help="a whole month, YYYY-MM")


def meter_dates(opts: MeterOptions) -> list[dt.date]:
    if opts.month:
        if opts.date or opts.from_date or opts.to_date:
            raise UsageBillingError("give either --month or dates, not both")
        if not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", opts.month or ""):
            raise UsageBillingError(f"--month must look like 2026-03, got {opts.month!r}")
        first = parse_date(f"{opts.month}-01", "--month")
        last = (first.replace(day=28) + dt.timedelta(days=4)).replace(day=1) - dt.timedelta(days=1)
        return [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]
    return date_range(opts)


class ReadAndSpill(beam.DoFn):
    """A unit of row groups -> events with plan and local day, up to the last metered date, spilled
    by shard."""

    def __init__(
        self, accounts: pa.Table, last: dt.date, stage_root: str, shards: int, since: dt.date | None = None
    ) -> None:
        self.accounts, self.last, self.spill_root = accounts, last, lake.join(stage_root, "_spill")
        self.shards, self.since = shards, since

    def setup(self) -> None:
        self.index = AccountIndex(self.accounts)

    def process(self, unit: lake.Unit):
        # Accounts, models and tiers as dictionary arrays until AllocateShard: the read builds no
        # string per row, the account lookup and hash run per distinct account, the shard sort and
        # the spill move 4-byte indices.
        events = lake.read_unit(unit, COLUMNS, read_dictionary=FEW_VALUES).combine_chunks()
        events = attach_accounts(events, self.index)
        keep = pc.less_equal(events["local_day"], pa.scalar(self.last, pa.date32()))
        if self.since is not None:  # starting from balances: the days before are in them
            keep = pc.and_(keep, pc.greater_equal(events["local_day"], pa.scalar(self.since, pa.date32())))
        yield from spill_by_account(events.filter(keep), self.spill_root, repr(unit), self.shards, "events")


class SpillState(beam.DoFn):
    """A file of the balances a run starts from -> spilled by the same account shards as the events."""

    def __init__(self, stage_root: str, shards: int) -> None:
        self.spill_root, self.shards = lake.join(stage_root, "_spill"), shards

    def process(self, path: str):
        state = lake.read_parquet(path).select(BALANCE_SCHEMA.names).cast(BALANCE_SCHEMA)
        yield from spill_by_account(state, self.spill_root, path, self.shards, "state")


class AllocateShard(beam.DoFn):
    """All events of a shard's accounts -> (kind, shard, table) for its billable usage, its local x UTC
    day tokens and its pool balances; its allocation records and kept balances (one per event and
    per day, too many to travel through the pipeline) are spilled to the stage by local day."""

    def __init__(
        self,
        catalog: Catalog,
        first: dt.date,
        last: dt.date,
        stage_root: str,
        state_days: frozenset[dt.date] = frozenset(),
    ) -> None:
        """``state_days``: the dates whose end-of-day balances to stage."""
        self.catalog, self.first, self.last, self.stage_root = catalog, first, last, stage_root
        self.state_days = state_days

    def process(self, element):
        shard, refs = element
        parts: dict[str, list[pa.Table]] = {"events": [], "state": []}
        for kind, path, first, end in refs:
            parts[kind].append(lake.read_ipc_batches(path, first, end))
        if parts["events"]:
            events = pa.concat_tables(parts["events"]).combine_chunks().cast(SPILL_SCHEMA)
        else:  # only balances carried over: their pool rows and states still come out
            events = SPILL_SCHEMA.empty_table()
        state = pa.concat_tables(parts["state"]) if parts["state"] else None
        del parts
        result = allocate(events, self.catalog, state)
        check_allocation(events, result, state)
        day = events["local_day"]
        in_range = pc.and_(
            pc.greater_equal(day, pa.scalar(self.first, pa.date32())),
            pc.less_equal(day, pa.scalar(self.last, pa.date32())),
        )
        yield (
            "billable",
            shard,
            billable_rows(events, result.included, result.overage, in_range, self.catalog),
        )
        yield "metered_days", shard, metered_days(events, result.included, result.overage, in_range)
        yield (
            "pools",
            shard,
            result.pools.filter(
                pc.and_(
                    pc.greater_equal(result.pools["period_end"], pa.scalar(self.first, pa.date32())),
                    pc.less_equal(result.pools["period_start"], pa.scalar(self.last, pa.date32())),
                )
            ),
        )
        draws = result.draws
        idx = draws["event_index"]
        records = pa.table(
            {
                "event_id": events["event_id"].take(idx),
                "event_time": events["event_time"].take(idx),
                "account_id": events["account_id"].take(idx),
                "local_day": day.take(idx),
                "plan": draws["plan"],
                "pool": draws["pool"],
                "period_start": draws["period_start"],
                "tokens": draws["tokens"],
            }
        ).filter(in_range.take(idx))
        yield "pool_draws", shard, pool_draws(records, events["model"].take(idx).filter(in_range.take(idx)))
        spill_days(
            records.cast(ALLOCATION_SCHEMA),
            lake.join(self.stage_root, ALLOCATION_SPILL),
            f"shard-{shard:04d}",
        )
        if self.state_days:
            states = balances_at(result.balances, self.first, max(self.state_days))
            keep = pc.is_in(states["local_day"], value_set=pa.array(sorted(self.state_days), pa.date32()))
            spill_days(
                states.filter(keep).cast(BALANCE_SCHEMA),
                lake.join(self.stage_root, STATE_SPILL),
                f"shard-{shard:04d}",
            )


class StageShardTable(beam.DoFn):
    """(kind, shard, table) -> ``<stage>/<kind>/shard-NNNN.parquet``, what the driver loads."""

    def __init__(self, stage_root: str) -> None:
        self.stage_root = stage_root

    def process(self, element):
        kind, shard, table = element
        lake.write_parquet(lake.join(self.stage_root, kind, f"shard-{shard:04d}.parquet"), table)


class MeterQuota(beam.PTransform):
    """Read units of lake events (and stored balances to start from) -> per account shard, (kind,
    shard, table) for its billable usage ("billable"), local x UTC day tokens ("metered_days") and
    pool balances ("pools"); the caller stages them (``StageShardTable``) and loads them."""

    def __init__(
        self,
        catalog: Catalog,
        accounts: pa.Table,
        first: dt.date,
        last: dt.date,
        stage: str,
        shards: int = 8,
        state_files: list[str] | None = None,
        state_days: frozenset[dt.date] = frozenset(),
    ) -> None:
        """``state_files``: the balances at the end of the day before ``first`` to start from (then
        only events of ``first`` .. ``last`` are read); None: read from the period starts."""
        super().__init__()
        self.catalog, self.accounts, self.first, self.last, self.stage = catalog, accounts, first, last, stage
        self.shards, self.state_files, self.state_days = shards, state_files, state_days

    def expand(self, units):
        since = None if self.state_files is None else self.first
        refs = units | "ReadAndSpill" >> beam.ParDo(
            ReadAndSpill(self.accounts, self.last, self.stage, self.shards, since)
        )
        if self.state_files:
            state = (
                units.pipeline
                | "StateFiles" >> beam.Create(self.state_files)
                | "SpillState" >> beam.ParDo(SpillState(self.stage, self.shards))
            )
            refs = (refs, state) | "EventsAndState" >> beam.Flatten()
        return (
            refs
            | "GroupByAccountShard" >> beam.GroupByKey()
            | "AllocateShard"
            >> beam.ParDo(AllocateShard(self.catalog, self.first, self.last, self.stage, self.state_days))
        )


@dataclass
class MeterResult:
    counts: dict[str, int]  # rows loaded: billable_usage, pool_usage, allocations
    notes: list[str]  # what the run started from, and later days it metered again
    seconds: dict[str, float]  # wall time of the Beam pipeline ("pipeline"), the load and commit ("load")


def run(argv: list[str] | None = None) -> MeterResult:
    """Meter the local dates of ``argv`` (``--date``, ``--from``/``--to`` or ``--month``)."""
    options = pipeline_options(argv, threads=True)
    opts = options.view_as(MeterOptions)
    dates = meter_dates(opts)  # a mistake in the dates is told before any database work
    with database_lock(opts.database_url, "quota meter") as fence:
        return _run(options, opts, dates, fence)


def _run(options, opts: MeterOptions, dates: list[dt.date], fence: Fence) -> MeterResult:
    catalog = load_catalog(opts.config)
    engine = make_engine(opts.database_url)
    require_schema(engine)
    require_lake(engine, opts.lake, "quota meter")
    notes: list[str] = []
    dates = _with_dependent_days(engine, catalog, dates, notes)
    first, last = dates[0], dates[-1]
    # Under the accounts' lock, so that an accounts load is either in what this run reads or queues
    # its days after this run started (meter_queue.queued_at > metered_at: still out of date).
    with step_lock(engine, ACCOUNTS_LOCK, wait=max(lock_wait(), 60.0)):
        started = dt.datetime.now(dt.UTC)  # before anything is read: what the metered days reflect
        accounts = load_accounts_table(engine)
    held = frozenset(held_back(engine))  # partitions the data-quality gate holds back: read as empty
    stamps = StateStamps(opts.lake, catalog, accounts, held)
    # Stamps of the states this run leaves, taken before it reads: a file rewritten meanwhile makes
    # them stale rather than wrong.
    new_stamps = {day: stamps.of(day) for day in state_dates(opts.lake, dates)}
    state_files = usable_state(opts.lake, first - dt.timedelta(days=1), stamps)
    if state_files is None:
        lo, hi = read_window(dates, catalog)
    else:  # local days first .. last lie in UTC days first - 1 .. last + 1
        lo, hi = first - dt.timedelta(days=1), last + dt.timedelta(days=1)
        notes.append(f"started from the pool balances at the end of {first - dt.timedelta(days=1)}")
        log.info("quota meter %s..%s: %s", first, last, notes[-1])
    utc_dates = [lo + dt.timedelta(days=i) for i in range((hi - lo).days + 1)]
    require_partitions(engine, opts.lake, utc_dates, "quota meter")
    run_id = opts.run_id or new_run_id("meter")
    stage = fresh_stage(opts.lake, run_id, "quota meter")  # a killed run's folder: we hold the step's lock
    seconds: dict[str, float] = {}
    try:
        skipped = sorted(held & set(utc_dates))
        if skipped:
            notes.append(
                f"left out {', '.join(map(str, skipped))}: held back by the data-quality gate until accepted"
            )
            log.warning("quota meter %s..%s: %s", first, last, notes[-1])
        files = [
            f
            for d in utc_dates
            if d not in held
            for f in lake.list_files(lake.partition(opts.lake, lake.EVENTS, d))
        ]
        units = lake.row_group_units(files)
        began = time.perf_counter()
        with run_pipeline(options) as p:
            metered = (
                p
                | "ReadUnits" >> beam.Create(units)
                | "MeterQuota"
                >> MeterQuota(
                    catalog,
                    accounts,
                    first,
                    last,
                    stage,
                    shard_count(units),
                    state_files,
                    frozenset(new_stamps),
                )
            )
            _ = metered | "StageMetered" >> beam.ParDo(StageShardTable(stage))
        seconds["pipeline"] = time.perf_counter() - began
        began = time.perf_counter()
        faults.checkpoint("meter.load")
        counts = load_warehouse(engine, catalog, stage, dates, run_id, started, fence)
        with engine.begin() as conn:
            mark_metered(conn, first, last, started)
            fence.check(conn)
        counts["allocations"] = commit_lake(opts.lake, stage, run_id, dates, new_stamps)
        seconds["load"] = time.perf_counter() - began
        unknown = unknown_note(engine, first, last)
        if unknown:
            notes.append(unknown)
            log.warning("quota meter %s..%s: %s", first, last, unknown)
    finally:
        lake.discard(stage)
        engine.dispose()
    return MeterResult(counts, notes, seconds)


def _with_dependent_days(engine, catalog: Catalog, dates: list[dt.date], notes: list[str]) -> list[dt.date]:
    """``dates`` through the already-metered days their events' balances reach (metered again)."""
    later = dependent_days(engine, catalog, dates[-1])
    if not later:
        return dates
    notes.append(f"also metered {later[0]}..{later[-1]} again: their balances follow from these dates")
    log.info("quota meter: %s", notes[-1])
    return dates + [dates[-1] + dt.timedelta(days=i) for i in range(1, (later[-1] - dates[-1]).days + 1)]
