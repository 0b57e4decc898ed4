"""Effectiveness: tasks from their outcome and their requests, and the yardstick per group.

A fast model that needs rework is not cheaper. Per week, model, speed tier and task class this gives
the share of tasks accepted on the first pass, the share that needed a person's rework, the end-to-end
time including that rework, and the cost per accepted task including the person's time.

- A task's requests are the clean events with its (account_id, task_id) whose UTC event date lies
  between the UTC dates of its started_at and completed_at (inclusive) (``task_requests``).
- Attribution: the (model, speed_tier) with the most output tokens among its requests; ties go to the
  lower model id, then to the slower tier; ``mixed``: more than one (model, tier) (``tasks``).
- Per task: one_pass, reworked, abandoned; e2e = completed_at - started_at, kept exact in
  microseconds (``e2e_us``: in milliseconds it may have three decimals); model_ms = sum of
  duration_ms (null counts 0); token cost at the rate card (no pools) on each request's UTC day,
  exact; rework_ms.
- Per group (``group_metrics``): counts and shares, means half-up to whole ms, nearest-rank p50 and
  p90 (the ceil(q x n)-th smallest), sums of exact costs half-up to cents, and the cost per accepted
  task ((token + rework cost, abandoned tasks included) / accepted, half-up to cents; None when none
  was accepted). Every group also exists with task_class ``*`` (all classes).

Everything on a path that sees every task is an Arrow or numpy operation; only the groups (a few
hundred a week) are Python rows.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from billing.pricing import unit_prices
from schemas.catalog import TOKEN_KINDS, Catalog
from schemas.events import SPEED_TIERS, utc_date
from schemas.outcomes import UNCLASSIFIED

ALL_CLASSES = "*"
MS_PER_HOUR = 3_600_000
COST = pa.decimal128(38, 6)  # tokens x price per 1M: exact (divide by 1M for the currency)
REQUEST_COLUMNS = (
    "account_id",
    "task_id",
    "event_time",
    "model",
    "speed_tier",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "duration_ms",
)
OUTCOME_COLUMNS = (
    "account_id",
    "task_id",
    "task_class",
    "started_at",
    "completed_at",
    "outcome",
    "rework",
    "rework_ms",
)
GROUP_KEYS = ("week_start", "model", "speed_tier", "task_class")
TASK_SCHEMA = pa.schema(
    [
        ("account_id", pa.string()),
        ("task_id", pa.string()),
        ("week_start", pa.date32()),
        ("model", pa.string()),
        ("speed_tier", pa.string()),
        ("task_class", pa.string()),
        ("mixed", pa.bool_()),
        ("one_pass", pa.bool_()),
        ("reworked", pa.bool_()),
        ("abandoned", pa.bool_()),
        ("e2e_us", pa.int64()),  # completed_at - started_at, exact
        ("model_ms", pa.int64()),
        ("rework_ms", pa.int64()),
        ("token_cost", COST),  # tokens x price per 1M, summed: the currency x 1,000,000
    ]
)


def _plain(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return col.cast(pa.string()) if pa.types.is_dictionary(col.type) else col


def week_start(times: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Monday of the ISO week (UTC) of each timestamp."""
    days = utc_date(times)
    days = days.combine_chunks() if isinstance(days, pa.ChunkedArray) else days
    d = days.cast(pa.int32()).to_numpy(zero_copy_only=False).astype(np.int64)
    return pa.array(d - (d + 3) % 7, pa.int32()).cast(pa.date32())


def task_requests(outcomes: pa.Table, requests: pa.Table) -> pa.Table:
    """The requests of each outcome: ``requests`` joined on (account_id, task_id), kept where the UTC
    event date lies between the UTC dates of started_at and completed_at; column ``_task`` is the
    outcome's row in ``outcomes``."""
    keys = pa.table(
        {
            "account_id": _plain(outcomes["account_id"]),
            "task_id": _plain(outcomes["task_id"]),
            "_task": pa.array(np.arange(outcomes.num_rows, dtype=np.int64)),
            "_first": utc_date(outcomes["started_at"]),
            "_last": utc_date(outcomes["completed_at"]),
        }
    )
    req = pa.table({c: _plain(requests[c]) for c in REQUEST_COLUMNS})
    req = req.filter(pc.is_valid(req["task_id"]))
    joined = req.join(keys, ["account_id", "task_id"], join_type="inner")
    day = utc_date(joined["event_time"])
    inside = pc.and_(pc.greater_equal(day, joined["_first"]), pc.less_equal(day, joined["_last"]))
    return joined.filter(inside).drop_columns(["_first", "_last"])


