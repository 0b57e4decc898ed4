"""What the demo prints at its end: ingest counts, tokens per model and month, output speed, quota,
the backup tank, one charge explained, the invoices by speed tier, the reconciliation's gaps and the
fast model's effectiveness against its successor."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
from rich import box
from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine, func, literal_column, select, text

from billing.effectiveness import ALL_CLASSES
from billing.plan import own_pool_models
from pipelines import lake
from pipelines.effectiveness.figures import ALL_TIERS, duration, sentence
from pipelines.effectiveness.report import EffectivenessView
from pipelines.ingest import events as ingest
from pipelines.jobs.demo_credits import DemoCredits
from pipelines.quota.explain import explain_event, render
from pipelines.quota.show import as_utc
from pipelines.quota.show import backup_tank as weekly_backup_tank
from pipelines.settings import Settings
from schemas.catalog import Catalog
from schemas.events import LAKE_SCHEMA
from schemas.tokens import allowance_sql
from schemas.warehouse import BillableUsage, ModelDaily, PoolUsage, UsageDaily


def tokens_by_model_month(engine: Engine) -> dict[str, dict[str, int]]:
    """model -> month (YYYY-MM) -> the tokens allowances count, from usage_daily."""
    t = UsageDaily.__table__
    stmt = select(t.c.model, t.c.day, func.sum(literal_column(allowance_sql()))).group_by(t.c.model, t.c.day)
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    with engine.connect() as conn:
        for model, day, tokens in conn.execute(stmt):
            out[model][f"{day:%Y-%m}"] += int(tokens)
    return out


def speed_by_model_tier(engine: Engine) -> list[dict]:
    """Per model and tier: requests, overall output tokens/s, and the last 7 days' median and p95."""
    u, m = UsageDaily.__table__, ModelDaily.__table__
    overall = select(
        u.c.model,
        u.c.speed_tier,
        func.sum(u.c.requests),
        func.sum(u.c.timed_output_tokens),
        func.sum(u.c.output_ms),
    ).group_by(u.c.model, u.c.speed_tier)
    with engine.connect() as conn:
        last = conn.execute(select(func.max(m.c.day))).scalar_one()
        if last is None:
            return []
        recent = conn.execute(
            select(m.c.model, m.c.speed_tier, m.c.requests, m.c.median_output_tps, m.c.p95_output_tps).where(
                m.c.day > last - dt.timedelta(days=7)
            )
        ).all()
        rows = conn.execute(overall).all()
    weighted: dict[tuple[str, str], list[tuple[int, float, float]]] = defaultdict(list)
    for model, tier, n, med, p95 in recent:
        if med is not None:
            weighted[(model, tier)].append((n, med, p95))
    out = []
    for model, tier, requests, tokens, ms in sorted(rows):
        w = weighted.get((model, tier), [])
        total = sum(n for n, _, _ in w)
        out.append(
            {
                "model": model,
                "tier": tier,
                "requests": int(requests),
                "tps": (tokens / (ms / 1000)) if ms else None,
                "median": sum(n * med for n, med, _ in w) / total if total else None,
                "p95": sum(n * p for n, _, p in w) / total if total else None,
            }
        )
    return out


def invoices(out: Console, engine: Engine, months: list[str], catalog: Catalog) -> None:
    """Finalized revenue per month by speed tier (from the finance views) and the reconciliation."""
    with engine.connect() as conn:
        revenue = conn.execute(
            text(
                "SELECT month, speed_tier, sum(revenue) FROM finance_revenue_by_model_tier "
                "GROUP BY month, speed_tier"
            )
        ).all()
        docs: dict[str, int] = dict(
            conn.execute(
                text(
                    "SELECT period, count(*) FROM finance_invoice_summary "
                    "WHERE status = 'finalized' GROUP BY 1"
                )
            ).all()
        )
        fees: dict[str, object] = dict(
            conn.execute(
                text(
                    "SELECT period, sum(plan_fee_amount) FROM finance_invoice_summary "
                    "WHERE NOT open_month GROUP BY 1"  # an open month's drafts are not invoices yet
                )
            ).all()
        )
        gaps = conn.execute(
            text(
                "SELECT month, step, tokens, close_with FROM finance_reconciliation_gaps ORDER BY month, step"
            )
        ).all()
    by: defaultdict[str, dict[str, Decimal]] = defaultdict(dict)
    for month, tier, amount in revenue:
        by[month][tier] = Decimal(str(amount))
    currency = catalog.currency
    table = Table(
        title=f"Finalized invoices ({currency}): usage revenue by speed tier; gap: tokens not on a document",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,  # 76 columns: fits a terminal of 80
    )
    fastest = catalog.tier_ids[-1]
    for col in (
        "month",
        "invoices",
        "plan fees",
        *(catalog.tier_label(t) for t in catalog.tier_ids),
        f"{catalog.tier_label(fastest)} %",
        "gap",
    ):
        table.add_column(col, justify="left" if col == "month" else "right", no_wrap=True)
    for month in months:
        tiers = by.get(month, {})
        usage = sum(tiers.values(), Decimal(0))
        fast = tiers.get(fastest, Decimal(0))
        off = sum(int(g.tokens) for g in gaps if g.month == month)
        table.add_row(
            month,
            f"{docs.get(month, 0):,}",
            f"{Decimal(str(fees.get(month) or 0)):,.0f}",
            *(f"{tiers.get(t, Decimal(0)):,.0f}" for t in catalog.tier_ids),
            f"{fast / usage:.1%}" if usage else "-",
            f"{off:,}",
        )
    out.print(table)
    shown = set(months)
    for g in gaps:
        where = "" if g.month in shown else " (a partial month at the edge of the demo's range)"
        out.print(
            f"reconciliation gap: {g.month}{where}, step {g.step}: {int(g.tokens):,} tokens; {g.close_with}"
        )


