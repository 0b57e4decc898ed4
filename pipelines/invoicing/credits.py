"""Prepaid and promotional credits in the warehouse: what a draft applies, voids, and what each grant
gave (``pipelines.invoicing.grants`` loads them).

    usage-billing credits load grants.csv
    usage-billing credits grant --grant G-1 --account acct-1 --amount 100.00 --kind paid --from 2026-03-01
    usage-billing credits void --grant G-1 --reason "refunded"
    usage-billing credits show --account A

Drafting (``pipelines.invoicing.documents``) reads the grants eligible for its month with what the
earlier months' documents left of each (``grants_for_draft``); ``billing.credits`` applies them, and
``check_finalize`` keeps every grant's finalized use within its amount.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from decimal import Decimal

import pyarrow as pa
from sqlalchemy import Connection, Engine, select, text

from billing.credits import GRANT_SCHEMA
from billing.invoices import month_bounds
from pipelines.errors import UsageBillingError
from pipelines.invoicing.grants import (
    COLUMNS,
    CREDITS_LOCK,
    Grant,
    count,
    grant,
    grant_of,
    load,
    money_of,
)
from pipelines.invoicing.months import month_lock
from pipelines.warehouse.engine import as_date, read_arrow
from pipelines.warehouse.locks import Fence, step_lock
from schemas import lines as line_types
from schemas.lake import AMOUNT
from schemas.warehouse import CreditGrant, CreditVoid

__all__ = ["COLUMNS", "Grant", "count", "grant", "load"]

CREDIT_LINES = f"""
  SELECT l.grant_id, i.period, i.status, i.invoice_number, -sum(l.amount) AS taken
  FROM invoice_lines l JOIN invoices i ON i.invoice_id = l.invoice_id
  WHERE l.grant_id IS NOT NULL AND coalesce(l.adjusted_type, l.line_type) = '{line_types.CREDIT.id}'
    AND i.status <> 'void'
  GROUP BY l.grant_id, i.period, i.status, i.invoice_number
"""


def _month_of(day: dt.date) -> str:
    return f"{day.year:04d}-{day.month:02d}"


def void(engine: Engine, grant_id: str, reason: str, on: dt.date | None = None) -> dt.date:
    """End a grant for every month whose last day is on or after ``on`` (UTC date; default today).
    Refused, naming the document, when a finalized document of such a month holds its credit."""
    if not reason.strip():
        raise UsageBillingError("a void needs a --reason")
    day = on or dt.datetime.now(dt.UTC).date()
    with engine.connect() as conn:
        periods = sorted(
            {
                r.period
                for r in conn.execute(
                    text(f"SELECT * FROM ({CREDIT_LINES}) c WHERE c.grant_id = :g"), {"g": grant_id}
                )
                if r.period >= _month_of(day)
            }
        )
    # the months it could change are locked, so no draft or finalize of them interleaves
    locks = [CREDITS_LOCK, *(month_lock(p) for p in periods)]
    with _step_locks(engine, locks) as fences, engine.begin() as conn:
        g, v = CreditGrant.__table__.c, CreditVoid.__table__.c
        if conn.execute(select(g.grant_id).where(g.grant_id == grant_id)).first() is None:
            raise UsageBillingError(
                f"no credit grant {grant_id!r} (see `usage-billing credits show --account A`)"
            )
        done = conn.execute(select(v.void_date).where(v.grant_id == grant_id)).scalar()
        if done is not None:
            raise UsageBillingError(f"credit grant {grant_id!r} is void already (from {done})")
        held: dict[str, list] = {}
        for r in conn.execute(
            text(f"SELECT * FROM ({CREDIT_LINES}) c WHERE c.grant_id = :g AND c.status = 'finalized'"),
            {"g": grant_id},
        ):
            held.setdefault(r.period, []).append(r)
        for period in sorted(held):
            if month_bounds(period)[1] < day:
                continue
            if sum(money_of(r.taken) for r in held[period]) != 0:
                first = min(r.invoice_number for r in held[period] if money_of(r.taken) != 0)
                raise UsageBillingError(
                    f"cannot void {grant_id!r} from {day}: finalized document {first} ({period}) applies it, "
                    "and finalized documents never change; void from a day after that month instead"
                )
        conn.execute(
            CreditVoid.__table__.insert().values(
                grant_id=grant_id, void_date=day, reason=reason.strip(), voided_at=dt.datetime.now(dt.UTC)
            )
        )
        for fence in fences:
            fence.check(conn)
    return day


@contextmanager
def _step_locks(engine: Engine, names: list[str]) -> Iterator[list[Fence]]:
    """Several step locks held together (taken in the order given): their fences."""
    with ExitStack() as stack:
        yield [stack.enter_context(step_lock(engine, n)) for n in names]


def grants_for_draft(conn: Connection, month: str) -> pa.Table:
    """The grants eligible for ``month`` (GRANT_SCHEMA), each with its amount less what the earlier
    months' documents (finalized and drafts, not void) took of it: an account's months are computed in
    order, so a later month that holds some of a grant is corrected by its own next draft, and
    ``check_finalize`` keeps the finalized documents within every grant's amount meanwhile."""
    last = month_bounds(month)[1]
    g, v = CreditGrant.__table__.c, CreditVoid.__table__.c
    # eligible: started by the month's last day, not expired by then (expires is exclusive), not void
    # for it (a void on V ends the months whose last day is on or after V)
    query = (
        select(*(g[c] for c in GRANT_SCHEMA.names if c != "remaining"), g.amount)
        .select_from(CreditGrant.__table__.outerjoin(CreditVoid.__table__, v.grant_id == g.grant_id))
        .where(g.effective_from <= last, or_null(g.expires, last), or_null(v.void_date, last))
    )
    grants = read_arrow(conn, query, GRANT_SCHEMA)
    if grants.num_rows == 0:
        return grants
    taken = _taken(conn, "c.period < :m", month)
    if taken:  # few grants were taken of before: the rest keep their amount
        ids = grants["grant_id"].to_pylist()
        amounts = grants["remaining"].to_pylist()
        left = [max(a - taken.get(i, Decimal(0)), Decimal(0)) for i, a in zip(ids, amounts, strict=True)]
        grants = grants.set_column(
            GRANT_SCHEMA.get_field_index("remaining"), GRANT_SCHEMA.field("remaining"), pa.array(left, AMOUNT)
        )
    return grants


