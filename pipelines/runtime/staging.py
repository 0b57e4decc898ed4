"""Staged runs: a run's id and its staging folder in the lake.

Every step that writes the lake (ingest, aggregate, meter, replay) names its run the same way and
writes into ``<lake>/_staging/<run_id>/`` until it commits (``pipelines.lake.commit``).
"""

from __future__ import annotations

import datetime as dt
import uuid

from pipelines import lake


def new_run_id(prefix: str) -> str:
    """``<prefix>-<UTC time>-<8 hex>``: sortable by start, unique across machines."""
    return f"{prefix}-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


def fresh_stage(lake_root: str, run_id: str, step: str) -> str:
    """The staging folder of this run of ``step``, after discarding those killed runs of it left.

    Call it holding the step's lock: then no running run of the step owns one of those folders."""
    for dead in lake.stages_of(lake_root, step):
        lake.discard(dead)
    return lake.open_stage(lake_root, run_id, step)
