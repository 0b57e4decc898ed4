"""``run-day``: the daily chain (``jobs/chain.py``) in one process, on one runtime context.

Ingest the landing dates, gate the changed partitions on data quality, aggregate and meter them and
every past date that late events changed, compute the effectiveness of the weeks that changed. A
date whose gate failed is not taken downstream (a failed usage-event check stops its aggregation,
metering and effectiveness; a failed task-outcome check its effectiveness only); after the others
are done, the run fails with one message naming it (unless ``accept_reason`` accepts it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from pipelines.ingest.events import IngestResult
from pipelines.jobs.chain import DAILY, run_chain
from pipelines.jobs.steps import DayState, finish
from pipelines.runtime.context import RunContext


def run_day(
    context: RunContext,
    dates: list[dt.date],
    on_step: Callable[[str], None] | None = None,
    accept_reason: str | None = None,
    ingested: IngestResult | None = None,
) -> DayState:
    """The daily chain on the landing ``dates``. ``ingested``: the ingest already ran (a replay of
    quarantined rows): only what follows it runs on what it changed."""
    state = DayState(landing=tuple(dates), accept_reason=accept_reason, ingested=ingested)
    state = run_chain(DAILY, context, state, on_step)
    finish(context, state)
    return state
