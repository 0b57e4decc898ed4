"""Row checks on raw Arrow chunks, all vectorized: one boolean mask per rule, never a loop over rows.

A row that breaks any rule goes to quarantine with every reason code it earned (comma-separated);
the rest become lake rows in their in-flight form (INGEST_SCHEMA: the lake's columns, those of few
values as dictionary arrays, plus ``_row_number`` until dedup drops it).
"""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.ingest.datasets import EVENTS, Dataset
from pipelines.ingest.masks import as_mask, nulls
from pipelines.ingest.prices import unpriced
from pipelines.ingest.readers import SPEC_OK, RawChunk
from pipelines.ingest.rules import Rules
from schemas import tokens
from schemas.events import (
    DICTIONARY,
    QUARANTINE_SCHEMA,
    REQUIRED_FIELDS,
    STATUSES,
    TIMESTAMP,
    TOKEN_FIELDS,
)
from schemas.jsonl import ROW_NUMBER
from schemas.limits import (
    MAX_DURATION_MS,
    MAX_ID_LENGTH,
    looks_alike,
)

_ISO = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?"
_ZONE = r"(Z|z|[+-]\d{2}:?\d{2})$"


ID_FIELDS = ("event_id", "account_id", "user_id", "model", "speed_tier", "status", "error_code", "task_id")
BLANK_CHECKED = ("event_id", "account_id")  # required ids: empty or only white space is no id
_CONTROL = r"[\x00-\x1f\x7f-\x{9f}]"  # schemas.limits.CONTROL_CHARACTERS, in RE2's syntax


def _cast_time(col: pa.Array) -> pa.Array:
    """ISO-8601 text with a zone -> UTC microseconds (parsed at ns precision, then truncated)."""
    return pc.cast(pc.cast(col, pa.timestamp("ns", tz="UTC")), TIMESTAMP, safe=False)


