"""A Dask worker's allocator: Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536, which
makes every large NumPy array a fresh mapping the kernel faults in page by page. The worker plugin
(``runtime.dask.large_blocks_reused``) gives such a process thresholds under which those arrays reuse
memory; a process that Dask did not start so, or whose operator chose a threshold, is left alone."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipelines.runtime import dask

# A child process: 400 arrays of 2 MiB made and freed in turn, then its minor page faults.
FAULTS = """
import resource, sys
import numpy as np
changed = None
if sys.argv[1] == "reuse":
    from pipelines.runtime import dask
    changed = dask.large_blocks_reused()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(400):
    np.ones(1 << 18)
print(changed, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(env: dict[str, str], mode: str) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", FAULTS, mode], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_worker_started_by_dask_reuses_large_blocks_and_others_are_left_alone(monkeypatch):
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    daskish = {**base, "MALLOC_TRIM_THRESHOLD_": "65536"}
    pages = 400 * (2 << 20) // 4096
    assert _faults(daskish, "as-is")[1] > pages // 2  # every array its own mapping, faulted in again
    changed, reused = _faults(daskish, "reuse")
    assert changed == "True" and reused < pages // 20
    # Not started by Dask, or the operator's own thresholds: nothing changed (here, in this process).
    for name in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"):
        monkeypatch.delenv(name, raising=False)
    assert dask.large_blocks_reused() is False
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    assert dask.large_blocks_reused() is False
    assert 2 << 20 < dask.MMAP_THRESHOLD <= dask.TRIM_THRESHOLD  # the arrays above are kept
