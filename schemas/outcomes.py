"""Task outcomes v1: how a task ended, as the client or the review tool saw it.

A task is a unit of work (an agent task, a thread) whose requests carry its ``task_id`` (event schema
v1.1). Outcome files land beside the usage events (names starting with ``outcomes``), in the same
formats, and go through the same reading, row checks, quarantine and dedup into
``lake/outcomes/date=D/`` (D = the UTC date of ``completed_at``). (account_id, task_id) is the
idempotency key: an identical resend is a duplicate, the same key with another payload is a
``conflicting_duplicate``.
"""

from __future__ import annotations

import pyarrow as pa

from schemas.events import DICTIONARY, LINEAGE_FIELDS, TIMESTAMP

SCHEMA_VERSION = "1"
OUTCOMES: tuple[str, ...] = ("accepted", "abandoned")
UNCLASSIFIED = "unclassified"  # the task_class of an outcome that names none
MAX_TASK_CLASS_LENGTH = 64
# A task open longer than this is quarantined (task_too_long): the dates of its requests stay bounded.
MAX_TASK_DAYS = 90
TIME_FIELDS: tuple[str, ...] = ("started_at", "completed_at")
KEY_FIELDS: tuple[str, ...] = ("account_id", "task_id")

# name, type, required, unit, rule
_FIELDS: tuple[tuple[str, pa.DataType, bool, str, str], ...] = (
    ("task_id", pa.string(), True, "", "required, at most 200 characters; (account_id, task_id) is unique"),
    ("account_id", pa.string(), True, "", "required"),
    ("task_class", pa.string(), False, "", f"optional, at most 64 characters; missing = {UNCLASSIFIED}"),
    ("started_at", TIMESTAMP, True, "UTC, microseconds", "required; ISO-8601 with a zone offset in JSON"),
    ("completed_at", TIMESTAMP, True, "UTC, microseconds", "required, >= started_at"),
    ("outcome", pa.string(), True, "", "one of " + " | ".join(OUTCOMES)),
    ("rework", pa.bool_(), True, "", "a person changed the output before accepting it; false when abandoned"),
    ("rework_ms", pa.int64(), True, "milliseconds", ">= 0; 0 without rework; <= completed_at - started_at"),
)

REQUIRED_FIELDS: tuple[str, ...] = tuple(name for name, _, required, _, _ in _FIELDS if required)

OUTCOME_SCHEMA = pa.schema(
    [
        pa.field(name, typ, nullable=not required, metadata={"unit": unit, "rule": rule})
        for name, typ, required, unit, rule in _FIELDS
    ],
    metadata={"name": "task_outcome", "version": SCHEMA_VERSION},
)
OUTCOME_LAKE_SCHEMA = pa.schema(list(OUTCOME_SCHEMA) + list(LINEAGE_FIELDS), metadata=OUTCOME_SCHEMA.metadata)
LOW_CARDINALITY: tuple[str, ...] = ("task_class", "outcome", "_source_file")
OUTCOME_INGEST_SCHEMA = pa.schema(
    [f.with_type(DICTIONARY) if f.name in LOW_CARDINALITY else f for f in OUTCOME_LAKE_SCHEMA],
    metadata=OUTCOME_LAKE_SCHEMA.metadata,
)
# What a JSON producer sends: the times stay text until validation checks their zone offsets.
RAW_OUTCOME_JSON_SCHEMA = pa.schema(
    [pa.field(f.name, pa.string() if f.name in TIME_FIELDS else f.type) for f in OUTCOME_SCHEMA]
)
