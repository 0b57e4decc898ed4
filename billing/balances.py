"""Pool balances: what each balance key (account, plan, pool, period start) had used at the end of a
local day, the state a metering run starts from instead of every event of the periods."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from billing.calendar import EPOCH
from billing.plan import SPAN
from schemas.lake import BALANCE_SCHEMA


class Balances:
    """The rows of a state for one plan's pool, searchable by (account code, period start)."""

    def __init__(self, state: pa.Table, codes: np.ndarray, rows: np.ndarray) -> None:
        starts = state["period_start"].to_numpy().astype("datetime64[D]")[rows]
        keys = codes[rows].astype(np.int64) * SPAN + (starts - EPOCH).astype(np.int64)
        order = np.argsort(keys, kind="stable")
        self.keys, self.starts = keys[order], starts[order]
        taken = state.filter(pa.array(rows)).take(pa.array(order))
        self.accounts = taken["account_id"].combine_chunks()
        self.used = taken["used"].to_numpy()
        self.exhausted = taken["exhausted_at"].combine_chunks()

    def find(self, codes: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, found) for each key; ``row`` is 0 where not found."""
        if len(self.keys) == 0:
            return np.zeros(len(codes), np.int64), np.zeros(len(codes), bool)
        keys = codes * SPAN + (starts - EPOCH).astype(np.int64)
        row = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        return row, self.keys[row] == keys

    def used_of(self, row: np.ndarray, found: np.ndarray) -> np.ndarray:
        if len(self.keys) == 0:
            return np.zeros(len(row), np.int64)
        return np.where(found, self.used[row], 0)

    def matched(self, rows: np.ndarray) -> np.ndarray:
        out = np.zeros(len(self.keys), bool)
        out[rows] = True
        return out


def empty_balances() -> pa.Table:
    return BALANCE_SCHEMA.empty_table()


def balances_at(balances: pa.Table, first: dt.date, last: dt.date) -> pa.Table:
    """Each balance key's state at the end of every local day from ``first`` to ``last`` whose next
    day is still in the key's period: its latest row on or before that day (``local_day`` = the day).
    Keys without an event by then have no row: a later run starts them at zero."""
    if balances.num_rows == 0:
        return empty_balances()
    keys = ["account_id", "plan", "pool", "period_start"]
    rows = balances.take(pc.sort_indices(balances, [(k, "ascending") for k in [*keys, "local_day"]]))
    day = rows["local_day"].to_numpy().astype("datetime64[D]")
    same_key = np.ones(rows.num_rows, bool)
    for k in keys:
        v = rows[k].combine_chunks()
        same_key[:-1] &= pc.equal(v.slice(1), v.slice(0, len(v) - 1)).to_numpy(zero_copy_only=False)
    same_key[-1] = False  # does the next row belong to the same key?
    next_day = np.where(same_key, np.roll(day, -1), np.datetime64("9999-12-31"))
    end = rows["period_end"].to_numpy().astype("datetime64[D]")
    lo = np.maximum(day, np.datetime64(first, "D"))
    hi = np.minimum(np.minimum(next_day, end) - 1, np.datetime64(last, "D"))
    count = np.maximum((hi - lo).astype(np.int64) + 1, 0)
    if count.sum() == 0:
        return empty_balances()
    at = np.repeat(np.arange(rows.num_rows), count)
    step = np.arange(len(at)) - np.repeat(np.cumsum(count) - count, count)
    out = rows.take(pa.array(at))
    days = np.repeat(lo, count) + step
    return out.set_column(
        out.schema.get_field_index("local_day"), "local_day", pa.array(days).cast(pa.date32())
    )
