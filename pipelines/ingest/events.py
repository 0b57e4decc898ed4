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
import os
import stat
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.options.pipeline_options import PipelineOptions
from sqlalchemy import Engine, delete, insert

from pipelines import lake
from pipelines.errors import DataQualityError, UsageBillingError
from pipelines.ingest.dedup import (
    ShardResult,
    dedup_shard,
    sorted_hashes,
    sub_shard_of,
    sub_shard_segments,
    with_hash,
)
from pipelines.ingest.readers import (
    LandingFileChanged,
    file_kind,
    parquet_units,
    read_json_file,
    read_parquet_unit,
    source_name,
    stamp,
    whole_file,
)
from pipelines.ingest.validate import Rules, validate
from pipelines.runtime import faults
from pipelines.runtime.options import (
    CLEAN,
    QUARANTINE,
    STATS,
    CommonOptions,
    date_range,
    pipeline_options,
    run_pipeline,
    split,
)
from pipelines.warehouse.binding import require_lake
from pipelines.warehouse.engine import make_engine, require_schema
from pipelines.warehouse.locks import step_lock
from schemas.catalog import load_catalog
from schemas.events import INGEST_SCHEMA, LAKE_SCHEMA, LOW_CARDINALITY, QUARANTINE_SCHEMA
from schemas.warehouse import IngestRun, RecomputeQueue

log = logging.getLogger(__name__)


class IngestOptions(CommonOptions, PipelineOptions):  # a direct subclass too: see CommonOptions
    @classmethod
    def _add_argparse_args(cls, parser) -> None:  # type: ignore[no-untyped-def]
        parser.add_argument("--shards", type=int, default=None, help="dedup shards (fixed at lake creation)")
        parser.add_argument("--lateness_days", type=int, default=35, help="oldest accepted event, in days")
        parser.add_argument("--max_tokens_per_event", type=int, default=10_000_000)


# -- stats ---------------------------------------------------------------------------------------


def _stats(**values: object) -> dict:
    base = {"files": 0, "rows_read": 0, "clean": 0, "duplicates": 0, "quarantined": {}, "late": {}}
    base.update(values)
    return base


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, dict):
            merged = dict(out.get(k, {}))
            for kk, vv in v.items():
                merged[kk] = merged.get(kk, 0) + vv
            out[k] = merged
        else:
            out[k] = out.get(k, 0) + v
    return out


class MergeStats(beam.CombineFn):
    def create_accumulator(self) -> dict:
        return _stats()

    def add_input(self, acc: dict, value: dict) -> dict:
        return _merge(acc, value)

    def merge_accumulators(self, accs: Iterable[dict]) -> dict:
        out = _stats()
        for a in accs:
            out = _merge(out, a)
        return out

    def extract_output(self, acc: dict) -> dict:
        return acc


def _reason_counts(quarantine: pa.Table) -> dict[str, int]:
    return dict(_count_by(quarantine["reason"]))


# -- DoFns ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadUnit:
    path: str
    landing_date: str
    row_group: int | None = None  # Parquet row group; None for JSON (the whole file, in chunks)
    first: bool = True  # counts the file once
    listed: tuple[int, int] | None = None  # (size, mtime) at listing: a changed file is never read in part
    not_a_file: str | None = None  # what the entry is instead of a regular file (quarantined, not read)


# Rows of one sub-shard inside a spill file, (sub, path, first batch, end batch): what travels through the
# shuffle instead of the rows. A plain tuple, so every runner's coder carries it unchanged.
SpillRef = tuple[int, str, int, int]
SUB_SHARD_ROWS = 250_000  # rows deduplicated at once: a run splits each lake shard into pieces of this


