"""The billing rule, written again one event at a time: the independent reference the meter is held to.

Nothing here comes from ``billing`` or ``pipelines``: local dates through ``zoneinfo``, periods from
``datetime``, the plan in force by a plain search of the rows, balances in a dict, events in
(event_time, event_id) order per account, the pro rata split with fractions.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from zoneinfo import ZoneInfo

KINDS = ("input", "cached_input", "output")


def period_of(day: dt.date, period: str) -> dt.date:
    if period == "day":
        return day
    if period == "week":
        return day - dt.timedelta(days=day.weekday())
    return day.replace(day=1)


def split(total: int, kinds: list[int]) -> list[int]:
    """Floor of each kind's share, then the largest remainders (ties in kind order) get the rest."""
    weight = sum(kinds)
    if weight == 0 or total == 0:
        return [0, 0, 0]
    shares = [Fraction(total * k, weight) for k in kinds]
    base = [int(s) for s in shares]
    for i in sorted(range(3), key=lambda i: (-(shares[i] - base[i]), i))[: total - sum(base)]:
        base[i] += 1
    return base


@dataclass
class Result:
    # (local_day, account, model, tier, kind) -> [included, overage]
    billable: dict[tuple, list[int]] = field(default_factory=dict)
    # (account, plan, pool, period_start) -> used
    pools: dict[tuple, int] = field(default_factory=dict)
    # (event_id, plan, pool, period_start) -> tokens covered
    draws: dict[tuple, int] = field(default_factory=dict)
    local_day: dict[str, dt.date] = field(default_factory=dict)  # event_id -> its local day
    # (account, local month, model, tier, kind, unit price per 1M) -> overage tokens: each event at the
    # price in force on its UTC day
    priced: dict[tuple, int] = field(default_factory=dict)


def bill(catalog: dict, accounts: list[dict], events: list[dict]) -> Result:
    """``catalog``: the TOML's data (``plans`` with ``pools``); ``accounts``: rows like the CSV's (dates as
    ``date``, ``plan`` None for pay as you go, ``active_until`` None = open); ``events``: dicts with an
    aware ``event_time``."""
    plans = {p["id"]: p for p in catalog.get("plans", [])}
    rows: dict[str, list[dict]] = {}
    for r in accounts:
        rows.setdefault(r["account_id"], []).append(r)
    out = Result()
    balances: dict[tuple, int] = {}
    for e in sorted(events, key=lambda e: (e["account_id"], e["event_time"], e["event_id"])):
        mine = rows.get(e["account_id"], [])
        zone = mine[0]["timezone"] if mine else "UTC"
        day = e["event_time"].astimezone(ZoneInfo(zone)).date()
        out.local_day[e["event_id"]] = day
        plan = None
        for r in mine:
            if r["active_from"] <= day and (r["active_until"] is None or day <= r["active_until"]):
                plan = r["plan"]
        kinds = [e["input_tokens"] - e["cached_input_tokens"], e["cached_input_tokens"], e["output_tokens"]]
        left = sum(kinds)
        if plan is not None:
            pools = sorted(plans[plan].get("pools", []), key=lambda p: p.get("priority", 1))
            for pool in pools:
                eligible = ("*" in pool["models"] or e["model"] in pool["models"]) and e[
                    "model"
                ] not in pool.get("exclude_models", [])
                if not eligible:
                    continue
                key = (e["account_id"], plan, pool["id"], period_of(day, pool["period"]))
                take = min(left, pool["allowance_tokens"] - balances.get(key, 0))
                balances[key] = balances.get(key, 0) + take
                if take:
                    out.draws[(e["event_id"], plan, pool["id"], key[3])] = take
                left -= take
        included = split(sum(kinds) - left, kinds)
        utc_day = e["event_time"].astimezone(dt.UTC).date()
        in_force = [
            p
            for p in catalog.get("prices", [])
            if p["model"] == e["model"] and p["tier"] == e["speed_tier"] and p["effective_from"] <= utc_day
        ]
        price = max(in_force, key=lambda p: p["effective_from"]) if in_force else None
        for kind, tokens, inc in zip(KINDS, kinds, included, strict=True):
            line = out.billable.setdefault((day, e["account_id"], e["model"], e["speed_tier"], kind), [0, 0])
            line[0] += inc
            line[1] += tokens - inc
            if tokens - inc and price is not None:
                key = (
                    e["account_id"],
                    day.strftime("%Y-%m"),
                    e["model"],
                    e["speed_tier"],
                    kind,
                    Decimal(price[kind]),
                )
                out.priced[key] = out.priced.get(key, 0) + tokens - inc
    out.pools = {k: v for k, v in balances.items() if v}
    out.billable = {k: v for k, v in out.billable.items() if v != [0, 0]}
    return out


def usage_amount(catalog: dict, result: Result, account: str, month: str) -> Decimal:
    """What the account owes for overage in ``month`` (local days): one line per model, tier, kind and
    unit price (each event at the price in force on its UTC day), each rounded half-up to cents."""
    total = Decimal("0.00")
    for (acc, m, _model, _tier, _kind, unit), quantity in result.priced.items():
        if acc == account and m == month:
            amount = Decimal(quantity) * unit / Decimal(1_000_000)
            total += amount.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    return total


def month_days(month: str) -> tuple[dt.date, dt.date]:
    first = dt.date.fromisoformat(f"{month}-01")
    nxt = (first.replace(day=28) + dt.timedelta(days=4)).replace(day=1)
    return first, nxt - dt.timedelta(days=1)


def invoice_totals(catalog: dict, accounts: list[dict], result: Result, months: list[str]) -> dict:
    """(account, month) -> total: one plan-fee line per plan row in force in the month (fee x its
    days in the month / days in the month, half-up to cents), plus the overage lines."""
    fees = {p["id"]: Decimal(p["monthly_fee"]) for p in catalog.get("plans", [])}
    out: dict[tuple, Decimal] = {}
    for month in months:
        first, last = month_days(month)
        for r in accounts:
            if r["plan"] is None:
                continue
            lo = max(first, r["active_from"])
            hi = min(last, r["active_until"] or last)
            if hi < lo:
                continue
            fee = fees[r["plan"]] * ((hi - lo).days + 1) / ((last - first).days + 1)
            key = (r["account_id"], month)
            out[key] = out.get(key, Decimal("0.00")) + fee.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        for account in {k[1] for k in result.billable}:
            usage = usage_amount(catalog, result, account, month)
            if usage or any(k[1] == account and k[0].strftime("%Y-%m") == month for k in result.billable):
                out[(account, month)] = out.get((account, month), Decimal("0.00")) + usage
    return out
