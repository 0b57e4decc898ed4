"""``recompute_queue.aggregated_at`` and ``metered_at``: each step records what it took

A changed partition waits in the queue for aggregation and for metering. Until now only ``run-day``
removed queue rows, so the separate commands (``usage aggregate``, ``quota meter``) left them behind
and the next ``run-day`` did their work again. Now each of those steps marks the rows it covered,
and a row both have covered is removed. Rows already queued keep both null: the next run takes them.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01 18:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("recompute_queue") as batch:
        batch.add_column(
            sa.Column(
                "aggregated_at",
                sa.TIMESTAMP(timezone=True),
                nullable=True,
                comment="when usage aggregate took it",
            )
        )
        batch.add_column(
            sa.Column(
                "metered_at", sa.TIMESTAMP(timezone=True), nullable=True, comment="when quota meter took it"
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("recompute_queue") as batch:
        batch.drop_column("metered_at")
        batch.drop_column("aggregated_at")
