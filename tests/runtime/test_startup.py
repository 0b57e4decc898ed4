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
