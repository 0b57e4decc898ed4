"""Quota pool allocation: the billing rule (README, "The billing rule"), vectorized (no loop over events).

For each plan, its pools are taken in draw order (ascending priority, equal priorities in the order
the plan lists them). Within one balance key (account, plan, pool, period start) events are taken
in (event_time, event_id) order and a pool covers as much of each event as its balance allows; the
rest spills to the next eligible pool. With ``cum`` the running demand of a balance key, an event
of remaining demand ``r`` gets ``min(cum, A) - min(cum - r, A)`` from a pool of allowance ``A``:
one cumulative sum per pool, not one step per event. What no pool covers is overage. Included
tokens are split across token kinds pro rata (floor, then the largest remainders get the leftover
tokens; ties go in the token-kind registry's order), so every token is counted exactly once.

Periods and the plan in force are evaluated on the account's local date (``local_dates``).

A run can start from balances instead of every event of the periods (``state``): the balance of a key
at the end of a local day is ``min(running demand, A)``, and that is all the later events need, since
what a pool covers of an event depends only on ``min(cum, A)`` before and after it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from billing.calendar import EPOCH, period_end, period_start
from billing.plan import SPAN, mask
from billing.tokens import kind_matrix, split_pro_rata
from schemas import tokens
from schemas.catalog import Catalog, Pool
from schemas.lake import BALANCE_SCHEMA

TIMESTAMP = pa.timestamp("us", tz="UTC")


@dataclass
class Allocation:
    """Per event (in input order) and per balance key."""

    included: np.ndarray  # n x kinds (registry order, schemas.tokens): covered by pools
    overage: np.ndarray  # n x kinds: billed at the rate card
    draws: (
        pa.Table
    )  # event_index, plan, pool, period_start, tokens: one row per (event, pool) with tokens > 0
    pools: (
        pa.Table
    )  # account_id, plan, pool, period_start, period_end, allowance, used, remaining, exhausted_at
    balances: pa.Table  # BALANCE_SCHEMA: the state given, then per key and local day with events


def allocate(events: pa.Table, catalog: Catalog, state: pa.Table | None = None) -> Allocation:
    """Meter events against their plans' pools.

    ``events`` columns: event_id, event_time (UTC), account_id, model, the token fields
    (``schemas.tokens``), plan (null = pay as you go), local_day (date32: the account's
    local date). An event without a plan draws from no pool.

    ``state`` (``BALANCE_SCHEMA``, one row per balance key): balances at the end of the day before
    the events, when the events are only the rest of their periods; its keys' pool rows come out
    whether or not they have events.
    """
    n = events.num_rows
    state = empty_balances() if state is None else state.select(BALANCE_SCHEMA.names).cast(BALANCE_SCHEMA)
    # Accounts by code (their names in sorted order), so the sort compares integers first.
    account_ids = events["account_id"].combine_chunks().cast(pa.string())
    accounts = pc.unique(pa.concat_arrays([account_ids, state["account_id"].combine_chunks()]))
    accounts = accounts.take(pc.sort_indices(accounts))
    codes = pc.index_in(account_ids, value_set=accounts)
    keyed = pa.table({"account": codes, "time": events["event_time"], "id": events["event_id"]})
    order = pc.sort_indices(
        keyed, [("account", "ascending"), ("time", "ascending"), ("id", "ascending")]
    ).to_numpy()
    # Everything below is numpy in (account, time, id) order: per-row tests run on the input's
    # columns and are permuted, no string column is reordered.
    account_code = codes.to_numpy(zero_copy_only=False).astype(np.int64)[order]
    day = events["local_day"].to_numpy().astype("datetime64[D]")[order]
    kinds = kind_matrix(events)[order]
    counted = np.array([k.allowance for k in tokens.KINDS])  # kinds the allowances count
    demand = kinds[:, counted].sum(axis=1)
    remaining = demand.copy()
    plan_col = pc.fill_null(events["plan"], "")
    models = events["model"]
    times = events["event_time"].combine_chunks().cast(TIMESTAMP)
    state_code = pc.index_in(state["account_id"], value_set=accounts).to_numpy(zero_copy_only=False)
    draw_parts: list[pa.Table] = []
    pool_parts: list[pa.Table] = []
    balance_parts: list[pa.Table] = [state]
    for plan in catalog.plans:
        in_plan = mask(pc.equal(plan_col, plan.id))[order]
        in_state = mask(pc.equal(state["plan"], plan.id))
        if not in_plan.any() and not in_state.any():
            continue
        for pool in plan.pools_in_draw_order():
            allowance = pool.allowance_tokens
            given = Balances(state, state_code, in_state & mask(pc.equal(state["pool"], pool.id)))
            covers = (
                np.ones(n, bool)
                if "*" in pool.models
                else mask(pc.is_in(models, value_set=pa.array(pool.models, pa.string())))[order]
            )
            if pool.exclude_models:
                excluded = pc.is_in(models, value_set=pa.array(pool.exclude_models, pa.string()))
                covers = covers & ~mask(excluded)[order]
            pos = np.flatnonzero(in_plan & covers)
            if len(pos) == 0 and len(given.keys) == 0:
                continue
            starts = period_start(day[pos], pool.period)
            new_key = np.ones(len(pos), bool)
            new_key[1:] = (account_code[pos][1:] != account_code[pos][:-1]) | (starts[1:] != starts[:-1])
            seg = np.cumsum(new_key) - 1
            key_pos = pos[new_key]
            key_starts = starts[new_key]
            # The balance each key starts from: what the state says it used (0 for a new key).
            row, found = given.find(account_code[key_pos], key_starts)
            offset = given.used_of(row, found)
            r = remaining[pos]
            cum = np.cumsum(r)
            base = (cum - r)[new_key][seg]  # running demand before each key's first event
            running = cum - base + offset[seg]
            covered = np.minimum(running, allowance) - np.minimum(running - r, allowance)
            remaining[pos] -= covered
            drew = covered > 0
            draw_parts.append(
                pa.table(
                    {
                        "event_index": order[pos[drew]],
                        "plan": _repeat(plan.id, int(drew.sum())),
                        "pool": _repeat(pool.id, int(drew.sum())),
                        "period_start": starts[drew].astype("datetime64[D]"),
                        "tokens": covered[drew],
                    }
                )
            )
            used = offset + (np.add.reduceat(covered, np.flatnonzero(new_key)) if len(pos) else 0)
            # exhausted_at: the event at which a key's running demand first reaches the allowance, or
            # the state's time if it ran out before these events.
            full_idx = np.flatnonzero(running >= allowance)
            first_of_key = np.r_[True, seg[full_idx][1:] != seg[full_idx][:-1]] if len(full_idx) else full_idx
            first_full = np.full(len(key_pos), -1)
            first_full[seg[full_idx][first_of_key]] = full_idx[first_of_key]
            earlier = (
                pc.if_else(
                    pa.array(found), given.exhausted.take(pa.array(row)), pa.nulls(len(key_pos), TIMESTAMP)
                )
                if len(given.keys)
                else pa.nulls(len(key_pos), TIMESTAMP)
            )
            exhausted = pc.coalesce(
                earlier,
                pc.if_else(
                    pa.array(first_full >= 0),
                    times.take(pa.array(order[pos[np.maximum(first_full, 0)]])),
                    pa.nulls(len(key_pos), TIMESTAMP),
                ),
            )
            exhausted_day = np.where(
                first_full >= 0, day[pos[np.maximum(first_full, 0)]], np.datetime64("NaT")
            )
            exhausted_day = np.where(
                found & ~mask(pc.is_null(earlier)), np.datetime64("1970-01-01"), exhausted_day
            )
            key_accounts = accounts.take(pa.array(account_code[key_pos]))
            # Keys of the state without events here keep their balance.
            idle = ~given.matched(row[found])
            pool_parts.append(
                _pool_rows(
                    pa.concat_arrays([key_accounts, given.accounts.filter(pa.array(idle))]),
                    plan.id,
                    pool,
                    np.concatenate([key_starts, given.starts[idle]]),
                    np.concatenate([used, given.used[idle]]),
                    pa.concat_arrays(
                        [exhausted, given.exhausted.filter(pa.array(idle)).cast(exhausted.type)]
                    ),
                )
            )
            # Each key's balance at the end of each local day with events: the last event of the day.
            if len(pos):
                last_of_day = np.ones(len(pos), bool)
                last_of_day[:-1] = new_key[1:] | (day[pos][1:] != day[pos][:-1])
                k = seg[last_of_day]
                on = day[pos][last_of_day]
                out_of = ~np.isnat(exhausted_day[k]) & (exhausted_day[k] <= on)
                balance_parts.append(
                    pa.table(
                        {
                            "account_id": key_accounts.take(pa.array(k)),
                            "plan": _repeat(plan.id, len(k)),
                            "pool": _repeat(pool.id, len(k)),
                            "period_start": key_starts[k],
                            "period_end": period_end(key_starts[k], pool.period),
                            "local_day": on,
                            "used": np.minimum(running[last_of_day], allowance),
                            "exhausted_at": pc.if_else(
                                pa.array(out_of),
                                exhausted.take(pa.array(k)),
                                pa.nulls(len(k), exhausted.type),
                            ),
                        },
                        schema=BALANCE_SCHEMA,
                    )
                )
    included_sorted = np.zeros_like(kinds)
    included_sorted[:, counted] = split_pro_rata(demand - remaining, kinds[:, counted])
    included = np.empty_like(included_sorted)
    included[order] = included_sorted
    overage = np.empty_like(kinds)
    overage[order] = kinds - included_sorted
    draws = pa.concat_tables(draw_parts) if draw_parts else _empty_draws()
    pools = pa.concat_tables(pool_parts) if pool_parts else _empty_pools()
    return Allocation(included, overage, draws, pools, pa.concat_tables(balance_parts))


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


def _pool_rows(
    accounts: pa.Array,
    plan: str,
    pool: Pool,
    starts: np.ndarray,
    used: np.ndarray,
    exhausted: pa.Array,
) -> pa.Table:
    n = len(starts)
    return pa.table(
        {
            "account_id": accounts,
            "plan": _repeat(plan, n),
            "pool": _repeat(pool.id, n),
            "period_start": starts.astype("datetime64[D]"),
            "period_end": period_end(starts.astype("datetime64[D]"), pool.period),
            "allowance": np.full(n, pool.allowance_tokens, np.int64),
            "used": used.astype(np.int64),
            "remaining": pool.allowance_tokens - used.astype(np.int64),
            "exhausted_at": exhausted,
        }
    )


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


def _repeat(value: str, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, pa.string()), n)


def _empty_draws() -> pa.Table:
    return pa.table(
        {
            "event_index": pa.array([], pa.int64()),
            "plan": pa.array([], pa.string()),
            "pool": pa.array([], pa.string()),
            "period_start": pa.array([], pa.date32()),
            "tokens": pa.array([], pa.int64()),
        }
    )


def _empty_pools() -> pa.Table:
    return pa.table(
        {
            "account_id": pa.array([], pa.string()),
            "plan": pa.array([], pa.string()),
            "pool": pa.array([], pa.string()),
            "period_start": pa.array([], pa.date32()),
            "period_end": pa.array([], pa.date32()),
            "allowance": pa.array([], pa.int64()),
            "used": pa.array([], pa.int64()),
            "remaining": pa.array([], pa.int64()),
            "exhausted_at": pa.array([], pa.timestamp("us", tz="UTC")),
        }
    )
