"""Warehouse tables of billing: pool balances, billable usage, the metered-day records and re-meter queue,
invoices, their lines and the number counters.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    ForeignKey,
    Integer,
    Numeric,
    PrimaryKeyConstraint,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.sql.expression import false

from schemas import lines, tokens
from schemas.warehouse.base import CLUSTERED, Base


class PoolUsage(Base):
    """One quota pool balance: an account's plan pool in one period (local dates, inclusive)."""

    __tablename__ = "pool_usage"
    __table_args__ = CLUSTERED

    account_id: Mapped[str] = mapped_column(primary_key=True)
    plan: Mapped[str] = mapped_column(String(64), primary_key=True)
    pool: Mapped[str] = mapped_column(String(64), primary_key=True)
    period_start: Mapped[dt.date] = mapped_column(primary_key=True, comment="account-local date")
    period_end: Mapped[dt.date]
    allowance: Mapped[int] = mapped_column(comment="tokens (input + output) per period")
    used: Mapped[int]
    remaining: Mapped[int]
    exhausted_at: Mapped[dt.datetime | None] = mapped_column(comment="the event that used the last token")


class PoolDraw(Base):
    """Tokens each pool covered of each model's usage per account-local day (from the allocation
    records): the backup tank (a model's own pool against the main one) and the bridge between
    ``pool_usage`` (by pool period) and the included tokens on invoices (by local month)."""

    __tablename__ = "pool_draws"
    __table_args__ = (PrimaryKeyConstraint("local_day", "account_id", "plan", "pool", "model"), CLUSTERED)

    local_day: Mapped[dt.date] = mapped_column(comment="account-local date")
    account_id: Mapped[str]
    plan: Mapped[str] = mapped_column(String(64))
    pool: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(100))
    tokens: Mapped[int] = mapped_column(comment="input + output tokens the pool covered")


class BillableUsage(Base):
    """Tokens per account, model, speed tier, account-local day and token kind: included or overage."""

    __tablename__ = "billable_usage"
    # Keyed by local day first: every read and replace selects a range of local days.
    __table_args__ = (
        PrimaryKeyConstraint("local_day", "account_id", "model", "speed_tier", "token_kind", "rate_day"),
        CLUSTERED,
    )

    account_id: Mapped[str]
    model: Mapped[str] = mapped_column(String(100))
    speed_tier: Mapped[str] = mapped_column(String(32))
    local_day: Mapped[dt.date] = mapped_column(comment="account-local date")
    token_kind: Mapped[str] = mapped_column(String(16), comment=" | ".join(tokens.ids()))
    rate_day: Mapped[dt.date] = mapped_column(
        comment="UTC date of the row's first event: the day its price is looked up on",
    )
    price_from: Mapped[dt.date | None] = mapped_column(
        comment="effective_from of the price metering applied (null: no price in force)",
    )
    included_tokens: Mapped[int]
    overage_tokens: Mapped[int]


class MeteredDay(Base):
    """Metered tokens per account-local day and UTC day, over all accounts: the bridge between
    usage_daily (UTC days) and billable usage and invoices (local days) in the reconciliation."""

    __tablename__ = "metered_days"

    local_day: Mapped[dt.date] = mapped_column(primary_key=True)
    utc_day: Mapped[dt.date] = mapped_column(primary_key=True)
    included_tokens: Mapped[int]
    overage_tokens: Mapped[int]


class MeteredDate(Base):
    """Account-local dates a metering run covered, and when that run started reading the lake: a month
    is closed for invoicing only when each of its days was metered after the last ingest that changed
    the UTC days it spans (``recompute_queue``)."""

    __tablename__ = "metered_dates"

    local_day: Mapped[dt.date] = mapped_column(primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64))
    metered_at: Mapped[dt.datetime] = mapped_column(comment="when the run started reading the lake")
    basis: Mapped[str | None] = mapped_column(
        String(64), comment="digest of the catalog's plans it was metered with (null: before migration 0012)"
    )


class MeterQueue(Base):
    """Account-local dates whose metering is out of date for a reason other than an event: an
    ``accounts load`` changed the plan or timezone of an account with usage on them. ``run-day``, the
    DAGs and ``quota meter`` re-meter them; a row counts until a metering run of its day started after
    ``queued_at``, and a month with such a day is not closed for invoicing."""

    __tablename__ = "meter_queue"

    local_day: Mapped[dt.date] = mapped_column(primary_key=True)
    queued_at: Mapped[dt.datetime]
    reason: Mapped[str] = mapped_column(String(400))


