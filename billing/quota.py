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

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from billing.balances import Balances, empty_balances
from billing.calendar import period_end, period_start
from billing.crossings import CROSSINGS_SCHEMA, crossings
from billing.plan import mask
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
    # event_index, plan, pool, period_start, threshold, used, allowance: one row per (balance key,
    # threshold of the catalog's ``[notifications]``) that an event of these crossed (``billing.crossings``)
    crossings: pa.Table


def allocate(events: pa.Table, catalog: Catalog, state: pa.Table | None = None) -> Allocation:
    """Meter events against their plans' pools.

    ``events`` columns: event_id, event_time (UTC), account_id, model, the token fields
    (``schemas.tokens``), plan (null = pay as you go), local_day (date32: the account's
    local date). An event without a plan draws from no pool.

    ``state`` (``BALANCE_SCHEMA``, one row per balance key): balances at the end of the day before
    the events, when the events are only the rest of their periods; its keys' pool rows come out
    whether or not they have events.
    """
    state = empty_balances() if state is None else state.select(BALANCE_SCHEMA.names).cast(BALANCE_SCHEMA)
    ev = _ordered(events, state)
    remaining = ev.demand.copy()  # what no pool has covered yet, per event
    parts = _Parts(draws=[], pools=[], balances=[state], crossings=[])
    thresholds = catalog.notifications.pool_thresholds
    for plan in catalog.plans:
        in_plan = mask(pc.equal(ev.plan, plan.id))[ev.order]
        in_state = mask(pc.equal(state["plan"], plan.id))
        if not in_plan.any() and not in_state.any():
            continue
        for pool in plan.pools_in_draw_order():
            given = Balances(state, ev.state_code, in_state & mask(pc.equal(state["pool"], pool.id)))
            pos = np.flatnonzero(in_plan & _covers(ev, pool))
            if len(pos) == 0 and len(given.keys) == 0:
                continue
            keys = _keys(ev, pos, pool, given)
            offered = remaining[keys.pos] if thresholds else None
            running, covered = _draw(keys, remaining, pool.allowance_tokens)
            if offered is not None and len(pos):
                events = ev.order[keys.pos]
                crossing = crossings(events, keys.starts, running, offered, plan.id, pool, thresholds)
                parts.crossings.append(crossing)
            exhausted, exhausted_day = _exhaustion(ev, keys, given, running, pool.allowance_tokens)
            parts.draws.append(_draw_rows(ev, keys, plan.id, pool, covered))
            parts.pools.append(_key_rows(ev, keys, given, plan.id, pool, covered, exhausted))
            if len(pos):
                parts.balances.append(
                    _day_balances(ev, keys, plan.id, pool, running, exhausted, exhausted_day)
                )
    return _result(ev, remaining, parts)


@dataclass(frozen=True)
class _Ordered:
    """The events as numpy columns in (account, event_time, event_id) order: ``order[i]`` is the
    input row of the i-th. Accounts are codes into ``accounts`` (their names, sorted), so the sort
    compares integers first and no string column is reordered."""

    order: np.ndarray
    accounts: pa.Array
    account_code: np.ndarray
    day: np.ndarray  # local day
    kinds: np.ndarray  # n x kinds (registry order)
    counted: np.ndarray  # the kinds the allowances count
    demand: np.ndarray  # tokens the allowances count, per event
    plan: pa.ChunkedArray  # input order; "" = pay as you go
    models: pa.ChunkedArray  # input order
    times: pa.Array  # input order
    state_code: np.ndarray  # the state's accounts as codes


def _ordered(events: pa.Table, state: pa.Table) -> _Ordered:
    account_ids = events["account_id"].combine_chunks().cast(pa.string())
    accounts = pc.unique(pa.concat_arrays([account_ids, state["account_id"].combine_chunks()]))
    accounts = accounts.take(pc.sort_indices(accounts))
    codes = pc.index_in(account_ids, value_set=accounts)
    keyed = pa.table({"account": codes, "time": events["event_time"], "id": events["event_id"]})
    order = pc.sort_indices(
        keyed, [("account", "ascending"), ("time", "ascending"), ("id", "ascending")]
    ).to_numpy()
    kinds = kind_matrix(events)[order]
    counted = np.array([k.allowance for k in tokens.KINDS])
    return _Ordered(
        order=order,
        accounts=accounts,
        account_code=codes.to_numpy(zero_copy_only=False).astype(np.int64)[order],
        day=events["local_day"].to_numpy().astype("datetime64[D]")[order],
        kinds=kinds,
        counted=counted,
        demand=kinds[:, counted].sum(axis=1),
        plan=pc.fill_null(events["plan"], ""),
        models=events["model"],
        times=events["event_time"].combine_chunks().cast(TIMESTAMP),
        state_code=pc.index_in(state["account_id"], value_set=accounts).to_numpy(zero_copy_only=False),
    )


