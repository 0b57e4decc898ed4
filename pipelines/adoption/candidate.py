"""The facts of a retirement candidate beyond its trend: usage of the last weeks and the accounts to
contact, the model time it frees, the catalog's successor against where users went, the backup tank."""

from __future__ import annotations

import csv
import datetime as dt
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Engine, func, select

from billing.calendar import monday
from billing.invoices import month_bounds
from billing.plan import own_pool_models
from billing.pricing import price_in_force
from pipelines.adoption import weekly as adoption
from pipelines.quota.show import backup_tank
from pipelines.runtime.outputs import atomic, neutralize_value
from pipelines.warehouse.engine import as_date, read_arrow
from schemas.catalog import Catalog
from schemas.catalog_sections import AdoptionConfig
from schemas.tokens import allowance_tokens
from schemas.tokens import fields as token_fields
from schemas.warehouse import UsageDaily


def last_complete_month(as_of: dt.date) -> str:
    """The last calendar month that ends on or before ``as_of``: the month a report previews."""
    end = as_of if (as_of + dt.timedelta(days=1)).day == 1 else as_of.replace(day=1) - dt.timedelta(days=1)
    return end.strftime("%Y-%m")


def recent_usage(engine: Engine, model: str, weeks: list[dt.date], cfg: AdoptionConfig) -> pa.Table:
    """Per account active on ``model`` in ``weeks`` (UTC days): active days, requests, tokens, output
    time, the last active day and the number of those weeks it was a heavy account (the weekly
    definition of ``pipelines.adoption.weekly``)."""
    u = UsageDaily.__table__.c
    first, last = weeks[0], weeks[-1] + dt.timedelta(days=6)
    query = select(u.day, u.account_id, u.requests, *(u[f] for f in token_fields()), u.output_ms).where(
        u.model == model, u.day.between(first, last), u.requests > 0
    )
    with engine.connect() as conn:
        rows = read_arrow(conn, query, RECENT_SCHEMA)
    rows = rows.append_column("week_start", adoption.week_start(rows["day"]))
    rows = rows.append_column("tokens", allowance_tokens(rows))
    per_day = rows.group_by(["week_start", "account_id", "day"], use_threads=False).aggregate(
        [("requests", "sum")]
    )
    weekly = per_day.group_by(["week_start", "account_id"], use_threads=False).aggregate(
        [("day", "count"), ("requests_sum", "sum")]
    )
    heavy = pc.and_(
        pc.greater_equal(weekly["day_count"], cfg.heavy_min_days),
        pc.greater_equal(weekly["requests_sum_sum"], cfg.heavy_min_requests),
    )
    weekly = weekly.append_column("heavy", pc.cast(heavy, pa.int64()))
    heavy_weeks = weekly.group_by("account_id", use_threads=False).aggregate([("heavy", "sum")])
    last_week = weekly.filter(pc.equal(weekly["week_start"], pa.scalar(weeks[-1], pa.date32())))
    last_week = last_week.select(["account_id", "heavy"]).rename_columns(["account_id", "heavy_last_week"])
    g = rows.group_by("account_id", use_threads=False).aggregate(
        [
            ("day", "count_distinct"),
            ("requests", "sum"),
            ("tokens", "sum"),
            ("output_ms", "sum"),
            ("day", "max"),
        ]
    )
    g = g.join(heavy_weeks, "account_id").join(last_week, "account_id", join_type="left outer")
    return pa.table(
        {
            "account_id": g["account_id"],
            "heavy_weeks": g["heavy_sum"],
            "heavy_last_week": pc.fill_null(pc.cast(g["heavy_last_week"], pa.bool_()), False),
            "active_days": g["day_count_distinct"],
            "requests": g["requests_sum"],
            "tokens": g["tokens_sum"],
            "output_ms": g["output_ms_sum"],
            "last_active_day": g["day_max"],
        }
    )


RECENT_SCHEMA = pa.schema(
    [
        ("day", pa.date32()),
        ("account_id", pa.string()),
        ("requests", pa.int64()),
        *((f, pa.int64()) for f in token_fields()),
        ("output_ms", pa.int64()),
    ]
)


