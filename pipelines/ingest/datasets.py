"""The two datasets an ingest run reads from a landing folder: usage events and task outcomes.

Both go through the same readers, quarantine, dedup, commit and conservation check; a ``Dataset``
says what differs: the schemas, the idempotency key, the time that decides the partition, and how a
CloudEvents envelope maps onto the fields. A landing file whose name starts with ``outcomes`` holds
task outcomes; every other file holds usage events.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from schemas import events as ev
from schemas import outcomes as oc

KEY_SEPARATOR = "\x00"  # ids hold no control character, so account NUL task is unambiguous


@dataclass(frozen=True)
class Dataset:
    name: str  # the lake dataset: lake/<name>/date=D/
    payload: pa.Schema  # the producer's contract
    raw: pa.Schema  # what a JSON reader parses (times as text)
    lake: pa.Schema  # payload + lineage, as stored
    ingest: pa.Schema  # lake, the low-cardinality columns as dictionary arrays
    low_cardinality: tuple[str, ...]
    required: tuple[str, ...]
    id_field: str  # the id a quarantine row names (``event_id`` column of the quarantine)
    key_fields: tuple[str, ...]  # the idempotency key
    time_field: str  # its UTC date is the partition's
    time_fields: tuple[str, ...]  # every timestamp (text in JSON)
    ce_id: str  # CloudEvents ``id`` maps to this field, ``time`` to ``time_field``
    quarantine_file: str  # the staged quarantine file of one landing date
    label: str  # what a row is called in messages ("events", "outcomes")

    def key(self, table: pa.Table) -> pa.Array | pa.ChunkedArray:
        """The idempotency key of each row, as one string (hashed and compared by dedup)."""
        if len(self.key_fields) == 1:
            return table[self.key_fields[0]]
        cols = [table[f].cast(pa.string()) for f in self.key_fields]
        return pc.binary_join_element_wise(*cols, KEY_SEPARATOR)

    @property
    def ce_data_fields(self) -> list[pa.Field]:
        return [f for f in self.raw if f.name not in (self.ce_id, self.time_field)]

    @property
    def ce_schema(self) -> pa.Schema:
        return pa.schema(
            [
                pa.field("specversion", pa.string()),
                pa.field("id", pa.string()),
                pa.field("time", pa.string()),
                pa.field("data", pa.struct(self.ce_data_fields)),
            ]
        )


EVENTS = Dataset(
    name="events",
    payload=ev.EVENT_SCHEMA,
    raw=ev.RAW_JSON_SCHEMA,
    lake=ev.LAKE_SCHEMA,
    ingest=ev.INGEST_SCHEMA,
    low_cardinality=ev.LOW_CARDINALITY,
    required=ev.REQUIRED_FIELDS,
    id_field="event_id",
    key_fields=("event_id",),
    time_field="event_time",
    time_fields=("event_time",),
    ce_id="event_id",
    quarantine_file="part-0000.parquet",
    label="events",
)
OUTCOMES = Dataset(
    name="outcomes",
    payload=oc.OUTCOME_SCHEMA,
    raw=oc.RAW_OUTCOME_JSON_SCHEMA,
    lake=oc.OUTCOME_LAKE_SCHEMA,
    ingest=oc.OUTCOME_INGEST_SCHEMA,
    low_cardinality=oc.LOW_CARDINALITY,
    required=oc.REQUIRED_FIELDS,
    id_field="task_id",
    key_fields=oc.KEY_FIELDS,
    time_field="completed_at",
    time_fields=oc.TIME_FIELDS,
    ce_id="task_id",
    quarantine_file="outcomes-0000.parquet",
    label="outcomes",
)
DATASETS = (EVENTS, OUTCOMES)
BY_NAME = {d.name: d for d in DATASETS}


def dataset_of(path: str) -> Dataset:
    """Outcomes for a landing file whose name starts with ``outcomes`` (any case), else events."""
    return OUTCOMES if os.path.basename(path).lower().startswith("outcomes") else EVENTS
