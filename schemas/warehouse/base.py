"""Warehouse tables. Alembic owns their creation (``migrations/``); these models are the contract.

Token counts are 64-bit integers, money is ``Numeric`` (``Decimal``), timestamps carry a zone.
Each table states its grain in its docstring; the primary key is that grain, so a reload of the
same grain replaces rows instead of adding twins.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from sqlalchemy import (
    JSON,
    BigInteger,
    Date,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    Numeric,
    PrimaryKeyConstraint,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.expression import false
from sqlalchemy.types import TIMESTAMP

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


# On SQLite, a big table with a natural composite key is stored in that key (migration 0010): no
# second copy of every row in a separate primary key index.
CLUSTERED = {"sqlite_with_rowid": False}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012
        int: BigInteger,
        str: String(200),
        Decimal: Numeric(20, 6),
        dt.datetime: TIMESTAMP(timezone=True),
        dt.date: Date,
        dict: JSON,
    }


class Account(Base):
    """One row per account and plan period (dates inclusive; active_until null = open)."""

    __tablename__ = "accounts"

    account_id: Mapped[str] = mapped_column(primary_key=True)
    active_from: Mapped[dt.date] = mapped_column(primary_key=True)
    active_until: Mapped[dt.date | None]
    plan: Mapped[str | None] = mapped_column(String(64), comment="null = pay as you go")
    timezone: Mapped[str] = mapped_column(String(64), comment="IANA zone name")


class IngestRun(Base):
    """One row per ingest run and landing date: what was read and where every row went."""

    __tablename__ = "ingest_runs"

    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    landing_date: Mapped[dt.date] = mapped_column(primary_key=True)
    started_at: Mapped[dt.datetime]
    finished_at: Mapped[dt.datetime]
    files: Mapped[int] = mapped_column(comment="files found in the landing folder")
    rows_read: Mapped[int]
    clean: Mapped[int] = mapped_column(comment="rows added to the lake")
    quarantined: Mapped[int]
    duplicates: Mapped[int] = mapped_column(comment="identical resends of an event already kept")
    quarantined_by_reason: Mapped[dict] = mapped_column(comment="reason code -> rows")
    late_rows: Mapped[dict] = mapped_column(
        comment="event date (ISO) -> clean rows, for dates before landing"
    )
    status: Mapped[str] = mapped_column(String(16))


class LakeBinding(Base):
    """Which lake the warehouse is built from: one row per binding, the newest in force. The first
    step that finds the warehouse unbound binds it to its lake; ``usage-billing lake rebind`` records
    each deliberate move (who, when, why, from where). Every step that reads or writes the lake
    refuses a lake whose identity (``_lake.json``'s ``lake_id``) or location differs."""

    __tablename__ = "lake_bindings"

    bound_at: Mapped[dt.datetime] = mapped_column(primary_key=True)
    lake_id: Mapped[str] = mapped_column(String(36), comment="uuid in the lake's _lake.json")
    lake_path: Mapped[str] = mapped_column(String(2000), comment="the lake root, absolute for a local lake")
    bound_by: Mapped[str] = mapped_column(String(200), comment="user@host and the command")
    reason: Mapped[str] = mapped_column(String(1000))


class PipelineLock(Base):
    """One row per named step lock. A run holds its lock as a row lock (SELECT ... FOR UPDATE NOWAIT)
    on PostgreSQL: only roles with UPDATE on this table (the pipeline's own) can take or hold one,
    unlike advisory locks, which any role can take. SQLite uses file locks beside the database."""

    __tablename__ = "pipeline_locks"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)


