"""Why an event was charged what it was (``usage-billing quota explain --event-id E``): for support.

Everything comes from what the pipeline stored, nothing is re-metered: the event from the lake
(found through its dedup shard and that shard's sorted id-hash index, so one Parquet file is read),
its plan and local day from the accounts, what each pool covered from the metering run's allocation
records, the pools' balances from ``pool_usage``. The split of the covered tokens across the token
kinds is the billing rule's (``split_pro_rata``), so the numbers add up to ``billable_usage``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Engine, and_, select

from billing.plan import attach_accounts
from billing.pricing import price_in_force
from billing.tokens import split_pro_rata, token_kinds
from pipelines import lake
from pipelines.errors import UsageBillingError
from pipelines.ingest.hashing import shard_of, stable_hash
from pipelines.ingest.units import index_file, shard_file
from pipelines.quota.show import as_utc, period_balance
from pipelines.quota.store import ALLOCATIONS
from pipelines.warehouse.accounts import load_accounts_table
from pipelines.warehouse.binding import require_lake
from pipelines.warehouse.remeter import out_of_date
from schemas.catalog import Catalog
from schemas.events import EVENT_SCHEMA
from schemas.lake import ALLOCATION_SCHEMA
from schemas.tokens import ids as kind_ids
from schemas.warehouse import MeteredDay


@dataclass
class PoolLine:
    pool: str
    period: str
    start: dt.date
    end: dt.date
    allowance: int
    drew: int  # tokens of this event the pool covered
    used: int | None  # the period's used tokens as metered (None: no balance row)
    exhausted_at: dt.datetime | None


@dataclass
class Charge:
    event: dict
    local_day: dt.date
    timezone: str
    plan: str | None
    metered: bool  # the event's local and UTC day were metered
    stale: bool  # its lake file changed after that metering run (a late event): not re-metered yet
    tokens: dict[str, int]
    included: dict[str, int]
    overage: dict[str, int]
    pools: list[PoolLine] = field(default_factory=list)
    rate_from: dt.date | None = None  # effective_from of the price in force (None: no price)
    per_million: dict[str, Decimal] = field(default_factory=dict)
    currency: str = ""
    out_of_date: str = ""  # why its local day must be metered again (an accounts load, other plans)

    @property
    def amount(self) -> Decimal | None:
        """The overage at the rate card, unrounded: invoices round per line, not per event."""
        if self.rate_from is None:
            return None
        return sum(
            (Decimal(self.overage[k]) * self.per_million[k] / Decimal(10**6) for k in kind_ids()),
            Decimal(0),
        )


def find_event(lake_root: str, event_id: str, day: dt.date | None = None) -> tuple[pa.Table, str]:
    """The event (``EVENT_SCHEMA``) of ``event_id`` and the file holding it, searching the UTC date
    ``day`` or every date (newest first). Each date costs one look into the shard's sorted id hashes
    (a lake that ingest did not write, without a shard count: every file of the date)."""
    dates = lake.partition_dates(lake_root, lake.EVENTS)
    if day is not None:
        dates = [d for d in dates if d == day]
    ids = pa.array([event_id], pa.string())
    wanted = stable_hash(ids)[0]
    meta = lake.join(lake_root, lake.META_FILE)
    shard = int(shard_of(ids, lake.shard_count(lake_root))[0]) if lake.exists(meta) else None
    for d in sorted(dates, reverse=True):
        folder = lake.partition(lake_root, lake.EVENTS, d)
        candidates = [lake.partition_file(folder, shard_file(shard))] if shard is not None else None
        for data in candidates or lake.list_files(folder):
            if not lake.exists(data) or (shard is not None and not _may_hold(folder, shard, wanted)):
                continue
            rows = lake.read_parquet(data)
            rows = rows.filter(pc.equal(rows["event_id"], event_id))
            if rows.num_rows:
                return rows.select(EVENT_SCHEMA.names).cast(EVENT_SCHEMA).slice(0, 1), data
    where = f"on {day}" if day is not None else "in any date of the lake"
    raise UsageBillingError(f"no event {event_id!r} {where} ({lake.join(lake_root, lake.EVENTS)})")


def _may_hold(folder: str, shard: int, wanted: np.uint64) -> bool:
    """False only when the shard file's id-hash index is there and lacks the hash."""
    index = lake.partition_file(folder, index_file(shard))
    if not lake.exists(index):
        return True
    # A local index is mapped, not read: a binary search touches a few pages of it.
    hashes = lake.read_npy(index, mmap=True)
    at = int(np.searchsorted(hashes, wanted))
    return at < len(hashes) and hashes[at] == wanted


