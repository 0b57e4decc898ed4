"""The metering pipeline's Beam transforms (``MeterQuota`` and its steps); ``meter`` runs them.

Read row groups, attach plan and local day, spill by account shard (Arrow IPC, refs through the
GroupByKey), allocate per shard with ``billing.quota.allocate``: each shard yields its billable
usage, day bridge, pool balances and pool draws as (kind, shard, table), and spills its allocation
records and kept balances to the stage by local day.
"""

from __future__ import annotations

import datetime as dt
import hashlib

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc

from billing.balances import balances_at
from billing.billable import billable_rows, metered_days
from billing.plan import AccountIndex, attach_accounts
from billing.quota import allocate
from pipelines import lake
from pipelines.ingest.hashing import HASH
from pipelines.quota.checks import EVENTS_ALLOCATED, EVENTS_READ, check_allocation
from pipelines.quota.store import (
    ALLOCATION_SPILL,
    STATE_SPILL,
    pool_draws,
    spill_by_account,
    spill_days,
)
from pipelines.runtime import faults
from schemas import tokens
from schemas.catalog import Catalog
from schemas.events import LAKE_SCHEMA
from schemas.lake import ALLOCATION_SCHEMA, BALANCE_SCHEMA, CROSSING_SCHEMA

COLUMNS = [
    "event_id",
    "event_time",
    "account_id",
    "model",
    "speed_tier",
    *tokens.fields(),
]
FEW_VALUES = ["account_id", "model", "speed_tier"]  # read as dictionary arrays (see ReadAndSpill)
# What ReadAndSpill hands to AllocateShard: the columns above, the local day and plan, the shard hash
# (FEW_VALUES spilled as dictionary arrays, plain text again in AllocateShard).
SPILL_SCHEMA = pa.schema(
    [LAKE_SCHEMA.field(c).remove_metadata() for c in COLUMNS]
    + [pa.field("local_day", pa.date32()), pa.field("plan", pa.string()), pa.field(HASH, pa.uint64())]
)


class ReadAndSpill(beam.DoFn):
    """A unit of row groups -> events with plan and local day, up to the last metered date, spilled
    by shard; the events it spilled counted in ``<stage>/events_read/``."""

    def __init__(
        self, accounts: str, last: dt.date, stage_root: str, shards: int, since: dt.date | None = None
    ) -> None:
        """``accounts``: the staged accounts table (``MeterQuota`` writes it)."""
        self.accounts, self.last, self.spill_root = accounts, last, lake.join(stage_root, "_spill")
        self.stage_root = stage_root
        self.shards, self.since = shards, since

    def setup(self) -> None:
        self.index = AccountIndex(lake.read_parquet(self.accounts))

    def process(self, unit: lake.Unit):
        # Accounts, models and tiers as dictionary arrays until AllocateShard: the read builds no
        # string per row, the account lookup and hash run per distinct account, the shard sort and
        # the spill move 4-byte indices.
        events = lake.read_unit(unit, COLUMNS, read_dictionary=FEW_VALUES).combine_chunks()
        events = attach_accounts(events, self.index)
        keep = pc.less_equal(events["local_day"], pa.scalar(self.last, pa.date32()))
        if self.since is not None:  # starting from balances: the days before are in them
            keep = pc.and_(keep, pc.greater_equal(events["local_day"], pa.scalar(self.since, pa.date32())))
        events = events.filter(keep)
        # The count goes beside the spill, as a file, not through the pipeline: it must not depend on
        # the runner's hand-over it checks (a rerun of the unit writes the same name again).
        counted = pa.table({"events": pa.array([events.num_rows], pa.int64())})
        name = hashlib.sha1(repr(unit).encode()).hexdigest()[:20]
        lake.write_parquet(lake.join(self.stage_root, EVENTS_READ, f"unit-{name}.parquet"), counted)
        yield from spill_by_account(events, self.spill_root, repr(unit), self.shards, "events")
        faults.checkpoint("meter.spilled")


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
        events, state = _shard_input(refs)
        result = allocate(events, self.catalog, state)
        check_allocation(events, result, state)
        counted = {"shard": pa.array([shard], pa.int64()), "events": pa.array([events.num_rows], pa.int64())}
        yield EVENTS_ALLOCATED, shard, pa.table(counted)
        in_range = _between(events["local_day"], self.first, self.last)
        yield (
            "billable",
            shard,
            billable_rows(events, result.included, result.overage, in_range, self.catalog),
        )
        yield "metered_days", shard, metered_days(events, result.included, result.overage, in_range)
        pools = result.pools
        overlaps = pc.and_(
            pc.greater_equal(pools["period_end"], pa.scalar(self.first, pa.date32())),
            pc.less_equal(pools["period_start"], pa.scalar(self.last, pa.date32())),
        )
        yield "pools", shard, pools.filter(overlaps)
        yield "crossings", shard, _crossing_rows(events, result.crossings, in_range)
        records, models = _allocation_records(events, result.draws, in_range)
        yield "pool_draws", shard, pool_draws(records, models)
        name = f"shard-{shard:04d}"
        spill_days(records.cast(ALLOCATION_SCHEMA), lake.join(self.stage_root, ALLOCATION_SPILL), name)
        if self.state_days:
            states = balances_at(result.balances, self.first, max(self.state_days))
            keep = pc.is_in(states["local_day"], value_set=pa.array(sorted(self.state_days), pa.date32()))
            spill_days(
                states.filter(keep).cast(BALANCE_SCHEMA), lake.join(self.stage_root, STATE_SPILL), name
            )


