"""notifications outbox: thresholds crossed, written with the metering and the drafts

- ``notifications``: one row per notification (a pool or credit threshold crossed, a credit about to
  expire, or the retraction of one), its stable id, its CloudEvent data and its delivery state. The
  database refuses to change what a notification says or to delete one: only the delivery columns
  (status, attempts, next_attempt_at, last_error, delivered_at) change.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05 08:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

SAID = (
    "notification_id, type, account_id, plan, pool, grant_id, period_start, threshold, local_day, "
    "event_id, occurred_at, retracts, data, created_at, source"
)
MESSAGE = "a notification never changes: a retracted notification follows one that no longer holds"


def _append_only(bind) -> None:
    if bind.dialect.name == "postgresql":
        old = ", ".join(f"OLD.{c.strip()}" for c in SAID.split(","))
        new = ", ".join(f"NEW.{c.strip()}" for c in SAID.split(","))
        bind.exec_driver_sql(
            "CREATE OR REPLACE FUNCTION notifications_said() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF TG_OP = 'DELETE' OR ROW({old}) IS DISTINCT FROM ROW({new}) THEN "
            f"RAISE EXCEPTION '{MESSAGE}' USING ERRCODE = 'integrity_constraint_violation'; END IF; "
            "RETURN NEW; END $$"
        )
        bind.exec_driver_sql(
            "CREATE TRIGGER notifications_said BEFORE UPDATE OR DELETE ON notifications "
            "FOR EACH ROW EXECUTE FUNCTION notifications_said()"
        )
        return
    bind.exec_driver_sql(
        f"CREATE TRIGGER notifications_no_update BEFORE UPDATE OF {SAID} ON notifications "
        f"BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"
    )
    bind.exec_driver_sql(
        "CREATE TRIGGER notifications_no_delete BEFORE DELETE ON notifications "
        f"BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"
    )


def upgrade() -> None:
    op.create_table(
        "notifications",
        sa.Column("notification_id", sa.String(length=64), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False, comment="the CloudEvents type"),
        sa.Column("account_id", sa.String(length=200), nullable=False),
        sa.Column("plan", sa.String(length=64), nullable=True),
        sa.Column("pool", sa.String(length=64), nullable=True),
        sa.Column("grant_id", sa.String(length=200), nullable=True),
        sa.Column(
            "period_start",
            sa.Date(),
            nullable=True,
            comment="pool: the period's first local day; expiring credit: the expiry date",
        ),
        sa.Column("threshold", sa.String(length=16), nullable=True, comment="the share crossed, e.g. 0.8"),
        sa.Column(
            "local_day",
            sa.Date(),
            nullable=False,
            comment="pool: the crossing event's local day; credit: the first day of the month drafted",
        ),
        sa.Column(
            "event_id",
            sa.String(length=200),
            nullable=True,
            comment="pool: the event that crossed the threshold",
        ),
        sa.Column(
            "occurred_at", sa.TIMESTAMP(timezone=True), nullable=True, comment="pool: that event's time"
        ),
        sa.Column(
            "retracts", sa.String(length=64), nullable=True, comment="retracted: the notification it undoes"
        ),
        sa.Column("data", sa.Text(), nullable=False, comment="the figures (JSON) beside the key columns"),
        sa.Column("created_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("source", sa.String(length=200), nullable=False, comment="the run that wrote it"),
        sa.Column("status", sa.String(length=8), nullable=False, comment="pending | sent | dead"),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column(
            "next_attempt_at",
            sa.TIMESTAMP(timezone=True),
            nullable=True,
            comment="pending: not before then; null = now",
        ),
        sa.Column("last_error", sa.String(length=1000), nullable=True),
        sa.Column("delivered_at", sa.TIMESTAMP(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("notification_id", name=op.f("pk_notifications")),
    )
    op.create_index("ix_notifications_status_next_attempt_at", "notifications", ["status", "next_attempt_at"])
    op.create_index("ix_notifications_type_period_start", "notifications", ["type", "period_start"])
    _append_only(op.get_bind())


def downgrade() -> None:
    bind = op.get_bind()
    op.drop_index("ix_notifications_type_period_start", table_name="notifications")
    op.drop_index("ix_notifications_status_next_attempt_at", table_name="notifications")
    op.drop_table("notifications")
    if bind.dialect.name == "postgresql":
        bind.exec_driver_sql("DROP FUNCTION IF EXISTS notifications_said()")