def _covers(ev: _Ordered, pool: Pool) -> np.ndarray:
    """Which events (in sorted order) the pool's models cover."""
    if "*" in pool.models:
        covers = np.ones(len(ev.order), bool)
    else:
        covers = mask(pc.is_in(ev.models, value_set=pa.array(pool.models, pa.string())))[ev.order]
    if pool.exclude_models:
        excluded = pc.is_in(ev.models, value_set=pa.array(pool.exclude_models, pa.string()))
        covers = covers & ~mask(excluded)[ev.order]
    return covers


@dataclass(frozen=True)
class _Keys:
    """One pool's events grouped by balance key (account, period start); the events of a key are
    consecutive, since they are sorted by account and time."""

    pos: np.ndarray  # the events the pool covers (positions in sorted order)
    starts: np.ndarray  # each event's period start
    new_key: np.ndarray  # does the event start a key?
    seg: np.ndarray  # each event's key number
    first: np.ndarray  # each key's first event (position in sorted order)
    key_starts: np.ndarray
    accounts: pa.Array  # each key's account
    row: np.ndarray  # each key's row in the given balances, and whether it has one
    found: np.ndarray
    offset: np.ndarray  # what each key had used before these events (0 for a new key)


def _keys(ev: _Ordered, pos: np.ndarray, pool: Pool, given: Balances) -> _Keys:
    starts = period_start(ev.day[pos], pool.period)
    code = ev.account_code[pos]
    new_key = np.ones(len(pos), bool)
    new_key[1:] = (code[1:] != code[:-1]) | (starts[1:] != starts[:-1])
    first = pos[new_key]
    key_starts = starts[new_key]
    row, found = given.find(ev.account_code[first], key_starts)
    return _Keys(
        pos=pos,
        starts=starts,
        new_key=new_key,
        seg=np.cumsum(new_key) - 1,
        first=first,
        key_starts=key_starts,
        accounts=ev.accounts.take(pa.array(ev.account_code[first])),
        row=row,
        found=found,
        offset=given.used_of(row, found),
    )


def _draw(keys: _Keys, remaining: np.ndarray, allowance: int) -> tuple[np.ndarray, np.ndarray]:
    """(running demand of each event's key after it, what the pool covers of each event), one
    cumulative sum for the whole pool; ``remaining`` loses what the pool covers."""
    r = remaining[keys.pos]
    cum = np.cumsum(r)
    base = (cum - r)[keys.new_key][keys.seg]  # running demand before each key's first event
    running = cum - base + keys.offset[keys.seg]
    covered = np.minimum(running, allowance) - np.minimum(running - r, allowance)
    remaining[keys.pos] -= covered
    return running, covered


def _exhaustion(
    ev: _Ordered, keys: _Keys, given: Balances, running: np.ndarray, allowance: int
) -> tuple[pa.Array, np.ndarray]:
    """Per key: when it ran out (the event at which its running demand first reaches the allowance,
    or the given balance's time if it ran out before these events), and on which local day (the
    epoch for an earlier run-out, NaT for none)."""
    n = len(keys.first)
    full_idx = np.flatnonzero(running >= allowance)
    first_of_key = (
        np.r_[True, keys.seg[full_idx][1:] != keys.seg[full_idx][:-1]] if len(full_idx) else full_idx
    )
    first_full = np.full(n, -1)
    first_full[keys.seg[full_idx][first_of_key]] = full_idx[first_of_key]
    earlier = (
        pc.if_else(pa.array(keys.found), given.exhausted.take(pa.array(keys.row)), pa.nulls(n, TIMESTAMP))
        if len(given.keys)
        else pa.nulls(n, TIMESTAMP)
    )
    at_event = keys.pos[np.maximum(first_full, 0)]
    exhausted = pc.coalesce(
        earlier,
        pc.if_else(
            pa.array(first_full >= 0), ev.times.take(pa.array(ev.order[at_event])), pa.nulls(n, TIMESTAMP)
        ),
    )
    day = np.where(first_full >= 0, ev.day[at_event], np.datetime64("NaT"))
    day = np.where(keys.found & ~mask(pc.is_null(earlier)), np.datetime64("1970-01-01"), day)
    return exhausted, day


