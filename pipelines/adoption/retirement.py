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
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Engine, delete, insert

from pipelines.adoption import weekly as adoption
from pipelines.adoption.candidate import (
    CONTACT_WEEKS,
    backup_facts,
    contacts,
    contacts_file,
    direction,
    last_complete_month,
    preview_folder,
    recent_usage,
    serving_time,
    successor_facts,
    unpriced_tiers,
    write_contacts,
)
from pipelines.adoption.detect import METHOD_VERSION, Decision, decide, projected_crossing, rule_text
from pipelines.adoption.html import render_html, render_markdown
from pipelines.adoption.preview import ALL, PreviewResult, compute, resolve
from pipelines.adoption.preview_files import TRANSITION_MONTHS, transition_grants
from pipelines.adoption.preview_files import write as write_preview
from pipelines.adoption.report import ModelReport, RetirementReport, to_json
from pipelines.adoption.terms import definitions
from pipelines.effectiveness.report import against_successor
from pipelines.errors import UsageBillingError
from pipelines.runtime.outputs import write_text
from pipelines.warehouse.accounts import load_accounts_table
from pipelines.warehouse.binding import require_lake
from pipelines.warehouse.gate import held_back
from pipelines.warehouse.locks import step_lock
from schemas.catalog import Catalog
from schemas.warehouse import RetirementCandidate


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


def _timeline(as_of: dt.date, catalog: Catalog, facts: dict, model: str | None = None) -> list[dict]:
    """The retirement's steps: on the catalog's ``retires`` date when it has one (the notice counts
    back from it), else ``notice_days`` after the next Monday."""
    announce = as_of + dt.timedelta(days=(7 - as_of.weekday()) % 7 or 7)  # next Monday
    retire = announce + dt.timedelta(days=catalog.adoption.notice_days)
    planned = catalog.model(model).retires if model is not None and model in catalog.model_ids else None
    if planned is not None:
        retire = planned
        announce = min(announce, retire - dt.timedelta(days=catalog.adoption.notice_days))
    heavy = facts["last_week"]["heavy_accounts"]
    who = (
        f"contact the {heavy:,} heavy accounts of the last complete week one by one, and every account to "
        "contact whose bill rises on the successor; offer migration help"
        if heavy
        else "contact every account to contact whose bill rises on the successor (no account was heavy in "
        "the last complete week); offer migration help"
    )
    steps = [
        {
            "date": announce.isoformat(),
            "step": "announce the retirement and the successor to all affected accounts"
            + (f" (the catalog retires the model on {planned})" if planned is not None else ""),
        },
        {"date": (announce + dt.timedelta(days=14)).isoformat(), "step": who},
        {
            "date": (retire - dt.timedelta(days=30)).isoformat(),
            "step": "final reminder; stop new sign-ups on the model",
        },
        {"date": retire.isoformat(), "step": "retire the model (requests answer with the successor's name)"},
    ]
    return steps


def build(engine: Engine, catalog: Catalog, as_of: dt.date, lake_root: str | None = None) -> RetirementReport:
    cfg = catalog.adoption
    weekly, went, weeks = adoption.refresh(engine, cfg, as_of, cfg.weeks + 1)
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
            report.facts = _facts(engine, catalog, weekly, went, window, report, as_of, lake_root)
        models.append(report)
    return RetirementReport(
        as_of=as_of,
        weeks=window,
        dq_failed_weeks=sorted(w for w in failed if w in window),
        thresholds=cfg.model_dump(),
        rule=rule_text(cfg),
        definitions=definitions(cfg),
        currency=catalog.currency,
        models=models,
        lifecycle=_lifecycle_rows(weekly, window),
    )


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