class ReadAndValidate(beam.DoFn):
    """One read unit -> clean rows spilled to the run's staging folder and refs to them keyed by shard,
    quarantine rows, counts. Spilling keeps the shuffle to small references (Arrow IPC, one record
    batch range per sub-shard, read back alone).
    """

    def __init__(self, rules: Rules, shards: int, subs: int, stage_root: str) -> None:
        self.rules = rules
        self.shards, self.subs = shards, subs
        self.spill_root = lake.join(stage_root, "_spill")

    def process(self, unit: ReadUnit):  # type: ignore[no-untyped-def]
        landing = dt.date.fromisoformat(unit.landing_date)
        name = source_name(unit.path)
        kind = file_kind(unit.path)
        if unit.not_a_file:
            chunks = [
                whole_file(
                    landing, name, "not_a_regular_file", f"{unit.not_a_file}: only regular files are read"
                )
            ]
        elif kind == "parquet":
            chunks = [read_parquet_unit(unit.path, unit.row_group, landing, unit.listed)]
        elif kind == "json":
            chunks = read_json_file(unit.path, landing, unit.listed)
        else:
            chunks = [
                whole_file(landing, name, "unsupported_format", "expected .parquet, .jsonl[.gz] or .json")
            ]
        unit_key = hashlib.sha1(f"{unit.path}#{unit.row_group}".encode(errors="surrogateescape")).hexdigest()[
            :20
        ]
        stats = _stats(files=1 if unit.first else 0)
        for i, chunk in enumerate(chunks):
            clean, quarantine = validate(chunk, landing, name, self.rules)
            stats = _merge(stats, _stats(rows_read=chunk.rows_read, quarantined=_reason_counts(quarantine)))
            if quarantine.num_rows:
                yield QUARANTINE, (unit.landing_date, quarantine)
            table, segments = sub_shard_segments(with_hash(clean), self.shards, self.subs)
            if segments:
                path = lake.join(self.spill_root, f"{unit_key}-{i:04d}.arrow")
                ranges = lake.write_ipc_segments(path, table, [(o, n) for _, _, o, n in segments])
                for (shard, sub, _, _), (first, end) in zip(segments, ranges, strict=True):
                    yield CLEAN, (shard, (sub, path, first, end))
        yield STATS, (unit.landing_date, stats)


def shard_file(shard: int) -> str:
    return f"shard-{shard:04d}.parquet"


def index_file(shard: int) -> str:
    """Sorted id hashes of a shard file; the leading underscore keeps Parquet readers away."""
    return f"_ids-shard-{shard:04d}.npy"


class LakeShard:
    """One shard of the lake in the dedup window. ``sub`` narrows it to one sub-shard of a run (the
    ExistingShard that dedup_shard reads)."""

    def __init__(self, lake_root: str, shard: int, window: list[dt.date]) -> None:
        self.lake_root, self.shard = lake_root, shard
        committed = set(lake.partition_dates(lake_root, lake.EVENTS))
        self._dates = [d for d in window if d in committed and lake.exists(self.path(d))]
        self._hashes: dict[dt.date, np.ndarray] = {}
        self.sub: tuple[int, int, int] | None = None  # (sub, subs, shards)

    def path(self, day: dt.date, name: str | None = None) -> str:
        return lake.join(lake.partition(self.lake_root, lake.EVENTS, day), name or shard_file(self.shard))

    def dates(self) -> list[dt.date]:
        return self._dates

    def all_hashes(self, day: dt.date) -> np.ndarray:
        if day not in self._hashes:
            index = self.path(day, index_file(self.shard))
            self._hashes[day] = (
                lake.read_npy(index)
                if lake.exists(index)
                else sorted_hashes(lake.read_parquet(self.path(day), columns=["event_id"]))
            )
        return self._hashes[day]

    def hashes(self, day: dt.date) -> np.ndarray:
        h = self.all_hashes(day)
        if self.sub is None:
            return h
        sub, subs, shards = self.sub
        return h[sub_shard_of(h, shards, subs) == sub]  # still sorted

    def rows(self, day: dt.date, event_ids: pa.Array) -> pa.Table:
        table = lake.read_parquet(self.path(day))
        return table.filter(pa.compute.is_in(table["event_id"], value_set=event_ids))