def _draw_rows(ev: _Ordered, keys: _Keys, plan: str, pool: Pool, covered: np.ndarray) -> pa.Table:
    """One row per event the pool covered some of."""
    drew = covered > 0
    return pa.table(
        {
            "event_index": ev.order[keys.pos[drew]],
            "plan": _repeat(plan, int(drew.sum())),
            "pool": _repeat(pool.id, int(drew.sum())),
            "period_start": keys.starts[drew].astype("datetime64[D]"),
            "tokens": covered[drew],
        }
    )


def _key_rows(
    ev: _Ordered,
    keys: _Keys,
    given: Balances,
    plan: str,
    pool: Pool,
    covered: np.ndarray,
    exhausted: pa.Array,
) -> pa.Table:
    """One pool row per key: the keys with events, then the given keys without (they keep their balance)."""
    used = keys.offset + (np.add.reduceat(covered, np.flatnonzero(keys.new_key)) if len(keys.pos) else 0)
    idle = ~given.matched(keys.row[keys.found])
    return _pool_rows(
        pa.concat_arrays([keys.accounts, given.accounts.filter(pa.array(idle))]),
        plan,
        pool,
        np.concatenate([keys.key_starts, given.starts[idle]]),
        np.concatenate([used, given.used[idle]]),
        pa.concat_arrays([exhausted, given.exhausted.filter(pa.array(idle)).cast(exhausted.type)]),
    )


def _day_balances(
    ev: _Ordered,
    keys: _Keys,
    plan: str,
    pool: Pool,
    running: np.ndarray,
    exhausted: pa.Array,
    exhausted_day: np.ndarray,
) -> pa.Table:
    """Each key's balance at the end of each local day with events: as of the day's last event."""
    day = ev.day[keys.pos]
    last_of_day = np.ones(len(keys.pos), bool)
    last_of_day[:-1] = keys.new_key[1:] | (day[1:] != day[:-1])
    k = keys.seg[last_of_day]
    on = day[last_of_day]
    out_of = ~np.isnat(exhausted_day[k]) & (exhausted_day[k] <= on)
    return pa.table(
        {
            "account_id": keys.accounts.take(pa.array(k)),
            "plan": _repeat(plan, len(k)),
            "pool": _repeat(pool.id, len(k)),
            "period_start": keys.key_starts[k],
            "period_end": period_end(keys.key_starts[k], pool.period),
            "local_day": on,
            "used": np.minimum(running[last_of_day], pool.allowance_tokens),
            "exhausted_at": pc.if_else(
                pa.array(out_of), exhausted.take(pa.array(k)), pa.nulls(len(k), exhausted.type)
            ),
        },
        schema=BALANCE_SCHEMA,
    )


@dataclass(frozen=True)
class _Parts:
    draws: list[pa.Table]
    pools: list[pa.Table]
    balances: list[pa.Table]
    crossings: list[pa.Table]


def _result(ev: _Ordered, remaining: np.ndarray, parts: _Parts) -> Allocation:
    """Included tokens split across the counted kinds pro rata, back in input order."""
    included_sorted = np.zeros_like(ev.kinds)
    included_sorted[:, ev.counted] = split_pro_rata(ev.demand - remaining, ev.kinds[:, ev.counted])
    included = np.empty_like(included_sorted)
    included[ev.order] = included_sorted
    overage = np.empty_like(ev.kinds)
    overage[ev.order] = ev.kinds - included_sorted
    return Allocation(
        included,
        overage,
        pa.concat_tables(parts.draws) if parts.draws else _empty_draws(),
        pa.concat_tables(parts.pools) if parts.pools else _empty_pools(),
        pa.concat_tables(parts.balances),
        pa.concat_tables(parts.crossings) if parts.crossings else CROSSINGS_SCHEMA.empty_table(),
    )


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
