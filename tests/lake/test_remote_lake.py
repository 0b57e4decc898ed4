"""A lake and a landing area on an object store behave like local ones: the same partitions with the
same rows, late events rewriting a past partition without losing its other shards, replays changing
nothing, and no staging left behind. Two stores: ``memfs://`` (in memory, Cloud Storage's rules: no
directories, only objects under prefixes) and a real S3 API (rclone's S3 server on loopback, through Beam's
own S3 file system, configured by the standard AWS environment variables as a deployment would be).

The whole day (ingest, gate, aggregation, metering, explain, the backup tank) runs on ``memfs://``
only: on S3 the production-profile test runs it end to end against the embedded results, so here S3
proves what that test does not: stopped runs finished or discarded, and the AWS variables."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from billing.plan import own_pool_models
from pipelines import lake
from pipelines.ingest import events as ingest
from pipelines.lake.paths import use_filesystem_options
from pipelines.quota import meter
from pipelines.quota.explain import as_dict, explain_event
from pipelines.quota.show import backup_tank
from pipelines.warehouse.accounts import load_accounts
from pipelines.warehouse.engine import make_engine, upgrade
from schemas.warehouse import BillableUsage, IngestRun, PoolUsage, UsageDaily
from tests import memfs
from tests.conftest import date_args, run_day, small_dates, table_rows
from tests.s3 import S3_ENV, S3Store


@pytest.fixture(params=["memfs", pytest.param("s3", marks=pytest.mark.slow)])
def store(request):  # type: ignore[no-untyped-def]
    """An empty object store; ``store.root`` is its bucket (``memfs://bucket`` or ``s3://lake-...``)."""
    if request.param == "memfs":
        memfs.STORE.clear()
        memfs.STORE.root = "memfs://bucket"
        yield memfs.STORE
        memfs.STORE.clear()
        return
    endpoint = request.getfixturevalue("s3_endpoint")
    with pytest.MonkeyPatch.context() as env:  # its own: a test's monkeypatch.undo() leaves it set
        for name, value in {**S3_ENV, "AWS_ENDPOINT_URL": endpoint}.items():
            env.setenv(name, value)
        use_filesystem_options([])  # as the command line does first: Beam's S3 file system gets options
        bucket = S3Store(endpoint)
        yield bucket
        bucket.clear()
    use_filesystem_options([])  # no client made for this test's server outlives it


def _remote_settings(settings, tmp_path, root: str, landing: str | None = None):  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'remote.db'}"
    upgrade(make_engine(url))
    return dataclasses.replace(
        settings, database_url=url, lake=f"{root}/lake", landing=landing or settings.landing
    )


def _upload_landing(local: str, store) -> str:  # type: ignore[no-untyped-def]
    for path in sorted(Path(local).rglob("*")):
        if path.is_file():
            store.put(f"{store.root}/landing/{path.relative_to(local).as_posix()}", path.read_bytes())
    return f"{store.root}/landing"


def _local_events(lake: str) -> dict[str, object]:
    root = Path(lake)
    return {
        p.relative_to(root).as_posix(): pq.read_table(p) for p in sorted((root / "events").rglob("*.parquet"))
    }


def _remote_events(store) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Each committed file as a reader finds it: through its partition's manifest, under its name."""
    root = f"{store.root}/lake"
    found = {}
    for day in lake.partition_dates(root, lake.EVENTS):
        for path in lake.list_files(lake.partition(root, lake.EVENTS, day)):
            name = f"events/date={day}/{path.rsplit('/', 1)[-1]}"
            found[name] = pq.read_table(io.BytesIO(store.get(path)))
    return found


def _same_events(local: dict, remote: dict) -> None:
    assert sorted(remote) == sorted(local)
    for name, table in local.items():
        assert remote[name].equals(table), name


def _ingest(settings, dates) -> ingest.IngestResult:  # type: ignore[no-untyped-def]
    return ingest.main([*settings.argv(), *date_args(dates)])