def _castable(col: pa.Array, candidates: np.ndarray) -> np.ndarray:
    """Which candidate values Arrow's ISO-8601 parser accepts, by bisection (cost ~ bad values x log n)."""
    ok = np.zeros(len(col), bool)
    stack = [np.flatnonzero(candidates)]
    while stack:
        idx = stack.pop()
        if len(idx) == 0:
            continue
        try:
            _cast_time(col.take(pa.array(idx)))
            ok[idx] = True
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            if len(idx) > 1:
                stack.extend((idx[: len(idx) // 2], idx[len(idx) // 2 :]))
    return ok


def parse_event_time(col: pa.ChunkedArray | pa.Array) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """ISO-8601 text (or timestamps) -> UTC microseconds; returns (values, bad mask, no-zone mask).

    A value is valid exactly when Arrow's ISO-8601 parser accepts it on its own (after fraction digits
    past the ninth are cut: every digit past the sixth is truncated anyway): the date and time must
    exist (no 2026-02-30, no 25:00) and a zone offset is required. One vectorized cast covers a
    clean chunk; a chunk with bad values finds them by bisection, so a row's verdict never depends
    on its neighbours.
    """
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    n = len(col)
    if pa.types.is_timestamp(col.type):
        if col.type.tz is None:
            return pa.nulls(n, TIMESTAMP), np.zeros(n, bool), ~nulls(col)
        return (
            pc.cast(col, TIMESTAMP, safe=False),
            np.zeros(n, bool),
            np.zeros(n, bool),
        )  # ns: truncated, as text is
    try:
        return _cast_time(col), np.zeros(n, bool), np.zeros(n, bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    # More than nine fraction digits (picoseconds): truncated like the digits past microseconds
    col = pc.replace_substring_regex(col, pattern=r"(:\d{2}\.\d{9})\d+", replacement=r"\1")
    try:
        return _cast_time(col), np.zeros(n, bool), np.zeros(n, bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    present = ~nulls(col)
    zoned = present & as_mask(pc.match_substring_regex(col, _ZONE))  # without a zone the parser refuses
    ok = _castable(col, zoned)
    values = _cast_time(pc.if_else(pa.array(ok), col, pa.nulls(n, pa.string())))
    failed = present & ~ok
    naive = failed & as_mask(pc.match_substring_regex(col, _ISO + "$"))
    return values, failed & ~naive, naive


def validate(
    chunk: RawChunk, landing_date: dt.date, source_file: str, rules: Rules
) -> tuple[pa.Table, pa.Table]:
    """(clean rows in the usage events' ingest schema + _row_number, quarantine rows) for one raw chunk
    (task outcomes: ``validate_outcomes``)."""
    raw = chunk.table
    n = raw.num_rows
    checks: list[tuple[str, np.ndarray]] = []
    for name in REQUIRED_FIELDS:
        if name != "event_time":
            checks.append((f"missing_{name}", nulls(raw[name])))
    times, bad_time, naive_time = parse_event_time(raw["event_time"])
    checks.append(("missing_event_time", nulls(raw["event_time"])))
    checks.append(("bad_event_time", bad_time))
    checks.append(("naive_event_time", naive_time))
    for name in BLANK_CHECKED:
        checks.append((f"empty_{name}", _blank(raw[name])))
    too_long = np.zeros(n, bool)
    control = np.zeros(n, bool)
    for name in ID_FIELDS:
        too_long |= _too_long(raw[name])
        control |= _control_characters(raw[name])
    checks.append(("value_too_long", too_long))
    checks.append(("control_character", control))
    blank = dict(checks)["empty_account_id"]  # told as empty, not as a look-alike
    checks.append(("non_canonical_account_id", non_canonical(raw["account_id"]) & ~blank))
    if SPEC_OK in raw.column_names:
        checks.append(("unsupported_specversion", ~as_mask(raw[SPEC_OK])))
    checks.append(("unknown_model", _not_in(raw["model"], rules.models)))
    checks.append(("unknown_speed_tier", _not_in(raw["speed_tier"], rules.tiers)))
    checks.append(("unknown_status", _not_in(raw["status"], STATUSES)))
    counts = {name: raw[name] for name in TOKEN_FIELDS}
    negative = np.zeros(n, bool)
    too_big = np.zeros(n, bool)
    for col in counts.values():
        negative |= as_mask(pc.less(col, 0))
        too_big |= as_mask(pc.greater(col, rules.max_tokens_per_event))
    checks.append(("negative_tokens", negative))
    checks.append(("tokens_out_of_range", too_big))
    for reason, whole, inside in tokens.exceeds_checks():
        total = counts[inside[0]]
        for part in inside[1:]:
            total = pc.add(total, pc.fill_null(counts[part], 0))
        checks.append((reason, as_mask(pc.greater(total, counts[whole]))))
    checks.append(("negative_duration", as_mask(pc.less(raw["duration_ms"], 0))))
    checks.append(("duration_out_of_range", as_mask(pc.greater(raw["duration_ms"], MAX_DURATION_MS))))
    if rules.check_prices:
        checks.append(("no_price", unpriced(raw, times, rules)))
    future, late = _time_window(times, landing_date, rules)
    checks.append(("future_event", future))
    checks.append(("too_late", late))
    return _split(chunk, checks, {"event_time": times}, landing_date, source_file, EVENTS)


def _time_window(times: pa.Array, landing_date: dt.date, rules: Rules) -> tuple[np.ndarray, np.ndarray]:
    """(after the landing day's end plus the slack, older than the lateness window) per row."""
    day_start = dt.datetime.combine(landing_date, dt.time(), tzinfo=dt.UTC)
    latest = day_start + dt.timedelta(days=1, hours=rules.future_slack_hours)
    earliest = day_start - dt.timedelta(days=rules.lateness_days)
    return (
        as_mask(pc.greater_equal(times, pa.scalar(latest, TIMESTAMP))),
        as_mask(pc.less(times, pa.scalar(earliest, TIMESTAMP))),
    )


def _split(
    chunk: RawChunk,
    checks: list[tuple[str, np.ndarray]],
    times: dict[str, pa.Array],
    landing_date: dt.date,
    source_file: str,
    dataset: Dataset,
) -> tuple[pa.Table, pa.Table]:
    """The chunk's rows that passed every check (as lake rows) and the others (as quarantine rows)."""
    raw = chunk.table
    bad = np.zeros(raw.num_rows, bool)
    for _, mask in checks:
        bad |= mask
    any_bad = bool(bad.any())
    if any_bad:
        good_rows = pa.array(~bad)
        raw = raw.filter(good_rows)
        times = {name: col.filter(good_rows) for name, col in times.items()}
    clean = _to_lake(raw, times, landing_date, source_file, dataset)  # no copy without bad rows
    quarantine = chunk.quarantine
    if any_bad:
        quarantine = pa.concat_tables(
            [quarantine, _quarantine(chunk, bad, checks, landing_date, source_file, dataset)]
        )
    return clean, quarantine


def _per_value(col: pa.ChunkedArray | pa.Array, check) -> np.ndarray:
    """``check`` (a boolean Arrow function) of each row's value; for a dictionary column it runs once
    per distinct value and each row takes its value's verdict."""
    if col.type != DICTIONARY:
        return as_mask(check(col))
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    parts = []
    for c in chunks:
        verdict = as_mask(check(c.dictionary))
        if not verdict.any():  # no value fails (or there is none): no row does, nothing to look up
            parts.append(np.zeros(len(c), bool))
            continue
        parts.append(verdict[c.indices.fill_null(0).to_numpy()] & ~nulls(c))
    return np.concatenate(parts) if parts else np.zeros(0, bool)


def _too_long(col: pa.ChunkedArray, limit: int = MAX_ID_LENGTH) -> np.ndarray:
    """More than ``limit`` characters: counted only where the bytes (cheap: offsets) are over it."""
    over = _per_value(col, lambda c: pc.greater(pc.binary_length(c), limit))
    if over.any():
        over[over] = _per_value(
            col.take(pa.array(np.flatnonzero(over))), lambda c: pc.greater(pc.utf8_length(c), limit)
        )
    return over


_SPACE_LEADS = np.zeros(256, bool)  # first bytes a string of white space can start with
_SPACE_LEADS[[0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0xC2, 0xE1, 0xE2, 0xE3]] = True


def _blank_values(c: pa.Array) -> pa.Array:
    """Empty, or only white space (the exact check, per value)."""
    return pc.or_(pc.equal(pc.binary_length(c), 0), pc.utf8_is_space(c))


def _blank(col: pa.ChunkedArray) -> np.ndarray:
    """Present but empty, or only white space. A string whose first byte cannot begin white space is
    neither (nearly every id): only the others go through the Unicode check."""
    if col.type == DICTIONARY:
        return _per_value(col, _blank_values)
    parts = []
    for c in col.chunks if isinstance(col, pa.ChunkedArray) else [col]:
        if not pa.types.is_string(c.type) or c.buffers()[2] is None:
            parts.append(as_mask(_blank_values(c)))
            continue
        offsets = np.frombuffer(c.buffers()[1], np.int32)[c.offset : c.offset + len(c) + 1]
        data = np.frombuffer(c.buffers()[2], np.uint8)
        starts, lengths = offsets[:-1], np.diff(offsets)
        first = data[np.minimum(starts, max(len(data) - 1, 0))] if len(data) else np.zeros(len(c), np.uint8)
        suspect = ((lengths == 0) | _SPACE_LEADS[first]) & ~nulls(c)
        if suspect.any():
            idx = np.flatnonzero(suspect)
            suspect[idx] = as_mask(_blank_values(c.take(pa.array(idx))))
        parts.append(suspect)
    return np.concatenate(parts) if parts else np.zeros(0, bool)


def _control_characters(col: pa.ChunkedArray) -> np.ndarray:
    """Values holding a control character. Printable ASCII (nearly every id) is cleared by one cheap
    kernel; only the other values go through the regular expression."""
    suspect = _per_value(col, lambda c: pc.invert(pc.ascii_is_printable(c)))
    if suspect.any():
        idx = np.flatnonzero(suspect)
        suspect[idx] = _per_value(col.take(pa.array(idx)), lambda c: pc.match_substring_regex(c, _CONTROL))
    return suspect


def non_canonical(col: pa.ChunkedArray) -> np.ndarray:
    """Account ids that look like another id (``schemas.limits.looks_alike``). Lower-case printable
    ASCII without a space (nearly every id) is cleared by cheap kernels; the rule itself runs once per
    distinct other value (Arrow's own NFC/NFKC does not compose, so it cannot be used here)."""

    def suspect_values(c: pa.Array) -> pa.Array:
        text = c.cast(pa.string())
        return pc.or_(pc.invert(pc.ascii_is_printable(text)), pc.match_substring_regex(text, "[A-Z ]"))

    suspect = _per_value(col, suspect_values) & ~nulls(col)
    if suspect.any():
        idx = np.flatnonzero(suspect)
        values = col.take(pa.array(idx)).cast(pa.string())
        alike = [v for v in pc.unique(values).to_pylist() if looks_alike(v)]
        suspect[idx] = as_mask(pc.is_in(values, value_set=pa.array(alike, pa.string())))
    return suspect


def _not_in(col: pa.ChunkedArray, allowed) -> np.ndarray:
    present = ~nulls(col)
    return present & ~_per_value(col, lambda c: pc.is_in(c, value_set=pa.array(sorted(allowed), pa.string())))


def _to_lake(
    raw: pa.Table, times: dict[str, pa.Array], landing_date: dt.date, source_file: str, dataset: Dataset
) -> pa.Table:
    fields = {f.name: f for f in dataset.ingest}
    cols = {
        f.name: (times[f.name] if f.name in times else _as(raw[f.name], fields[f.name].type))
        for f in dataset.payload
    }
    for k in tokens.KINDS:  # a token kind producers may leave out counts 0 where they do
        if not k.required and k.field in cols:
            cols[k.field] = pc.fill_null(cols[k.field], 0)
    n = raw.num_rows
    cols["_landing_date"] = pa.array(np.full(n, np.datetime64(landing_date, "D"))).cast(pa.date32())
    cols["_source_file"] = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(n, np.int32)), pa.array([source_file], pa.string())
    )
    cols[ROW_NUMBER] = raw[ROW_NUMBER]
    return pa.table(cols, schema=dataset.ingest.append(pa.field(ROW_NUMBER, pa.int64())))


def _as(col: pa.ChunkedArray, typ: pa.DataType) -> pa.ChunkedArray:
    """``col`` as INGEST_SCHEMA's type: a JSON chunk's text (or a Parquet file's other dictionary
    type) is dictionary-encoded; a Parquet column read as a dictionary is kept as it is."""
    if typ == DICTIONARY and col.type != DICTIONARY:
        return pc.dictionary_encode(col.cast(pa.string()))
    return col.cast(typ)


def _rows_as_json(rows: pa.Table) -> pa.Array:
    """Quarantined Parquet rows as JSON lines (what a replay reads back). Times are written by Arrow
    as ISO-8601 text first: a time past Python's year 9999 has no Python value, but it is still data."""
    times = [i for i, f in enumerate(rows.schema) if pa.types.is_timestamp(f.type)]
    for i in times:
        rows = rows.set_column(i, rows.schema.field(i).name, pc.cast(rows.column(i), pa.string()))
    return pa.array([json.dumps(r, default=str) for r in rows.to_pylist()], pa.string())


def _quarantine(
    chunk: RawChunk, bad: np.ndarray, checks, landing_date, source_file: str, dataset: Dataset
) -> pa.Table:
    idx = pa.array(np.flatnonzero(bad))
    rows = chunk.table.take(idx)
    parts = [pc.if_else(pa.array(mask[bad]), code + ",", "") for code, mask in checks if mask.any()]
    reasons = pc.binary_join_element_wise(*parts, "") if parts else pa.array([""] * len(rows))
    reasons = pc.utf8_rtrim(reasons, characters=",")
    raw_text = chunk.raw_lines(rows[ROW_NUMBER])
    if raw_text is None:  # Parquet: the row itself, as JSON (only for quarantined rows)
        raw_text = _rows_as_json(rows.drop_columns([ROW_NUMBER]))
    n = len(rows)
    return pa.table(
        {
            "landing_date": pa.array([landing_date] * n, pa.date32()),
            "source_file": pa.array([source_file] * n, pa.string()),
            "row_number": rows[ROW_NUMBER],
            "event_id": rows[dataset.id_field],
            "reason": reasons,
            "detail": pa.nulls(n, pa.string()),
            "raw": raw_text,
        },
        schema=QUARANTINE_SCHEMA,
    )
