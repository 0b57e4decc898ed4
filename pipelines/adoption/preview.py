"""Migration preview: what retiring a model does to the bill of each account that still uses it.

    usage-billing retirement preview --model gpt-5.3-codex-spark --month 2026-07 --out reports/preview

The what-if: every event of the model that the month's metering reads (the month's local days and
the days before it that its pool periods reach, ``read_window``) becomes an event of the successor
at a speed tier (one of the successor's, or ``keep``: each event keeps its own), with the same id,
time and tokens. Everything else stays: the accounts and their plans and pools (the model's own
pool now covers nothing unless the successor is in it), the catalog's prices, the billing rule and
the invoice rule. Both sides are computed the way metering and drafting compute them, by the same
functions: ``billing.quota.allocate`` meters the affected accounts' events (once as they are, once
per tier as rewritten), ``billing.billable.billable_rows`` keys the result by the price in force,
and ``billing.invoices.build_lines`` makes the month's lines and totals. So ``current_total`` is
what ``invoices draft`` gives the account for the month (when the month's days are metered) and
``projected_total`` what it would give after the rewrite. Nothing is written to the warehouse or
the lake.

An *affected account* is an account with an event of the model on a local day of the month.
"""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Engine

from billing.billable import billable_rows
from billing.invoices import BILLABLE_SCHEMA, build_lines, month_bounds, totals
from billing.plan import AccountIndex, main_pool
from billing.pricing import MissingPriceError, price_in_force, unit_prices
from billing.quota import allocate
from pipelines.adoption.preview_input import AccountZones, plan_rows, read_events
from pipelines.errors import UsageBillingError
from pipelines.invoicing.months import check_month
from pipelines.quota.checks import check_allocation
from pipelines.warehouse.accounts import load_accounts_table
from pipelines.warehouse.binding import require_lake
from pipelines.warehouse.gate import held_back
from schemas import tokens
from schemas.catalog import Catalog
from schemas.events import utc_date
from schemas.lake import AMOUNT

KEEP, ALL = "keep", "all"


def tier_choices(catalog: Catalog) -> tuple[str, ...]:
    """What ``--tier`` accepts: the catalog's tiers (slowest first), ``keep`` and ``all``."""
    return (*catalog.tier_ids, KEEP, ALL)


CHUNK_EVENTS = 400_000  # events allocated at once (an account's events are never split)
ZERO = Decimal("0.00")


@dataclass(frozen=True)
class Request:
    model: str
    successor: str
    month: str
    tiers: tuple[str, ...]  # speed tiers of the successor, or ("keep",)


def resolve(catalog: Catalog, model: str, month: str, successor: str | None, tier: str) -> Request:
    """The checked request (tiers are resolved against prices once the events are known)."""
    month = check_month(month)
    if model not in catalog.model_ids:
        raise UsageBillingError(
            f"model {model!r} is not in the catalog (models: {', '.join(catalog.model_ids)})"
        )
    if successor is None:
        successor = catalog.model(model).successor
        if successor is None:
            raise UsageBillingError(
                f"model {model} has no successor in the catalog; name the model to preview with --successor"
            )
    elif successor not in catalog.model_ids:
        raise UsageBillingError(f"successor {successor!r} is not a model in the catalog")
    choices = tier_choices(catalog)
    if tier not in choices:
        raise UsageBillingError(f"--tier must be one of {', '.join(choices)}, got {tier!r}")
    tiers = catalog.tier_ids if tier == ALL else (tier,)
    return Request(model, successor, month, tuple(tiers) if tier == ALL else (tier,))


def rewrite(events: pa.Table, model: str, successor: str, tier: str) -> pa.Table:
    """The what-if: ``model``'s events become ``successor``'s at ``tier`` (``keep``: their own tier)."""
    moved = pc.equal(events["model"], model)
    out = events.set_column(
        events.schema.get_field_index("model"),
        "model",
        pc.if_else(moved, pa.scalar(successor, pa.string()), events["model"]),
    )
    if tier != KEEP:
        out = out.set_column(
            out.schema.get_field_index("speed_tier"),
            "speed_tier",
            pc.if_else(moved, pa.scalar(tier, pa.string()), out["speed_tier"]),
        )
    return out


