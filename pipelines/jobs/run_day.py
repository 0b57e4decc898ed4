"""The run-day chain: ingest, the data-quality gate, aggregate, meter, effectiveness.

One function per step (``ingest_step``, ``gate_step``, ``aggregate_step``, ``meter_changed``,
``effectiveness_step``), each
a ``run(argv)`` of one pipeline or a warehouse call: a step only decides which dates it works on.
The recompute queue's rows are marked by the aggregate and meter pipelines themselves
(``pipelines.warehouse.recompute``), whoever runs them. ``ingest_and_aggregate`` chains them for
``run-day``; the Airflow tasks (``jobs/tasks.py``) call one step each, and the demo calls the same
steps on its whole range.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from sqlalchemy import Engine

from billing.calendar import Coupling
from pipelines.errors import DataQualityError
from pipelines.ingest import events as ingest
from pipelines.quota import meter
from pipelines.quota.remeter import stale_dates
from pipelines.runtime.options import contiguous
from pipelines.settings import Settings
from pipelines.usage import aggregate
from schemas.catalog import Catalog

Step = Callable[[str], None]  # progress callback: called with a step name when it starts


@dataclass
class DayResult:
    ingest: ingest.IngestResult
    aggregated: list[dt.date] = field(default_factory=list)
    metered: list[str] = field(default_factory=list)  # per metering run: its dates, what it started from
    blocked: list[dt.date] = field(default_factory=list)  # dates the data-quality gate stopped
    effectiveness: list[dt.date] = field(default_factory=list)  # ISO weeks whose effectiveness was computed


def date_args(dates: list[dt.date]) -> list[str]:
    if len(dates) == 1:
        return ["--date", dates[0].isoformat()]
    return ["--from", dates[0].isoformat(), "--to", dates[-1].isoformat()]


def meter_dates_for(utc_dates: list[dt.date], catalog: Catalog) -> list[dt.date]:
    """Local dates to re-meter when these UTC dates changed.

    A UTC date's events fall on the local dates around it (UTC-12 .. UTC+14); an event changes the
    balances of every later event its pools reach, through coupled pools of other periods too, so
    metering runs to ``Coupling.affects_until`` of those dates.
    """
    coupling = Coupling(catalog)
    local: set[dt.date] = set()
    for d in utc_dates:
        start = d - dt.timedelta(days=1)
        end = coupling.affects_until(d + dt.timedelta(days=1))
        local.update(start + dt.timedelta(days=i) for i in range((end - start).days + 1))
    return sorted(local)


def meter_runs(settings: Settings, dates: list[dt.date], beam_args: list[str] | None = None) -> list[str]:
    """Meter ``dates`` in runs of consecutive days; per run its dates and what it started from."""
    done = []
    for run_dates in contiguous(dates):
        result = meter.run([*settings.argv(), *date_args(run_dates), *(beam_args or [])])
        done.append(f"{run_dates[0]}..{run_dates[-1]}" + "".join(f" ({n})" for n in result.notes))
    return done


@contextlib.contextmanager
def warehouse(settings: Settings, check: bool = False) -> Iterator[Engine]:
    """An engine on the settings' warehouse for one step (its schema checked with ``check``), disposed
    of after it."""
    from pipelines.warehouse.engine import make_engine, require_schema

    engine = make_engine(settings.database_url)
    try:
        if check:
            require_schema(engine)
        yield engine
    finally:
        engine.dispose()


def ingest_step(
    settings: Settings,
    dates: list[dt.date],
    beam_args: list[str] | None = None,
    ingested: ingest.IngestResult | None = None,
) -> tuple[ingest.IngestResult, list[dt.date]]:
    """Ingest the landing ``dates`` (unless ``ingested``: a replay already did). Returns the result and
    the dates to gate and aggregate: the landing dates, the partitions the run changed and every queued
    date an earlier run changed whose aggregation has not run since."""
    from pipelines.warehouse.recompute import pending

    result = ingested or ingest.run([*settings.argv(), *date_args(dates), *(beam_args or [])])
    with warehouse(settings) as engine:
        to_aggregate, _ = pending(engine)
    return result, sorted({*dates, *result.changed_dates, *to_aggregate})


def gate_step(
    settings: Settings,
    dates: list[dt.date],
    run_id: str,
    accept_reason: str | None = None,
    accept: list[dt.date] | None = None,
) -> list:
    """The data-quality gate on the partitions of ``dates``; with ``accept_reason``, a failed gate of a
    date in ``accept`` is accepted (recorded) at once. Returns the reports; blocked dates stay blocked."""
    from pipelines.ingest import quality

    with warehouse(settings) as engine:
        reports = quality.check_partitions(engine, settings.lake, settings.catalog, dates, run_id)
        if accept_reason:
            for report in reports:
                if report.blocked and report.day in (accept or []):
                    quality.accept_and_render(engine, settings.lake, report.day, accept_reason)
                    report.accepted = True
    return reports


def aggregate_step(
    settings: Settings, dates: list[dt.date], beam_args: list[str] | None = None
) -> list[dt.date]:
    """Aggregate ``dates``, one pipeline run per run of consecutive days."""
    for run_dates in contiguous(dates):
        aggregate.run([*settings.argv(), *date_args(run_dates), *(beam_args or [])])
    return dates


def out_of_date_days(settings: Settings, month: str | None = None) -> list[dt.date]:
    """The metered days (of ``month`` only, if given) an accounts load or a change of the catalog's
    plans made out of date (``pipelines.quota.remeter``)."""
    with warehouse(settings, check=True) as engine:
        return stale_dates(engine, settings.catalog, month)


def meter_changed(
    settings: Settings,
    utc_dates: list[dt.date],
    beam_args: list[str] | None = None,
    skip: set[dt.date] | frozenset[dt.date] = frozenset(),
) -> list[str]:
    """The meter step of ``run-day`` and the daily DAG: every local date the changed UTC dates and the
    queued ones not metered since (but ``skip``: dates the gate stopped) reach (``meter_dates_for``),
    and every out-of-date metered day (``out_of_date_days``). Per metering run: its dates, what it
    started from."""
    from pipelines.warehouse.recompute import pending

    with warehouse(settings) as engine:
        _, queued = pending(engine)
    changed = sorted({*utc_dates, *queued} - set(skip))
    local = set(meter_dates_for(changed, settings.catalog)) | set(out_of_date_days(settings))
    return meter_runs(settings, sorted(local), beam_args)


def effectiveness_step(
    settings: Settings,
    beam_args: list[str] | None = None,
    skip: set[dt.date] | frozenset[dt.date] = frozenset(),
) -> list[dt.date]:
    """The weeks whose requests or outcomes changed since they were computed (the effectiveness
    queue), but those of ``skip`` dates (stopped by the gate, left queued); returns the weeks."""
    from pipelines.effectiveness import pipeline

    return pipeline.run([*settings.argv(), *(beam_args or [])], skip=skip)


def ingest_and_aggregate(
    settings: Settings,
    dates: list[dt.date],
    beam_args: list[str] | None = None,
    on_step: Step | None = None,
    accept_reason: str | None = None,
    ingested: ingest.IngestResult | None = None,
) -> DayResult:
    """``run-day``: ingest the landing dates, gate the changed partitions on data quality, then
    aggregate and meter them and every past date that late events changed. A date whose gate failed
    is not taken downstream (a failed usage-event check stops its aggregation, metering and
    effectiveness; a failed task-outcome check its effectiveness only); after the others are done,
    the run fails with one message naming it (unless ``accept_reason`` accepts it). ``ingested``: the
    ingest already ran (a replay of quarantined rows): only what follows it runs.
    """
    from pipelines.ingest import quality

    step = on_step or (lambda _: None)
    step("ingest")
    result, todo = ingest_step(settings, dates, beam_args, ingested)
    step("data quality")
    gated = sorted({*todo, *result.outcome_changed_dates})  # a late outcome's date is gated too
    reports = gate_step(settings, gated, result.run_id, accept_reason, accept=dates)
    blocked = {r.day for r in reports if r.blocked}  # stops the week's effectiveness
    billing_blocked = {r.day for r in reports if r.blocked_for("events")}  # stops aggregation and metering
    runnable = [d for d in todo if d not in billing_blocked]
    step("aggregate")
    aggregate_step(settings, runnable, beam_args)
    step("meter")
    metered = meter_changed(settings, runnable, beam_args, skip=billing_blocked)
    step("effectiveness")
    weeks = effectiveness_step(settings, beam_args, skip=blocked)
    done = DayResult(result, runnable, metered, sorted(blocked), weeks)
    try:
        quality.require_passed(reports, settings.lake)
    except DataQualityError as exc:
        exc.done = done  # type: ignore[attr-defined]  # what did run, for the summary before the error
        raise
    return done
