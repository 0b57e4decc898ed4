"""Invoices in the warehouse: draft, finalize, void (``billing.invoices`` computes the lines).

    usage-billing invoices draft --month 2026-03
    usage-billing invoices finalize --month 2026-03
    usage-billing invoices void --number INV-202603-000017 --reason "duplicate account"

Each command is one transaction under the month's step lock (``pipelines.warehouse.locks``: a second run exits
75 or waits ``USAGE_BILLING_LOCK_WAIT``), so two drafters or finalizers of one month never interleave.
Only a closed month is drafted (unless ``open_month``) or finalized: ``open_reason`` says why not.

- draft: replaces the month's drafts only. An account without a finalized document for the month
  gets an invoice; an account with one gets an adjustment document whose lines are the difference
  between the recomputed truth and what its finalized documents billed (none if nothing changed).
- finalize: numbers the month's drafts ``INV-YYYYMM-NNNNNN`` gaplessly (a counter row per month,
  locked) and freezes them; the database refuses later changes (triggers, migration 0005).
- void: a finalized document becomes void with a reason; the next draft bills the account afresh.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import (
    Connection,
    Engine,
    and_,
    bindparam,
    delete,
    func,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.types import TIMESTAMP, Date

from billing.invoices import (
    BILLABLE_SCHEMA,
    LINE_SCHEMA,
    PLAN_SCHEMA,
    build_lines,
    difference,
    month_bounds,
    plan_periods,
    totals,
)
from billing.pricing import MissingPriceError
from pipelines.errors import UsageBillingError
from pipelines.invoicing import credits, history
from pipelines.invoicing.months import check_month, month_lock, open_reason, stale_reason
from pipelines.notify.credits import record_credits
from pipelines.runtime import faults
from pipelines.warehouse.engine import insert_arrow, read_arrow
from pipelines.warehouse.locks import step_lock
from pipelines.warehouse.unknown import UnknownAccount, refuse_unless_accepted, unknown_drafts
from schemas.catalog import Catalog
from schemas.lines import ADJUSTMENT_DOCUMENT, INVOICE_DOCUMENT
from schemas.warehouse import (
    Account,
    BillableUsage,
    Invoice,
    InvoiceCounter,
    InvoiceLine,
    InvoicePlan,
)

MAX_NUMBER = 999_999


@dataclass(frozen=True)
class DraftResult:
    month: str
    invoices: int
    adjustments: int
    lines: int
    total: object  # Decimal: the sum of the drafts' totals
    replaced_drafts: int
    open_month: bool = False  # the month was not closed: the drafts are marked and cannot be finalized
    unknown: tuple[UnknownAccount, ...] = ()  # drafts of never-held accounts nobody accepted yet


def lock_month(conn: Connection, month: str) -> None:
    """Inside the month's step lock: make sure the month's counter row exists (on SQLite this first
    write takes the database's write lock for the transaction)."""
    insert_ = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    conn.execute(
        insert_(InvoiceCounter.__table__).values(period=month, last_number=0).on_conflict_do_nothing()
    )


def draft(engine: Engine, catalog: Catalog, month: str, open_month: bool = False) -> DraftResult:
    """Draft ``month``: only a closed month, unless ``open_month`` asks for drafts of an open one
    (marked ``open_month``, never finalized). A future month is always refused."""
    month = check_month(month)
    first, last = month_bounds(month)
    now = dt.datetime.now(dt.UTC)
    if first > now.date():
        raise UsageBillingError(f"cannot draft {month}: it has not started yet (today is {now.date()})")
    with step_lock(engine, month_lock(month)) as fence, engine.begin() as conn:
        lock_month(conn, month)
        history.check(conn, catalog, f"cannot draft {month}")
        stale = stale_reason(conn, catalog, month)
        if stale:  # even for an open month's drafts: fees and usage must come from one version
            raise UsageBillingError(f"cannot draft {month}: {stale}")
        still_open = open_reason(conn, catalog, month)
        if still_open and not open_month:
            raise UsageBillingError(
                f"cannot draft {month}: the month is not closed: {still_open}; to see drafts of the open "
                "month anyway, add --open-month (they are marked so and never finalized)"
            )
        billable = billable_by_price(conn, first, last)
        plans = _plans(conn, first, last)
        grants = credits.grants_for_draft(conn, month)
        try:
            truth = build_lines(billable, plans, catalog, month, grants)
        except MissingPriceError as exc:
            raise UsageBillingError(f"cannot draft {month}: {exc}") from None
        replaced = _delete_drafts(conn, month)
        docs = _documents(conn, month)
        billed_accounts = pa.array(
            sorted({d.account_id for d in docs if d.status == "finalized"}), pa.string()
        )
        is_billed = pc.is_in(truth["account_id"], value_set=billed_accounts)
        fresh = truth.filter(pc.invert(is_billed))
        adjustments = difference(truth.filter(is_billed), _billed_lines(conn, month))
        invoices = _invoice_rows(fresh, INVOICE_DOCUMENT, plans, docs, month, catalog, now)
        adjusting = _invoice_rows(adjustments, ADJUSTMENT_DOCUMENT, plans, docs, month, catalog, now)
        header = pa.concat_tables([invoices, adjusting])
        header = header.append_column(
            "open_month", pa.array([bool(still_open)] * header.num_rows, pa.bool_())
        )
        zones = _zones(conn)
        header = header.append_column(
            "timezone", pa.array([zones.get(a, "UTC") for a in header["account_id"].to_pylist()], pa.string())
        )
        lines = pa.concat_tables([fresh, adjustments])
        ids = header.select(["account_id", "invoice_id"])
        lines = lines.join(ids, "account_id").drop_columns(["account_id"])
        periods = plan_periods(plans, header["account_id"].to_pylist(), catalog, month)
        periods = periods.join(ids, "account_id").drop_columns(["account_id"])
        insert_arrow(conn, Invoice.__table__, header)
        insert_arrow(conn, InvoiceLine.__table__, lines)
        insert_arrow(conn, InvoicePlan.__table__, periods)
        unknown = tuple(unknown_drafts(conn, month))
        if not still_open:  # an open month's drafts are a preview: nobody is told of them
            record_credits(conn, catalog, month, f"invoices draft {month}")
        fence.check(conn)
    total = pc.sum(header["total"]).as_py() if header.num_rows else 0
    counts = (invoices.num_rows, adjusting.num_rows, lines.num_rows)
    return DraftResult(month, *counts, total, replaced, bool(still_open), unknown)


def billable_by_price(conn: Connection, first: dt.date, last: dt.date, model: str | None = None) -> pa.Table:
    """Billable usage of local days ``first``..``last`` (of one model, if given) summed per account,
    model, tier, kind and the price metering applied (``price_from``): about one row per account,
    model, tier and kind instead of one per day (``rate_day`` and ``last_rate_day``: the first and last
    of the rows, which the price metering applied is checked against the catalog on). What invoices
    are built from, and what the retirement report prices an account's overage with."""
    b = BillableUsage.__table__.c
    keys = [b.account_id, b.model, b.speed_tier, b.token_kind, b.price_from]
    query = (
        select(
            *keys,
            func.min(b.rate_day),
            func.max(b.rate_day),
            func.sum(b.included_tokens),
            func.sum(b.overage_tokens),
        )
        .where(b.local_day.between(first, last), *([b.model == model] if model is not None else []))
        .group_by(*keys)
    )
    return read_arrow(conn, query, BILLABLE_SCHEMA)


def _plans(conn: Connection, first: dt.date, last: dt.date) -> pa.Table:
    a = Account.__table__.c
    query = select(a.account_id, a.plan, a.active_from, a.active_until).where(
        a.active_from <= last, or_(a.active_until.is_(None), a.active_until >= first)
    )
    return read_arrow(conn, query, PLAN_SCHEMA)


def _zones(conn: Connection) -> dict[str, str]:
    """Each account's timezone (one per account: the accounts load checks it)."""
    a = Account.__table__.c
    return dict(conn.execute(select(a.account_id, func.min(a.timezone)).group_by(a.account_id)).all())


def _delete_drafts(conn: Connection, month: str) -> int:
    i = Invoice.__table__
    drafts = select(i.c.invoice_id).where(i.c.period == month, i.c.status == "draft")
    for part in (InvoiceLine.__table__, InvoicePlan.__table__):
        conn.execute(delete(part).where(part.c.invoice_id.in_(drafts)))
    return conn.execute(delete(i).where(i.c.period == month, i.c.status == "draft")).rowcount


def _documents(conn: Connection, month: str) -> list:
    i = Invoice.__table__.c
    query = select(i.account_id, i.sequence, i.kind, i.status, i.invoice_number).where(i.period == month)
    return list(conn.execute(query))


def _billed_lines(conn: Connection, month: str) -> pa.Table:
    """Lines of the month's finalized (not void) documents: what was billed so far."""
    i, line = Invoice.__table__.c, InvoiceLine.__table__.c
    query = (
        select(*(line[c] if c != "account_id" else i.account_id for c in LINE_SCHEMA.names))
        .select_from(InvoiceLine.__table__.join(Invoice.__table__, line.invoice_id == i.invoice_id))
        .where(i.period == month, i.status == "finalized")
    )
    return read_arrow(conn, query, LINE_SCHEMA)


def _invoice_rows(
    lines: pa.Table, kind: str, plans: pa.Table, docs: list, month: str, catalog: Catalog, now: dt.datetime
) -> pa.Table:
    """One document per account of ``lines``: ids, sequence, plan names, subtotal and total."""
    sums = totals(lines).sort_by("account_id")
    accounts = sums["account_id"].to_pylist()
    next_seq: dict[str, int] = {}
    corrects: dict[str, str] = {}
    # An adjustment corrects the account's finalized invoice of the month; were that voided, the
    # latest finalized adjustment (what is billed is then that document and those before it).
    for d in sorted(docs, key=lambda d: (d.kind == INVOICE_DOCUMENT, d.sequence)):
        next_seq[d.account_id] = max(next_seq.get(d.account_id, 1), d.sequence + 1)
        if d.status == "finalized":
            corrects[d.account_id] = d.invoice_number
    named = plans.filter(pc.is_valid(plans["plan"]))
    by_account = named.group_by("account_id").aggregate([("plan", "distinct")])
    plan_of = dict(
        zip(
            by_account["account_id"].to_pylist(),
            (",".join(sorted(p)) for p in by_account["plan_distinct"].to_pylist()),
            strict=True,
        )
    )
    n = len(accounts)
    return pa.table(
        {
            "invoice_id": pa.array([str(uuid.uuid4()) for _ in range(n)], pa.string()),
            "account_id": sums["account_id"],
            "period": pa.array([month] * n, pa.string()),
            "sequence": pa.array([next_seq.get(a, 1) for a in accounts], pa.int32()),
            "kind": pa.array([kind] * n, pa.string()),
            "status": pa.array(["draft"] * n, pa.string()),
            "corrects": pa.array(
                [corrects.get(a) if kind == ADJUSTMENT_DOCUMENT else None for a in accounts], pa.string()
            ),
            "plan": pa.array([plan_of.get(a) for a in accounts], pa.string()),
            "currency": pa.array([catalog.currency] * n, pa.string()),
            "subtotal": sums["subtotal"],
            "total": sums["total"],
            "created_at": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
        }
    )


@dataclass(frozen=True)
class FinalizeResult:
    month: str
    finalized: int
    first_number: str | None
    last_number: str | None


def invoice_number(month: str, n: int) -> str:
    return f"INV-{month.replace('-', '')}-{n:06d}"


def finalize(
    engine: Engine, catalog: Catalog, month: str, accept_unknown: str | None = None
) -> FinalizeResult:
    """Number every draft of the month in one transaction, gaplessly, in (account, sequence) order.
    An open month is never numbered, nor are drafts made while it was open, nor drafts of accounts the
    accounts table never held unless ``accept_unknown`` gives the reason to (recorded)."""
    month = check_month(month)
    i = Invoice.__table__
    counter = InvoiceCounter.__table__
    with step_lock(engine, month_lock(month)) as fence, engine.begin() as conn:
        lock_month(conn, month)
        still_open = open_reason(conn, catalog, month)
        if still_open:
            raise UsageBillingError(f"cannot finalize {month}: the month is not closed: {still_open}")
        early = conn.execute(
            select(func.count())
            .select_from(i)
            .where(i.c.period == month, i.c.status == "draft", i.c.open_month)
        ).scalar_one()
        if early:
            raise UsageBillingError(
                f"cannot finalize {month}: its {early:,} drafts were made while the month was open; "
                f"draft it again now that it is closed (`usage-billing invoices draft --month {month}`)"
            )
        refuse_unless_accepted(conn, month, accept_unknown, catalog.currency)
        history.check(conn, catalog, f"cannot finalize {month}")
        history.check_drafts(conn, catalog, month)
        credits.check_finalize(conn, month)
        billed = history.used_by(conn, catalog, month)
        last_query = select(counter.c.last_number).where(counter.c.period == month)
        if conn.dialect.name == "postgresql":
            last_query = last_query.with_for_update()
        last = conn.execute(last_query).scalar_one()
        count = conn.execute(
            select(func.count()).select_from(i).where(i.c.period == month, i.c.status == "draft")
        ).scalar_one()
        if count == 0:
            return FinalizeResult(month, 0, None, None)
        if last + count > MAX_NUMBER:
            raise UsageBillingError(f"{month}: {last + count} invoices exceed the 6-digit number range")
        pad = (
            "lpad(CAST(:last + d.n AS TEXT), 6, '0')"
            if conn.dialect.name == "postgresql"
            else "printf('%06d', :last + d.n)"
        )
        # The customer as the accounts row in force on the month's last day names it; the seller and
        # the due date as the catalog has them now: a document keeps them, whatever changes later.
        customer = {
            column: f"""(SELECT a.{field} FROM accounts a WHERE a.account_id = invoices.account_id
                         AND a.active_from <= :month_end ORDER BY a.active_from DESC LIMIT 1)"""
            for column, field in (
                ("customer_name", "name"),
                ("customer_email", "email"),
                ("customer_address", "billing_address"),
            )
        }
        statement = text(
            f"""
            UPDATE invoices SET status = 'finalized', finalized_at = :now,
                   invoice_number = :prefix || {pad}, due_date = :due,
                   seller_name = :seller_name, seller_address = :seller_address,
                   seller_tax_id = :seller_tax_id,
                   {", ".join(f"{column} = {query}" for column, query in customer.items())}
            FROM (SELECT invoice_id, row_number() OVER (ORDER BY account_id, sequence) AS n
                  FROM invoices WHERE period = :month AND status = 'draft') AS d
            WHERE invoices.invoice_id = d.invoice_id
            """
        ).bindparams(
            bindparam("now", type_=TIMESTAMP(timezone=True)),
            bindparam("due", type_=Date()),
            bindparam("month_end", type_=Date()),
        )
        now = dt.datetime.now(dt.UTC)
        seller = catalog.seller
        done = conn.execute(
            statement,
            {
                "now": now,
                "prefix": f"INV-{month.replace('-', '')}-",
                "last": last,
                "month": month,
                "due": now.date() + dt.timedelta(days=catalog.payment_terms_days),
                "month_end": month_bounds(month)[1],
                "seller_name": seller.name,
                "seller_address": seller.address or None,
                "seller_tax_id": seller.tax_id or None,
            },
        ).rowcount
        if done != count:
            raise UsageBillingError(f"{month}: finalized {done} of {count} drafts; rolled back")
        faults.checkpoint("invoices.finalize")
        conn.execute(update(counter).where(counter.c.period == month).values(last_number=last + count))
        history.record(conn, billed, invoice_number(month, last + 1))
        fence.check(conn)
    return FinalizeResult(month, count, invoice_number(month, last + 1), invoice_number(month, last + count))


def void(engine: Engine, number: str, reason: str) -> str:
    """Void a finalized document; returns its account id. The reason is required and recorded."""
    if not reason.strip():
        raise UsageBillingError("a void needs a --reason")
    found = re.fullmatch(r"INV-(\d{4})(\d{2})-\d{6}", number)
    if not found:
        raise UsageBillingError(f"no invoice numbered {number} (numbers look like INV-202603-000017)")
    i = Invoice.__table__
    with step_lock(engine, month_lock(f"{found[1]}-{found[2]}")) as fence, engine.begin() as conn:
        row = conn.execute(select(i.c.account_id, i.c.status).where(i.c.invoice_number == number)).first()
        if row is None:
            raise UsageBillingError(f"no invoice numbered {number}")
        if row.status != "finalized":
            raise UsageBillingError(
                f"invoice {number} is {row.status}: only a finalized invoice can be voided"
            )
        conn.execute(
            update(i)
            .where(and_(i.c.invoice_number == number, i.c.status == "finalized"))
            .values(status="void", voided_at=dt.datetime.now(dt.UTC), void_reason=reason.strip())
        )
        fence.check(conn)
    return row.account_id