class DedupAndStage(beam.DoFn):
    """One shard of the run -> shard files (and their id index) staged for commit, counts, conflicts."""

    def __init__(
        self, lake_root: str, stage_root: str, window: list[dt.date], shards: int, subs: int
    ) -> None:
        self.lake_root = lake_root
        self.stage_root = stage_root
        self.window = window
        self.shards, self.subs = shards, subs

    def process(self, element):  # type: ignore[no-untyped-def]
        """Deduplicate the shard one sub-shard at a time, appending each piece's new rows to the
        shard file of their event date (after the rows that file already held)."""
        shard, refs = element
        by_sub: dict[int, list[tuple[str, int, int]]] = {}
        for sub, path, first, end in refs:
            by_sub.setdefault(sub, []).append((path, first, end))
        subs = self.subs
        existing = LakeShard(self.lake_root, shard, self.window)
        files: dict[dt.date, lake.ParquetAppender] = {}
        hashes: dict[dt.date, list[np.ndarray]] = {}
        try:
            for sub in sorted(by_sub):
                parts = [lake.read_ipc_batches(path, first, end) for path, first, end in by_sub[sub]]
                existing.sub = (sub, subs, self.shards)
                result = dedup_shard(parts, existing)
                del parts
                for day, table in result.writes.items():
                    if day not in files:
                        files[day], hashes[day] = self._open(existing, day, shard)
                    files[day].write(table)
                    hashes[day].append(result.write_hashes[day])
                for landing, stats in _per_landing(result):
                    yield STATS, (landing, stats)
                if result.conflicts.num_rows:
                    for landing, rows in _by_landing(result.conflicts, "landing_date"):
                        yield QUARANTINE, (landing, rows)
        finally:
            for writer in files.values():
                writer.close()
        for day, parts_h in hashes.items():
            folder = lake.partition(self.stage_root, lake.EVENTS, day)
            # Each part is sorted already: a stable sort (timsort) merges the runs, 4x a quicksort.
            merged = np.sort(np.concatenate(parts_h), kind="stable")
            lake.write_npy(lake.join(folder, index_file(shard)), merged)

    def _open(
        self, existing: LakeShard, day: dt.date, shard: int
    ) -> tuple[lake.ParquetAppender, list[np.ndarray]]:
        """The staged shard file of ``day``, starting with the rows the lake already holds for it."""
        folder = lake.partition(self.stage_root, lake.EVENTS, day)
        writer = lake.ParquetAppender(lake.join(folder, shard_file(shard)), INGEST_SCHEMA, stored=LAKE_SCHEMA)
        if day not in existing.dates():
            return writer, []
        current = lake.open_parquet(existing.path(day), read_dictionary=list(LOW_CARDINALITY))
        for i in range(current.metadata.num_row_groups):  # one row group at a time
            writer.write(current.read_row_group(i).select(list(INGEST_SCHEMA.names)).cast(INGEST_SCHEMA))
        return writer, [existing.all_hashes(day)]


def _by_landing(table: pa.Table, column: str) -> Iterable[tuple[str, pa.Table]]:
    for value in table[column].unique().to_pylist():
        yield value.isoformat(), table.filter(pa.compute.equal(table[column], pa.scalar(value, pa.date32())))


def _count_by(values: pa.ChunkedArray) -> list[tuple[object, int]]:
    """(value, rows) for each value of a column; one min/max when, as usual, there is one value."""
    if len(values) == 0:
        return []
    low, high = pc.min_max(values).values()
    if low == high:
        return [(low.as_py(), len(values))]
    counts = pa.table({"v": values}).group_by("v").aggregate([([], "count_all")])
    return list(zip(counts["v"].to_pylist(), counts["count_all"].to_pylist(), strict=True))


def _per_landing(result: ShardResult) -> Iterable[tuple[str, dict]]:
    out: dict[str, dict] = {}

    def add(landing: dt.date, **values: object) -> None:
        key = landing.isoformat()
        out[key] = _merge(out.get(key, _stats()), _stats(**values))

    for day, rows in result.writes.items():  # the new rows, by event date
        for landing, count in _count_by(rows["_landing_date"]):
            add(landing, clean=count, late={day.isoformat(): count} if day < landing else {})
    for landing, count in _count_by(result.duplicates["_landing_date"]):
        add(landing, duplicates=count)
    for landing, count in _count_by(result.conflicts["landing_date"]):
        add(landing, quarantined={"conflicting_duplicate": count})
    return out.items()


class StageQuarantine(beam.DoFn):
    def __init__(self, stage_root: str) -> None:
        self.stage_root = stage_root

    def process(self, element):  # type: ignore[no-untyped-def]
        landing, tables = element
        table = pa.concat_tables(list(tables)).sort_by(
            [("source_file", "ascending"), ("row_number", "ascending")]
        )
        lake.write_parquet(
            lake.join(lake.partition(self.stage_root, lake.QUARANTINE, landing), "part-0000.parquet"), table
        )


