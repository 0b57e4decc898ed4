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
from isal import igzip
from isal.isal_zlib import error as DeflateError

from pipelines import lake
from pipelines.errors import UsageBillingError
from pipelines.ingest.datasets import EVENTS, Dataset
from schemas.events import QUARANTINE_SCHEMA
from schemas.jsonl import (
    MAX_JSON_DEPTH,
    ROW_NUMBER,
    JsonLinesResult,
    joined,
    json_depth,
    newline_count,
    read_json_lines,
)
from schemas.limits import CONTROL_CHARACTERS

JSON_SUFFIXES = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz", ".json.gz")
PARQUET_SUFFIXES = (".parquet", ".parq")
UTF8_BOM = b"\xef\xbb\xbf"

SPEC_OK = "_specversion_ok"  # present on CloudEvents chunks only


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


CHUNK_BYTES = 64 << 20
MAX_LINE_BYTES = CHUNK_BYTES  # a longer line is quarantined unread (its bytes are skipped, not kept)
MAX_BATCH_BYTES = 256 << 20  # a CloudEvents batch is one JSON value: read whole, so bounded
MAX_FILE_BYTES = 64 << 30  # a landing file (decompressed, for gzip) larger than this is quarantined


class LandingFileChanged(UsageBillingError):
    """A landing file changed between the listing and its read: its rows would be a mix of two files."""


def source_name(path: str) -> str:
    """The file name as the lake, the quarantine and the warehouse record it: any name works. Bytes
    that are not UTF-8 (``os.listdir`` hands them over as surrogates) and control characters are
    written as backslash escapes, so the name is always one line of valid text."""
    name = os.path.basename(path)
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return CONTROL_CHARACTERS.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def stamp(path: str) -> tuple[int, int]:
    """(size, modification time) of a landing file: what changes when it is rewritten or replaced."""
    try:
        found = lake.stamps([path])
    except OSError:
        found = []
    if not found:
        raise LandingFileChanged(f"landing file {source_name(path)} disappeared while this run read it")
    _, size, mtime = found[0]
    return int(size), int(mtime)


def check_unchanged(path: str, listed: tuple[int, int] | None) -> None:
    if listed is not None and stamp(path) != tuple(listed):
        raise LandingFileChanged(
            f"landing file {source_name(path)} changed while this run read it (size or time differ from "
            "the listing); nothing was committed"
        )


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


def whole_file(
    landing_date, source_file: str, reason: str, detail: str, dataset: Dataset = EVENTS
) -> RawChunk:
    """The file could not be read: it counts as one row read and one row quarantined."""
    q = quarantine_rows(landing_date, source_file, [None], [None], [reason], [detail[:2000]], [None])
    return RawChunk(empty_raw(dataset), q, rows_read=1)


def empty_raw(dataset: Dataset = EVENTS) -> pa.Table:
    return dataset.raw.empty_table().append_column(ROW_NUMBER, pa.array([], pa.int64()))


def _open(path: str) -> io.BufferedIOBase:
    return open(path, "rb") if lake.is_local(path) else lake.open_object(path)


# -- Parquet ---------------------------------------------------------------------------------


# -- JSON lines and CloudEvents --------------------------------------------------------------


@dataclass(frozen=True)
class OverlongLine:
    """A line longer than MAX_LINE_BYTES, skipped without keeping its bytes."""

    row_number: int
    length: int