def _runs(url: str) -> list[tuple]:
    return sorted(r[1:3] + r[5:9] for r in table_rows(url, IngestRun))  # landing, dataset, the counts


@pytest.mark.slow
@pytest.mark.parametrize("store", ["memfs"], indirect=True)  # S3: tests/jobs/test_production_profile.py
def test_an_object_store_lake_gets_the_partitions_of_a_local_one(store, sqlite_settings, tmp_path, catalog):
    """Ingest, the data-quality gate, aggregation and metering, day by day as run-day does it, on both."""
    remote = _remote_settings(
        sqlite_settings, tmp_path, store.root, landing=_upload_landing(sqlite_settings.landing, store)
    )
    dates = small_dates()
    for part in (dates[:-1], dates[-1:]):  # the last landing date carries late events
        local_result = run_day(sqlite_settings, part)
        remote_result = run_day(remote, part)
        assert remote_result.ingested.stats == local_result.ingested.stats
        assert remote_result.ingested.changed_dates == local_result.ingested.changed_dates
        assert remote_result.aggregated == local_result.aggregated
    late = [d for d in local_result.ingested.changed_dates if d < dates[-1]]
    assert late, "late events rewrote a past date"
    assert table_rows(remote.database_url, UsageDaily) == table_rows(sqlite_settings.database_url, UsageDaily)
    assert any(p.endswith(".html") for p, _, _ in store.under(f"{store.root}/lake/"))  # the gate's report
    for settings in (sqlite_settings, remote):
        load_accounts(
            make_engine(settings.database_url), Path(sqlite_settings.landing) / "accounts.csv", catalog
        )
        meter.main([*settings.argv(), *date_args(dates)])
    for model in (BillableUsage, PoolUsage):
        assert table_rows(remote.database_url, model) == table_rows(sqlite_settings.database_url, model)
    assert any("/allocations/" in p for p, _, _ in store.under(f"{store.root}/lake/"))
    local = _local_events(sqlite_settings.lake)
    _same_events(local, _remote_events(store))
    assert _runs(remote.database_url) == _runs(sqlite_settings.database_url)
    assert not store.under(f"{store.root}/lake/_staging/"), "a run left its staging behind"
    root = f"{store.root}/lake"
    quarantine = [lake.list_files(lake.partition(root, lake.QUARANTINE, d)) for d in dates]
    assert [len(files) for files in quarantine] == [1] * len(dates)

    # What support and product teams read from the lake: why an event was charged, the backup tank.
    both = [(make_engine(s.database_url), s.lake) for s in (sqlite_settings, remote)]
    charges = []
    for event_id in next(iter(local.values())).column("event_id").to_pylist()[:20]:
        here, there = (as_dict(explain_event(engine, root, catalog, event_id)) for engine, root in both)
        assert there == here
        charges.append(there)
    assert any(c["pools"] for c in charges)
    fast = own_pool_models(catalog)[0]
    here, there = (backup_tank(engine, root, catalog, fast) for engine, root in both)
    assert there.num_rows and there.equals(here)

    replay = _ingest(remote, dates)
    assert replay.total("clean") == 0 and replay.changed_dates == []
    _same_events(local, _remote_events(store))


class _Stopped(BaseException):
    """Ends a run at a checkpoint the way a lost machine would, as far as the lake can tell."""


