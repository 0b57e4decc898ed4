"""Shared fixtures: the catalog, small generated landing data, SQLite and PostgreSQL warehouses.

PostgreSQL tests run when USAGE_BILLING_TEST_POSTGRES_URL is set; with REQUIRE_POSTGRES=1 a missing
or unreachable server is a failure, not a skip (that is how CI runs them).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from pipelines.jobs.generate import GeneratorConfig, generate
from pipelines.jobs.landing import write_landing
from pipelines.runtime.context import RunContext
from pipelines.settings import Settings
from pipelines.warehouse.engine import make_engine, upgrade
from schemas.catalog import Catalog, load_catalog

ROOT = Path(__file__).resolve().parents[1]
CATALOG_PATH = ROOT / "config" / "catalog.toml"
SMALL = GeneratorConfig(
    start=dt.date(2026, 3, 2),
    days=4,
    accounts=150,
    events_per_day=1500,
    seed=11,
    duplicate_rate=0.02,
    late_rate=0.02,
    late_max_days=2,
)

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog(CATALOG_PATH)


@pytest.fixture(scope="session")
def small_landing(tmp_path_factory, catalog) -> Path:  # type: ignore[no-untyped-def]
    """A few days of generated landing files (Parquet and JSON lines gzip) and accounts.csv."""
    root = tmp_path_factory.mktemp("landing")
    write_landing(generate(catalog, SMALL), SMALL, str(root))
    return root


@pytest.fixture(scope="session")
def s3_endpoint():  # type: ignore[no-untyped-def]
    """rclone's S3 server on loopback for the session (``tests/s3.py``), or the S3 API at
    ``USAGE_BILLING_TEST_S3_ENDPOINT`` (MinIO, moto's server, ...; key ``test``, secret ``test``): the
    object-store tests then run against that implementation instead."""
    from tests.s3 import s3_server

    other = os.environ.get("USAGE_BILLING_TEST_S3_ENDPOINT")
    if other:
        yield other
        return
    with s3_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def dask_address():  # type: ignore[no-untyped-def]
    """A dask.distributed cluster of 2 worker processes (one thread each) for a test module; the
    scheduler's address, for ``--dask_client_address``."""
    import distributed

    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    client = distributed.Client(cluster)
    yield cluster.scheduler_address
    client.close()
    cluster.close()


def small_dates() -> list[dt.date]:
    return [SMALL.start + dt.timedelta(days=i) for i in range(SMALL.days)]


@pytest.fixture
def sqlite_settings(tmp_path, small_landing) -> Settings:  # type: ignore[no-untyped-def]
    settings = sqlite_at(tmp_path, small_landing, "warehouse.db")
    upgrade(make_engine(settings.database_url))
    return settings


def sqlite_at(root: Path, landing: Path, database: str = "built.db") -> Settings:
    """Settings of a SQLite warehouse ``root/database`` and a lake ``root/lake`` (not created here)."""
    return Settings(
        config=str(CATALOG_PATH),
        database_url=f"sqlite:///{root / database}",
        lake=str(root / "lake"),
        landing=str(landing),
    )


def _postgres_admin_url() -> str | None:
    url = os.environ.get("USAGE_BILLING_TEST_POSTGRES_URL")
    if not url:
        if os.environ.get("REQUIRE_POSTGRES") == "1":
            pytest.fail("REQUIRE_POSTGRES=1 but USAGE_BILLING_TEST_POSTGRES_URL is not set")
        pytest.skip("USAGE_BILLING_TEST_POSTGRES_URL is not set")
    return url


@pytest.fixture(scope="session")
def postgres_url() -> str:  # type: ignore[misc]
    """A throwaway database on the test server, dropped at the end of the session."""
    admin_url = _postgres_admin_url()
    name = f"ub_test_{uuid.uuid4().hex[:10]}"
    try:
        admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # report any connection failure the same way
        if os.environ.get("REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL required but unreachable: {exc}")
        pytest.skip(f"PostgreSQL unreachable: {exc}")
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    yield url
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def postgres_settings(postgres_url, tmp_path, small_landing) -> Settings:  # type: ignore[no-untyped-def]
    engine = make_engine(postgres_url)
    with engine.begin() as conn:  # each test starts from an empty schema
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    upgrade(engine)
    engine.dispose()
    return Settings(
        config=str(CATALOG_PATH),
        database_url=postgres_url,
        lake=str(tmp_path / "lake"),
        landing=str(small_landing),
    )


# -- a warehouse and lake built once per module, copied per test ----------------------------------------


@dataclass(frozen=True)
class Built:
    """A warehouse and its lake built once (``settings``), kept as a template: ``copy`` gives each test
    its own warehouse (a SQLite file copy, or a PostgreSQL database made with ``TEMPLATE``) and puts
    the lake back at the path the warehouse is bound to, so no rebind is recorded."""

    settings: Settings
    lake_template: Path

    def copy(self, scratch: Path, request: pytest.FixtureRequest) -> Settings:
        lake = Path(self.settings.lake)
        shutil.rmtree(lake, ignore_errors=True)  # whatever the previous test left there
        shutil.copytree(self.lake_template, lake)
        url = make_url(self.settings.database_url)
        if url.get_backend_name() == "sqlite":
            # SQLite's backup, not a file copy: the warehouse runs in WAL mode, and rows committed while
            # a connection of this process is still open may be only in the -wal file.
            with (
                closing(sqlite3.connect(url.database)) as src,
                closing(sqlite3.connect(scratch / "warehouse.db")) as dst,
            ):
                src.backup(dst)
            database_url = f"sqlite:///{scratch / 'warehouse.db'}"
        else:
            database_url = _postgres_database(template=url.database)
            request.addfinalizer(lambda: _drop_postgres_database(database_url))
        return Settings(self.settings.config, database_url, self.settings.lake, self.settings.landing)


def build_once(kind: str, root: Path, landing: Path, steps: list[list[str]]) -> Iterator[Built]:
    """A ``kind`` (sqlite or postgres) warehouse at ``root`` with a lake ``root/lake``, built by the
    ``usage-billing`` commands ``steps``; yields it as a ``Built`` template, drops it afterwards."""
    from pipelines.cli import main

    url = f"sqlite:///{root / 'template.db'}" if kind == "sqlite" else _postgres_database()
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    settings = Settings(str(CATALOG_PATH), url, str(root / "lake"), str(landing))
    for step in steps:
        assert main([*cli_args(settings), *step]) == 0, step
    shutil.copytree(root / "lake", root / "lake-template")
    if kind != "sqlite":
        _close_sessions(url)  # a template database takes no connection while it is copied
    yield Built(settings, root / "lake-template")
    if kind != "sqlite":
        _drop_postgres_database(url)


def _postgres_database(template: str | None = None) -> str:
    """A new database on the test server (a copy of ``template`` when given); returns its URL."""
    name = f"ub_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(_postgres_admin_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")))
    admin.dispose()
    return make_url(_postgres_admin_url()).set(database=name).render_as_string(hide_password=False)