def quota(out: Console, engine: Engine) -> None:
    b, p = BillableUsage.__table__, PoolUsage.__table__
    with engine.connect() as conn:
        inc, over = conn.execute(select(func.sum(b.c.included_tokens), func.sum(b.c.overage_tokens))).one()
        balances = conn.execute(select(func.count()).select_from(p)).scalar_one()
        exhausted = conn.execute(
            select(p.c.pool, func.count(), func.count(p.c.exhausted_at)).group_by(p.c.pool)
        ).all()
    inc, over = int(inc or 0), int(over or 0)
    share = inc / (inc + over) if inc + over else 0
    out.print(
        f"quota: {balances:,} pool balances, {inc / 1e9:,.1f}B tokens included ({share:.0%}), "
        f"{over / 1e9:,.1f}B overage; exhausted: "
        + ", ".join(f"{pool} {n_ex:,} of {n:,}" for pool, n, n_ex in sorted(exhausted))
    )


def backup_tank(out: Console, engine: Engine, settings: Settings) -> None:
    """For each model with its own pool: share of its weekly use while the main pool was exhausted."""
    for model in own_pool_models(settings.catalog):
        weekly = weekly_backup_tank(engine, settings.lake, settings.catalog, model)
        table = Table(
            title=f"{model}: use while the main pool was exhausted (backup tank)",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
        )
        for col in ("week", "accounts", "of them backup", "token share backup"):
            table.add_column(col, justify="left" if col == "week" else "right", no_wrap=True)
        for r in weekly.to_pylist()[::4] + weekly.to_pylist()[-1:]:
            share = r["backup_tokens"] / r["tokens"] if r["tokens"] else 0
            table.add_row(
                str(r["week_start"]), f"{r['accounts']:,}", f"{r['backup_accounts']:,}", f"{share:.0%}"
            )
        out.print(table)


def why_charged(out: Console, engine: Engine, settings: Settings) -> None:
    """The last event that ran a model's own pool dry, explained as support sees it."""
    own = sorted(
        {pool.id for plan in settings.catalog.plans for pool in plan.pools if "*" not in pool.models}
    )
    p = PoolUsage.__table__
    with engine.connect() as conn:
        row = conn.execute(
            select(p.c.account_id, p.c.exhausted_at)
            .where(p.c.pool.in_(own), p.c.exhausted_at.is_not(None))
            .order_by(p.c.exhausted_at.desc())
            .limit(1)
        ).first()
    if row is None:
        return
    when = as_utc(row.exhausted_at)
    assert when is not None
    events = lake.scan(
        lake.list_files(lake.partition(settings.lake, lake.EVENTS, when.date())),
        ["event_id"],
        (pc.field("account_id") == row.account_id) & (pc.field("event_time") == pa.scalar(when)),
        LAKE_SCHEMA,
    )
    if not events.num_rows:
        return
    event_id = events["event_id"][0].as_py()
    out.print(f"why was this charged? `usage-billing quota explain --event-id {event_id}`:", soft_wrap=True)
    charge = explain_event(engine, settings.lake, settings.catalog, event_id, when.date())
    for line in render(charge):
        out.print(line, markup=False, highlight=False, soft_wrap=True)


def speed(out: Console, rows: list[dict], catalog: Catalog) -> None:
    table = Table(
        title="Output speed (tokens/s) by model and speed tier", box=box.SIMPLE_HEAD, pad_edge=False
    )
    for col in ("model", "tier", "requests", "overall", "median 7d", "p95 7d"):
        table.add_column(col, justify="left" if col in ("model", "tier") else "right", no_wrap=True)
    for r in rows:
        table.add_row(
            r["model"],
            catalog.tier_label(r["tier"]),
            f"{r['requests']:,}",
            *(f"{r[k]:,.0f}" if r[k] is not None else "-" for k in ("tps", "median", "p95")),
        )
    out.print(table)


