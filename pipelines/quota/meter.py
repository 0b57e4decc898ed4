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
(``store.load_warehouse``), and each local day's allocation records and kept balances (spilled per
shard) are joined into one file of that day's partition (``store.commit_lake``), a task per day on
the run's Dask cluster (in this process without one).

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
import time
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.options.pipeline_options import PipelineOptions
from sqlalchemy.engine import Engine

from pipelines import lake
from pipelines.errors import UsageBillingError
from pipelines.quota.store import (
    StateStamps,
    commit_lake,
    dependent_days,
    load_warehouse,
    read_window,
    shard_count,
    state_dates,
    usable_state,
)
from pipelines.quota.transforms import MeterQuota, StageShardTable
from pipelines.runtime import faults
from pipelines.runtime.context import RunContext, StepOptions, split_argv
from pipelines.runtime.dates import contiguous, date_range, month_dates
from pipelines.runtime.options import run_pipeline
from pipelines.runtime.staging import fresh_stage, new_run_id
from pipelines.warehouse.accounts import ACCOUNTS_LOCK, load_accounts_table
from pipelines.warehouse.binding import require_lake, require_partitions
from pipelines.warehouse.gate import held_back
from pipelines.warehouse.locks import Fence, database_lock, lock_wait, step_lock
from pipelines.warehouse.recompute import mark_metered
from pipelines.warehouse.unknown import unknown_note
from schemas.catalog import Catalog

log = logging.getLogger(__name__)


class MeterFlags(PipelineOptions):
    """Metering's own flag in an argument list (``main``)."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        parser.add_argument("--month", default=None, help="a whole month, YYYY-MM")


def meter_dates(date: str | None, start: str | None, end: str | None, month: str | None) -> list[dt.date]:
    """The local dates of ``--date``, ``--from``/``--to`` or ``--month``."""
    if month:
        if date or start or end:
            raise UsageBillingError("give either --month or dates, not both")
        return month_dates(month)
    return date_range(date, start, end)


@dataclass
class MeterResult:
    counts: dict[str, int]  # rows loaded: billable_usage, pool_usage, allocations
    notes: list[str]  # what the run started from, and later days it metered again
    seconds: dict[str, float]  # wall time of the Beam pipeline ("pipeline"), the load and commit ("load")
    notifications: int = 0  # outbox rows written: thresholds crossed and retractions (pipelines.notify)


def run(context: RunContext, dates: list[dt.date], options: StepOptions | None = None) -> MeterResult:
    """Meter the local ``dates`` (consecutive days)."""
    with database_lock(context.settings, "quota meter") as fence:
        return _run(context, dates, options or StepOptions(), fence)


def main(argv: list[str] | None = None) -> MeterResult:
    """``run`` from an argument list (a script, a test): settings flags, ``--date``, ``--from``/``--to``
    or ``--month``, Beam's flags."""
    settings, flags, beam_args = split_argv(argv, MeterFlags)
    dates = meter_dates(flags.date, flags.from_date, flags.to_date, flags.month)  # before any database work
    with RunContext.open(settings, beam_args) as context:
        return run(context, dates, StepOptions(flags.run_id))


def meter_runs(context: RunContext, dates: list[dt.date]) -> list[str]:
    """Meter ``dates`` in runs of consecutive days; per run its dates and what it started from."""
    done = []
    for run_dates in contiguous(dates):
        result = run(context, run_dates)
        done.append(f"{run_dates[0]}..{run_dates[-1]}" + "".join(f" ({n})" for n in result.notes))
    return done