def request_costs(joined: pa.Table, catalog: Catalog) -> pa.Array:
    """Per request: sum over token kinds of tokens x the price per 1M in force for its model, tier and
    kind on its UTC event day (exact, ``COST``). A missing price raises the invoices' error."""
    n = joined.num_rows
    if n == 0:
        return pa.array([], COST)
    day = utc_date(joined["event_time"])
    tokens = {
        "input": pc.subtract(joined["input_tokens"], joined["cached_input_tokens"]),
        "cached_input": joined["cached_input_tokens"],
        "output": joined["output_tokens"],
    }
    total = None
    model, tier = joined["model"], joined["speed_tier"]
    for kind in TOKEN_KINDS:
        price = unit_prices(catalog, model, tier, pa.array([kind] * n), day)
        # tokens < 2^31 (10 digits) x a price of 18 digits: 29 digits, three kinds add up to 30
        count = pc.cast(pc.cast(tokens[kind], pa.int32()), pa.decimal128(10, 0))
        part = pc.multiply(count, pc.cast(price, pa.decimal128(18, 6)))
        total = part if total is None else pc.add(pc.cast(total, pa.decimal128(30, 6)), part)
    return pc.cast(total, COST)


def _first_per_run(keys: np.ndarray) -> np.ndarray:
    """Positions where a sorted key column starts a new run."""
    if len(keys) == 0:
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))


def tasks(outcomes: pa.Table, joined: pa.Table, catalog: Catalog) -> pa.Table:
    """One row per outcome with at least one request (``TASK_SCHEMA``): its attribution and figures."""
    if joined.num_rows == 0:
        return TASK_SCHEMA.empty_table()
    tier_rank = pc.index_in(joined["speed_tier"], value_set=pa.array(SPEED_TIERS))
    per_pair = (
        pa.table(
            {
                "_task": joined["_task"],
                "model": joined["model"],
                "speed_tier": joined["speed_tier"],
                "_rank": tier_rank,
                "output_tokens": joined["output_tokens"],
            }
        )
        .group_by(["_task", "model", "speed_tier", "_rank"])
        .aggregate([("output_tokens", "sum")])
    )
    # Per task: most output tokens first, then the lower model id, then the slower tier.
    per_pair = per_pair.sort_by(
        [
            ("_task", "ascending"),
            ("output_tokens_sum", "descending"),
            ("model", "ascending"),
            ("_rank", "ascending"),
        ]
    )
    task_of_pair = per_pair["_task"].to_numpy()
    first = _first_per_run(task_of_pair)
    pairs = np.diff(np.append(first, len(task_of_pair)))
    chosen = per_pair.take(pa.array(first))
    ids = chosen["_task"].to_numpy()

    sums = (
        pa.table(
            {
                "_task": joined["_task"],
                "duration_ms": joined["duration_ms"],
                "cost": request_costs(joined, catalog),
            }
        )
        .group_by("_task")
        .aggregate([("duration_ms", "sum"), ("cost", "sum")])
        .sort_by("_task")
    )
    assert np.array_equal(sums["_task"].to_numpy(), ids)
    out = outcomes.take(pa.array(ids))
    outcome = _plain(out["outcome"])
    rework = out["rework"].combine_chunks() if isinstance(out["rework"], pa.ChunkedArray) else out["rework"]
    accepted = pc.equal(outcome, "accepted")
    started = pc.cast(out["started_at"], pa.int64())
    completed = pc.cast(out["completed_at"], pa.int64())
    span_us = pc.subtract(completed, started).to_numpy(zero_copy_only=False)
    return pa.Table.from_arrays(
        [
            _plain(out["account_id"]),
            _plain(out["task_id"]),
            week_start(out["completed_at"]),
            chosen["model"],
            chosen["speed_tier"],
            pc.fill_null(_plain(out["task_class"]), UNCLASSIFIED),
            pa.array(pairs > 1),
            pc.and_(accepted, pc.invert(rework)),
            pc.and_(accepted, rework),
            pc.equal(outcome, "abandoned"),
            pa.array(span_us),
            pc.fill_null(sums["duration_ms_sum"], 0).cast(pa.int64()),
            out["rework_ms"].cast(pa.int64()),
            sums["cost_sum"].cast(COST),
        ],
        schema=TASK_SCHEMA,
    )


