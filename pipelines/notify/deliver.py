"""Delivery of the outbox: ``usage-billing notify deliver``.

At least once: a notification is marked ``sent`` only after its sink took it (a 2xx answer, or the
JSON lines file written), so a killed run leaves it pending and the next run sends it again; the
``webhook-id`` (the notification id) lets a receiver drop the second copy. A failed attempt (any
other answer, a closed connection, no answer within the timeout) waits ``retry_base_s`` x
2^(attempt-1) before the next; after ``max_attempts`` the notification is ``dead``, its last error
kept (``notify retry --dead`` sends it again). A few requests are in flight at once, so one slow
answer does not hold the others, and a run stops taking new work at its time bound. Delivery
never touches billing: it reads and updates only the outbox's delivery columns, under its own lock.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent
from sqlalchemy import Connection, Engine, bindparam, func, or_, select, update
from standardwebhooks.webhooks import Webhook

from pipelines import lake
from pipelines.notify.outbox import COMPUTED_SCHEMA, payload
from pipelines.runtime import faults
from pipelines.runtime.startup import collect_from_here
from pipelines.settings import NotifySettings
from pipelines.warehouse.engine import as_utc
from pipelines.warehouse.locks import step_lock
from schemas.warehouse import Notification

NOTIFY_LOCK = "notify deliver"
NOTIFICATIONS = "notifications"  # <lake>/notifications/date=D/<run>.jsonl: the default sink
BATCH = 500  # notifications taken per round
SOURCE = "usage-billing"
CONTENT_TYPE = "application/cloudevents+json"
NOT_TRIED = "not tried: the run's time was up"  # stays pending, no attempt counted


@dataclass
class Delivered:
    sent: int = 0
    failed: int = 0  # attempts that failed and will be retried
    dead: int = 0
    left: int = 0  # still pending after the run (due later, or the time bound was reached)
    sink: str = ""


def cloudevent(row: Any) -> bytes:
    """A notification as a CloudEvents 1.0 JSON object in structured mode: the same bytes every time
    (its time is when it was recorded), so a resend is byte for byte the first send."""
    attributes = {
        "id": row.notification_id,
        "source": SOURCE,
        "type": row.type,
        "subject": row.account_id,
        "time": as_utc(row.created_at),
        "datacontenttype": "application/json",
    }
    return JSONFormat().write(CloudEvent(attributes, payload(row)))


class WebhookSink:
    """POSTs signed per the Standard Webhooks spec (webhook-id, webhook-timestamp, webhook-signature)."""

    def __init__(self, config: NotifySettings) -> None:
        assert config.webhook_url and config.webhook_secret
        self.url, self.webhook = config.webhook_url, Webhook(config.webhook_secret)
        limits = httpx.Limits(
            max_connections=config.concurrency, max_keepalive_connections=config.concurrency
        )
        self.client = httpx.Client(timeout=config.timeout_s, limits=limits)
        self.pool = ThreadPoolExecutor(config.concurrency, thread_name_prefix="notify")
        self.name = f"webhook {config.webhook_url}"

    def send(self, rows: list[Any], deadline: float) -> list[str | None]:
        """Per row: None when the receiver took it, else the error (``NOT_TRIED``: the run's time was up
        before its turn; no attempt counted)."""
        return list(self.pool.map(lambda row: self._post(row, deadline), rows))

    def _post(self, row: Any, deadline: float) -> str | None:
        if time.monotonic() >= deadline:
            return NOT_TRIED
        body = cloudevent(row)
        now = dt.datetime.now(dt.UTC)
        headers = {
            "content-type": CONTENT_TYPE,
            "webhook-id": row.notification_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": self.webhook.sign(row.notification_id, now, body),
        }
        try:
            answer = self.client.post(self.url, content=body, headers=headers)
        except Exception as exc:  # no answer: a refused or closed connection, a timeout
            return f"{type(exc).__name__}: {exc}"[:1000]
        if 200 <= answer.status_code < 300:
            return None
        return f"HTTP {answer.status_code}: {answer.text[:200]}"

    def close(self) -> None:
        self.pool.shutdown()
        self.client.close()


class JsonLinesSink:
    """One JSON lines file per round under ``<lake>/notifications/date=<UTC day>/``."""

    def __init__(self, lake_root: str, run_id: str) -> None:
        self.lake_root, self.run_id, self.round = lake_root, run_id, 0
        self.name = f"JSON lines under {lake.join(lake_root, NOTIFICATIONS)}"

    def send(self, rows: list[Any], deadline: float) -> list[str | None]:
        self.round += 1
        day = dt.datetime.now(dt.UTC).date()
        folder = lake.partition(self.lake_root, NOTIFICATIONS, day)
        path = lake.join(folder, f"{self.run_id}-{self.round:05d}.jsonl")
        try:
            lake.write_bytes(path, b"".join(cloudevent(r) + b"\n" for r in rows))
        except Exception as exc:  # any file system's failure: the round is retried later
            return [f"{type(exc).__name__}: {exc}"[:1000]] * len(rows)
        return [None] * len(rows)

    def close(self) -> None:
        pass


def deliver(
    engine: Engine,
    lake_root: str,
    config: NotifySettings,
    max_seconds: float = 300.0,
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
) -> Delivered:
    """Send what is due, in rounds of ``BATCH``, until nothing is due or ``max_seconds`` passed."""
    deadline = time.monotonic() + max_seconds
    collect_from_here()  # the command line defers garbage collection until the work starts: it starts
    with step_lock(engine, NOTIFY_LOCK):
        run_id = clock().strftime("%Y%m%dT%H%M%S%f")
        sink: WebhookSink | JsonLinesSink = (
            WebhookSink(config) if config.webhook_url else JsonLinesSink(lake_root, run_id)
        )
        done = Delivered(sink=sink.name)
        try:
            while time.monotonic() < deadline:
                with engine.connect() as conn:
                    rows = _due(conn, clock(), BATCH)
                if not rows:
                    break
                errors = sink.send(rows, deadline)
                faults.checkpoint("notify.sent")  # sent, not yet marked: a kill here sends them again
                with engine.begin() as conn:
                    _settle(conn, rows, errors, config, clock(), done)
        finally:
            sink.close()
        with engine.connect() as conn:
            done.left = _count(conn, "pending")
    return done


def _due(conn: Connection, now: dt.datetime, limit: int) -> list[Any]:
    n = Notification.__table__.c
    query = (
        select(n.notification_id, n.type, n.created_at, n.attempts, *(n[c] for c in COMPUTED_SCHEMA.names))
        .where(n.status == "pending", or_(n.next_attempt_at.is_(None), n.next_attempt_at <= now))
        .order_by(func.coalesce(n.next_attempt_at, n.created_at), n.notification_id)
        .limit(limit)
    )
    return list(conn.execute(query).all())


def _settle(
    conn: Connection,
    rows: list[Any],
    errors: list[str | None],
    config: NotifySettings,
    now: dt.datetime,
    done: Delivered,
) -> None:
    """The round's outcome in one statement per kind: sent, retried later, dead."""
    n = Notification.__table__
    sent, retry, dead = [], [], []
    for row, error in zip(rows, errors, strict=True):
        if error == NOT_TRIED:
            continue
        attempts = row.attempts + 1
        if error is None:
            sent.append({"id": row.notification_id, "attempts": attempts, "at": now})
        elif attempts >= config.max_attempts:
            dead.append({"id": row.notification_id, "attempts": attempts, "error": error})
        else:
            wait = dt.timedelta(seconds=config.retry_base_s * 2 ** (attempts - 1))
            retry.append({"id": row.notification_id, "attempts": attempts, "error": error, "at": now + wait})
    where = n.c.notification_id == bindparam("id")
    if sent:
        conn.execute(
            update(n)
            .where(where)
            .values(
                status="sent", attempts=bindparam("attempts"), delivered_at=bindparam("at"), last_error=None
            ),
            sent,
        )
    if retry:
        conn.execute(
            update(n)
            .where(where)
            .values(
                attempts=bindparam("attempts"), last_error=bindparam("error"), next_attempt_at=bindparam("at")
            ),
            retry,
        )
    if dead:
        conn.execute(
            update(n)
            .where(where)
            .values(
                status="dead",
                attempts=bindparam("attempts"),
                last_error=bindparam("error"),
                next_attempt_at=None,
            ),
            dead,
        )
    done.sent, done.failed, done.dead = done.sent + len(sent), done.failed + len(retry), done.dead + len(dead)


def _count(conn: Connection, status: str) -> int:
    n = Notification.__table__.c
    return int(conn.execute(select(func.count()).where(n.status == status)).scalar_one())


def retry_dead(engine: Engine) -> int:
    """Every dead notification pending again, from its first attempt; returns how many."""
    n = Notification.__table__
    with step_lock(engine, NOTIFY_LOCK), engine.begin() as conn:
        result = conn.execute(
            update(n).where(n.c.status == "dead").values(status="pending", attempts=0, next_attempt_at=None)
        )
        return int(result.rowcount)
