"""Finishing an ingest run: the staged partitions committed to the lake with a journal (so a killed run
is finished or undone by the next), the warehouse's record of the run and the recompute queue, and
the conservation check over what the workers counted."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Engine, delete, insert

from pipelines import lake
from pipelines.errors import DataQualityError
from pipelines.ingest.datasets import OUTCOMES
from pipelines.ingest.readers import source_name
from pipelines.ingest.stats import new_stats
from pipelines.ingest.units import (
    ReadUnit,
)
from pipelines.runtime import faults
from schemas.events import QUARANTINE_SCHEMA
from schemas.warehouse import EffectivenessQueue, IngestRun, RecomputeQueue

log = logging.getLogger(__name__)
STEP = "events ingest"
JOURNAL = "_ingest_commit.json"  # written once the run is checked: its commit must be completed


@dataclass
class IngestResult:
    run_id: str
    stats: dict[str, dict]  # landing date -> counts (usage events)
    changed_dates: list[dt.date] = field(default_factory=list)  # event dates whose partition changed
    outcome_stats: dict[str, dict] = field(default_factory=dict)  # landing date -> counts (task outcomes)
    outcome_changed_dates: list[dt.date] = field(default_factory=list)  # completion dates changed

    def total(self, key: str, outcomes: bool = False) -> int:
        """A count over the landing dates: of usage events, or with ``outcomes`` of task outcomes."""
        stats = self.outcome_stats if outcomes else self.stats
        return sum(s[key] if not isinstance(s[key], dict) else sum(s[key].values()) for s in stats.values())


def committed_quarantine(lake_root: str, day: dt.date) -> pa.Table:
    """The committed quarantine of landing date ``day`` (an empty table where there is none)."""
    files = lake.list_files(lake.partition(lake_root, lake.QUARANTINE, day))
    return (
        pa.concat_tables([lake.read_parquet(f) for f in files]) if files else QUARANTINE_SCHEMA.empty_table()
    )


def other_files_quarantine(lake_root: str, day: dt.date, units: list[ReadUnit]) -> pa.Table:
    """The landing date's quarantine rows of files this run did not read: a rerun with fewer files (a
    landing folder partly restored, another landing root by mistake) replaces only what it read."""
    old = committed_quarantine(lake_root, day)
    if old.num_rows == 0:
        return QUARANTINE_SCHEMA.empty_table()
    read = pa.array(
        sorted({source_name(u.path) for u in units if u.landing_date == day.isoformat()}), pa.string()
    )
    return old.filter(pc.invert(pc.is_in(old["source_file"], value_set=read))).cast(QUARANTINE_SCHEMA)


def finish(lake_root: str, engine: Engine, stage: str, journal: dict) -> None:
    """Swap in every staged partition still in staging, then write the run's warehouse rows.

    Idempotent: a partition already swapped is no longer in staging, and the warehouse rows are
    replaced by run id; so finishing a journal that a killed run left behind completes that run.
    """
    run_id = journal["run_id"]
    for dataset, days in ((lake.EVENTS, journal["changed_dates"]), (lake.OUTCOMES, outcome_dates(journal))):
        for day in days:
            staged = lake.partition(stage, dataset, day)
            if lake.folder_exists(staged):
                lake.commit(staged, lake.partition(lake_root, dataset, day), run_id, carry_over=True)
                faults.checkpoint("lake.commit")
    for day in journal["landing_dates"]:
        staged = lake.partition(stage, lake.QUARANTINE, day)
        if lake.folder_exists(staged):
            lake.commit(staged, lake.partition(lake_root, lake.QUARANTINE, day), run_id)
    now = dt.datetime.now(dt.UTC)
    counted = [(lake.EVENTS, day, s) for day, s in sorted(journal["stats"].items())]
    counted += [(lake.OUTCOMES, day, s) for day, s in sorted(journal.get("outcome_stats", {}).items())]
    with engine.begin() as conn:
        conn.execute(delete(IngestRun.__table__).where(IngestRun.run_id == run_id))
        conn.execute(
            insert(IngestRun.__table__),
            [
                {
                    "run_id": run_id,
                    "dataset": dataset,
                    "landing_date": dt.date.fromisoformat(day),
                    "started_at": dt.datetime.fromisoformat(journal["started_at"]),
                    "finished_at": dt.datetime.fromisoformat(journal["finished_at"]),
                    "files": s["files"],
                    "rows_read": s["rows_read"],
                    "clean": s["clean"],
                    "quarantined": sum(s["quarantined"].values()),
                    "duplicates": s["duplicates"],
                    "quarantined_by_reason": s["quarantined"],
                    "late_rows": s["late"],
                    "status": "ok",
                    "not_read": s.get("not_read") or None,
                }
                for dataset, day, s in counted
            ],
        )
        queue = RecomputeQueue.__table__
        conn.execute(delete(queue).where(queue.c.run_id == run_id))
        if journal["changed_dates"]:
            conn.execute(
                insert(queue),
                [
                    {"day": dt.date.fromisoformat(d), "run_id": run_id, "queued_at": now}
                    for d in journal["changed_dates"]
                ],
            )
        queue_effectiveness(conn, run_id, journal["changed_dates"], outcome_dates(journal), now)
    lake.discard(stage)


def outcome_dates(journal: dict) -> list[str]:
    """The completion dates whose outcome partition a run changed (none in a journal of an older run)."""
    return list(journal.get("outcome_changed_dates", []))


def queue_effectiveness(conn, run_id: str, event_dates, outcome_dates_, now: dt.datetime) -> None:
    """Queue the dates whose requests or outcomes changed for the effectiveness step (same transaction)."""
    queue = EffectivenessQueue.__table__
    conn.execute(delete(queue).where(queue.c.run_id == run_id))
    rows = [{"day": dt.date.fromisoformat(d), "dataset": lake.EVENTS} for d in event_dates]
    rows += [{"day": dt.date.fromisoformat(d), "dataset": lake.OUTCOMES} for d in outcome_dates_]
    if rows:
        conn.execute(insert(queue), [{**r, "run_id": run_id, "queued_at": now} for r in rows])


def recover_runs(lake_root: str, engine: Engine) -> list[dt.date]:
    """Finish what killed ingest runs left: half-swapped partitions, journaled commits (rolled
    forward), staging of runs that never reached their journal (discarded). Returns the event dates
    the finished commits changed. Call it holding the ingest lock: no other ingest is running."""
    for dataset in (lake.EVENTS, lake.OUTCOMES, lake.QUARANTINE):
        lake.recover(lake_root, dataset)
    changed: set[dt.date] = set()
    for stage in lake.stages_of(lake_root, STEP):
        if lake.exists(lake.join(stage, JOURNAL)):
            journal = lake.read_json(lake.join(stage, JOURNAL))
            log.warning("finishing the commit of ingest run %s, which stopped part way", journal["run_id"])
            finish(lake_root, engine, stage, journal)
            changed.update(dt.date.fromisoformat(d) for d in journal["changed_dates"])
        else:
            lake.discard(stage)
    return sorted(changed)


def stats_file(stage_root: str, landing: str, dataset=None) -> str:
    """Where a run stages one landing date's counts of one dataset (usage events by default)."""
    prefix = "" if dataset is None or dataset.name == lake.EVENTS else f"{dataset.name}-"
    return lake.join(stage_root, "stats", f"{prefix}{landing}.json")


