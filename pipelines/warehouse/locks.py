"""One run of a step at a time: a named lock in the warehouse that every run of the step takes.

PostgreSQL: a row lock (``SELECT ... FOR UPDATE NOWAIT``) on the step's row of ``pipeline_locks``,
held by a transaction on a connection of its own (it goes away with the process or the connection,
so a killed run never leaves it behind). Unlike an advisory lock, which any role can take, a row lock
needs UPDATE on the table: only the pipeline's own role has it, so ``finance_reader`` (or any other
role) can neither take, hold nor block a step's lock. The lock connection stays "idle in
transaction" while the step runs: a server-wide ``idle_in_transaction_session_timeout`` shorter than
a step would end it (docs/operations.md). SQLite file: ``flock`` on a file beside the database
(``<db>.locks/<name>.lock``), released by the kernel when the process ends. In-memory SQLite needs
none (one process).

A second run waits up to ``USAGE_BILLING_LOCK_WAIT`` seconds (default 0) and then exits with
``LockBusy``, which says who holds the lock; the CLI exits with code 75 (EX_TEMPFAIL: try later).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import os
import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from pipelines.errors import UsageBillingError
from pipelines.settings import lock_wait

APPLICATION_NAME = "usage-billing"  # what pg_stat_activity shows for the project's connections

POLL_SECONDS = 0.2


class LockBusy(UsageBillingError):
    """Another run holds the step's lock."""

    exit_code = 75


def _holder_text() -> str:
    return (
        f"pid {os.getpid()} on {socket.gethostname()} since {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M:%S} UTC"
    )


def _busy(name: str, holder: str, waited: float) -> LockBusy:
    return LockBusy(
        f"another run of {name} is in progress ({holder}); this one did not start (waited {waited:.0f} s). "
        "Run it again when that one has finished, or set USAGE_BILLING_LOCK_WAIT=SECONDS to wait"
    )


@contextmanager
def step_lock(engine: Engine, name: str, wait: float | None = None) -> Iterator[None]:
    """Hold the lock ``name`` for the block; raise ``LockBusy`` if it stays taken for ``wait`` seconds."""
    wait = lock_wait() if wait is None else wait
    if engine.dialect.name == "postgresql":
        with _pg_lock(engine, name, wait):
            yield
        return
    database = engine.url.database
    if engine.dialect.name == "sqlite" and database not in (None, "", ":memory:"):
        with _file_lock(Path(database), name, wait):
            yield
        return
    yield


LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE for FOR UPDATE NOWAIT on a locked row


@contextmanager
def _pg_lock(engine: Engine, name: str, wait: float) -> Iterator[None]:
    label = f"usage-billing lock {name}"[:63]
    key = {"n": name if len(name) <= 200 else name[:180] + hashlib.sha256(name.encode()).hexdigest()[:20]}
    conn = engine.connect()
    try:
        conn.execute(text("SELECT set_config('application_name', :a, false)"), {"a": label})
        conn.execute(text("INSERT INTO pipeline_locks (name) VALUES (:n) ON CONFLICT (name) DO NOTHING"), key)
        conn.commit()
        started = time.monotonic()
        while True:
            try:
                conn.execute(text("SELECT name FROM pipeline_locks WHERE name = :n FOR UPDATE NOWAIT"), key)
                break  # held until this connection's transaction ends
            except DBAPIError as exc:
                conn.rollback()
                if getattr(exc.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                    raise
                if time.monotonic() - started >= wait:
                    raise _busy(name, _pg_holder(conn, label), time.monotonic() - started) from None
                time.sleep(POLL_SECONDS)
        yield
        try:  # back to the pool as it came: unlocked, with the engine's application name
            conn.rollback()
            conn.execute(text("SELECT set_config('application_name', :a, false)"), {"a": APPLICATION_NAME})
            conn.commit()
        except DBAPIError:
            pass  # the connection is gone, and the lock with it
    finally:
        conn.close()


def _pg_holder(conn, label: str) -> str:  # type: ignore[no-untyped-def]
    """Who holds the row: the other connection whose application name is this lock's."""
    row = conn.execute(
        text(
            "SELECT pid, backend_start, client_addr FROM pg_stat_activity"
            " WHERE application_name = :a AND pid <> pg_backend_pid() ORDER BY backend_start LIMIT 1"
        ),
        {"a": label},
    ).first()
    conn.rollback()
    if row is None:
        return "holder unknown"
    since = f"{row.backend_start:%Y-%m-%d %H:%M:%S %Z}"
    return f"PostgreSQL backend {row.pid} from {row.client_addr or 'local socket'} since {since}"


@contextmanager
def _file_lock(database: Path, name: str, wait: float) -> Iterator[None]:
    folder = database.with_name(database.name + ".locks")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:120] + ".lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        started = time.monotonic()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - started >= wait:
                    holder = os.pread(fd, 4096, 0).decode(errors="replace").strip()
                    raise _busy(
                        name,
                        json.loads(holder)["holder"] if holder else "holder unknown",
                        time.monotonic() - started,
                    ) from None
                time.sleep(POLL_SECONDS)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"holder": _holder_text()}).encode(), 0)
        yield
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing the descriptor releases the flock


@contextmanager
def database_lock(database_url: str, name: str) -> Iterator[None]:
    """``step_lock`` on an engine of its own, for a step that opens its engines itself."""
    from pipelines.warehouse.engine import make_engine, require_schema

    engine = make_engine(database_url)
    try:
        require_schema(engine)  # the lock table is the schema's
        with step_lock(engine, name):
            yield
    finally:
        engine.dispose()