@dataclass
class Bill:
    """One scenario metered and billed, for the affected accounts."""

    billable: pa.Table  # BILLABLE_SCHEMA rows of the month
    exhausted: pa.Table  # account_id, local_day: a main pool ran out that local day (in the month)


def _meter(events: pa.Table, catalog: Catalog, first: dt.date, last: dt.date, zones: AccountZones) -> Bill:
    """Allocate like the meter (and check it the same way), key by price like the meter."""
    result = allocate(events, catalog)
    check_allocation(events, result, None)
    day = events["local_day"]
    in_month = pc.and_(
        pc.greater_equal(day, pa.scalar(first, pa.date32())), pc.less_equal(day, pa.scalar(last, pa.date32()))
    )
    rows = billable_rows(events, result.included, result.overage, in_month, catalog)
    pools = result.pools.filter(pc.is_valid(result.pools["exhausted_at"]))
    main = pa.array(
        [f"{p.id}\x1f{pool.id}" for p in catalog.plans if (pool := main_pool(p)) is not None], pa.string()
    )
    pools = pools.filter(
        pc.is_in(pc.binary_join_element_wise(pools["plan"], pools["pool"], "\x1f"), value_set=main)
    )
    when = pa.array(zones.local_days(pools["account_id"], pools["exhausted_at"])).cast(pa.date32())
    exhausted = pa.table({"account_id": pools["account_id"].cast(pa.string()), "local_day": when})
    exhausted = exhausted.filter(
        pc.and_(
            pc.greater_equal(exhausted["local_day"], pa.scalar(first, pa.date32())),
            pc.less_equal(exhausted["local_day"], pa.scalar(last, pa.date32())),
        )
    )
    return Bill(rows, exhausted)


def _month_grain(rows: pa.Table) -> pa.Table:
    """Billable rows of local days -> the grain ``invoices draft`` reads (``billable_by_price``)."""
    keys = ["account_id", "model", "speed_tier", "token_kind", "price_from"]
    g = rows.group_by(keys, use_threads=False).aggregate(
        [("rate_day", "min"), ("rate_day", "max"), ("included_tokens", "sum"), ("overage_tokens", "sum")]
    )
    return pa.table(
        {
            **{k: g[k] for k in keys},
            "rate_day": g["rate_day_min"],
            "last_rate_day": g["rate_day_max"],
            "included_tokens": g["included_tokens_sum"],
            "overage_tokens": g["overage_tokens_sum"],
        }
    ).cast(BILLABLE_SCHEMA)


