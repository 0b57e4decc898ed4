"""Effectiveness: task outcomes joined to their requests -> ``task_effectiveness``, per ISO week.

    usage-billing effectiveness compute --from 2026-08-03 --to 2026-08-30
    usage-billing effectiveness compute            # the weeks that changed since they were computed

ISO weeks (UTC, by completed_at), each computed in parts spread over the workers (``weeks``): each
part reads the week's outcome keys and its share of the event files of the dates their tasks span,
and sums its requests per (task, model, tier); one task per week finishes from the parts' exact sums.
The join, the attribution and the figures are Arrow and numpy (``billing.effectiveness``), so memory is
a few days' requests and one week's tasks whatever the number of weeks. Each week's tasks
(``lake/tasks/date=<Monday>/``) and groups are staged from ``process`` (runner-portable); the driver
commits the task partitions and replaces the weeks' rows in ``task_effectiveness`` and
``effectiveness_weeks`` in one transaction, with the queue rows the run covered. A rerun gives the
same rows.
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

from billing.calendar import monday
from pipelines import lake
from pipelines.effectiveness.weeks import (
    GROUP_SCHEMA,
    TASKS,
    WEEK_SCHEMA,
    Held,
    WeeklyEffectiveness,
    held_partitions,
    parts_of,
)
from pipelines.errors import UsageBillingError
from pipelines.runtime.context import RunContext, StepOptions, split_argv
from pipelines.runtime.dates import dates_of
from pipelines.runtime.options import parallel_tasks, run_pipeline
from pipelines.runtime.staging import fresh_stage, new_run_id
from pipelines.warehouse.binding import require_lake
from pipelines.warehouse.engine import insert_arrow
from pipelines.warehouse.locks import Fence, database_lock, step_lock
from schemas.events import utc_date
from schemas.outcomes import MAX_TASK_DAYS, OUTCOME_LAKE_SCHEMA
from schemas.warehouse import EffectivenessQueue, EffectivenessWeek, TaskEffectiveness

log = logging.getLogger(__name__)

STEP = "effectiveness"


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
        beam_options = context.beam_options()
        parts = parallel_tasks(beam_options)
        with run_pipeline(beam_options) as p:
            _ = (
                p
                | "Parts" >> beam.Create(parts_of(weeks, parts))
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
