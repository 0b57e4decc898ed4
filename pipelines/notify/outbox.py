"""The notifications outbox: crossings written in the transaction of the metering or drafting result
that caused them (``record``), each exactly once.

A crossing is a fact keyed by (type, account, pool or grant, period start, threshold). Its id is a
stable hash of that key and of how many times the key was crossed before, so a rerun, a replay or a
re-metering that does not move the crossing finds the key already crossed and writes nothing. A
crossing in a run's scope that the run no longer computes (a re-metering moved the usage, a redraft
gave a credit back) is never edited or deleted: a ``<type>.retracted`` notification with the same key
follows it, and a later crossing of the key is a new notification (the next generation).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlalchemy import Connection, select
from sqlalchemy.sql.elements import ColumnElement

from pipelines.warehouse.engine import as_date, insert_arrow
from schemas.warehouse import Notification

POOL_CROSSED = "usage_billing.pool.threshold_crossed"
CREDIT_CROSSED = "usage_billing.credit.threshold_crossed"
CREDIT_EXPIRING = "usage_billing.credit.expiring"
RETRACTED = ".retracted"
TYPES = (POOL_CROSSED, CREDIT_CROSSED, CREDIT_EXPIRING)
KEY = ("account_id", "plan", "pool", "grant_id", "period_start", "threshold")

OUTBOX_SCHEMA = pa.schema(
    [
        ("notification_id", pa.string()),
        ("type", pa.string()),
        ("account_id", pa.string()),
        ("plan", pa.string()),
        ("pool", pa.string()),
        ("grant_id", pa.string()),
        ("period_start", pa.date32()),
        ("threshold", pa.string()),
        ("local_day", pa.date32()),
        ("retracts", pa.string()),
        ("data", pa.string()),
        ("created_at", pa.timestamp("us", tz="UTC")),
        ("source", pa.string()),
        ("status", pa.string()),
        ("attempts", pa.int64()),
        ("next_attempt_at", pa.timestamp("us", tz="UTC")),
    ]
)


@dataclass(frozen=True)
class Crossing:
    """A computed crossing: its key, the local day it happened on, and the CloudEvent data."""

    type: str
    account_id: str
    local_day: dt.date
    data: dict[str, Any]
    plan: str | None = None
    pool: str | None = None
    grant_id: str | None = None
    period_start: dt.date | None = None
    threshold: str | None = None

    @property
    def key(self) -> tuple:
        return (
            self.type,
            self.account_id,
            self.plan,
            self.pool,
            self.grant_id,
            self.period_start,
            self.threshold,
        )


def notification_id(key: tuple, generation: int) -> str:
    """The stable id of a key's ``generation``-th crossing (0 first): what receivers dedup on."""
    text = json.dumps([*(v.isoformat() if isinstance(v, dt.date) else v for v in key), generation])
    return "ntf_" + hashlib.sha256(text.encode()).hexdigest()[:32]


def retraction_id(crossing_id: str) -> str:
    return "ntf_" + hashlib.sha256(f"retracted:{crossing_id}".encode()).hexdigest()[:32]


@dataclass
class _KeyState:
    generations: int  # crossings of the key written so far
    active: tuple[str, dt.date, str] | None  # the crossing not retracted yet: id, local day, data


def _states(conn: Connection, type_: str, where: ColumnElement[bool]) -> dict[tuple, _KeyState]:
    """Each key of ``type_`` (within ``where``) as the outbox has it: its crossings and which stands."""
    n = Notification.__table__.c
    rows = conn.execute(
        select(n.notification_id, n.type, n.retracts, n.local_day, n.data, *(n[c] for c in KEY)).where(
            n.type.in_([type_, type_ + RETRACTED]), where
        )
    ).all()
    retracted = {r.retracts for r in rows if r.type != type_}
    states: dict[tuple, _KeyState] = {}
    for r in rows:
        if r.type != type_:
            continue
        key = (
            type_,
            r.account_id,
            r.plan,
            r.pool,
            r.grant_id,
            None if r.period_start is None else as_date(r.period_start),
            r.threshold,
        )
        state = states.setdefault(key, _KeyState(0, None))
        state.generations += 1
        if r.notification_id not in retracted:
            state.active = (r.notification_id, as_date(r.local_day), r.data)
    return states


def record(
    conn: Connection,
    type_: str,
    computed: Iterable[Crossing],
    where: ColumnElement[bool],
    in_scope: Callable[[tuple, dt.date], bool],
    source: str,
) -> dict[str, int]:
    """Write, on ``conn``'s transaction, the crossings of ``computed`` whose key has none standing, and
    a retraction of each standing crossing that ``in_scope`` (key, local day) says this run decides
    and ``computed`` lacks. ``where`` bounds the outbox rows read: every key in ``computed`` and in
    scope must lie within it. Returns the rows written per kind ("crossed", "retracted")."""
    states = _states(conn, type_, where)
    now = dt.datetime.now(dt.UTC)
    rows: list[dict[str, Any]] = []
    seen: set[tuple] = set()
    for c in computed:
        seen.add(c.key)
        state = states.get(c.key)
        if state is not None and state.active is not None:
            continue
        generation = 0 if state is None else state.generations
        rows.append(_row(notification_id(c.key, generation), c.key, c.local_day, None, c.data, now, source))
    crossed = len(rows)
    for key, state in states.items():
        if state.active is None or key in seen or not in_scope(key, state.active[1]):
            continue
        crossing_id, day, data = state.active
        retracted_key = (key[0] + RETRACTED, *key[1:])
        rows.append(
            _row(retraction_id(crossing_id), retracted_key, day, crossing_id, json.loads(data), now, source)
        )
    if rows:
        insert_arrow(conn, Notification.__table__, pa.Table.from_pylist(rows, OUTBOX_SCHEMA))
    return {"crossed": crossed, "retracted": len(rows) - crossed}


def _row(
    nid: str, key: tuple, day: dt.date, retracts: str | None, data: dict, now: dt.datetime, source: str
) -> dict[str, Any]:
    type_, account, plan, pool, grant_id, period_start, threshold = key
    return {
        "notification_id": nid,
        "type": type_,
        "account_id": account,
        "plan": plan,
        "pool": pool,
        "grant_id": grant_id,
        "period_start": period_start,
        "threshold": threshold,
        "local_day": day,
        "retracts": retracts,
        "data": json.dumps(data, separators=(",", ":"), sort_keys=True),
        "created_at": now,
        "source": source[:200],
        "status": "pending",
        "attempts": 0,
        "next_attempt_at": now,
    }
