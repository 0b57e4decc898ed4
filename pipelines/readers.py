"""Reading landing files into raw Arrow chunks, whatever their format, without losing a row.

Formats: Parquet (one chunk per row group), JSON lines plain or gzip (streamed in chunks of whole
lines), and CloudEvents 1.0 structured mode (one event per line, or a JSON batch array). A file that
cannot be read at all becomes one quarantine row; a line that cannot be parsed becomes one too.
Each chunk is a ``RawChunk``: rows in RAW_JSON_SCHEMA form (event_time may still be text) with
``_row_number``, the quarantine rows found while reading, and how many rows were read.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from isal import igzip
from isal.isal_zlib import error as DeflateError

from pipelines import lake
from schemas.events import (
    DICTIONARY,
    EVENT_SCHEMA,
    LOW_CARDINALITY,
    QUARANTINE_SCHEMA,
    RAW_JSON_SCHEMA,
    REQUIRED_FIELDS,
)
from schemas.jsonl import ROW_NUMBER, JsonLinesResult, newline_count, read_json_lines

JSON_SUFFIXES = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz", ".json.gz")
PARQUET_SUFFIXES = (".parquet", ".parq")
CHUNK_BYTES = 64 << 20
UTF8_BOM = b"\xef\xbb\xbf"

SPEC_OK = "_specversion_ok"  # present on CloudEvents chunks only
CE_DATA_FIELDS = [f for f in RAW_JSON_SCHEMA if f.name not in ("event_id", "event_time")]
CE_SCHEMA = pa.schema(
    [
        pa.field("specversion", pa.string()),
        pa.field("id", pa.string()),
        pa.field("time", pa.string()),
        pa.field("data", pa.struct(CE_DATA_FIELDS)),
    ]
)


@dataclass
class RawChunk:
    table: pa.Table  # RAW columns (event_time string or timestamp) + _row_number
    quarantine: pa.Table  # QUARANTINE_SCHEMA
    rows_read: int
    raw_text: JsonLinesResult | None = None  # JSON inputs: the lines, for quarantine rows
    line_offset: int = 0  # lines of the file before this chunk

    def raw_lines(self, row_numbers: pa.Array) -> pa.Array | None:
        if self.raw_text is None:
            return None
        return self.raw_text.raw_text(pc.subtract(row_numbers, self.line_offset).to_numpy())


def file_kind(path: str) -> str | None:
    name = os.path.basename(path).lower()
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if name.endswith(JSON_SUFFIXES):
        return "json"
    return None


def quarantine_rows(
    landing_date, source_file: str, row_numbers, event_ids, reasons, details, raws
) -> pa.Table:
    n = len(reasons)
    return pa.table(
        {
            "landing_date": pa.array([landing_date] * n, pa.date32()),
            "source_file": pa.array([source_file] * n, pa.string()),
            "row_number": pa.array(row_numbers, pa.int64()),
            "event_id": pa.array(event_ids, pa.string()),
            "reason": pa.array(reasons, pa.string()),
            "detail": pa.array(details, pa.string()),
            "raw": pa.array(raws, pa.string()),
        },
        schema=QUARANTINE_SCHEMA,
    )


def whole_file(landing_date, source_file: str, reason: str, detail: str) -> RawChunk:
    """The file could not be read: it counts as one row read and one row quarantined."""
    q = quarantine_rows(landing_date, source_file, [None], [None], [reason], [detail[:2000]], [None])
    return RawChunk(_empty_raw(), q, rows_read=1)


def _empty_raw() -> pa.Table:
    return RAW_JSON_SCHEMA.empty_table().append_column(ROW_NUMBER, pa.array([], pa.int64()))


def _open(path: str) -> io.BufferedIOBase:
    return open(path, "rb") if lake.is_local(path) else lake.open_object(path)  # type: ignore[return-value]


# -- Parquet ---------------------------------------------------------------------------------


def parquet_units(path: str) -> list[int | None]:
    """Row groups of a Parquet file, or [None] when its footer cannot be read (quarantined later)."""
    try:
        return list(range(lake.open_parquet(path).metadata.num_row_groups)) or [None]
    except (pa.ArrowException, OSError):
        return [None]


def read_parquet_unit(path: str, row_group: int | None, landing_date) -> RawChunk:
    name = os.path.basename(path)
    try:
        pf = _open_parquet(path)
        if row_group is None:
            if pf.metadata.num_row_groups == 0:
                return RawChunk(_empty_raw(), QUARANTINE_SCHEMA.empty_table(), rows_read=0)
            raise pa.ArrowInvalid("no readable row group")
        table = pf.read_row_group(row_group)
        first_row = sum(pf.metadata.row_group(i).num_rows for i in range(row_group)) + 1
    except (pa.ArrowException, OSError) as exc:
        return whole_file(landing_date, name, "unreadable_file", f"corrupt Parquet: {exc}")
    problem = _schema_problem(table.schema)
    if problem:
        return whole_file(landing_date, name, "wrong_schema", problem)
    columns = {}
    for f in RAW_JSON_SCHEMA:
        if f.name not in table.column_names:
            columns[f.name] = pa.nulls(table.num_rows, f.type)
            continue
        col = table[f.name]
        as_read = (f.name == "event_time" and pa.types.is_timestamp(col.type)) or (
            f.name in LOW_CARDINALITY and col.type == DICTIONARY
        )
        columns[f.name] = col if as_read else col.cast(f.type)
    raw = pa.table(columns).append_column(
        ROW_NUMBER, pa.array(np.arange(first_row, first_row + table.num_rows, dtype=np.int64))
    )
    return RawChunk(raw, QUARANTINE_SCHEMA.empty_table(), rows_read=table.num_rows)


def _open_parquet(path: str) -> pq.ParquetFile:
    """The file, its low-cardinality text columns read as dictionary arrays (their pages usually are
    dictionary-encoded already: no string is built per row)."""
    pf = lake.open_parquet(path)
    schema = pf.schema_arrow
    wanted = [n for n in LOW_CARDINALITY if n in schema.names and pa.types.is_string(schema.field(n).type)]
    return lake.open_parquet(path, read_dictionary=wanted, metadata=pf.metadata) if wanted else pf


def _schema_problem(schema: pa.Schema) -> str | None:
    """Why a Parquet file's columns cannot hold usage events (None if they can)."""
    missing = [n for n in REQUIRED_FIELDS if n not in schema.names]
    if missing:
        return f"missing column(s): {', '.join(missing)}"
    for f in EVENT_SCHEMA:
        if f.name not in schema.names:
            continue
        have = schema.field(f.name).type
        if pa.types.is_null(have):  # a column with no value at all fits any type
            continue
        if f.name == "event_time":
            ok = pa.types.is_timestamp(have) or pa.types.is_string(have) or pa.types.is_large_string(have)
        elif pa.types.is_integer(f.type):
            ok = pa.types.is_integer(have)
        else:
            ok = pa.types.is_string(have) or pa.types.is_large_string(have) or pa.types.is_dictionary(have)
        if not ok:
            return f"column {f.name} is {have}, expected {f.type}"
    return None


