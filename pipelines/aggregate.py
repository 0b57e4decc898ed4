"""Daily usage: clean lake partitions -> ``usage_daily`` (account, model, speed tier, UTC day).

    usage-billing usage aggregate --date 2026-03-02
    usage-billing usage aggregate --from 2026-02-01 --to 2026-02-28

One element per Parquet row group; a DoFn sums it with pyarrow into a small partial table per day;
``CombinePerKey`` re-sums the partials of a day (Arrow tables, not one object per event). The day's
result is staged as Parquet from ``process`` and the driver loads all days in one transaction,
replacing those days' rows: a rerun leaves the same rows.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc

from pipelines import lake
from pipelines.beam_options import CommonOptions, date_range, make_pipeline, pipeline_options
from pipelines.usage import LAKE_COLUMNS, USAGE_SCHEMA, combine_usage, partial_usage
from pipelines.warehouse import make_engine, replace_rows, require_schema
from schemas.warehouse import UsageDaily

COMPACT_EVERY = 32


class AggregateOptions(CommonOptions):
    @classmethod
    def _add_argparse_args(cls, parser) -> None:  # type: ignore[no-untyped-def]
        parser.add_argument("--run_id", default=None)


class ReadRowGroup(beam.DoFn):
    def __init__(self, columns: list[str]) -> None:
        self.columns = columns

    def process(self, unit: tuple[str, int]):  # type: ignore[no-untyped-def]
        path, group = unit
        yield lake.open_parquet(path).read_row_group(group, columns=self.columns)


class PartialUsageByDay(beam.DoFn):
    def process(self, events: pa.Table):  # type: ignore[no-untyped-def]
        partial = partial_usage(events)
        days = partial["day"].unique()
        if len(days) == 1:
            yield days[0].as_py().isoformat(), partial
            return
        for day in days.to_pylist():
            yield day.isoformat(), partial.filter(pc.equal(partial["day"], pa.scalar(day, pa.date32())))


class CombineUsageTables(beam.CombineFn):
    """Accumulator: a short list of partial tables, compacted as it grows."""

    def create_accumulator(self) -> list[pa.Table]:
        return []

    def add_input(self, acc: list[pa.Table], table: pa.Table) -> list[pa.Table]:
        acc.append(table)
        return [combine_usage(acc)] if len(acc) >= COMPACT_EVERY else acc

    def merge_accumulators(self, accs: Iterable[list[pa.Table]]) -> list[pa.Table]:
        return [combine_usage([t for acc in accs for t in acc])]

    def extract_output(self, acc: list[pa.Table]) -> pa.Table:
        return combine_usage(acc)


class StageTable(beam.DoFn):
    def __init__(self, stage_root: str, dataset: str) -> None:
        self.stage_root, self.dataset = stage_root, dataset

    def process(self, element):  # type: ignore[no-untyped-def]
        day, table = element
        path = lake.join(lake.partition(self.stage_root, self.dataset, day), "part-0000.parquet")
        lake.write_parquet(path, table)
        yield day


class DailyUsage(beam.PTransform):
    """(path, row group) units -> (day, usage table) pairs, one per UTC day."""

    def expand(self, units):  # type: ignore[no-untyped-def]
        return (
            units
            | "ReadRowGroups" >> beam.ParDo(ReadRowGroup(LAKE_COLUMNS))
            | "PartialUsage" >> beam.ParDo(PartialUsageByDay())
            | "CombineUsage" >> beam.CombinePerKey(CombineUsageTables())
        )


def lake_units(lake_root: str, dates: list[dt.date]) -> list[tuple[str, int]]:
    files = [f for d in dates for f in lake.list_files(lake.partition(lake_root, lake.EVENTS, d))]
    return lake.row_groups(files)


def run(argv: list[str] | None = None) -> dict[dt.date, int]:
    """Aggregate the dates; returns rows loaded per day."""
    options = pipeline_options(argv)
    opts = options.view_as(AggregateOptions)
    dates = date_range(opts)
    engine = make_engine(opts.database_url)
    require_schema(engine)
    lake.recover(opts.lake, lake.EVENTS)
    run_id = opts.run_id or f"aggregate-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    stage = lake.staging(opts.lake, run_id)
    try:
        units = lake_units(opts.lake, dates)
        with make_pipeline(options) as p:
            _ = (
                p
                | "ReadUnits" >> beam.Create(units)
                | "DailyUsage" >> DailyUsage()
                | "StageUsage" >> beam.ParDo(StageTable(stage, "usage_daily"))
            )
        wanted = set(dates)
        tables = [
            lake.read_parquet(f)
            for d in lake.partition_dates(stage, "usage_daily")
            if d in wanted
            for f in lake.list_files(lake.partition(stage, "usage_daily", d))
        ]
        usage = pa.concat_tables(tables) if tables else USAGE_SCHEMA.empty_table()
        with engine.begin() as conn:
            replace_rows(conn, UsageDaily.__table__, "day", dates, usage)
    finally:
        lake.discard(stage)
        engine.dispose()
    counts = usage.group_by("day").aggregate([([], "count_all")]).to_pylist() if usage.num_rows else []
    loaded = {d: 0 for d in dates}
    loaded.update({r["day"]: r["count_all"] for r in counts})
    return loaded
