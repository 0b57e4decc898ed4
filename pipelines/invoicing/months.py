"""Which months may be invoiced: a well-formed month inside the supported dates, closed for late data
(its grace days landed, every day metered after the last ingest that changed it) and metered under
the catalog as it is now. A draft of a month that is not closed is an open-month draft, never finalized."""

from __future__ import annotations

import datetime as dt
import re

from sqlalchemy import (
    Connection,
    func,
    or_,
    select,
)

from billing.invoices import (
    month_bounds,
    utc_span,
)
from pipelines.errors import UsageBillingError
from pipelines.warehouse.engine import as_date, as_utc
from pipelines.warehouse.gate import held_back
from pipelines.warehouse.remeter import out_of_date
from schemas.catalog import Catalog
from schemas.limits import date_problem
from schemas.warehouse import (
    Account,
    IngestRun,
    MeteredDate,
    RecomputeQueue,
)


def check_month(month: str) -> str:
    """``month`` as YYYY-MM; a malformed month or one outside the supported dates is one line."""
    if not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", month or ""):
        raise UsageBillingError(f"--month must look like 2026-03, got {month!r}")
    try:
        first, last = month_bounds(month)
    except ValueError:
        raise UsageBillingError(f"--month must look like 2026-03, got {month!r}") from None
    problem = date_problem(first) or date_problem(last)
    if problem:
        raise UsageBillingError(f"--month {month} {problem}")
    return first.strftime("%Y-%m")


def open_reason(conn: Connection, catalog: Catalog, month: str, today: dt.date | None = None) -> str | None:
    """Why ``month`` is not closed yet (None when it is). A month is closed when every local day of it,
    in every account's timezone, was ingested, with ``[invoicing] close_grace_days`` more landing days
    for late data, and metered after the last ingest that changed its UTC days, under the accounts and
    the catalog's plans as they are now (``pipelines.warehouse.remeter``). Landing dates before
    the first one ever ingested held nothing: the platform had no events then."""
    today = today or dt.datetime.now(dt.UTC).date()
    first, last = month_bounds(month)
    a = Account.__table__.c
    zones = set(
        conn.execute(
            select(a.timezone)
            .distinct()
            .where(a.active_from <= last, or_(a.active_until.is_(None), a.active_until >= first))
        ).scalars()
    ) | {"UTC"}
    utc_first, utc_last = utc_span(month, zones)
    grace = catalog.invoicing.close_grace_days
    needed = utc_last + dt.timedelta(days=grace)
    if needed >= today:
        return (
            f"it closes once landing date {needed} is over and ingested (its last UTC day {utc_last} + "
            f"{grace} days of grace for late data); today is {today}"
        )
    r = IngestRun.__table__.c
    first_ever = conn.execute(select(func.min(r.landing_date))).scalar()
    if first_ever is None:
        return "nothing was ingested yet"
    start = max(utc_first, as_date(first_ever))
    ingested = {
        as_date(d)
        for d in conn.execute(
            select(r.landing_date).distinct().where(r.landing_date.between(start, needed))
        ).scalars()
    }
    for i in range((needed - start).days + 1):
        day = start + dt.timedelta(days=i)
        if day not in ingested:
            return f"landing date {day} is not ingested (the month needs landing dates {start} .. {needed})"
    held = sorted(d for d in held_back(conn) if utc_first <= d <= utc_last)
    if held:
        return (
            f"the data-quality gate holds back UTC day {held[0]}, whose events the month's invoices would "
            f"bill; see its page (usage-billing dq check --date {held[0]}) and fix or accept it "
            f"(usage-billing dq accept --date {held[0]} --reason '...'), then meter the month again"
        )
    m = MeteredDate.__table__.c
    metered = {
        as_date(d): as_utc(at)
        for d, at in conn.execute(select(m.local_day, m.metered_at).where(m.local_day.between(first, last)))
    }
    for i in range((last - first).days + 1):
        day = first + dt.timedelta(days=i)
        if day not in metered:
            return f"local day {day} is not metered: run `usage-billing quota meter --month {month}`"
    stale = stale_reason(conn, catalog, month)
    if stale:
        return stale
    q = RecomputeQueue.__table__.c
    oldest = min(metered.values())
    changed = conn.execute(
        select(q.day, func.max(q.queued_at))
        .where(q.day.between(utc_first, utc_last))
        .group_by(q.day)
        .order_by(q.day)
    ).all()
    for day, queued in changed:
        if as_utc(queued) > oldest:
            return (
                f"UTC day {as_date(day)} changed (an ingest at {as_utc(queued):%Y-%m-%d %H:%M} UTC) after "
                "the month was metered: run `usage-billing run-day --date ...` or "
                f"`usage-billing quota meter --month {month}`"
            )
    return None


def stale_reason(conn: Connection, catalog: Catalog, month: str) -> str | None:
    """Why the month's metering does not match the accounts and the catalog's plans as they are now
    (None when it does): drafts would take plan fees from one version and usage from another."""
    first, last = month_bounds(month)
    stale = out_of_date(conn, catalog, first, last)
    if not stale:
        return None
    return (
        f"local day {stale[0].day} is out of date ({stale[0].why}; {len(stale)} day(s) of the month): "
        f"run `usage-billing run-day --date ...` or `usage-billing quota meter --stale`"
    )


def month_lock(month: str) -> str:
    """The step lock every draft, finalize and void of ``month`` holds (warehouse.locks: a second run
    exits 75 or waits USAGE_BILLING_LOCK_WAIT seconds)."""
    return f"invoices {month}"
