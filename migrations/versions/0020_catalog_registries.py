"""the catalog is data: speed tiers up to 32 characters; views and usage columns from the registries

- ``speed_tier`` columns hold the catalog's tier ids (``[[tiers]]``: ``[a-z][a-z0-9_]{0,31}``), so they
  widen from 16 to 32 characters (usage_daily, usage_daily_errors, model_daily, model_weekly,
  billable_usage, invoice_lines, task_effectiveness).
- the usage tables get a column for every token field of the registry they lack
  (``migrations.sql.token_columns``; none with the registry's three kinds).
- the finance views are recreated from the line-type and token-kind registries (the same columns).

On SQLite a column's width is changed by rebuilding its table (Alembic's batch mode); the tables
stored in their key stay so, and the invoice lines keep their immutability triggers.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-03 22:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.sql import finance, immutability, token_columns

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

TIER_TABLES = (
    "usage_daily",
    "usage_daily_errors",
    "model_daily",
    "model_weekly",
    "billable_usage",
    "invoice_lines",
    "task_effectiveness",
)
CLUSTERED = ("billable_usage", "usage_daily", "usage_daily_errors")  # WITHOUT ROWID on SQLite (0010)


def _width(length_from: int, length_to: int) -> None:
    bind = op.get_bind()
    sqlite = bind.dialect.name == "sqlite"
    finance.drop(bind)
    if sqlite:
        immutability.drop(bind)  # a rebuilt table loses its triggers: made again below
    nullable = {"invoice_lines": True}
    for table in TIER_TABLES:
        kwargs = {"sqlite_with_rowid": False} if table in CLUSTERED else {}
        with op.batch_alter_table(table, table_kwargs=kwargs) as batch:
            batch.alter_column(
                "speed_tier",
                type_=sa.String(length=length_to),
                existing_type=sa.String(length=length_from),
                existing_nullable=nullable.get(table, False),
            )
    if sqlite:
        immutability.create(bind, documents=True)
    finance.create(bind, gaps=True, documents=True, unknown=True)


def upgrade() -> None:
    token_columns.add_missing(op.get_bind())
    _width(16, 32)


def downgrade() -> None:
    _width(32, 16)
