"""The notifications outbox (``pipelines.notify``): thresholds crossed, written by metering and
drafting in the transaction of their results, delivered later by ``usage-billing notify deliver``."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from schemas.warehouse.base import Base


class Notification(Base):
    """One notification: a threshold crossed (a fact, keyed by type, account, pool or grant, period and
    threshold) or the retraction of one that a re-metering or a redraft undid. The id is a stable hash
    of that key (and of how many times the key was crossed before), so a rerun writes nothing new.
    What was said is never changed or deleted (the database refuses it); only the delivery columns
    (status, attempts, next_attempt_at, last_error, delivered_at) move."""

    __tablename__ = "notifications"
    __table_args__ = (
        Index("ix_notifications_status_next_attempt_at", "status", "next_attempt_at"),
        Index("ix_notifications_type_period_start", "type", "period_start"),
    )

    notification_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    type: Mapped[str] = mapped_column(String(64), comment="the CloudEvents type")
    account_id: Mapped[str]
    plan: Mapped[str | None] = mapped_column(String(64))
    pool: Mapped[str | None] = mapped_column(String(64))
    grant_id: Mapped[str | None] = mapped_column(String(200))
    period_start: Mapped[dt.date | None] = mapped_column(
        comment="pool: the period's first local day; expiring credit: the expiry date"
    )
    threshold: Mapped[str | None] = mapped_column(String(16), comment="the share crossed, e.g. 0.8")
    local_day: Mapped[dt.date] = mapped_column(
        comment="pool: the crossing event's local day; credit: the first day of the month drafted"
    )
    event_id: Mapped[str | None] = mapped_column(comment="pool: the event that crossed the threshold")
    occurred_at: Mapped[dt.datetime | None] = mapped_column(comment="pool: that event's time")
    retracts: Mapped[str | None] = mapped_column(String(64), comment="retracted: the notification it undoes")
    data: Mapped[str] = mapped_column(Text, comment="the figures (JSON) beside the key columns")
    created_at: Mapped[dt.datetime]
    source: Mapped[str] = mapped_column(String(200), comment="the run that wrote it")
    status: Mapped[str] = mapped_column(String(8), comment="pending | sent | dead")
    attempts: Mapped[int] = mapped_column(Integer)
    next_attempt_at: Mapped[dt.datetime | None] = mapped_column(
        comment="pending: not before then; null = now"
    )
    last_error: Mapped[str | None] = mapped_column(String(1000))
    delivered_at: Mapped[dt.datetime | None]