def _draws(lake_root: str, event_id: str, local_day: dt.date, event_file: str) -> tuple[pa.Table, bool]:
    """What each pool covered of the event (pool, tokens), and whether the event's file changed after
    the metering run that wrote those records."""
    folder = lake.partition(lake_root, ALLOCATIONS, local_day)
    files = lake.list_files(folder)
    if not files:
        return pa.table({"pool": pa.array([], pa.string()), "tokens": pa.array([], pa.int64())}), False
    found = lake.scan(files, ["pool", "tokens"], pc.field("event_id") == event_id, ALLOCATION_SCHEMA)
    metered_at = max(m for _, _, m in lake.stamps(files))
    return found, lake.stamps([event_file])[0][2] > metered_at


def _metered(engine: Engine, local_day: dt.date, utc_day: dt.date) -> bool:
    m = MeteredDay.__table__
    with engine.connect() as conn:
        return (
            conn.execute(
                select(m.c.local_day).where(and_(m.c.local_day == local_day, m.c.utc_day == utc_day))
            ).first()
            is not None
        )


def explain_event(
    engine: Engine, lake_root: str, catalog: Catalog, event_id: str, day: dt.date | None = None
) -> Charge:
    require_lake(engine, lake_root, "quota explain")
    found, event_file = find_event(lake_root, event_id, day)
    accounts = load_accounts_table(engine)
    event = attach_accounts(found, accounts)
    row = event.to_pylist()[0]
    local_day, plan_id = row["local_day"], row["plan"]
    # The zone attach_accounts used: the account's first in name order.
    zones = accounts.filter(pc.equal(accounts["account_id"], row["account_id"]))["timezone"]
    zone = pc.min(zones).as_py() if len(zones) else "UTC (unknown account)"
    kinds = token_kinds(event).to_pylist()[0]
    draws, stale = _draws(lake_root, event_id, local_day, event_file)
    with engine.connect() as conn:
        later = out_of_date(conn, catalog, local_day, local_day)
    covered = {p: int(t) for p, t in zip(draws["pool"].to_pylist(), draws["tokens"].to_pylist(), strict=True)}
    matrix = np.array([[kinds[k] for k in kind_ids()]], np.int64)
    included = split_pro_rata(np.array([sum(covered.values())], np.int64), matrix)[0]
    charge = Charge(
        event=row,
        local_day=local_day,
        timezone=zone,
        plan=plan_id,
        metered=_metered(engine, local_day, row["event_time"].date()),
        stale=stale or bool(later),
        out_of_date=later[0].why if later else "",
        tokens=kinds,
        included=dict(zip(kind_ids(), included.tolist(), strict=True)),
        overage={k: kinds[k] - int(v) for k, v in zip(kind_ids(), included, strict=True)},
    )
    if plan_id is not None:
        charge.pools = _pool_lines(engine, catalog, row, covered)
    price = price_in_force(catalog, row["model"], row["speed_tier"], row["event_time"].date())
    if price is not None:
        charge.rate_from = price.effective_from
        charge.per_million = {k: price.per_million(k) for k in kind_ids()}
        charge.currency = catalog.currency
    return charge


def _pool_lines(engine: Engine, catalog: Catalog, row: dict, covered: dict[str, int]) -> list[PoolLine]:
    try:
        plan = catalog.plan(row["plan"])
    except KeyError:
        raise UsageBillingError(
            f"account {row['account_id']} is on plan {row['plan']!r}, which the catalog does not have"
        ) from None
    lines = []
    with engine.connect() as conn:
        for pool in plan.pools_in_draw_order():
            if not pool.covers(row["model"]):
                continue
            balance = period_balance(conn, row["account_id"], plan.id, pool, row["local_day"])
            lines.append(
                PoolLine(
                    pool=pool.id,
                    period=pool.period,
                    start=balance.start,
                    end=balance.end,
                    allowance=pool.allowance_tokens,
                    drew=covered.get(pool.id, 0),
                    used=balance.used,
                    exhausted_at=balance.exhausted_at,
                )
            )
    return lines