CONTACT_WEEKS = 4  # the weeks whose users are "the accounts that still use it"


def serving_time(engine: Engine, model: str, weeks: list[dt.date]) -> dict:
    """The model's output time per week (the sum of its requests' durations): what retiring it frees."""
    u = UsageDaily.__table__.c
    with engine.connect() as conn:
        rows = conn.execute(
            select(u.day, func.sum(u.output_ms))
            .where(u.model == model, u.day.between(weeks[0], weeks[-1] + dt.timedelta(days=6)))
            .group_by(u.day)
        ).all()
    per_week: dict[dt.date, int] = dict.fromkeys(weeks, 0)
    for day, ms in rows:
        week = monday(as_date(day))
        if week in per_week:
            per_week[week] += int(ms or 0)
    series = [{"week_start": w.isoformat(), "output_hours": per_week[w] / 3_600_000} for w in weeks]
    recent = [float(str(r["output_hours"])) for r in series[-CONTACT_WEEKS:]]
    return {
        "weeks": series,
        "last_week_hours": series[-1]["output_hours"] if series else 0.0,
        "mean_hours_last_4_weeks": sum(recent) / len(recent) if recent else 0.0,
    }


NEAR_TIE = 0.10  # a lead of at most this share of the leader's accounts (or one account) is a tie


def successor_facts(catalog: Catalog, model: str, went: pa.Table) -> dict:
    """The catalog's successor and where the accounts that left actually went over the report's weeks
    (``went``: distinct accounts per from_model and to_model); ``agrees`` is false when most of them
    went elsewhere, ``near_tie`` names the runner-up when the lead is too small to call."""
    mine = went.filter(pc.equal(went["from_model"], model)).sort_by(
        [("accounts", "descending"), ("to_model", "ascending")]
    )
    matrix = [
        {"to_model": t, "accounts": a, "tokens": k}
        for t, a, k in zip(
            mine["to_model"].to_pylist(),
            mine["accounts"].to_pylist(),
            mine["tokens"].to_pylist(),
            strict=True,
        )
    ]
    named = catalog.model(model).successor if model in catalog.model_ids else None
    elsewhere = [m for m in matrix if m["to_model"] != adoption.NONE]
    observed = elsewhere[0] if elsewhere else None
    runner_up = elsewhere[1] if len(elsewhere) > 1 else None
    near_tie = (
        runner_up
        if observed is not None
        and runner_up is not None
        and observed["accounts"] - runner_up["accounts"] <= max(1, NEAR_TIE * observed["accounts"])
        else None
    )
    named_row = next((m for m in matrix if m["to_model"] == named), None)
    agrees = (
        named is None
        or observed is None
        or observed["to_model"] == named
        or (near_tie is not None and near_tie["to_model"] == named)
    )
    return {
        "successor": named or (observed and observed["to_model"]),
        "source": "catalog" if named else ("migration matrix" if observed else None),
        "catalog_successor": named,
        "observed_successor": observed,
        "catalog_successor_accounts": named_row["accounts"] if named_row else 0,
        "near_tie": near_tie,
        "agrees": agrees,
        "migration": matrix,
    }


def backup_facts(
    engine: Engine, lake_root: str | None, catalog: Catalog, model: str, weeks: list[dt.date]
) -> dict | None:
    """The backup tank over the last weeks: how much of the model's use came after the account's main
    pool had run out, and per week how many of its accounts ran their main pool out."""
    if lake_root is None or model not in own_pool_models(catalog):
        return None
    recent = weeks[-CONTACT_WEEKS:]
    weekly = backup_tank(engine, lake_root, catalog, model, since=recent[0] - dt.timedelta(days=1))
    weekly = weekly.filter(pc.is_in(weekly["week_start"], value_set=pa.array(recent, pa.date32())))
    tokens = pc.sum(weekly["tokens"]).as_py() or 0
    backup = pc.sum(weekly["backup_tokens"]).as_py() or 0
    rows = [
        {**r, "week_start": r["week_start"].isoformat()}
        for r in weekly.select(
            ["week_start", "accounts", "tokens", "backup_tokens", "backup_accounts", "exhausted_accounts"]
        ).to_pylist()
    ]
    return {"weeks": rows, "token_share": backup / tokens if tokens else 0.0}


