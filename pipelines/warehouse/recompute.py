"""The recompute queue's bookkeeping: which changed partitions still wait for aggregation or metering.

An ingest queues each UTC date whose partition it changed (``recompute_queue``). Aggregating a date
and metering the local days around it each mark the rows queued before that step read the lake; a
row both steps marked is done and removed. Whoever runs the steps (``run-day``, the DAGs, the
separate commands, the demo) leaves the same queue behind. A date the data-quality gate holds back
(``warehouse.gate``) was not read, so it is never marked: it waits in the queue until accepted.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Connection, Engine, delete, select, update

from pipelines.warehouse.gate import held_back
from schemas.warehouse import RecomputeQueue


def _done(conn: Connection) -> None:
    q = RecomputeQueue.__table__.c
    conn.execute(
        delete(RecomputeQueue.__table__).where(q.aggregated_at.is_not(None), q.metered_at.is_not(None))
    )


def mark_aggregated(conn: Connection, first: dt.date, last: dt.date, started: dt.datetime) -> None:
    """UTC dates ``first .. last`` were aggregated from what the lake held at ``started``."""
    q = RecomputeQueue.__table__.c
    conn.execute(
        update(RecomputeQueue.__table__)
        .where(q.day.between(first, last), q.queued_at <= started, q.aggregated_at.is_(None))
        .where(q.day.not_in(sorted(held_back(conn))))
        .values(aggregated_at=dt.datetime.now(dt.UTC))
    )
    _done(conn)


def mark_metered(conn: Connection, first: dt.date, last: dt.date, started: dt.datetime) -> None:
    """Local days ``first .. last`` were metered from what the lake held at ``started``: a UTC date's
    events fall on the local days from the day before to the day after it, so the UTC dates whose
    three local days all lie in the range are covered (the run itself also metered again every later
    day their balances reach)."""
    q = RecomputeQueue.__table__.c
    lo, hi = first + dt.timedelta(days=1), last - dt.timedelta(days=1)
    if lo > hi:
        return
    conn.execute(
        update(RecomputeQueue.__table__)
        .where(q.day.between(lo, hi), q.queued_at <= started, q.metered_at.is_(None))
        .where(q.day.not_in(sorted(held_back(conn))))
        .values(metered_at=dt.datetime.now(dt.UTC))
    )
    _done(conn)


def pending(engine: Engine) -> tuple[list[dt.date], list[dt.date]]:
    """(UTC dates still to aggregate, UTC dates still to meter), sorted."""
    q = RecomputeQueue.__table__.c
    with engine.connect() as conn:
        rows = conn.execute(select(q.day, q.aggregated_at, q.metered_at)).all()
    return (
        sorted({r.day for r in rows if r.aggregated_at is None}),
        sorted({r.day for r in rows if r.metered_at is None}),
    )
