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

Fencing: a lock can be lost while its run goes on (its PostgreSQL connection terminated by an
operator or a timeout, its lock file removed), and another run may then take it. Each time a lock is
taken, its token in ``lock_fences`` goes up by one (committed at once); the holder's commit checks,
as the last statement of the transaction that writes its results, that the token is still its own
(``Fence.check``), so a run that lost its lock to another stops before it commits (``LockLost``). On
PostgreSQL the check locks the token's row until the commit, on SQLite the transaction holds the
database's write lock by then: the next holder's token cannot move in between.
"""

from __future__ import annotations

import contextlib
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
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from pipelines.errors import UsageBillingError
from pipelines.settings import Settings
from pipelines.warehouse.engine import APPLICATION_NAME, LOCK_WAIT, require_schema, warehouse_engine

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


class LockLost(UsageBillingError):
    """The run's lock was taken by another run while this one went on: it stops before it commits."""

    exit_code = 75


@dataclass(frozen=True)
class Fence:
    """The token a run got with its lock; ``check`` in the committing transaction (see the module)."""

    name: str
    token: int | None = None  # None: nothing to fence (in-memory SQLite: one process)

    def check(self, conn: Connection) -> None:
        if self.token is None:
            return
        lock = " FOR UPDATE" if conn.dialect.name == "postgresql" else ""
        current = conn.execute(
            text(f"SELECT token FROM lock_fences WHERE name = :n{lock}"), {"n": _key(self.name)}
        ).scalar()
        if current != self.token:
            raise LockLost(
                f"{self.name}: this run lost its lock while it ran and another run took it over (its "
                f"connection or lock file went away); nothing was committed: that run's result stands"
            )


def _key(name: str) -> str:
    return name if len(name) <= 200 else name[:180] + hashlib.sha256(name.encode()).hexdigest()[:20]


def _take_token(engine: Engine, name: str) -> int:
    """The lock's next token, committed at once, so a run that lost the lock sees it moved."""
    key = {"n": _key(name)}
    with engine.begin() as conn:
        moved = conn.execute(text("UPDATE lock_fences SET token = token + 1 WHERE name = :n"), key).rowcount
        if not moved:
            conn.execute(text("INSERT INTO lock_fences (name, token) VALUES (:n, 1)"), key)
        return int(conn.execute(text("SELECT token FROM lock_fences WHERE name = :n"), key).scalar_one())


def lock_wait(engine: Engine) -> float:
    """Seconds a step lock on ``engine`` waits for another run (``Settings.lock_wait``, given to
    ``make_engine``)."""
    return float(engine.get_execution_options().get(LOCK_WAIT, 0.0))


@contextmanager
def step_lock(engine: Engine, name: str, wait: float | None = None) -> Iterator[Fence]:
    """Hold the lock ``name`` for the block; raise ``LockBusy`` if it stays taken for ``wait`` seconds.
    Yields the run's ``Fence``: the transaction that commits the run's results calls its ``check``."""
    wait = lock_wait(engine) if wait is None else wait
    if engine.dialect.name == "postgresql":
        with _pg_lock(engine, name, wait):
            yield Fence(name, _take_token(engine, name))
        return
    database = engine.url.database
    if engine.dialect.name == "sqlite" and database not in (None, "", ":memory:"):
        with _file_lock(Path(database), name, wait):
            yield Fence(name, _take_token(engine, name))
        return
    yield Fence(name)


LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE for FOR UPDATE NOWAIT on a locked row


@contextmanager
def _pg_lock(engine: Engine, name: str, wait: float) -> Iterator[None]:
    label = f"usage-billing lock {name}"[:63]
    key = {"n": _key(name)}
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
        # a connection terminated under the run: what the run raised is the news
        with contextlib.suppress(DBAPIError):
            conn.close()


def _pg_holder(conn, label: str) -> str:
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
def database_lock(settings: Settings, name: str) -> Iterator[Fence]:
    """``step_lock`` on an engine of its own, for a step that opens its engines itself."""

    engine = warehouse_engine(settings)
    try:
        require_schema(engine)  # the lock table is the schema's
        with step_lock(engine, name) as fence:
            yield fence
    finally:
        engine.dispose()
