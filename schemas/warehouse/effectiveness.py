"""Warehouse tables of effectiveness: per week, model, speed tier and task class, how the tasks whose
requests it served ended (one-pass, reworked, abandoned), how long they took end to end and what an
accepted task cost, rework included; and the queue of dates whose requests or outcomes changed.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from sqlalchemy import Float, Numeric, String
from sqlalchemy.orm import Mapped, mapped_column

from schemas.warehouse.base import Base


class TaskEffectiveness(Base):
    """One row per (week_start, model, speed_tier, task_class); task_class ``*`` is every class of the
    week, model and tier. A week's rows are replaced together, in one transaction."""

    __tablename__ = "task_effectiveness"

    week_start: Mapped[dt.date] = mapped_column(
        primary_key=True, comment="Monday of the ISO week (UTC) of completed_at"
    )
    model: Mapped[str] = mapped_column(String(100), primary_key=True, comment="the attributed model")
    speed_tier: Mapped[str] = mapped_column(String(32), primary_key=True)
    task_class: Mapped[str] = mapped_column(String(64), primary_key=True, comment="* = every class")
    tasks: Mapped[int]
    one_pass: Mapped[int] = mapped_column(comment="accepted without rework")
    reworked: Mapped[int] = mapped_column(comment="accepted after a person's rework")
    abandoned: Mapped[int]
    mixed: Mapped[int] = mapped_column(comment="tasks that used more than one (model, tier)")
    one_pass_rate: Mapped[float] = mapped_column(Float)
    rework_share: Mapped[float] = mapped_column(Float)
    abandon_share: Mapped[float] = mapped_column(Float)
    e2e_ms_mean: Mapped[int] = mapped_column(comment="completed_at - started_at, mean, half-up to whole ms")
    e2e_ms_p50: Mapped[Decimal] = mapped_column(Numeric(20, 3), comment="nearest rank, exact")
    e2e_ms_p90: Mapped[Decimal] = mapped_column(Numeric(20, 3), comment="nearest rank, exact")
    model_ms_mean: Mapped[int] = mapped_column(comment="sum of the requests' duration_ms, mean")
    rework_ms_total: Mapped[int]
    token_cost: Mapped[Decimal] = mapped_column(Numeric(20, 2), comment="rate card, no pools; currency")
    rework_cost: Mapped[Decimal] = mapped_column(
        Numeric(20, 2), comment="rework hours x rework_cost_per_hour"
    )
    cost_per_accepted_task: Mapped[Decimal | None] = mapped_column(
        Numeric(20, 2), comment="(token_cost + rework_cost) / accepted tasks; null when none was accepted"
    )
    computed_at: Mapped[dt.datetime]


class EffectivenessWeek(Base):
    """One row per computed ISO week (UTC): its outcomes, how many became tasks, how many had no
    request (orphans, never in a rate), and when it was computed. Written with its groups."""

    __tablename__ = "effectiveness_weeks"

    week_start: Mapped[dt.date] = mapped_column(primary_key=True)
    outcomes: Mapped[int] = mapped_column(comment="outcomes completed in the week")
    tasks: Mapped[int] = mapped_column(comment="outcomes with at least one request")
    orphan_outcomes: Mapped[int] = mapped_column(comment="outcomes with no request")
    computed_at: Mapped[dt.datetime]


class EffectivenessQueue(Base):
    """UTC dates whose requests (``dataset`` events) or outcomes (``outcomes``) an ingest run changed,
    written in its transaction, until the effectiveness step has recomputed the weeks they reach."""

    __tablename__ = "effectiveness_queue"

    day: Mapped[dt.date] = mapped_column(primary_key=True)
    dataset: Mapped[str] = mapped_column(String(16), primary_key=True, comment="events | outcomes")
    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    queued_at: Mapped[dt.datetime]
