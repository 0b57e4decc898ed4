"""the price metering applied: ``billable_usage.price_from``

Metering records with each billable row the ``effective_from`` of the price it applied (null where no
price was in force), and invoicing prices each row by that key instead of working the price in force
out again in SQL. Rows metered before this migration have no such key: every metered day is marked
out of date (``metered_dates.basis`` cleared), so ``run-day`` (or ``quota meter --stale``) meters them
again and a draft refuses their months until then.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01 16:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.sql import finance

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "billable_usage",
        sa.Column(
            "price_from",
            sa.Date(),
            nullable=True,
            comment="effective_from of the price metering applied (null: no price in force)",
        ),
    )
    op.execute("UPDATE metered_dates SET basis = NULL")


def downgrade() -> None:
    bind = op.get_bind()
    finance.drop(bind)  # the views read billable_usage, which SQLite rebuilds below
    kwargs = {"sqlite_with_rowid": False} if bind.dialect.name == "sqlite" else {}
    with op.batch_alter_table("billable_usage", table_kwargs=kwargs) as batch:
        batch.drop_column("price_from")
    finance.create(bind)
