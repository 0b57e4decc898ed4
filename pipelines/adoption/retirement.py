"""Retirement report: which models are losing adoption, what that means, what to do about it.

    usage-billing retirement report --as-of 2026-09-07 --out reports/2026-09-07

Refreshes the weekly adoption tables (``pipelines.adoption.weekly``), runs the detector
(``pipelines.adoption.detect``) for this week and the week before (a model is a candidate only when both say
so), stores one ``retirement_candidates`` row per model, and writes ``report.html`` (self-contained,
charts as inline SVG), ``report.json`` and ``report.md`` for product teams.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Engine, delete, func, insert, select

from billing.invoices import PRICE_KEY
from billing.plan import own_pool_models
from billing.pricing import MissingPriceError, amounts, applied_prices
from pipelines.adoption import weekly as adoption
from pipelines.adoption.detect import METHOD_VERSION, Decision, decide, projected_crossing
from pipelines.adoption.html import render_html, render_markdown
from pipelines.effectiveness.report import against_successor
from pipelines.errors import UsageBillingError
from pipelines.invoicing.documents import billable_by_price
from pipelines.warehouse.locks import step_lock
from schemas.catalog import Catalog
from schemas.warehouse import RetirementCandidate, UsageDaily


@dataclass
class ModelReport:
    model: str
    decision: Decision
    previous: Decision | None
    flagged: bool
    weeks: list[str]
    accounts: list[int]
    share: list[float]
    usable: list[bool]
    facts: dict = field(default_factory=dict)


def _series(weekly: pa.Table, weeks: list[dt.date], model: str, metric: str) -> np.ndarray:
    rows = weekly.filter(
        pc.and_(pc.equal(weekly["model"], model), pc.equal(weekly["speed_tier"], adoption.ALL_TIERS))
    )
    values = dict(zip(rows["week_start"].to_pylist(), rows[metric].to_pylist(), strict=True))
    return np.array([values.get(w, 0) for w in weeks], dtype=float)


def usable_series(weekly: pa.Table, weeks: list[dt.date], models: list[str], n_weeks: int) -> dict:
    """model -> metric -> (week numbers, values) over the last ``n_weeks`` weeks, minus failed weeks."""
    window = weeks[-n_weeks:]
    failed = set(weekly.filter(weekly["dq_failed"])["week_start"].to_pylist())
    keep = np.array([w not in failed for w in window])
    index = np.arange(len(window))[keep]
    out = {}
    for model in models:
        out[model] = {
            metric: (index, _series(weekly, window, model, metric)[keep])
            for metric in ("active_accounts", "token_share")
        }
    return out


def analyse(
    weekly: pa.Table, weeks: list[dt.date], catalog: Catalog
) -> tuple[dict[str, Decision], dict[str, Decision]]:
    """Detector results for the last complete week and for the week before (the previous run)."""
    cfg = catalog.adoption
    retired = {m.id for m in catalog.models if m.retires is not None and m.retires <= weeks[-1]}
    models = sorted(set(weekly["model"].to_pylist()) - retired)  # already retired: nothing to decide
    now = decide(usable_series(weekly, weeks, models, cfg.weeks), cfg)
    before = decide(usable_series(weekly, weeks[:-1], models, cfg.weeks), cfg) if len(weeks) > 1 else {}
    return now, before


def _point(weekly: pa.Table, model: str, week: dt.date | None) -> dict:
    keys = ("active_accounts", "requests", "tokens", "token_share", "heavy_accounts")
    if week is None:
        return dict.fromkeys(keys)
    rows = weekly.filter(
        pc.and_(
            pc.and_(pc.equal(weekly["model"], model), pc.equal(weekly["speed_tier"], adoption.ALL_TIERS)),
            pc.equal(weekly["week_start"], pa.scalar(week, pa.date32())),
        )
    ).to_pylist()
    row = rows[0] if rows else {}
    return {"week_start": week.isoformat(), **{k: row.get(k, 0) for k in keys}}


def _affected(engine: Engine, catalog: Catalog, model: str, as_of: dt.date, heavy_min_days: int) -> dict:
    """Accounts active on the model in the last 30 days, its heavy users by id, their 30-day revenue."""
    first = as_of - dt.timedelta(days=29)
    u = UsageDaily.__table__.c
    with engine.connect() as conn:
        days = conn.execute(
            select(u.account_id, func.count(func.distinct(u.day)), func.sum(u.requests))
            .where(u.model == model, u.day.between(first, as_of), u.requests > 0)
            .group_by(u.account_id)
        ).all()
        rows = billable_by_price(conn, first, as_of, model)
    rows = rows.filter(pc.greater(rows["overage_tokens"], 0))
    revenue: dict[str, Decimal] = {}
    if rows.num_rows:
        try:
            price = applied_prices(catalog, *(rows[c] for c in PRICE_KEY))
            for account, amount in zip(
                rows["account_id"].to_pylist(),
                amounts(rows["overage_tokens"], price).to_pylist(),
                strict=True,
            ):
                revenue[account] = revenue.get(account, Decimal(0)) + amount
        except MissingPriceError:
            revenue = {}
    heavy_days = 3 * heavy_min_days  # about heavy_min_days a week over the month
    heavy = sorted(
        (
            {
                "account_id": a,
                "active_days": n,
                "requests": int(r),
                "overage_revenue_30d": str(revenue.get(a, Decimal(0))),
            }
            for a, n, r in days
            if n >= heavy_days
        ),
        key=lambda h: (-h["active_days"], -h["requests"], h["account_id"]),
    )
    return {
        "active_accounts_30d": len(days),
        "heavy_accounts": heavy,
        "overage_revenue_30d": str(sum(revenue.values(), Decimal(0))),
        "heavy_overage_revenue_30d": str(sum((Decimal(h["overage_revenue_30d"]) for h in heavy), Decimal(0))),
    }


def _successor(catalog: Catalog, model: str, moves: pa.Table) -> dict:
    mine = moves.filter(pc.equal(moves["from_model"], model))
    totals = (
        mine.group_by("to_model")
        .aggregate([("accounts", "sum"), ("tokens", "sum")])
        .sort_by([("accounts_sum", "descending"), ("to_model", "ascending")])
    )
    matrix = [
        {"to_model": t, "accounts": a, "tokens": k}
        for t, a, k in zip(
            totals["to_model"].to_pylist(),
            totals["accounts_sum"].to_pylist(),
            totals["tokens_sum"].to_pylist(),
            strict=True,
        )
    ]
    named = catalog.model(model).successor if model in catalog.model_ids else None
    observed = next((m["to_model"] for m in matrix if m["to_model"] != adoption.NONE), None)
    return {
        "successor": named or observed,
        "source": "catalog" if named else ("migration matrix" if observed else None),
        "migration": matrix,
    }


def _timeline(as_of: dt.date, catalog: Catalog, facts: dict) -> list[dict]:
    announce = as_of + dt.timedelta(days=(7 - as_of.weekday()) % 7 or 7)  # next Monday
    retire = announce + dt.timedelta(days=catalog.adoption.notice_days)
    heavy = len(facts["affected"]["heavy_accounts"])
    steps = [
        {
            "date": announce.isoformat(),
            "step": "announce the retirement and the successor to all affected accounts",
        },
        {
            "date": (announce + dt.timedelta(days=14)).isoformat(),
            "step": f"contact the {heavy} heavy accounts one by one; offer migration help",
        },
        {
            "date": (retire - dt.timedelta(days=30)).isoformat(),
            "step": "final reminder; stop new sign-ups on the model",
        },
        {"date": retire.isoformat(), "step": "retire the model (requests answer with the successor's name)"},
    ]
    return steps


def _backup(
    engine: Engine, lake_root: str | None, catalog: Catalog, model: str, as_of: dt.date
) -> dict | None:
    if lake_root is None or model not in own_pool_models(catalog):
        return None
    from pipelines.quota.show import backup_tank

    weekly = backup_tank(engine, lake_root, catalog, model, since=as_of - dt.timedelta(days=28))
    tokens = pc.sum(weekly["tokens"]).as_py() or 0
    backup = pc.sum(weekly["backup_tokens"]).as_py() or 0
    return {"weeks": weekly.num_rows, "token_share": backup / tokens if tokens else 0.0}


def build(engine: Engine, catalog: Catalog, as_of: dt.date, lake_root: str | None = None) -> dict:
    cfg = catalog.adoption
    weekly, moves, weeks = adoption.refresh(engine, cfg, as_of, cfg.weeks + 1)
    if len(weeks) < cfg.min_weeks:
        raise UsageBillingError(
            f"only {len(weeks)} complete weeks of usage up to {as_of}; "
            f"the detector needs at least {cfg.min_weeks}"
        )
    now, before = analyse(weekly, weeks, catalog)
    window = weeks[-cfg.weeks :]
    failed = set(weekly.filter(weekly["dq_failed"])["week_start"].to_pylist())
    models: list[ModelReport] = []
    for model, decision in sorted(now.items()):
        prev = before.get(model)
        report = ModelReport(
            model=model,
            decision=decision,
            previous=prev,
            flagged=decision.detected and prev is not None and prev.detected,
            weeks=[w.isoformat() for w in window],
            accounts=[int(v) for v in _series(weekly, window, model, "active_accounts")],
            share=[float(v) for v in _series(weekly, window, model, "token_share")],
            usable=[w not in failed for w in window],
        )
        if report.flagged:
            report.facts = _facts(engine, catalog, weekly, moves, window, report, as_of, lake_root)
        models.append(report)
    return {
        "as_of": as_of.isoformat(),
        "method_version": METHOD_VERSION,
        "weeks": [w.isoformat() for w in window],
        "dq_failed_weeks": sorted(w.isoformat() for w in failed if w in window),
        "thresholds": cfg.model_dump(),
        "models": models,
        "lifecycle": _lifecycle_rows(weekly, window),
    }


def _lifecycle_rows(weekly: pa.Table, window: list[dt.date]) -> dict:
    rows = weekly.filter(pc.equal(weekly["speed_tier"], adoption.ALL_TIERS))
    out: dict[str, list[dict]] = {}
    for r in rows.to_pylist():
        if r["week_start"] in window:
            out.setdefault(r["model"], []).append(
                {
                    k: (v.isoformat() if isinstance(v, dt.date) else v)
                    for k, v in r.items()
                    if k not in ("model", "speed_tier")
                }
            )
    return out


def _facts(engine, catalog, weekly, moves, window, report: ModelReport, as_of, lake_root) -> dict:  # type: ignore[no-untyped-def]
    model = report.model
    accounts = np.array(report.accounts, dtype=float)
    peak_week = window[int(np.argmax(accounts))] if len(accounts) else None
    back8 = window[-9] if len(window) >= 9 else window[0]
    t = report.decision.trends["active_accounts"]
    low, high = t.weekly_change_interval
    last_week = window[-1]
    crossing = projected_crossing(
        t, len(window) - 1, accounts[-1], catalog.adoption.floor_accounts, len(window)
    )
    projection = None
    if crossing is not None:
        end = last_week + dt.timedelta(days=6)
        projection = {
            "floor_accounts": catalog.adoption.floor_accounts,
            "earliest": (end + dt.timedelta(weeks=crossing[0])).isoformat(),
            "latest": (end + dt.timedelta(weeks=crossing[1])).isoformat(),
        }
    facts = {
        "current": _point(weekly, model, last_week),
        "peak": _point(weekly, model, peak_week),
        "eight_weeks_ago": _point(weekly, model, back8),
        "decline_per_week": t.weekly_change,
        "decline_interval_90": [low, high],
        "accounts_q": report.decision.q_values["active_accounts"],
        "share_q": report.decision.q_values["token_share"],
        "projection": projection,
        "trend": {"intercept": t.intercept, "slope": t.slope},
        **_successor(catalog, model, moves),
        "affected": _affected(engine, catalog, model, as_of, catalog.adoption.heavy_min_days),
        "backup_tank": _backup(engine, lake_root, catalog, model, as_of),
    }
    facts["timeline"] = _timeline(as_of, catalog, facts)
    facts["effectiveness"] = against_successor(lake_root, catalog, model, facts.get("successor"), window)
    return facts


def store(engine: Engine, report: dict) -> None:
    as_of = dt.date.fromisoformat(report["as_of"])
    t = RetirementCandidate.__table__
    rows = []
    for m in report["models"]:
        d: Decision = m.decision
        a, s = d.trends.get("active_accounts"), d.trends.get("token_share")
        rows.append(
            {
                "as_of": as_of,
                "model": m.model,
                "method_version": METHOD_VERSION,
                "last_week": dt.date.fromisoformat(report["weeks"][-1]),
                "weeks_used": d.weeks_used,
                "detected": d.detected,
                "flagged": m.flagged,
                "accounts_weekly_change": a.weekly_change if a else None,
                "accounts_change_low": a.weekly_change_interval[0] if a else None,
                "accounts_change_high": a.weekly_change_interval[1] if a else None,
                "accounts_q": d.q_values.get("active_accounts"),
                "share_weekly_change": s.weekly_change if s else None,
                "share_q": d.q_values.get("token_share"),
                "successor": m.facts.get("successor"),
                "reason": d.reason[:1000],
                "details": json.loads(json.dumps(m.facts, default=str)),
            }
        )
    with engine.begin() as conn:
        conn.execute(delete(t).where(t.c.as_of == as_of))
        if rows:
            conn.execute(insert(t), rows)


def to_json(report: dict) -> dict:
    def model(m: ModelReport) -> dict:
        d = m.decision
        return {
            "model": m.model,
            "flagged": m.flagged,
            "detected": d.detected,
            "detected_previous_week": bool(m.previous and m.previous.detected),
            "reason": d.reason,
            "weeks_used": d.weeks_used,
            "weekly_active_accounts": dict(zip(m.weeks, m.accounts, strict=True)),
            "token_share": dict(zip(m.weeks, m.share, strict=True)),
            "trends": {
                k: {
                    "p": t.p_value,
                    "q": d.q_values[k],
                    "weekly_change": t.weekly_change,
                    "interval_90": list(t.weekly_change_interval),
                }
                for k, t in d.trends.items()
            },
            **({"candidate": m.facts} if m.flagged else {}),
        }

    return {
        **{k: v for k, v in report.items() if k != "models"},
        "models": [model(m) for m in report["models"]],
    }


def run(
    engine: Engine, catalog: Catalog, as_of: dt.date, out: str | Path, lake_root: str | None = None
) -> dict:
    if lake_root is not None:
        from pipelines.warehouse.binding import require_lake

        require_lake(engine, lake_root, "retirement report")
    with step_lock(engine, "retirement report"):
        report = build(engine, catalog, as_of, lake_root)
        store(engine, report)
    data = to_json(report)
    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "report.json").write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
        (folder / "report.md").write_text(render_markdown(data), encoding="utf-8")
        (folder / "report.html").write_text(render_html(data), encoding="utf-8")
    except OSError as exc:
        raise UsageBillingError(f"cannot write the report to {folder}: {exc.strerror or exc}") from None
    return data
