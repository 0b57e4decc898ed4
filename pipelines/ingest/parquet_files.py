"""Landing Parquet files: their read units (one per row group) and each unit read as raw rows in the
shape the JSON readers give (every column as text where the event schema wants it checked), with a
file whose schema cannot hold events quarantined whole."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines import lake
from pipelines.ingest.datasets import EVENTS, Dataset
from pipelines.ingest.readers import RawChunk, check_unchanged, empty_raw, source_name, whole_file
from schemas.events import DICTIONARY, QUARANTINE_SCHEMA
from schemas.jsonl import ROW_NUMBER


def parquet_units(path: str) -> list[int | None]:
    """Row groups of a Parquet file, or [None] when its footer cannot be read (quarantined later)."""
    try:
        return list(range(lake.open_parquet(path).metadata.num_row_groups)) or [None]
    except (pa.ArrowException, OSError):
        return [None]


def read_parquet_unit(
    path: str,
    row_group: int | None,
    landing_date,
    listed: tuple[int, int] | None = None,
    dataset: Dataset = EVENTS,
) -> RawChunk:
    name = source_name(path)
    check_unchanged(path, listed)
    chunk = _read_parquet_unit(path, name, row_group, landing_date, dataset)
    check_unchanged(path, listed)
    return chunk


def _read_parquet_unit(
    path: str, name: str, row_group: int | None, landing_date, dataset: Dataset
) -> RawChunk:
    try:
        pf = _open_parquet(path, dataset)
        if row_group is None:
            if pf.metadata.num_row_groups == 0:
                return RawChunk(empty_raw(dataset), QUARANTINE_SCHEMA.empty_table(), rows_read=0)
            raise pa.ArrowInvalid("no readable row group")
        table = pf.read_row_group(row_group)
        first_row = sum(pf.metadata.row_group(i).num_rows for i in range(row_group)) + 1
    except (pa.ArrowException, OSError) as exc:
        return whole_file(landing_date, name, "unreadable_file", f"corrupt Parquet: {exc}", dataset)
    problem = _schema_problem(table.schema, dataset)
    if problem:
        return whole_file(landing_date, name, "wrong_schema", problem, dataset)
    columns = {}
    for f in dataset.raw:
        if f.name not in table.column_names:
            columns[f.name] = pa.nulls(table.num_rows, f.type)
            continue
        try:
            columns[f.name] = _as_raw(table[f.name], f, dataset)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            return whole_file(landing_date, name, "wrong_schema", f"column {f.name}: {exc}", dataset)
    raw = pa.table(columns).append_column(
        ROW_NUMBER, pa.array(np.arange(first_row, first_row + table.num_rows, dtype=np.int64))
    )
    return RawChunk(raw, QUARANTINE_SCHEMA.empty_table(), rows_read=table.num_rows)


def _as_raw(col: pa.ChunkedArray, f: pa.Field, dataset: Dataset) -> pa.ChunkedArray:
    """A Parquet column as the raw schema's type. Integers of another width or sign are clamped into
    int64 first (an unsigned 2^64-1 would not cast): validation's upper bounds then quarantine the
    row (tokens_out_of_range, duration_out_of_range) instead of the cast failing the file."""
    if f.name in dataset.time_fields and pa.types.is_timestamp(col.type):
        return col
    if f.name in dataset.low_cardinality and col.type == DICTIONARY:
        return col
    if pa.types.is_integer(f.type) and pa.types.is_unsigned_integer(col.type) and col.type.bit_width == 64:
        col = pc.min_element_wise(col, pa.scalar(2**63 - 1, col.type))
    return col.cast(f.type)


def _open_parquet(path: str, dataset: Dataset) -> pq.ParquetFile:
    """The file, its low-cardinality text columns read as dictionary arrays (their pages usually are
    dictionary-encoded already: no string is built per row)."""
    pf = lake.open_parquet(path)
    schema = pf.schema_arrow
    wanted = [
        n for n in dataset.low_cardinality if n in schema.names and pa.types.is_string(schema.field(n).type)
    ]
    return lake.open_parquet(path, read_dictionary=wanted, metadata=pf.metadata) if wanted else pf


def _schema_problem(schema: pa.Schema, dataset: Dataset) -> str | None:
    """Why a Parquet file's columns cannot hold the dataset's rows (None if they can)."""
    twice = sorted({n for n in schema.names if schema.names.count(n) > 1})
    if twice:
        return f"column {twice[0]} appears {schema.names.count(twice[0])} times"
    missing = [n for n in dataset.required if n not in schema.names]
    if missing:
        return f"missing column(s): {', '.join(missing)}"
    for f in dataset.payload:
        if f.name not in schema.names:
            continue
        have = schema.field(f.name).type
        if pa.types.is_null(have):  # a column with no value at all fits any type
            continue
        if f.name in dataset.time_fields:
            ok = pa.types.is_timestamp(have) or pa.types.is_string(have) or pa.types.is_large_string(have)
        elif pa.types.is_integer(f.type):
            ok = pa.types.is_integer(have)
        elif pa.types.is_boolean(f.type):
            ok = pa.types.is_boolean(have)
        else:
            ok = pa.types.is_string(have) or pa.types.is_large_string(have) or pa.types.is_dictionary(have)
        if not ok:
            return f"column {f.name} is {have}, expected {f.type}"
    return None
