"""Usage event schema v1.1: the contract between producers, the lake and every later stage.

Each field carries its unit and rule in the Arrow field metadata, so a Parquet file written with
this schema documents itself. The lake adds two lineage columns (``_landing_date``,
``_source_file``) that say where a row came from; they are not part of the producer contract.

v1.1 adds the optional ``task_id`` (the unit of work a request belongs to, joined to its task
outcome). v1 files stay valid, and lake files written before v1.1 read with a null ``task_id``
(``conform``).
"""

from __future__ import annotations

import pyarrow as pa

from schemas import tokens

SCHEMA_VERSION = "1.1"
STATUSES: tuple[str, ...] = ("ok", "error")
TOKEN_FIELDS: tuple[str, ...] = tokens.fields()
TIMESTAMP = pa.timestamp("us", tz="UTC")

# name, type, required, unit, rule
_FIELDS: tuple[tuple[str, pa.DataType, bool, str, str], ...] = (
    ("event_id", pa.string(), True, "", "required, unique: the idempotency key"),
    ("event_time", TIMESTAMP, True, "UTC, microseconds", "required; ISO-8601 with a zone offset in JSON"),
    ("account_id", pa.string(), True, "", "required"),
    ("user_id", pa.string(), False, "", "optional, pseudonymous"),
    ("model", pa.string(), True, "", "required; must exist in the catalog"),
    ("speed_tier", pa.string(), True, "", "one of the catalog's tier ids ([[tiers]])"),
    *((k.field, pa.int64(), k.required, k.unit, tokens.field_rule(k)) for k in tokens.KINDS),
    ("duration_ms", pa.int64(), False, "milliseconds", "optional, >= 0; output tokens/s = output / duration"),
    ("status", pa.string(), True, "", "one of " + " | ".join(STATUSES)),
    ("error_code", pa.string(), False, "", "optional, e.g. context_length_exceeded"),
    (
        "task_id",
        pa.string(),
        False,
        "",
        "optional (v1.1), at most 200 characters: the task the request belongs to",
    ),
)

REQUIRED_FIELDS: tuple[str, ...] = tuple(name for name, _, required, _, _ in _FIELDS if required)
FIELD_NAMES: tuple[str, ...] = tuple(name for name, *_ in _FIELDS)

EVENT_SCHEMA = pa.schema(
    [
        pa.field(name, typ, nullable=not required, metadata={"unit": unit, "rule": rule})
        for name, typ, required, unit, rule in _FIELDS
    ],
    metadata={"name": "usage_event", "version": str(SCHEMA_VERSION)},
)

LINEAGE_FIELDS = (
    pa.field(
        "_landing_date", pa.date32(), nullable=False, metadata={"rule": "landing folder the row came from"}
    ),
    pa.field(
        "_source_file", pa.string(), nullable=False, metadata={"rule": "file name inside the landing folder"}
    ),
)
LAKE_SCHEMA = pa.schema(list(EVENT_SCHEMA) + list(LINEAGE_FIELDS), metadata=EVENT_SCHEMA.metadata)

# Columns with a handful of values. Between ingest's read and its lake write they travel as
# dictionary arrays (small indices into a few strings): a Parquet reader hands them over without
# building a string per row, and sorting or copying rows moves 4-byte indices instead of text.
LOW_CARDINALITY: tuple[str, ...] = ("model", "speed_tier", "status", "error_code", "_source_file")
DICTIONARY = pa.dictionary(pa.int32(), pa.string())
INGEST_SCHEMA = pa.schema(
    [f.with_type(DICTIONARY) if f.name in LOW_CARDINALITY else f for f in LAKE_SCHEMA],
    metadata=LAKE_SCHEMA.metadata,
)

# What a JSON producer sends: event_time stays text until validation checks its zone offset.
RAW_JSON_SCHEMA = pa.schema(
    [pa.field(f.name, pa.string() if f.name == "event_time" else f.type) for f in EVENT_SCHEMA]
)

QUARANTINE_SCHEMA = pa.schema(
    [
        pa.field("landing_date", pa.date32(), nullable=False),
        pa.field("source_file", pa.string(), nullable=False),
        pa.field(
            "row_number", pa.int64(), metadata={"rule": "1-based line (JSON) or row (Parquet); null = file"}
        ),
        pa.field("event_id", pa.string()),
        pa.field("reason", pa.string(), nullable=False, metadata={"rule": "comma-separated reason codes"}),
        pa.field("detail", pa.string()),
        pa.field("raw", pa.string(), metadata={"rule": "the raw text or the row as JSON"}),
    ],
    metadata={"name": "quarantine", "version": str(SCHEMA_VERSION)},
)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table``'s columns in ``schema``'s order and types, an optional column it lacks (a lake file
    written before that column existed, such as v1's missing ``task_id``) added as nulls, a token
    field it lacks (a lake file written before that token kind existed) as zeros."""
    n = table.num_rows
    zero = pa.scalar(0, pa.int64())
    cols = [
        table[f.name]
        if f.name in table.column_names
        else (pa.repeat(zero, n) if f.name in TOKEN_FIELDS else pa.nulls(n, f.type))
        for f in schema
    ]
    return pa.Table.from_arrays(cols, names=schema.names).cast(schema)


_UTC_NAMES = frozenset({"UTC", "Etc/UTC", "+00:00"})


def utc_date(times: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The UTC date of each UTC timestamp (``event_time`` -> its event date).

    The same as ``pc.cast(times, pa.date32())``, 14x faster for UTC timestamps: Arrow converts a
    zoned timestamp to a date through its time-zone database even when the zone is UTC, while a
    UTC timestamp's stored value is already the UTC instant, so the zone can be dropped first.
    Timestamps of another zone get Arrow's cast unchanged (the date in that zone).
    """
    kind = times.type
    if pa.types.is_timestamp(kind) and kind.tz in _UTC_NAMES:
        times = times.cast(pa.timestamp(kind.unit))
    return times.cast(pa.date32())
