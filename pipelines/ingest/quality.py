"""The data-quality gate: the GX suite of ``schemas/quality.py`` on clean lake partitions.

    usage-billing dq check --date 2026-03-02
    usage-billing dq accept --date 2026-03-02 --reason "provider outage, volume drop confirmed"

Results replace each date's rows in ``dq_results`` and are rendered as ``<lake>/dq/date=D/index.html``,
with ``<lake>/dq/index.html`` listing every date (``pipelines.ingest.quality_pages``). A failed
error-level check blocks the date's downstream steps until an operator accepts it; the acceptance
is recorded in ``dq_acceptances`` with who, when, why and what was accepted.
The suite runs in ``quality_gx``, many partitions per GX run.
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import getpass
import multiprocessing
import os
import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Engine, delete, insert, select

from pipelines import lake
from pipelines.errors import DataQualityError, UsageBillingError
from pipelines.ingest import quality_pages
from pipelines.ingest.quality_gx import (
    BATCH_ROWS,
    DEFAULT_VOLUME_FACTOR,
    OUTCOME_ROW_COLUMNS,
    PROFILE_SOURCE_COLUMNS,
    ROW_COLUMNS,
    CheckOutcome,
    Gate,
    Part,
    PartitionReport,
    footer_rows,
    history,
)
from pipelines.ingest.quality_pages import html_path
from pipelines.runtime import faults
from pipelines.runtime.logs import quiet
from pipelines.warehouse.binding import require_lake
from pipelines.warehouse.gate import held_back
from pipelines.warehouse.locks import step_lock
from schemas.catalog import Catalog
from schemas.events import EVENT_SCHEMA
from schemas.outcomes import OUTCOME_LAKE_SCHEMA
from schemas.warehouse import DqAcceptance, DqResult

__all__ = ["CheckOutcome", "Gate", "PartitionReport", "accept", "check_partitions", "require_passed"]

DEFAULT_VOLUME_WEEKS = 4
COLUMNS = sorted({*ROW_COLUMNS, *PROFILE_SOURCE_COLUMNS})


PARALLEL_WORKERS = 2
PARALLEL_MIN_ROWS = 4 * BATCH_ROWS  # below this, starting a second process costs more than it saves


def _batches(
    lake_root: str, days: list[dt.date], weeks: int, dataset: str = lake.EVENTS
) -> list[list[tuple[Part, list[str]]]]:
    """The committed partitions of ``days`` with their files, in batches of about ``BATCH_ROWS`` rows."""
    counts: dict[dt.date, int | None] = {}
    batches: list[list[tuple[Part, list[str]]]] = [[]]
    size = 0
    for day in days:
        files = lake.list_files(lake.partition(lake_root, dataset, day))
        if not files:
            counts[day] = None  # a later date's history need not list it again
            continue
        rows = counts[day] = footer_rows(files)
        if size and size + rows > BATCH_ROWS:
            batches.append([])
            size = 0
        batches[-1].append((Part(day, rows, history(lake_root, day, weeks, counts)), files))
        size += rows
    return [b for b in batches if b]


_GATES: dict[tuple, Gate] = {}
_GATES_LOCK = threading.Lock()
_GX_RUNS = threading.Lock()  # a GX context is not for two threads at once (a Dask worker of two threads)


def _gate(catalog: Catalog, factor: float, outcomes: bool) -> Gate:
    """The process's GX context for this suite: building one costs seconds, and what it checks
    depends only on the catalog's models and speed tiers, the volume factor and the dataset."""
    key = (tuple(catalog.model_ids), catalog.tier_ids, factor, outcomes)
    with _GATES_LOCK:
        if key not in _GATES:
            _GATES[key] = Gate(catalog, factor, outcomes)
        return _GATES[key]


def _validate(
    lake_root: str,
    catalog: Catalog,
    batches: list[list[tuple[Part, list[str]]]],
    factor: float,
    outcomes: bool = False,
) -> list[PartitionReport]:

    reports: list[PartitionReport] = []
    if not batches:
        return reports
    # GX takes seconds to import, in Python; reading the first batch (in Arrow) overlaps it.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        starting = pool.submit(_gate, catalog, factor, outcomes)
        for batch in batches:
            table = _read(batch, outcomes)
            gate = starting.result()
            with _GX_RUNS:
                reports += gate.validate_many(table, [part for part, _ in batch])
    faults.checkpoint("gate.checked")
    return reports