def _shard_input(refs: list[tuple[str, str, int, int]]) -> tuple[pa.Table, pa.Table | None]:
    """A shard's spilled events (SPILL_SCHEMA) and the balances it starts from (None: the period starts)."""
    parts: dict[str, list[pa.Table]] = {"events": [], "state": []}
    tables = lake.read_ipc_segments((path, first, end) for _, path, first, end in refs)
    for (kind, _, _, _), table in zip(refs, tables, strict=True):
        parts[kind].append(table)
    if parts["events"]:
        events = pa.concat_tables(parts["events"]).combine_chunks().cast(SPILL_SCHEMA)
    else:  # only balances carried over: their pool rows and states still come out
        events = SPILL_SCHEMA.empty_table()
    return events, pa.concat_tables(parts["state"]) if parts["state"] else None


def _between(day: pa.ChunkedArray | pa.Array, first: dt.date, last: dt.date) -> pa.Array:
    return pc.and_(
        pc.greater_equal(day, pa.scalar(first, pa.date32())),
        pc.less_equal(day, pa.scalar(last, pa.date32())),
    )


def _allocation_records(events: pa.Table, draws: pa.Table, in_range: pa.Array) -> tuple[pa.Table, pa.Array]:
    """One record per (event, pool) that drew tokens, of the metered dates, and each record's model."""
    idx = draws["event_index"]
    records = pa.table(
        {
            "event_id": events["event_id"].take(idx),
            "event_time": events["event_time"].take(idx),
            "account_id": events["account_id"].take(idx),
            "local_day": events["local_day"].take(idx),
            "plan": draws["plan"],
            "pool": draws["pool"],
            "period_start": draws["period_start"],
            "tokens": draws["tokens"],
        }
    )
    keep = in_range.take(idx)
    return records.filter(keep), events["model"].take(idx).filter(keep)


def _crossing_rows(events: pa.Table, crossings: pa.Table, in_range: pa.Array) -> pa.Table:
    """The thresholds crossed by events of the metered dates, with the event (id, time, local day)."""
    idx = crossings["event_index"]
    rows = crossings.drop_columns(["event_index"])
    for name in ("account_id", "event_id", "event_time", "local_day"):
        rows = rows.append_column(name, pc.cast(events[name].take(idx), CROSSING_SCHEMA.field(name).type))
    return rows.select(CROSSING_SCHEMA.names).filter(in_range.take(idx))


class StageShardTable(beam.DoFn):
    """(kind, shard, table) -> ``<stage>/<kind>/shard-NNNN.parquet``, what the driver loads.

    One name per kind and shard: a task the runner runs again (its worker was lost, with the task or
    with the results it held) writes the same tables under the same names, so nothing is staged
    twice. Were a shard's events ever allocated in two parts, the second part's count would replace
    the first's and the load's conservation check (events read against events allocated) stops the
    run."""

    def __init__(self, stage_root: str) -> None:
        self.stage_root = stage_root

    def process(self, element):
        kind, shard, table = element
        lake.write_parquet(lake.join(self.stage_root, kind, f"shard-{shard:04d}.parquet"), table)
        faults.checkpoint("meter.staged")


class MeterQuota(beam.PTransform):
    """Read units of lake events (and stored balances to start from) -> per account shard, (kind,
    shard, table) for its billable usage ("billable"), local x UTC day tokens ("metered_days") and
    pool balances ("pools"), and the events it allocated ("events_allocated"); the caller stages them
    (``StageShardTable``), checks the counts agree and loads them. The events it read are counted
    beside the spill (``<stage>/events_read/``, a file per read unit; none when there was nothing to
    read)."""

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
        # The accounts go to the workers as a staged file, not inside the pickled DoFn: Beam pickles
        # and compresses each DoFn on the driver, about a second for 100,000 accounts.
        accounts = lake.join(self.stage, "_accounts", "accounts.parquet")
        lake.write_parquet(accounts, self.accounts)
        refs = units | "ReadAndSpill" >> beam.ParDo(
            ReadAndSpill(accounts, self.last, self.stage, self.shards, since)
        )
        if self.state_files:
            state = (
                units.pipeline
                | "StateFiles" >> beam.Create(self.state_files)
                | "SpillState" >> beam.ParDo(SpillState(self.stage, self.shards))
            )
            refs = (refs, state) | "EventsAndState" >> beam.Flatten()
        allocated = (
            refs
            | "GroupByAccountShard" >> beam.GroupByKey()
            | "AllocateShard"
            >> beam.ParDo(AllocateShard(self.catalog, self.first, self.last, self.stage, self.state_days))
        )
        return allocated
