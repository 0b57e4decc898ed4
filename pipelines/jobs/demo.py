"""``usage-billing demo``: the whole pipeline on generated data, with the embedded defaults.

Generates the scenario (2026-02-01 .. 2026-09-30 by default, about 2M events), loads the accounts,
ingests every landing date in one pipeline run, aggregates, and prints a summary.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import time
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy import Engine, func, select, text

from pipelines import lake
from pipelines.errors import UsageBillingError
from pipelines.ingest import events as ingest
from pipelines.invoicing import documents as invoicing
from pipelines.jobs.generate import GeneratorConfig, generate
from pipelines.jobs.landing import write_landing
from pipelines.jobs.run_day import aggregate_step, gate_step, ingest_step, meter_runs
from pipelines.settings import Settings
from pipelines.warehouse.accounts import load_accounts
from pipelines.warehouse.engine import make_engine, upgrade
from schemas.warehouse import BillableUsage, ModelDaily, PoolUsage, UsageDaily

MARKER = ".usage-billing-demo"
START = dt.date(2026, 2, 1)


def _reset(folder: str) -> None:
    """Empty a demo folder; refuse to touch one that holds data the demo did not make."""
    if not lake.is_local(folder):
        raise UsageBillingError(f"the demo runs on local folders only, not {folder}")
    if os.path.isdir(folder) and os.listdir(folder) and not os.path.exists(os.path.join(folder, MARKER)):
        raise UsageBillingError(
            f"{folder} holds data the demo did not create; point --lake/--landing elsewhere"
        )
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    open(os.path.join(folder, MARKER), "w").close()


def tokens_by_model_month(engine: Engine) -> dict[str, dict[str, int]]:
    """model -> month (YYYY-MM) -> input + output tokens, from usage_daily."""
    t = UsageDaily.__table__
    stmt = select(t.c.model, t.c.day, func.sum(t.c.input_tokens + t.c.output_tokens)).group_by(
        t.c.model, t.c.day
    )
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


def run_demo(
    settings: Settings,
    *,
    days: int,
    accounts: int,
    events_per_day: int,
    seed: int,
    beam_args: list[str],
    out: Console,
    err: Console,
) -> None:
    began = time.perf_counter()
    catalog = settings.catalog
    cfg = GeneratorConfig(start=START, days=days, accounts=accounts, events_per_day=events_per_day, seed=seed)
    dates = [cfg.start + dt.timedelta(days=i) for i in range(days)]
    engine = make_engine(settings.database_url)
    steps = [
        "warehouse schema",
        "generate events",
        "load accounts",
        "ingest",
        "data quality",
        "aggregate usage",
        "meter quota pools",
        "invoices",
    ]
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )
    with progress:
        overall = progress.add_task("demo", total=len(steps))

        timings: dict[str, float] = {}
        clock = {"name": "", "since": time.perf_counter()}

        def step(name: str) -> None:
            now = time.perf_counter()
            if clock["name"]:
                timings[clock["name"]] = now - clock["since"]
            clock.update(name=name.split(" (")[0], since=now)
            progress.update(overall, description=f"demo: {name}")

        step(steps[0])
        upgrade(engine)
        progress.advance(overall)
        step(steps[1])
        _reset(settings.landing)
        _reset(settings.lake)
        gen = generate(catalog, cfg)
        write_landing(gen, cfg, settings.landing)
        progress.advance(overall)
        step(steps[2])
        load_accounts(engine, Path(settings.landing) / "accounts.csv", catalog)
        progress.advance(overall)
        step(f"{steps[3]} ({days} landing days, {gen.events.num_rows:,} rows)")
        result, _, _ = ingest_step(settings, dates, beam_args)
        progress.advance(overall)
        step(steps[4])
        reports = gate_step(settings, dates, result.run_id)
        progress.advance(overall)
        step(steps[5])
        aggregate_step(settings, dates, beam_args)
        progress.advance(overall)
        step(steps[6])
        # One local day on each side, so that events of the UTC range on accounts' local Jan 31 and
        # Oct 1 are metered too (the reconciliation then accounts for every token).
        local = [dates[0] - dt.timedelta(days=1), *dates, dates[-1] + dt.timedelta(days=1)]
        meter_runs(settings, local, beam_args)
        progress.advance(overall)
        step(steps[7])
        months = sorted({d.strftime("%Y-%m") for d in dates})
        open_months: list[str] = []
        for month in months:  # the last month is still open (its grace days have not landed): drafts only
            if invoicing.draft(engine, catalog, month, open_month=True).open_month:
                open_months.append(month)
            else:
                invoicing.finalize(engine, catalog, month)
        progress.advance(overall)
        step("done")
    _summary(out, result, tokens_by_model_month(engine), time.perf_counter() - began)
    out.print(
        "time per step: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in timings.items()),
        soft_wrap=True,  # one line, for benchmarks.demo to read
    )
    _speed(out, speed_by_model_tier(engine))
    _quota(out, engine)
    _backup_tank(out, engine, settings)
    _why_charged(out, engine, settings)
    _invoices(out, engine, months, catalog.currency)
    for month in open_months:
        out.print(
            f"{month} is still open (the landing days of its grace for late data are not ingested): "
            "drafted as open-month drafts, which are never finalized",
            soft_wrap=True,
        )
    failed = [r for r in reports if r.failed_errors]
    out.print(
        f"data quality: {len(reports)} partitions checked, {len(failed)} failed"
        + (f" ({', '.join(str(r.day) for r in failed[:5])})" if failed else "")
        + f"; reports under {lake.join(settings.lake, 'dq')}"
    )
    engine.dispose()


def _invoices(out: Console, engine: Engine, months: list[str], currency: str) -> None:
    """Finalized revenue per month by speed tier (from the finance views) and the reconciliation."""
    with engine.connect() as conn:
        revenue = conn.execute(
            text(
                "SELECT month, speed_tier, sum(revenue) FROM finance_revenue_by_model_tier "
                "GROUP BY month, speed_tier"
            )
        ).all()
        docs = dict(
            conn.execute(
                text(
                    "SELECT period, count(*) FROM finance_invoice_summary "
                    "WHERE status = 'finalized' GROUP BY 1"
                )
            ).all()
        )
        fees = dict(
            conn.execute(
                text(
                    "SELECT period, sum(plan_fee_amount) FROM finance_invoice_summary "
                    "WHERE NOT open_month GROUP BY 1"  # an open month's drafts are not invoices yet
                )
            ).all()
        )
        recon = {r.month: r for r in conn.execute(text("SELECT * FROM finance_reconciliation"))}
    by = defaultdict(dict)
    for month, tier, amount in revenue:
        by[month][tier] = Decimal(str(amount))
    table = Table(
        title=f"Finalized invoices ({currency}): usage revenue by tier; off = tokens not reconciled",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for col in (
        "month",
        "invoices",
        "plan fees",
        "standard",
        "priority",
        "ultrafast",
        "uf share",
        "off",
    ):
        table.add_column(col, justify="left" if col == "month" else "right", no_wrap=True)
    for month in months:
        tiers = by.get(month, {})
        usage = sum(tiers.values(), Decimal(0))
        fast = tiers.get("ultrafast", Decimal(0))
        r = recon.get(month)
        off = (r.unmetered_tokens + r.uninvoiced_tokens) if r is not None else 0
        table.add_row(
            month,
            f"{docs.get(month, 0):,}",
            f"{Decimal(str(fees.get(month) or 0)):,.0f}",
            *(f"{tiers.get(t, Decimal(0)):,.0f}" for t in ("standard", "priority", "ultrafast")),
            f"{fast / usage:.1%}" if usage else "-",
            f"{off:,}",
        )
    out.print(table)


def _quota(out: Console, engine: Engine) -> None:
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


def _backup_tank(out: Console, engine: Engine, settings: Settings) -> None:
    """For each model with its own pool: share of its weekly use while the main pool was exhausted."""

    from billing.plan import own_pool_models
    from pipelines.quota.show import backup_tank

    for model in own_pool_models(settings.catalog):
        weekly = backup_tank(engine, settings.lake, settings.catalog, model)
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


def _why_charged(out: Console, engine: Engine, settings: Settings) -> None:
    """The last event that ran a model's own pool dry, explained as support sees it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from pipelines.quota.explain import explain_event, render
    from pipelines.quota.show import as_utc
    from schemas.events import LAKE_SCHEMA

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


def _speed(out: Console, rows: list[dict]) -> None:
    table = Table(
        title="Output speed (tokens/s) by model and speed tier", box=box.SIMPLE_HEAD, pad_edge=False
    )
    for col in ("model", "tier", "requests", "overall", "median 7d", "p95 7d"):
        table.add_column(col, justify="left" if col in ("model", "tier") else "right", no_wrap=True)
    for r in rows:
        table.add_row(
            r["model"],
            r["tier"],
            f"{r['requests']:,}",
            *(f"{r[k]:,.0f}" if r[k] is not None else "-" for k in ("tps", "median", "p95")),
        )
    out.print(table)


def _summary(
    out: Console, result: ingest.IngestResult, tokens: dict[str, dict[str, int]], seconds: float
) -> None:
    counts = Table(title="Ingest", box=box.SIMPLE_HEAD)
    for col in ("rows read", "ingested", "quarantined", "duplicates"):
        counts.add_column(col, justify="right")
    counts.add_row(*(f"{result.total(k):,}" for k in ("rows_read", "clean", "quarantined", "duplicates")))
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
    out.print(f"demo finished in {seconds:.0f} s; warehouse and lake as configured (see --help)")