class Invoice(Base):
    """One billing document: an account's invoice for a local calendar month, or an adjustment to it.

    Idempotency key: (account_id, period, sequence); sequence 1 is the first document of the month.
    Lifecycle draft -> finalized (numbered, immutable) -> void. A database trigger refuses to change
    or delete a document that is not a draft, except voiding a finalized one.
    """

    __tablename__ = "invoices"
    __table_args__ = (UniqueConstraint("account_id", "period", "sequence"),)

    invoice_id: Mapped[str] = mapped_column(String(36), primary_key=True, comment="uuid")
    account_id: Mapped[str]
    period: Mapped[str] = mapped_column(String(7), comment="YYYY-MM, account-local calendar month")
    sequence: Mapped[int] = mapped_column(Integer, comment="1, 2, ... per account and period")
    kind: Mapped[str] = mapped_column(String(16), comment="invoice | adjustment")
    status: Mapped[str] = mapped_column(String(16), comment="draft | finalized | void")
    invoice_number: Mapped[str | None] = mapped_column(
        String(20), unique=True, comment="INV-YYYYMM-NNNNNN, gapless per period, set when finalized"
    )
    corrects: Mapped[str | None] = mapped_column(
        String(20), comment="adjustments: the number of the invoice they correct"
    )
    plan: Mapped[str | None] = mapped_column(
        String(200), comment="plans in force in the month, comma separated (invoice_plans has one row each)"
    )
    currency: Mapped[str] = mapped_column(String(3))
    subtotal: Mapped[Decimal] = mapped_column(Numeric(20, 2), comment="sum of the document's lines")
    total: Mapped[Decimal] = mapped_column(
        Numeric(20, 2), comment="what the document asks to pay: the subtotal (no tax is computed)"
    )
    created_at: Mapped[dt.datetime]
    finalized_at: Mapped[dt.datetime | None]
    voided_at: Mapped[dt.datetime | None]
    void_reason: Mapped[str | None] = mapped_column(String(1000))
    open_month: Mapped[bool] = mapped_column(
        server_default=false(),
        comment="a draft of a month not closed yet (asked for with --open-month): never numbered",
    )
    timezone: Mapped[str | None] = mapped_column(
        String(64), comment="the account's zone: the period's first and last day are its local days"
    )
    due_date: Mapped[dt.date | None] = mapped_column(
        comment="issue date (finalized_at, UTC) + the catalog's payment_terms_days; set when finalized"
    )
    customer_name: Mapped[str | None] = mapped_column(String(200), comment="as finalized (accounts.name)")
    customer_email: Mapped[str | None] = mapped_column(String(254), comment="as finalized")
    customer_address: Mapped[str | None] = mapped_column(String(1000), comment="as finalized")
    seller_name: Mapped[str | None] = mapped_column(
        String(200), comment="the catalog's [seller] when finalized"
    )
    seller_address: Mapped[str | None] = mapped_column(String(1000))
    seller_tax_id: Mapped[str | None] = mapped_column(String(64))


class InvoiceLine(Base):
    """One line of a billing document. Amount = quantity x unit price / 1M, half-up to cents."""

    __tablename__ = "invoice_lines"

    invoice_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("invoices.invoice_id", ondelete="RESTRICT"), primary_key=True
    )
    line_no: Mapped[int] = mapped_column(Integer, primary_key=True)
    line_type: Mapped[str] = mapped_column(String(16), comment=" | ".join(t.id for t in lines.LINES))
    adjusted_type: Mapped[str | None] = mapped_column(
        String(16), comment="adjustment lines: the line type whose difference they carry"
    )
    model: Mapped[str | None] = mapped_column(String(100))
    speed_tier: Mapped[str | None] = mapped_column(String(32))
    token_kind: Mapped[str | None] = mapped_column(String(16))
    description: Mapped[str] = mapped_column(String(400))
    quantity: Mapped[int] = mapped_column(comment=f"tokens; active days for {lines.PLAN_FEE.id}")
    unit_price: Mapped[Decimal] = mapped_column(
        Numeric(20, 6), comment=f"per 1M tokens; the monthly fee for {lines.PLAN_FEE.id}"
    )
    amount: Mapped[Decimal] = mapped_column(Numeric(20, 2))
    grant_id: Mapped[str | None] = mapped_column(
        String(200), index=True, comment=f"{lines.CREDIT.id} lines (and their corrections): the grant applied"
    )


class InvoicePlan(Base):
    """One plan period of a document's month, as drafted: the accounts row clipped to the month. A
    pay-as-you-go period has no plan (finance views show ``pay_as_you_go``). Frozen with the document."""

    __tablename__ = "invoice_plans"

    invoice_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("invoices.invoice_id", ondelete="RESTRICT"), primary_key=True
    )
    active_from: Mapped[dt.date] = mapped_column(primary_key=True, comment="first local day in the month")
    active_until: Mapped[dt.date] = mapped_column(comment="last local day in the month")
    plan: Mapped[str | None] = mapped_column(String(64), comment="null = pay as you go")
    days: Mapped[int] = mapped_column(Integer, comment="active days in the month")
    monthly_fee: Mapped[Decimal | None] = mapped_column(Numeric(20, 6), comment="the plan's fee per month")
    minimum_monthly: Mapped[Decimal | None] = mapped_column(
        Numeric(20, 6), comment="the plan's monthly minimum (commitment) as drafted; null = none"
    )


