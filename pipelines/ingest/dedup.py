"""Dedup by event_id on whole Arrow tables: the idempotency key of the pipeline.

Events are sharded by a stable 64-bit hash of event_id (``HASH`` column, computed once when read).
One shard of a run is deduplicated at a time, against itself and against what the lake already
holds for that shard in the lateness window, so memory is bounded by one shard, not by the run.
Within the run, rows are sorted by hash and equal ids found by comparing neighbours (exact: a hash
collision between different ids falls back to sorting by the id itself). Against the lake, each
partition shard has a sidecar of its sorted id hashes; only hash hits are read back and compared.

The first copy of an event_id wins, in order (already in the lake, landing date, source file, row
number); an identical later copy is a duplicate, a later copy with a different payload is
quarantined as ``conflicting_duplicate``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines import lake
from pipelines.ingest.datasets import EVENTS, Dataset
from pipelines.ingest.hashing import HASH, stable_hash
from schemas.events import QUARANTINE_SCHEMA, conform, utc_date
from schemas.jsonl import ROW_NUMBER


class ExistingShard(Protocol):
    """What the lake already holds for one shard, in the dates that dedup must look at."""

    def dates(self) -> list[dt.date]: ...

    def hashes(self, day: dt.date) -> np.ndarray: ...  # sorted unique uint64

    def rows(self, day: dt.date, keys: pa.Array) -> pa.Table: ...  # lake rows with those keys


@dataclass
class ShardResult:
    writes: dict[dt.date, pa.Table]  # date -> rows to append to its shard file (the ingest schema)
    write_hashes: dict[dt.date, np.ndarray]  # event date -> those rows' id hashes, sorted
    duplicates: pa.Table  # identical copies seen in this run (_landing_date per row)
    conflicts: pa.Table = field(default_factory=QUARANTINE_SCHEMA.empty_table)

    @property
    def new_clean(self) -> pa.Table:
        """The rows this run added (the ingest schema): the writes of every date."""
        return pa.concat_tables(list(self.writes.values())) if self.writes else EVENTS.ingest.empty_table()


def _same(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Null-aware equality, element by element."""
    eq = pc.fill_null(pc.equal(a, b), False)
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    return np.asarray(pc.or_(eq, both_null).to_numpy(zero_copy_only=False), dtype=bool)


def _identical(rows: pa.Table, kept: pa.Table, dataset: Dataset) -> np.ndarray:
    out = np.ones(rows.num_rows, bool)
    for name in dataset.payload.names:
        out &= _same(rows[name].combine_chunks(), kept[name].combine_chunks())
    return out


def _ordered(parts: list[pa.Table]) -> pa.Table:
    """Concatenate the parts in (landing date, source file, row number) order: first copy wins."""

    def key(t: pa.Table) -> tuple:
        return (t["_landing_date"][0].as_py(), t["_source_file"][0].as_py(), t[ROW_NUMBER][0].as_py() or 0)

    parts = sorted((p for p in parts if p.num_rows), key=key)
    return pa.concat_tables(parts) if len(parts) != 1 else parts[0]


