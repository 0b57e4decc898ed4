"""Start-up of a process that runs one command and exits (the command line), and the allocator
settings a Dask worker takes too (``runtime.dask.WorkerSettings``)."""

from __future__ import annotations

import ctypes
import gc
from typing import Any

import pyarrow

from pipelines.settings import arrow_pool_chosen

_deferred = {"collection": False}


def defer_collection_until_work() -> None:
    """No cyclic garbage collection while modules load. Importing Beam, pyarrow and SQLAlchemy makes
    200k objects that live until the exit, and the collector's full passes over them cost a
    10M-event ingest 0.2-0.3 s before its first row. ``collect_from_here`` (the first pipeline)
    turns collection back on with those objects set aside, so that later full passes skip them."""
    gc.disable()
    _deferred["collection"] = True


def collect_from_here() -> None:
    """Start-up is over: freeze what exists and collect again (only after
    ``defer_collection_until_work``; a no-op otherwise, and after the first call)."""
    if _deferred["collection"]:
        _deferred["collection"] = False
        gc.freeze()
        gc.enable()


# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 4 << 20  # above a 250k-row column of 8-byte values (2 MB)
TRIM_THRESHOLD = 256 << 20


def tune_allocator(libc: object | None = None, trim_threshold: int = TRIM_THRESHOLD) -> bool:
    """glibc's malloc (numpy's arrays) keeps blocks up to 4 MiB on its heap and up to 256 MiB of free
    heap before giving it back. By default it maps a block of 2 MB (a 250k-row column) fresh from
    the kernel and unmaps it when freed, and the kernel zeroes every page again on the next
    touch: a 10M-event ingest took 350k page faults instead of 110k, 0.4-0.5 s of system time.
    Larger blocks stay mapped: with 32 MiB, the heap kept what a 10M-event metering run freed (peak
    823-837 -> 977-1005 MB; with 4 MiB 895-901 MB, ingest's speed the same).
    ``trim_threshold``: the free heap kept (a Dask worker keeps less, ``WORKER_TRIM_THRESHOLD``).
    Returns whether the C library took the settings (False where it is not glibc)."""
    try:
        mallopt = (libc if libc is not None else ctypes.CDLL(None)).mallopt  # type: ignore[attr-defined]  # a C function ctypes finds at run time
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, trim_threshold))


# A Dask worker holds more at once (the tasks' results) and runs for days: less free heap kept.
WORKER_TRIM_THRESHOLD = 64 << 20
WORKER_DECAY_MS = 250  # a worker's jemalloc keeps freed pages this long for the next allocation (and as
# long again marked free for the kernel to take); the command line keeps Arrow's own setting


def arrow_memory_pool(decay_ms: int | None = None, arrow: Any = None) -> str:
    """Arrow's allocations from jemalloc rather than Arrow's default (mimalloc); ``decay_ms``: how long
    freed pages are kept (None: Arrow's own setting). Returns the pool's name. mimalloc hands large
    freed blocks back to the kernel within milliseconds: in a Dask worker the task thread spent 5 s of
    a 25 s ingest of 10M events faulting its buffers in fresh (1.4 s with jemalloc), and in the command
    line a day's run-day took 98-99 CPU s against 90-92 with jemalloc, its gate 17.5 s against 12.1,
    its largest process 3.7 GB against 3.1. A process started with ``ARROW_DEFAULT_MEMORY_POOL``
    keeps what it was given, and so does a pyarrow built without jemalloc."""
    pa = arrow if arrow is not None else pyarrow
    if arrow_pool_chosen():
        return str(pa.default_memory_pool().backend_name)
    try:
        if decay_ms is not None:
            pa.jemalloc_set_decay_ms(decay_ms)
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except NotImplementedError:  # built without jemalloc
        pass
    return str(pa.default_memory_pool().backend_name)