def _line_chunks(path: str) -> Iterator[tuple[bytes, int, int] | OverlongLine]:
    """Decompressed content in chunks of whole lines: (bytes, line number of the first line - 1,
    newlines in the bytes); an overlong line comes as an ``OverlongLine`` in its place.

    Memory stays bounded whatever the file holds: a line grows to at most MAX_LINE_BYTES before it is
    skipped, and a file is read to at most MAX_FILE_BYTES (decompressed) before the rest is refused.
    Gzip is inflated by ISA-L (``isal.igzip``: 2.8x zlib's speed, and outside the GIL, so two files
    inflate at once); a damaged stream raises OSError (a truncated one says so).
    """
    gz = path.lower().endswith(".gz")
    with (
        _open(path) as raw,
        igzip.IGzipFile(fileobj=raw, mode="rb") if gz else contextlib.nullcontext(raw) as handle,
    ):
        carry = b""
        skipping = 0  # bytes of an overlong line skipped so far (0: not skipping)
        lines_before = 0
        first = True
        total = 0
        while True:
            try:
                block = handle.read(CHUNK_BYTES)
            except EOFError as exc:
                raise OSError(f"Truncated gzip stream: {exc}") from None
            except DeflateError as exc:  # type: ignore[misc]  # isal's stubs do not type its error class
                raise OSError(f"Corrupt gzip stream: {exc}") from None
            if not block:
                break
            total += len(block)
            if total > MAX_FILE_BYTES:
                raise FileTooLarge(f"more than {MAX_FILE_BYTES >> 30} GiB of content; the rest was not read")
            if first:
                block = block.removeprefix(UTF8_BOM)  # written by some Windows tools; not data
                first = False
            if skipping or carry:  # the block continues a line: does it end here, and how long is it?
                end_of_line = block.find(b"\n")
                length = skipping + len(carry) + (end_of_line if end_of_line >= 0 else len(block))
                if length > MAX_LINE_BYTES:
                    if end_of_line < 0:
                        skipping, carry = length, b""
                        continue
                    yield OverlongLine(lines_before + 1, length)
                    lines_before += 1
                    skipping, carry = 0, b""
                    block = block[end_of_line + 1 :]
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
        if skipping:
            yield OverlongLine(lines_before + 1, skipping)
        elif carry:
            yield carry, lines_before, newline_count(carry)


class FileTooLarge(OSError):
    pass


def _is_batch(first: bytes) -> bool:
    """A CloudEvents batch is one JSON array: the file's first value starts with '['."""
    return first.lstrip()[:1] == b"["


def read_json_file(
    path: str, landing_date, listed: tuple[int, int] | None = None, dataset: Dataset = EVENTS
) -> Iterator[RawChunk]:
    """Parse a JSON-lines or CloudEvents file chunk by chunk; an unreadable file is one quarantine row.
    Each record's format (a plain event or a CloudEvent) is decided by its own top-level keys."""
    name = source_name(path)
    check_unchanged(path, listed)
    first = True
    try:
        for piece in _line_chunks(path):
            if isinstance(piece, OverlongLine):
                detail = f"a line of {piece.length:,} bytes; at most {MAX_LINE_BYTES:,} are read"
                q = quarantine_rows(
                    landing_date, name, [piece.row_number], [None], ["line_too_long"], [detail], [None]
                )
                yield RawChunk(empty_raw(dataset), q, rows_read=1)
                first = False
                continue
            data, lines_before, newlines = piece
            if first and _is_batch(data):
                yield _read_ce_batch(path, landing_date, name, dataset)
                check_unchanged(path, listed)
                return
            first = False
            yield _parse_chunk(data, lines_before, newlines, landing_date, name, dataset)
    except FileTooLarge as exc:
        yield whole_file(landing_date, name, "file_too_large", str(exc), dataset)
    except (OSError, EOFError, zlib.error) as exc:
        # Rows of earlier chunks were already handed on; the unreadable rest is quarantined as one row.
        yield whole_file(landing_date, name, "unreadable_file", f"{type(exc).__name__}: {exc}", dataset)
    check_unchanged(path, listed)


def _parse_chunk(
    data: bytes, lines_before: int, newlines: int, landing_date, name: str, dataset: Dataset = EVENTS
) -> RawChunk:
    """Lines -> raw rows. Every line is read as a plain record first (extra keys are ignored); a line
    with neither its id nor its time (event_id and event_time; task_id and completed_at) that carries
    a top-level ``specversion`` is a CloudEvent and is read again as one. A value never decides the
    format: only which keys the record has."""
    parsed = read_json_lines(data, dataset.raw, newlines)
    table = _as_cloudevents_where_structured(parsed, dataset)
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


