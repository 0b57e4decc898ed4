"""One ISO week's effectiveness, computed in parts that any worker can take.

A week is three steps, each staged under the run's folder (runner-portable, nothing large crosses
between tasks but file names):

1. ``PlanWeek`` (one task a week): the week's outcomes are read once and staged
   (``outcomes/date=<Monday>/``); the event files of the dates their tasks span are cut into parts
   of ``PART_FILES`` files.
2. ``PairsOfPart`` (one task per part, spread over the workers): a part's requests of the week's
   tasks (Arrow's pushdown on task_id), joined to the staged outcomes and summed per (task, model,
   tier): ``billing.effectiveness.task_pairs``, staged as ``pairs/date=<Monday>/part-<i>.parquet``.
   This is where the events are read: the step's cost.
3. ``FinishWeek`` (one task a week, once every part is staged): the pairs of all parts ->
   ``billing.effectiveness.tasks_from_pairs`` (the same tasks as from all requests at once: the sums
   are exact and add up), its groups and counts, staged for the driver to commit.
"""

from __future__ import annotations

import datetime as dt

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Engine

from billing import effectiveness as eff
from billing.effectiveness_groups import group_metrics
from pipelines import lake
from pipelines.errors import UsageBillingError
from pipelines.warehouse.gate import held_back
from schemas.catalog import Catalog
from schemas.events import LAKE_SCHEMA, utc_date
from schemas.lake import AMOUNT
from schemas.outcomes import OUTCOME_LAKE_SCHEMA

MS = pa.decimal128(20, 3)  # milliseconds of a microsecond span, exact
TASKS = (
    "tasks"  # lake/tasks/date=<week start>/: one row per task of the week (billing.effectiveness.TASK_SCHEMA)
)
PART_FILES = 8  # at most this many event files per part (a day's events are the lake's 8 shard files)
JOIN_COLUMNS = ["account_id", "task_id", "started_at", "completed_at"]  # what task_requests needs
GROUP_SCHEMA = pa.schema(
    [
        ("week_start", pa.date32()),
        ("model", pa.string()),
        ("speed_tier", pa.string()),
        ("task_class", pa.string()),
        ("tasks", pa.int64()),
        ("one_pass", pa.int64()),
        ("reworked", pa.int64()),
        ("abandoned", pa.int64()),
        ("mixed", pa.int64()),
        ("one_pass_rate", pa.float64()),
        ("rework_share", pa.float64()),
        ("abandon_share", pa.float64()),
        ("e2e_ms_mean", pa.int64()),
        ("e2e_ms_p50", MS),
        ("e2e_ms_p90", MS),
        ("model_ms_mean", pa.int64()),
        ("rework_ms_total", pa.int64()),
        ("token_cost", AMOUNT),
        ("rework_cost", AMOUNT),
        ("cost_per_accepted_task", AMOUNT),
    ]
)
WEEK_SCHEMA = pa.schema(
    [
        ("week_start", pa.date32()),
        ("outcomes", pa.int64()),
        ("tasks", pa.int64()),
        ("orphan_outcomes", pa.int64()),
    ]
)

Held = frozenset[tuple[str, dt.date]]  # (dataset, UTC date) partitions the data-quality gate holds back


def week_dates(week: dt.date) -> list[dt.date]:
    return [week + dt.timedelta(days=i) for i in range(7)]


def partition_files(
    lake_root: str, dataset: str, dates: list[dt.date], held: Held = frozenset()
) -> list[str]:
    """The files of the partitions of ``dates`` that exist and the gate lets through."""
    committed = set(lake.partition_dates(lake_root, dataset))
    return [
        f
        for d in dates
        if d in committed and (dataset, d) not in held
        for f in lake.list_files(lake.partition(lake_root, dataset, d))
    ]


def held_partitions(engine: Engine) -> Held:
    return frozenset(
        (dataset, d) for dataset in (lake.EVENTS, lake.OUTCOMES) for d in held_back(engine, dataset)
    )


def week_outcomes(lake_root: str, week: dt.date, held: Held = frozenset()) -> pa.Table:
    """The outcomes completed in the ISO week starting ``week`` (UTC)."""
    files = partition_files(lake_root, lake.OUTCOMES, week_dates(week), held)
    return lake.scan(files, list(eff.OUTCOME_COLUMNS), pc.scalar(True), OUTCOME_LAKE_SCHEMA)


def request_files(lake_root: str, outcomes: pa.Table, held: Held = frozenset()) -> list[str]:
    """The event files of the UTC dates the outcomes' tasks span."""
    if outcomes.num_rows == 0:
        return []
    first = pc.min(utc_date(outcomes["started_at"])).as_py()
    last = pc.max(utc_date(outcomes["completed_at"])).as_py()
    dates = [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]
    return partition_files(lake_root, lake.EVENTS, dates, held)


