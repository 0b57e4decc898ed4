"""Effectiveness: task outcomes joined to their requests -> ``task_effectiveness``, per ISO week.

    usage-billing effectiveness compute --from 2026-08-03 --to 2026-08-30
    usage-billing effectiveness compute            # the weeks that changed since they were computed

One element per ISO week (UTC, by completed_at). A DoFn reads the week's outcomes and, with Arrow's
pushdown, the requests of those tasks from the event partitions of the dates their tasks span; the
join, the attribution and the figures are Arrow and numpy (``billing.effectiveness``), so memory is
one week's tasks whatever the number of weeks. Each week's tasks (``lake/tasks/date=<Monday>/``) and
groups are staged from ``process`` (runner-portable); the driver commits the task partitions and
replaces the weeks' rows in ``task_effectiveness`` and ``effectiveness_weeks`` in one transaction,
with the queue rows the run covered. A rerun gives the same rows.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Engine, delete, select

from billing import effectiveness as eff
from billing.calendar import monday
from billing.effectiveness_groups import group_metrics
from pipelines import lake
from pipelines.errors import UsageBillingError
from pipelines.runtime.context import RunContext, StepOptions, split_argv
from pipelines.runtime.dates import dates_of
from pipelines.runtime.options import run_pipeline
from pipelines.runtime.staging import fresh_stage, new_run_id
from pipelines.warehouse.binding import require_lake
from pipelines.warehouse.engine import insert_arrow
from pipelines.warehouse.gate import held_back
from pipelines.warehouse.locks import Fence, database_lock, step_lock
from schemas.catalog import Catalog
from schemas.events import LAKE_SCHEMA, utc_date
from schemas.lake import AMOUNT
from schemas.outcomes import MAX_TASK_DAYS, OUTCOME_LAKE_SCHEMA
from schemas.warehouse import EffectivenessQueue, EffectivenessWeek, TaskEffectiveness

log = logging.getLogger(__name__)

STEP = "effectiveness"
MS = pa.decimal128(20, 3)  # milliseconds of a microsecond span, exact
TASKS = (
    "tasks"  # lake/tasks/date=<week start>/: one row per task of the week (billing.effectiveness.TASK_SCHEMA)
)
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


def week_dates(week: dt.date) -> list[dt.date]:
    return [week + dt.timedelta(days=i) for i in range(7)]


Held = frozenset[tuple[str, dt.date]]  # (dataset, UTC date) partitions the data-quality gate holds back


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


def requests_for(lake_root: str, outcomes: pa.Table, held: Held = frozenset()) -> pa.Table:
    """The clean events that carry one of the outcomes' task ids, on the UTC dates their tasks span."""
    if outcomes.num_rows == 0:
        return pa.schema([LAKE_SCHEMA.field(c) for c in eff.REQUEST_COLUMNS]).empty_table()
    first = pc.min(utc_date(outcomes["started_at"])).as_py()
    last = pc.max(utc_date(outcomes["completed_at"])).as_py()
    dates = [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]
    ids = pc.unique(outcomes["task_id"].combine_chunks())
    where = pc.field("task_id").isin(ids)
    files = partition_files(lake_root, lake.EVENTS, dates, held)
    return lake.scan(files, list(eff.REQUEST_COLUMNS), where, LAKE_SCHEMA, ["model", "speed_tier"])


def compute_week(
    lake_root: str, catalog: Catalog, week: dt.date, held: Held = frozenset()
) -> tuple[pa.Table, pa.Table, dict]:
    """(the week's tasks, its groups as ``GROUP_SCHEMA``, its counts) from the lake, but for the
    partitions the gate holds back (``held``)."""
    outcomes = week_outcomes(lake_root, week, held)
    joined = eff.task_requests(outcomes, requests_for(lake_root, outcomes, held))
    tasks = eff.tasks(outcomes, joined, catalog)
    groups = group_metrics(tasks, catalog.effectiveness.per_hour)
    counts = {
        "week_start": week,
        "outcomes": outcomes.num_rows,
        "tasks": tasks.num_rows,
        "orphan_outcomes": outcomes.num_rows - tasks.num_rows,
    }
    return tasks, pa.Table.from_pylist(groups, schema=GROUP_SCHEMA), counts


