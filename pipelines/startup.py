"""Start-up of a process that runs one command and exits (the command line)."""

from __future__ import annotations

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
