"""The steps of the daily and monthly chains (``jobs/chain.py``): ``(context, state) -> state``.

Each step runs one stage on the dates or month of the state and records what it did; a step decides
only which dates it works on. The recompute queue's rows are marked by the aggregate and meter stages
themselves (``pipelines.warehouse.recompute``), whoever runs them.

A ``DayState`` travels between the Airflow tasks as XCom (``to_json``); what does not (the ingest's
result, the gate's reports) is only for the command that ran the steps in one process.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import text

from billing.calendar import Coupling
from pipelines.effectiveness import pipeline as effectiveness_stage
from pipelines.errors import DataQualityError, UsageBillingError
from pipelines.ingest import events as ingest_stage
from pipelines.ingest import quality
from pipelines.ingest.options import IngestOptions
from pipelines.invoicing import documents as invoicing
from pipelines.invoicing.export import export as export_month
from pipelines.quota.meter import meter_runs
from pipelines.runtime.context import RunContext
from pipelines.runtime.dates import contiguous
from pipelines.usage import aggregate as aggregate_stage
from pipelines.warehouse.recompute import pending
from pipelines.warehouse.remeter import stale_dates
from schemas.catalog import Catalog


def _dates(values: Any) -> tuple[dt.date, ...]:
    return tuple(dt.date.fromisoformat(v) if isinstance(v, str) else v for v in values or ())


@dataclass(frozen=True)
class DayState:
    """What the daily chain has found and done so far.

    ``landing``: the landing dates to ingest (none: the ingest already ran, ``ingested``: a replay).
    ``stop_at_gate``: a DAG task run: a date whose usage events fail the gate fails the gate's task at
    once, and the effectiveness task fails on dates left queued for the gate; ``run-day`` runs every
    date it can and fails at the end (``finish``). ``accept_reason``: a failed gate of a landing date
    is accepted at once, with this reason.
    """

    landing: tuple[dt.date, ...] = ()
    accept_reason: str | None = None
    stop_at_gate: bool = False
    shards: int | None = None  # dedup shards of a new lake (the demo's small ones)
    run_id: str | None = None
    todo: tuple[dt.date, ...] = ()  # dates to gate and aggregate: landing, changed, queued
    outcome_dates: tuple[dt.date, ...] = ()  # dates whose task outcomes changed
    blocked: tuple[dt.date, ...] = ()  # a failed check: the week's effectiveness waits
    billing_blocked: tuple[dt.date, ...] = ()  # failed usage-event checks: aggregation and metering wait
    aggregated: tuple[dt.date, ...] = ()
    metered: tuple[str, ...] = ()  # per metering run: its dates, what it started from
    weeks: tuple[dt.date, ...] = ()  # ISO weeks whose effectiveness was computed
    ingested: ingest_stage.IngestResult | None = field(default=None, compare=False)
    reports: tuple[quality.PartitionReport, ...] = field(default=(), compare=False)

    def to_json(self) -> dict[str, Any]:
        """The state as plain values (XCom); the ingest's result and the reports stay behind."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in ("ingested", "reports"):
                continue
            value = getattr(self, f.name)
            out[f.name] = (
                [v.isoformat() if isinstance(v, dt.date) else v for v in value]
                if isinstance(value, tuple)
                else value
            )
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DayState:
        values = dict(data)
        for name in ("landing", "todo", "outcome_dates", "blocked", "billing_blocked", "aggregated", "weeks"):
            values[name] = _dates(values.get(name))
        values["metered"] = tuple(values.get("metered") or ())
        return cls(**values)


# -- the daily chain ----------------------------------------------------------------------------


def ingest(context: RunContext, state: DayState) -> DayState:
    """Ingest the landing dates (unless a replay already did). The dates to gate and aggregate: the
    landing dates, the partitions the run changed and every queued date an earlier run changed whose
    aggregation has not run since."""
    result = state.ingested or ingest_stage.run(
        context, list(state.landing), IngestOptions(shards=state.shards)
    )
    to_aggregate, _ = pending(context.engine)
    todo = sorted({*state.landing, *result.changed_dates, *to_aggregate})
    return dataclasses.replace(
        state,
        ingested=result,
        run_id=result.run_id,
        todo=tuple(todo),
        outcome_dates=tuple(result.outcome_changed_dates),
    )


def quality_gate(context: RunContext, state: DayState) -> DayState:
    """The data-quality gate on every partition the ingest changed (a late outcome's date too). A date
    whose usage events failed goes no further (aggregation, metering, effectiveness); one whose task
    outcomes failed goes on to billing, and its week's effectiveness waits."""
    gated = sorted({*state.todo, *state.outcome_dates})
    run_id = state.run_id or "run-day"
    with context.cluster() as executor:
        reports = quality.check_partitions(
            context.engine, context.lake, context.catalog, gated, run_id, executor=executor
        )
    if state.accept_reason:
        for report in reports:
            if report.blocked and report.day in state.landing:
                quality.accept_and_render(context.engine, context.lake, report.day, state.accept_reason)
                report.accepted = True
    if state.stop_at_gate:
        quality.require_passed([r for r in reports if r.blocked_for("events")], context.lake)
    return dataclasses.replace(
        state,
        reports=tuple(reports),
        blocked=tuple(sorted(r.day for r in reports if r.blocked)),
        billing_blocked=tuple(sorted(r.day for r in reports if r.blocked_for("events"))),
    )


