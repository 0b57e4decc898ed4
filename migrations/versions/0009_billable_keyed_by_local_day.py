"""billable usage keyed by local day first

Every read and every replace of billable_usage selects a range of local days (a metered date, an
invoice month), so the primary key leads with local_day and the separate local_day index goes: one
index less to maintain on each load, and rows inserted in key order append at the index's end.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30 07:40:00
"""

from __future__ import annotations

from alembic import op

from migrations.sql import finance

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

OLD_KEY = ["account_id", "model", "speed_tier", "local_day", "token_kind", "rate_day"]
NEW_KEY = ["local_day", "account_id", "model", "speed_tier", "token_kind", "rate_day"]


def upgrade() -> None:
    finance.drop(op.get_bind())  # the views read billable_usage, which SQLite rebuilds below
    with op.batch_alter_table("billable_usage", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_billable_usage_local_day"))
        batch_op.drop_constraint("pk_billable_usage", type_="primary")
        batch_op.create_primary_key("pk_billable_usage", NEW_KEY)
    finance.create(op.get_bind())


def downgrade() -> None:
    finance.drop(op.get_bind())
    with op.batch_alter_table("billable_usage", schema=None) as batch_op:
        batch_op.drop_constraint("pk_billable_usage", type_="primary")
        batch_op.create_primary_key("pk_billable_usage", OLD_KEY)
        batch_op.create_index(batch_op.f("ix_billable_usage_local_day"), ["local_day"], unique=False)
    finance.create(op.get_bind())
