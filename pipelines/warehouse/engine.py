"""Warehouse access: engines, schema upgrades and idempotent loads of Arrow tables.

A load replaces a whole grain (a set of dates) inside one transaction: DELETE the grain, INSERT the
new rows. A rerun of the same dates therefore leaves exactly the same rows, and a failed load leaves
the previous rows in place.
"""

from __future__ import annotations

import datetime as dt
import io
import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as csv
from sqlalchemy import (
    Connection,
    Engine,
    Executable,
    Table,
    create_engine,
    delete,
    event,
    insert,
    inspect,
    text,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError

import migrations
from pipelines.errors import UsageBillingError
from pipelines.runtime import faults
from pipelines.settings import Settings
from pipelines.warehouse import sqlite_files
from pipelines.warehouse.keys import key_order

INSERT_BATCH_ROWS = 20_000


APPLICATION_NAME = "usage-billing"  # what pg_stat_activity shows for the project's connections
LOCK_WAIT = "usage_billing_lock_wait"  # the engine's execution option: seconds a step lock waits


def as_date(value: object) -> dt.date:
    """A stored date (SQLite hands it back as ISO text)."""
    return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))


@overload
def as_utc(value: dt.datetime) -> dt.datetime: ...
@overload
def as_utc(value: None) -> None: ...
def as_utc(value: dt.datetime | None) -> dt.datetime | None:
    """A stored time in UTC (SQLite hands it back without a zone)."""
    if value is None:
        return None
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def redact(url: str) -> str:
    """The URL with any password masked, for messages and logs.

    Masked by the text itself, not by a URL parser's idea of where the password ends: everything
    between the user name's ``:`` and the last ``@`` before the host is hidden, so a password with
    an unencoded ``@``, ``:`` or ``/`` never shows in part.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    userinfo, _, host = rest.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}@{host}"


def _unencoded_password(url: str) -> bool:
    """More than one ``@`` before the host: a password (or user) with an unencoded ``@``."""
    _, sep, rest = url.partition("://")
    return bool(sep) and rest.count("@") > 1


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")  # WAL stays consistent through a crash of the process
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def make_engine(url: str, lock_wait: float = 0.0) -> Engine:
    """An engine for ``url`` (nothing is connected or created yet). Fails with one clear line.
    ``lock_wait``: how long a step lock taken on it waits for another run (``Settings.lock_wait``)."""
    if _unencoded_password(url):
        raise UsageBillingError(
            f"invalid database URL {redact(url)}: the user or password holds an unencoded '@'; "
            "percent-encode it (write '@' as %40, ':' as %3A, '/' as %2F)"
        )
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise UsageBillingError(f"invalid database URL: {redact(url)}") from None
    if parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() in ("psycopg2", "default"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    try:
        postgres = parsed.get_backend_name() == "postgresql"
        connect_args = {"application_name": APPLICATION_NAME} if postgres else {}
        engine = create_engine(
            parsed, pool_pre_ping=True, connect_args=connect_args, execution_options={LOCK_WAIT: lock_wait}
        )
    except Exception as exc:  # unknown dialect, missing driver
        raise UsageBillingError(f"cannot use database {redact(url)}: {exc}") from None
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
        if parsed.database not in (None, "", ":memory:"):
            event.listen(engine, "connect", sqlite_files.remember(parsed.database))
    return engine


def warehouse_engine(settings: Settings) -> Engine:
    """``make_engine`` for the warehouse of ``settings``, its step locks waiting ``settings.lock_wait``."""
    return make_engine(settings.database_url, settings.lock_wait)


def sqlite_file(engine: Engine) -> Path | None:
    """The file of a SQLite warehouse (None for PostgreSQL or an in-memory database)."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or database in (None, "", ":memory:") or database.startswith("file:"):
        return None
    return Path(database)


