"""What an ingest run counts: rows read, clean, quarantined by reason, duplicates, per landing date, merged
across workers; the conservation check compares them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.ingest.dedup import ShardResult


def new_stats(**values: object) -> dict:
    base = {"files": 0, "rows_read": 0, "clean": 0, "duplicates": 0, "quarantined": {}, "late": {}}
    base.update(values)
    return base


def merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, dict):
            merged = dict(out.get(k, {}))
            for kk, vv in v.items():
                merged[kk] = merged.get(kk, 0) + vv
            out[k] = merged
        else:
            out[k] = out.get(k, 0) + v
    return out


class MergeStats(beam.CombineFn):
    def create_accumulator(self) -> dict:
        return new_stats()

    def add_input(self, acc: dict, value: dict) -> dict:
        return merge(acc, value)

    def merge_accumulators(self, accs: Iterable[dict]) -> dict:
        out = new_stats()
        for a in accs:
            out = merge(out, a)
        return out

    def extract_output(self, acc: dict) -> dict:
        return acc


def reason_counts(quarantine: pa.Table) -> dict[str, int]:
    return dict(count_by(quarantine["reason"]))


def by_landing(table: pa.Table, column: str) -> Iterable[tuple[str, pa.Table]]:
    for value in table[column].unique().to_pylist():
        yield value.isoformat(), table.filter(pa.compute.equal(table[column], pa.scalar(value, pa.date32())))


def count_by(values: pa.ChunkedArray) -> list[tuple[Any, int]]:
    """(value, rows) for each value of a column; one min/max when, as usual, there is one value."""
    if len(values) == 0:
        return []
    low, high = pc.min_max(values).values()
    if low == high:
        return [(low.as_py(), len(values))]
    counts = pa.table({"v": values}).group_by("v").aggregate([([], "count_all")])
    return list(zip(counts["v"].to_pylist(), counts["count_all"].to_pylist(), strict=True))


def per_landing(result: ShardResult) -> Iterable[tuple[str, dict]]:
    out: dict[str, dict] = {}

    def add(landing: dt.date, **values: object) -> None:
        key = landing.isoformat()
        out[key] = merge(out.get(key, new_stats()), new_stats(**values))

    for day, rows in result.writes.items():  # the new rows, by event date
        for landing, count in count_by(rows["_landing_date"]):
            add(landing, clean=count, late={day.isoformat(): count} if day < landing else {})
    for landing, count in count_by(result.duplicates["_landing_date"]):
        add(landing, duplicates=count)
    for landing, count in count_by(result.conflicts["landing_date"]):
        add(landing, quarantined={"conflicting_duplicate": count})
    return out.items()