def collect(run_id: str, stage: str, dates: list[dt.date]) -> IngestResult:
    """The run's counts per landing date (usage events; task outcomes where a date had any) and the
    partitions it staged."""
    stats, outcome_stats = {}, {}
    for day in dates:
        path = stats_file(stage, day.isoformat())
        stats[day.isoformat()] = lake.read_json(path) if lake.exists(path) else new_stats()
        path = stats_file(stage, day.isoformat(), OUTCOMES)
        if lake.exists(path):
            outcome_stats[day.isoformat()] = lake.read_json(path)
    return IngestResult(
        run_id,
        stats,
        lake.partition_dates(stage, lake.EVENTS),
        outcome_stats,
        lake.partition_dates(stage, lake.OUTCOMES),
    )


def check_conservation(result: IngestResult) -> None:
    counted = [("", day, s) for day, s in sorted(result.stats.items())]
    counted += [("outcomes ", day, s) for day, s in sorted(result.outcome_stats.items())]
    for what, day, s in counted:
        accounted = s["clean"] + sum(s["quarantined"].values()) + s["duplicates"]
        if accounted != s["rows_read"]:
            raise DataQualityError(
                f"{what}conservation broken for landing {day}: read {s['rows_read']} rows but "
                f"clean {s['clean']} + quarantined {sum(s['quarantined'].values())} + "
                f"duplicates {s['duplicates']} = {accounted}; nothing was committed"
            )