class ComputeWeek(beam.DoFn):
    """One ISO week -> its tasks, groups and counts staged in the run's folder."""

    def __init__(self, lake_root: str, stage_root: str, catalog: Catalog, held: Held = frozenset()) -> None:
        self.lake_root, self.stage_root, self.catalog, self.held = lake_root, stage_root, catalog, held

    def process(self, week: dt.date):
        tasks, groups, counts = compute_week(self.lake_root, self.catalog, week, self.held)
        if tasks.num_rows:
            lake.write_parquet(
                lake.join(lake.partition(self.stage_root, TASKS, week), "part-0000.parquet"), tasks
            )
        lake.write_parquet(
            lake.join(lake.partition(self.stage_root, "groups", week), "part-0000.parquet"), groups
        )
        counts_table = pa.Table.from_pylist([counts], schema=WEEK_SCHEMA)
        lake.write_parquet(
            lake.join(lake.partition(self.stage_root, "weeks", week), "part-0000.parquet"), counts_table
        )
        yield week


class WeeklyEffectiveness(beam.PTransform):
    """ISO weeks (Mondays) -> the weeks staged (tasks, groups, counts) under ``stage_root``."""

    def __init__(self, lake_root: str, stage_root: str, catalog: Catalog, held: Held = frozenset()) -> None:
        super().__init__()
        self.lake_root, self.stage_root, self.catalog, self.held = lake_root, stage_root, catalog, held

    def expand(self, weeks):
        compute = ComputeWeek(self.lake_root, self.stage_root, self.catalog, self.held)
        return weeks | "Reshuffle" >> beam.Reshuffle() | "ComputeWeek" >> beam.ParDo(compute)


# -- which weeks a changed date reaches --------------------------------------------------------


def weeks_of_request_dates(
    lake_root: str, days: list[dt.date], cache: dict[dt.date, np.ndarray] | None = None
) -> set[dt.date]:
    """Weeks holding an outcome whose task spans one of ``days`` (a request on that day may join it):
    the outcome partitions from the first day to MAX_TASK_DAYS after the last, their started_at only
    (``cache``: the started dates already read, per partition)."""
    if not days:
        return set()
    cache = {} if cache is None else cache
    wanted = np.array(sorted(days), dtype="datetime64[D]")
    last = max(days) + dt.timedelta(days=MAX_TASK_DAYS)
    out: set[dt.date] = set()
    for d in lake.partition_dates(lake_root, lake.OUTCOMES):
        if not min(days) <= d <= last:
            continue
        if d not in cache:
            files = lake.list_files(lake.partition(lake_root, lake.OUTCOMES, d))
            started = lake.scan(files, ["started_at"], pc.scalar(True), OUTCOME_LAKE_SCHEMA)["started_at"]
            cache[d] = np.asarray(utc_date(started).to_numpy(zero_copy_only=False), dtype="datetime64[D]")
        first = cache[d]
        if len(first) == 0:
            continue
        # a changed day D with first <= D <= d: the smallest changed day at or after each start
        pos = np.searchsorted(wanted, first, side="left")
        reach = (pos < len(wanted)) & (wanted[np.clip(pos, 0, len(wanted) - 1)] <= np.datetime64(d))
        if reach.any():
            out.add(monday(d))
    return out


def queued(engine: Engine, before: dt.datetime | None = None) -> list[tuple[dt.date, str, str]]:
    """The queue's rows (day, dataset, run id), those queued up to ``before`` only if given."""
    q = EffectivenessQueue.__table__.c
    query = select(q.day, q.dataset, q.run_id)
    if before is not None:
        query = query.where(q.queued_at <= before)
    with engine.connect() as conn:
        return [(r.day, r.dataset, r.run_id) for r in conn.execute(query.order_by(q.day)).all()]


def weeks_of(lake_root: str, rows: list[tuple[dt.date, str, str]]) -> dict[tuple, set[dt.date]]:
    """Per queue row: the weeks it reaches (an outcome date its own week; a request date the weeks of
    the outcomes whose tasks span it)."""
    out: dict[tuple, set[dt.date]] = {}
    cache: dict[dt.date, np.ndarray] = {}
    for row in rows:
        day, dataset = row[0], row[1]
        if dataset == lake.OUTCOMES:
            out[row] = {monday(day)}
        else:
            out[row] = weeks_of_request_dates(lake_root, [day], cache)
    return out


# -- driver -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EffectivenessOptions(StepOptions):
    """``skip``: dates whose queue rows stay queued (the data-quality gate stopped them)."""

    skip: frozenset[dt.date] = frozenset()


def run(
    context: RunContext, dates: list[dt.date] | None = None, options: EffectivenessOptions | None = None
) -> list[dt.date]:
    """Compute the weeks of ``dates`` (every ISO week touching them), or without dates the weeks the
    queue holds (but for its rows of ``options.skip`` dates, which stay queued); returns the weeks
    computed."""
    with database_lock(context.settings, "effectiveness") as fence:
        return _run(context, dates, options or EffectivenessOptions(), fence)