def _runs(hashes: np.ndarray, ids: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(order, first) such that equal ids are contiguous in ``order`` and ``first`` marks run starts.

    The order is stable, so within one id the input order (first copy first) is kept.
    """
    n = len(hashes)
    order = np.argsort(hashes)  # introsort: 4x a stable sort; only equal hashes need stability
    hs = hashes[order]
    same_hash = hs[1:] == hs[:-1]
    if same_hash.any():  # restore input order inside each run of equal hashes (few, short)
        in_run = np.zeros(n, bool)
        in_run[1:] |= same_hash
        in_run[:-1] |= same_hash
        members = np.flatnonzero(in_run)
        run = np.cumsum(~np.concatenate(([False], same_hash))[members])
        order[members] = order[members][np.lexsort((order[members], run))]
    same_id = np.zeros(max(n - 1, 0), bool)
    pairs = np.flatnonzero(same_hash)  # only neighbours with equal hashes can hold equal ids
    if len(pairs):
        same_id[pairs] = _same(ids.take(pa.array(order[pairs + 1])), ids.take(pa.array(order[pairs])))
    if (same_hash & ~same_id).any():  # a 64-bit collision between different ids: sort by the id too
        keyed = pa.table({"h": hashes, "id": ids, "pos": np.arange(n)})
        order = keyed.sort_by([("h", "ascending"), ("id", "ascending"), ("pos", "ascending")])[
            "pos"
        ].to_numpy()
        sorted_ids = ids.take(pa.array(order))
        same_id = _same(sorted_ids.slice(1), sorted_ids.slice(0, n - 1))
    first = np.ones(n, bool)
    first[1:] = ~same_id
    return order, first


_FILTER_BITS = 20


def _maybe_members(hashes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Positions of the hashes that may be one of ``values`` (a few): those whose low 20 bits one of
    the values has. Every member, and about len(values) / 1M of the others, which the caller's exact
    comparison sorts out (a hash set of the values costs 1.6x as much)."""
    low = np.uint64((1 << _FILTER_BITS) - 1)
    table = np.zeros(1 << _FILTER_BITS, bool)
    table[(values & low).astype(np.intp)] = True
    return np.flatnonzero(table[(hashes & low).astype(np.intp)])


def _copies(
    hashes: np.ndarray, ids: pa.ChunkedArray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(sorted hashes, first, later, kept): ``first`` marks each id's first row (input order), and
    each later copy (positions ``later``, in input order) has its first row at ``kept``.

    Only rows whose hash repeats can be copies, and there are few: a sort of the hashes finds them
    (and gives the index its sorted hashes), and only they are ordered by id, not all n rows.
    """
    n = len(hashes)
    hs = np.sort(hashes)
    repeated = np.unique(hs[1:][hs[1:] == hs[:-1]])
    first = np.ones(n, bool)
    if len(repeated) == 0:
        return hs, first, np.zeros(0, np.int64), np.zeros(0, np.int64)
    cand = _maybe_members(hashes, repeated)  # every row of a repeated hash, and a few others
    order, run_start = _runs(hashes[cand], _take_array(ids, cand))
    starts = np.maximum.accumulate(np.where(run_start, np.arange(len(cand)), 0))
    later_sorted = np.flatnonzero(~run_start)
    later, kept = cand[order[later_sorted]], cand[order[starts[later_sorted]]]
    first[later] = False
    by_position = np.argsort(later)
    return hs, first, later[by_position], kept[by_position]


def _without(sorted_values: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """``sorted_values`` with one occurrence taken out for each of ``removed`` (all present): still
    sorted, without sorting again."""
    if len(removed) == 0:
        return sorted_values
    removed = np.sort(removed)
    rank = np.arange(len(removed)) - np.searchsorted(removed, removed, side="left")  # k-th equal one
    keep = np.ones(len(sorted_values), bool)
    keep[np.searchsorted(sorted_values, removed, side="left") + rank] = False
    return sorted_values[keep]


def _lake_matches(
    ids: pa.Array, positions: np.ndarray, hashes: np.ndarray, existing: ExistingShard, dataset: Dataset
) -> pa.Table:
    """Rows already in the lake whose key is one of ``ids[positions]`` (``hashes`` are theirs):
    exact, and only keys whose hash the lake's index holds are looked up and read back."""
    schema = dataset.lake
    found: list[pa.Table] = []
    for day in existing.dates():
        known = existing.hashes(day)
        if len(known) == 0:
            continue
        pos = np.clip(np.searchsorted(known, hashes), 0, len(known) - 1)
        hit = known[pos] == hashes
        if hit.any():
            rows = existing.rows(day, ids.take(pa.array(positions[hit])))
            if rows.num_rows:
                found.append(conform(rows, schema))
    return pa.concat_tables(found) if found else schema.empty_table()


def _take(table: pa.Table, positions: np.ndarray) -> pa.Table:
    """table.take for a few positions of a table of many chunks: a take on a chunked table joins all
    its chunks first (a copy of every column); a filter works chunk by chunk, then a take orders it."""
    if len(positions) == 0:
        return table.schema.empty_table()
    unique, inverse = np.unique(positions, return_inverse=True)
    mask = np.zeros(table.num_rows, bool)
    mask[unique] = True
    return table.filter(pa.array(mask)).combine_chunks().take(pa.array(inverse, pa.int64()))


def _take_array(values: pa.ChunkedArray, positions: np.ndarray) -> pa.Array:
    """``values`` at a few increasing positions, without joining all of its chunks first."""
    mask = np.zeros(len(values), bool)
    mask[positions] = True
    return values.filter(pa.array(mask)).combine_chunks()


def dedup_shard(parts: list[pa.Table], existing: ExistingShard, dataset: Dataset = EVENTS) -> ShardResult:
    """Deduplicate one shard of a run: its new rows against themselves and against the lake.

    Works on positions (numpy) and materializes rows once at the end: the new rows of each event
    date, and the few copies that must be compared with the row they duplicate.
    """
    new = _ordered(parts)
    hashes = new[HASH].to_numpy()
    ids = dataset.key(new)
    if isinstance(ids, pa.Array):
        ids = pa.chunked_array([ids])
    sorted_hashes, first, later, later_kept = _copies(hashes, ids)
    # A copy is compared with the lake's row if its id is already stored, else with the run's first.
    first_pos = np.flatnonzero(first)
    lake = _lake_matches(ids, first_pos, hashes[first_pos], existing, dataset)
    lake_index = _lake_index(ids, lake, dataset)  # per row: row of ``lake`` with the same id, or -1
    is_new = first & (lake_index < 0)
    check = ~is_new
    check_pos = np.flatnonzero(check)
    # The first copy of each checked row's id (the row it duplicates when the lake has none; a
    # first row the lake holds is compared with the lake's and keeps itself here).
    kept_of = np.arange(new.num_rows)
    kept_of[later] = later_kept
    kept_pos = kept_of[check_pos]
    lake_of_checked = lake_index[check]
    identical = _identical_to_kept(new, check_pos, kept_pos, lake, lake_of_checked, dataset)
    writes, write_hashes = _new_by_day(new, is_new, hashes, sorted_hashes, check, dataset)
    dup_pos, conflict_pos = check_pos[identical], check_pos[~identical]
    return ShardResult(
        writes=writes,
        write_hashes=write_hashes,
        duplicates=pa.table({"_landing_date": new["_landing_date"].take(pa.array(dup_pos, pa.int64()))}),
        conflicts=_conflicts(
            new, conflict_pos, kept_pos[~identical], lake, lake_of_checked[~identical], dataset
        ),
    )


def _lake_index(ids: pa.ChunkedArray, lake: pa.Table, dataset: Dataset) -> np.ndarray:
    if lake.num_rows == 0:
        return np.full(len(ids), -1, np.int64)
    idx = pc.index_in(ids, value_set=pa.chunked_array([dataset.key(lake)]).combine_chunks())
    return pc.fill_null(idx, -1).to_numpy().astype(np.int64)


def _identical_to_kept(
    new: pa.Table,
    check_pos: np.ndarray,
    kept_pos: np.ndarray,
    lake: pa.Table,
    lake_of_checked: np.ndarray,
    dataset: Dataset,
) -> np.ndarray:
    """Is each checked row identical to the copy that wins: the lake's where the lake holds its id
    (``lake_of_checked`` >= 0), else the run's first copy (``kept_pos``)?"""
    if len(check_pos) == 0:
        return np.zeros(0, bool)
    schema = dataset.lake
    both = _take(new, np.concatenate([check_pos, kept_pos])).select(list(schema.names)).cast(schema)
    rows, kept = both.slice(0, len(check_pos)), both.slice(len(check_pos))
    from_lake = lake_of_checked >= 0
    if from_lake.any():
        lake_rows = lake.take(pa.array(np.where(from_lake, lake_of_checked, 0)))
        mask = pa.array(from_lake)
        kept = pa.Table.from_arrays(
            [pc.if_else(mask, lake_rows[c], kept[c]) for c in schema.names], schema=schema
        )
    return _identical(rows, kept, dataset)


def _new_by_day(
    new: pa.Table,
    is_new: np.ndarray,
    hashes: np.ndarray,
    sorted_hashes: np.ndarray,
    check: np.ndarray,
    dataset: Dataset,
) -> tuple[dict[dt.date, pa.Table], dict[dt.date, np.ndarray]]:
    """New rows per event date, in arrival order (a sequential read of the spill, or none at all),
    and their sorted hashes."""
    writes: dict[dt.date, pa.Table] = {}
    write_hashes: dict[dt.date, np.ndarray] = {}
    if not is_new.any():
        return writes, write_hashes
    # A filter keeps arrival order and copies contiguous runs: much cheaper than a take.
    lake_rows_of_new = new if is_new.all() else new.filter(pa.array(is_new))
    # The lake's columns, the text of few values still as dictionary arrays: the shard file's
    # writer stores them as text (ParquetAppender's ``stored``) from their dictionaries.
    lake_rows_of_new = lake_rows_of_new.select(list(dataset.ingest.names)).cast(dataset.ingest)
    day_of = utc_date(lake_rows_of_new[dataset.time_field]).to_numpy().astype("datetime64[D]")
    # Most pieces hold one event date: min and max tell it without np.unique's sort (5 ms per
    # 250k rows, 0.2 s of CPU per 10M events).
    low, high = day_of.min(), day_of.max()
    days = [low] if low == high else np.unique(day_of)
    for day in days:
        on_day = None if len(days) == 1 else day_of == day
        rows = lake_rows_of_new if on_day is None else lake_rows_of_new.filter(pa.array(on_day))
        writes[day.item()] = rows
        # One day: the piece's sorted hashes without the checked rows', no sort again.
        write_hashes[day.item()] = (
            _without(sorted_hashes, hashes[check]) if on_day is None else np.sort(hashes[is_new][on_day])
        )
    return writes, write_hashes


def _conflicts(
    new: pa.Table,
    conflict_pos: np.ndarray,
    kept_pos: np.ndarray,
    lake: pa.Table,
    lake_of_conflict: np.ndarray,
    dataset: Dataset,
) -> pa.Table:
    """Quarantine rows for the copies that differ from the one kept, naming where the kept one came from."""
    schema = dataset.lake
    conflicts = _take(new, conflict_pos)
    kept_source = _take(new, kept_pos).select(["_source_file", "_landing_date"])
    kept_source = kept_source.cast(pa.schema([schema.field(c) for c in kept_source.column_names]))
    if lake.num_rows and len(conflict_pos):
        from_lake = lake_of_conflict >= 0
        lake_src = lake.take(pa.array(np.where(from_lake, lake_of_conflict, 0)))
        kept_source = pa.table(
            {
                c: pc.if_else(pa.array(from_lake), lake_src[c], kept_source[c])
                for c in ("_source_file", "_landing_date")
            }
        )
    return pa.table(
        {
            "landing_date": conflicts["_landing_date"],
            "source_file": conflicts["_source_file"].cast(pa.string()),
            "row_number": conflicts[ROW_NUMBER],
            "event_id": conflicts[dataset.id_field],
            "reason": pa.array(["conflicting_duplicate"] * len(conflict_pos), pa.string()),
            "detail": pc.binary_join_element_wise(
                "differs from the copy kept from ",
                kept_source["_source_file"],
                " (landing ",
                pc.cast(kept_source["_landing_date"], pa.string()),
                ")",
                "",
            ),
            "raw": pa.nulls(len(conflict_pos), pa.string()),
        },
        schema=QUARANTINE_SCHEMA,
    )


def sorted_hashes(table: pa.Table, dataset: Dataset = EVENTS) -> np.ndarray:
    """The index sidecar of a shard file: its keys' hashes, sorted."""
    return np.sort(stable_hash(dataset.key(table)))


def sub_shard_parts(refs: Iterable[tuple], remote: bool) -> Iterator[tuple[int, list[pa.Table]]]:
    """Each sub-shard's clean rows of one shard, in sub-shard order, from what read-and-validate handed
    over: (sub, ``lake.CarriedSegment``) carried between tasks, or (sub, path, first byte, end byte) of
    a spill file. On an object store, spilled sub-shards are read together up to
    ``lake.READ_BATCH_BYTES``: a read unit's sub-shards of one shard follow one another in its spill
    file, so a batch is one request per read unit, not one per read unit and sub-shard."""
    by_sub: dict[int, list[lake.CarriedSegment | lake.Segment]] = {}
    for sub, *where in refs:
        part = where[0] if isinstance(where[0], lake.CarriedSegment) else tuple(where)
        by_sub.setdefault(sub, []).append(part)

    def size(sub: int) -> int:
        return sum(p.nbytes if isinstance(p, lake.CarriedSegment) else p[2] - p[1] for p in by_sub[sub])

    budget = lake.READ_BATCH_BYTES if remote else 0  # a local file's sub-shards: one at a time
    for batch in lake.in_batches(sorted(by_sub), size, budget):
        spilled = iter(
            lake.read_ipc_segments(
                p for sub in batch for p in by_sub[sub] if not isinstance(p, lake.CarriedSegment)
            )
        )
        for sub in batch:
            yield sub, [p.table if isinstance(p, lake.CarriedSegment) else next(spilled) for p in by_sub[sub]]
