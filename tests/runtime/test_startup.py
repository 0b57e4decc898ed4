"""What ``usage-billing`` does at start-up, before its command: collection deferred to the first
pipeline, glibc's allocator told to keep the memory it reuses."""

from __future__ import annotations

import apache_beam as beam

from pipelines.runtime.options import pipeline_options, run_pipeline


def test_the_command_line_collects_garbage_again_once_its_pipeline_starts():
    """``usage-billing`` turns the cyclic collector off while modules load; the first pipeline turns
    it back on, with what start-up made frozen (later full passes skip it)."""
    import gc

    from pipelines.runtime.startup import defer_collection_until_work

    assert gc.isenabled()
    try:
        defer_collection_until_work()
        assert not gc.isenabled()
        seen = []
        with run_pipeline(pipeline_options(["--direct_num_workers=1"])) as p:
            seen.append((gc.isenabled(), gc.get_freeze_count()))
            _ = p | beam.Create(range(3)) | beam.Map(lambda v: v)
        enabled, frozen = seen[0]
        assert enabled and frozen > 0
        with run_pipeline(pipeline_options(["--direct_num_workers=1"])) as p:  # once only
            assert gc.get_freeze_count() <= frozen  # nothing more set aside (some freed since)
            _ = p | beam.Create(range(3)) | beam.Map(lambda v: v)
    finally:
        gc.unfreeze()
        gc.enable()


def test_the_command_line_tunes_glibcs_allocator_where_there_is_one():
    import platform

    from pipelines.runtime.startup import (
        M_MMAP_THRESHOLD,
        M_TRIM_THRESHOLD,
        MMAP_THRESHOLD,
        TRIM_THRESHOLD,
        tune_allocator,
    )

    calls = []

    class Glibc:
        def mallopt(self, param: int, value: int) -> int:
            calls.append((param, value))
            return 1

    assert tune_allocator(Glibc())
    assert calls == [(M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD)]
    assert not tune_allocator(object())  # not glibc: left as it is
    if platform.libc_ver()[0] == "glibc":  # this machine's C library takes both values
        assert tune_allocator()


def test_a_dask_worker_gets_the_command_lines_allocator_settings(monkeypatch):
    from pipelines.runtime import dask
    from pipelines.runtime.startup import WORKER_DECAY_MS, WORKER_TRIM_THRESHOLD

    calls: list = []
    monkeypatch.setattr(dask, "tune_allocator", lambda **kw: calls.append(("allocator", kw)) or True)
    monkeypatch.setattr(dask, "arrow_memory_pool", lambda ms: calls.append(("arrow pool", ms)) or "jemalloc")
    monkeypatch.setattr(dask, "set_filesystem_options", lambda options: calls.append("filesystems"))
    dask.WorkerSettings({"s3_region_name": "us-east-1"}).setup(worker=None)
    assert calls == [
        ("allocator", {"trim_threshold": WORKER_TRIM_THRESHOLD}),
        ("arrow pool", WORKER_DECAY_MS),
        "filesystems",
    ]


def test_arrows_memory_comes_from_jemalloc_unless_told_otherwise(monkeypatch):
    from pipelines.runtime.startup import WORKER_DECAY_MS, arrow_memory_pool

    class Arrow:  # pyarrow's pool functions, recorded
        def __init__(self, jemalloc: bool) -> None:
            self.jemalloc, self.calls, self.pool = jemalloc, [], "mimalloc"

        def jemalloc_set_decay_ms(self, ms: int) -> None:
            if not self.jemalloc:
                raise NotImplementedError("built without jemalloc")
            self.calls.append(("decay", ms))

        def jemalloc_memory_pool(self) -> str:
            if not self.jemalloc:
                raise NotImplementedError("built without jemalloc")
            return "jemalloc"

        def set_memory_pool(self, pool: str) -> None:
            self.pool = pool

        def default_memory_pool(self):
            return type("Pool", (), {"backend_name": self.pool})()

    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    arrow = Arrow(jemalloc=True)
    assert arrow_memory_pool(WORKER_DECAY_MS, arrow) == "jemalloc"
    assert arrow.calls == [("decay", WORKER_DECAY_MS)]
    command_line = Arrow(jemalloc=True)
    assert arrow_memory_pool(None, command_line) == "jemalloc" and command_line.calls == []  # Arrow's decay
    assert arrow_memory_pool(WORKER_DECAY_MS, Arrow(jemalloc=False)) == "mimalloc"  # a build without it
    assert arrow_memory_pool(None, Arrow(jemalloc=False)) == "mimalloc"  # the command line's call too
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "system")
    chosen = Arrow(jemalloc=True)
    assert arrow_memory_pool(WORKER_DECAY_MS, chosen) == "mimalloc" and chosen.calls == []  # the operator's
