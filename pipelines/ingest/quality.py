"""The data-quality gate: the GX suite of ``schemas/quality.py`` on each clean lake partition.

    usage-billing dq check --date 2026-03-02
    usage-billing dq accept --date 2026-03-02 --reason "provider outage, volume drop confirmed"

Results replace that date's rows in ``dq_results`` and are rendered as ``<lake>/dq/date=D/index.html``.
A failed error-level check blocks the date's downstream steps until an operator accepts it; the
acceptance is recorded in ``dq_acceptances`` with who, when, why and what was accepted.
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import getpass
import html
import json
import math
import multiprocessing
import os
import statistics
from dataclasses import dataclass, field

import pyarrow as pa
from sqlalchemy import Engine, delete, insert, select

from pipelines import lake
from pipelines.errors import DataQualityError, UsageBillingError
from pipelines.runtime import faults
from pipelines.runtime.logs import quiet
from pipelines.warehouse.locks import step_lock
from schemas.catalog import Catalog
from schemas.events import EVENT_SCHEMA
from schemas.quality import SUITE_NAME, VOLUME_MAX, VOLUME_MIN, Check, build_suite, partition_checks
from schemas.warehouse import DqAcceptance, DqResult

DEFAULT_VOLUME_FACTOR = 3.0
DEFAULT_VOLUME_WEEKS = 4
MIN_HISTORY = 2  # same-weekday partitions needed before volume is judged


@dataclass
class CheckOutcome:
    check: Check
    success: bool
    observed: str | None
    details: dict


@dataclass
class PartitionReport:
    day: dt.date
    rows: int
    outcomes: list[CheckOutcome] = field(default_factory=list)
    accepted: bool = False

    @property
    def failed_errors(self) -> list[str]:
        return [o.check.name for o in self.outcomes if o.check.level == "error" and not o.success]

    @property
    def blocked(self) -> bool:
        return bool(self.failed_errors) and not self.accepted


def partition_rows(lake_root: str, day: dt.date) -> int:
    """Rows of a committed partition, from the Parquet footers (no data read)."""
    files = lake.list_files(lake.partition(lake_root, lake.EVENTS, day))
    return sum(lake.open_parquet(f).metadata.num_rows for f in files)


def volume_bounds(lake_root: str, day: dt.date, factor: float, weeks: int) -> tuple[float, float] | None:
    """(min, max) rows: the trailing median of the same weekday divided / multiplied by ``factor``."""
    history = []
    for k in range(1, weeks + 1):
        past = day - dt.timedelta(days=7 * k)
        if lake.list_files(lake.partition(lake_root, lake.EVENTS, past)):
            history.append(partition_rows(lake_root, past))
    if len(history) < MIN_HISTORY:
        return None
    median = statistics.median(history)
    return median / factor, median * factor


class Gate:
    """One GX context and validation definition, reused for every date of a run."""

    def __init__(self, catalog: Catalog, max_tokens_per_event: int = 10_000_000) -> None:
        from pipelines.settings import quiet_great_expectations

        quiet_great_expectations()
        import great_expectations as gx

        self.checks = partition_checks(catalog.model_ids, max_tokens_per_event)
        self.by_name = {c.name: c for c in self.checks}
        from great_expectations.data_context.types.base import ProgressBarsConfig

        ctx = gx.get_context(mode="ephemeral")
        ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        batch = (
            ctx.data_sources.add_pandas("lake")
            .add_dataframe_asset("partition")
            .add_batch_definition_whole_dataframe("all")
        )
        suite = ctx.suites.add(build_suite(self.checks))
        self.definition = ctx.validation_definitions.add(
            gx.ValidationDefinition(name=SUITE_NAME, data=batch, suite=suite)
        )

    def validate(self, table: pa.Table, day: dt.date, bounds: tuple[float, float] | None) -> PartitionReport:
        frame = table.select(list(EVENT_SCHEMA.names)).to_pandas()
        params = (
            {VOLUME_MIN: bounds[0], VOLUME_MAX: bounds[1]} if bounds else {VOLUME_MIN: 0, VOLUME_MAX: None}
        )
        result = self.definition.run(
            batch_parameters={"dataframe": frame}, expectation_parameters=params, result_format="SUMMARY"
        )
        report = PartitionReport(day, table.num_rows)
        for r in result.results:
            check = self.by_name[r.expectation_config.meta["check"]]
            summary = r.result or {}
            observed = summary.get("observed_value", summary.get("unexpected_count"))
            if check.name == "volume_vs_same_weekday" and bounds is None:
                observed = f"{table.num_rows} rows (no same-weekday history yet: not judged)"
            details = _plain(
                {
                    "kwargs": check.kwargs,
                    "bounds": bounds,
                    "unexpected_percent": summary.get("unexpected_percent"),
                    "partial_unexpected_list": summary.get("partial_unexpected_list", [])[:5],
                }
            )
            report.outcomes.append(
                CheckOutcome(
                    check, bool(r.success), None if observed is None else str(observed)[:400], details
                )
            )
        return report


def _plain(value: object) -> object:
    """JSON-safe: strict JSON has no NaN or infinity (PostgreSQL refuses them), so they become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    return _plain(json.loads(json.dumps(value, default=str)))