def _run(context: RunContext, dates: list[dt.date], options: StepOptions, fence: Fence) -> MeterResult:
    catalog, engine, root = context.catalog, context.engine, context.lake
    require_lake(engine, root, "quota meter")
    notes: list[str] = []
    dates = _with_dependent_days(engine, catalog, dates, notes)
    plan = _read_plan(engine, root, catalog, dates, notes)
    run_id = options.run_id or new_run_id("meter")
    stage = fresh_stage(root, run_id, "quota meter")  # a killed run's folder: we hold the step's lock
    seconds: dict[str, float] = {}
    first, last = dates[0], dates[-1]
    try:
        units = lake.row_group_units(
            [
                f
                for d in plan.utc_dates
                if d not in plan.held
                for f in lake.list_files(lake.partition(root, lake.EVENTS, d))
            ]
        )
        began = time.perf_counter()
        with run_pipeline(context.beam_options(threads=True)) as p:
            metered = (
                p
                | "ReadUnits" >> beam.Create(units)
                | "MeterQuota"
                >> MeterQuota(
                    catalog,
                    plan.accounts,
                    first,
                    last,
                    stage,
                    shard_count(units),
                    plan.state_files,
                    frozenset(plan.new_stamps),
                )
            )
            _ = metered | "StageMetered" >> beam.ParDo(StageShardTable(stage))
        seconds["pipeline"] = time.perf_counter() - began
        began = time.perf_counter()
        faults.checkpoint("meter.load")
        counts = load_warehouse(engine, catalog, stage, dates, run_id, plan.started, fence)
        notifications = counts.pop("notifications")
        with engine.begin() as conn:
            mark_metered(conn, first, last, plan.started)
            fence.check(conn)
        with context.cluster() as executor:  # each day's allocation records joined on the cluster
            counts["allocations"] = commit_lake(root, stage, run_id, dates, plan.new_stamps, executor)
        seconds["load"] = time.perf_counter() - began
        unknown = unknown_note(engine, first, last)
        if unknown:
            notes.append(unknown)
            log.warning("quota meter %s..%s: %s", first, last, unknown)
    finally:
        lake.discard(stage)
    return MeterResult(counts, notes, seconds, notifications)


@dataclass(frozen=True)
class _ReadPlan:
    """What a run reads: the accounts as of ``started``, the UTC partitions (less those the
    data-quality gate holds back), the balances it starts from (None: the period starts), and the
    stamps of the balances it leaves."""

    started: dt.datetime
    accounts: pa.Table
    held: frozenset[dt.date]
    utc_dates: list[dt.date]
    state_files: list[str] | None
    new_stamps: dict[dt.date, dict[str, Any]]


def _read_plan(
    engine: Engine, lake_root: str, catalog: Catalog, dates: list[dt.date], notes: list[str]
) -> _ReadPlan:
    first, last = dates[0], dates[-1]
    # Under the accounts' lock, so that an accounts load is either in what this run reads or queues
    # its days after this run started (meter_queue.queued_at > metered_at: still out of date).
    with step_lock(engine, ACCOUNTS_LOCK, wait=max(lock_wait(engine), 60.0)):
        started = dt.datetime.now(dt.UTC)  # before anything is read: what the metered days reflect
        accounts = load_accounts_table(engine)
    held = frozenset(held_back(engine))  # partitions the data-quality gate holds back: read as empty
    stamps = StateStamps(lake_root, catalog, accounts, held)
    # Stamps of the states this run leaves, taken before it reads: a file rewritten meanwhile makes
    # them stale rather than wrong.
    new_stamps = {day: stamps.of(day) for day in state_dates(lake_root, dates)}
    state_files = usable_state(lake_root, first - dt.timedelta(days=1), stamps)
    if state_files is None:
        lo, hi = read_window(dates, catalog)
    else:  # local days first .. last lie in UTC days first - 1 .. last + 1
        lo, hi = first - dt.timedelta(days=1), last + dt.timedelta(days=1)
        notes.append(f"started from the pool balances at the end of {first - dt.timedelta(days=1)}")
        log.info("quota meter %s..%s: %s", first, last, notes[-1])
    utc_dates = [lo + dt.timedelta(days=i) for i in range((hi - lo).days + 1)]
    require_partitions(engine, lake_root, utc_dates, "quota meter")
    skipped = sorted(held & set(utc_dates))
    if skipped:
        notes.append(
            f"left out {', '.join(map(str, skipped))}: held back by the data-quality gate until accepted"
        )
        log.warning("quota meter %s..%s: %s", first, last, notes[-1])
    return _ReadPlan(started, accounts, held, utc_dates, state_files, new_stamps)


def _with_dependent_days(engine, catalog: Catalog, dates: list[dt.date], notes: list[str]) -> list[dt.date]:
    """``dates`` through the already-metered days their events' balances reach (metered again)."""
    later = dependent_days(engine, catalog, dates[-1])
    if not later:
        return dates
    notes.append(f"also metered {later[0]}..{later[-1]} again: their balances follow from these dates")
    log.info("quota meter: %s", notes[-1])
    return dates + [dates[-1] + dt.timedelta(days=i) for i in range(1, (later[-1] - dates[-1]).days + 1)]
