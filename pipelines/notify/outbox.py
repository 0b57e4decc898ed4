"""The notifications outbox: crossings written in the transaction of the metering or drafting result
that caused them (``record``), each exactly once, computed on Arrow tables (a month's metering
writes about a hundred thousand of them: no Python per crossing but its id's hash).

A crossing is a fact keyed by (type, account, pool or grant, period start, threshold). Its id is a
stable hash of that key and of how many times the key was crossed before, so a rerun, a replay or a
re-metering that does not move the crossing finds the key already crossed with the same figures and
writes nothing. A crossing in a run's scope that the run no longer computes (a re-metering moved the
usage, a redraft gave a credit back), or computes with other figures (another event crossed it, a
credit was crossed in another month), is never edited or deleted: a ``<type>.retracted``
notification with the same key and figures follows it, and the crossing as it is now is a new
notification (the key's next generation, another id).

What a notification says is in its columns (the key, ``event_id`` and ``occurred_at`` for a pool
crossing) and in ``data`` (the figures, JSON); ``payload`` assembles the CloudEvent's data from both.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Connection, String, cast, func, select
from sqlalchemy.sql.elements import ColumnElement

from pipelines.warehouse.engine import as_utc, insert_arrow, read_arrow
from schemas.warehouse import Notification

POOL_CROSSED = "usage_billing.pool.threshold_crossed"
CREDIT_CROSSED = "usage_billing.credit.threshold_crossed"
CREDIT_EXPIRING = "usage_billing.credit.expiring"
RETRACTED = ".retracted"
KEY = ("account_id", "plan", "pool", "grant_id", "period_start", "threshold")
TIMESTAMP = pa.timestamp("us", tz="UTC")

# What a run computes: one row per crossing, its key, the local day it happened on and what it says.
COMPUTED_SCHEMA = pa.schema(
    [
        ("account_id", pa.string()),
        ("plan", pa.string()),
        ("pool", pa.string()),
        ("grant_id", pa.string()),
        ("period_start", pa.date32()),
        ("threshold", pa.string()),
        ("local_day", pa.date32()),
        ("event_id", pa.string()),
        ("occurred_at", TIMESTAMP),
        ("data", pa.string()),
    ]
)
OUTBOX_SCHEMA = pa.schema(
    [
        ("notification_id", pa.string()),
        ("type", pa.string()),
        *COMPUTED_SCHEMA,
        ("retracts", pa.string()),
        ("created_at", TIMESTAMP),
        ("source", pa.string()),
        ("status", pa.string()),
        ("attempts", pa.int64()),
        ("next_attempt_at", TIMESTAMP),
    ]
)
_KEY_SCHEMA = pa.schema([("k", pa.string())])
_STANDING_SCHEMA = pa.schema(
    [
        ("k", pa.string()),
        *(OUTBOX_SCHEMA.field(c) for c in ("notification_id", "local_day", "event_id", "data")),
    ]
)
_SAID_SCHEMA = pa.schema([OUTBOX_SCHEMA.field(c) for c in ("notification_id", *COMPUTED_SCHEMA.names)])
SEPARATOR = "\x1f"


def _key_sql() -> ColumnElement[str]:
    """``key_text`` in SQL (dates are ISO text on both databases)."""
    n = Notification.__table__.c
    parts: list[ColumnElement[str]] = [func.coalesce(cast(n[c], String), "") for c in KEY]
    joined = parts[0]
    for part in parts[1:]:
        joined = joined + SEPARATOR + part
    return joined.label("k")


def _said(conn: Connection, ids: list[str]) -> pa.Table:
    """What the notifications ``ids`` said (the few a run retracts)."""
    n = Notification.__table__.c
    parts = [
        read_arrow(
            conn,
            select(*(n[c] for c in _SAID_SCHEMA.names)).where(n.notification_id.in_(ids[i : i + 500])),
            _SAID_SCHEMA,
        )
        for i in range(0, len(ids), 500)
    ]
    return pa.concat_tables(parts) if parts else _SAID_SCHEMA.empty_table()


def key_text(table: pa.Table) -> pa.ChunkedArray:
    """Each row's key as one string (its parts joined by the unit separator, a null as empty)."""
    parts = [pc.fill_null(pc.cast(table[c], pa.string()), "") for c in KEY]
    return pc.binary_join_element_wise(*parts, SEPARATOR)


def _hash(text: str) -> str:
    return "ntf_" + hashlib.sha256(text.encode()).hexdigest()[:32]


def notification_ids(type_: str, keys: list[str], generations: list[int]) -> list[str]:
    """The stable id of each key's ``generation``-th crossing (0 first): what receivers dedup on."""
    return [_hash(f"{type_}\x1f{k}#{g}") for k, g in zip(keys, generations, strict=True)]


def retraction_ids(crossing_ids: list[str]) -> list[str]:
    return [_hash(f"retracted:{i}") for i in crossing_ids]


