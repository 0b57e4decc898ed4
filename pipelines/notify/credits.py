"""Credit thresholds crossed and credits about to expire: recorded in the outbox by each draft, in the
draft's transaction (``pipelines.invoicing.documents.draft``).

A grant crosses a share of its amount in the month whose documents (finalized and drafts, not void,
months in order) first take that share of it in all; a draft decides every grant's crossings again,
so a redraft that gives a credit back retracts the crossing, and one that moves nothing writes
nothing. A grant with a balance left that expires within ``expiry_notice_days`` after the drafted
month's end is ``expiring`` (once per grant and expiry); if a later draft leaves it nothing, that
notice is retracted.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from sqlalchemy import Connection, select, text

from billing.invoices import month_bounds
from pipelines.invoicing.credits import CREDIT_LINES
from pipelines.invoicing.grants import money_of
from pipelines.notify.outbox import CREDIT_CROSSED, CREDIT_EXPIRING, computed_rows, record
from pipelines.warehouse.engine import as_date
from schemas.catalog import Catalog
from schemas.warehouse import CreditGrant, CreditVoid, Notification


def record_credits(conn: Connection, catalog: Catalog, month: str, source: str) -> dict[str, int]:
    config = catalog.notifications
    written = {"crossed": 0, "retracted": 0}
    if not config.credit_thresholds and not config.expiry_notice_days:
        return written
    taken: dict[str, list[tuple[str, Decimal]]] = {}
    query = f"SELECT grant_id, period, sum(taken) AS taken FROM ({CREDIT_LINES}) c GROUP BY grant_id, period"
    for r in conn.execute(text(query)):
        taken.setdefault(r.grant_id, []).append((r.period, money_of(r.taken)))
    g, v = CreditGrant.__table__.c, CreditVoid.__table__.c
    grants = conn.execute(
        select(g.grant_id, g.account_id, g.amount, g.expires, v.void_date).select_from(
            CreditGrant.__table__.outerjoin(CreditVoid.__table__, v.grant_id == g.grant_id)
        )
    ).all()
    n = Notification.__table__.c
    if config.credit_thresholds:
        computed = [c for grant in grants for c in _crossed(grant, taken.get(grant.grant_id, []), config)]
        got = record(conn, CREDIT_CROSSED, computed_rows(computed), n.grant_id.is_not(None), None, source)
        written = {k: written[k] + got[k] for k in written}
    if config.expiry_notice_days:
        last = month_bounds(month)[1]
        horizon = last + dt.timedelta(days=config.expiry_notice_days)
        expiring = [
            c
            for grant in grants
            if grant.expires is not None and last < as_date(grant.expires) <= horizon
            for c in _expiring(grant, taken.get(grant.grant_id, []), month)
        ]
        within = n.period_start.between(last + dt.timedelta(days=1), horizon)
        got = record(conn, CREDIT_EXPIRING, computed_rows(expiring), within, None, source)
        written = {k: written[k] + got[k] for k in written}
    return written


def _row(grant, day: dt.date, data: dict, **key: object) -> dict:
    """A computed credit crossing: the grant's key, the first day of its month, its figures."""
    empty = {"plan": None, "pool": None, "period_start": None, "threshold": None, "event_id": None}
    return {
        **empty,
        "account_id": grant.account_id,
        "grant_id": grant.grant_id,
        "local_day": day,
        "occurred_at": None,
        "data": data,
        **key,
    }


def _crossed(grant, taken: list[tuple[str, Decimal]], config) -> list[dict]:
    amount = money_of(grant.amount)
    out, shares, cum = [], list(config.credit_thresholds), Decimal(0)
    for period, part in sorted(taken):
        cum += part
        while shares and cum >= shares[0] * amount:
            share = shares.pop(0)
            data = {"applied": f"{cum:.2f}", "amount": f"{amount:.2f}", "month": period}
            out.append(_row(grant, dt.date.fromisoformat(f"{period}-01"), data, threshold=str(share)))
    return out


def _expiring(grant, taken: list[tuple[str, Decimal]], month: str) -> list[dict]:
    """The notice, if the grant has a balance left and is not void."""
    if grant.void_date is not None:
        return []
    amount = money_of(grant.amount)
    applied = sum((t for _, t in taken), Decimal(0))
    if applied >= amount:
        return []
    expires = as_date(grant.expires)
    data = {
        "applied": f"{applied:.2f}",
        "amount": f"{amount:.2f}",
        "remaining": f"{amount - applied:.2f}",
        "expires": expires.isoformat(),
        "month": month,
    }
    return [_row(grant, dt.date.fromisoformat(f"{month}-01"), data, period_start=expires)]
