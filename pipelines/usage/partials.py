"""Daily usage as pure functions on Arrow tables: partial sums per row group, then re-summed.

Three partial tables per row group, all associative (they can be combined in any order and grouping,
which is what ``CombinePerKey`` relies on):
- usage: per (day, account, model, tier): requests, errors, tokens, output milliseconds and the
  output tokens of requests that reported a duration (for tokens per second);
- errors: per (day, account, model, tier, error code): failed requests;
- speed: per (day, model, tier, bin): a log-scale histogram of output tokens per second, from which
  the median and p95 are read (exact quantiles cannot be merged from partials; a bin is 1.6% wide).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas import tokens
from schemas.events import utc_date

USAGE_KEYS = ("day", "account_id", "model", "speed_tier")
USAGE_SUMS = (
    "requests",
    "errors",
    *tokens.fields(),
    "output_ms",
    "timed_output_tokens",
)
ERROR_KEYS = (*USAGE_KEYS, "error_code")
SPEED_KEYS = ("day", "model", "speed_tier", "bin")
LAKE_COLUMNS = [
    "event_time",
    "account_id",
    "model",
    "speed_tier",
    "status",
    "error_code",
    *tokens.fields(),
    "duration_ms",
]

# Output tokens per second, binned on a log scale from 0.01 to 1e6 tok/s (bin width ratio ~1.016).
SPEED_MIN, SPEED_MAX, SPEED_BINS = 0.01, 1e6, 1200
_LOG_STEP = math.log(SPEED_MAX / SPEED_MIN) / SPEED_BINS
UNKNOWN_ERROR = "unknown"


def _schema(keys: tuple[str, ...], sums: tuple[str, ...]) -> pa.Schema:
    types = {"day": pa.date32(), "bin": pa.int32()}
    return pa.schema(
        [pa.field(k, types.get(k, pa.string())) for k in keys] + [pa.field(s, pa.int64()) for s in sums]
    )


USAGE_SCHEMA = _schema(USAGE_KEYS, USAGE_SUMS)
ERROR_SCHEMA = _schema(ERROR_KEYS, ("errors",))
SPEED_SCHEMA = _schema(SPEED_KEYS, ("requests",))


def resum(parts: list[pa.Table], schema: pa.Schema) -> pa.Table:
    """Re-aggregate tables of ``schema`` (string/date/int keys, int64 sums) into one row per key."""
    parts = [p for p in parts if p.num_rows]
    if not parts:
        return schema.empty_table()
    table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    sums = [f.name for f in schema if pa.types.is_int64(f.type)]
    keys = [f.name for f in schema if f.name not in sums]
    g = table.group_by(keys, use_threads=False).aggregate([(c, "sum") for c in sums])
    g = g.rename_columns([n.removesuffix("_sum") for n in g.column_names])
    return g.select(schema.names).cast(schema)


def speed_bin(output_tokens: pa.Array, duration_ms: pa.Array) -> pa.Array:
    """Histogram bin of output tokens per second (null where there is no duration or no output)."""
    out = output_tokens.to_numpy(zero_copy_only=False).astype(np.float64)
    ms = pc.fill_null(duration_ms, 0).to_numpy(zero_copy_only=False).astype(np.float64)
    ok = (ms > 0) & (out > 0)
    tps = np.where(ok, out / np.where(ok, ms, 1.0) * 1000.0, SPEED_MIN)
    bins = np.clip(
        np.floor(np.log(np.clip(tps, SPEED_MIN, SPEED_MAX) / SPEED_MIN) / _LOG_STEP), 0, SPEED_BINS - 1
    )
    return pa.array(bins.astype(np.int32), mask=~ok)


def bin_value(b: int) -> float:
    """The geometric middle of a histogram bin, in tokens per second."""
    return SPEED_MIN * math.exp((b + 0.5) * _LOG_STEP)


@dataclass
class DayPartials:
    usage: pa.Table
    errors: pa.Table
    speed: pa.Table

    @classmethod
    def combine(cls, parts: list[DayPartials]) -> DayPartials:
        return cls(
            resum([p.usage for p in parts], USAGE_SCHEMA),
            resum([p.errors for p in parts], ERROR_SCHEMA),
            resum([p.speed for p in parts], SPEED_SCHEMA),
        )

    def packed(self) -> bytes:
        """zstd-compressed Arrow IPC of the three tables: small to ship between pipeline stages."""
        sink = pa.BufferOutputStream()
        options = pa.ipc.IpcWriteOptions(compression="zstd")
        for table in (self.usage, self.errors, self.speed):
            with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
                writer.write_table(table)
        return sink.getvalue().to_pybytes()

    @classmethod
    def unpacked(cls, value: DayPartials | bytes) -> DayPartials:
        if isinstance(value, DayPartials):
            return value
        reader = pa.BufferReader(value)
        tables = [pa.ipc.open_stream(reader).read_all() for _ in range(3)]
        return cls(*tables)

    def filter_day(self, day: object) -> DayPartials:
        def on(t: pa.Table) -> pa.Table:
            return t.filter(pc.equal(t["day"], pa.scalar(day, pa.date32())))

        return DayPartials(on(self.usage), on(self.errors), on(self.speed))


def partial_usage(events: pa.Table) -> DayPartials:
    """Lake rows -> partial usage, errors by code and speed histogram, each keyed by UTC day."""
    day = utc_date(events["event_time"])
    is_error = pc.equal(events["status"], "error")
    timed = pc.fill_null(pc.greater(events["duration_ms"], 0), False)
    usage = pa.table(
        {
            "day": day,
            "account_id": events["account_id"],
            "model": events["model"],
            "speed_tier": events["speed_tier"],
            "requests": pc.cast(pc.is_valid(events["account_id"]), pa.int64()),
            "errors": pc.cast(is_error, pa.int64()),
            **{f: events[f] for f in tokens.fields()},
            "output_ms": pc.if_else(timed, events["duration_ms"], 0),
            "timed_output_tokens": pc.if_else(timed, events[tokens.timed_field()], 0),
        }
    )
    failed = pa.table(
        {
            "day": day,
            "account_id": events["account_id"],
            "model": events["model"],
            "speed_tier": events["speed_tier"],
            "error_code": pc.fill_null(events["error_code"], UNKNOWN_ERROR),
            "errors": pa.array(np.ones(events.num_rows, np.int64)),
        }
    ).filter(is_error)
    bins = speed_bin(events[tokens.timed_field()], events["duration_ms"])
    speed = pa.table(
        {
            "day": day,
            "model": events["model"],
            "speed_tier": events["speed_tier"],
            "bin": bins,
            "requests": pa.array(np.ones(events.num_rows, np.int64)),
        }
    ).filter(pc.is_valid(bins))
    return DayPartials(
        resum([usage], USAGE_SCHEMA), resum([failed], ERROR_SCHEMA), resum([speed], SPEED_SCHEMA)
    )


def quantiles_from_histogram(speed: pa.Table, qs: tuple[float, ...] = (0.5, 0.95)) -> pa.Table:
    """Per (day, model, tier): the requested quantiles of output tokens per second (bin middles)."""
    rows = []
    if speed.num_rows:
        speed = speed.sort_by(
            [("day", "ascending"), ("model", "ascending"), ("speed_tier", "ascending"), ("bin", "ascending")]
        )
        keys = pa.table({k: speed[k] for k in ("day", "model", "speed_tier")})
        g = keys.group_by(["day", "model", "speed_tier"], use_threads=False).aggregate([([], "count_all")])
        bins = speed["bin"].to_numpy()
        counts = speed["requests"].to_numpy()
        start = 0
        for row, size in zip(
            g.select(["day", "model", "speed_tier"]).to_pylist(), g["count_all"].to_pylist(), strict=True
        ):  # one iteration per (day, model, tier): a few dozen per day
            c = np.cumsum(counts[start : start + size])
            b = bins[start : start + size]
            row.update({f"q{int(q * 100)}": bin_value(int(b[np.searchsorted(c, q * c[-1])])) for q in qs})
            rows.append(row)
            start += size
    names = ["day", "model", "speed_tier", *[f"q{int(q * 100)}" for q in qs]]
    schema = pa.schema(
        [("day", pa.date32()), ("model", pa.string()), ("speed_tier", pa.string())]
        + [(n, pa.float64()) for n in names[3:]]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def model_daily(usage: pa.Table, speed: pa.Table) -> pa.Table:
    """Per (day, model, tier): active accounts, requests, errors, tokens, median and p95 tokens/s."""
    g = usage.group_by(["day", "model", "speed_tier"], use_threads=False).aggregate(
        [
            ("account_id", "count_distinct"),
            ("requests", "sum"),
            ("errors", "sum"),
            *tokens.sums(),
        ]
    )
    g = g.rename_columns(
        [
            n.removesuffix("_sum").replace("account_id_count_distinct", "active_accounts")
            for n in g.column_names
        ]
    )
    q = quantiles_from_histogram(speed)
    joined = g.join(q, ["day", "model", "speed_tier"], join_type="left outer")
    joined = joined.rename_columns(
        [{"q50": "median_output_tps", "q95": "p95_output_tps"}.get(n, n) for n in joined.column_names]
    )
    return joined.sort_by([("day", "ascending"), ("model", "ascending"), ("speed_tier", "ascending")])
