"""Ingest: landing files -> validated, deduplicated lake partitions, plus quarantine and run counts.

    usage-billing events ingest --date 2026-03-02
    usage-billing events ingest --from 2026-02-01 --to 2026-02-28 -- --direct_num_workers=1

Elements are Arrow tables: one per Parquet row group or JSON chunk, regrouped by (event date, dedup
shard). Between the read and the lake write, rows are in ``INGEST_SCHEMA`` (the columns of few
values as dictionary arrays: cheaper to read, sort, spill and compare); the lake gets plain text.
Every output file is written from ``process`` after a GroupByKey into the run's staging
folder (portable to runners that drop ``finish_bundle`` output); the driver then checks conservation
(rows read = clean + quarantined + duplicates, per landing date) and commits the partitions.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections.abc import Callable, Iterable

import apache_beam as beam
import numpy as np
import pyarrow as pa

from pipelines import lake
from pipelines.ingest.commit import (
    JOURNAL,
    STEP,
    IngestResult,
    check_conservation,
    collect,
    finish,
    other_files_quarantine,
    recover_runs,
)
from pipelines.ingest.datasets import DATASETS, EVENTS, OUTCOMES, Dataset
from pipelines.ingest.dedup import dedup_shard, sub_shard_parts
from pipelines.ingest.hashing import sub_shard_segments, with_hash
from pipelines.ingest.options import IngestFlags, IngestOptions
from pipelines.ingest.outputs import ConcatQuarantine, StageQuarantine, StageStats
from pipelines.ingest.parquet_files import read_parquet_unit
from pipelines.ingest.readers import (
    LandingFileChanged,
    RawChunk,
    file_kind,
    read_json_file,
    source_name,
    whole_file,
)
from pipelines.ingest.stats import MergeStats, by_landing, merge, new_stats, per_landing, reason_counts
from pipelines.ingest.units import (
    LakeShard,
    ReadUnit,
    dedup_window,
    index_file,
    not_read,
    read_units,
    require_landing,
    shard_file,
    sub_shards,
)
from pipelines.ingest.validate import Rules, validate
from pipelines.ingest.validate_outcomes import validate_outcomes
from pipelines.runtime import faults
from pipelines.runtime.context import RunContext, split_argv
from pipelines.runtime.dates import dates_of
from pipelines.runtime.options import (
    CLEAN,
    QUARANTINE,
    STATS,
    on_dask,
    run_pipeline,
    split,
)
from pipelines.runtime.staging import new_run_id
from pipelines.warehouse.binding import require_lake
from pipelines.warehouse.locks import step_lock
from schemas.events import QUARANTINE_SCHEMA, conform

log = logging.getLogger(__name__)


# -- stats ---------------------------------------------------------------------------------------


# -- DoFns ---------------------------------------------------------------------------------------


# Rows of one sub-shard inside a spill file, (sub, path, first byte, end byte): what travels through the
# shuffle instead of the rows, a plain tuple every runner's coder carries unchanged. On Dask the rows
# travel themselves as (sub, lake.CarriedSegment): kept as they are within a worker, an IPC stream when
# Dask moves them to another.
SpillRef = tuple[int, str, int, int]


class ReadAndValidate(beam.DoFn):
    """One read unit -> clean rows spilled to the run's staging folder and refs to them keyed by shard,
    quarantine rows, counts. Spilling keeps the shuffle to small references (``lake.write_ipc_segments``:
    one byte range per sub-shard, read back alone).
    """

    def __init__(
        self,
        rules: Rules,
        shards: int,
        subs: int,
        stage_root: str,
        dataset: Dataset = EVENTS,
        carry: bool = False,
    ) -> None:
        self.rules = rules
        self.shards, self.subs = shards, subs
        self.spill_root = lake.join(stage_root, "_spill")
        self.dataset = dataset
        self.carry = carry  # the segments travel in memory (lake.CarriedSegment), not spilled

    def process(self, unit: ReadUnit):
        landing = dt.date.fromisoformat(unit.landing_date)
        name = source_name(unit.path)
        kind = file_kind(unit.path)
        ds = self.dataset
        chunks: Iterable[RawChunk]
        if unit.not_a_file:
            chunks = [
                whole_file(
                    landing, name, "not_a_regular_file", f"{unit.not_a_file}: only regular files are read", ds
                )
            ]
        elif kind == "parquet":
            chunks = [read_parquet_unit(unit.path, unit.row_group, landing, unit.listed, ds)]
        elif kind == "json":
            chunks = read_json_file(unit.path, landing, unit.listed, ds)
        else:
            chunks = [
                whole_file(landing, name, "unsupported_format", "expected .parquet, .jsonl[.gz] or .json", ds)
            ]
        unit_key = hashlib.sha1(f"{unit.path}#{unit.row_group}".encode(errors="surrogateescape")).hexdigest()[
            :20
        ]
        stats = new_stats(files=1 if unit.first else 0)
        for i, chunk in enumerate(chunks):
            check = validate_outcomes if ds.name == OUTCOMES.name else validate
            clean, quarantine = check(chunk, landing, name, self.rules)
            stats = merge(stats, new_stats(rows_read=chunk.rows_read, quarantined=reason_counts(quarantine)))
            if quarantine.num_rows:
                yield QUARANTINE, (unit.landing_date, quarantine)
            table, segments = sub_shard_segments(with_hash(clean, ds), self.shards, self.subs)
            rows = [(o, n) for _, _, o, n in segments]
            if rows and self.carry:
                carried = lake.carried_segments(table, rows)
                for (shard, sub, _, _), part in zip(segments, carried, strict=True):
                    yield CLEAN, (shard, (sub, part))
            elif rows:
                path = lake.join(self.spill_root, f"{unit_key}-{i:04d}.arrow")
                ranges = lake.write_ipc_segments(path, table, rows)
                for (shard, sub, _, _), (first, end) in zip(segments, ranges, strict=True):
                    yield CLEAN, (shard, (sub, path, first, end))
        yield STATS, (unit.landing_date, stats)


class DedupAndStage(beam.DoFn):
    """One shard of the run -> shard files (and their id index) staged for commit, counts, conflicts."""

    def __init__(
        self,
        lake_root: str,
        stage_root: str,
        window: list[dt.date],
        shards: int,
        subs: int,
        dataset: Dataset = EVENTS,
    ) -> None:
        self.lake_root = lake_root
        self.stage_root = stage_root
        self.window = window
        self.shards, self.subs = shards, subs
        self.dataset = dataset

    def process(self, element):
        """Deduplicate the shard one sub-shard at a time, appending each piece's new rows to the
        shard file of their event date (after the rows that file already held)."""
        shard, refs = element
        subs = self.subs
        existing = LakeShard(self.lake_root, shard, self.window, self.dataset)
        files: dict[dt.date, lake.ParquetAppender] = {}
        hashes: dict[dt.date, list[np.ndarray]] = {}
        try:
            for sub, parts in sub_shard_parts(refs, remote=not lake.is_local(self.stage_root)):
                existing.sub = (sub, subs, self.shards)
                result = dedup_shard(parts, existing, self.dataset)
                del parts
                for day, table in result.writes.items():
                    if day not in files:
                        files[day], hashes[day] = self._open(existing, day, shard)
                    files[day].write(table)
                    hashes[day].append(result.write_hashes[day])
                for landing, stats in per_landing(result):
                    yield STATS, (landing, stats)
                if result.conflicts.num_rows:
                    for landing, rows in by_landing(result.conflicts, "landing_date"):
                        yield QUARANTINE, (landing, rows)
        finally:
            for writer in files.values():
                writer.close()
        for day, parts_h in hashes.items():
            folder = lake.partition(self.stage_root, self.dataset.name, day)
            # Each part is sorted already: a stable sort (timsort) merges the runs, 4x a quicksort.
            merged = np.sort(np.concatenate(parts_h), kind="stable")
            lake.write_npy(lake.join(folder, index_file(shard)), merged)
        faults.checkpoint("ingest.staged")

    def _open(
        self, existing: LakeShard, day: dt.date, shard: int
    ) -> tuple[lake.ParquetAppender, list[np.ndarray]]:
        """The staged shard file of ``day``, starting with the rows the lake already holds for it (a
        file written before a column existed gets it as nulls)."""
        ds = self.dataset
        folder = lake.partition(self.stage_root, ds.name, day)
        writer = lake.ParquetAppender(lake.join(folder, shard_file(shard)), ds.ingest, stored=ds.lake)
        if day not in existing.dates():
            return writer, []
        current = lake.open_parquet(existing.path(day), read_dictionary=list(ds.low_cardinality))
        for i in range(current.metadata.num_row_groups):  # one row group at a time
            writer.write(conform(current.read_row_group(i), ds.ingest))
        return writer, [existing.all_hashes(day)]


class IngestEvents(beam.PTransform):
    """Read units -> deduplicated shard files in the run's staging folder, and per landing date its
    quarantined rows (``"quarantine"``: (landing date, table)) and its counts (``"stats"``: (landing
    date, stats)). The shard files are written by the dedup workers (the events are too many to travel
    through the pipeline); the quarantine and the stats are staged by the caller (``run``)."""

    def __init__(
        self,
        rules: Rules,
        shards: int,
        lake_root: str,
        stage_root: str,
        window: list[dt.date],
        subs: int = 1,
        dataset: Dataset = EVENTS,
    ) -> None:
        super().__init__()
        self.rules, self.shards, self.lake_root, self.stage_root = rules, shards, lake_root, stage_root
        self.window, self.subs, self.dataset = window, subs, dataset

    def expand(self, units):
        carry = on_dask(units.pipeline.options)  # the clean rows travel themselves, not spilled
        read = split(
            units
            | "ReadAndValidate"
            >> beam.ParDo(
                ReadAndValidate(self.rules, self.shards, self.subs, self.stage_root, self.dataset, carry)
            ),
            "Read",
            (CLEAN, QUARANTINE, STATS),
        )
        dedup = split(
            read[CLEAN]
            | "GroupByShard" >> beam.GroupByKey()
            | "DedupAndStage"
            >> beam.ParDo(
                DedupAndStage(
                    self.lake_root, self.stage_root, self.window, self.shards, self.subs, self.dataset
                )
            ),
            "Dedup",
            (QUARANTINE, STATS),
        )
        quarantine = (
            (read[QUARANTINE], dedup[QUARANTINE])
            | "FlattenQuarantine" >> beam.Flatten()
            | "GroupQuarantine" >> beam.GroupByKey()
            | "ConcatQuarantine" >> beam.ParDo(ConcatQuarantine())
        )
        stats = (
            (read[STATS], dedup[STATS])
            | "FlattenStats" >> beam.Flatten()
            | "MergeStats" >> beam.CombinePerKey(MergeStats())
        )
        return {"quarantine": quarantine, "stats": stats}


# -- driver --------------------------------------------------------------------------------------


READ_ATTEMPTS = 3  # a landing file that changes while it is read: the run is read again from the listing


Prepare = Callable[[], dict[dt.date, pa.Table]]


def run(
    context: RunContext,
    dates: list[dt.date],
    options: IngestOptions | None = None,
    prepare: Prepare | None = None,
) -> IngestResult:
    """One ingest run of the landing ``dates``, under the lake's ingest lock (one ingest per lake at a
    time: late events of two landing dates can rewrite the same past partition).

    ``prepare`` (a replay of quarantined rows) runs under the lock before the landing folder is read:
    it writes the files to read and returns, per landing date, the quarantine rows that stay as they
    are; the date's new quarantine is those rows plus the rows that fail again."""
    options = options or IngestOptions()
    engine, root = context.engine, context.lake
    if prepare is None:  # a replay writes the files it reads first
        require_landing(options.landing or context.settings.landing, dates)
    with step_lock(engine, lake.ingest_lock(root)):
        require_lake(engine, root, "events ingest", create=lambda: lake.shard_count(root, options.shards))
        recovered = recover_runs(root, engine)
        kept = prepare() if prepare is not None else {}
        for attempt in range(1, READ_ATTEMPTS + 1):
            try:
                result = _ingest(context, options, dates, kept)
                break
            except LandingFileChanged as exc:  # nothing was committed: list and read again
                if attempt == READ_ATTEMPTS:
                    raise LandingFileChanged(
                        f"{exc} ({READ_ATTEMPTS} attempts); rerun once the producer has finished writing"
                    ) from None
                log.warning("%s; reading the landing folder again", exc)
    result.changed_dates = sorted(set(result.changed_dates) | set(recovered))
    return result


