"""safe edges: the lake a warehouse is bound to, open-month drafts, step locks as rows

- ``lake_bindings``: which lake (by the id in its ``_lake.json``, and where) the warehouse was built
  from; every step refuses another one.
- ``metered_dates``: which local dates metering covered, and when: a month is invoiced only when closed.
- ``invoices.open_month``: a draft of a month that was not closed yet, asked for explicitly.
- ``pipeline_locks``: the step locks on PostgreSQL are row locks on this table, so that only the
  pipeline's role (not ``finance_reader``) can take, hold or block them.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 10:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.sql import finance

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lake_bindings",
        sa.Column("bound_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("lake_id", sa.String(length=36), nullable=False, comment="uuid in the lake's _lake.json"),
        sa.Column(
            "lake_path",
            sa.String(length=2000),
            nullable=False,
            comment="the lake root, absolute for a local lake",
        ),
        sa.Column("bound_by", sa.String(length=200), nullable=False, comment="user@host and the command"),
        sa.Column("reason", sa.String(length=1000), nullable=False),
        sa.PrimaryKeyConstraint("bound_at", name=op.f("pk_lake_bindings")),
    )
    op.create_table(
        "metered_dates",
        sa.Column("local_day", sa.Date(), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column(
            "metered_at",
            sa.TIMESTAMP(timezone=True),
            nullable=False,
            comment="when the run started reading the lake",
        ),
        sa.PrimaryKeyConstraint("local_day", name=op.f("pk_metered_dates")),
    )
    op.create_table(
        "pipeline_locks",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_pipeline_locks")),
    )
    # A plain ADD COLUMN on both databases: a batch rebuild would drop the documents' triggers on SQLite.
    finance.drop(op.get_bind())  # finance_invoice_summary shows the mark: the views are made again
    op.add_column(
        "invoices",
        sa.Column(
            "open_month",
            sa.Boolean(),
            server_default=sa.false(),
            nullable=False,
            comment="a draft of a month not closed yet (asked for with --open-month): never numbered",
        ),
    )
    finance.create(op.get_bind())


def downgrade() -> None:
    finance.drop(op.get_bind())
    op.drop_column("invoices", "open_month")
    finance.create(op.get_bind())
    op.drop_table("pipeline_locks")
    op.drop_table("metered_dates")
    op.drop_table("lake_bindings")
