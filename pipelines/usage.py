"""Daily usage as pure functions on Arrow tables: partial sums per row group, then re-summed.

``partial_usage`` turns lake rows into one row per (day, account, model, tier); ``combine_usage``
re-aggregates any number of partials into the same shape. Summing is associative, so partials can
be combined in any order and grouping (this is what ``CombinePerKey`` relies on).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

USAGE_KEYS = ("day", "account_id", "model", "speed_tier")
USAGE_SUMS = ("requests", "errors", "input_tokens", "cached_input_tokens", "output_tokens")
LAKE_COLUMNS = [
    "event_time",
    "account_id",
    "model",
    "speed_tier",
    "status",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
]

USAGE_SCHEMA = pa.schema(
    [
        pa.field("day", pa.date32()),
        pa.field("account_id", pa.string()),
        pa.field("model", pa.string()),
        pa.field("speed_tier", pa.string()),
    ]
    + [pa.field(c, pa.int64()) for c in USAGE_SUMS]
)


def partial_usage(events: pa.Table) -> pa.Table:
    """Lake rows -> one row per (UTC day, account, model, tier) with request, error and token sums."""
    table = pa.table(
        {
            "day": pc.cast(events["event_time"], pa.date32()),
            "account_id": events["account_id"],
            "model": events["model"],
            "speed_tier": events["speed_tier"],
            "requests": pc.cast(pc.is_valid(events["account_id"]), pa.int64()),
            "errors": pc.cast(pc.equal(events["status"], "error"), pa.int64()),
            "input_tokens": events["input_tokens"],
            "cached_input_tokens": events["cached_input_tokens"],
            "output_tokens": events["output_tokens"],
        }
    )
    return combine_usage([table])


def combine_usage(parts: list[pa.Table]) -> pa.Table:
    """Re-aggregate partial usage tables (same schema) into one row per key."""
    parts = [p for p in parts if p.num_rows]
    if not parts:
        return USAGE_SCHEMA.empty_table()
    table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    g = table.group_by(list(USAGE_KEYS), use_threads=False).aggregate([(c, "sum") for c in USAGE_SUMS])
    g = g.rename_columns([n.removesuffix("_sum") for n in g.column_names])
    return g.select(USAGE_SCHEMA.names).cast(USAGE_SCHEMA)