def _facts(engine, catalog, weekly, went, window, report: ModelReport, as_of, lake_root) -> dict:
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
    recent = window[-CONTACT_WEEKS:]
    facts = {
        "last_week": _point(weekly, model, last_week),
        "peak_week_by_accounts": _point(weekly, model, peak_week),
        "eight_weeks_before": _point(weekly, model, back8),
        "decline_per_week": t.weekly_change,
        "decline_interval_90": [low, high],
        "accounts_q": report.decision.q_values["active_accounts"],
        "share_q": report.decision.q_values["token_share"],
        "projection": projection,
        "trend": {"intercept": t.intercept, "slope": t.slope},
        **successor_facts(catalog, model, went),
        "backup_tank": backup_facts(engine, lake_root, catalog, model, window),
        "serving_time": serving_time(engine, model, window),
        "currency": catalog.currency,
    }
    report.preview = _preview(engine, catalog, lake_root, model, facts["successor"], as_of)
    facts["preview"] = _preview_facts(report.preview, model, facts["successor"], as_of)
    facts["preview"]["unpriced_tiers"] = unpriced_tiers(catalog, facts["successor"], facts["preview"])
    facts["tier_labels"] = catalog.tier_labels
    first = _point(weekly, model, window[0])
    facts["tokens"] = {
        "first_week": first,
        "last_week": facts["last_week"],
        "direction": direction(first["tokens"] or 0, facts["last_week"]["tokens"] or 0),
    }
    facts["retires"] = catalog.model(model).retires.isoformat() if catalog.model(model).retires else None
    usage = recent_usage(engine, model, recent, catalog.adoption)
    report.contacts = contacts(usage, report.preview)
    facts["contacts"] = {
        "weeks": [recent[0].isoformat(), recent[-1].isoformat()],
        "accounts": len(report.contacts),
        "heavy_last_week": sum(1 for c in report.contacts if c["heavy_last_week"]),
        "file": contacts_file(model),
        "top": report.contacts[:25],
    }
    facts["timeline"] = _timeline(as_of, catalog, facts, model)
    facts["effectiveness"] = against_successor(lake_root, catalog, model, facts.get("successor"), window)
    return facts


def _preview(
    engine: Engine, catalog: Catalog, lake_root: str | None, model: str, successor: str | None, as_of: dt.date
) -> PreviewResult | str:
    """The migration preview of the last complete month on every successor tier, or the reason there
    is none (an error of the preview, one line)."""
    if lake_root is None or successor is None:
        return "no lake given" if lake_root is None else "no successor"
    month = last_complete_month(as_of)
    try:
        request = resolve(catalog, model, month, successor, ALL)
        held = frozenset(held_back(engine))
        return compute(catalog, lake_root, load_accounts_table(engine), request, ALL, held)
    except UsageBillingError as exc:
        return str(exc)


def _preview_facts(
    result: PreviewResult | str, model: str, successor: str | None, as_of: dt.date
) -> dict[str, Any]:
    month = last_complete_month(as_of)
    if isinstance(result, str):
        return {"month": month, "successor": successor, "error": result, "tiers": {}}
    return {
        "month": month,
        "successor": successor,
        "error": None,
        "folder": preview_folder(model),
        "revenue_at_stake": str(result.revenue_at_stake),
        "affected_accounts": len({r["account_id"] for r in result.rows}),
        "transition": _transition(result),
        "tiers": {
            t: {k: str(v) if isinstance(v, Decimal) else v for k, v in s.items()}
            for t, s in result.tiers.items()
        },
    }


def _transition(result: PreviewResult) -> dict[str, Any]:
    """What transition credits would cost: the grants ``retirement preview --credits-out`` writes."""
    grants = transition_grants(result, TRANSITION_MONTHS)
    total = sum((Decimal(g["amount"]) for g in grants), Decimal(0))
    return {"months": TRANSITION_MONTHS, "accounts": len(grants), "total": str(total)}


def store(engine: Engine, report: RetirementReport) -> None:
    as_of = report.as_of
    t = RetirementCandidate.__table__
    rows = []
    for m in report.models:
        d: Decision = m.decision
        a, s = d.trends.get("active_accounts"), d.trends.get("token_share")
        rows.append(
            {
                "as_of": as_of,
                "model": m.model,
                "method_version": METHOD_VERSION,
                "last_week": report.weeks[-1],
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


def run(
    engine: Engine, catalog: Catalog, as_of: dt.date, out: str | Path, lake_root: str | None = None
) -> dict:
    if lake_root is not None:
        require_lake(engine, lake_root, "retirement report")
    with step_lock(engine, "retirement report"):
        report = build(engine, catalog, as_of, lake_root)
        store(engine, report)
    data = to_json(report)
    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_text(folder / "report.json", json.dumps(data, indent=2, default=str))
        write_text(folder / "report.md", render_markdown(data))
        write_text(folder / "report.html", render_html(data))
        for m in report.models:
            if not m.flagged:
                continue
            if isinstance(m.preview, PreviewResult):
                write_preview(m.preview, folder / preview_folder(m.model))
            write_contacts(m.contacts, folder / contacts_file(m.model), m.facts.get("currency", ""))
    except OSError as exc:
        raise UsageBillingError(f"cannot write the report to {folder}: {exc.strerror or exc}") from None
    return data