@pytest.mark.slow
def test_runs_stopped_on_an_object_store_are_finished_or_discarded_by_the_next(
    store, sqlite_settings, tmp_path, monkeypatch
):
    """Staging folders are prefixes there: the next ingest still finds them, rolls a journaled
    commit forward and discards a run that never reached its journal."""
    from pipelines.runtime import faults

    remote = _remote_settings(sqlite_settings, tmp_path, store.root)
    dates = small_dates()
    for settings in (sqlite_settings, remote):
        _ingest(settings, dates[:-1])
    local_last = _ingest(sqlite_settings, dates[-1:])

    def stop(name: str) -> None:
        if name == "lake.commit":
            raise _Stopped

    monkeypatch.setattr(faults, "checkpoint", stop)
    with pytest.raises(_Stopped):  # the first partition swapped, the others not
        _ingest(remote, dates[-1:])
    monkeypatch.undo()
    assert _remote_events(store) != _local_events(sqlite_settings.lake)
    dead = f"{store.root}/lake/_staging/dead-run"
    store.put(f"{dead}/_run.json", b'{"step": "events ingest", "run_id": "dead-run"}')
    store.put(f"{dead}/events/date={dates[0]}/shard-0000.parquet", b"half a file")

    again = _ingest(remote, dates[-1:])  # finishes the stopped commit, then finds every event stored
    assert again.total("clean") == 0
    assert set(local_last.changed_dates) <= set(again.changed_dates)
    _same_events(_local_events(sqlite_settings.lake), _remote_events(store))
    assert not store.under(f"{store.root}/lake/_staging/")
    clean = [r[6] for r in table_rows(remote.database_url, IngestRun) if r[0] != again.run_id]
    assert sum(clean) == sum(r[6] for r in table_rows(sqlite_settings.database_url, IngestRun))  # its row too


@pytest.mark.slow
def test_beam_s3_flags_after_the_double_dash_reach_the_lake_without_aws_variables(
    s3_endpoint, sqlite_settings, tmp_path, monkeypatch
):
    """The other way to configure an S3 lake: no AWS_* variable at all, Beam's --s3_* flags after
    `--`. Ingest lists the landing area and commits partitions with them, outside the pipeline too."""
    from pipelines.cli import main
    from schemas.warehouse import UsageDaily

    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    bucket = S3Store(s3_endpoint)
    remote = _remote_settings(
        sqlite_settings, tmp_path, bucket.root, _upload_landing(sqlite_settings.landing, bucket)
    )
    flags = [
        "--",
        f"--s3_endpoint_url={s3_endpoint}",
        "--s3_access_key_id=test",
        "--s3_secret_access_key=test",
        "--s3_region_name=us-east-1",
    ]
    base = ["--config", remote.config, "--database-url", remote.database_url, "--lake", remote.lake]
    day = small_dates()[0].isoformat()
    try:
        assert main([*base, "--landing", remote.landing, "events", "ingest", "--date", day, *flags]) == 0
        assert main([*base, "usage", "aggregate", "--date", day, *flags]) == 0
        assert bucket.under(f"{bucket.root}/lake/events/date={day}/")
        assert table_rows(remote.database_url, UsageDaily)
    finally:
        use_filesystem_options([])
        bucket.clear()


def test_a_stamp_is_an_objects_size_and_time_and_a_rewrite_is_seen(store) -> None:  # type: ignore[no-untyped-def]
    """What ingest checks a landing file against before and after reading it (and the meter hashes):
    one stamp per object that exists, its size and its time in seconds since the epoch, a different
    stamp once the object is written again."""
    import time

    from pipelines.ingest.readers import LandingFileChanged, check_unchanged, stamp

    a, b, missing = (f"{store.root}/landing/2026-03-02/{n}.parquet" for n in ("a", "b", "missing"))
    store.put(a, b"x" * 10)
    store.put(b, b"y" * 3)
    stamps = lake.stamps([a, missing, b])
    assert [(p, size) for p, size, _ in stamps] == [(a, 10), (b, 3)]
    assert all(abs(mtime - time.time()) < 600 for _, _, mtime in stamps)
    listed = stamp(a)
    check_unchanged(a, listed)
    store.put(a, b"x" * 11)
    with pytest.raises(LandingFileChanged, match="changed while this run read it"):
        check_unchanged(a, listed)
    with pytest.raises(LandingFileChanged, match="disappeared"):
        stamp(missing)