def _close_sessions(url: str) -> None:
    """End the idle pooled connections of this process to ``url``'s database."""
    admin = create_engine(_postgres_admin_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = :name AND pid <> pg_backend_pid()"
            ),
            {"name": make_url(url).database},
        )
    admin.dispose()


def _drop_postgres_database(url: str) -> None:
    admin = create_engine(_postgres_admin_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)'))
    admin.dispose()


def table_rows(url: str, model) -> list[tuple]:  # type: ignore[no-untyped-def]
    """Every row of a warehouse table, ordered by its primary key (floats rounded for comparison)."""
    from sqlalchemy import select

    engine = make_engine(url)
    t = model.__table__
    with engine.connect() as conn:
        rows = conn.execute(select(t).order_by(*t.primary_key.columns)).all()
    engine.dispose()
    return [tuple(round(v, 9) if isinstance(v, float) else v for v in r) for r in rows]


def cli_args(settings: Settings) -> list[str]:
    """The global options of ``usage-billing`` that point it at ``settings``."""
    return [
        "--config",
        settings.config,
        "--database-url",
        settings.database_url,
        "--lake",
        settings.lake,
        "--landing",
        settings.landing,
    ]


def close_month(settings: Settings, month: str, scratch: Path) -> None:
    """Close ``month`` the way production does: ingest every landing date it still needs (here from an
    empty landing folder of its own, so no shared landing data changes) and meter the whole month."""
    from sqlalchemy import select

    from billing.invoices import utc_span
    from pipelines.ingest import events as ingest
    from pipelines.quota import meter
    from pipelines.runtime.dates import contiguous
    from schemas.warehouse import Account, IngestRun

    engine = make_engine(settings.database_url)
    with engine.connect() as conn:
        zones = set(conn.execute(select(Account.timezone).distinct()).scalars()) | {"UTC"}
        ingested = set(conn.execute(select(IngestRun.landing_date).distinct()).scalars())
    engine.dispose()
    first, last = utc_span(month, zones)
    needed = last + dt.timedelta(days=settings.catalog.invoicing.close_grace_days)
    start = max(first, min(ingested)) if ingested else first
    missing = [start + dt.timedelta(days=i) for i in range((needed - start).days + 1)]
    missing = [d for d in missing if d not in ingested]
    empty = scratch / f"empty-landing-{month}"
    for day in missing:
        (empty / day.isoformat()).mkdir(parents=True, exist_ok=True)
    quiet = Settings(settings.config, settings.database_url, settings.lake, str(empty))
    for run in contiguous(missing):  # only the missing dates: the others keep what they hold
        ingest.main([*quiet.argv(), "--from", run[0].isoformat(), "--to", run[-1].isoformat()])
    meter.main([*settings.argv(), "--month", month])