def main(argv: list[str] | None = None) -> list[dt.date]:
    """``run`` from an argument list (a script, a test): settings flags, dates (or none: the queue),
    Beam's flags."""
    settings, flags, beam_args = split_argv(argv)
    dates = dates_of(flags) if (flags.date or flags.from_date or flags.to_date) else None
    with RunContext.open(settings, beam_args) as context:
        return run(context, dates, EffectivenessOptions(flags.run_id))


def _run(
    context: RunContext, dates: list[dt.date] | None, options: EffectivenessOptions, fence: Fence | None
) -> list[dt.date]:
    engine, root = context.engine, context.lake
    require_lake(engine, root, STEP)
    with step_lock(engine, lake.ingest_lock(root)):  # not while an ingest swaps partitions
        for dataset in (lake.EVENTS, lake.OUTCOMES):
            lake.recover(root, dataset)
    started = dt.datetime.now(dt.UTC)
    held = held_partitions(engine)
    # a week with a partition the gate holds back waits (its queue rows too) until it is accepted
    waiting = {d for _, d in held} | set(options.skip)
    pending = [r for r in queued(engine, started) if r[0] not in waiting]
    reach = weeks_of(root, pending)
    if dates is None:
        weeks = sorted(set().union(*reach.values())) if reach else []
    else:
        weeks = sorted({monday(d) for d in dates})
    blocked_weeks = {monday(d) for d in waiting}
    if blocked_weeks & set(weeks):
        log.warning("%s: weeks %s wait for the data-quality gate", STEP, sorted(blocked_weeks & set(weeks)))
        weeks = [w for w in weeks if w not in blocked_weeks]
    covered = [r for r, w in reach.items() if w <= set(weeks)]
    if weeks:
        _compute(context, options, weeks, covered, held, fence)
    elif covered:
        _dequeue(engine, covered)
    return weeks


def _dequeue(engine: Engine, rows: list[tuple]) -> None:
    with engine.begin() as conn:
        _delete_queued(conn, rows)


def _delete_queued(conn, rows: list[tuple]) -> None:
    q = EffectivenessQueue.__table__
    for day, dataset, run_id in rows:
        conn.execute(delete(q).where(q.c.day == day, q.c.dataset == dataset, q.c.run_id == run_id))


def _read(stage: str, name: str, weeks: list[dt.date], schema: pa.Schema) -> pa.Table:
    tables = [lake.read_parquet(f) for w in weeks for f in lake.list_files(lake.partition(stage, name, w))]
    return pa.concat_tables(tables).cast(schema) if tables else schema.empty_table()


def _compute(
    context: RunContext,
    options: StepOptions,
    weeks: list[dt.date],
    covered: list[tuple],
    held: Held,
    fence: Fence | None = None,
) -> None:
    engine, catalog = context.engine, context.catalog
    run_id = options.run_id or new_run_id("effectiveness")
    stage = fresh_stage(context.lake, run_id, STEP)
    try:
        with run_pipeline(context.beam_options()) as p:
            _ = (
                p
                | "Weeks" >> beam.Create(weeks)
                | "WeeklyEffectiveness" >> WeeklyEffectiveness(context.lake, stage, catalog, held)
            )
        groups = _read(stage, "groups", weeks, GROUP_SCHEMA)
        counts = _read(stage, "weeks", weeks, WEEK_SCHEMA)
        if counts.num_rows != len(weeks):
            raise UsageBillingError(f"effectiveness: {counts.num_rows} of {len(weeks)} weeks were staged")
        for week in weeks:
            lake.commit(lake.partition(stage, TASKS, week), lake.partition(context.lake, TASKS, week), run_id)
        now = dt.datetime.now(dt.UTC)
        n = groups.num_rows
        groups = groups.append_column("computed_at", pa.array([now] * n, pa.timestamp("us", tz="UTC")))
        counts = counts.append_column(
            "computed_at", pa.array([now] * counts.num_rows, pa.timestamp("us", tz="UTC"))
        )
        te, ew = TaskEffectiveness.__table__, EffectivenessWeek.__table__
        with engine.begin() as conn:  # every week of the run, or none
            for i in range(0, len(weeks), 500):
                part = weeks[i : i + 500]
                conn.execute(delete(te).where(te.c.week_start.in_(part)))
                conn.execute(delete(ew).where(ew.c.week_start.in_(part)))
            insert_arrow(conn, te, groups)
            insert_arrow(conn, ew, counts)
            _delete_queued(conn, covered)
            if fence is not None:
                fence.check(conn)
    finally:
        lake.discard(stage)
