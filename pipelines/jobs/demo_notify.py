"""What the demo prints about notifications: the thresholds its metering crossed and the backup tank
as the notifications saw it (accounts that ran out of their main pool, then drew on the fast
model's own pool)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from rich.console import Console
from sqlalchemy import Engine, false, func, select, tuple_

from billing.calendar import day_period
from billing.plan import main_pool
from pipelines.notify.outbox import POOL_CROSSED
from pipelines.warehouse.engine import as_date
from schemas.catalog import Catalog
from schemas.warehouse import Notification, PoolDraw


def notifications(out: Console, engine: Engine, catalog: Catalog, fast_model: str, delivered: str) -> None:
    """What the metering told accounts: how many crossed 80% and 100% of their main pool in some
    period, and how many of those then drew on the fast model's own pool in that period (the backup
    tank, as the notifications saw it happen)."""
    n, d = Notification.__table__.c, PoolDraw.__table__.c
    mains = sorted({(plan.id, pool.id) for plan in catalog.plans if (pool := main_pool(plan)) is not None})
    own = sorted(
        {(plan.id, pool.id) for plan in catalog.plans for pool in plan.pools if pool.models == [fast_model]}
    )
    with engine.connect() as conn:
        counts: dict[str, int] = dict(conn.execute(select(n.type, func.count()).group_by(n.type)).all())
        crossed = conn.execute(
            select(n.threshold, n.account_id, n.plan, n.local_day, n.period_start).where(
                n.type == POOL_CROSSED, tuple_(n.plan, n.pool).in_(mains) if mains else false()
            )
        ).all()
        drew = {
            (r.account_id, r.plan, as_date(r.local_day))
            for r in conn.execute(
                select(d.account_id, d.plan, d.local_day)
                .where(tuple_(d.plan, d.pool).in_(own) if own else false(), d.tokens > 0)
                .distinct()
            )
        }
    shares = sorted({Decimal(r.threshold) for r in crossed})
    by_share = {s: {r.account_id for r in crossed if Decimal(r.threshold) == s} for s in shares}
    tank = set()
    for r in crossed:  # exhausted on local_day: drew on the own pool then or later in the period
        if Decimal(r.threshold) != 1:
            continue
        day, pool = as_date(r.local_day), main_pool(catalog.plan(r.plan))
        last = day_period(as_date(r.period_start), pool.period if pool else "day")[1]
        if any(
            (r.account_id, r.plan, day + dt.timedelta(days=i)) in drew for i in range((last - day).days + 1)
        ):
            tank.add(r.account_id)
    total = sum(counts.values())
    kinds = ", ".join(f"{c:,} {t.removeprefix('usage_billing.')}" for t, c in sorted(counts.items()))
    out.print(
        f"notifications: {total:,} written with the metering and the drafts ({kinds or 'none'}); {delivered}"
    )
    if shares:
        out.print(
            "main pools: "
            + ", ".join(f"{len(a):,} accounts crossed {s:.0%}" for s, a in by_share.items())
            + f"; {len(tank):,} of those that ran out then drew on {fast_model}'s own pool"
        )