def ingest_and_tokens(out: Console, result: ingest.IngestResult, tokens: dict[str, dict[str, int]]) -> None:
    counts = Table(title="Ingest", box=box.SIMPLE_HEAD)
    counts.add_column("rows")
    for col in ("read", "ingested", "quarantined", "duplicates"):
        counts.add_column(col, justify="right")
    keys = ("rows_read", "clean", "quarantined", "duplicates")
    counts.add_row("usage events", *(f"{result.total(k):,}" for k in keys))
    if result.outcome_stats:
        counts.add_row("task outcomes", *(f"{result.total(k, outcomes=True):,}" for k in keys))
    out.print(counts)
    months = sorted({m for per in tokens.values() for m in per})
    title = "Tokens (input + output) per model per month, millions"
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("model", no_wrap=True)
    for m in months:
        table.add_column(dt.date.fromisoformat(f"{m}-01").strftime("%b\n%Y"), justify="right", no_wrap=True)
    for model in sorted(tokens):
        table.add_row(
            model, *(f"{tokens[model][m] / 1e6:.0f}" if tokens[model].get(m) else "-" for m in months)
        )
    out.print(table)


def head_to_head(out: Console, view: EffectivenessView, model: str) -> None:
    """The effectiveness of ``model`` against its catalog successor per task class (both over all
    their tiers), and the sentence for multi-file work against the successor's best tier."""
    items = [i for i in view.head_to_head if i["model"] == model]
    if not items:
        out.print(f"effectiveness: {model} and its successor have no tasks in the same weeks")
        return
    successor = items[0]["successor"]
    overall = {(g["model"], g["task_class"]): g for g in view.overall if g["speed_tier"] == ALL_TIERS}
    cur = view.currency
    weeks = view.weeks
    window = f"{weeks[0]} .. {weeks[-1] + dt.timedelta(days=6)}"  # the report's complete weeks
    title = (
        f"Effectiveness, {window}: A = {model} (all its tiers), B = {successor} (all its tiers together; "
        f"the report lists each tier); end to end incl. rework; cost: {cur} per accepted task incl. rework"
    )
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("task class", no_wrap=True)
    for col in ("1-pass A", "1-pass B", "e2e A", "e2e B", "cost A", "cost B"):
        table.add_column(col, justify="right", no_wrap=True)

    def money(v) -> str:
        return "-" if v is None else f"{v:,.2f}"

    for item in items:
        a, b = item["model_row"], overall.get((successor, item["task_class"]))
        if b is None:
            continue
        table.add_row(
            "all classes" if item["task_class"] == ALL_CLASSES else item["task_class"],
            f"{a['one_pass_rate']:.0%}",
            f"{b['one_pass_rate']:.0%}",
            duration(a["e2e_ms_mean"]),
            duration(b["e2e_ms_mean"]),
            money(a["cost_per_accepted_task"]),
            money(b["cost_per_accepted_task"]),
        )
    out.print(table)
    multi = next((i for i in items if i["task_class"] == "multi_file"), items[0])
    out.print(f"{window}, against {successor}'s cheapest tier per accepted task: {sentence(multi, cur)}")


def credits(out: Console, engine: Engine, story: DemoCredits, catalog: Catalog, fast_model: str) -> None:
    """What the demo's credits did: the starting grants and the fast model's transition credits, what
    finalized documents applied of each kind, and what remains."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT CASE WHEN grant_id LIKE 'transition-%' THEN 'transition' ELSE kind END, count(*), "
                "sum(amount), sum(applied), count(DISTINCT account_id) FROM finance_credit_grants GROUP BY 1"
            )
        ).all()
    cur = catalog.currency
    by = {r[0]: r for r in rows}
    parts = []
    for key, name in (("paid", "prepaid"), ("promotional", "promotional"), ("transition", "transition")):
        if key in by:
            _, n, amount, applied, accounts = by[key]
            parts.append(
                f"{name} {n:,} ({accounts:,} accounts, {cur} {Decimal(str(amount)):,.2f}, "
                f"applied {cur} {Decimal(str(applied)):,.2f})"
            )
    out.print("credits: " + ("; ".join(parts) if parts else "none"))
    if story.transition_month:
        out.print(
            f"transition credits: {story.transition:,} of {fast_model}'s accounts would pay more on its "
            "successor; "
            f"{cur} {story.transition_total:,.2f} of promotional credits from {story.transition_month} make "
            "the move free for them (their documents show them under Credits applied)"
        )
    elif story.why_none:
        out.print(f"no transition credits: {story.why_none}")
