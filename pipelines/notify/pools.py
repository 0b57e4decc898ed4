"""Pool thresholds crossed by a metering run (``billing.crossings`` computes them with the allocation):
recorded in the outbox in the run's load transaction (``pipelines.quota.store.load_warehouse``)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Connection

from pipelines.notify.outbox import COMPUTED_SCHEMA, POOL_CROSSED, record
from schemas.lake import CROSSING_SCHEMA
from schemas.warehouse import Notification

LONGEST_PERIOD = dt.timedelta(days=31)  # a crossing's local day lies within its period (a month at most)


def pool_crossings(rows: pa.Table | None) -> pa.Table:
    """The staged crossings (``schemas.lake.CROSSING_SCHEMA``) as the outbox computes them: the figures
    as JSON built column-wise (integers only), the event in its own columns."""
    rows = CROSSING_SCHEMA.empty_table() if rows is None else rows
    figures = pc.binary_join_element_wise(
        '{"allowance":',
        pc.cast(rows["allowance"], pa.string()),
        ',"used":',
        pc.cast(rows["used"], pa.string()),
        "}",
        "",
    )
    nulls = pa.nulls(rows.num_rows, pa.string())
    return pa.table(
        {
            "account_id": rows["account_id"],
            "plan": rows["plan"],
            "pool": rows["pool"],
            "grant_id": nulls,
            "period_start": rows["period_start"],
            "threshold": rows["threshold"],
            "local_day": rows["local_day"],
            "event_id": rows["event_id"],
            "occurred_at": rows["event_time"],
            "data": figures,
        },
        schema=COMPUTED_SCHEMA,
    )


def record_pools(
    conn: Connection, rows: pa.Table | None, first: dt.date, last: dt.date, source: str
) -> dict[str, int]:
    """The crossings of a run over local days ``first`` .. ``last``: it decides every crossing whose
    event lies on those days (the run recomputed all their balances), and no other."""
    n = Notification.__table__.c
    where = n.period_start.between(first - LONGEST_PERIOD, last)
    return record(conn, POOL_CROSSED, pool_crossings(rows), where, (first, last), source)
