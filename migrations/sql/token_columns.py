"""The usage tables' token columns follow the token-kind registry (``schemas.tokens``).

``usage_daily`` and ``model_daily`` hold one column per event token field. A token kind added to the
registry gets its columns from the migration that comes with it, which calls ``add_missing``: each
column is added as 0 for the rows already there (no event before the kind existed reported it), so the
reconciliation and every report stay whole. The finance views are recreated by that migration too
(``finance.drop`` / ``finance.create``), since they are generated from the registries.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import Connection

from schemas import tokens

TABLES = ("usage_daily", "model_daily")


def missing(conn: Connection) -> list[tuple[str, str]]:
    """(table, column) of every registry token field a usage table lacks."""
    inspector = sa.inspect(conn)
    out = []
    for table in TABLES:
        have = {c["name"] for c in inspector.get_columns(table)}
        out += [(table, f) for f in tokens.fields() if f not in have]
    return out


def add_missing(conn: Connection) -> list[tuple[str, str]]:
    """Add the missing token columns (BIGINT NOT NULL DEFAULT 0) and, on PostgreSQL, give every token
    column the registry's rule as its comment; returns what was added."""
    added = missing(conn)
    for table, column in added:
        conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {column} BIGINT NOT NULL DEFAULT 0")
    if conn.dialect.name == "postgresql":
        for table in TABLES:
            for k in tokens.KINDS:
                rule = tokens.field_rule(k).replace("'", "''")
                conn.exec_driver_sql(f"COMMENT ON COLUMN {table}.{k.field} IS '{rule}'")
    return added
