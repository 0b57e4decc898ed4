"""The same pipelines on a distributed engine: Beam's DaskRunner on a local dask.distributed cluster.

The warehouse rows must equal the in-process FnApiRunner's exactly; the pipelines are shaped for
what the Dask runner supports (Create + ParDo + GroupByKey, files written from process), with no
per-runner special case.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipelines.ingest import events as ingest
from pipelines.jobs.run_day import date_args
from pipelines.usage import aggregate
from pipelines.warehouse.engine import make_engine, upgrade
from schemas.warehouse import UsageDaily
from tests.conftest import small_dates, table_rows

pytestmark = pytest.mark.slow


def _rows(url: str) -> list[tuple]:
    return table_rows(url, UsageDaily)


def test_dask_runner_gives_the_same_warehouse_rows(sqlite_settings, tmp_path, dask_address):
    dates = date_args(small_dates())
    ingest.run([*sqlite_settings.argv(), *dates])
    aggregate.run([*sqlite_settings.argv(), *dates])

    on_dask = replace(
        sqlite_settings, lake=str(tmp_path / "dask-lake"), database_url=f"sqlite:///{tmp_path}/d.db"
    )
    upgrade(make_engine(on_dask.database_url))
    flags = [
        "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
        f"--dask_client_address={dask_address}",
    ]
    result = ingest.run([*on_dask.argv(), *dates, *flags])
    assert result.total("clean") > 0 and result.total("clean", outcomes=True) > 0
    aggregate.run([*on_dask.argv(), *dates, *flags])
    from schemas.warehouse import ModelDaily, UsageDailyError

    for model in (UsageDaily, UsageDailyError, ModelDaily):
        assert table_rows(on_dask.database_url, model) == table_rows(sqlite_settings.database_url, model), (
            model
        )
    assert _rows(on_dask.database_url)  # not trivially equal: there are rows