# -- JSON lines and CloudEvents --------------------------------------------------------------


def _line_chunks(path: str) -> Iterator[tuple[bytes, int, int]]:
    """Decompressed content in chunks of whole lines: (bytes, line number of the first line - 1,
    newlines in the bytes).

    Gzip is inflated by ISA-L (``isal.igzip``: 2.8x zlib's speed, and outside the GIL, so two files
    inflate at once); a damaged stream raises OSError (a truncated one says so).
    """
    gz = path.lower().endswith(".gz")
    with (
        _open(path) as raw,
        igzip.IGzipFile(fileobj=raw, mode="rb") if gz else contextlib.nullcontext(raw) as handle,
    ):
        carry = b""
        lines_before = 0
        first = True
        while True:
            try:
                block = handle.read(CHUNK_BYTES)
            except EOFError as exc:
                raise OSError(f"Truncated gzip stream: {exc}") from None
            except DeflateError as exc:
                raise OSError(f"Corrupt gzip stream: {exc}") from None
            if not block:
                break
            if first:
                block = block.removeprefix(UTF8_BOM)  # written by some Windows tools; not data
                first = False
            cut = block.rfind(b"\n")
            if cut < 0:
                carry += block
                continue
            # One copy of the block's whole lines (a slice of bytes is a copy, and so is a sum)
            chunk = block if not carry and cut == len(block) - 1 else carry + memoryview(block)[: cut + 1]
            carry = block[cut + 1 :]
            newlines = newline_count(chunk)
            yield chunk, lines_before, newlines
            lines_before += newlines
        if carry:
            yield carry, lines_before, newline_count(carry)