class RecomputeQueue(Base):
    """Event dates whose lake partition an ingest run changed and whose downstream steps (aggregate,
    meter) have not yet run since. Written in the ingest run's transaction; ``run-day`` and the daily
    DAG process every queued date and remove exactly the (day, run) rows they processed, so a run
    killed between ingest and aggregate leaves its dates here for the next one."""

    __tablename__ = "recompute_queue"

    day: Mapped[dt.date] = mapped_column(primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    queued_at: Mapped[dt.datetime]


class UsageDaily(Base):
    """Usage per account, model, speed tier and UTC day."""

    __tablename__ = "usage_daily"
    __table_args__ = CLUSTERED

    day: Mapped[dt.date] = mapped_column(primary_key=True, comment="UTC event date")
    account_id: Mapped[str] = mapped_column(primary_key=True)
    model: Mapped[str] = mapped_column(String(100), primary_key=True)
    speed_tier: Mapped[str] = mapped_column(String(16), primary_key=True)
    requests: Mapped[int]
    errors: Mapped[int] = mapped_column(comment="requests with status error")
    input_tokens: Mapped[int] = mapped_column(comment="all input tokens, cached included")
    cached_input_tokens: Mapped[int]
    output_tokens: Mapped[int]
    output_ms: Mapped[int] = mapped_column(comment="summed duration_ms of requests that reported one")
    timed_output_tokens: Mapped[int] = mapped_column(
        comment="output tokens of requests with a duration: "
        "tokens/s = timed_output_tokens / (output_ms / 1000)"
    )


class UsageDailyError(Base):
    """Failed requests per account, model, speed tier, UTC day and error code."""

    __tablename__ = "usage_daily_errors"
    __table_args__ = CLUSTERED

    day: Mapped[dt.date] = mapped_column(primary_key=True)
    account_id: Mapped[str] = mapped_column(primary_key=True)
    model: Mapped[str] = mapped_column(String(100), primary_key=True)
    speed_tier: Mapped[str] = mapped_column(String(16), primary_key=True)
    error_code: Mapped[str] = mapped_column(primary_key=True, comment="'unknown' when the event gave none")
    errors: Mapped[int]


class ModelDaily(Base):
    """Per model, speed tier and UTC day: adoption, volume and speed (how tiers compare)."""

    __tablename__ = "model_daily"

    day: Mapped[dt.date] = mapped_column(primary_key=True)
    model: Mapped[str] = mapped_column(String(100), primary_key=True)
    speed_tier: Mapped[str] = mapped_column(String(16), primary_key=True)
    active_accounts: Mapped[int]
    requests: Mapped[int]
    errors: Mapped[int]
    input_tokens: Mapped[int]
    cached_input_tokens: Mapped[int]
    output_tokens: Mapped[int]
    median_output_tps: Mapped[float | None] = mapped_column(
        Float, comment="output tokens/s, from a log histogram (bins 1.6% wide)"
    )
    p95_output_tps: Mapped[float | None] = mapped_column(Float)


class DqResult(Base):
    """The latest data-quality result of each check on each clean partition (UTC event date)."""

    __tablename__ = "dq_results"

    day: Mapped[dt.date] = mapped_column(primary_key=True)
    check_name: Mapped[str] = mapped_column(String(100), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64))
    level: Mapped[str] = mapped_column(String(8), comment="error (stops downstream) | warn (reports)")
    success: Mapped[bool]
    observed: Mapped[str | None] = mapped_column(String(400), comment="observed value or unexpected count")
    details: Mapped[dict] = mapped_column(comment="expectation kwargs and result summary")
    checked_at: Mapped[dt.datetime]


class DqAcceptance(Base):
    """An operator's acceptance of a failed gate for one date: downstream steps may run."""

    __tablename__ = "dq_acceptances"

    day: Mapped[dt.date] = mapped_column(primary_key=True)
    accepted_at: Mapped[dt.datetime] = mapped_column(primary_key=True)
    accepted_by: Mapped[str] = mapped_column(String(100))
    reason: Mapped[str] = mapped_column(String(1000))
    failed_checks: Mapped[dict] = mapped_column(comment="the failed error-level checks that were accepted")


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
    speed_tier: Mapped[str] = mapped_column(String(16))
    local_day: Mapped[dt.date] = mapped_column(comment="account-local date")
    token_kind: Mapped[str] = mapped_column(String(16), comment="input | cached_input | output")
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
        String(200), comment="plans in force in the month, comma separated"
    )
    currency: Mapped[str] = mapped_column(String(3))
    subtotal: Mapped[Decimal] = mapped_column(Numeric(20, 2), comment="sum of the usage and fee lines")
    total: Mapped[Decimal] = mapped_column(Numeric(20, 2), comment="sum of all lines")
    created_at: Mapped[dt.datetime]
    finalized_at: Mapped[dt.datetime | None]
    voided_at: Mapped[dt.datetime | None]
    void_reason: Mapped[str | None] = mapped_column(String(1000))
    open_month: Mapped[bool] = mapped_column(
        server_default=false(),
        comment="a draft of a month not closed yet (asked for with --open-month): never numbered",
    )


