"""Replay quarantined rows whose cause has been fixed (a price added, an account loaded, a model put
in the catalog): they go through ingest again, with its row checks, dedup, counts and recompute.

    usage-billing events replay --date 2026-03-02 [--reason no_price]

The quarantined rows of one landing date (optionally only those carrying one reason code) are written
back as JSON lines, one file per original file (``<name>.replay.jsonl``, so the lake's lineage says
where a row first came from and that it was replayed), into a staging folder of the lake, and ingested
as that landing date under the ingest lock. The date's quarantine afterwards holds the rows the replay
did not take plus the replayed rows that fail again; the run is a row of ``ingest_runs`` of its own
(rows read = clean + quarantined + duplicates, as for every run). A row quarantined for its whole file
(an unreadable file, an entry that is not a regular file) has no row to replay: land the file again.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from pipelines import lake
from pipelines.errors import UsageBillingError
from pipelines.ingest import events as ingest
from pipelines.ingest.commit import committed_quarantine
from pipelines.ingest.options import IngestOptions
from pipelines.runtime.context import RunContext
from pipelines.runtime.staging import new_run_id

STEP = "events replay"


@dataclass
class Replay:
    selected: int = 0  # quarantined rows replayed
    whole_file: int = 0  # matching rows that stand for a whole file: not replayable
    kept: int = 0  # quarantine rows left as they were


def _matches(reasons: pa.ChunkedArray, reason: str | None) -> pa.ChunkedArray:
    if reason is None:
        return pc.is_valid(reasons)
    listed = pc.binary_join_element_wise(",", reasons, ",", "")
    return pc.match_substring(listed, f",{reason},")


def _write(path: str, data: bytes) -> None:
    if lake.is_local(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)
        return
    with lake.create_object(path) as handle:
        handle.write(data)


def run(context: RunContext, day: dt.date, reason: str | None = None) -> tuple[ingest.IngestResult, Replay]:
    """Replay the quarantined rows of landing date ``day``; returns (IngestResult, Replay)."""
    if reason is not None and not reason.strip():
        raise UsageBillingError("--reason must name a reason code, e.g. no_price")
    run_id = new_run_id("replay")
    source_run = f"{run_id}-source"  # a staging folder of its own, read as a landing root
    landing_root = lake.staging(context.lake, source_run)
    summary = Replay()

    def prepare() -> dict[dt.date, pa.Table]:  # under the ingest lock
        for dead in lake.stages_of(context.lake, STEP):
            lake.discard(dead)
        rows = committed_quarantine(context.lake, day)
        if rows.num_rows == 0:
            raise UsageBillingError(f"landing date {day} has no quarantined row to replay")
        matching = pc.fill_null(_matches(rows["reason"], reason), False)
        replayable = pc.and_(matching, pc.and_(pc.is_valid(rows["raw"]), pc.is_valid(rows["row_number"])))
        summary.whole_file = pc.sum(pc.and_(matching, pc.invert(replayable)).cast(pa.int64())).as_py() or 0
        chosen = rows.filter(replayable)
        if chosen.num_rows == 0:
            what = f" with reason {reason}" if reason else ""
            raise UsageBillingError(
                f"landing date {day} has no replayable quarantined row{what} "
                f"({summary.whole_file} stand for whole files: land those files again)"
            )
        lake.open_stage(context.lake, source_run, STEP)
        chosen = chosen.sort_by([("source_file", "ascending"), ("row_number", "ascending")])
        for name in pc.unique(chosen["source_file"]).to_pylist():
            lines = chosen.filter(pc.equal(chosen["source_file"], name))["raw"]
            body = ("\n".join(lines.to_pylist()) + "\n").encode("utf-8", "surrogatepass")
            _write(lake.join(landing_root, day.isoformat(), f"{name}.replay.jsonl"), body)
        summary.selected = chosen.num_rows
        kept = rows.filter(pc.invert(replayable))
        summary.kept = kept.num_rows
        return {day: kept}

    try:
        options = IngestOptions(run_id=run_id, landing=landing_root)
        result = ingest.run(context, [day], options, prepare=prepare)
    finally:
        lake.discard(landing_root)
    return result, summary
