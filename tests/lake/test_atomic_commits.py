"""Commits on an object store are atomic for readers (`rclone serve s3`, Beam's S3 file system).

A partition there is a manifest naming its files: a commit writes the new files beside the old ones,
then replaces the manifest in one object write. A reader that lists the partition (the pipelines'
own ``lake.list_files``, pyarrow or DuckDB given the files ``usage-billing lake files`` prints) sees
the old contents or the new, never a mix; a commit killed before the manifest write leaves the old
partition readable, and the next commit deletes what the killed one left.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import lake
from pipelines.lake.paths import use_filesystem_options
from tests.s3 import S3_ENV, S3Store

pytestmark = pytest.mark.slow

FILES = ("shard-0000.parquet", "shard-0001.parquet", "shard-0002.parquet")


def _stage(store: S3Store, version: int, names=FILES) -> str:  # type: ignore[no-untyped-def]
    """A staged partition whose every file holds rows labelled ``version``."""
    staged = f"{store.root}/lake/_staging/v{version}/events/date=2026-03-02"
    for i, name in enumerate(names):
        sink = io.BytesIO()
        pq.write_table(pa.table({"version": [version] * (10 + i), "file": [name] * (10 + i)}), sink)
        store.put(f"{staged}/{name}", sink.getvalue())
    return staged


def _final(store: S3Store) -> str:
    return lake.partition(f"{store.root}/lake", lake.EVENTS, "2026-03-02")


def _read(store: S3Store) -> pa.Table:
    """The partition as a reader sees it: the files its listing names, each read whole."""
    return pa.concat_tables([pq.read_table(io.BytesIO(store.get(p))) for p in lake.list_files(_final(store))])


def test_a_reader_sees_the_old_partition_or_the_new_never_a_mix(bucket):
    final = _final(bucket)
    lake.commit(_stage(bucket, 1), final, "run-1")
    seen: list[set[int]] = []
    retried = 0
    done = threading.Event()
    read = threading.Condition()  # the reader's whole reads so far, for the writer to wait on

    def write() -> None:
        try:
            for version in range(2, 12):
                lake.commit(_stage(bucket, version), final, f"run-{version}")
                # Before the next commit, two whole reads: the second began after this commit ended.
                # The reader keeps reading while the next commit runs; on a loaded machine the writer
                # thread could otherwise finish every commit before the reader read once.
                with read:
                    start = len(seen)
                    read.wait_for(lambda start=start: len(seen) >= start + 2, timeout=60)
        finally:
            done.set()

    writer = threading.Thread(target=write)
    writer.start()
    while not done.is_set():
        try:
            table = _read(bucket)
        except Exception:  # a reader slower than two commits: its files were cleaned up
            retried += 1
            continue
        with read:
            seen.append(set(table["version"].to_pylist()))
            read.notify_all()
        assert sorted(set(table["file"].to_pylist())) == list(FILES)
    writer.join()
    assert seen and all(len(versions) == 1 for versions in seen), seen
    assert len({min(v) for v in seen}) > 1, "the reader read while commits happened"
    assert set(_read(bucket)["version"].to_pylist()) == {11}
    assert retried <= len(seen)


def test_a_killed_commit_leaves_the_old_partition_and_the_next_one_cleans_up(bucket, s3_endpoint):
    final = _final(bucket)
    lake.commit(_stage(bucket, 1), final, "run-1")
    staged = _stage(bucket, 2, FILES[:2])
    script = (
        "from pipelines import lake\n"
        "from pipelines.lake.paths import use_filesystem_options\n"
        "use_filesystem_options([])\n"
        f"lake.commit({staged!r}, {final!r}, 'run-2')\n"
    )
    env = {**os.environ, **S3_ENV, "AWS_ENDPOINT_URL": s3_endpoint}
    env["USAGE_BILLING_FAULT"] = "lake.manifest:kill"
    killed = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=120)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    copied = [p for p, _, _ in bucket.under(f"{final}/") if "run-2" in p]
    assert len(copied) == 2, "the killed commit had copied its files"

    table = _read(bucket)  # the old partition, whole
    assert set(table["version"].to_pylist()) == {1} and table.num_rows == 33
    # pyarrow's own S3 client, given the files the lake's listing names, reads the same
    from pyarrow import fs

    s3 = fs.S3FileSystem(
        endpoint_override=s3_endpoint, access_key="test", secret_key="test", region="us-east-1", scheme="http"
    )
    files = [p.removeprefix("s3://") for p in lake.list_files(final)]
    assert pq.read_table(files, filesystem=s3).num_rows == 33

    lake.commit(_stage(bucket, 3), final, "run-3")
    assert set(_read(bucket)["version"].to_pylist()) == {3}
    left = [p for p, _, _ in bucket.under(f"{final}/")]
    assert not [p for p in left if "run-2" in p], "the next commit deleted what the killed one left"
    assert {p.rsplit("/", 1)[-1] for p in left if "run-1" in p} == set(FILES)  # kept for readers in flight
    lake.commit(_stage(bucket, 4), final, "run-4")
    assert not [p for p, _, _ in bucket.under(f"{final}/") if "run-1" in p]


def test_carry_over_keeps_the_files_a_run_did_not_rewrite_and_a_partition_before_manifests_migrates(bucket):
    """A partition written before manifests (files as direct objects) reads as before; its first
    commit takes it over: the files a run did not rewrite are kept by name (not copied)."""
    final = _final(bucket)
    for name in FILES:
        sink = io.BytesIO()
        pq.write_table(pa.table({"version": [0] * 5, "file": [name] * 5}), sink)
        bucket.put(f"{final}/{name}", sink.getvalue())
    assert lake.partition_dates(f"{bucket.root}/lake", lake.EVENTS)[0].isoformat() == "2026-03-02"
    assert _read(bucket).num_rows == 15

    lake.commit(_stage(bucket, 1, FILES[:1]), final, "run-1", carry_over=True)
    table = _read(bucket)
    assert sorted(zip(table["file"].to_pylist(), table["version"].to_pylist(), strict=True))[::5] == [
        ("shard-0000.parquet", 1),
        ("shard-0000.parquet", 1),
        ("shard-0001.parquet", 0),
        ("shard-0002.parquet", 0),
    ]
    assert lake.partition_file(final, "shard-0001.parquet") == f"{final}/shard-0001.parquet"
    assert "/_files/run-1-" in lake.partition_file(final, "shard-0000.parquet")


def test_lake_files_prints_what_a_reader_should_read(bucket, s3_endpoint, capsys, monkeypatch):
    """``usage-billing lake files``: the manifest's files, not the killed or replaced commits' beside
    them; configured here by Beam's flags alone; an unknown dataset or option is one line."""
    from pipelines.cli import main

    final = _final(bucket)
    lake.commit(_stage(bucket, 1), final, "run-1")
    lake.commit(_stage(bucket, 2, FILES[:2]), final, "run-2")
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name)
    use_filesystem_options([])
    flags = ["--", f"--s3_endpoint_url={s3_endpoint}", "--s3_access_key_id=test",
             "--s3_secret_access_key=test", "--s3_region_name=us-east-1"]  # fmt: skip
    root = ["--lake", f"{bucket.root}/lake"]
    capsys.readouterr()
    assert main([*root, "lake", "files", "events", "--date", "2026-03-02", *flags]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == lake.list_files(final) and len(printed) == 2
    assert all("/_files/run-2-" in p for p in printed)
    assert len([p for p, _, _ in bucket.under(f"{final}/") if p.endswith(".parquet")]) == 5  # run-1's kept

    assert main([*root, "lake", "files", "evnets", *flags]) == 2
    assert "no dataset 'evnets'" in capsys.readouterr().err
    assert main([*root, "lake", "files", "events", "--dte", "2026-03-02", *flags]) == 2
    assert "unknown option '--dte'" in capsys.readouterr().err


def test_a_file_too_large_for_one_copy_part_is_committed_whole(bucket):  # type: ignore[no-untyped-def]
    """A staged file over 8 MB (boto3 would copy it in parts, which not every S3-compatible server
    answers as boto3 expects) arrives in the partition byte for byte."""
    staged = f"{bucket.root}/lake/_staging/big/events/date=2026-03-02"
    body = os.urandom(9 << 20)
    bucket.put(f"{staged}/shard-0000.parquet", body)
    lake.commit(staged, _final(bucket), "big")
    (stored,) = lake.list_files(_final(bucket))
    assert bucket.get(stored) == body
