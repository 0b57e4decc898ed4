"""exact metering: what a metered day was computed from, and days to meter again

- ``metered_dates.basis``: digest of the catalog's plans a day was metered with; a day metered under
  other plans is out of date (``run-day`` meters it again, a draft refuses the month until then).
- ``meter_queue``: local dates an ``accounts load`` made out of date (a plan or timezone changed for
  an account with usage on them), until a metering run started after it.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 13:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "metered_dates",
        sa.Column(
            "basis",
            sa.String(length=64),
            nullable=True,
            comment="digest of the catalog's plans it was metered with (null: before migration 0012)",
        ),
    )
    op.create_table(
        "meter_queue",
        sa.Column("local_day", sa.Date(), nullable=False),
        sa.Column("queued_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("reason", sa.String(length=400), nullable=False),
        sa.PrimaryKeyConstraint("local_day", name=op.f("pk_meter_queue")),
    )


def downgrade() -> None:
    op.drop_table("meter_queue")
    with op.batch_alter_table("metered_dates") as batch:
        batch.drop_column("basis")
