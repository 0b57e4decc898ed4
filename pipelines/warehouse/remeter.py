"""What makes a metered day out of date, other than its events: the accounts and the catalog's plans.

A late event rewrites a lake partition and queues its UTC date (``recompute_queue``, by the ingest).
Two other inputs change what a metered local day should be:

- an ``accounts load`` that changes the plan in force or the timezone of an account on days it has
  usage on: ``queue_account_changes`` puts those local days (metered ones only) in ``meter_queue``, in
  the load's own transaction;
- a change of the catalog's plans or pools: each metered day records the digest of the plans it was
  metered with (``metered_dates.basis``); a day whose digest is not the catalog's now is out of date.

``out_of_date`` lists both kinds; ``run-day``, the DAGs and ``quota meter --stale`` meter them again
(a metering run removes the queue rows of its days that it started after), and a month with such a
day is not closed for invoicing, so a draft never takes plan fees from one version of the accounts
or plans and usage metered under another.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, or_, select

from billing.invoices import month_bounds
from pipelines.warehouse.engine import as_date, as_utc
from schemas.catalog import Catalog
from schemas.warehouse import Account, BillableUsage, MeteredDate, MeterQueue

TIMEZONE_REACH = 2  # local dates of one instant in two zones differ by up to 2 days (UTC-12 .. UTC+14)
CHUNK = 500  # account ids per IN (...)


def plans_digest(catalog: Catalog) -> str:
    """What of the catalog metering depends on (its plans and their pools), as a digest. A plan's
    later fees (``[[plans.fees]]``) are left out: metering does not read them, and a catalog without
    them keeps the digest it always had."""
    plans = [plan.model_dump(mode="json", exclude={"fees"}) for plan in catalog.plans]
    return hashlib.sha256(json.dumps(plans, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Stale:
    day: dt.date
    why: str


def out_of_date(
    conn: Connection, catalog: Catalog, first: dt.date | None = None, last: dt.date | None = None
) -> list[Stale]:
    """Metered local days (between ``first`` and ``last`` if given) that must be metered again: metered
    under other plans than the catalog's (or before that was recorded), or queued by an accounts load
    after their metering started. One entry per day, in date order."""
    m = MeteredDate.__table__.c
    q = MeterQueue.__table__.c
    digest = plans_digest(catalog)
    where = []
    if first is not None:
        where.append(m.local_day >= first)
    if last is not None:
        where.append(m.local_day <= last)
    found: dict[dt.date, str] = {}
    for day, basis in conn.execute(
        select(m.local_day, m.basis).where(*where, or_(m.basis.is_(None), m.basis != digest))
    ):
        found[as_date(day)] = (
            "metered under other plans than the catalog's" if basis else "metered before plans were recorded"
        )
    queued = select(q.local_day, q.queued_at, q.reason, m.metered_at).join_from(
        MeterQueue.__table__, MeteredDate.__table__, m.local_day == q.local_day
    )
    for day, queued_at, reason, metered_at in conn.execute(queued.where(*where)):
        if as_utc(queued_at) > as_utc(metered_at):
            found.setdefault(as_date(day), f"{reason} at {as_utc(queued_at):%Y-%m-%d %H:%M} UTC")
    return [Stale(day, found[day]) for day in sorted(found)]


def stale_dates(engine: Engine, catalog: Catalog, month: str | None = None) -> list[dt.date]:
    """The days of ``out_of_date`` (of ``month`` only, if given)."""
    first, last = month_bounds(month) if month else (None, None)
    with engine.connect() as conn:
        return [s.day for s in out_of_date(conn, catalog, first, last)]


def _in_force(rows: list, day: dt.date) -> str | None:
    """The plan of the row covering ``day`` ("" for pay as you go), None where no row does."""
    for r in rows:
        if r.active_from <= day and (r.active_until is None or day <= r.active_until):
            return r.plan or ""
    return None


def changed_span(old: list, new: list) -> tuple[dt.date, dt.date | None, bool] | None:
    """The first and last local date (None: open) on which an account's plan in force or timezone
    differs between two versions of its rows (an account without rows is metered in UTC with no
    plan), and whether its timezone changed; None if they bill alike."""
    zone_old = old[0].timezone if old else "UTC"
    zone_new = new[0].timezone if new else "UTC"
    if zone_old != zone_new:
        return dt.date.min, None, True  # every event of the account moves to other local days
    edges = sorted(
        {r.active_from for r in [*old, *new]}
        | {r.active_until + dt.timedelta(days=1) for r in [*old, *new] if r.active_until is not None}
    )
    differ = [i for i, edge in enumerate(edges) if _in_force(old, edge) != _in_force(new, edge)]
    if not differ:
        return None
    last_edge = differ[-1] + 1
    until = edges[last_edge] - dt.timedelta(days=1) if last_edge < len(edges) else None
    return edges[differ[0]], until, False


def _shift(day: dt.date, by: dt.timedelta) -> dt.date:
    try:
        return day + by
    except OverflowError:
        return dt.date.min if by.days < 0 else dt.date.max


def queue_account_changes(conn: Connection, old: list, new: list, now: dt.datetime) -> int:
    """Queue the metered local days an accounts load changes: for each account whose plan in force
    changed, the days it has usage on within the changed span; whose timezone changed, every day it
    has usage on and ``TIMEZONE_REACH`` days around them (its events move to other local days). Later
    days those balances reach are metered with them (``store.dependent_days``). Returns the days
    queued."""
    by_account: dict[str, tuple[list, list]] = {}
    for r in old:
        by_account.setdefault(r.account_id, ([], []))[0].append(r)
    for r in new:
        by_account.setdefault(r.account_id, ([], []))[1].append(r)
    spans = {}
    for account, (before, after) in by_account.items():
        span = changed_span(
            sorted(before, key=lambda r: r.active_from), sorted(after, key=lambda r: r.active_from)
        )
        if span is not None:
            spans[account] = span
    if not spans:
        return 0
    b = BillableUsage.__table__.c
    days: set[dt.date] = set()
    ids = sorted(spans)
    for i in range(0, len(ids), CHUNK):
        chunk = ids[i : i + CHUNK]
        # Only the days the chunk's changes can touch: billable_usage is stored by local day first.
        lo = max(dt.date(1, 1, 3), min(spans[a][0] for a in chunk)) - dt.timedelta(days=TIMEZONE_REACH)
        ends = [spans[a][1] for a in chunk]
        bounded = [end for end in ends if end is not None]
        where = [b.account_id.in_(chunk), b.local_day >= lo]
        if len(bounded) == len(ends):  # no span open to the end of time
            where.append(b.local_day <= max(bounded) + dt.timedelta(days=TIMEZONE_REACH))
        rows = conn.execute(select(b.account_id, b.local_day).distinct().where(*where))
        for account, day in rows:
            day = as_date(day)
            lo, hi, moved = spans[account]
            if moved:
                days.update(
                    _shift(day, dt.timedelta(days=k)) for k in range(-TIMEZONE_REACH, TIMEZONE_REACH + 1)
                )
            elif lo <= day and (hi is None or day <= hi):
                days.add(day)
    m = MeteredDate.__table__.c
    if not days:
        return 0
    metered = {
        as_date(d)
        for d in conn.execute(select(m.local_day).where(m.local_day.between(min(days), max(days)))).scalars()
    }
    todo = sorted(days & metered)
    q = MeterQueue.__table__
    reason = f"an accounts load changed {len(spans)} account(s)"
    for i in range(0, len(todo), CHUNK):
        part = todo[i : i + CHUNK]
        conn.execute(q.delete().where(q.c.local_day.in_(part)))
        conn.execute(q.insert(), [{"local_day": d, "queued_at": now, "reason": reason} for d in part])
    return len(todo)


def account_rows(conn: Connection, ids: list[str]) -> list:
    """The ``accounts`` rows of ``ids`` as they are now."""
    a = Account.__table__.c
    out: list = []
    for i in range(0, len(ids), CHUNK):
        out.extend(conn.execute(select(Account.__table__).where(a.account_id.in_(ids[i : i + CHUNK]))))
    return out
