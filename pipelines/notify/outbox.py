"""The notifications outbox: crossings written in the transaction of the metering or drafting result
that caused them (``record``), each exactly once.

A crossing is a fact keyed by (type, account, pool or grant, period start, threshold). Its id is a
stable hash of that key and of how many times the key was crossed before, so a rerun, a replay or a
re-metering that does not move the crossing finds the key already crossed with the same figures and
writes nothing. A crossing in a run's scope that the run no longer computes (a re-metering moved the
usage, a redraft gave a credit back), or computes with other figures (another event crossed it, a
credit was crossed in another month), is never edited or deleted: a ``<type>.retracted``
notification with the same key and data follows it, and the crossing as it is now is a new
notification (the key's next generation, another id).
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
    retracted = 0
    seen: set[tuple] = set()
    for c in computed:
        seen.add(c.key)
        state = states.get(c.key)
        data = _json(c.data)
        if state is not None and state.active is not None:
            if state.active[1:] == (c.local_day, data):
                continue  # the same crossing, the same figures: nothing new
            rows.append(_retraction(c.key, state.active, now, source))  # it moved: said again below
            retracted += 1
        generation = 0 if state is None else state.generations
        rows.append(_row(notification_id(c.key, generation), c.key, c.local_day, None, data, now, source))
    for key, state in states.items():
        if state.active is None or key in seen or not in_scope(key, state.active[1]):
            continue
        rows.append(_retraction(key, state.active, now, source))
        retracted += 1
    if rows:
        insert_arrow(conn, Notification.__table__, pa.Table.from_pylist(rows, OUTBOX_SCHEMA))
    return {"crossed": len(rows) - retracted, "retracted": retracted}


def _json(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


def _retraction(
    key: tuple, active: tuple[str, dt.date, str], now: dt.datetime, source: str
) -> dict[str, Any]:
    """The retraction of the standing crossing ``active`` of ``key``: its data repeated."""
    crossing_id, day, data = active
    return _row(
        retraction_id(crossing_id), (key[0] + RETRACTED, *key[1:]), day, crossing_id, data, now, source
    )


def _row(
    nid: str, key: tuple, day: dt.date, retracts: str | None, data: str, now: dt.datetime, source: str
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
        "data": data,
        "created_at": now,
        "source": source[:200],
        "status": "pending",
        "attempts": 0,
        "next_attempt_at": now,
    }