def date_args(dates: list[dt.date]) -> list[str]:
    """The date flags of ``dates`` (consecutive) for a stage's ``main(argv)``."""
    if len(dates) == 1:
        return ["--date", dates[0].isoformat()]
    return ["--from", dates[0].isoformat(), "--to", dates[-1].isoformat()]


def run_day(settings: Settings, dates: list[dt.date], **kwargs):  # type: ignore[no-untyped-def]
    """``run-day`` on the landing ``dates`` in this process, on a runtime context of ``settings``."""
    from pipelines.jobs.run_day import run_day as run

    with RunContext.open(settings) as context:
        return run(context, dates, **kwargs)


def meter_changed(settings: Settings, utc_dates: list[dt.date]) -> list[str]:
    """The daily chain's meter step after these UTC dates changed: what it metered, per run."""
    from pipelines.jobs.steps import DayState, meter

    with RunContext.open(settings) as context:
        return list(meter(context, DayState(aggregated=tuple(utc_dates))).metered)


# The test files that run the whole system end to end, longest first. ``make test`` hands whole files
# to two workers in collection order (``--dist loadfile --no-loadscope-reorder``; xdist would otherwise
# start with the files holding the most tests): starting with these lets the many short files fill in
# around them instead of one worker running the longest file alone at the end.
LONGEST_FIRST = (
    "tests/jobs/test_first_contact.py",
    "tests/jobs/test_production_profile.py",
    "tests/jobs/test_airflow_dags.py",
    "tests/jobs/test_packaging.py",
    "tests/runtime/test_faults.py",
)


def pytest_collection_modifyitems(config, items) -> None:  # type: ignore[no-untyped-def]
    def rank(item) -> int:  # type: ignore[no-untyped-def]
        path = Path(str(item.fspath)).relative_to(ROOT).as_posix()
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the order within and among the other files is kept
