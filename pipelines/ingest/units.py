"""What an ingest run reads and writes per piece: the landing's read units (a file, or a row group of a
Parquet file) and the lake's dedup shard files with their indexes."""

from __future__ import annotations

import datetime as dt
import os
import stat
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pipelines import lake
from pipelines.errors import UsageBillingError
from pipelines.ingest.datasets import EVENTS, Dataset, dataset_of
from pipelines.ingest.dedup import sorted_hashes
from pipelines.ingest.hashing import sub_shard_of
from pipelines.ingest.parquet_files import parquet_units
from pipelines.ingest.readers import file_kind, stamp
from pipelines.ingest.validate import Rules

SUB_SHARD_ROWS = 250_000  # rows deduplicated at once: a run splits each lake shard into pieces of this


@dataclass(frozen=True)
class ReadUnit:
    path: str
    landing_date: str
    row_group: int | None = None  # Parquet row group; None for JSON (the whole file, in chunks)
    first: bool = True  # counts the file once
    listed: tuple[int, int] | None = None  # (size, mtime) at listing: a changed file is never read in part
    not_a_file: str | None = None  # what the entry is instead of a regular file (quarantined, not read)
    dataset: str = EVENTS.name  # what the file holds: usage events, or task outcomes (``outcomes*``)


def shard_file(shard: int) -> str:
    return f"shard-{shard:04d}.parquet"


def index_file(shard: int) -> str:
    """Sorted id hashes of a shard file; the leading underscore keeps Parquet readers away."""
    return f"_ids-shard-{shard:04d}.npy"


class LakeShard:
    """One shard of the lake in the dedup window. ``sub`` narrows it to one sub-shard of a run (the
    ExistingShard that dedup_shard reads)."""

    def __init__(self, lake_root: str, shard: int, window: list[dt.date], dataset: Dataset = EVENTS) -> None:
        self.lake_root, self.shard, self.dataset = lake_root, shard, dataset
        committed = set(lake.partition_dates(lake_root, dataset.name))
        self._dates = [d for d in window if d in committed and lake.exists(self.path(d))]
        self._hashes: dict[dt.date, np.ndarray] = {}
        self.sub: tuple[int, int, int] | None = None  # (sub, subs, shards)

    def path(self, day: dt.date, name: str | None = None) -> str:
        return lake.partition_file(
            lake.partition(self.lake_root, self.dataset.name, day), name or shard_file(self.shard)
        )

    def dates(self) -> list[dt.date]:
        return self._dates

    def all_hashes(self, day: dt.date) -> np.ndarray:
        if day not in self._hashes:
            index = self.path(day, index_file(self.shard))
            self._hashes[day] = (
                lake.read_npy(index)
                if lake.exists(index)
                else sorted_hashes(
                    lake.read_parquet(self.path(day), columns=list(self.dataset.key_fields)), self.dataset
                )
            )
        return self._hashes[day]

    def hashes(self, day: dt.date) -> np.ndarray:
        h = self.all_hashes(day)
        if self.sub is None:
            return h
        sub, subs, shards = self.sub
        return h[sub_shard_of(h, shards, subs) == sub]  # still sorted

    def rows(self, day: dt.date, keys: pa.Array) -> pa.Table:
        table = lake.read_parquet(self.path(day))
        return table.filter(pa.compute.is_in(self.dataset.key(table), value_set=keys))


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


def require_landing(landing_root: str, dates: list[dt.date]) -> None:
    """Fail before anything is written (a new lake, a staging folder) when a landing date has no folder."""
    for day in dates:
        folder = lake.join(landing_root, day.isoformat())
        if not lake.folder_exists(folder):
            raise UsageBillingError(f"no landing folder for {day}: {folder}")


NOT_LANDED = "its name starts with '.': a producer's file still being written, not read until renamed"


def not_read(landing_root: str, dates: list[dt.date]) -> dict[str, dict[str, str]]:
    """Per landing date (ISO), the entries ``read_units`` leaves out and why: counted and named in the
    run's output and ``ingest_runs``, never skipped without a word."""
    out: dict[str, dict[str, str]] = {}
    for day in dates:
        folder = lake.join(landing_root, day.isoformat())
        hidden = [p for p in lake.list_files(folder, "*") if os.path.basename(p).startswith(".")]
        if hidden:
            out[day.isoformat()] = {os.path.basename(p): NOT_LANDED for p in sorted(hidden)}
    return out


def read_units(landing_root: str, dates: list[dt.date]) -> list[ReadUnit]:
    units: list[ReadUnit] = []
    require_landing(landing_root, dates)
    for day in dates:
        folder = lake.join(landing_root, day.isoformat())
        for path in lake.list_files(folder, "*"):
            if os.path.basename(path).startswith("."):  # not landed yet: ``not_read`` names it
                continue
            kind = dataset_of(path).name
            odd = _not_a_regular_file(path)
            if odd:
                units.append(ReadUnit(path, day.isoformat(), not_a_file=odd, dataset=kind))
                continue
            listed = stamp(path)
            if file_kind(path) == "parquet":
                groups = parquet_units(path)
                units.extend(
                    ReadUnit(path, day.isoformat(), g, first=i == 0, listed=listed, dataset=kind)
                    for i, g in enumerate(groups)
                )
            else:
                units.append(ReadUnit(path, day.isoformat(), listed=listed, dataset=kind))
    return units