def _read(batch: list[tuple[Part, list[str]]], outcomes: bool = False) -> pa.Table:
    """The batch's partitions one after the other: one scan of all their files (Arrow reads them in
    parallel, in the order given), checked to hold each partition's rows where ``parts`` say; else
    partition by partition."""
    schema, columns, time = (
        (OUTCOME_LAKE_SCHEMA, list(OUTCOME_ROW_COLUMNS), "completed_at")
        if outcomes
        else (EVENT_SCHEMA, list(COLUMNS), "event_time")
    )
    files = [f for _, part_files in batch for f in part_files]
    table = lake.scan(files, columns, pc.scalar(True), schema)
    per_part = np.array([p.day for p, _ in batch], dtype="datetime64[D]")
    days = pa.array(np.repeat(per_part, [p.rows for p, _ in batch]), pa.date32())
    if table.num_rows == len(days) and pc.all(pc.equal(pc.cast(table[time], pa.date32()), days)).as_py():
        return table
    return pa.concat_tables(lake.scan(f, columns, pc.scalar(True), schema) for _, f in batch)


def check_partitions(
    engine: Engine,
    lake_root: str,
    catalog: Catalog,
    dates: list[dt.date],
    run_id: str,
    factor: float = DEFAULT_VOLUME_FACTOR,
    weeks: int = DEFAULT_VOLUME_WEEKS,
    executor: concurrent.futures.Executor | None = None,
) -> list[PartitionReport]:
    """Validate each date's committed partition, store the results, write the pages, return reports.

    With ``executor`` (the run's Dask cluster) each batch of partitions is a task there, one GX context
    per worker process; without, many rows (a backfill, the demo) are split between two local worker
    processes.
    """
    require_lake(engine, lake_root, "dq check")
    with step_lock(engine, DQ_LOCK):
        return _check(engine, lake_root, catalog, dates, run_id, factor, weeks, executor)


DQ_LOCK = "data quality"  # every write of dq_results and dq_acceptances holds it
MAX_REASON = 1000  # dq_acceptances.reason is VARCHAR(1000)


def _check(
    engine: Engine,
    lake_root: str,
    catalog: Catalog,
    dates,
    run_id: str,
    factor: float,
    weeks: int,
    executor: concurrent.futures.Executor | None,
):
    batches = _batches(lake_root, sorted(set(dates)), weeks)
    outcome_batches = _outcome_batches(lake_root, dates)
    if executor is not None:
        reports, outcome_reports = _on_cluster(executor, lake_root, catalog, batches, outcome_batches, factor)
    else:
        reports = _locally(lake_root, catalog, batches, factor)
        outcome_reports = _validate(lake_root, catalog, outcome_batches, factor, True)
    reports = _with_outcomes(reports, outcome_reports)
    _store(engine, reports, run_id)
    acceptances = _acceptances(engine, [r.day for r in reports])
    for report in reports:
        report.acceptances = acceptances.get(report.day, [])
        report.accepted = bool(report.failed_errors) and _covers(report.acceptances, report.failed_errors)
        quality_pages.write_page(lake_root, report)
    quality_pages.write_index(engine, lake_root)
    return reports


def _locally(
    lake_root: str, catalog: Catalog, batches: list[list[tuple[Part, list[str]]]], factor: float
) -> list[PartitionReport]:
    """The usage events' batches in this process, or many rows (a backfill, the demo) split between
    local worker processes; the reports in date order."""
    rows = sum(part.rows for batch in batches for part, _ in batch)
    workers = min(PARALLEL_WORKERS, os.cpu_count() or 1, len(batches)) if rows >= PARALLEL_MIN_ROWS else 1
    if workers == 1:
        return _validate(lake_root, catalog, batches, factor)
    chunks = [batches[i::workers] for i in range(workers)]
    context = multiprocessing.get_context("spawn")  # no fork of a process that ran Beam's threads
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context, initializer=quiet) as pool:
        parts = pool.map(_validate, [lake_root] * workers, [catalog] * workers, chunks, [factor] * workers)
        return sorted((r for part in parts for r in part), key=lambda r: r.day)


def _on_cluster(
    executor: concurrent.futures.Executor,
    lake_root: str,
    catalog: Catalog,
    batches: list[list[tuple[Part, list[str]]]],
    outcome_batches: list[list[tuple[Part, list[str]]]],
    factor: float,
) -> tuple[list[PartitionReport], list[PartitionReport]]:
    """Each batch of usage events a task, the task outcomes one more; the reports in date order."""
    events = [executor.submit(_validate, lake_root, catalog, [batch], factor) for batch in batches]
    outcomes = None
    if outcome_batches:
        outcomes = executor.submit(_validate, lake_root, catalog, outcome_batches, factor, True)
    reports = sorted((r for future in events for r in future.result()), key=lambda r: r.day)
    return reports, outcomes.result() if outcomes is not None else []


def _outcome_batches(lake_root: str, dates) -> list[list[tuple[Part, list[str]]]]:
    return _batches(lake_root, sorted(set(dates)), 0, lake.OUTCOMES)