PARALLEL_WORKERS = 2
PARALLEL_MIN_DATES = 16  # below this, starting a second process costs more than it saves


def _validate(
    lake_root: str, catalog: Catalog, days: list[dt.date], factor: float, weeks: int
) -> list[PartitionReport]:
    reports: list[PartitionReport] = []
    gate: Gate | None = None
    for day in days:
        files = lake.list_files(lake.partition(lake_root, lake.EVENTS, day))
        if not files:
            continue
        gate = gate or Gate(catalog)
        table = pa.concat_tables([lake.read_parquet(f) for f in files])
        reports.append(gate.validate(table, day, volume_bounds(lake_root, day, factor, weeks)))
    return reports


def check_partitions(
    engine: Engine,
    lake_root: str,
    catalog: Catalog,
    dates: list[dt.date],
    run_id: str,
    factor: float = DEFAULT_VOLUME_FACTOR,
    weeks: int = DEFAULT_VOLUME_WEEKS,
) -> list[PartitionReport]:
    """Validate each date's committed partition, store the results, write the HTML, return reports.

    Many dates (a backfill, the demo) are split between worker processes, one GX context each.
    """
    from pipelines.warehouse.binding import require_lake

    require_lake(engine, lake_root, "dq check")
    with step_lock(engine, DQ_LOCK):
        return _check(engine, lake_root, catalog, dates, run_id, factor, weeks)


DQ_LOCK = "data quality"  # every write of dq_results and dq_acceptances holds it


def _check(engine: Engine, lake_root: str, catalog: Catalog, dates, run_id: str, factor: float, weeks: int):  # type: ignore[no-untyped-def]
    days = sorted(set(dates))
    workers = min(PARALLEL_WORKERS, os.cpu_count() or 1, len(days) // PARALLEL_MIN_DATES)
    if workers > 1:
        chunks = [days[i::workers] for i in range(workers)]
        context = multiprocessing.get_context("spawn")  # no fork of a process that ran Beam's threads
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context, initializer=quiet) as pool:
            parts = pool.map(
                _validate,
                [lake_root] * workers,
                [catalog] * workers,
                chunks,
                [factor] * workers,
                [weeks] * workers,
            )
            reports = sorted((r for part in parts for r in part), key=lambda r: r.day)
    else:
        reports = _validate(lake_root, catalog, days, factor, weeks)
    _store(engine, reports, run_id)
    for report in reports:
        report.accepted = bool(report.failed_errors) and _accepted(engine, report.day, report.failed_errors)
        write_html(lake_root, report)
    return reports


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


def _accepted(engine: Engine, day: dt.date, failed: list[str]) -> bool:
    """True if an acceptance for ``day`` covers every currently failing error-level check."""
    t = DqAcceptance.__table__
    with engine.connect() as conn:
        rows = conn.execute(select(t.c.failed_checks).where(t.c.day == day)).scalars().all()
    covered = {name for row in rows for name in row.get("checks", [])}
    return set(failed) <= covered


def accept(engine: Engine, day: dt.date, reason: str, who: str | None = None) -> list[str]:
    """Record that an operator accepts the failed error-level checks of ``day``; returns them."""
    if not reason.strip():
        raise UsageBillingError("an acceptance needs a --reason")
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
                    "reason": reason.strip()[:1000],
                    "failed_checks": {"checks": sorted(failed)},
                }
            ],
        )
    return sorted(failed)


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


def html_path(lake_root: str, day: dt.date) -> str:
    return lake.join(lake_root, "dq", f"date={day}", "index.html")


def write_html(lake_root: str, report: PartitionReport) -> None:
    status = "accepted" if report.accepted else ("FAILED" if report.failed_errors else "passed")
    rows = "\n".join(
        f"<tr class='{'ok' if o.success else o.check.level}'><td>{html.escape(o.check.name)}</td>"
        f"<td>{o.check.level}</td><td>{'pass' if o.success else 'FAIL'}</td>"
        f"<td>{html.escape(o.observed or '')}</td>"
        f"<td><code>{html.escape(json.dumps(o.details['kwargs']))}</code></td></tr>"
        for o in report.outcomes
    )
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Data quality {report.day}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}} tr.error td{{background:#fdd}}
tr.warn td{{background:#ffe9b3}} .badge{{font-weight:bold}}</style></head>
<body><h1>Data quality of events, {report.day}</h1>
<p class="badge">Gate: {status} &middot; {report.rows:,} rows &middot; suite {SUITE_NAME}</p>
<table><tr><th>check</th><th>level</th><th>result</th><th>observed</th><th>expectation</th></tr>
{rows}
</table></body></html>
"""
    path = html_path(lake_root, report.day)
    if lake.is_local(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(page)
    else:
        with lake.create_object(path) as handle:
            handle.write(page.encode())
