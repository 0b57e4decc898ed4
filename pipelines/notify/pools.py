"""Pool thresholds crossed by a metering run (``billing.crossings`` computes them with the allocation):
recorded in the outbox in the run's load transaction (``pipelines.quota.store.load_warehouse``)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
from sqlalchemy import Connection

from pipelines.notify.outbox import POOL_CROSSED, Crossing, record
from schemas.warehouse import Notification

LONGEST_PERIOD = dt.timedelta(days=31)  # a crossing's local day lies within its period (a month at most)


def iso_time(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def pool_crossings(rows: pa.Table | None) -> list[Crossing]:
    """The staged crossings (``schemas.lake.CROSSING_SCHEMA``) as outbox crossings with their data."""
    out = []
    for r in [] if rows is None else rows.to_pylist():
        data = {
            "account_id": r["account_id"],
            "plan": r["plan"],
            "pool": r["pool"],
            "period_start": r["period_start"].isoformat(),
            "threshold": float(Decimal(r["threshold"])),
            "used": r["used"],
            "allowance": r["allowance"],
            "crossed_at": iso_time(r["event_time"]),
            "event_id": r["event_id"],
        }
        out.append(
            Crossing(
                POOL_CROSSED,
                r["account_id"],
                r["local_day"],
                data,
                plan=r["plan"],
                pool=r["pool"],
                period_start=r["period_start"],
                threshold=r["threshold"],
            )
        )
    return out


def record_pools(
    conn: Connection, rows: pa.Table | None, first: dt.date, last: dt.date, source: str
) -> dict[str, int]:
    """The crossings of a run over local days ``first`` .. ``last``: it decides every crossing whose
    event lies on those days (the run recomputed all their balances), and no other."""
    n = Notification.__table__.c
    return record(
        conn,
        POOL_CROSSED,
        pool_crossings(rows),
        n.period_start.between(first - LONGEST_PERIOD, last),
        lambda _key, day: first <= day <= last,
        source,
    )
