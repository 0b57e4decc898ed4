"""Alembic environment: one linear history for SQLite and PostgreSQL.

The engine or connection comes from ``config.attributes["connection"]`` when the caller passes one
(tests, ``usage-billing db upgrade``), else from the ``sqlalchemy.url`` option.
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import Connection, Engine, create_engine, pool

from schemas.warehouse import Base

config = context.config
target_metadata = Base.metadata


def _configure(**kwargs: Any) -> None:
    context.configure(target_metadata=target_metadata, render_as_batch=True, compare_type=True, **kwargs)


def run_migrations_offline() -> None:
    _configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def _run_on(connection: Connection) -> None:
    _configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    given = config.attributes.get("connection")
    if isinstance(given, Connection):
        _run_on(given)
        return
    engine = (
        given
        if isinstance(given, Engine)
        else create_engine(config.get_main_option("sqlalchemy.url", ""), poolclass=pool.NullPool)
    )
    with engine.begin() as connection:
        _run_on(connection)


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
