"""Start-up of a process that runs one command and exits (the command line), and the allocator
settings a Dask worker takes too (``runtime.dask.WorkerSettings``)."""

from __future__ import annotations

import ctypes
import gc

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
