"""The stable 64-bit hash of an idempotency key (``HASH``, computed once when a row is read), and the
shards and sub-shards it puts rows in: dedup, the metering spill and ``quota explain`` all find a row's
shard from it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipelines.ingest.datasets import EVENTS, Dataset

HASH = "_hash"  # uint64 hash of the idempotency key, carried from read to dedup (never stored in the lake)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: every input bit affects every output bit."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


# The low k bytes of a little-endian word, k = 0..8.
_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [0xFFFFFFFFFFFFFFFF], dtype=np.uint64)


def _word(windows: np.ndarray, end: np.ndarray, first: np.ndarray) -> np.ndarray:
    """The string's bytes in [first, first + 8), packed exactly into a uint64 (bytes past end are 0)."""
    return windows[np.clip(first, 0, len(windows) - 1)] & _MASKS[np.clip(end - first, 0, 8)]


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


def with_hash(table: pa.Table, dataset: Dataset = EVENTS) -> pa.Table:
    return table.append_column(HASH, pa.array(stable_hash(dataset.key(table)), pa.uint64()))


def shard_segments(table: pa.Table, shards: int) -> tuple[pa.Table, list[tuple[int, int, int]]]:
    """Sort a table with a HASH column by shard (one take): (sorted table, [(shard, offset, length)])."""
    table, segments = sub_shard_segments(table, shards, 1)
    return table, [(shard, offset, length) for shard, _, offset, length in segments]


def sub_shard_of(hashes: np.ndarray, shards: int, subs: int) -> np.ndarray:
    """The sub-shard of each hash inside its shard: independent of the shard (other hash digits)."""
    return ((hashes // np.uint64(shards)) % np.uint64(subs)).astype(np.int64)


def sub_shard_segments(
    table: pa.Table, shards: int, subs: int
) -> tuple[pa.Table, list[tuple[int, int, int, int]]]:
    """Sort a table with a HASH column by (shard, sub-shard) (one take):
    (sorted table, [(shard, sub, offset, length)]). A run splits each lake shard into ``subs`` pieces
    that are deduplicated one at a time, so memory follows the piece, not the run."""
    if table.num_rows == 0:
        return table, []
    h = table[HASH].to_numpy()
    key = (h % np.uint64(shards)).astype(np.int64) * subs + sub_shard_of(h, shards, subs)
    order = np.argsort(key.astype(np.uint16 if shards * subs <= 65535 else np.int64), kind="stable")
    key = key[order]
    segments = [(int(key[b]) // subs, int(key[b]) % subs, b, e - b) for b, e in runs(key)]
    return table.take(pa.array(order)), segments


def runs(values: np.ndarray) -> list[tuple[int, int]]:
    """[(start, end)] of the runs of equal values in a sorted array (none for an empty one)."""
    if len(values) == 0:
        return []
    bounds = (np.flatnonzero(values[1:] != values[:-1]) + 1).tolist()
    return list(zip([0, *bounds], [*bounds, len(values)], strict=True))