def preview_folder(model: str) -> str:
    return f"preview-{model}"


def contacts_file(model: str) -> str:
    return f"accounts-{model}.csv"


def contacts(usage: pa.Table, preview) -> list[dict]:
    """The accounts to contact: every account active on the model in the last weeks, and every
    affected account of the preview month, with its bill now and its change per successor tier."""
    rows = {r["account_id"]: {**r, "in_preview_month": False} for r in usage.to_pylist()}
    tiers: list[str] = []
    if not isinstance(preview, str):
        tiers = list(preview.tiers)
        for p in preview.rows:
            row = rows.setdefault(
                p["account_id"],
                {
                    "account_id": p["account_id"],
                    "heavy_weeks": 0,
                    "heavy_last_week": False,
                    "active_days": 0,
                    "requests": 0,
                    "tokens": 0,
                    "output_ms": 0,
                    "last_active_day": None,
                    "in_preview_month": True,
                },
            )
            row["in_preview_month"] = True
            row["current_total"] = p["current_total"]
            row["model_revenue"] = preview.model_revenue.get(p["account_id"], Decimal("0.00"))
            row[f"delta_{p['tier']}"] = p["delta"]
    out = []
    for row in rows.values():
        row.setdefault("current_total", None)
        row.setdefault("model_revenue", None)
        for t in tiers:
            row.setdefault(f"delta_{t}", None)
        row["last_active_day"] = row["last_active_day"].isoformat() if row["last_active_day"] else None
        out.append(row)
    most = [
        max((r[f"delta_{t}"] for t in tiers if r[f"delta_{t}"] is not None), default=Decimal(0)) for r in out
    ]
    order = sorted(
        range(len(out)),
        key=lambda i: (
            -out[i]["heavy_last_week"],
            -out[i]["heavy_weeks"],
            -most[i],
            -out[i]["tokens"],
            out[i]["account_id"],
        ),
    )
    return [out[i] for i in order]


def write_contacts(rows: list[dict], path: Path, currency: str) -> None:
    """The accounts to contact as CSV: usage of the last weeks, the bill now, the change per tier."""

    columns = [c for c in rows[0] if c != "output_ms"] + ["currency"] if rows else ["account_id"]
    with atomic(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(
                {
                    **{
                        k: neutralize_value(
                            f"{v:.2f}" if isinstance(v, Decimal) else ("" if v is None else v)
                        )
                        for k, v in r.items()
                    },
                    "currency": currency,
                }
            )


def direction(first: int, last: int) -> str:
    """How a volume moved between two weeks, in words (within 5% is flat)."""
    if first == 0:
        return "rising" if last > 0 else "flat"
    change = (last - first) / first
    return "rising" if change > 0.05 else ("falling" if change < -0.05 else "flat")


def unpriced_tiers(catalog: Catalog, successor: str | None, preview: dict) -> list[dict]:
    """The successor's speed tiers the preview leaves out, each with why: no price on some day of
    the month (the preview prices only tiers in force on every day)."""
    if successor is None or preview.get("error"):
        return []
    first, last = month_bounds(preview["month"])
    out = []
    for tier in catalog.tier_ids:
        if tier in preview["tiers"]:
            continue
        missing = [d for d in (first, last) if price_in_force(catalog, successor, tier, d) is None]
        if not missing:
            continue
        starts = sorted(p.effective_from for p in catalog.prices if (p.model, p.tier) == (successor, tier))
        why = (
            f"no price before {starts[0]}"
            if starts and starts[0] > first
            else f"no price in {preview['month']}"
        )
        out.append({"tier": tier, "why": why})
    return out
