"""Daily usage: clean lake partitions -> ``usage_daily`` (account, model, speed tier, UTC day).

    usage-billing usage aggregate --date 2026-03-02
    usage-billing usage aggregate --from 2026-02-01 --to 2026-02-28

One element per batch of Parquet row groups, a couple per task the runner runs at once; a DoFn
sums each unit of a batch with pyarrow into a small partial table per day and re-sums them as it
goes; ``CombinePerKey`` re-sums the batches' partials of a day (Arrow tables, not one object per
event). Summing within the batch is the runner-independent form of combiner lifting: the in-process
runner lifts a combine itself, but Beam's DaskRunner groups every element before combining, so one
partial per unit (as many rows, all told, as the events) would cross between workers and pile up on
one. The day's result is staged as Parquet from ``process`` and the driver loads all days in one
transaction, replacing those days' rows: a rerun leaves the same rows.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterable

import apache_beam as beam
import pyarrow as pa

from pipelines import lake
from pipelines.runtime import faults
from pipelines.runtime.context import RunContext, StepOptions, split_argv
from pipelines.runtime.dates import dates_of
from pipelines.runtime.options import parallel_tasks, run_pipeline
from pipelines.runtime.staging import fresh_stage, new_run_id
from pipelines.usage.partials import (
    ERROR_SCHEMA,
    LAKE_COLUMNS,
    SPEED_SCHEMA,
    USAGE_SCHEMA,
    DayPartials,
    model_daily,
    partial_usage,
)
from pipelines.warehouse.binding import require_lake, require_partitions
from pipelines.warehouse.engine import replace_rows
from pipelines.warehouse.gate import without_held
from pipelines.warehouse.locks import Fence, database_lock, step_lock
from pipelines.warehouse.recompute import mark_aggregated
from schemas.warehouse import ModelDaily, UsageDaily, UsageDailyError

COMPACT_EVERY = 4  # partials a day's accumulator holds before re-summing (bounds memory)


BATCHES_PER_TASK = 2  # batches per task the runner runs at once: a slow one leaves work to take over


def batches_of(units: list[lake.Unit], tasks: int) -> list[tuple[lake.Unit, ...]]:
    """``units`` in order, cut into ``BATCHES_PER_TASK`` runs of consecutive units per task (fewer
    when there are fewer units), their sizes differing by one unit at most."""
    n = max(1, min(len(units), BATCHES_PER_TASK * tasks))
    size, extra = divmod(len(units), n)
    cuts = [i * size + min(i, extra) for i in range(n + 1)]
    return [tuple(units[a:b]) for a, b in itertools.pairwise(cuts) if b > a]


def _by_day(partial: DayPartials) -> Iterable[tuple[str, DayPartials]]:
    days = partial.usage["day"].unique()
    if len(days) == 1:
        yield days[0].as_py().isoformat(), partial
        return
    for day in days.to_pylist():
        yield day.isoformat(), partial.filter_day(day)


class PartialUsageByDay(beam.DoFn):
    """A batch of units of row groups -> partial usage per UTC day, summed over the batch. Reading and
    summing in one step keeps the rows themselves from ever becoming a Beam element (only the small
    partials are). A day's sum is emitted once a unit no longer has it: the units come in the lake's
    date order, so the batch holds a day or two at a time, whatever its range."""

    def process(self, batch: tuple[lake.Unit, ...]):
        open_days: dict[str, list[DayPartials]] = {}
        for unit in batch:
            seen = set()
            for day, partial in _by_day(partial_usage(lake.read_unit(unit, LAKE_COLUMNS))):
                seen.add(day)
                parts = open_days.setdefault(day, [])
                parts.append(partial)
                if len(parts) >= COMPACT_EVERY:
                    open_days[day] = [DayPartials.combine(parts)]
            for day in [d for d in open_days if d not in seen]:
                yield day, DayPartials.combine(open_days.pop(day))
        for day, parts in open_days.items():
            yield day, DayPartials.combine(parts)


class CombineDayPartials(beam.CombineFn):
    """Accumulator: a short list of partials of one day, compacted as it grows."""

    def create_accumulator(self) -> list[DayPartials]:
        return []

    def add_input(self, acc: list, value: DayPartials) -> list:
        acc.append(value)
        return (
            [DayPartials.combine([DayPartials.unpacked(p) for p in acc])]
            if len(acc) >= COMPACT_EVERY
            else acc
        )

    def merge_accumulators(self, accs: Iterable[list[DayPartials | bytes]]) -> list[DayPartials | bytes]:
        return [DayPartials.combine([DayPartials.unpacked(p) for acc in accs for p in acc])]

    def compact(self, acc: list[DayPartials | bytes]) -> list[DayPartials | bytes]:
        """Called before an accumulator is shipped between stages: one re-summed partial as compressed
        Arrow IPC bytes (the runner's data plane holds shipped bytes several times over)."""
        return [DayPartials.combine([DayPartials.unpacked(p) for p in acc]).packed()]

    def extract_output(self, acc: list[DayPartials]) -> DayPartials:
        return DayPartials.combine([DayPartials.unpacked(p) for p in acc])


OUTPUTS = ("usage", "errors", "speed")


class StageDay(beam.DoFn):
    """Write one day's combined tables into the run's staging folder (from process: runner-portable)."""

    def __init__(self, stage_root: str) -> None:
        self.stage_root = stage_root

    def process(self, element):
        day, partials = element
        for name in OUTPUTS:
            path = lake.join(lake.partition(self.stage_root, name, day), "part-0000.parquet")
            lake.write_parquet(path, getattr(partials, name))
        faults.checkpoint("aggregate.staged")
        yield day


class DailyUsage(beam.PTransform):
    """Batches of units of row groups (``batches_of(lake.row_group_units(...))``) -> (day, DayPartials)
    pairs, one per UTC day."""

    def expand(self, units):
        return (
            units
            | "PartialUsage" >> beam.ParDo(PartialUsageByDay())
            | "CombineUsage" >> beam.CombinePerKey(CombineDayPartials())
        )


def _read_staged(stage: str, name: str, dates: list[dt.date], schema: pa.Schema) -> pa.Table:
    wanted = set(dates)
    tables = [
        lake.read_parquet(f)
        for d in lake.partition_dates(stage, name)
        if d in wanted
        for f in lake.list_files(lake.partition(stage, name, d))
    ]
    return pa.concat_tables(tables).cast(schema) if tables else schema.empty_table()


def run(context: RunContext, dates: list[dt.date], options: StepOptions | None = None) -> dict[dt.date, int]:
    """Aggregate the dates; returns rows loaded per day."""
    with database_lock(context.settings, "usage aggregate") as fence:
        return _run(context, dates, options or StepOptions(), fence)


def main(argv: list[str] | None = None) -> dict[dt.date, int]:
    """``run`` from an argument list (a script, a test): settings and date flags, Beam's flags."""
    settings, flags, beam_args = split_argv(argv)
    dates = dates_of(flags)  # a mistake in the dates is told before any database work
    with RunContext.open(settings, beam_args) as context:
        return run(context, dates, StepOptions(flags.run_id))


def _run(context: RunContext, dates: list[dt.date], options: StepOptions, fence: Fence) -> dict[dt.date, int]:
    engine, root = context.engine, context.lake
    require_lake(engine, root, "usage aggregate")
    with step_lock(engine, lake.ingest_lock(root)):  # not while an ingest swaps partitions
        lake.recover(root, lake.EVENTS)
    require_partitions(engine, root, dates, "usage aggregate")
    dates = without_held(engine, dates, "usage aggregate")
    run_id = options.run_id or new_run_id("aggregate")
    stage = fresh_stage(root, run_id, "usage aggregate")
    started = dt.datetime.now(dt.UTC)  # before the lake is read: what the queue rows it takes reflect
    try:
        units = lake.row_group_units(
            [f for d in dates for f in lake.list_files(lake.partition(root, lake.EVENTS, d))]
        )
        beam_options = context.beam_options()
        with run_pipeline(beam_options) as p:
            _ = (
                p
                | "ReadBatches" >> beam.Create(batches_of(units, parallel_tasks(beam_options)))
                | "DailyUsage" >> DailyUsage()
                | "StageDays" >> beam.ParDo(StageDay(stage))
            )
        staged = {
            name: _read_staged(stage, name, dates, schema)
            for name, schema in (("usage", USAGE_SCHEMA), ("errors", ERROR_SCHEMA), ("speed", SPEED_SCHEMA))
        }
        usage = staged["usage"]
        daily = model_daily(usage, staged["speed"])
        with engine.begin() as conn:  # all of it or nothing: a rerun replaces these dates' rows
            replace_rows(conn, UsageDaily.__table__, "day", dates, usage)
            replace_rows(conn, UsageDailyError.__table__, "day", dates, staged["errors"])
            replace_rows(conn, ModelDaily.__table__, "day", dates, daily)
            mark_aggregated(conn, dates[0], dates[-1], started)
            fence.check(conn)  # the last statement: a run that lost its lock commits nothing
    finally:
        lake.discard(stage)
    counts = usage.group_by("day").aggregate([([], "count_all")]).to_pylist() if usage.num_rows else []
    loaded = {d: 0 for d in dates}
    loaded.update({r["day"]: r["count_all"] for r in counts})
    return loaded
