"""A person-readable view of an account's pools at a moment (``usage-billing quota show``)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

import numpy as np
from sqlalchemy import Engine, and_, select

from billing.quota import period_end, period_start
from pipelines.errors import UsageBillingError
from schemas.catalog import Catalog
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
    return moment


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
    pu = PoolUsage.__table__
    with engine.connect() as conn:
        for pool in plan.pools_in_draw_order():
            start = period_start(np.array([day], dtype="datetime64[D]"), pool.period)[0].item()
            end = period_end(np.array([start], dtype="datetime64[D]"), pool.period)[0].item()
            found = conn.execute(
                select(pu.c.used, pu.c.exhausted_at).where(
                    and_(
                        pu.c.account_id == account,
                        pu.c.plan == plan.id,
                        pu.c.pool == pool.id,
                        pu.c.period_start == start,
                    )
                )
            ).first()
            used = found.used if found else 0
            resets = dt.datetime.combine(end + dt.timedelta(days=1), dt.time(), tzinfo=zone)
            models = "all models" if "*" in pool.models else ", ".join(pool.models)
            if pool.exclude_models:
                models += " except " + ", ".join(pool.exclude_models)
            view.lines.append(
                f"  {pool.id:<8} ({pool.period}, {models}): allowance {pool.allowance_tokens:,}, "
                f"used {used:,}, remaining {pool.allowance_tokens - used:,}, "
                f"resets {resets:%Y-%m-%d %H:%M %Z}"
            )
    return view
