"""Beam's local parallel modes (two threads, two worker processes) give exactly the one-thread rows.

Ingest and metering default to a thread per core (``pipelines.runtime.options``): the DoFns must not
share state between the threads of one process either.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from pipelines import lake
from pipelines.ingest import events as ingest
from pipelines.quota import meter, store
from pipelines.usage import aggregate
from pipelines.warehouse.accounts import load_accounts
from pipelines.warehouse.engine import make_engine, upgrade
from schemas.warehouse import BillableUsage, MeteredDay, ModelDaily, PoolUsage, UsageDaily
from tests.conftest import date_args, small_dates, sqlite_at, table_rows

pytestmark = pytest.mark.slow
TABLES = (UsageDaily, ModelDaily, BillableUsage, PoolUsage, MeteredDay)


def _run_all(settings, catalog, flags: list[str]) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(settings.database_url)
    upgrade(engine)
    load_accounts(engine, Path(settings.landing) / "accounts.csv", catalog)
    dates = date_args(small_dates())
    ingest.main([*settings.argv(), *dates, *flags])
    aggregate.main([*settings.argv(), *dates, *flags])
    meter.main([*settings.argv(), *dates, *flags])
    # the last two days again, from the balances the run above left
    rerun = meter.main([*settings.argv(), *date_args(small_dates()[-2:]), *flags])
    assert rerun.notes, "the re-run did not start from the stored balances"


def _lake_rows(root: str, kind: str) -> list[dict]:
    folder = Path(root) / kind
    table = ds.dataset(folder, format="parquet", partitioning="hive").to_table()
    return sorted(table.to_pylist(), key=lambda r: tuple(str(v) for v in r.values()))


@pytest.fixture(scope="module")
def one_thread(tmp_path_factory, small_landing, catalog):  # type: ignore[no-untyped-def]
    """The rows of one thread, computed once for both modes."""
    settings = sqlite_at(tmp_path_factory.mktemp("one-thread"), small_landing, "warehouse.db")
    _run_all(settings, catalog, ["--direct_num_workers=1"])
    return settings


@pytest.mark.parametrize("mode", ["multi_threading", "multi_processing"])
def test_two_workers_give_the_one_thread_rows(one_thread, catalog, tmp_path, mode):
    sqlite_settings = one_thread
    parallel = replace(
        sqlite_settings, lake=str(tmp_path / "p-lake"), database_url=f"sqlite:///{tmp_path}/p.db"
    )
    _run_all(parallel, catalog, [f"--direct_running_mode={mode}", "--direct_num_workers=2"])
    for model in TABLES:
        rows = table_rows(sqlite_settings.database_url, model)
        assert rows, model  # not trivially equal
        assert table_rows(parallel.database_url, model) == rows, model
    for kind in (lake.EVENTS, store.ALLOCATIONS, store.POOL_STATE):
        assert _lake_rows(parallel.lake, kind) == _lake_rows(sqlite_settings.lake, kind), kind


def test_ingest_and_metering_default_to_a_thread_per_core_aggregation_to_one():
    from apache_beam.options.pipeline_options import DirectOptions

    from pipelines.runtime.options import DEFAULT_THREADS, pipeline_options

    threaded = pipeline_options([], threads=True).view_as(DirectOptions)
    assert threaded.direct_running_mode == "multi_threading"
    assert threaded.direct_num_workers == max(1, min(os.cpu_count() or 1, DEFAULT_THREADS))
    assert pipeline_options([], threads=False).view_as(DirectOptions).direct_num_workers == 1
    chosen = pipeline_options(["--direct_num_workers=1"], threads=True).view_as(DirectOptions)
    assert (chosen.direct_running_mode, chosen.direct_num_workers) == ("in_memory", 1)  # a flag wins
    other = pipeline_options(["--runner=DirectRunner"], threads=True).view_as(DirectOptions)
    assert other.direct_running_mode == "in_memory"  # another runner: no thread default
