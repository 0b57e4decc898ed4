"""Dedup by event_id on whole Arrow tables: the idempotency key of the pipeline.

Events are sharded by a stable hash of event_id (``shard_of``); one shard of one event date is
deduplicated at a time against itself and against what the lake already holds for that shard, so
memory is bounded by the size of one shard, not by the run. The first copy of an event_id wins, in
order (already in the lake, landing date, source file, row number); an identical later copy is a
duplicate, a later copy with a different payload is quarantined as ``conflicting_duplicate``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.events import EVENT_SCHEMA, LAKE_SCHEMA, QUARANTINE_SCHEMA
from schemas.jsonl import ROW_NUMBER

_ORIGIN = "_origin"  # 0 = already in the lake, 1 = this run
_ALL_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: every input bit affects every output bit."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _word(windows: np.ndarray, end: np.ndarray, first: np.ndarray) -> np.ndarray:
    """The string's bytes in [first, first + 8), packed exactly into a uint64 (bytes past end are 0)."""
    k = np.clip(end - first, 0, 8).astype(np.uint64)
    mask = np.where(k >= 8, _ALL_ONES, (np.uint64(1) << (k * np.uint64(8))) - np.uint64(1))
    return windows[np.clip(first, 0, len(windows) - 1)] & mask


def stable_hash(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash of each string that is the same on every machine and run (not Python's hash()).

    Mixes the length, the first 8 bytes and the last 16 (where ids differ: prefixes, counters, UUID
    tails), vectorized. Only the shard choice depends on it; dedup itself compares whole ids.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_string(values.type):
        values = values.cast(pa.large_string())
    n = len(values)
    if n == 0:
        return np.zeros(0, np.uint64)
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int64)[values.offset : values.offset + n + 1]
    data_buf = values.buffers()[2]
    raw = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    padded = np.concatenate([raw[offsets[0] : offsets[-1]], np.zeros(8, np.uint8)])
    # Every byte offset viewed as the start of a little-endian uint64 (one gather per word).
    windows = np.ndarray(shape=(len(padded) - 7,), dtype="<u8", buffer=padded, strides=(1,))
    start, end = offsets[:-1] - offsets[0], offsets[1:] - offsets[0]
    with np.errstate(over="ignore"):
        h = _mix((end - start).astype(np.uint64) ^ np.uint64(0x243F6A8885A308D3))
        h = _mix(h ^ _word(windows, end, start))
        h = _mix(h ^ _word(windows, end, np.maximum(end - 16, start + 8)))
        h = _mix(h ^ _word(windows, end, np.maximum(end - 8, start + 16)))
    return h


def shard_of(event_ids: pa.Array | pa.ChunkedArray, shards: int) -> np.ndarray:
    return (stable_hash(event_ids) % np.uint64(shards)).astype(np.int64)


def split_by_date_and_shard(table: pa.Table, shards: int) -> Iterator[tuple[tuple[str, int], pa.Table]]:
    """Yield ((event date ISO, shard), rows) groups of a clean table, one sort, no per-row Python."""
    if table.num_rows == 0:
        return
    day = pc.cast(table["event_time"], pa.date32()).cast(pa.int32()).to_numpy().astype(np.int64)
    key = day * shards + shard_of(table["event_id"], shards)
    order = np.argsort(key, kind="stable")
    key = key[order]
    bounds = np.flatnonzero(np.diff(key)) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [len(key)]))
    epoch = np.datetime64("1970-01-01", "D")
    for s, e in zip(starts, ends, strict=True):
        k = int(key[s])
        # take, not slice: a pickled slice drags its parent's whole buffers through the shuffle.
        yield (str(epoch + np.timedelta64(k // shards, "D")), k % shards), table.take(pa.array(order[s:e]))


@dataclass
class DedupResult:
    keep: pa.Table  # the shard's full new content (LAKE_SCHEMA), or None-equivalent when unchanged
    changed: bool
    new_clean: pa.Table  # rows this run added (LAKE_SCHEMA)
    duplicates: pa.Table  # identical resends seen in this run: (_landing_date) per row
    conflicts: pa.Table = field(default_factory=QUARANTINE_SCHEMA.empty_table)


def _same(a: pa.ChunkedArray, b: pa.ChunkedArray) -> np.ndarray:
    eq = pc.fill_null(pc.equal(a, b), False)
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    return np.asarray(pc.or_(eq, both_null).to_numpy(zero_copy_only=False), dtype=bool)


def dedup_shard(new_parts: list[pa.Table], existing: pa.Table | None) -> DedupResult:
    """Deduplicate one (event date, shard): new rows of this run against themselves and the lake."""
    new = pa.concat_tables(new_parts) if len(new_parts) > 1 else new_parts[0]
    new = new.append_column(_ORIGIN, pa.array(np.ones(new.num_rows, np.int8)))
    if existing is not None and existing.num_rows:
        old = existing.select(LAKE_SCHEMA.names).cast(LAKE_SCHEMA)
        old = old.append_column(ROW_NUMBER, pa.nulls(old.num_rows, pa.int64()))
        old = old.append_column(_ORIGIN, pa.array(np.zeros(old.num_rows, np.int8)))
        rows = pa.concat_tables([old, new.select(old.column_names).cast(old.schema)])
    else:
        rows = new
    rows = rows.sort_by(
        [
            ("event_id", "ascending"),
            (_ORIGIN, "ascending"),
            ("_landing_date", "ascending"),
            ("_source_file", "ascending"),
            (ROW_NUMBER, "ascending"),
        ]
    )
    ids = rows["event_id"].combine_chunks()
    n = rows.num_rows
    first = np.ones(n, bool)
    if n > 1:
        first[1:] = ~_same(ids.slice(1), ids.slice(0, n - 1))
    first_idx = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    kept = rows.take(pa.array(first_idx))
    identical = np.ones(n, bool)
    for f in EVENT_SCHEMA:
        identical &= _same(rows[f.name], kept[f.name])
    from_run = np.asarray(rows[_ORIGIN].to_numpy(), dtype=np.int8) == 1
    new_mask = first & from_run
    dup_mask = ~first & identical & from_run
    conflict_mask = ~first & ~identical & from_run
    lake_rows = rows.filter(pa.array(first)).select(LAKE_SCHEMA.names).cast(LAKE_SCHEMA)
    lake_rows = lake_rows.sort_by([("event_time", "ascending"), ("event_id", "ascending")])
    conflicts = rows.filter(pa.array(conflict_mask))
    kept_ids = kept.filter(pa.array(conflict_mask))
    conflict_q = pa.table(
        {
            "landing_date": conflicts["_landing_date"],
            "source_file": conflicts["_source_file"],
            "row_number": conflicts[ROW_NUMBER],
            "event_id": conflicts["event_id"],
            "reason": pa.array(["conflicting_duplicate"] * conflicts.num_rows, pa.string()),
            "detail": pc.binary_join_element_wise(
                "differs from the copy kept from ", kept_ids["_source_file"], ""
            ),
            "raw": pa.nulls(conflicts.num_rows, pa.string()),
        },
        schema=QUARANTINE_SCHEMA,
    )
    return DedupResult(
        keep=lake_rows,
        changed=bool(new_mask.any()),
        new_clean=rows.filter(pa.array(new_mask)).select(LAKE_SCHEMA.names),
        duplicates=rows.filter(pa.array(dup_mask)).select(["_landing_date"]),
        conflicts=conflict_q,
    )