def _sniff(first: bytes) -> str:
    head = first.lstrip()[:1]
    if head == b"[":
        return "ce_batch"
    line = first.lstrip().split(b"\n", 1)[0]
    return "ce_lines" if b'"specversion"' in line else "jsonl"


def read_json_file(path: str, landing_date) -> Iterator[RawChunk]:
    """Parse a JSON-lines or CloudEvents file chunk by chunk; an unreadable file is one quarantine row."""
    name = os.path.basename(path)
    mode = None
    try:
        for data, lines_before, newlines in _line_chunks(path):
            if mode is None:
                mode = _sniff(data)
                if mode == "ce_batch":
                    yield _read_ce_batch(path, landing_date, name)
                    return
            yield _parse_chunk(data, lines_before, newlines, mode, landing_date, name)
    except (OSError, EOFError, zlib.error) as exc:
        # Rows of earlier chunks were already handed on; the unreadable rest is quarantined as one row.
        yield whole_file(landing_date, name, "unreadable_file", f"{type(exc).__name__}: {exc}")


def _parse_chunk(
    data: bytes, lines_before: int, newlines: int, mode: str, landing_date, name: str
) -> RawChunk:
    schema = CE_SCHEMA if mode.startswith("ce") else RAW_JSON_SCHEMA
    parsed = read_json_lines(data, schema, newlines)
    table = parsed.table
    if mode.startswith("ce"):
        table = _flatten_cloudevents(table)
    if lines_before:
        table = table.set_column(
            table.schema.get_field_index(ROW_NUMBER), ROW_NUMBER, pc.add(table[ROW_NUMBER], lines_before)
        )
    rej = parsed.rejected
    quarantine = quarantine_rows(
        landing_date,
        name,
        [r.row_number + lines_before for r in rej],
        [None] * len(rej),
        [r.reason for r in rej],
        [r.detail for r in rej],
        [r.raw[:100_000] for r in rej],
    )
    return RawChunk(table, quarantine, table.num_rows + len(rej), raw_text=parsed, line_offset=lines_before)


def _flatten_cloudevents(table: pa.Table) -> pa.Table:
    """CloudEvents structured mode -> event columns: id -> event_id, time -> event_time, data.* -> rest."""
    data = table["data"].combine_chunks()
    cols = {"event_id": table["id"], "event_time": table["time"]}
    for f in CE_DATA_FIELDS:
        cols[f.name] = pc.struct_field(data, f.name) if len(data) else pa.array([], f.type)
    out = pa.table({f.name: cols[f.name] for f in RAW_JSON_SCHEMA}, schema=RAW_JSON_SCHEMA)
    # Validation quarantines rows whose specversion is not 1.0 (or missing) as unsupported_specversion.
    spec_ok = pc.fill_null(pc.equal(table["specversion"], "1.0"), False)
    return out.append_column(ROW_NUMBER, table[ROW_NUMBER]).append_column(SPEC_OK, spec_ok)


def _read_ce_batch(path: str, landing_date, name: str) -> RawChunk:
    """A CloudEvents JSON batch (application/cloudevents-batch+json): one array of events."""
    with _open(path) as raw_handle:
        handle = gzip.GzipFile(fileobj=raw_handle) if path.lower().endswith(".gz") else raw_handle
        body = handle.read()
    try:
        events = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return whole_file(landing_date, name, "malformed_json", f"CloudEvents batch: {exc}")
    if not isinstance(events, list):
        return whole_file(landing_date, name, "malformed_json", "CloudEvents batch is not a JSON array")
    # Re-encode element by element as JSON lines (batch files are small by nature), then parse as lines.
    lines = b"\n".join(json.dumps(e, separators=(",", ":")).encode() for e in events)
    return _parse_chunk(lines, 0, newline_count(lines), "ce_lines", landing_date, name)
