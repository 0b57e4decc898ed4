"""The order bulk loads put rows in: a table's primary key as integer ranks packed into one integer
(``key_order``), the order Arrow's stable sort gives, twice as fast as sorting the text itself."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def key_order(rows: pa.Table, keys: list[str]) -> pa.Array:
    """Indices that sort ``rows`` by ``keys`` ascending (stable), as Arrow's ``sort_by`` would.

    Each key column becomes integer ranks (a string column: its position among the sorted distinct
    values, byte order like SQLite's and PostgreSQL's C collation), packed into one int64 when the
    ranges fit: twice as fast as sorting millions of string keys. Nulls are not expected in keys.
    """
    found = [_ranks(rows[k]) for k in keys]
    ranks = [r for r in found if r is not None]
    if len(ranks) < len(found):
        return pc.sort_indices(rows, [(k, "ascending") for k in keys])
    lows = [int(r.min()) for r in ranks]
    spans = [int(r.max()) - low + 1 for r, low in zip(ranks, lows, strict=True)]
    if math.prod(spans) < 2**62:
        packed = np.zeros(rows.num_rows, np.int64)
        for r, low, span in zip(ranks, lows, spans, strict=True):
            packed = packed * span + (r - low)
        return pa.array(np.argsort(packed, kind="stable"))
    return pa.array(np.lexsort(ranks[::-1]))


def _ranks(column: pa.ChunkedArray) -> np.ndarray | None:
    if pa.types.is_dictionary(column.type):
        return _dictionary_ranks(column)
    values = column.combine_chunks()
    if values.null_count:
        return None
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        # one hash of the rows (their distinct values and each row's), then a sort of the distinct
        encoded = pc.dictionary_encode(values)
        rank = np.empty(len(encoded.dictionary), np.int64)
        rank[pc.sort_indices(encoded.dictionary).to_numpy()] = np.arange(len(encoded.dictionary))
        return rank[encoded.indices.to_numpy()]
    if pa.types.is_date32(values.type):
        return values.cast(pa.int32()).to_numpy().astype(np.int64)
    if pa.types.is_integer(values.type) or pa.types.is_timestamp(values.type):
        return values.cast(pa.int64()).to_numpy()
    return None


def _dictionary_ranks(column: pa.ChunkedArray) -> np.ndarray | None:
    """A dictionary column's ranks from its values' ranks: the chunks' dictionaries made one (a hash
    of the distinct values, not of every row), sorted once, looked up by each row's index."""
    if column.null_count or not column.num_chunks:
        return None
    # A bulk load unifies its table's dictionaries first: unifying again would hash every chunk's
    # (shared) dictionary once more, a hundred thousand accounts times hundreds of chunks.
    unified = column if _one_dictionary(column) else column.unify_dictionaries()
    dictionary = unified.chunk(0).dictionary
    rank = np.empty(len(dictionary), np.int64)
    rank[pc.sort_indices(dictionary).to_numpy()] = np.arange(len(dictionary))
    return np.concatenate([rank[chunk.indices.to_numpy()] for chunk in unified.chunks])


def _one_dictionary(column: pa.ChunkedArray) -> bool:
    """Every chunk holds the very same dictionary (the same buffers, as ``unify_dictionaries`` leaves
    them): no value is compared."""

    def where(chunk: pa.DictionaryArray) -> list[int | None]:
        return [None if b is None else b.address for b in chunk.dictionary.buffers()]

    first = where(column.chunk(0))
    return all(where(chunk) == first for chunk in column.chunks[1:])
