"""Parquet in the lake: how files are encoded (dictionary and byte-stream-split pages), written,
appended a row group at a time, scanned and cut into units of row groups for parallel reads.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from pipelines.lake import objects
from pipelines.lake.paths import (
    ARROW_SCHEMA_KEY,
    create_object,
    io_errors,
    is_local,
    list_files,
    open_object,
    partition,
    partition_dates,
    writing,
)
from pipelines.runtime import faults
from pipelines.runtime.files import local_atomic
from schemas.events import LAKE_SCHEMA, TOKEN_FIELDS
from schemas.lake import DICTIONARY_COLUMNS


def _parquet_options(schema: pa.Schema) -> dict:
    """zstd; dictionary pages for the columns of few values; byte-stream-split pages for numbers,
    dates and times; min/max statistics only for dates and times, what ``scan`` prunes row groups by
    (a window of days, ``since``). Statistics of text and counts no reader uses, and they cost a sixth
    of the write (1.24M events: 0.64 -> 0.53 s).

    Byte stream split stores the k-th byte of every value together, so zstd finds the runs of equal
    high bytes that counts and timestamps have, without a search: a 1.24M-event shard file writes in
    0.29 s instead of 0.39 s, reads in 0.15 s instead of 0.43 s, and is 3% smaller (Parquet format
    2.11 for integers: pyarrow >= 17, parquet-java >= 1.14, DuckDB since mid-2026 read it)."""
    dictionary = [c for c in DICTIONARY_COLUMNS if c in schema.names]
    return {
        "compression": "zstd",
        "use_dictionary": dictionary,
        "column_encoding": {
            f.name: "BYTE_STREAM_SPLIT" for f in schema if f.name not in dictionary and _split_type(f.type)
        }
        or None,
        "write_statistics": [f.name for f in schema if pa.types.is_temporal(f.type)] or False,
    }


def _split_type(typ: pa.DataType) -> bool:
    """Types whose Parquet pages can be byte-stream-split: fixed-width numbers, dates, timestamps."""
    if pa.types.is_dictionary(typ):
        return False
    return (
        pa.types.is_integer(typ)
        or pa.types.is_floating(typ)
        or pa.types.is_timestamp(typ)
        or pa.types.is_date32(typ)
    )


@io_errors
def write_parquet(path: str, table: pa.Table) -> None:
    options = _parquet_options(table.schema)
    if is_local(path):
        with local_atomic(path) as partial:
            pq.write_table(table, partial, **options)
        faults.checkpoint("lake.write")
    else:
        with create_object(path) as handle:
            pq.write_table(table, handle, **options)


class ParquetAppender:
    """A Parquet file written a table at a time (one row group each), closed once: for files whose
    rows arrive in pieces that should not all be held in memory at once.

    ``stored``: the schema readers of the file get, when the tables written carry some of its text
    columns as dictionary arrays (``schema``). Their dictionary pages are then written from the arrays'
    own dictionaries, without a cast to text and a hash of every value back into a dictionary, and
    the file reads back as ``stored`` (same pages, same Arrow schema in the footer).
    """

    def __init__(self, path: str, schema: pa.Schema, stored: pa.Schema | None = None) -> None:
        self.path = path
        self._handle = None
        self._local = contextlib.ExitStack()
        self._stored = stored
        self._dictionaries = any(pa.types.is_dictionary(f.type) for f in schema)
        with writing(path):
            if is_local(path):  # written beside ``path``, renamed into place when closed
                sink: object = self._local.enter_context(local_atomic(path))
            else:
                self._handle = create_object(path)
                sink = self._handle
            options = _parquet_options(stored or schema)
            if stored is not None:
                options["store_schema"] = False  # the footer gets ``stored`` instead, at close
            self._writer = pq.ParquetWriter(sink, schema, **options)

    def write(self, table: pa.Table) -> None:
        if self._dictionaries:  # one dictionary per column in a row group, or the writer falls back
            table = table.unify_dictionaries()  # to plain pages from the chunk that brings another
        with writing(self.path):
            self._writer.write_table(table)

    def close(self) -> None:
        with writing(self.path):
            if self._stored is not None:
                # What the writer stores for a table of this schema: Arrow's own footer keys.
                self._writer.add_key_value_metadata(
                    {ARROW_SCHEMA_KEY: base64.b64encode(self._stored.serialize().to_pybytes())}
                    | dict(self._stored.metadata or {})
                )
            self._writer.close()
            if self._handle is not None:
                self._handle.close()
            self._local.close()


def open_parquet(path: str, **options: object) -> pq.ParquetFile:
    """``options`` for ``pq.ParquetFile``: ``read_dictionary`` (text columns the file has, read as
    dictionary arrays), ``metadata`` (its footer, already read)."""
    return pq.ParquetFile(path if is_local(path) else open_object(path), **options)


def read_parquet(
    path: str, columns: list[str] | None = None, read_dictionary: list[str] | None = None
) -> pa.Table:
    return open_parquet(path, read_dictionary=read_dictionary).read(columns=columns)


def read_parquet_files(paths: list[str], read_dictionary: list[str] | None = None) -> list[pa.Table]:
    """Many small files whole, in order: on S3 each in one request (no size asked first, no ranged reads
    of footer and pages), eight at a time: what a driver reads back of many tasks' staged files.
    ``read_dictionary``: columns read as the dictionary arrays Parquet stores them as."""
    remote = [p for p in paths if objects.handles(p)]
    if len(remote) < 2:
        return [read_parquet(p, read_dictionary=read_dictionary) for p in paths]
    with ThreadPoolExecutor(max_workers=8) as pool:
        data = dict(zip(remote, pool.map(objects.read_whole, remote), strict=True))
    return [
        pq.read_table(pa.BufferReader(data[p]), read_dictionary=read_dictionary)
        if p in data
        else read_parquet(p, read_dictionary=read_dictionary)
        for p in paths
    ]


def dataset_files(lake: str, dataset: str) -> list[str]:
    """Every Parquet file of the committed partitions of ``dataset`` (no half-swapped leftovers)."""
    return [f for day in partition_dates(lake, dataset) for f in list_files(partition(lake, dataset, day))]


def scan(
    paths: list[str],
    columns: list[str],
    where: pc.Expression,
    schema: pa.Schema,
    read_dictionary: list[str] | None = None,
) -> pa.Table:
    """``columns`` of the rows of Parquet files ``paths`` that pass ``where``, with Arrow's pushdown
    (row groups whose statistics rule it out are not read). Local files, or S3 objects, are one Arrow
    dataset; others are read through Beam's FileSystems, each opened seekable, so a lake on any scheme
    Beam knows works, not only those Arrow knows. ``schema`` types the result when there is no file;
    ``read_dictionary``: text columns of few values to read as dictionary arrays (no string per row)."""
    if not paths:
        return pa.schema([schema.field(c) for c in columns]).empty_table()
    parquet = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=read_dictionary))
    local = all(is_local(p) for p in paths)
    if local or all(objects.handles(p) for p in paths):
        # One Arrow dataset, on S3 through Arrow's own client: it reads the column chunks it needs in
        # few coalesced ranges, several at once (a file at a time through a seekable handle cost
        # 2.7x the CPU for the same rows).
        names, s3 = (paths, None) if local else ([objects.key(p) for p in paths], objects.filesystem())
        dataset = ds.dataset(names, format=parquet, filesystem=s3)
        if not set(columns) <= set(dataset.schema.names):  # a column some older files lack
            widened = _widened(dataset.schema, columns, schema)
            dataset = ds.dataset(names, format=parquet, filesystem=s3, schema=widened)
        # a few batches read ahead, not Arrow's default 16 per file for 4 files at once: a scan that
        # keeps few of its rows then holds little more than what it keeps
        scanned = dataset.to_table(columns=columns, filter=where, batch_readahead=4, fragment_readahead=1)
        return with_zero_tokens(scanned)
    tables = []
    for path in paths:
        with open_object(path) as handle:
            source = handle if isinstance(handle, pa.NativeFile) else pa.PythonFile(handle, mode="r")
            fragment = parquet.make_fragment(source)
            known = fragment.physical_schema.names
            have = [c for c in columns if c in known]
            table = fragment.to_table(columns=have, filter=where)
            if len(have) < len(columns):  # older than a column: the rest as absent
                table = fill_missing(table, columns, schema)
            tables.append(table)
    return pa.concat_tables(tables, promote_options="default")


def _widened(found: pa.Schema, columns: list[str], schema: pa.Schema) -> pa.Schema:
    return pa.schema(
        [*found, *(schema.field(c) for c in columns if c not in found.names and c in schema.names)]
    )


def with_zero_tokens(table: pa.Table) -> pa.Table:
    """A token field read as null (its file was written before that token kind existed) counts 0."""
    for i, name in enumerate(table.column_names):
        if name in TOKEN_FIELDS and table.column(i).null_count:
            table = table.set_column(i, name, pc.fill_null(table.column(i), 0))
    return table


def fill_missing(table: pa.Table, columns: list[str], schema: pa.Schema = LAKE_SCHEMA) -> pa.Table:
    """``table`` with the ``columns`` it lacks added (a lake file written before they existed): a
    token field as zeros, anything else as nulls; in ``columns`` order."""
    n = table.num_rows
    cols = []
    for c in columns:
        if c in table.column_names:
            cols.append(table[c])
        elif c in TOKEN_FIELDS:
            cols.append(pa.repeat(pa.scalar(0, pa.int64()), n))
        else:
            cols.append(pa.nulls(n, schema.field(c).type))
    return pa.Table.from_arrays(cols, names=columns)


def row_groups(paths: Iterable[str]) -> list[tuple[str, int]]:
    """(path, row group index) for every row group of ``paths``."""
    out: list[tuple[str, int]] = []
    for path in paths:
        out.extend((path, i) for i in range(open_parquet(path).metadata.num_row_groups))
    return out


# Row groups read together: one element, one spill file, one partial per unit, however small the
# files (a lake of many short days holds a few thousand rows per shard file).
UNIT_ROWS = 65_536
Unit = tuple[tuple[str, int], ...]


def row_group_units(paths: Iterable[str], max_rows: int | None = None) -> list[Unit]:
    """The row groups of ``paths`` in order, in units of up to ``max_rows`` (``UNIT_ROWS``) rows (a
    larger row group is a unit of its own): the unit of parallel reading."""
    max_rows = max_rows or UNIT_ROWS
    units: list[Unit] = []
    current: list[tuple[str, int]] = []
    rows = 0
    for path in paths:
        meta = open_parquet(path).metadata
        for i in range(meta.num_row_groups):
            n = meta.row_group(i).num_rows
            if current and rows + n > max_rows:
                units.append(tuple(current))
                current, rows = [], 0
            current.append((path, i))
            rows += n
    if current:
        units.append(tuple(current))
    return units


def read_unit(
    unit: Unit, columns: list[str] | None = None, read_dictionary: list[str] | None = None
) -> pa.Table:
    """The rows of a unit's row groups, in order, as one table; ``read_dictionary``: text columns to
    read as dictionary arrays (one chunk per row group, each with its own dictionary)."""
    files: dict[str, pq.ParquetFile] = {}
    parts = []
    for path, group in unit:
        if path not in files:
            files[path] = open_parquet(path, read_dictionary=read_dictionary)
        known = files[path].schema_arrow.names
        if columns is None or all(c in known for c in columns):
            parts.append(files[path].read_row_group(group, columns=columns))
        else:  # a file written before a column existed (a token kind added later reads 0)
            have = [c for c in columns if c in known]
            parts.append(fill_missing(files[path].read_row_group(group, columns=have), columns))
    return pa.concat_tables(parts) if len(parts) > 1 else parts[0]
