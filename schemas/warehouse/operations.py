"""Warehouse tables of operations: accounts and their plans, ingest runs, the lake binding, step locks, the
recompute queue and the data-quality results and acceptances.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    String,
)
from sqlalchemy.orm import Mapped, mapped_column

from schemas.warehouse.base import Base


class Account(Base):
    """One row per account and plan period (dates inclusive; active_until null = open)."""

    __tablename__ = "accounts"

    account_id: Mapped[str] = mapped_column(primary_key=True)
    active_from: Mapped[dt.date] = mapped_column(primary_key=True)
    active_until: Mapped[dt.date | None]
    plan: Mapped[str | None] = mapped_column(String(64), comment="null = pay as you go")
    timezone: Mapped[str] = mapped_column(String(64), comment="IANA zone name")
    name: Mapped[str | None] = mapped_column(String(200), comment="customer name on documents")
    email: Mapped[str | None] = mapped_column(String(254), comment="where documents are sent")
    billing_address: Mapped[str | None] = mapped_column(String(1000), comment="postal address, lines")


class IngestRun(Base):
    """One row per ingest run, landing date and dataset (usage events, task outcomes): what was read
    and where every row went."""

    __tablename__ = "ingest_runs"

    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    landing_date: Mapped[dt.date] = mapped_column(primary_key=True)
    dataset: Mapped[str] = mapped_column(
        String(16), primary_key=True, server_default="events", comment="events | outcomes"
    )
    started_at: Mapped[dt.datetime]
    finished_at: Mapped[dt.datetime]
    files: Mapped[int] = mapped_column(comment="files found in the landing folder")
    rows_read: Mapped[int]
    clean: Mapped[int] = mapped_column(comment="rows added to the lake")
    quarantined: Mapped[int]
    duplicates: Mapped[int] = mapped_column(comment="identical resends of an event already kept")
    quarantined_by_reason: Mapped[dict[str, Any]] = mapped_column(comment="reason code -> rows")
    late_rows: Mapped[dict[str, Any]] = mapped_column(
        comment="event date (ISO) -> clean rows, for dates before landing"
    )
    status: Mapped[str] = mapped_column(String(16))
    not_read: Mapped[dict[str, Any] | None] = mapped_column(
        comment="landing entries not read (name -> why), e.g. a producer's temporary .file"
    )


class LakeBinding(Base):
    """Which lake the warehouse is built from: one row per binding, the newest in force. The first
    step that finds the warehouse unbound binds it to its lake; ``usage-billing lake rebind`` records
    each deliberate move (who, when, why, from where). Every step that reads or writes the lake
    refuses a lake whose identity (``_lake.json``'s ``lake_id``) or location differs."""

    __tablename__ = "lake_bindings"

    bound_at: Mapped[dt.datetime] = mapped_column(primary_key=True)
    lake_id: Mapped[str] = mapped_column(String(36), comment="uuid in the lake's _lake.json")
    lake_path: Mapped[str] = mapped_column(String(2000), comment="the lake root, absolute for a local lake")
    bound_by: Mapped[str] = mapped_column(String(200), comment="user@host and the command")
    reason: Mapped[str] = mapped_column(String(1000))


class PipelineLock(Base):
    """One row per named step lock. A run holds its lock as a row lock (SELECT ... FOR UPDATE NOWAIT)
    on PostgreSQL: only roles with UPDATE on this table (the pipeline's own) can take or hold one,
    unlike advisory locks, which any role can take. SQLite uses file locks beside the database."""

    __tablename__ = "pipeline_locks"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)


class LockFence(Base):
    """Per step lock, how many times it was taken: the token a run's commit checks is still its own
    (``pipelines.warehouse.locks``), so a run that lost its lock to another never commits."""

    __tablename__ = "lock_fences"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    token: Mapped[int] = mapped_column(comment="raised by one each time the lock is taken")


class RecomputeQueue(Base):
    """Event dates whose lake partition an ingest run changed and whose downstream steps (aggregate,
    meter) have not both run since. Written in the ingest run's transaction. ``usage aggregate`` and
    ``quota meter`` (alone, in ``run-day`` or in the DAGs) each mark the rows they covered that were
    queued before they read the lake, and a row both have marked is removed
    (``pipelines.warehouse.recompute``), so a run killed between the steps leaves its dates here
    for the next one."""

    __tablename__ = "recompute_queue"

    day: Mapped[dt.date] = mapped_column(primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    queued_at: Mapped[dt.datetime]
    aggregated_at: Mapped[dt.datetime | None] = mapped_column(comment="when usage aggregate took it")
    metered_at: Mapped[dt.datetime | None] = mapped_column(comment="when quota meter took it")


class DqResult(Base):
    """The latest data-quality result of each check on each clean partition (UTC event date)."""

    __tablename__ = "dq_results"

    day: Mapped[dt.date] = mapped_column(primary_key=True)
    check_name: Mapped[str] = mapped_column(String(100), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64))
    level: Mapped[str] = mapped_column(String(8), comment="error (stops downstream) | warn (reports)")
    success: Mapped[bool]
    observed: Mapped[str | None] = mapped_column(String(400), comment="observed value or unexpected count")
    details: Mapped[dict[str, Any]] = mapped_column(comment="expectation kwargs and result summary")
    checked_at: Mapped[dt.datetime]


class DqAcceptance(Base):
    """An operator's acceptance of a failed gate for one date: downstream steps may run."""

    __tablename__ = "dq_acceptances"

    day: Mapped[dt.date] = mapped_column(primary_key=True)
    accepted_at: Mapped[dt.datetime] = mapped_column(primary_key=True)
    accepted_by: Mapped[str] = mapped_column(String(100))
    reason: Mapped[str] = mapped_column(String(1000))
    failed_checks: Mapped[dict[str, Any]] = mapped_column(
        comment="the failed error-level checks that were accepted"
    )