def check_connection(engine: Engine, create: bool = False) -> None:
    """Connect once, or fail with one line. A SQLite warehouse that does not exist is created only
    with ``create`` (``db upgrade``, the demo): any other command stops before it leaves an empty
    file or folder behind."""
    path = sqlite_file(engine)
    if path is not None and not path.exists():
        if not create:
            raise UsageBillingError(
                f"no warehouse at {path}: create it with `usage-billing db upgrade` (or pass --database-url)"
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageBillingError(
                f"cannot create the warehouse folder {path.parent}: {exc.strerror}"
            ) from None
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except OperationalError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else "connection failed"
        raise UsageBillingError(f"cannot reach database {redact(str(engine.url))}: {reason}") from None


def require_schema(engine: Engine) -> None:
    """Fail fast, before any pipeline work, when the warehouse is not migrated to the latest revision."""
    check_connection(engine)
    with engine.connect() as conn:
        if inspect(conn).has_table(migrations.VERSION_TABLE):
            current = conn.execute(text(f"SELECT version_num FROM {migrations.VERSION_TABLE}")).scalar()
        else:
            current = None
    head = migrations.HEAD
    if current != head:
        state = "not initialised" if current is None else f"at revision {current}, not {head}"
        raise UsageBillingError(
            f"the warehouse at {redact(str(engine.url))} is {state}: run `usage-billing db upgrade`"
        )


def upgrade(engine: Engine) -> list[str]:
    """Apply every migration not applied yet (creating a new SQLite file); returns their revisions."""
    check_connection(engine, create=True)
    return migrations.upgrade(engine)


def free_bytes(engine: Engine) -> int | None:
    """Bytes of a SQLite file that hold no data (pages a migration or deletes freed), or None
    elsewhere. They are reused by later writes; ``vacuum`` gives them back to the disk."""
    if engine.dialect.name != "sqlite":
        return None
    with engine.connect() as conn:
        pages = conn.exec_driver_sql("PRAGMA freelist_count").scalar_one()
        return int(pages) * int(conn.exec_driver_sql("PRAGMA page_size").scalar_one())


def vacuum(engine: Engine) -> None:
    """SQLite: rewrite the file without its free pages (needs free disk the size of the file; waits
    for writers like any write). PostgreSQL: VACUUM (ANALYZE) of the database (autovacuum does the
    same over time). Safe while steps run: a vacuum is a transaction of its own."""
    check_connection(engine)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM" if engine.dialect.name == "sqlite" else "VACUUM (ANALYZE)")


def replace_rows(conn: Connection, table: Table, key: str, values: Iterable[Any], rows: pa.Table) -> int:
    """Delete the rows whose ``key`` is in ``values`` and insert ``rows``, on ``conn``'s transaction."""
    values = sorted(set(values))
    for i in range(0, len(values), 500):
        conn.execute(delete(table).where(table.c[key].in_(values[i : i + 500])))
    return insert_arrow(conn, table, rows)


def insert_arrow(conn: Connection, table: Table, rows: pa.Table) -> int:
    """Bulk insert an Arrow table whose columns are named like the table's, on ``conn``'s transaction.

    PostgreSQL: COPY from CSV that pyarrow writes (no Python per row). Others: executemany batches.
    Rows go in primary key order: the index then grows at its end (3x faster on SQLite; PostgreSQL's
    own CPU for 2.26M billable rows 7 s, against 10 s in runs sorted per account shard and 15 s
    unsorted). Text columns may come as dictionary arrays (cheaper to read and to sort).
    """
    names = [c.name for c in table.columns if c.name in rows.column_names]
    rows = rows.select(names)
    if rows.num_rows == 0:
        return 0
    if any(pa.types.is_dictionary(t) for t in rows.schema.types):
        rows = rows.unify_dictionaries()  # one dictionary per column: the sort and the take index it
    keys = [c.name for c in table.primary_key.columns if c.name in names]
    if keys and rows.num_rows > 1:
        rows = rows.take(key_order(rows, keys))
    if conn.dialect.name == "postgresql":
        _copy(conn, table, rows)  # Arrow's CSV writer writes a dictionary column's values
        faults.checkpoint(f"warehouse.load.{table.name}")
        return rows.num_rows
    rows = _decoded(rows)
    if conn.dialect.name == "sqlite" and all(_sqlite_plain(t) for t in rows.schema.types):
        _sqlite_executemany(conn, table, rows)
    else:
        for batch in rows.to_batches(max_chunksize=INSERT_BATCH_ROWS):
            if batch.num_rows:  # a concatenation can carry empty chunks
                conn.execute(insert(table), batch.to_pylist())
    faults.checkpoint(f"warehouse.load.{table.name}")
    return rows.num_rows


def _decoded(rows: pa.Table) -> pa.Table:
    """Dictionary columns as plain arrays of their values."""
    for i, field in enumerate(rows.schema):
        if pa.types.is_dictionary(field.type):
            rows = rows.set_column(i, field.name, rows.column(i).cast(field.type.value_type))
    return rows


def _sqlite_plain(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_string(t)
        or pa.types.is_date32(t)
        or pa.types.is_decimal(t)
        or pa.types.is_timestamp(t)
    )


SQLITE_ROWS_PER_INSERT = 50  # rows per INSERT statement (within SQLite's oldest limit of 999 parameters)


def _sqlite_executemany(conn: Connection, table: Table, rows: pa.Table) -> None:
    """The DBAPI cursor's executemany on the caller's transaction, ``SQLITE_ROWS_PER_INSERT`` rows
    per statement: one ``INSERT ... VALUES (..), (..), ..`` step instead of one per row (1.9M
    billable rows: 10.0 -> 6.4 s), the values made into Python objects column by column
    (``_python_values``: 6.4 -> 5.3 s).

    Dates and timestamps go in as text in the formats SQLAlchemy's SQLite types store and read
    (timestamps in UTC, microseconds); decimals as exact text, which SQLite's NUMERIC affinity takes.
    """
    columns = [_sqlite_value(c) for c in rows.columns]
    names = ", ".join(conn.dialect.identifier_preparer.quote(n) for n in rows.column_names)
    width = len(columns)
    per = max(1, min(SQLITE_ROWS_PER_INSERT, 999 // width))
    row = f"({', '.join('?' * width)})"
    sql = f"INSERT INTO {conn.dialect.identifier_preparer.format_table(table)} ({names}) VALUES "
    cursor = cast(Any, conn.connection.driver_connection).cursor()  # the driver's own (sqlite3)
    try:
        for start in range(0, rows.num_rows, INSERT_BATCH_ROWS * 5):
            chunk = [_python_values(c.slice(start, INSERT_BATCH_ROWS * 5)) for c in columns]
            flat = list(itertools.chain.from_iterable(zip(*chunk, strict=True)))
            whole = len(flat) // (width * per) * (width * per)
            step = width * per
            cursor.executemany(
                sql + ", ".join([row] * per), (flat[i : i + step] for i in range(0, whole, step))
            )
            if whole < len(flat):  # the last rows, fewer than a statement's
                cursor.execute(sql + ", ".join([row] * ((len(flat) - whole) // width)), flat[whole:])
    finally:
        cursor.close()


def _python_values(column: pa.ChunkedArray) -> list:
    """The column as a list of Python values for SQLite. Text and dates of few distinct values
    (days, models, kinds, account ids) make one Python string per distinct value, shared by its
    rows: half the time of ``to_pylist`` for billable usage's columns. Dates go in as ISO text."""
    column = column.combine_chunks()
    if (pa.types.is_string(column.type) or pa.types.is_date32(column.type)) and len(column) > 1:
        encoded = pc.dictionary_encode(column, null_encoding="encode")
        if len(encoded.dictionary) * 2 <= len(column):
            values = np.array(encoded.dictionary.cast(pa.string()).to_pylist(), dtype=object)
            return values[encoded.indices.to_numpy(zero_copy_only=False)].tolist()
    return column.cast(pa.string()).to_pylist() if pa.types.is_date32(column.type) else column.to_pylist()


def _sqlite_value(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Decimals as exact text, timestamps as UTC text with microseconds (dates: ``_python_values``)."""
    if pa.types.is_decimal(column.type):
        return pc.cast(column, pa.string())
    if pa.types.is_timestamp(column.type):
        utc = pc.cast(column, pa.timestamp("us", tz="UTC"))
        # as UTC wall time, cast to text: "YYYY-MM-DD HH:MM:SS.ffffff", what strftime("%Y-%m-%d %H:%M:%S")
        # gives (its %S carries the microseconds), 16x faster (no time zone database per value)
        return pc.cast(pc.cast(utc, pa.timestamp("us")), pa.string())
    return column


def _copy(conn: Connection, table: Table, rows: pa.Table) -> None:
    """COPY ... FROM STDIN (FORMAT csv) through psycopg, inside the caller's transaction."""
    buf = io.BytesIO()
    # pyarrow 25's CSV writer emits garbage for an empty leading chunk (a concatenation can carry one).
    rows = pa.Table.from_batches([b for b in rows.to_batches() if b.num_rows], schema=rows.schema)
    # Quote every string, so an empty string stays '' and only unquoted empty fields are NULL.
    csv.write_csv(rows, buf, csv.WriteOptions(include_header=False, quoting_style="all_valid"))
    columns = ", ".join(conn.dialect.identifier_preparer.quote(n) for n in rows.column_names)
    target = conn.dialect.identifier_preparer.format_table(table)
    raw = cast(Any, conn.connection.driver_connection)  # the driver's own (psycopg)
    with raw.cursor() as cursor, cursor.copy(f"COPY {target} ({columns}) FROM STDIN (FORMAT csv)") as copy:
        view = buf.getbuffer()
        for start in range(0, len(view), 1 << 20):
            copy.write(view[start : start + (1 << 20)])


def read_arrow(conn: Connection, statement: Executable, schema: pa.Schema) -> pa.Table:
    """Run a Core SELECT whose result columns are ``schema``'s, in order, into an Arrow table.

    Rows come straight from the DBAPI cursor (no per-value SQLAlchemy processing): SQLite hands dates
    back as ISO text, which Arrow casts column by column.
    """
    result = conn.execute(statement)
    try:
        rows = result.cursor.fetchall() if result.cursor is not None else []
    finally:
        result.close()
    if not rows:
        return schema.empty_table()
    arrays = []
    for values, field in zip(zip(*rows, strict=True), schema, strict=True):
        if pa.types.is_date32(field.type) and any(isinstance(v, str) for v in values):
            arrays.append(pa.array(values, pa.string()).cast(pa.date32()))
        elif pa.types.is_timestamp(field.type) and any(isinstance(v, str) for v in values):
            naive = pa.array(values, pa.string()).cast(pa.timestamp(field.type.unit))  # stored in UTC
            arrays.append(pc.assume_timezone(naive, "UTC") if field.type.tz else naive)
        elif pa.types.is_decimal(field.type) and any(isinstance(v, (float, int, str)) for v in values):
            # SQLite keeps NUMERIC as INTEGER or REAL; the shortest repr of a stored value is exact
            text_ = [None if v is None else str(v) for v in values]
            arrays.append(pa.array(text_, pa.string()).cast(field.type))
        else:
            arrays.append(pa.array(values, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)
