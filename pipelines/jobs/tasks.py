"""The steps the Airflow DAGs run, one function per task, each on its own partition (date or month).

The DAG files stay thin (STYLE.md): the daily and monthly DAGs make one task per step of the chains
(``jobs/chain.py``), each calling ``daily_step`` or ``monthly_step`` here with the step's name and
the state the task before it returned (plain values, for XCom). Settings come from the
USAGE_BILLING_* environment variables (``Settings.from_env``), read when a task runs, never when a
DAG file is parsed; each task runs its step on one runtime context.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import text

from pipelines import lake
from pipelines.adoption.html import preview_lines
from pipelines.adoption.retirement import run
from pipelines.jobs.chain import DAILY, MONTHLY, run_chain, step_named
from pipelines.jobs.steps import DayState, MonthState
from pipelines.lake.paths import use_filesystem_options
from pipelines.notify.deliver import deliver
from pipelines.runtime.context import RunContext
from pipelines.settings import Settings
from pipelines.warehouse.locks import LockBusy


def settings() -> Settings:
    """The task's settings; the file-system flags of ``USAGE_BILLING_BEAM_ARGS`` configure its lake access."""
    s = Settings.from_env()
    use_filesystem_options(list(s.beam_args))
    return s


@contextlib.contextmanager
def context() -> Iterator[RunContext]:
    """The task's runtime context: its settings and ``USAGE_BILLING_BEAM_ARGS`` (whose file-system flags
    ``RunContext.open`` gives the lake access)."""
    with RunContext.open(Settings.from_env()) as opened:
        yield opened


def deliver_notifications(max_seconds: float = 600.0) -> dict[str, Any]:
    """The daily DAG's delivery after metering, beside the rest of the chain: what it cannot send
    stays pending for the next run, and another delivery already running is not an error."""
    with context() as ctx:
        try:
            done = deliver(ctx.engine, ctx.settings.lake, ctx.settings.notify, max_seconds)
        except LockBusy as exc:
            return {"skipped": str(exc)}
    return {"sent": done.sent, "failed": done.failed, "dead": done.dead, "pending": done.left}


def month_grace_days() -> int:
    """Landing days after a month's end when it closes for invoicing: its last UTC day can be the day
    after the month (accounts west of UTC), plus the catalog's ``[invoicing] close_grace_days``."""
    return 1 + settings().catalog.invoicing.close_grace_days


def landing_ready(day: str) -> bool:
    """The landing folder of ``day`` exists and holds at least one file."""
    folder = lake.join(settings().landing, day)
    return lake.folder_exists(folder) and bool(lake.list_files(folder, "*"))


def daily_step(name: str, state: dict[str, Any] | None, day: str | None = None) -> dict[str, Any]:
    """Run the daily chain's step ``name`` on ``state`` (the one before returned it; the first step
    starts from the landing date ``day``). A date whose usage events fail the gate fails the gate's
    task; the effectiveness task fails on dates left queued for the gate."""
    if state is None:
        start = DayState(landing=(dt.date.fromisoformat(day or ""),), stop_at_gate=True)
    else:
        start = DayState.from_json(state)
    with context() as ctx:
        return run_chain([step_named(DAILY, name)], ctx, start).to_json()


def monthly_step(name: str, state: dict[str, Any] | str) -> dict[str, Any]:
    """Run the monthly chain's step ``name`` on ``state`` (or a month, for the first step); the export
    step writes under ``USAGE_BILLING_EXPORTS``/<month>."""
    with context() as ctx:
        if isinstance(state, dict):
            start = MonthState.from_json(state)
        else:
            start = MonthState(month=state, exports=str(Path(ctx.settings.exports) / state))
        return run_chain([step_named(MONTHLY, name)], ctx, start).to_json()


def previous_month(day: dt.date) -> str:
    return (day.replace(day=1) - dt.timedelta(days=1)).strftime("%Y-%m")


def months_to_adjust(month: str, lookback: int = 3) -> list[str]:
    """Earlier months with finalized invoices, within ``lookback`` months: late events may change them."""
    with context() as ctx, ctx.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT DISTINCT period FROM invoices WHERE status = 'finalized' AND period < :m"),
            {"m": month},
        ).all()
    return sorted(r.period for r in rows)[-lookback:]


def adjust_months(months: list[str]) -> list[dict[str, Any]]:
    """Re-draft earlier months (adjustment documents only where late usage changed an account), check
    their reconciliation, finalize the adjustments: the monthly chain up to finalizing, per month."""
    with context() as ctx:
        return [run_chain(MONTHLY, ctx, MonthState(month), until="finalize").to_json() for month in months]


def retirement_report(as_of: str) -> dict[str, Any]:
    with context() as ctx:
        day = dt.date.fromisoformat(as_of)
        data = run(ctx.engine, ctx.catalog, day, Path(ctx.settings.reports) / as_of, ctx.lake)
    candidates = [m for m in data["models"] if m["flagged"]]
    return {
        "as_of": as_of,
        "candidates": [m["model"] for m in candidates],
        # a candidate's migration preview in words, one line per successor tier (or why there is none)
        "previews": {m["model"]: preview_lines(m["candidate"]) for m in candidates},
    }
