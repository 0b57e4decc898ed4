"""The plan in force: which plan each event's account had on its local day (accounts are effective-dated), and
what a catalog's plans say about models with a pool of their own (the backup tank)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from billing.calendar import EPOCH, local_dates, period_start
from schemas.catalog import Catalog, Plan, Pool
from schemas.lake import PRICE
from schemas.tokens import allowance_tokens


def mask(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean Arrow array (nulls false) as a NumPy mask."""
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=bool)


class AccountIndex:
    """The accounts table arranged for ``attach_accounts``: built once, used for every batch of events.

    ``accounts``: account_id, plan (null = pay as you go), timezone, active_from, active_until (null =
    open).
    """

    def __init__(self, accounts: pa.Table) -> None:
        self.empty = accounts.num_rows == 0
        if self.empty:
            return
        rows = accounts.sort_by([("account_id", "ascending"), ("active_from", "ascending")])
        row_account = rows["account_id"].combine_chunks()
        self.ids = pc.unique(row_account)  # sorted, so each account's rows are a run in row order
        self.row_code = (
            pc.index_in(row_account, value_set=self.ids).to_numpy(zero_copy_only=False).astype(np.int64)
        )
        # One timezone per account (the first in name order, should its rows disagree).
        zones = accounts.group_by("account_id").aggregate([("timezone", "min")])
        order = pc.sort_indices(pc.index_in(zones["account_id"], value_set=self.ids))
        self.zones = zones["timezone_min"].take(order).combine_chunks()
        start = rows["active_from"].to_numpy(zero_copy_only=False).astype("datetime64[D]")
        self.start = (start - EPOCH).astype(np.int64)
        until = rows["active_until"].to_numpy(zero_copy_only=False).astype("datetime64[D]")
        self.until = np.where(np.isnat(until), np.iinfo(np.int64).max, (until - EPOCH).astype(np.int64))
        self.keys = self.row_code * SPAN + self.start  # sorted: by account, then start
        self.plans = rows["plan"].cast(pa.string()).combine_chunks()
        # Each account's first row, and whether it is its only one (most accounts never change plan).
        self.first = np.searchsorted(self.row_code, np.arange(len(self.ids)))
        self.single = np.diff(np.append(self.first, len(self.row_code))) == 1


SPAN = 1 << 32  # (account code, day) -> one int64 key


