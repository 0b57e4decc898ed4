"""Usage of unknown accounts: account ids with usage that the accounts table has never held.

They are metered without a plan (every token at the rate card) but never billed silently: metering
counts them, a draft lists them and ``finalize`` refuses a month that has any, naming the first few,
until they are loaded (then metered and drafted again) or accepted with a recorded reason
(``unknown_account_acceptances``, shown in ``finance_unknown_accounts``). An empty accounts table is
the extreme case: nothing is finalized.
"""

from __future__ import annotations

import datetime as dt
import getpass
from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import Connection, Engine, Select, func, insert, select

from pipelines.errors import UsageBillingError
from schemas.lines import usage_ids
from schemas.warehouse import Account, BillableUsage, Invoice, InvoiceLine, UnknownAccountAcceptance

SHOWN = 5  # accounts a message names before "and N more"
MAX_REASON = 1000  # unknown_account_acceptances.reason is VARCHAR(1000)
USAGE_LINES = usage_ids()


@dataclass(frozen=True)
class UnknownAccount:
    account_id: str
    tokens: int
    amount: Decimal | None = None  # the drafts' total (None where nothing is drafted yet)


def _known() -> Select:
    return select(Account.__table__.c.account_id)


def unknown_usage(conn: Connection, first: dt.date, last: dt.date) -> list[UnknownAccount]:
    """Unknown accounts with billable usage on local days ``first .. last``, and their tokens."""
    b = BillableUsage.__table__.c
    rows = conn.execute(
        select(b.account_id, func.sum(b.included_tokens + b.overage_tokens))
        .where(b.local_day.between(first, last), b.account_id.not_in(_known()))
        .group_by(b.account_id)
        .order_by(b.account_id)
    ).all()
    return [UnknownAccount(a, int(t or 0)) for a, t in rows]


def unknown_note(engine: Engine, first: dt.date, last: dt.date) -> str | None:
    """What a metering run of local days ``first .. last`` says about unknown accounts (None: none)."""
    with engine.connect() as conn:
        unknown = unknown_usage(conn, first, last)
    if not unknown:
        return None
    return (
        f"{describe(unknown)}, metered without a plan: the accounts table never held them, and "
        "`invoices finalize` refuses their months until they are loaded or accepted"
    )


def unknown_drafts(conn: Connection, month: str) -> list[UnknownAccount]:
    """The month's drafts of unknown accounts nobody accepted for it: per account its usage tokens
    and the drafts' total."""
    i, line = Invoice.__table__.c, InvoiceLine.__table__.c
    a = UnknownAccountAcceptance.__table__.c
    kind = func.coalesce(line.adjusted_type, line.line_type)
    tokens = (
        select(line.invoice_id, func.sum(line.quantity).label("tokens"))
        .where(kind.in_(USAGE_LINES))
        .group_by(line.invoice_id)
        .subquery()
    )
    query = (
        select(i.account_id, func.sum(func.coalesce(tokens.c.tokens, 0)), func.sum(i.total))
        .select_from(Invoice.__table__.outerjoin(tokens, tokens.c.invoice_id == i.invoice_id))
        .where(i.period == month, i.status == "draft", i.account_id.not_in(_known()))
        .group_by(i.account_id)
        .order_by(i.account_id)
    )
    accepted = select(a.account_id).where(a.period == month)
    query = query.where(i.account_id.not_in(accepted))
    return [UnknownAccount(acc, int(t or 0), Decimal(str(m or 0))) for acc, t, m in conn.execute(query)]


def describe(accounts: list[UnknownAccount], currency: str | None = None) -> str:
    """``3 unknown accounts (acct-x, acct-y, acct-z): 1,234 tokens[, 12.34 USD]``."""
    names = ", ".join(u.account_id for u in accounts[:SHOWN])
    more = f" and {len(accounts) - SHOWN:,} more" if len(accounts) > SHOWN else ""
    tokens = sum(u.tokens for u in accounts)
    plural = "s" if len(accounts) != 1 else ""
    text = f"{len(accounts):,} unknown account{plural} ({names}{more}): {tokens:,} tokens"
    if currency is not None:
        total = sum((u.amount or Decimal(0) for u in accounts), Decimal(0))
        text += f", {total:,.2f} {currency}"
    return text


def accept(conn: Connection, month: str, accounts: list[UnknownAccount], reason: str) -> None:
    """Record the operator's acceptance of ``accounts`` for ``month`` (inside finalize's transaction)."""
    now = dt.datetime.now(dt.UTC)
    who = _operator()
    conn.execute(
        insert(UnknownAccountAcceptance.__table__),
        [
            {
                "period": month,
                "account_id": u.account_id,
                "accepted_at": now,
                "accepted_by": who,
                "reason": reason,
                "tokens": u.tokens,
                "amount": u.amount or Decimal(0),
            }
            for u in accounts
        ],
    )


def refuse_unless_accepted(conn: Connection, month: str, reason: str | None, currency: str) -> None:
    """In finalize's transaction: refuse the month while it has drafts of unknown accounts nobody
    accepted; with ``reason``, record the acceptance of each (both or neither)."""
    unknown = unknown_drafts(conn, month)
    if not unknown:
        return
    if reason is None or not reason.strip():
        raise UsageBillingError(
            f"cannot finalize {month}: drafts of {describe(unknown, currency)} that the accounts table has "
            "never held; load them (`usage-billing accounts load FILE`, then meter and draft the month "
            "again) or accept them: --accept-unknown-accounts 'why'"
        )
    if len(reason.strip()) > MAX_REASON:
        raise UsageBillingError(
            f"--accept-unknown-accounts: the reason is {len(reason.strip()):,} characters; "
            f"at most {MAX_REASON:,}"
        )
    accept(conn, month, unknown, reason.strip())


def _operator() -> str:
    try:
        return getpass.getuser()[:100]
    except (KeyError, OSError):
        return "unknown"