def half_up(value: Fraction) -> int:
    """A non-negative fraction rounded half-up to a whole number."""
    return int((value * 2 + 1) // 2)


def cents(value: Fraction) -> Decimal:
    """A non-negative exact amount, half-up to cents."""
    return Decimal(half_up(value * 100)) / 100


def nearest_rank(sorted_values: np.ndarray, q_num: int, q_den: int) -> int:
    """The ceil(q x n)-th smallest of ``sorted_values`` (q = q_num / q_den)."""
    n = len(sorted_values)
    rank = -(-q_num * n // q_den)
    return int(sorted_values[max(rank, 1) - 1])


def group_metrics(task_rows: pa.Table, rework_cost_per_hour: Decimal) -> list[dict]:
    """Per (week_start, model, speed_tier, task_class), and per (week_start, model, speed_tier) with
    task_class ``*``: the figures of DESIGN's effectiveness contract, sorted by the group keys."""
    if task_rows.num_rows == 0:
        return []
    per_hour = Fraction(rework_cost_per_hour)
    everything = task_rows.set_column(
        task_rows.schema.get_field_index("task_class"),
        "task_class",
        pa.array([ALL_CLASSES] * task_rows.num_rows, pa.string()),
    )
    rows = pa.concat_tables([task_rows, everything])
    rows = rows.sort_by([(k, "ascending") for k in GROUP_KEYS] + [("e2e_us", "ascending")])
    key_cols = [rows[k].combine_chunks() for k in GROUP_KEYS]
    encoded = np.zeros(rows.num_rows, np.int64)
    for col in key_cols:  # a run id per group: rows are sorted by the keys
        codes = pc.dictionary_encode(col).indices.to_numpy()
        change = np.concatenate(([False], codes[1:] != codes[:-1]))
        encoded |= change
    starts = np.flatnonzero(np.concatenate(([True], encoded[1:].astype(bool))))
    ends = np.append(starts[1:], rows.num_rows)
    e2e = rows["e2e_us"].to_numpy()
    ints = {c: rows[c].to_numpy() for c in ("model_ms", "rework_ms")}
    flags = {
        c: rows[c].to_numpy(zero_copy_only=False).astype(np.int64)
        for c in ("one_pass", "reworked", "abandoned", "mixed")
    }
    cum = {c: np.concatenate(([0], np.cumsum(v))) for c, v in {**flags, **ints, "e2e_us": e2e}.items()}
    costs = rows["token_cost"].combine_chunks()
    out = []
    keys_py = [col.take(pa.array(starts)).to_pylist() for col in key_cols]
    cost_sums = (
        pa.table({"g": np.repeat(np.arange(len(starts)), ends - starts), "c": costs})
        .group_by("g")
        .aggregate([("c", "sum")])
        .sort_by("g")["c_sum"]
        .to_pylist()
    )
    for g, (s, e) in enumerate(zip(starts, ends, strict=True)):
        n = int(e - s)
        total = {c: int(cum[c][e] - cum[c][s]) for c in cum}
        accepted = total["one_pass"] + total["reworked"]
        token_exact = Fraction(cost_sums[g]) / 1_000_000
        rework_exact = Fraction(total["rework_ms"]) * per_hour / MS_PER_HOUR
        values = np.asarray(e2e[s:e])  # sorted within the group
        out.append(
            {
                **{k: keys_py[i][g] for i, k in enumerate(GROUP_KEYS)},
                "tasks": n,
                "one_pass": total["one_pass"],
                "reworked": total["reworked"],
                "abandoned": total["abandoned"],
                "mixed": total["mixed"],
                "one_pass_rate": total["one_pass"] / n,
                "rework_share": total["reworked"] / n,
                "abandon_share": total["abandoned"] / n,
                "e2e_ms_mean": half_up(Fraction(total["e2e_us"], 1000 * n)),
                "e2e_ms_p50": Decimal(nearest_rank(values, 1, 2)) / 1000,  # exact: three decimals at most
                "e2e_ms_p90": Decimal(nearest_rank(values, 9, 10)) / 1000,
                "model_ms_mean": half_up(Fraction(total["model_ms"], n)),
                "rework_ms_total": total["rework_ms"],
                "token_cost": cents(token_exact),
                "rework_cost": cents(rework_exact),
                "cost_per_accepted_task": cents((token_exact + rework_exact) / accepted)
                if accepted
                else None,
            }
        )
    return out


def wilson(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion (0, 0 for n = 0)."""
    if n == 0:
        return (0.0, 0.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / denom
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (low, high)


def complete_weeks(first: dt.date, last: dt.date) -> list[dt.date]:
    """Mondays of the ISO weeks that lie wholly within first .. last."""
    start = first + dt.timedelta(days=(7 - first.weekday()) % 7)
    out = []
    while start + dt.timedelta(days=6) <= last:
        out.append(start)
        start += dt.timedelta(days=7)
    return out