class InvoiceCounter(Base):
    """The last invoice number given out per period: locked by the finalizer (gapless numbering)."""

    __tablename__ = "invoice_counters"

    period: Mapped[str] = mapped_column(String(7), primary_key=True)
    last_number: Mapped[int]


class UnknownAccountAcceptance(Base):
    """An operator's recorded acceptance that a month's documents of an account the accounts table
    never held may be numbered (``invoices finalize --accept-unknown-accounts REASON``). Append-only."""

    __tablename__ = "unknown_account_acceptances"

    period: Mapped[str] = mapped_column(String(7), primary_key=True, comment="account-local month YYYY-MM")
    account_id: Mapped[str] = mapped_column(primary_key=True)
    accepted_at: Mapped[dt.datetime]
    accepted_by: Mapped[str] = mapped_column(String(100))
    reason: Mapped[str] = mapped_column(String(1000))
    tokens: Mapped[int] = mapped_column(comment="usage tokens on its drafts when accepted")
    amount: Mapped[Decimal] = mapped_column(Numeric(20, 2), comment="the drafts' total when accepted")


class BilledCatalogRow(Base):
    """A catalog row that priced finalized documents, with the values it billed and the days it priced
    (``pipelines.invoicing.history``): a later catalog may not change it in place."""

    __tablename__ = "billed_catalog_rows"

    row_key: Mapped[str] = mapped_column(String(300), primary_key=True, comment="kind:subject:tier:since")
    row_kind: Mapped[str] = mapped_column(String(8), comment=f"price | {lines.PLAN_FEE.id}")
    subject: Mapped[str] = mapped_column(String(100), comment="the model of a price, the plan of a fee")
    tier: Mapped[str] = mapped_column(String(32), comment="the speed tier of a price; empty for a fee")
    effective_from: Mapped[dt.date | None] = mapped_column(comment="null: the plan's monthly_fee")
    row_values: Mapped[dict[str, Any]] = mapped_column(
        comment="per 1M tokens by kind, or monthly_fee, as billed"
    )
    first_day: Mapped[dt.date] = mapped_column(comment="first day priced (UTC for prices, local for fees)")
    last_day: Mapped[dt.date] = mapped_column(comment="last day priced")
    first_document: Mapped[str | None] = mapped_column(String(20), comment="first document it priced")
    recorded_at: Mapped[dt.datetime]


class CreditGrant(Base):
    """A prepaid (``paid``) or given (``promotional``) credit of an account (``credits load`` /
    ``credits grant``). Immutable once loaded (the database refuses updates and deletes): a grant ends
    by a ``credit_voids`` row, a new fact."""

    __tablename__ = "credit_grants"

    grant_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    account_id: Mapped[str] = mapped_column(index=True)
    amount: Mapped[Decimal] = mapped_column(Numeric(20, 2), comment="in the catalog currency, > 0")
    currency: Mapped[str] = mapped_column(String(3))
    kind: Mapped[str] = mapped_column(String(16), comment="paid | promotional")
    effective_from: Mapped[dt.date] = mapped_column(comment="account-local date")
    expires: Mapped[dt.date | None] = mapped_column(comment="account-local date, exclusive; null = never")
    priority: Mapped[int] = mapped_column(Integer, comment="lower is applied first (after expiry and kind)")
    models: Mapped[str | None] = mapped_column(
        String(1000), comment="model ids separated by ';' whose usage it covers; null = every charge"
    )
    reason: Mapped[str] = mapped_column(String(1000))
    loaded_at: Mapped[dt.datetime]
    source: Mapped[str] = mapped_column(String(1000), comment="the file loaded, or 'credits grant'")


class CreditVoid(Base):
    """A grant ended (``credits void``): ineligible for every month whose last day is on or after
    ``void_date`` (UTC). Append-only; a grant has at most one."""

    __tablename__ = "credit_voids"

    grant_id: Mapped[str] = mapped_column(
        String(200), ForeignKey("credit_grants.grant_id", ondelete="RESTRICT"), primary_key=True
    )
    void_date: Mapped[dt.date] = mapped_column(comment="UTC date the void takes effect")
    reason: Mapped[str] = mapped_column(String(1000))
    voided_at: Mapped[dt.datetime]