class StageStats(beam.DoFn):
    def __init__(self, stage_root: str) -> None:
        self.stage_root = stage_root

    def process(self, element):  # type: ignore[no-untyped-def]
        landing, stats = element
        lake.write_json(lake.join(self.stage_root, "stats", f"{landing}.json"), stats)


class IngestEvents(beam.PTransform):
    """Read units -> staged partitions, quarantine and per-landing-date stats (writes only to staging)."""

    def __init__(
        self,
        rules: Rules,
        shards: int,
        lake_root: str,
        stage_root: str,
        window: list[dt.date],
        subs: int = 1,
    ) -> None:
        super().__init__()
        self.rules, self.shards, self.lake_root, self.stage_root = rules, shards, lake_root, stage_root
        self.window, self.subs = window, subs

    def expand(self, units):  # type: ignore[no-untyped-def]
        read = split(
            units
            | "ReadAndValidate"
            >> beam.ParDo(ReadAndValidate(self.rules, self.shards, self.subs, self.stage_root)),
            "Read",
            (CLEAN, QUARANTINE, STATS),
        )
        dedup = split(
            read[CLEAN]
            | "GroupByShard" >> beam.GroupByKey()
            | "DedupAndStage"
            >> beam.ParDo(
                DedupAndStage(self.lake_root, self.stage_root, self.window, self.shards, self.subs)
            ),
            "Dedup",
            (QUARANTINE, STATS),
        )
        (
            (read[QUARANTINE], dedup[QUARANTINE])
            | "FlattenQuarantine" >> beam.Flatten()
            | "GroupQuarantine" >> beam.GroupByKey()
            | "StageQuarantine" >> beam.ParDo(StageQuarantine(self.stage_root))
        )
        return (
            (read[STATS], dedup[STATS])
            | "FlattenStats" >> beam.Flatten()
            | "MergeStats" >> beam.CombinePerKey(MergeStats())
            | "StageStats" >> beam.ParDo(StageStats(self.stage_root))
        )


# -- driver --------------------------------------------------------------------------------------


@dataclass
class IngestResult:
    run_id: str
    stats: dict[str, dict]  # landing date -> counts
    changed_dates: list[dt.date] = field(default_factory=list)  # event dates whose partition changed

    def total(self, key: str) -> int:
        return sum(
            s[key] if not isinstance(s[key], dict) else sum(s[key].values()) for s in self.stats.values()
        )


