"""Warehouse tables of usage and adoption: daily usage per account, errors, model speed, the weekly adoption
metrics, migrations between models and retirement candidates.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    BigInteger,
    Float,
    String,
)
from sqlalchemy.orm import Mapped, MappedColumn, mapped_column

from schemas import tokens
from schemas.warehouse.base import CLUSTERED, Base


def token_columns() -> dict[str, MappedColumn[int]]:
    """A BIGINT column per event token field of the registry (``schemas.tokens``): a kind added there
    gets its columns from the migration that comes with it (``migrations/sql/token_columns.py``)."""
    return {
        k.field: mapped_column(BigInteger, nullable=False, comment=tokens.field_rule(k)) for k in tokens.KINDS
    }


class UsageDaily(Base):
    """Usage per account, model, speed tier and UTC day."""

    __tablename__ = "usage_daily"
    __table_args__ = CLUSTERED

    day: Mapped[dt.date] = mapped_column(primary_key=True, comment="UTC event date")
    account_id: Mapped[str] = mapped_column(primary_key=True)
    model: Mapped[str] = mapped_column(String(100), primary_key=True)
    speed_tier: Mapped[str] = mapped_column(String(32), primary_key=True)
    requests: Mapped[int]
    errors: Mapped[int] = mapped_column(comment="requests with status error")
    # one column per event token field (schemas.tokens), e.g. input_tokens, cached_input_tokens
    locals().update(token_columns())
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
    speed_tier: Mapped[str] = mapped_column(String(32), primary_key=True)
    error_code: Mapped[str] = mapped_column(primary_key=True, comment="'unknown' when the event gave none")
    errors: Mapped[int]


class ModelDaily(Base):
    """Per model, speed tier and UTC day: adoption, volume and speed (how tiers compare)."""

    __tablename__ = "model_daily"

    day: Mapped[dt.date] = mapped_column(primary_key=True)
    model: Mapped[str] = mapped_column(String(100), primary_key=True)
    speed_tier: Mapped[str] = mapped_column(String(32), primary_key=True)
    active_accounts: Mapped[int]
    requests: Mapped[int]
    errors: Mapped[int]
    locals().update(token_columns())
    median_output_tps: Mapped[float | None] = mapped_column(
        Float, comment="output tokens/s, from a log histogram (bins 1.6% wide)"
    )
    p95_output_tps: Mapped[float | None] = mapped_column(Float)


class ModelWeekly(Base):
    """Adoption per model and speed tier ('*' = all tiers) for complete ISO weeks (UTC days)."""

    __tablename__ = "model_weekly"

    week_start: Mapped[dt.date] = mapped_column(primary_key=True, comment="Monday of the ISO week")
    model: Mapped[str] = mapped_column(String(100), primary_key=True)
    speed_tier: Mapped[str] = mapped_column(String(32), primary_key=True, comment="'*' = all tiers")
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
    details: Mapped[dict[str, Any]] = mapped_column(comment="the report's numbers for this model")