def record(
    conn: Connection,
    type_: str,
    computed: pa.Table,
    where: ColumnElement[bool],
    scope: tuple[dt.date, dt.date] | None,
    source: str,
) -> dict[str, int]:
    """Write, on ``conn``'s transaction, the crossings of ``computed`` (``COMPUTED_SCHEMA``) whose key
    has none standing with the same day and figures, and a retraction of each standing crossing that
    they replace or that lies in ``scope`` (its local days; None: every day) and ``computed`` lacks.
    ``where`` bounds the outbox rows read: every key of ``computed`` and of the scope lies within it.
    Returns the rows written per kind ("crossed", "retracted")."""
    n = Notification.__table__.c
    key = _key_sql()
    retractions = n.notification_id.in_(
        select(n.retracts).where(n.type == type_ + RETRACTED, n.retracts.is_not(None))
    )
    # what stands: the key's crossing not retracted (its key as one string, made in SQL: fewer values)
    active = read_arrow(
        conn,
        select(key, n.notification_id, n.local_day, n.event_id, n.data).where(
            n.type == type_, where, ~retractions
        ),
        _STANDING_SCHEMA,
    )
    # each key's crossings so far: its retractions, and the one that stands
    ended = read_arrow(conn, select(key).where(n.type == type_ + RETRACTED, where), _KEY_SCHEMA)
    keys = pa.concat_arrays([ended["k"].combine_chunks(), active["k"].combine_chunks()])
    counted = pa.table({"k": keys}).group_by("k").aggregate([("k", "count")])
    generations = pa.table({"k": counted["k"], "generations": counted["k_count"]})
    computed = computed.cast(COMPUTED_SCHEMA)
    computed = computed.append_column("k", key_text(computed))
    stand = active.select(["k", "notification_id", "local_day", "event_id", "data"])
    stand = stand.rename_columns(["k", "standing_id", "standing_day", "standing_event", "standing_data"])
    joined = computed.join(stand, "k", join_type="left outer").join(generations, "k", join_type="left outer")
    standing = pc.is_valid(joined["standing_id"])
    same = pc.and_(
        standing,
        pc.fill_null(
            pc.and_(
                pc.and_(
                    pc.equal(joined["standing_day"], joined["local_day"]),
                    pc.equal(joined["standing_data"], joined["data"]),
                ),
                pc.equal(pc.fill_null(joined["standing_event"], ""), pc.fill_null(joined["event_id"], "")),
            ),
            False,
        ),
    )
    fresh = joined.filter(pc.invert(same))
    moved = active.filter(
        pc.is_in(active["notification_id"], value_set=fresh["standing_id"].combine_chunks())
    )
    dropped = active.filter(pc.invert(pc.is_in(active["k"], value_set=computed["k"].combine_chunks())))
    if scope is not None and dropped.num_rows:
        lo, hi = (pa.scalar(d, pa.date32()) for d in scope)
        day = dropped["local_day"]
        dropped = dropped.filter(pc.and_(pc.greater_equal(day, lo), pc.less_equal(day, hi)))
    retract = _said(
        conn,
        pa.concat_arrays(
            [moved["notification_id"].combine_chunks(), dropped["notification_id"].combine_chunks()]
        ).to_pylist(),
    )
    now = dt.datetime.now(dt.UTC)
    gens = pc.fill_null(fresh["generations"], 0).to_pylist()
    ids = notification_ids(type_, fresh["k"].to_pylist(), gens)
    standing_ids = retract["notification_id"].to_pylist()
    rows = pa.concat_tables(
        [
            _outbox_rows(fresh, ids, type_, None, now, source),
            _outbox_rows(retract, retraction_ids(standing_ids), type_ + RETRACTED, standing_ids, now, source),
        ]
    )
    if rows.num_rows:  # columns null throughout are left to the table's default (null): less to bind
        rows = rows.select([c for c in rows.column_names if rows[c].null_count < rows.num_rows])
        insert_arrow(conn, Notification.__table__, rows)
    return {"crossed": fresh.num_rows, "retracted": retract.num_rows}


def _outbox_rows(
    said: pa.Table, ids: list[str], type_: str, retracts: list[str] | None, now: dt.datetime, source: str
) -> pa.Table:
    count = said.num_rows
    columns = {
        "notification_id": pa.array(ids, pa.string()),
        "type": pa.repeat(pa.scalar(type_), count),
        **{c: said[c] for c in COMPUTED_SCHEMA.names},
        "retracts": pa.array(retracts if retracts is not None else [None] * count, pa.string()),
        "created_at": pa.repeat(pa.scalar(now, TIMESTAMP), count),
        "source": pa.repeat(pa.scalar(source[:200]), count),
        "status": pa.repeat(pa.scalar("pending"), count),
        "attempts": pa.repeat(pa.scalar(0, pa.int64()), count),
        "next_attempt_at": pa.nulls(count, TIMESTAMP),  # due now
    }
    return pa.table(columns, schema=OUTBOX_SCHEMA)


def payload(row: Any) -> dict[str, Any]:
    """The CloudEvent's data of an outbox row (a retraction repeats what it retracts)."""
    kind = row.type.removesuffix(RETRACTED)
    figures = json.loads(row.data)
    threshold = None if row.threshold is None else float(Decimal(row.threshold))
    if kind == POOL_CROSSED:
        start = row.period_start if isinstance(row.period_start, str) else row.period_start.isoformat()
        return {
            "account_id": row.account_id,
            "plan": row.plan,
            "pool": row.pool,
            "period_start": start[:10],
            "threshold": threshold,
            **figures,
            "crossed_at": as_utc(row.occurred_at).isoformat().replace("+00:00", "Z"),
            "event_id": row.event_id,
        }
    return {"account_id": row.account_id, "grant_id": row.grant_id, "threshold": threshold, **figures}
