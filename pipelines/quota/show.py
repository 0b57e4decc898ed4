"""A person-readable view of an account's pools at a moment (``usage-billing quota show``)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Connection, Engine, and_, select

from billing.calendar import period_end, period_start
from billing.plan import attach_accounts, backup_tank_weekly
from pipelines.errors import UsageBillingError
from pipelines.warehouse.accounts import load_accounts_table
from pipelines.warehouse.engine import as_utc
from schemas import tokens
from schemas.catalog import Catalog, Pool
from schemas.events import LAKE_SCHEMA
from schemas.limits import date_problem
from schemas.warehouse import Account, PoolUsage


@dataclass
class PoolView:
    header: str
    lines: list[str] = field(default_factory=list)


def _moment(at: str | None) -> dt.datetime:
    if at is None:
        return dt.datetime.now(dt.UTC)
    try:
        moment = dt.datetime.fromisoformat(at)
    except ValueError:
        raise UsageBillingError(
            f"invalid --at {at!r}: expected an ISO time like 2026-03-04T12:00:00Z"
        ) from None
    if moment.tzinfo is None:
        raise UsageBillingError(f"--at {at!r} has no timezone: add Z or an offset")
    # a day's margin on both sides: the moment is seen in the account's own timezone
    problem = date_problem(moment.date() - dt.timedelta(days=1)) or date_problem(
        moment.date() + dt.timedelta(days=1)
    )
    if problem:
        raise UsageBillingError(f"--at {at}: {problem.replace('is outside', 'lies outside')}")
    return moment


@dataclass
class PeriodBalance:
    start: dt.date  # the pool period holding the day (account-local dates, inclusive)
    end: dt.date
    used: int | None  # as last metered; None: no balance stored for the period
    exhausted_at: dt.datetime | None  # UTC


def period_balance(conn: Connection, account: str, plan: str, pool: Pool, day: dt.date) -> PeriodBalance:
    """The period of ``pool`` holding the account-local ``day`` and its stored ``pool_usage`` row."""
    start = period_start(np.array([day], dtype="datetime64[D]"), pool.period)[0].item()
    end = period_end(np.array([start], dtype="datetime64[D]"), pool.period)[0].item()
    pu = PoolUsage.__table__
    found = conn.execute(
        select(pu.c.used, pu.c.exhausted_at).where(
            and_(
                pu.c.account_id == account,
                pu.c.plan == plan,
                pu.c.pool == pool.id,
                pu.c.period_start == start,
            )
        )
    ).first()
    if found is None:
        return PeriodBalance(start, end, None, None)
    return PeriodBalance(start, end, found.used, as_utc(found.exhausted_at))


def pool_state(engine: Engine, catalog: Catalog, account: str, at: str | None) -> PoolView:
    moment = _moment(at)
    a = Account.__table__
    with engine.connect() as conn:
        periods = conn.execute(select(a).where(a.c.account_id == account)).all()
    if not periods:
        raise UsageBillingError(f"unknown account {account!r} (load it with `usage-billing accounts load`)")
    zone = ZoneInfo(periods[0].timezone)
    local = moment.astimezone(zone)
    day = local.date()
    row = next(
        (p for p in periods if p.active_from <= day and (p.active_until is None or day <= p.active_until)),
        None,
    )
    if row is None or row.plan is None:
        return PoolView(f"{account} at {local:%Y-%m-%d %H:%M %Z}: pay as you go, no quota pools")
    plan = catalog.plan(row.plan)
    view = PoolView(f"{account} at {local:%Y-%m-%d %H:%M %Z}: plan {plan.id}")
    with engine.connect() as conn:
        for pool in plan.pools_in_draw_order():
            balance = period_balance(conn, account, plan.id, pool, day)
            used = balance.used or 0
            resets = dt.datetime.combine(balance.end + dt.timedelta(days=1), dt.time(), tzinfo=zone)
            models = "all models" if "*" in pool.models else ", ".join(pool.models)
            if pool.exclude_models:
                models += " except " + ", ".join(pool.exclude_models)
            view.lines.append(
                f"  {pool.id:<8} ({pool.period}, {models}): allowance {pool.allowance_tokens:,}, "
                f"used {used:,}, remaining {pool.allowance_tokens - used:,}, "
                f"resets {resets:%Y-%m-%d %H:%M %Z}"
            )
    return view


def backup_tank(
    engine: Engine, lake_root: str, catalog: Catalog, model: str, since: dt.date | None = None
) -> pa.Table:
    """Per account-local ISO week: ``model``'s accounts and tokens, and how many of them came while the
    account's main pool was exhausted (``billing.quota.backup_tank_weekly`` on the lake's events)."""
    from pipelines import lake  # lazy: apache_beam

    p = PoolUsage.__table__
    query = select(p.c.account_id, p.c.plan, p.c.pool, p.c.period_start, p.c.exhausted_at).where(
        p.c.exhausted_at.is_not(None)
    )
    with engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(query)]
    pools = pa.Table.from_pylist(rows, schema=POOL_SCHEMA)
    condition = pc.field("model") == model
    if since is not None:
        condition = condition & (
            pc.field("event_time") >= pa.scalar(dt.datetime.combine(since, dt.time(), dt.UTC))
        )
    events = lake.scan(
        lake.dataset_files(lake_root, lake.EVENTS),
        ["event_time", "account_id", "model", *tokens.fields()],
        condition,
        LAKE_SCHEMA,
    )
    return backup_tank_weekly(attach_accounts(events, load_accounts_table(engine)), pools, catalog, model)


POOL_SCHEMA = pa.schema(
    [
        ("account_id", pa.string()),
        ("plan", pa.string()),
        ("pool", pa.string()),
        ("period_start", pa.date32()),
        ("exhausted_at", pa.timestamp("us", tz="UTC")),
    ]
)
