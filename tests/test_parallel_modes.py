"""Beam's local parallel modes (two threads, two worker processes) give exactly the one-thread rows.

README recommends two threads on two cores for ingest and metering: the DoFns must not share state
between the threads of one process either.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from pipelines import aggregate, ingest, lake, meter
from pipelines.accounts import load_accounts
from pipelines.jobs import date_args
from pipelines.warehouse import make_engine, upgrade
from schemas.warehouse import BillableUsage, MeteredDay, ModelDaily, PoolUsage, UsageDaily
from tests.conftest import small_dates, table_rows

pytestmark = pytest.mark.slow
TABLES = (UsageDaily, ModelDaily, BillableUsage, PoolUsage, MeteredDay)


def _run_all(settings, catalog, flags: list[str]) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(settings.database_url)
    upgrade(engine)
    load_accounts(engine, Path(settings.landing) / "accounts.csv", catalog)
    dates = date_args(small_dates())
    ingest.run([*settings.argv(), *dates, *flags])
    aggregate.run([*settings.argv(), *dates, *flags])
    meter.run([*settings.argv(), *dates, *flags])


def _lake_rows(root: str, kind: str) -> list[dict]:
    folder = Path(root) / kind
    table = ds.dataset(folder, format="parquet", partitioning="hive").to_table()
    return sorted(table.to_pylist(), key=lambda r: tuple(str(v) for v in r.values()))


@pytest.mark.parametrize("mode", ["multi_threading", "multi_processing"])
def test_two_workers_give_the_one_thread_rows(sqlite_settings, catalog, tmp_path, mode):
    _run_all(sqlite_settings, catalog, ["--direct_num_workers=1"])
    parallel = replace(
        sqlite_settings, lake=str(tmp_path / "p-lake"), database_url=f"sqlite:///{tmp_path}/p.db"
    )
    _run_all(parallel, catalog, [f"--direct_running_mode={mode}", "--direct_num_workers=2"])
    for model in TABLES:
        rows = table_rows(sqlite_settings.database_url, model)
        assert rows, model  # not trivially equal
        assert table_rows(parallel.database_url, model) == rows, model
    for kind in (lake.EVENTS, meter.ALLOCATIONS):
        assert _lake_rows(parallel.lake, kind) == _lake_rows(sqlite_settings.lake, kind), kind