def _chunks(events: pa.Table) -> list[pa.Table]:
    """The events in chunks of about ``CHUNK_EVENTS``, never splitting an account."""
    if events.num_rows <= CHUNK_EVENTS:
        return [events]
    events = events.sort_by("account_id")
    account = events["account_id"].combine_chunks()
    n = events.num_rows
    change = np.ones(n, bool)
    change[1:] = pc.not_equal(account.slice(1), account.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(change)  # each account's first row
    group = starts // CHUNK_EVENTS
    cuts = [*starts[np.r_[True, group[1:] != group[:-1]]].tolist(), n]
    return [events.slice(a, b - a) for a, b in itertools.pairwise(cuts)]


def _tiers(catalog: Catalog, request: Request, moved_days: list[dt.date], asked: str) -> tuple[str, ...]:
    """The tiers to preview. ``all``: each successor tier with a price on every UTC day the month's
    moved events fall on. A named tier (or ``keep``, each event's own) must have those prices: a gap
    is named as drafting names it."""
    if asked == ALL:
        tiers = tuple(
            t
            for t in catalog.tier_ids
            if all(price_in_force(catalog, request.successor, t, d) for d in moved_days)
        )
        if not tiers:
            raise UsageBillingError(
                f"cannot preview {request.month}: {request.successor} has no speed tier with a price on "
                f"every day {request.model} was used ({moved_days[0]}..{moved_days[-1]})"
            )
        return tiers
    return (asked,)


def _check_prices(catalog: Catalog, request: Request, moved: pa.Table, tier: str) -> None:
    """Every (tier, UTC day) the month's moved events need has a successor price; a gap is named as
    drafting names it (``billing.pricing.unit_prices``)."""
    tiers = moved["speed_tier"] if tier == KEEP else pa.repeat(pa.scalar(tier, pa.string()), moved.num_rows)
    need = (
        pa.table({"tier": tiers, "day": utc_date(moved["event_time"])})
        .group_by(["tier", "day"])
        .aggregate([])
    )
    need = need.sort_by([("day", "ascending"), ("tier", "ascending")])
    try:
        for kind in tokens.ids():
            unit_prices(
                catalog,
                pa.repeat(pa.scalar(request.successor, pa.string()), need.num_rows),
                need["tier"],
                pa.repeat(pa.scalar(kind, pa.string()), need.num_rows),
                need["day"],
            )
    except MissingPriceError as exc:
        raise UsageBillingError(f"cannot preview {request.month}: {exc}") from None


@dataclass
class PreviewResult:
    request: Request
    currency: str
    rows: list[dict]  # one per (tier, affected account), CSV_COLUMNS
    tiers: dict[str, dict]
    model_revenue: dict[str, Decimal]  # per affected account: the model's amounts on its invoice now
    tier_labels: dict[str, str] = field(default_factory=dict)  # what pages print per tier (the catalog)

    def tier_label(self, tier: str) -> str:
        return self.tier_labels.get(tier, tier)

    @property
    def revenue_at_stake(self) -> Decimal:
        """What the month's invoices charge for the model (its overage lines), as billed now."""
        return sum(self.model_revenue.values(), ZERO)

    def to_json(self) -> dict:
        return {
            "model": self.request.model,
            "successor": self.request.successor,
            "month": self.request.month,
            "currency": self.currency,
            "tiers": self.tiers,
            "current_model_revenue": self.revenue_at_stake,
            "accounts": self.rows,
        }


def preview(
    engine: Engine,
    catalog: Catalog,
    lake_root: str,
    model: str,
    month: str,
    successor: str | None = None,
    tier: str = ALL,
) -> PreviewResult:
    """The migration preview of ``model`` in ``month`` (see the module's docstring). Reads only."""
    request = resolve(catalog, model, month, successor, tier)
    require_lake(engine, lake_root, "retirement preview", bind=False)
    accounts = load_accounts_table(engine)
    return compute(catalog, lake_root, accounts, request, tier, frozenset(held_back(engine)))


def compute(
    catalog: Catalog,
    lake_root: str,
    accounts: pa.Table,
    request: Request,
    asked: str,
    held: frozenset[dt.date] = frozenset(),
) -> PreviewResult:
    """``held``: UTC dates the data-quality gate holds back, read as if they were not there (as the
    month's metering reads them)."""
    first, last = month_bounds(request.month)
    index = AccountIndex(accounts)
    events, affected = read_events(lake_root, catalog, index, request.month, request.model, held)
    if events is None or len(affected) == 0:
        raise UsageBillingError(
            f"cannot preview {request.month}: no account used {request.model} on a local day of "
            f"{request.month}"
        )
    day = events["local_day"]
    in_month = pc.and_(
        pc.greater_equal(day, pa.scalar(first, pa.date32())), pc.less_equal(day, pa.scalar(last, pa.date32()))
    )
    moved = events.filter(pc.and_(in_month, pc.equal(events["model"], request.model)))
    moved_days = sorted(utc_date(moved["event_time"]).unique().to_pylist())
    tiers = _tiers(catalog, request, moved_days, asked)
    for t in tiers:
        _check_prices(catalog, request, moved, t)
    request = Request(request.model, request.successor, request.month, tiers)
    zones = AccountZones(accounts)
    chunks = _chunks(events)
    current = [_meter(c, catalog, first, last, zones) for c in chunks]
    projected = {
        t: [
            _meter(rewrite(c, request.model, request.successor, t), catalog, first, last, zones)
            for c in chunks
        ]
        for t in tiers
    }
    plans = plan_rows(accounts, affected, first, last)
    moved_tokens = _per_account(
        pa.table({"account_id": moved["account_id"], "v": tokens.allowance_tokens(moved)})
    )
    now = _bill(current, plans, catalog, request, "current")
    rows: list[dict] = []
    summary: dict[str, dict] = {}
    for t in tiers:
        then = _bill(projected[t], plans, catalog, request, t)
        tier_rows = []
        for account in affected.to_pylist():
            cur, proj = now["total"].get(account, ZERO), then["total"].get(account, ZERO)
            tier_rows.append(
                {
                    "account_id": account,
                    "month": request.month,
                    "tier": t,
                    "current_total": cur,
                    "projected_total": proj,
                    "delta": proj - cur,
                    "currency": catalog.currency,
                    "moved_tokens": moved_tokens.get(account, 0),
                    "current_overage_tokens": now["overage"].get(account, 0),
                    "projected_overage_tokens": then["overage"].get(account, 0),
                    "current_main_pool_exhausted": now["exhausted"].get(account, ""),
                    "projected_main_pool_exhausted": then["exhausted"].get(account, ""),
                }
            )
        summary[t] = _summary(tier_rows)
        rows += tier_rows
    revenue = {a: v for a, v in now["model_revenue"].items()}
    return PreviewResult(request, catalog.currency, rows, summary, revenue, catalog.tier_labels)


def _per_account(t: pa.Table) -> dict:
    if t.num_rows == 0:
        return {}
    g = t.group_by("account_id", use_threads=False).aggregate([("v", "sum")])
    return dict(zip(g["account_id"].to_pylist(), g["v_sum"].to_pylist(), strict=True))


def _bill(bills: list[Bill], plans: pa.Table, catalog: Catalog, request: Request, tier: str) -> dict:
    billable = _month_grain(pa.concat_tables([b.billable for b in bills]))
    try:
        lines = build_lines(billable, plans, catalog, request.month)
    except MissingPriceError as exc:
        on = "as billed now" if tier == "current" else f"on {request.successor} {tier}"
        raise UsageBillingError(f"cannot preview {request.month} {on}: {exc}") from None
    sums = totals(lines)
    mine = lines.filter(pc.fill_null(pc.equal(lines["model"], request.model), False))
    revenue = _per_account(pa.table({"account_id": mine["account_id"], "v": mine["amount"]}))
    exhausted = pa.concat_tables([b.exhausted for b in bills])
    days: dict[str, str] = {}  # account -> its exhausted local days, space-separated
    if exhausted.num_rows:
        g = exhausted.group_by("account_id", use_threads=False).aggregate([("local_day", "distinct")])
        for a, ds in zip(g["account_id"].to_pylist(), g["local_day_distinct"].to_pylist(), strict=True):
            days[a] = " ".join(d.isoformat() for d in sorted(ds))
    overage = _per_account(pa.table({"account_id": billable["account_id"], "v": billable["overage_tokens"]}))
    return {
        "total": dict(
            zip(sums["account_id"].to_pylist(), sums["total"].cast(AMOUNT).to_pylist(), strict=True)
        ),
        "overage": overage,
        "exhausted": days,
        "model_revenue": revenue,
    }


def _summary(rows: list[dict]) -> dict:
    deltas = sorted(r["delta"] for r in rows)
    median = deltas[(len(deltas) - 1) // 2] if deltas else ZERO  # the lower middle for an even count
    return {
        "accounts": len(rows),
        "current_total": sum((r["current_total"] for r in rows), ZERO),
        "projected_total": sum((r["projected_total"] for r in rows), ZERO),
        "delta": sum(deltas, ZERO),
        "accounts_paying_more": sum(1 for d in deltas if d > 0),
        "median_delta": median,
    }
