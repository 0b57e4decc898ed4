"""The steps the Airflow DAGs run, one function per task, each on its own partition (date or month).

The DAG files stay thin (STYLE.md): every task calls one function here with plain values (ISO dates,
months) and returns plain values for XCom. Settings come from the USAGE_BILLING_* environment
variables (``Settings.from_env``), read when a task runs, never when a DAG file is parsed.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from sqlalchemy import text

from pipelines.errors import DataQualityError, UsageBillingError
from pipelines.settings import Settings


def settings() -> Settings:
    """The task's settings; the file-system flags of ``USAGE_BILLING_BEAM_ARGS`` configure its lake access."""
    from pipelines.lake.paths import use_filesystem_options

    s = Settings.from_env()
    use_filesystem_options(s.beam_args)
    return s


def month_grace_days() -> int:
    """Landing days after a month's end when it closes for invoicing: its last UTC day can be the day
    after the month (accounts west of UTC), plus the catalog's ``[invoicing] close_grace_days``."""
    return 1 + settings().catalog.invoicing.close_grace_days


def landing_ready(day: str) -> bool:
    """The landing folder of ``day`` exists and holds at least one file."""
    from pipelines import lake

    folder = lake.join(settings().landing, day)
    return lake.folder_exists(folder) and bool(lake.list_files(folder, "*"))


def ingest_day(day: str) -> dict:
    """Ingest one landing date; returns the run id and every event date whose partition changed."""
    from pipelines.jobs.run_day import ingest_step

    s = settings()
    result, todo = ingest_step(s, [dt.date.fromisoformat(day)], s.beam_args)
    return {
        "run_id": result.run_id,
        "dates": [d.isoformat() for d in todo],
        "outcome_dates": [d.isoformat() for d in result.outcome_changed_dates],
    }


def quality_gate(ingested: dict) -> list[str]:
    """Validate the changed partitions; returns the dates that may go downstream.

    A failed error-level check on any of them stops the run (DataQualityError names the dates, the
    checks and the command to accept them); nothing goes downstream until it is accepted.
    """
    from pipelines.ingest import quality
    from pipelines.jobs.run_day import gate_step

    s = settings()
    billed = [dt.date.fromisoformat(d) for d in ingested["dates"]]
    outcomes = [dt.date.fromisoformat(d) for d in ingested.get("outcome_dates", [])]
    reports = gate_step(s, sorted({*billed, *outcomes}), ingested["run_id"])
    # raises when a date's usage events are blocked; a date whose task outcomes failed goes on to
    # billing, and the effectiveness task stops on it
    quality.require_passed([r for r in reports if r.blocked_for("events")], s.lake)
    return [r.day.isoformat() for r in reports if r.day in set(billed)]


def aggregate_dates(dates: list[str]) -> list[str]:
    from pipelines.jobs.run_day import aggregate_step

    s = settings()
    aggregate_step(s, sorted(dt.date.fromisoformat(d) for d in dates), s.beam_args)
    return dates


def meter_dates(dates: list[str]) -> list[str]:
    """Re-meter every local date the changed UTC dates can touch, as far as their pools' balances
    reach, and every metered day an accounts load or a change of the catalog's plans made out of date."""
    from pipelines.jobs.run_day import meter_changed

    s = settings()
    return meter_changed(s, sorted(dt.date.fromisoformat(d) for d in dates), s.beam_args)


def effectiveness_weeks(gated: list[str]) -> list[str]:
    """Compute the effectiveness of every ISO week whose requests or outcomes changed (the queue),
    but for the dates the gate stopped (left queued); then fail naming those, if any. ``gated``: the
    dates the gate let through to billing (this task runs after them)."""
    from pipelines.ingest import quality
    from pipelines.jobs.run_day import effectiveness_step, warehouse

    s = settings()
    with warehouse(s) as engine:
        blocked = quality.blocked_dates(engine)
    from pipelines.effectiveness.pipeline import queued

    weeks = effectiveness_step(s, s.beam_args, skip=set(blocked))
    with warehouse(s) as engine:
        waiting = {day for day, _, _ in queued(engine)}
    stopped = [d for d in blocked if d in waiting]  # left queued for the gate
    if stopped:
        raise DataQualityError(
            f"effectiveness skipped the dates the data-quality gate stopped: "
            f"{', '.join(str(d) for d in stopped)}; "
            f"usage-billing dq accept --date {stopped[0]} --reason '...'"
        )
    return [w.isoformat() for w in weeks]