def _as_cloudevents_where_structured(parsed: JsonLinesResult, dataset: Dataset) -> pa.Table:
    """The parsed rows, those that are CloudEvents by their keys replaced by their flattened form."""
    table = parsed.table
    candidates = pc.and_(table[dataset.ce_id].is_null(), table[dataset.time_field].is_null())
    if not pc.any(candidates).as_py():
        return table
    idx = pc.indices_nonzero(candidates)
    numbers = pc.take(table[ROW_NUMBER].combine_chunks(), idx)
    if len(numbers) == table.num_rows and not parsed.rejected and not parsed.blank_lines:
        body = parsed.data  # every line is a candidate (a CloudEvents file): no copy
    else:
        body = joined(parsed.lines.take(pc.subtract(numbers, 1))).to_pybytes()
    ce = read_json_lines(body if body.endswith(b"\n") else body + b"\n", dataset.ce_schema)
    structured = ce.table.filter(ce.table["specversion"].is_valid())
    if structured.num_rows == 0:
        return table
    # CE row k of the sub-parse is line numbers[k - 1] of the chunk
    structured = structured.set_column(
        structured.schema.get_field_index(ROW_NUMBER),
        ROW_NUMBER,
        pc.take(numbers, pc.subtract(structured[ROW_NUMBER], 1)),
    )
    flat = _flatten_cloudevents(structured, dataset)
    keep = pc.invert(pc.is_in(table[ROW_NUMBER], value_set=flat[ROW_NUMBER].combine_chunks()))
    plain = table.filter(keep)
    plain = plain.append_column(SPEC_OK, pa.array(np.ones(plain.num_rows, bool)))
    return pa.concat_tables([plain, flat]).sort_by(ROW_NUMBER)


def _flatten_cloudevents(table: pa.Table, dataset: Dataset) -> pa.Table:
    """CloudEvents structured mode -> record columns: id -> event_id (an outcome's task_id), time ->
    event_time (completed_at), data.* -> the rest."""
    data = table["data"].combine_chunks()
    cols = {dataset.ce_id: table["id"], dataset.time_field: table["time"]}
    for f in dataset.ce_data_fields:
        cols[f.name] = pc.struct_field(data, f.name) if len(data) else pa.array([], f.type)
    out = pa.table({f.name: cols[f.name] for f in dataset.raw}, schema=dataset.raw)
    # Validation quarantines rows whose specversion is not 1.0 (or missing) as unsupported_specversion.
    spec_ok = pc.fill_null(pc.equal(table["specversion"], "1.0"), False)
    return out.append_column(ROW_NUMBER, table[ROW_NUMBER]).append_column(SPEC_OK, spec_ok)


def _read_ce_batch(path: str, landing_date, name: str, dataset: Dataset = EVENTS) -> RawChunk:
    """A CloudEvents JSON batch (application/cloudevents-batch+json): one array of events."""
    with _open(path) as raw_handle:
        handle = gzip.GzipFile(fileobj=raw_handle) if path.lower().endswith(".gz") else raw_handle
        body = handle.read(MAX_BATCH_BYTES + 1)
    if len(body) > MAX_BATCH_BYTES:
        return whole_file(
            landing_date,
            name,
            "file_too_large",
            f"a CloudEvents batch over {MAX_BATCH_BYTES >> 20} MiB",
            dataset,
        )
    if json_depth(body) > MAX_JSON_DEPTH:  # bounded before parsing: the parser recurses per level
        return whole_file(
            landing_date,
            name,
            "malformed_json",
            f"CloudEvents batch nested over {MAX_JSON_DEPTH} levels",
            dataset,
        )
    try:
        events = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        return whole_file(landing_date, name, "malformed_json", f"CloudEvents batch: {exc}", dataset)
    if not isinstance(events, list):
        return whole_file(
            landing_date, name, "malformed_json", "CloudEvents batch is not a JSON array", dataset
        )
    # Re-encode element by element as JSON lines (batch files are small by nature), then parse as lines.
    lines = b"\n".join(json.dumps(e, separators=(",", ":")).encode() for e in events)
    return _parse_chunk(lines, 0, newline_count(lines), landing_date, name, dataset)