def main(argv: list[str] | None = None) -> IngestResult:
    """``run`` from an argument list (a script, a test): settings, date and ingest flags, Beam's flags."""
    settings, flags, beam_args = split_argv(argv, IngestFlags)
    dates = dates_of(flags)
    options = IngestOptions.from_flags(flags)
    with RunContext.open(settings, beam_args) as context:
        return run(context, dates, options)


def _ingest(context: RunContext, opts: IngestOptions, dates: list[dt.date], kept: dict) -> IngestResult:
    catalog, engine, root = context.catalog, context.engine, context.lake
    landing = opts.landing or context.settings.landing
    run_id = opts.run_id or new_run_id("ingest")
    started = dt.datetime.now(dt.UTC)
    shards = lake.shard_count(root, opts.shards)
    rules = Rules.for_catalog(
        catalog, lateness_days=opts.lateness_days, max_tokens_per_event=opts.max_tokens_per_event
    )
    units = read_units(landing, dates)
    faults.checkpoint("ingest.listed")
    by_dataset = {d.name: [u for u in units if u.dataset == d.name] for d in DATASETS}
    stage = lake.open_stage(root, run_id, STEP)
    try:
        # One pipeline per dataset, one after the other: usage events always (an empty landing folder
        # still counts), task outcomes when there are any. Two IngestEvents in one pipeline lose one's
        # staged counts on Beam's DaskRunner (tests/runtime/test_dask_runner.py).
        for ds in DATASETS:
            if ds.name != EVENTS.name and not by_dataset[ds.name]:
                continue
            name = ds.label.capitalize()
            subs = sub_shards(by_dataset[ds.name], shards)
            with run_pipeline(context.beam_options(threads=True)) as p:
                ingested = (
                    p
                    | f"Read{name}Units" >> beam.Create(by_dataset[ds.name])
                    | f"Ingest{name}"
                    >> IngestEvents(rules, shards, root, stage, dedup_window(dates, rules), subs, ds)
                )
                quarantine = ingested["quarantine"]
                _ = quarantine | f"Stage{name}Quarantine" >> beam.ParDo(StageQuarantine(stage, ds))
                _ = ingested["stats"] | f"Stage{name}Stats" >> beam.ParDo(StageStats(stage, ds))
        result = collect(run_id, stage, dates)
        check_conservation(result)
        for landing_date, entries in not_read(landing, dates).items():
            result.stats[landing_date]["not_read"] = entries
        for day in dates:  # the quarantine of a landing date is replaced whole, even by an empty one
            staged = lake.partition(stage, lake.QUARANTINE, day)
            carried = kept[day] if day in kept else other_files_quarantine(root, day, units)
            if carried.num_rows:  # rows of files this run did not read (or a replay did not take) stay
                lake.write_parquet(lake.join(staged, "kept.parquet"), carried)
            if not lake.folder_exists(staged):
                lake.write_parquet(lake.join(staged, "part-0000.parquet"), QUARANTINE_SCHEMA.empty_table())
        journal = {
            "run_id": run_id,
            "started_at": started.isoformat(),
            "finished_at": dt.datetime.now(dt.UTC).isoformat(),
            "landing_dates": [d.isoformat() for d in dates],
            "changed_dates": [d.isoformat() for d in result.changed_dates],
            "stats": result.stats,
            "outcome_changed_dates": [d.isoformat() for d in result.outcome_changed_dates],
            "outcome_stats": result.outcome_stats,
        }
        # From here on the run is decided: whatever stops it, the next run finishes this commit.
        lake.write_json(lake.join(stage, JOURNAL), journal)
    except BaseException:
        lake.discard(stage)
        raise
    finish(root, engine, stage, journal)
    return result


# -- commit: a journal makes the run's partitions and its warehouse rows all-or-nothing -----------