class InvoiceLine(Base):
    """One line of a billing document. Amount = quantity x unit price / 1M, half-up to cents."""

    __tablename__ = "invoice_lines"

    invoice_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("invoices.invoice_id", ondelete="RESTRICT"), primary_key=True
    )
    line_no: Mapped[int] = mapped_column(Integer, primary_key=True)
    line_type: Mapped[str] = mapped_column(
        String(16), comment="plan_fee | included_usage | overage_usage | adjustment"
    )
    adjusted_type: Mapped[str | None] = mapped_column(
        String(16), comment="adjustment lines: the line type whose difference they carry"
    )
    model: Mapped[str | None] = mapped_column(String(100))
    speed_tier: Mapped[str | None] = mapped_column(String(16))
    token_kind: Mapped[str | None] = mapped_column(String(16))
    description: Mapped[str] = mapped_column(String(400))
    quantity: Mapped[int] = mapped_column(comment="tokens; active days for plan_fee")
    unit_price: Mapped[Decimal] = mapped_column(
        Numeric(20, 6), comment="per 1M tokens; the monthly fee for plan_fee"
    )
    amount: Mapped[Decimal] = mapped_column(Numeric(20, 2))


class InvoiceCounter(Base):
    """The last invoice number given out per period: locked by the finalizer (gapless numbering)."""

    __tablename__ = "invoice_counters"

    period: Mapped[str] = mapped_column(String(7), primary_key=True)
    last_number: Mapped[int]


class ModelWeekly(Base):
    """Adoption per model and speed tier ('*' = all tiers) for complete ISO weeks (UTC days)."""

    __tablename__ = "model_weekly"

    week_start: Mapped[dt.date] = mapped_column(primary_key=True, comment="Monday of the ISO week")
    model: Mapped[str] = mapped_column(String(100), primary_key=True)
    speed_tier: Mapped[str] = mapped_column(String(16), primary_key=True, comment="'*' = all tiers")
    active_accounts: Mapped[int] = mapped_column(comment="exact distinct accounts with a request")
    requests: Mapped[int]
    tokens: Mapped[int] = mapped_column(comment="input + output tokens")
    token_share: Mapped[float] = mapped_column(Float, comment="share of all platform tokens that week")
    heavy_accounts: Mapped[int] = mapped_column(
        comment="active on >= heavy_min_days days, >= heavy_min_requests"
    )
    new_accounts: Mapped[int] = mapped_column(comment="first week ever on the model")
    returning_accounts: Mapped[int] = mapped_column(comment="active this week and the week before")
    resurrected_accounts: Mapped[int] = mapped_column(comment="active again after at least one idle week")
    dormant_accounts: Mapped[int] = mapped_column(comment="active the week before, not this week")
    quick_ratio: Mapped[float | None] = mapped_column(Float, comment="(new + resurrected) / dormant")
    dq_failed: Mapped[bool] = mapped_column(comment="a day of the week failed the data-quality gate")


class ModelMigration(Base):
    """Accounts that went dormant on a model in a week, and where their tokens went that week."""

    __tablename__ = "model_migrations"

    week_start: Mapped[dt.date] = mapped_column(primary_key=True, comment="the week they went dormant")
    from_model: Mapped[str] = mapped_column(String(100), primary_key=True)
    to_model: Mapped[str] = mapped_column(String(100), primary_key=True, comment="'(none)' = no usage")
    accounts: Mapped[int]
    tokens: Mapped[int] = mapped_column(comment="their tokens on to_model that week")


class RetirementCandidate(Base):
    """One detector result per weekly run and model; flagged = detected this run and the previous one."""

    __tablename__ = "retirement_candidates"

    as_of: Mapped[dt.date] = mapped_column(primary_key=True, comment="the run's date")
    model: Mapped[str] = mapped_column(String(100), primary_key=True)
    method_version: Mapped[str] = mapped_column(String(64))
    last_week: Mapped[dt.date] = mapped_column(comment="the last complete week used")
    weeks_used: Mapped[int]
    detected: Mapped[bool]
    flagged: Mapped[bool] = mapped_column(comment="detected this week and the week before: a candidate")
    accounts_weekly_change: Mapped[float | None] = mapped_column(Float)
    accounts_change_low: Mapped[float | None] = mapped_column(Float, comment="90% interval")
    accounts_change_high: Mapped[float | None] = mapped_column(Float)
    accounts_q: Mapped[float | None] = mapped_column(Float, comment="Benjamini-Hochberg adjusted p")
    share_weekly_change: Mapped[float | None] = mapped_column(Float)
    share_q: Mapped[float | None] = mapped_column(Float)
    successor: Mapped[str | None] = mapped_column(String(100))
    reason: Mapped[str] = mapped_column(String(1000))
    details: Mapped[dict] = mapped_column(comment="the report's numbers for this model")