def aggregate(context: RunContext, state: DayState) -> DayState:
    """Aggregate the dates the gate let through, one pipeline run per run of consecutive days."""
    blocked = set(state.billing_blocked)
    runnable = [d for d in state.todo if d not in blocked]
    for run_dates in contiguous(runnable):
        aggregate_stage.run(context, run_dates)
    return dataclasses.replace(state, aggregated=tuple(runnable))


def meter(context: RunContext, state: DayState) -> DayState:
    """Meter every local date the aggregated dates and the queued ones not metered since (but dates
    the gate stopped) reach (``meter_dates_for``), and every metered day an accounts load or a change
    of the catalog's plans made out of date."""
    _, queued = pending(context.engine)
    changed = sorted({*state.aggregated, *queued} - set(state.billing_blocked))
    local = set(meter_dates_for(changed, context.catalog)) | set(stale_dates(context.engine, context.catalog))
    return dataclasses.replace(state, metered=tuple(meter_runs(context, sorted(local))))


def effectiveness(context: RunContext, state: DayState) -> DayState:
    """The weeks whose requests or outcomes changed since they were computed (the effectiveness
    queue), but those of dates the gate stopped (left queued)."""
    blocked = set(state.blocked) | set(quality.blocked_dates(context.engine))
    options = effectiveness_stage.EffectivenessOptions(skip=frozenset(blocked))
    weeks = effectiveness_stage.run(context, None, options)
    if state.stop_at_gate:
        waiting = {day for day, _, _ in effectiveness_stage.queued(context.engine)}
        stopped = sorted(d for d in blocked if d in waiting)
        if stopped:
            raise DataQualityError(
                f"effectiveness skipped the dates the data-quality gate stopped: "
                f"{', '.join(str(d) for d in stopped)}; "
                f"usage-billing dq accept --date {stopped[0]} --reason '...'"
            )
    return dataclasses.replace(state, weeks=tuple(weeks))


def finish(context: RunContext, state: DayState) -> None:
    """After a ``run-day``: fail naming every date the gate stopped (the others ran)."""
    try:
        quality.require_passed(list(state.reports), context.lake)
    except DataQualityError as exc:
        exc.done = state  # type: ignore[attr-defined]  # what did run, for the summary before the error
        raise


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


# -- the monthly chain --------------------------------------------------------------------------


@dataclass(frozen=True)
class MonthState:
    """What the monthly chain has done for ``month``. ``exports``: the folder the export step writes
    the month's documents to (None: no export)."""

    month: str
    exports: str | None = None
    remetered: tuple[str, ...] = ()
    invoices: int = 0
    adjustments: int = 0
    total: str = "0"
    tokens: int = 0
    finalized: int = 0
    numbers: tuple[str | None, str | None] = (None, None)

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "remetered": list(self.remetered), "numbers": list(self.numbers)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MonthState:
        values = dict(data)
        values["remetered"] = tuple(values.get("remetered") or ())
        values["numbers"] = tuple(values.get("numbers") or (None, None))
        return cls(**values)


def remeter(context: RunContext, state: MonthState) -> MonthState:
    """Meter again the days of the month that an accounts load or a change of the catalog's plans made
    out of date (a draft refuses the month until then)."""
    stale = stale_dates(context.engine, context.catalog, state.month)
    meter_runs(context, stale)
    return dataclasses.replace(state, remetered=tuple(d.isoformat() for d in stale))


def draft(context: RunContext, state: MonthState) -> MonthState:
    r = invoicing.draft(context.engine, context.catalog, state.month)
    return dataclasses.replace(state, invoices=r.invoices, adjustments=r.adjustments, total=str(r.total))


def reconcile(context: RunContext, state: MonthState) -> MonthState:
    """Stop when the month's tokens do not match: usage_daily vs metered vs billable vs documents."""
    with context.engine.connect() as conn:
        row = conn.execute(
            text("SELECT * FROM finance_reconciliation WHERE month = :m"), {"m": state.month}
        ).first()
    if row is None:
        raise UsageBillingError(f"{state.month}: nothing metered or invoiced for this month")
    if row.unmetered_tokens or row.uninvoiced_tokens:
        raise DataQualityError(
            f"{state.month}: reconciliation failed: {row.unmetered_tokens:,} tokens in usage_daily not "
            f"metered, {row.uninvoiced_tokens:,} metered tokens not on a document; not finalizing"
        )
    return dataclasses.replace(state, tokens=int(row.billable_tokens))


def finalize(context: RunContext, state: MonthState) -> MonthState:
    r = invoicing.finalize(context.engine, context.catalog, state.month)
    return dataclasses.replace(state, finalized=r.finalized, numbers=(r.first_number, r.last_number))


def export(context: RunContext, state: MonthState) -> MonthState:
    """The month's documents as CSV, Parquet and HTML under ``state.exports``."""
    if state.exports is not None:
        labels = context.catalog.tier_labels
        export_month(context.engine, state.month, Path(state.exports), "csv,parquet,html", tier_labels=labels)
    return state