def remeter_month(month: str) -> list[str]:
    """Before a draft: meter again the days of ``month`` that an accounts load or a change of the
    catalog's plans made out of date (a draft refuses the month until then)."""
    from pipelines.jobs.run_day import meter_runs, out_of_date_days

    s = settings()
    stale = out_of_date_days(s, month)
    meter_runs(s, stale, s.beam_args)
    return [d.isoformat() for d in stale]


def previous_month(day: dt.date) -> str:
    return (day.replace(day=1) - dt.timedelta(days=1)).strftime("%Y-%m")


def draft_month(month: str) -> dict:
    from pipelines.invoicing import documents as invoicing
    from pipelines.warehouse.engine import make_engine

    s = settings()
    r = invoicing.draft(make_engine(s.database_url), s.catalog, month)
    return {"month": r.month, "invoices": r.invoices, "adjustments": r.adjustments, "total": str(r.total)}


def reconcile_month(month: str) -> dict:
    """Stop when the month's tokens do not match: usage_daily vs metered vs billable vs documents."""
    from pipelines.warehouse.engine import make_engine

    engine = make_engine(settings().database_url)
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT * FROM finance_reconciliation WHERE month = :m"), {"m": month}
        ).first()
    engine.dispose()
    if row is None:
        raise UsageBillingError(f"{month}: nothing metered or invoiced for this month")
    if row.unmetered_tokens or row.uninvoiced_tokens:
        raise DataQualityError(
            f"{month}: reconciliation failed: {row.unmetered_tokens:,} tokens in usage_daily not metered, "
            f"{row.uninvoiced_tokens:,} metered tokens not on a document; not finalizing"
        )
    return {"month": month, "tokens": int(row.billable_tokens)}


def finalize_month(month: str) -> dict:
    from pipelines.invoicing import documents as invoicing
    from pipelines.warehouse.engine import make_engine

    s = settings()
    r = invoicing.finalize(make_engine(s.database_url), s.catalog, month)
    return {"month": month, "finalized": r.finalized, "first": r.first_number, "last": r.last_number}


def exports_root() -> str:
    return settings().exports


def export_month(month: str) -> str:
    from pipelines.invoicing.export import export
    from pipelines.warehouse.engine import make_engine

    out = str(Path(exports_root()) / month)
    s = settings()
    export(make_engine(s.database_url), month, out, "csv,parquet,html", tier_labels=s.catalog.tier_labels)
    return out


def months_to_adjust(month: str, lookback: int = 3) -> list[str]:
    """Earlier months with finalized invoices, within ``lookback`` months: late events may change them."""
    from pipelines.warehouse.engine import make_engine

    engine = make_engine(settings().database_url)
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT DISTINCT period FROM invoices WHERE status = 'finalized' AND period < :m"),
            {"m": month},
        ).all()
    engine.dispose()
    return sorted(r.period for r in rows)[-lookback:]


def adjust_months(months: list[str]) -> list[dict]:
    """Re-draft earlier months (adjustment documents only where late usage changed an account), check
    their reconciliation, finalize the adjustments."""
    done = []
    for month in months:
        remeter_month(month)
        drafted = draft_month(month)
        reconcile_month(month)
        done.append({**drafted, **finalize_month(month)})
    return done


def retirement_report(as_of: str) -> dict:
    from pipelines.adoption.html import preview_lines
    from pipelines.adoption.retirement import run
    from pipelines.warehouse.engine import make_engine

    s = settings()
    out = s.reports
    data = run(
        make_engine(s.database_url), s.catalog, dt.date.fromisoformat(as_of), Path(out) / as_of, s.lake
    )
    candidates = [m for m in data["models"] if m["flagged"]]
    return {
        "as_of": as_of,
        "candidates": [m["model"] for m in candidates],
        # a candidate's migration preview in words, one line per successor tier (or why there is none)
        "previews": {m["model"]: preview_lines(m["candidate"]) for m in candidates},
    }
