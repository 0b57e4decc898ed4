"""effectiveness: ``task_effectiveness``, ``effectiveness_queue`` and ``ingest_runs.dataset``

Task outcomes are ingested beside the usage events (``lake/outcomes/``), so an ingest run's counts
are kept per dataset: ``ingest_runs`` gains ``dataset`` (``events`` for every earlier row) in its
key. ``task_effectiveness`` holds one row per week, model, speed tier and task class;
``effectiveness_weeks`` each computed week's outcome counts and
``effectiveness_queue`` the dates whose requests or outcomes changed since it was computed.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-01 20:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("ingest_runs", recreate="always") as batch:
        batch.add_column(
            sa.Column(
                "dataset",
                sa.String(length=16),
                server_default="events",
                nullable=False,
                comment="events | outcomes",
            )
        )
        batch.drop_constraint("pk_ingest_runs", type_="primary")
        batch.create_primary_key("pk_ingest_runs", ["run_id", "landing_date", "dataset"])
    op.create_table(
        "task_effectiveness",
        sa.Column(
            "week_start", sa.Date(), nullable=False, comment="Monday of the ISO week (UTC) of completed_at"
        ),
        sa.Column("model", sa.String(length=100), nullable=False, comment="the attributed model"),
        sa.Column("speed_tier", sa.String(length=16), nullable=False),
        sa.Column("task_class", sa.String(length=64), nullable=False, comment="* = every class"),
        sa.Column("tasks", sa.BigInteger(), nullable=False),
        sa.Column("one_pass", sa.BigInteger(), nullable=False, comment="accepted without rework"),
        sa.Column("reworked", sa.BigInteger(), nullable=False, comment="accepted after a person's rework"),
        sa.Column("abandoned", sa.BigInteger(), nullable=False),
        sa.Column(
            "mixed", sa.BigInteger(), nullable=False, comment="tasks that used more than one (model, tier)"
        ),
        sa.Column("one_pass_rate", sa.Float(), nullable=False),
        sa.Column("rework_share", sa.Float(), nullable=False),
        sa.Column("abandon_share", sa.Float(), nullable=False),
        sa.Column(
            "e2e_ms_mean",
            sa.BigInteger(),
            nullable=False,
            comment="completed_at - started_at, mean, half-up to whole ms",
        ),
        sa.Column(
            "e2e_ms_p50", sa.Numeric(precision=20, scale=3), nullable=False, comment="nearest rank, exact"
        ),
        sa.Column(
            "e2e_ms_p90", sa.Numeric(precision=20, scale=3), nullable=False, comment="nearest rank, exact"
        ),
        sa.Column(
            "model_ms_mean", sa.BigInteger(), nullable=False, comment="sum of the requests' duration_ms, mean"
        ),
        sa.Column("rework_ms_total", sa.BigInteger(), nullable=False),
        sa.Column(
            "token_cost",
            sa.Numeric(precision=20, scale=2),
            nullable=False,
            comment="rate card, no pools; currency",
        ),
        sa.Column(
            "rework_cost",
            sa.Numeric(precision=20, scale=2),
            nullable=False,
            comment="rework hours x rework_cost_per_hour",
        ),
        sa.Column(
            "cost_per_accepted_task",
            sa.Numeric(precision=20, scale=2),
            nullable=True,
            comment="(token_cost + rework_cost) / accepted tasks; null when none was accepted",
        ),
        sa.Column("computed_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "week_start", "model", "speed_tier", "task_class", name=op.f("pk_task_effectiveness")
        ),
    )
    op.create_table(
        "effectiveness_weeks",
        sa.Column("week_start", sa.Date(), nullable=False),
        sa.Column("outcomes", sa.BigInteger(), nullable=False, comment="outcomes completed in the week"),
        sa.Column("tasks", sa.BigInteger(), nullable=False, comment="outcomes with at least one request"),
        sa.Column("orphan_outcomes", sa.BigInteger(), nullable=False, comment="outcomes with no request"),
        sa.Column("computed_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("week_start", name=op.f("pk_effectiveness_weeks")),
    )
    op.create_table(
        "effectiveness_queue",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("dataset", sa.String(length=16), nullable=False, comment="events | outcomes"),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("queued_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("day", "dataset", "run_id", name=op.f("pk_effectiveness_queue")),
    )


def downgrade() -> None:
    op.drop_table("effectiveness_queue")
    op.drop_table("effectiveness_weeks")
    op.drop_table("task_effectiveness")
    op.execute("DELETE FROM ingest_runs WHERE dataset <> 'events'")
    with op.batch_alter_table("ingest_runs", recreate="always") as batch:
        batch.drop_constraint("pk_ingest_runs", type_="primary")
        batch.create_primary_key("pk_ingest_runs", ["run_id", "landing_date"])
        batch.drop_column("dataset")