def attach_accounts(events: pa.Table, accounts: AccountIndex | pa.Table) -> pa.Table:
    """``events`` plus ``local_day`` (the account's local date) and ``plan`` (the one in force that day).

    ``accounts``: an ``AccountIndex`` or the accounts table it is built from. An unknown account is
    metered in UTC with no plan: every token is overage.
    """
    index = accounts if isinstance(accounts, AccountIndex) else AccountIndex(accounts)
    if index.empty:
        local = local_dates(events["event_time"], pa.repeat(pa.scalar("UTC"), events.num_rows))
        return events.append_column("local_day", pa.array(local).cast(pa.date32())).append_column(
            "plan", pa.nulls(events.num_rows, pa.string())
        )
    # Each account's code (null: an unknown account). A dictionary array is looked up once per
    # distinct account: Arrow's index_in would decode it first, slower than plain text.
    account = events["account_id"].combine_chunks()
    if pa.types.is_dictionary(account.type):
        code = pc.index_in(account.dictionary, value_set=index.ids).take(account.indices)
    else:
        code = pc.index_in(account, value_set=index.ids)
    known = mask(code.is_valid())
    code = pc.fill_null(code, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    zone = pc.if_else(pa.array(known), index.zones.take(pa.array(code)), pa.scalar(None, pa.string()))
    local = local_dates(events["event_time"], pc.fill_null(zone, "UTC"))  # unknown account: UTC
    # The plan in force: the account's last row starting on or before the local day, if it has not
    # ended (rows of one account never overlap). An account with one row: that row (a gather); the
    # others: one search over (account, date) keys.
    day = (local - EPOCH).astype(np.int64)
    row = index.first[code]
    several = np.flatnonzero(~index.single[code])
    if len(several):
        row[several] = np.searchsorted(index.keys, code[several] * SPAN + day[several], side="right") - 1
    at = np.clip(row, 0, None)
    in_force = (
        known
        & (row >= 0)
        & (index.row_code[at] == code)
        & (index.start[at] <= day)
        & (day <= index.until[at])
    )
    plan = index.plans.take(pa.array(at, mask=~in_force))
    return events.append_column("local_day", pa.array(local).cast(pa.date32())).append_column("plan", plan)


def own_pool_models(catalog: Catalog) -> list[str]:
    """Models that some plan gives a pool of their own (named in ``models``, not through "*")."""
    named = {
        m for plan in catalog.plans for pool in plan.pools if "*" not in pool.models for m in pool.models
    }
    return [m for m in catalog.model_ids if m in named]


def main_pool(plan: Plan) -> Pool | None:
    """A plan's main pool: the first in draw order that covers "*" (every model it does not exclude).
    Using a model of its own pool after the main pool ran out is the backup tank."""
    return next((p for p in plan.pools_in_draw_order() if "*" in p.models), None)


def backup_tank_weekly(events: pa.Table, pools: pa.Table, catalog: Catalog, model: str) -> pa.Table:
    """Per ISO week (account-local): how much of ``model``'s use came while the main pool was empty.

    ``events``: event_time, account_id, model, the token fields, plan, local_day.
    ``pools``: pool_usage rows (account_id, plan, pool, period_start, exhausted_at). The main pool of
    a plan is its pool covering "*"; an event counts as backup-tank use when that pool's balance for
    the event's period was exhausted at or before the event. Per week: the model's tokens and
    accounts, its backup-tank tokens and accounts, and ``exhausted_accounts``: its accounts whose
    main pool ran out (at any time) in a period holding one of their events of the week.
    """
    sel = events.filter(pc.equal(events["model"], model))
    n = sel.num_rows
    day = sel["local_day"].to_numpy(zero_copy_only=False).astype("datetime64[D]")
    exhausted_at = _main_pool_exhausted(sel, day, pools, catalog)
    times = sel["event_time"]
    backup = pc.fill_null(pc.less_equal(exhausted_at, times), False)
    tokens = allowance_tokens(sel)
    weeks = pa.array(period_start(day, "week")).cast(pa.date32())
    table = pa.table(
        {
            "week_start": weeks,
            "account_id": sel["account_id"],
            "tokens": tokens,
            "backup_tokens": pc.if_else(backup, tokens, 0),
            "backup_account": pc.if_else(backup, sel["account_id"], pa.nulls(n, pa.string())),
            "exhausted_account": pc.if_else(
                pc.is_valid(exhausted_at), sel["account_id"], pa.nulls(n, pa.string())
            ),
        }
    )
    g = table.group_by("week_start", use_threads=False).aggregate(
        [
            ("tokens", "sum"),
            ("backup_tokens", "sum"),
            ("account_id", "count_distinct"),
            ("backup_account", "count_distinct"),
            ("exhausted_account", "count_distinct"),
        ]
    )
    out = pa.table(
        {
            "week_start": g["week_start"],
            "tokens": g["tokens_sum"],
            "backup_tokens": g["backup_tokens_sum"],
            "accounts": g["account_id_count_distinct"],
            "backup_accounts": g["backup_account_count_distinct"],
            "exhausted_accounts": g["exhausted_account_count_distinct"],
        }
    )
    return out.sort_by("week_start")


def _main_pool_exhausted(sel: pa.Table, day: np.ndarray, pools: pa.Table, catalog: Catalog) -> pa.Array:
    """Per event: when its plan's main pool ran out in the event's period (null: it did not)."""
    n = sel.num_rows
    # Each event has one plan, so the per-plan matches below never overlap.
    exhausted = np.full(n, np.datetime64("NaT"), dtype="datetime64[us]")
    for plan in catalog.plans:
        pool = main_pool(plan)
        if pool is None:
            continue
        keyed = pa.table(
            {
                "_row": np.arange(n),
                "account_id": sel["account_id"],
                "plan": sel["plan"],
                "period_start": pa.array(period_start(day, pool.period)).cast(pa.date32()),
            }
        )
        keyed = keyed.filter(pc.equal(keyed["plan"], plan.id))
        balances = pools.filter(pc.and_(pc.equal(pools["plan"], plan.id), pc.equal(pools["pool"], pool.id)))
        joined = keyed.join(
            balances.select(["account_id", "period_start", "exhausted_at"]),
            ["account_id", "period_start"],
            join_type="inner",
        )
        exhausted[joined["_row"].to_numpy()] = (
            joined["exhausted_at"].cast(pa.timestamp("us")).to_numpy(zero_copy_only=False)
        )
    return pa.array(exhausted, pa.timestamp("us")).cast(pa.timestamp("us", tz="UTC"))


def fee_pieces(plans: pa.Table, catalog: Catalog, first: dt.date, last: dt.date) -> pa.Table:
    """Plan rows clipped to the month and split where the plan's fee changes (``[[plans.fees]]``):
    account_id, plan, days, monthly_fee. Plans without fee rows are priced per distinct plan; only
    rows of plans whose fee changes are split one by one (a row per account, never per event)."""
    start = np.maximum(plans["active_from"].to_numpy().astype("datetime64[D]"), np.datetime64(first))
    until = pc.fill_null(plans["active_until"], pa.scalar(last, pa.date32()))
    end = np.minimum(until.to_numpy().astype("datetime64[D]"), np.datetime64(last))
    rows = pa.table(
        {
            "account_id": plans["account_id"],
            "plan": plans["plan"],
            "start": pa.array(start, pa.date32()),
            "end": pa.array(end, pa.date32()),
        }
    ).filter(pa.array(end >= start))
    dated = pa.array(sorted(p.id for p in catalog.plans if p.fees), pa.string())
    changing = pc.is_in(rows["plan"], value_set=dated)
    simple = rows.filter(pc.invert(changing))
    fee_of = {p.id: p.monthly_fee for p in catalog.plans}
    days = pc.add(pc.subtract(simple["end"].cast(pa.int32()), simple["start"].cast(pa.int32())), 1)
    fees = pa.array([fee_of[p] for p in pc.unique(simple["plan"]).to_pylist()], PRICE)
    index = pc.index_in(simple["plan"], value_set=pc.unique(simple["plan"]))
    out = [
        pa.table(
            {
                "account_id": simple["account_id"],
                "plan": simple["plan"],
                "days": days.cast(pa.int64()),
                "monthly_fee": pc.take(fees, index) if len(fees) else pa.array([], PRICE),
            }
        )
    ]
    split: dict[str, list[Any]] = {"account_id": [], "plan": [], "days": [], "monthly_fee": []}
    for row in rows.filter(changing).to_pylist():
        for a, b, fee, _ in catalog.plan(row["plan"]).fee_pieces(row["start"], row["end"]):
            for key, value in zip(
                split, (row["account_id"], row["plan"], (b - a).days + 1, fee), strict=True
            ):
                split[key].append(value)
    out.append(pa.table(split, schema=out[0].schema))
    return pa.concat_tables(out)
