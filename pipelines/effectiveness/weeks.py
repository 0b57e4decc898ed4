"""One ISO week's effectiveness, computed in parts that any worker can take.

A week is ``parts`` elements from the start (``parts_of``: one per task the runner runs at once) and
two steps, each staged under the run's folder (nothing large crosses between tasks but file names):

1. ``PairsOfPart`` (one task per part, spread over the workers): the week's outcomes' keys, the event
   files of the dates their tasks span, and of those the part's share, read ``PART_FILES`` files at a
   time; its requests joined to the outcomes and summed per (task, model, tier)
   (``billing.effectiveness.task_pairs``), staged as ``pairs/date=<Monday>/part-<i>.parquet``. This
   is where the events are read: the step's cost.
2. ``FinishWeek`` (one task a week, once every part is staged): the pairs of all parts ->
   ``billing.effectiveness.tasks_from_pairs`` (the same tasks as from all requests at once: the sums
   are exact and add up), its groups and counts, staged for the driver to commit. Every part numbers
   tasks by their row in the week's outcomes, so each records a stamp of the outcome files it read and
   the week stops with an error unless all of them, and this task's before and after its read, agree.
"""

from __future__ import annotations

import datetime as dt
import hashlib

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Engine

from billing import effectiveness as eff
from billing.effectiveness_groups import group_metrics
from pipelines import lake
from pipelines.errors import UsageBillingError
from pipelines.runtime import faults
from pipelines.warehouse.gate import held_back
from schemas.catalog import Catalog
from schemas.events import LAKE_SCHEMA, utc_date
from schemas.lake import AMOUNT
from schemas.outcomes import OUTCOME_LAKE_SCHEMA

MS = pa.decimal128(20, 3)  # milliseconds of a microsecond span, exact
TASKS = (
    "tasks"  # lake/tasks/date=<week start>/: one row per task of the week (billing.effectiveness.TASK_SCHEMA)
)
PART_FILES = 8  # event files a part reads at a time (a day is the lake's shard files: 8 by default)
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
    """``files`` in ``parts`` runs of neighbours, as even as they come (some empty when there are fewer
    files than parts)."""
    return [files[i * len(files) // parts : (i + 1) * len(files) // parts] for i in range(parts)]


def _staged(stage_root: str, name: str, week: dt.date, part: int = 0) -> str:
    return lake.join(lake.partition(stage_root, name, week), f"part-{part:04d}.parquet")


def _stamp(lake_root: str, week: dt.date, held: Held) -> tuple[list[str], str]:
    """The week's outcome files and a stamp of them (their names, sizes and times)."""
    files = partition_files(lake_root, lake.OUTCOMES, week_dates(week), held)
    return files, hashlib.sha256(repr(lake.stamps(files)).encode()).hexdigest()


def _outcomes(lake_root: str, week: dt.date, held: Held, columns: list[str]) -> tuple[pa.Table, str]:
    """The week's outcomes (``columns``) and the stamp of their files taken before reading: every task
    of a week must see the same outcomes, whose rows its pairs number."""
    files, stamp = _stamp(lake_root, week, held)
    return lake.scan(files, columns, pc.scalar(True), OUTCOME_LAKE_SCHEMA), stamp


class PairsOfPart(beam.DoFn):
    """(week, part, parts) -> the ``task_pairs`` of the part's share of the week's request files,
    staged (``PART_FILES`` files read at a time); (the week's ISO date, (part, parts, stamp))."""

    def __init__(self, lake_root: str, stage_root: str, catalog: Catalog, held: Held = frozenset()) -> None:
        self.lake_root, self.stage_root, self.catalog, self.held = lake_root, stage_root, catalog, held

    def process(self, element):
        week, i, n = element
        keys, stamp = _outcomes(self.lake_root, week, self.held, JOIN_COLUMNS)
        mine = split(request_files(self.lake_root, keys, self.held), n)[i]
        pairs = [
            eff.task_pairs(eff.task_requests(keys, requests_in(mine[at : at + PART_FILES])), self.catalog)
            for at in range(0, len(mine), PART_FILES)
        ]
        staged = pa.concat_tables(pairs) if pairs else eff.PAIR_SCHEMA.empty_table()
        lake.write_parquet(_staged(self.stage_root, "pairs", week, i), staged)
        yield week.isoformat(), (i, n, stamp)  # a key Beam encodes deterministically (a date it does not)


class FinishWeek(beam.DoFn):
    """(week, its staged parts) -> the week's tasks, groups and counts staged; the week."""

    def __init__(self, lake_root: str, stage_root: str, catalog: Catalog, held: Held = frozenset()) -> None:
        self.lake_root, self.stage_root, self.catalog, self.held = lake_root, stage_root, catalog, held

    def process(self, element):
        day, done = element
        week, done = dt.date.fromisoformat(day), sorted(done)
        n = done[0][1]
        if [i for i, _, _ in done] != list(range(n)):
            raise UsageBillingError(f"effectiveness: week {week}: {len(done)} of {n} parts were staged")
        outcomes, before = _outcomes(self.lake_root, week, self.held, list(eff.OUTCOME_COLUMNS))
        _, after = _stamp(self.lake_root, week, self.held)
        if {before, after} != {stamp for _, _, stamp in done}:
            raise UsageBillingError(
                f"effectiveness: week {week}: its task outcomes changed while it was computed; run it again"
            )
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
        faults.checkpoint("effectiveness.staged")
        yield week


class WeeklyEffectiveness(beam.PTransform):
    """(week, part, parts) elements (``parts_of``) -> the weeks staged (tasks, groups, counts) under
    ``stage_root``."""

    def __init__(self, lake_root: str, stage_root: str, catalog: Catalog, held: Held = frozenset()) -> None:
        super().__init__()
        self.lake_root, self.stage_root, self.catalog, self.held = lake_root, stage_root, catalog, held

    def expand(self, parts):
        pairs = PairsOfPart(self.lake_root, self.stage_root, self.catalog, self.held)
        return (
            parts
            | "Reshuffle" >> beam.Reshuffle()
            | "PairsOfPart" >> beam.ParDo(pairs)
            | "PartsOfWeek" >> beam.GroupByKey()
            | "FinishWeek" >> beam.ParDo(FinishWeek(self.lake_root, self.stage_root, self.catalog, self.held))
        )


def parts_of(weeks: list[dt.date], parts: int) -> list[tuple[dt.date, int, int]]:
    """Each week's parts as the pipeline's first elements: the DaskRunner keeps a step's partitions, so
    parts made inside one task would all run in that task's partition, one after another."""
    return [(week, i, parts) for week in weeks for i in range(parts)]
