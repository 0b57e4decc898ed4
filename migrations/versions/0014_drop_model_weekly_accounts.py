"""drop ``model_weekly_accounts``

Aggregation wrote distinct accounts per model, tier and ISO week into it, and no part of the
pipeline read it: the adoption metrics (``model_weekly.active_accounts``) count the same accounts
from ``usage_daily`` under their own rule (complete weeks, accounts with a request). One count, one
place. A downgrade creates the table empty; the code of that revision fills it again per aggregated
week.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01 17:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_table("model_weekly_accounts")


def downgrade() -> None:
    op.create_table(
        "model_weekly_accounts",
        sa.Column("week_start", sa.Date(), nullable=False, comment="Monday of the ISO week (UTC days)"),
        sa.Column("model", sa.String(length=100), nullable=False),
        sa.Column("speed_tier", sa.String(length=16), nullable=False),
        sa.Column("active_accounts", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("week_start", "model", "speed_tier", name=op.f("pk_model_weekly_accounts")),
    )