def _taken(conn: Connection, where: str, month: str) -> dict[str, Decimal]:
    """Per grant, what the documents ``where`` selects (of CREDIT_LINES ``c``; ``:m`` = ``month``) took."""
    query = f"SELECT grant_id, sum(taken) AS taken FROM ({CREDIT_LINES}) c WHERE {where} GROUP BY grant_id"
    return {r.grant_id: money_of(r.taken) for r in conn.execute(text(query), {"m": month})}


def or_null(column, last: dt.date):
    """``column`` is null or after ``last``."""
    return column.is_(None) | (column > last)


def check_finalize(conn: Connection, month: str) -> None:
    """Refuse to number drafts whose credits no longer hold: a grant voided since the draft, or one that
    the documents would take more of than its amount (drafts of a later month finalized out of order)."""
    last = month_bounds(month)[1]
    drafted = conn.execute(
        text(
            f"SELECT c.grant_id, g.amount, v.void_date FROM ({CREDIT_LINES}) c "
            "JOIN credit_grants g ON g.grant_id = c.grant_id "
            "LEFT JOIN credit_voids v ON v.grant_id = c.grant_id "
            "WHERE c.period = :m AND c.status = 'draft' GROUP BY c.grant_id, g.amount, v.void_date"
        ),
        {"m": month},
    ).all()
    if not drafted:
        return
    how = f"draft it again (`usage-billing invoices draft --month {month}`)"
    for grant_id, _amount, void_date in drafted:
        if void_date is not None and as_date(void_date) <= last:
            raise UsageBillingError(
                f"cannot finalize {month}: its drafts apply credit {grant_id!r}, void since; {how}"
            )
    totals = _taken(conn, "c.status = 'finalized' OR c.period = :m", month)
    for grant_id, amount, _ in drafted:
        if totals.get(grant_id, Decimal(0)) > money_of(amount):
            others = conn.execute(
                text(
                    f"SELECT period, status, sum(taken) AS taken FROM ({CREDIT_LINES}) c "
                    "WHERE c.grant_id = :g AND c.period <> :m GROUP BY period, status"
                ),
                {"g": grant_id, "m": month},
            ).all()
            releasing = sorted(r.period for r in others if r.status == "draft" and money_of(r.taken) < 0)
            later = sorted(
                r.period for r in others if r.status == "finalized" and r.period > month and money_of(r.taken)
            )
            if releasing:
                then = f"the drafts of {', '.join(releasing)} give some of it back: "
                then += f"finalize {releasing[0]} first"
            elif later:
                then = (
                    f"finalized documents of {', '.join(later)} hold some of it and are corrected first: "
                    f"draft and finalize {later[0]}, then finalize {month}"
                )
            else:
                then = how
            raise UsageBillingError(
                f"cannot finalize {month}: with its drafts the documents would take "
                f"{totals[grant_id]:,.2f} of credit {grant_id!r}, more than its "
                f"{money_of(amount):,.2f}; {then}"
            )


@dataclass(frozen=True)
class GrantView:
    grant: Grant
    currency: str
    void_date: dt.date | None
    applied: dict[str, Decimal]  # month -> what its finalized documents took
    drafted: dict[str, Decimal]  # month -> what its drafts would take
    remaining: Decimal  # amount less what finalized documents took


def show(engine: Engine, account: str) -> list[GrantView]:
    """Each grant of ``account``: amount, applied per month, remaining, expiry, void."""
    g, v = CreditGrant.__table__.c, CreditVoid.__table__.c
    with engine.connect() as conn:
        rows = conn.execute(
            select(*(g[c] for c in COLUMNS), g.currency, v.void_date)
            .select_from(CreditGrant.__table__.outerjoin(CreditVoid.__table__, v.grant_id == g.grant_id))
            .where(g.account_id == account)
            .order_by(g.effective_from, g.grant_id)
        ).all()
        taken = conn.execute(
            text(
                f"SELECT c.grant_id, c.period, c.status, sum(c.taken) AS taken FROM ({CREDIT_LINES}) c "
                "JOIN credit_grants g ON g.grant_id = c.grant_id WHERE g.account_id = :a "
                "GROUP BY c.grant_id, c.period, c.status"
            ),
            {"a": account},
        ).all()
    out = []
    for r in rows:
        grant = grant_of(r)
        applied = {
            t.period: money_of(t.taken)
            for t in taken
            if t.grant_id == grant.grant_id and t.status == "finalized"
        }
        drafted = {
            t.period: money_of(t.taken) for t in taken if t.grant_id == grant.grant_id and t.status == "draft"
        }
        used = sum(applied.values(), Decimal(0))
        out.append(
            GrantView(
                grant, r.currency, as_date(r.void_date) if r.void_date is not None else None,
                {m: applied[m] for m in sorted(applied) if applied[m]},
                {m: drafted[m] for m in sorted(drafted) if drafted[m]},
                (grant.amount - used).quantize(Decimal("0.01")),
            )
        )  # fmt: skip
    return out
