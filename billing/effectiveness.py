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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from billing.pricing import MissingPriceError, price_in_force
from schemas import tokens
from schemas.catalog import Catalog
from schemas.events import utc_date
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
    *tokens.fields(),
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


def _days(times: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """UTC dates as day numbers since 1970 (int64)."""
    d = utc_date(times)
    d = d.combine_chunks() if isinstance(d, pa.ChunkedArray) else d
    return np.asarray(d.cast(pa.int32()).to_numpy(zero_copy_only=False), dtype=np.int64)


def _key(table: pa.Table) -> pa.Array:
    """(account_id, task_id) as one string: ids hold no control character, so NUL separates them."""
    cols = [_plain(table[c]).cast(pa.string()) for c in ("account_id", "task_id")]
    return pc.binary_join_element_wise(*cols, "\x00")


def task_requests(outcomes: pa.Table, requests: pa.Table) -> pa.Table:
    """The requests of each outcome: the ``requests`` with its (account_id, task_id) whose UTC event
    date lies between the UTC dates of started_at and completed_at; column ``_task`` is the outcome's
    row in ``outcomes``, ``day`` the request's UTC date. One hash lookup per request (outcome keys are
    unique: ingest deduplicates them), then one take of the rows that belong to a task."""
    columns = [c for c in REQUEST_COLUMNS if c not in ("account_id", "task_id", "event_time")]
    if outcomes.num_rows == 0 or requests.num_rows == 0:
        empty = requests.select(columns).slice(0, 0)
        return empty.append_column("day", pa.array([], pa.date32())).append_column(
            "_task", pa.array([], pa.int64())
        )
    position = pc.index_in(_key(requests), value_set=_key(outcomes))
    task = pc.fill_null(position, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    day = _days(requests["event_time"])
    first, last = _days(outcomes["started_at"]), _days(outcomes["completed_at"])
    at = np.clip(task, 0, None)
    rows = np.flatnonzero((task >= 0) & (day >= first[at]) & (day <= last[at]))
    taken = requests.select(columns).take(pa.array(rows))
    taken = taken.append_column("day", pa.array(day[rows].astype(np.int32)).cast(pa.date32()))
    return taken.append_column("_task", pa.array(task[rows]))


def _codes(col: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """(each row's index into the sorted distinct values, those values); a dictionary column's rows
    through its dictionary, without a string per row."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(col.type) and not col.null_count:
        codes, values = _codes(col.dictionary)
        return codes[col.indices.to_numpy(zero_copy_only=False)], values
    arr = _plain(col).cast(pa.string())
    values = sorted(v for v in pc.unique(arr).to_pylist() if v is not None)
    return pc.index_in(arr, value_set=pa.array(values, pa.string())).to_numpy(zero_copy_only=False), values


def request_costs(joined: pa.Table, catalog: Catalog) -> pa.Array:
    """Per request: sum over token kinds of tokens x the price per 1M in force for its model, tier and
    kind on its UTC event day (exact, ``COST``). The price in force is looked up once per distinct
    (model, tier, day) (``billing.pricing.price_in_force``, the one rule); a missing price raises the
    invoices' error."""
    n = joined.num_rows
    if n == 0:
        return pa.array([], COST)
    models, model_names = _codes(joined["model"])
    tiers, tier_names = _codes(joined["speed_tier"])
    day = joined["day"].combine_chunks() if isinstance(joined["day"], pa.ChunkedArray) else joined["day"]
    days = day.cast(pa.int32()).to_numpy(zero_copy_only=False).astype(np.int64)
    low = int(days.min())
    span = int(days.max()) - low + 1
    code = (models.astype(np.int64) * len(tier_names) + tiers) * span + (days - low)
    # few distinct codes (models x tiers x days) in a small range: a count and a gather, not a sort
    distinct = np.flatnonzero(np.bincount(code))
    inverse = np.zeros(int(distinct[-1]) + 1, np.int64)
    inverse[distinct] = np.arange(len(distinct))
    inverse = inverse[code]
    kinds = tokens.ids()
    per_kind: dict[str, list[Decimal]] = {k: [] for k in kinds}
    for c in distinct.tolist():
        pair, offset = divmod(c, span)
        model, tier = model_names[pair // len(tier_names)], tier_names[pair % len(tier_names)]
        on = dt.date(1970, 1, 1) + dt.timedelta(days=low + offset)
        price = price_in_force(catalog, model, tier, on)
        if price is None:
            raise MissingPriceError(
                f"no price for model {model}, tier {tier}, token kind {kinds[0]} on {on.isoformat()}"
            )
        for kind in kinds:
            per_kind[kind].append(price.per_million(kind))
    counts = tokens.billed(joined)
    total = None
    take = pa.array(inverse.astype(np.int64))
    for kind in kinds:
        price = pa.array(per_kind[kind], pa.decimal128(18, 6)).take(take)
        # tokens < 2^31 (10 digits) x a price of 18 digits: 29 digits, a few kinds add up to 30
        count = pc.cast(pc.cast(counts[kind], pa.int32()), pa.decimal128(10, 0))
        part = pc.multiply(count, price)
        total = part if total is None else pc.add(pc.cast(total, pa.decimal128(30, 6)), part)
    return pc.cast(total, COST)


COST_SLICE = 1 << 20  # requests priced at once: the decimal arrays of a slice, not of the week
PAIR_SCHEMA = pa.schema(
    [
        ("_task", pa.int64()),  # the outcome's row in the week's outcomes
        ("model", pa.string()),
        ("speed_tier", pa.string()),
        ("timed", pa.int64()),  # the timed kind's tokens (the attribution's measure), summed
        ("duration_ms", pa.int64()),  # null counts 0
        ("cost", COST),
    ]
)


def task_pairs(joined: pa.Table, catalog: Catalog) -> pa.Table:
    """Per (task, model, tier) among the ``joined`` requests (``PAIR_SCHEMA``): the timed kind's
    tokens, duration_ms and token cost, each summed exactly; priced a slice of requests at a time. Partial:
    the pairs of any split of a week's requests, concatenated, ``tasks_from_pairs`` the same tasks."""
    parts = []
    for start in range(0, joined.num_rows, COST_SLICE):
        part = joined.slice(start, COST_SLICE)
        models, model_names = _codes(part["model"])
        tiers, tier_names = _codes(part["speed_tier"])
        pair = models.astype(np.int64) * len(tier_names) + tiers
        priced = pa.table(
            {
                "_task": part["_task"],
                "pair": pa.array(pair),
                "timed": part[tokens.timed_field()].cast(pa.int64()),
                "duration_ms": pc.fill_null(part["duration_ms"], 0).cast(pa.int64()),
                "cost": request_costs(part, catalog),
            }
        )
        summed = priced.group_by(["_task", "pair"]).aggregate(
            [("timed", "sum"), ("duration_ms", "sum"), ("cost", "sum")]
        )
        code = summed["pair"].to_numpy()
        names = pa.array(model_names, pa.string()), pa.array(tier_names, pa.string())
        parts.append(
            pa.Table.from_arrays(
                [
                    summed["_task"],
                    names[0].take(pa.array(code // len(tier_names))),
                    names[1].take(pa.array(code % len(tier_names))),
                    summed["timed_sum"],
                    summed["duration_ms_sum"],
                    summed["cost_sum"].cast(COST),
                ],
                schema=PAIR_SCHEMA,
            )
        )
    return pa.concat_tables(parts) if parts else PAIR_SCHEMA.empty_table()


def tasks(outcomes: pa.Table, joined: pa.Table, catalog: Catalog) -> pa.Table:
    """One row per outcome with at least one request (``TASK_SCHEMA``): its attribution and figures."""
    return tasks_from_pairs(outcomes, task_pairs(joined, catalog), catalog)


def tasks_from_pairs(outcomes: pa.Table, pairs: pa.Table, catalog: Catalog) -> pa.Table:
    """``tasks`` from the ``task_pairs`` of the week's requests (of one set, or of several parts
    concatenated: a (task, model, tier) may come in more than one row)."""
    if pairs.num_rows == 0:
        return TASK_SCHEMA.empty_table()
    task = pairs["_task"].to_numpy()
    models, model_names = _codes(pairs["model"])
    tier_codes, seen = _codes(pairs["speed_tier"])
    # slowest first; a tier the catalog no longer lists (events from before it was removed) after them
    tiers = (*catalog.tier_ids, *sorted(t for t in seen if t not in catalog.tier_ids))
    rank = np.array([tiers.index(t) for t in seen], np.int64)[tier_codes]
    pairs_per_task = len(model_names) * len(tiers)
    pair = models.astype(np.int64) * len(tiers) + rank  # sorted model ids, then slower tiers first
    distinct, inverse = np.unique(task * pairs_per_task + pair, return_inverse=True)
    output = _sum_by(inverse, pairs["timed"].to_numpy(), len(distinct))
    pair_task, pair_code = distinct // pairs_per_task, distinct % pairs_per_task
    # Per task: most output tokens first, then the lower model id, then the slower tier.
    order = np.lexsort((pair_code, -output, pair_task))
    first = order[_first_per_run(pair_task[order])]
    ids = pair_task[first]
    # each outcome row's place among the tasks with requests (-1: none): a gather, not a search
    place = np.full(outcomes.num_rows, -1, np.int64)
    place[ids] = np.arange(len(ids))
    mixed = np.bincount(place[pair_task], minlength=len(ids)) > 1
    chosen = pair_code[first]
    slot = place[task]
    model_ms = _sum_by(slot, pairs["duration_ms"].to_numpy(), len(ids))
    costs = pa.table({"_task": pairs["_task"], "cost": pairs["cost"]})
    costs = costs.group_by("_task").aggregate([("cost", "sum")]).sort_by("_task")["cost_sum"]
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
            pa.array(model_names, pa.string()).take(pa.array(chosen // len(tiers))),
            pa.array(tiers, pa.string()).take(pa.array(chosen % len(tiers))),
            pc.fill_null(_plain(out["task_class"]), UNCLASSIFIED),
            pa.array(mixed),
            pc.and_(accepted, pc.invert(rework)),
            pc.and_(accepted, rework),
            pc.equal(outcome, "abandoned"),
            pa.array(span_us),
            pa.array(model_ms),
            out["rework_ms"].cast(pa.int64()),
            costs.combine_chunks().cast(COST),
        ],
        schema=TASK_SCHEMA,
    )


def _sum_by(group: np.ndarray, values: np.ndarray, groups: int) -> np.ndarray:
    """Exact int64 sums of ``values`` per group index (0 .. groups - 1): no float (np.bincount's
    weights are float64)."""
    total = np.zeros(groups, np.int64)
    np.add.at(total, group, values.astype(np.int64, copy=False))
    return total


def _first_per_run(keys: np.ndarray) -> np.ndarray:
    """Positions where a sorted key column starts a new run."""
    if len(keys) == 0:
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))


def complete_weeks(first: dt.date, last: dt.date) -> list[dt.date]:
    """Mondays of the ISO weeks that lie wholly within first .. last."""
    start = first + dt.timedelta(days=(7 - first.weekday()) % 7)
    out = []
    while start + dt.timedelta(days=6) <= last:
        out.append(start)
        start += dt.timedelta(days=7)
    return out