def _with_outcomes(
    reports: list[PartitionReport], outcome_reports: list[PartitionReport]
) -> list[PartitionReport]:
    """Each date's report holds both suites: the task outcomes' checks join the usage events' (a date
    with outcomes and no usage events gets a report of its own, of 0 event rows)."""
    by_day = {r.day: r for r in reports}
    for o in outcome_reports:
        if o.day in by_day:
            by_day[o.day].outcomes += o.outcomes
        else:
            by_day[o.day] = PartitionReport(o.day, 0, o.outcomes)
    return sorted(by_day.values(), key=lambda r: r.day)


def _store(engine: Engine, reports: list[PartitionReport], run_id: str) -> None:
    now = dt.datetime.now(dt.UTC)
    table = DqResult.__table__
    with engine.begin() as conn:
        for report in reports:
            conn.execute(delete(table).where(table.c.day == report.day))
            conn.execute(
                insert(table),
                [
                    {
                        "day": report.day,
                        "check_name": o.check.name,
                        "run_id": run_id,
                        "level": o.check.level,
                        "success": o.success,
                        "observed": o.observed,
                        "details": o.details,
                        "checked_at": now,
                    }
                    for o in report.outcomes
                ],
            )
            faults.checkpoint("warehouse.load.dq_results")


def _acceptances(engine: Engine, days: list[dt.date]) -> dict[dt.date, list[dict]]:
    """Per date, its recorded acceptances (who, when, why, which checks), oldest first."""
    t = DqAcceptance.__table__
    out: dict[dt.date, list[dict]] = {}
    wanted = set(days)
    with engine.connect() as conn:
        rows = conn.execute(select(t).order_by(t.c.accepted_at)).all()
    for row in rows:
        if row.day in wanted:
            out.setdefault(row.day, []).append(
                {
                    "by": row.accepted_by,
                    "at": row.accepted_at,
                    "reason": row.reason,
                    "checks": list(row.failed_checks.get("checks", [])),
                }
            )
    return out


def blocked_dates(engine: Engine) -> list[dt.date]:
    """The dates whose stored results have a failed error-level check no acceptance covers."""
    return sorted(held_back(engine, None))


def _covers(acceptances: list[dict], failed: list[str]) -> bool:
    """True if the acceptances cover every currently failing error-level check."""
    return set(failed) <= {name for a in acceptances for name in a["checks"]}


def accept(engine: Engine, day: dt.date, reason: str, who: str | None = None) -> list[str]:
    """Record that an operator accepts the failed error-level checks of ``day``; returns them."""
    if not reason.strip():
        raise UsageBillingError("an acceptance needs a --reason")
    if len(reason.strip()) > MAX_REASON:
        raise UsageBillingError(
            f"--reason is {len(reason.strip()):,} characters; at most {MAX_REASON:,} are kept"
        )
    with step_lock(engine, DQ_LOCK):
        return _accept(engine, day, reason, who)


def _accept(engine: Engine, day: dt.date, reason: str, who: str | None) -> list[str]:
    t = DqResult.__table__
    with engine.connect() as conn:
        failed = (
            conn.execute(
                select(t.c.check_name).where(t.c.day == day, t.c.level == "error", t.c.success.is_(False))
            )
            .scalars()
            .all()
        )
    if not failed:
        raise UsageBillingError(
            f"no failed error-level data-quality check is recorded for {day}: nothing to accept"
        )
    with engine.begin() as conn:
        conn.execute(
            insert(DqAcceptance.__table__),
            [
                {
                    "day": day,
                    "accepted_at": dt.datetime.now(dt.UTC),
                    "accepted_by": who or _operator(),
                    "reason": reason.strip(),
                    "failed_checks": {"checks": sorted(failed)},
                }
            ],
        )
    return sorted(failed)


def accept_and_render(
    engine: Engine, lake_root: str, day: dt.date, reason: str, who: str | None = None
) -> list[str]:
    """``accept``, then the date's page and the index say so (from what is stored)."""
    checks = accept(engine, day, reason, who)
    quality_pages.render_stored(engine, lake_root, day)
    return checks


def _operator() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def require_passed(reports: list[PartitionReport], lake_root: str) -> None:
    """Raise one clear error naming every blocked date, its failed checks and how to proceed."""
    blocked = [r for r in reports if r.blocked]
    if not blocked:
        return
    parts = [f"{r.day} ({', '.join(r.failed_errors)})" for r in blocked]
    first = blocked[0].day
    raise DataQualityError(
        f"data-quality gate failed for {'; '.join(parts)}: downstream steps skipped for "
        f"{'that date' if len(blocked) == 1 else 'those dates'}; see {html_path(lake_root, first)}; "
        f"to proceed anyway: usage-billing dq accept --date {first} --reason '...'"
    )