def dedup_window(dates: list[dt.date], rules: Rules) -> list[dt.date]:
    """Event dates an event landing on ``dates`` can have: the lateness window up to one day ahead."""
    first = dates[0] - dt.timedelta(days=rules.lateness_days)
    last = dates[-1] + dt.timedelta(days=1 + (rules.future_slack_hours + 23) // 24)
    return [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]


def sub_shards(units: list[ReadUnit], shards: int) -> int:
    """Pieces per lake shard for this run: the input's rows (exact for Parquet, an upper estimate for
    JSON from the file size) over ``SUB_SHARD_ROWS`` per piece, so a piece's size does not grow with
    the run."""
    rows = 0
    for unit in units:
        if not unit.first:
            continue
        try:
            if file_kind(unit.path) == "parquet":
                rows += lake.open_parquet(unit.path).metadata.num_rows
            else:
                size = os.path.getsize(unit.path) if lake.is_local(unit.path) else 0
                rows += size // (40 if unit.path.endswith(".gz") else 150)
        except Exception:  # an unreadable file is quarantined by the read step; it adds no rows here
            continue
    return max(1, min(-(-rows // (shards * SUB_SHARD_ROWS)), 65535 // shards))


def _not_a_regular_file(path: str) -> str | None:
    """What a local landing entry is when it is not a regular file (links are not followed: a link to
    /dev/zero or /etc/passwd is never opened). Object stores hold only objects."""
    if not lake.is_local(path):
        return None
    mode = os.lstat(path).st_mode
    for test, what in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return what
    return None if stat.S_ISREG(mode) else "not a regular file"


def read_units(landing_root: str, dates: list[dt.date]) -> list[ReadUnit]:
    units: list[ReadUnit] = []
    for day in dates:
        folder = lake.join(landing_root, day.isoformat())
        if not lake.folder_exists(folder):
            raise UsageBillingError(f"no landing folder for {day}: {folder}")
        for path in lake.list_files(folder, "*"):
            if os.path.basename(path).startswith("."):  # a producer's temporary file, not yet landed
                continue
            odd = _not_a_regular_file(path)
            if odd:
                units.append(ReadUnit(path, day.isoformat(), not_a_file=odd))
                continue
            listed = stamp(path)
            if file_kind(path) == "parquet":
                groups = parquet_units(path)
                units.extend(
                    ReadUnit(path, day.isoformat(), g, first=i == 0, listed=listed)
                    for i, g in enumerate(groups)
                )
            else:
                units.append(ReadUnit(path, day.isoformat(), listed=listed))
    return units


READ_ATTEMPTS = 3  # a landing file that changes while it is read: the run is read again from the listing


Prepare = Callable[[], dict[dt.date, pa.Table]]


def run(argv: list[str] | None = None, prepare: Prepare | None = None) -> IngestResult:
    """One ingest run, under the lake's ingest lock (one ingest per lake at a time: late events of two
    landing dates can rewrite the same past partition).

    ``prepare`` (a replay of quarantined rows) runs under the lock before the landing folder is read:
    it writes the files to read and returns, per landing date, the quarantine rows that stay as they
    are; the date's new quarantine is those rows plus the rows that fail again."""
    options = pipeline_options(argv, threads=True)
    opts = options.view_as(IngestOptions)
    dates = date_range(opts)
    catalog = load_catalog(opts.config)
    engine = make_engine(opts.database_url)
    require_schema(engine)
    try:
        with step_lock(engine, lake.ingest_lock(opts.lake)):
            require_lake(
                engine, opts.lake, "events ingest", create=lambda: lake.shard_count(opts.lake, opts.shards)
            )
            recovered = recover_runs(opts.lake, engine)
            kept = prepare() if prepare is not None else {}
            for attempt in range(1, READ_ATTEMPTS + 1):
                try:
                    result = _ingest(options, opts, dates, catalog, engine, kept)
                    break
                except LandingFileChanged as exc:  # nothing was committed: list and read again
                    if attempt == READ_ATTEMPTS:
                        raise LandingFileChanged(
                            f"{exc} ({READ_ATTEMPTS} attempts); rerun once the producer has finished writing"
                        ) from None
                    log.warning("%s; reading the landing folder again", exc)
    finally:
        engine.dispose()
    result.changed_dates = sorted(set(result.changed_dates) | set(recovered))
    return result


def _ingest(
    options, opts: IngestOptions, dates: list[dt.date], catalog, engine: Engine, kept: dict
) -> IngestResult:  # type: ignore[no-untyped-def]
    run_id = opts.run_id or f"ingest-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    started = dt.datetime.now(dt.UTC)
    shards = lake.shard_count(opts.lake, opts.shards)
    rules = Rules.for_catalog(
        catalog, lateness_days=opts.lateness_days, max_tokens_per_event=opts.max_tokens_per_event
    )
    units = read_units(opts.landing, dates)
    faults.checkpoint("ingest.listed")
    subs = sub_shards(units, shards)
    stage = lake.open_stage(opts.lake, run_id, STEP)
    try:
        with run_pipeline(options) as p:
            _ = (
                p
                | "ReadUnits" >> beam.Create(units)
                | "IngestEvents"
                >> IngestEvents(rules, shards, opts.lake, stage, dedup_window(dates, rules), subs)
            )
        result = _collect(run_id, stage, dates)
        _check_conservation(result)
        for day in dates:  # the quarantine of a landing date is replaced whole, even by an empty one
            staged = lake.partition(stage, lake.QUARANTINE, day)
            carried = kept[day] if day in kept else _other_files_quarantine(opts.lake, day, units)
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
        }
        # From here on the run is decided: whatever stops it, the next run finishes this commit.
        lake.write_json(lake.join(stage, JOURNAL), journal)
    except BaseException:
        lake.discard(stage)
        raise
    _finish(opts.lake, engine, stage, journal)
    return result


def committed_quarantine(lake_root: str, day: dt.date) -> pa.Table:
    """The committed quarantine of landing date ``day`` (an empty table where there is none)."""
    files = lake.list_files(lake.partition(lake_root, lake.QUARANTINE, day))
    return (
        pa.concat_tables([lake.read_parquet(f) for f in files]) if files else QUARANTINE_SCHEMA.empty_table()
    )


def _other_files_quarantine(lake_root: str, day: dt.date, units: list[ReadUnit]) -> pa.Table:
    """The landing date's quarantine rows of files this run did not read: a rerun with fewer files (a
    landing folder partly restored, another landing root by mistake) replaces only what it read."""
    old = committed_quarantine(lake_root, day)
    if old.num_rows == 0:
        return QUARANTINE_SCHEMA.empty_table()
    read = pa.array(
        sorted({source_name(u.path) for u in units if u.landing_date == day.isoformat()}), pa.string()
    )
    return old.filter(pc.invert(pc.is_in(old["source_file"], value_set=read))).cast(QUARANTINE_SCHEMA)


# -- commit: a journal makes the run's partitions and its warehouse rows all-or-nothing -----------

STEP = "events ingest"
JOURNAL = "_ingest_commit.json"  # written once the run is checked: its commit must be completed


def _finish(lake_root: str, engine: Engine, stage: str, journal: dict) -> None:
    """Swap in every staged partition still in staging, then write the run's warehouse rows.

    Idempotent: a partition already swapped is no longer in staging, and the warehouse rows are
    replaced by run id; so finishing a journal that a killed run left behind completes that run.
    """
    run_id = journal["run_id"]
    for day in journal["changed_dates"]:
        staged = lake.partition(stage, lake.EVENTS, day)
        if lake.folder_exists(staged):
            lake.commit(staged, lake.partition(lake_root, lake.EVENTS, day), run_id, carry_over=True)
            faults.checkpoint("lake.commit")
    for day in journal["landing_dates"]:
        staged = lake.partition(stage, lake.QUARANTINE, day)
        if lake.folder_exists(staged):
            lake.commit(staged, lake.partition(lake_root, lake.QUARANTINE, day), run_id)
    now = dt.datetime.now(dt.UTC)
    with engine.begin() as conn:
        conn.execute(delete(IngestRun.__table__).where(IngestRun.run_id == run_id))
        conn.execute(
            insert(IngestRun.__table__),
            [
                {
                    "run_id": run_id,
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
                }
                for day, s in sorted(journal["stats"].items())
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
    lake.discard(stage)


def recover_runs(lake_root: str, engine: Engine) -> list[dt.date]:
    """Finish what killed ingest runs left: half-swapped partitions, journaled commits (rolled
    forward), staging of runs that never reached their journal (discarded). Returns the event dates
    the finished commits changed. Call it holding the ingest lock: no other ingest is running."""
    for dataset in (lake.EVENTS, lake.QUARANTINE):
        lake.recover(lake_root, dataset)
    changed: set[dt.date] = set()
    for stage in lake.stages_of(lake_root, STEP):
        if lake.exists(lake.join(stage, JOURNAL)):
            journal = lake.read_json(lake.join(stage, JOURNAL))
            log.warning("finishing the commit of ingest run %s, which stopped part way", journal["run_id"])
            _finish(lake_root, engine, stage, journal)  # type: ignore[arg-type]
            changed.update(dt.date.fromisoformat(d) for d in journal["changed_dates"])  # type: ignore[index]
        else:
            lake.discard(stage)
    return sorted(changed)


def _collect(run_id: str, stage: str, dates: list[dt.date]) -> IngestResult:
    stats = {}
    for day in dates:
        path = lake.join(stage, "stats", f"{day.isoformat()}.json")
        stats[day.isoformat()] = lake.read_json(path) if lake.exists(path) else _stats()
    changed = lake.partition_dates(stage, lake.EVENTS)
    return IngestResult(run_id, stats, changed)


def _check_conservation(result: IngestResult) -> None:
    for day, s in sorted(result.stats.items()):
        accounted = s["clean"] + sum(s["quarantined"].values()) + s["duplicates"]
        if accounted != s["rows_read"]:
            raise DataQualityError(
                f"conservation broken for landing {day}: read {s['rows_read']} rows but "
                f"clean {s['clean']} + quarantined {sum(s['quarantined'].values())} + "
                f"duplicates {s['duplicates']} = {accounted}; nothing was committed"
            )
