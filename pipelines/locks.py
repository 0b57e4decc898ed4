"""One run of a step at a time: a named lock in the warehouse that every run of the step takes.

PostgreSQL: a session-level advisory lock on a connection of its own (it goes away with the
process or the connection, so a killed run never leaves it behind). SQLite file: ``flock`` on a file
beside the database (``<db>.locks/<name>.lock``), released by the kernel when the process ends.
In-memory SQLite needs none (one process).

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

APPLICATION_NAME = "usage-billing"  # what pg_stat_activity shows for the project's connections

POLL_SECONDS = 0.2


class LockBusy(UsageBillingError):
    """Another run holds the step's lock."""

    exit_code = 75


def lock_wait() -> float:
    raw = os.environ.get("USAGE_BILLING_LOCK_WAIT", "0")
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise UsageBillingError(f"USAGE_BILLING_LOCK_WAIT must be a number of seconds, got {raw!r}") from None


def _holder_text() -> str:
    return (
        f"pid {os.getpid()} on {socket.gethostname()} since {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M:%S} UTC"
    )


def _busy(name: str, holder: str, waited: float) -> LockBusy:
    return LockBusy(
        f"another run of {name} is in progress ({holder}); this one did not start (waited {waited:.0f} s). "
        "Run it again when that one has finished, or set USAGE_BILLING_LOCK_WAIT=SECONDS to wait"
    )


def advisory_key(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)


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


@contextmanager
def _pg_lock(engine: Engine, name: str, wait: float) -> Iterator[None]:
    key = advisory_key(name)
    conn = engine.connect()
    try:
        conn.execute(
            text("SELECT set_config('application_name', :a, false)"), {"a": f"usage-billing lock {name}"[:63]}
        )
        started = time.monotonic()
        while not conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar():
            conn.commit()
            if time.monotonic() - started >= wait:
                raise _busy(name, _pg_holder(conn, key), time.monotonic() - started)
            time.sleep(POLL_SECONDS)
        conn.commit()  # the lock is the session's: no transaction stays open while the step runs
        yield
        try:  # back to the pool as it came: unlocked, with the engine's application name
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            conn.execute(text("SELECT set_config('application_name', :a, false)"), {"a": APPLICATION_NAME})
            conn.commit()
        except DBAPIError:
            pass  # the connection is gone, and the lock with it
    finally:
        conn.close()


def _pg_holder(conn, key: int) -> str:  # type: ignore[no-untyped-def]
    row = conn.execute(
        text(
            "SELECT a.pid, a.backend_start, a.client_addr"
            " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted"
            " AND l.classid = :hi AND l.objid = :lo AND l.objsubid = 1"
        ),
        {"hi": (key >> 32) & 0xFFFFFFFF, "lo": key & 0xFFFFFFFF},
    ).first()
    conn.commit()
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
    from pipelines.warehouse import check_connection, make_engine

    engine = make_engine(database_url)
    try:
        check_connection(engine)
        with step_lock(engine, name):
            yield
    finally:
        engine.dispose()