def requests_in(files: list[str]) -> pa.Table:
    """The clean events of ``files`` that carry a task id (``billing.effectiveness.task_requests``
    joins them to the outcomes: a filter on the week's task ids hashed millions of ids per part for
    little, since most events with a task id are the week's)."""
    if not files:
        return pa.schema([LAKE_SCHEMA.field(c) for c in eff.REQUEST_COLUMNS]).empty_table()
    where = pc.field("task_id").is_valid()
    return lake.scan(files, list(eff.REQUEST_COLUMNS), where, LAKE_SCHEMA, ["model", "speed_tier"])


def split(files: list[str], parts: int) -> list[list[str]]:
    """``files`` in at least ``parts`` runs of neighbours (as even as they come), none longer than
    ``PART_FILES``; one empty part when there is no file."""
    if not files:
        return [[]]
    n = min(len(files), max(parts, -(-len(files) // PART_FILES)))
    return [files[i * len(files) // n : (i + 1) * len(files) // n] for i in range(n)]


def _staged(stage_root: str, name: str, week: dt.date, part: int = 0) -> str:
    return lake.join(lake.partition(stage_root, name, week), f"part-{part:04d}.parquet")


class PlanWeek(beam.DoFn):
    """A week -> its outcomes staged; (week, (part, parts, files)) per part of its request files."""

    def __init__(self, lake_root: str, stage_root: str, held: Held = frozenset(), parts: int = 1) -> None:
        self.lake_root, self.stage_root, self.held, self.parts = lake_root, stage_root, held, parts

    def process(self, week: dt.date):
        outcomes = week_outcomes(self.lake_root, week, self.held)
        lake.write_parquet(_staged(self.stage_root, "outcomes", week), outcomes)
        files = request_files(self.lake_root, outcomes, self.held)
        parts = split(files, self.parts)
        for i, part in enumerate(parts):
            yield week, (i, len(parts), part)


class PairsOfPart(beam.DoFn):
    """(week, (part, parts, files)) -> the part's ``task_pairs`` staged; (the week's ISO date, (part,
    parts))."""

    def __init__(self, stage_root: str, catalog: Catalog) -> None:
        self.stage_root, self.catalog = stage_root, catalog

    def process(self, element):
        week, (i, n, files) = element
        keys = lake.read_parquet(_staged(self.stage_root, "outcomes", week), columns=JOIN_COLUMNS)
        joined = eff.task_requests(keys, requests_in(files) if keys.num_rows else requests_in([]))
        lake.write_parquet(_staged(self.stage_root, "pairs", week, i), eff.task_pairs(joined, self.catalog))
        yield week.isoformat(), (i, n)  # a key Beam encodes deterministically (a date it does not)


class FinishWeek(beam.DoFn):
    """(week, its staged parts) -> the week's tasks, groups and counts staged; the week."""

    def __init__(self, stage_root: str, catalog: Catalog) -> None:
        self.stage_root, self.catalog = stage_root, catalog

    def process(self, element):
        day, done = element
        week, done = dt.date.fromisoformat(day), sorted(done)
        n = done[0][1]
        if [i for i, _ in done] != list(range(n)):
            raise UsageBillingError(f"effectiveness: week {week}: {len(done)} of {n} parts were staged")
        outcomes = lake.read_parquet(_staged(self.stage_root, "outcomes", week))
        pairs = lake.read_parquet_files([_staged(self.stage_root, "pairs", week, i) for i in range(n)])
        tasks = eff.tasks_from_pairs(outcomes, pa.concat_tables(pairs), self.catalog)
        groups = pa.Table.from_pylist(
            group_metrics(tasks, self.catalog.effectiveness.per_hour), schema=GROUP_SCHEMA
        )
        counts = {
            "week_start": week,
            "outcomes": outcomes.num_rows,
            "tasks": tasks.num_rows,
            "orphan_outcomes": outcomes.num_rows - tasks.num_rows,
        }
        if tasks.num_rows:
            lake.write_parquet(_staged(self.stage_root, TASKS, week), tasks)
        lake.write_parquet(_staged(self.stage_root, "groups", week), groups)
        lake.write_parquet(
            _staged(self.stage_root, "weeks", week), pa.Table.from_pylist([counts], schema=WEEK_SCHEMA)
        )
        yield week


class WeeklyEffectiveness(beam.PTransform):
    """ISO weeks (Mondays) -> the weeks staged (tasks, groups, counts) under ``stage_root``."""

    def __init__(
        self, lake_root: str, stage_root: str, catalog: Catalog, held: Held = frozenset(), parts: int = 1
    ) -> None:
        super().__init__()
        self.lake_root, self.stage_root, self.catalog, self.held = lake_root, stage_root, catalog, held
        self.parts = parts  # a week in at least this many parts: the tasks the runner runs at once

    def expand(self, weeks):
        return (
            weeks
            | "Reshuffle" >> beam.Reshuffle()
            | "PlanWeek" >> beam.ParDo(PlanWeek(self.lake_root, self.stage_root, self.held, self.parts))
            | "SpreadParts" >> beam.Reshuffle()
            | "PairsOfPart" >> beam.ParDo(PairsOfPart(self.stage_root, self.catalog))
            | "PartsOfWeek" >> beam.GroupByKey()
            | "FinishWeek" >> beam.ParDo(FinishWeek(self.stage_root, self.catalog))
        )
