"""A run that lost its lock to another run never commits (fencing tokens), on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from pipelines.warehouse.engine import make_engine, upgrade
from pipelines.warehouse.locks import LockLost, step_lock


def lose_lock(engine, name: str) -> None:  # type: ignore[no-untyped-def]
    """Take ``name`` away from its holder the way it happens in production: its PostgreSQL connection
    is terminated, or its lock file removed."""
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            ended = conn.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = :a"),
                {"a": f"usage-billing lock {name}"},
            ).all()
        assert len(ended) == 1
    else:
        database = Path(engine.url.database)
        (database.with_name(database.name + ".locks") / f"{name}.lock").unlink()


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_run_that_lost_its_lock_commits_nothing_and_the_new_holder_does(request, tmp_path, backend):
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'w.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
        admin = make_engine(url)
        with admin.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
        admin.dispose()
    engine = make_engine(url)
    upgrade(engine)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE fenced (who VARCHAR(10))"))
    with step_lock(engine, "quota_meter") as first:
        lose_lock(engine, "quota_meter")
        with step_lock(engine, "quota_meter") as second:  # the lock is free again: another run takes it
            with pytest.raises(LockLost, match="lost its lock"), engine.begin() as conn:
                conn.execute(text("INSERT INTO fenced VALUES ('first')"))
                first.check(conn)
            with engine.begin() as conn:
                conn.execute(text("INSERT INTO fenced VALUES ('second')"))
                second.check(conn)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT who FROM fenced")).scalars().all() == ["second"]
    with step_lock(engine, "quota_meter") as third, engine.begin() as conn:  # the next holder commits
        third.check(conn)
    engine.dispose()