def as_dict(charge: Charge) -> dict:
    """The explanation as plain JSON values: times ISO 8601 in UTC, money and prices as exact strings."""
    event = dict(charge.event)
    event["event_time"] = as_utc(event["event_time"]).isoformat()
    event = {k: v.isoformat() if isinstance(v, dt.date) else v for k, v in event.items()}
    amount = charge.amount
    known = charge.metered and not charge.stale  # else no numbers: they could be wrong
    return {
        "event": event,
        "local_day": charge.local_day.isoformat(),
        "timezone": charge.timezone,
        "plan": charge.plan,
        "metered": known,
        "stale": charge.stale,
        "tokens": charge.tokens,
        "pools": [
            {
                "pool": p.pool,
                "period": p.period,
                "period_start": p.start.isoformat(),
                "period_end": p.end.isoformat(),
                "allowance": p.allowance,
                "covered": p.drew,
                "period_used": p.used,
                "exhausted_at": p.exhausted_at.isoformat() if p.exhausted_at else None,
            }
            for p in (charge.pools if known else [])
        ],
        "included": charge.included if known else None,
        "overage": charge.overage if known else None,
        "price": None
        if charge.rate_from is None or not known
        else {
            "effective_from": charge.rate_from.isoformat(),
            "currency": charge.currency,
            "per_million": {k: str(v) for k, v in charge.per_million.items()},
            "overage_amount_unrounded": str(amount),
        },
    }


def _kinds(values: dict[str, int]) -> str:
    return " · ".join(f"{k} {values[k]:,}" for k in kind_ids())


def render(charge: Charge) -> list[str]:
    e = charge.event
    when = as_utc(e["event_time"])
    assert when is not None
    lines = [
        f"event {e['event_id']} · {when:%Y-%m-%d %H:%M:%S.%f} UTC · account {e['account_id']}",
        f"  local day {charge.local_day} ({charge.timezone}) · "
        + (f"plan {charge.plan}" if charge.plan else "pay as you go (no plan in force)")
        + f" · model {e['model']}, tier {e['speed_tier']}, status {e['status']}",
        f"  tokens: {_kinds(charge.tokens)} ({sum(charge.tokens.values()):,})",
    ]
    if not charge.metered or charge.stale:
        if not charge.metered:
            why = f"not metered yet: {charge.local_day} (local) has not been metered"
        elif charge.out_of_date:
            why = f"not metered yet: {charge.local_day} (local) is out of date ({charge.out_of_date})"
        else:
            why = (
                "not metered yet: its lake partition changed after the last metering of "
                f"{charge.local_day} (a late event)"
            )
        lines.append(f"  {why}; run `usage-billing quota meter --date {charge.local_day}`")
        return lines
    if charge.plan is not None:
        lines.append("  pools that cover this model, in the order it draws from them:")
        for p in charge.pools:
            period = f"{p.period} {p.start}..{p.end}"
            used = "no balance stored" if p.used is None else f"period used {p.used:,} of {p.allowance:,}"
            state = ""
            if p.exhausted_at is not None:
                if p.exhausted_at < when:
                    state = f" · exhausted {p.exhausted_at:%Y-%m-%d %H:%M:%S} UTC, before this event"
                elif p.exhausted_at == when and p.drew:
                    state = " · this event used its last tokens"
                else:
                    state = f" · exhausted later, {p.exhausted_at:%Y-%m-%d %H:%M:%S} UTC"
            lines.append(f"    {p.pool} ({period}): covered {p.drew:,} · {used}{state}")
        if not charge.pools:
            lines.append("    none: every token is overage")
    included, overage = sum(charge.included.values()), sum(charge.overage.values())
    lines.append(f"  included {included:,}: {_kinds(charge.included)}")
    if charge.rate_from is None:
        lines.append(f"  overage {overage:,}: {_kinds(charge.overage)}; no price in the catalog for this day")
    else:
        prices = " · ".join(f"{k} {charge.per_million[k]}" for k in kind_ids())
        lines.append(
            f"  overage {overage:,}: {_kinds(charge.overage)} at the rate card from {charge.rate_from} "
            f"(per 1M tokens: {prices}) = {charge.currency} {charge.amount:.6f}, before the invoice "
            "rounds each line to cents"
        )
    return lines
