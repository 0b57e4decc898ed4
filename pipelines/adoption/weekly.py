"""Weekly adoption metrics per model and per model x tier, from usage_daily (UTC days).

    usage-billing retirement report --as-of 2026-09-07 --out reports/   (computes these first)

Only complete ISO weeks count: Monday to Sunday, every day present in usage_daily and on or before
the as-of date. Per week and model (``speed_tier = '*'``) and per model x tier:
- active accounts (exact distinct), requests, tokens (input + output), share of platform tokens;
- heavy accounts: active on at least ``heavy_min_days`` days of the week with at least
  ``heavy_min_requests`` requests;
- lifecycle: new (first week ever on it), returning (also active the week before), resurrected
  (active again after an idle week), dormant (active the week before, not this week), and the quick
  ratio (new + resurrected) / dormant;
- ``dq_failed``: a day of the week failed an error-level data-quality check nobody accepted.
And a migration matrix: for accounts that went dormant on a model, where their tokens went that week
(``(none)`` when they used nothing). All vectorized on Arrow tables; no loop over accounts.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Engine, delete, select

from billing.calendar import monday, period_start
from pipelines.warehouse.engine import insert_arrow, read_arrow
from pipelines.warehouse.gate import held_back
from schemas.catalog_sections import AdoptionConfig
from schemas.tokens import allowance_tokens
from schemas.tokens import fields as token_fields
from schemas.warehouse import ModelMigration, ModelWeekly, UsageDaily

ALL_TIERS = "*"
NONE = "(none)"
USAGE_SCHEMA = pa.schema(
    [
        ("day", pa.date32()),
        ("account_id", pa.string()),
        ("model", pa.string()),
        ("speed_tier", pa.string()),
        ("requests", pa.int64()),
        *((f, pa.int64()) for f in token_fields()),
    ]
)


def week_start(days: pa.Array | pa.ChunkedArray) -> pa.Array:
    d = pc.cast(days, pa.date32()).to_numpy(zero_copy_only=False).astype("datetime64[D]")
    return pa.array(period_start(d, "week"))


def complete_weeks(days: pa.Array | pa.ChunkedArray, as_of: dt.date) -> list[dt.date]:
    """Mondays of the weeks whose 7 days all have data and end on or before ``as_of``."""
    present = {d for d in pc.unique(days).to_pylist() if d <= as_of}
    mondays = {monday(d) for d in present}
    return sorted(m for m in mondays if all(m + dt.timedelta(days=i) in present for i in range(7)))


def _sum_by(table: pa.Table, keys: list[str], aggs: list[tuple]) -> pa.Table:
    g = table.group_by(keys, use_threads=False).aggregate(aggs)
    return g.rename_columns([c.removesuffix("_sum").removesuffix("_count_distinct") for c in g.column_names])


def account_weeks(usage: pa.Table, weeks: list[dt.date]) -> pa.Table:
    """Per (week, account, model, tier) and per (week, account, model, '*'): requests, tokens, active days."""
    t = usage.append_column("week_start", week_start(usage["day"]))
    t = t.filter(pc.is_in(t["week_start"], value_set=pa.array(weeks, pa.date32())))
    t = t.append_column("tokens", allowance_tokens(t))
    keys = ["week_start", "account_id", "model"]
    aggs = [("requests", "sum"), ("tokens", "sum"), ("day", "count_distinct")]
    per_tier = _sum_by(t, [*keys, "speed_tier"], aggs)
    all_tiers = _sum_by(t, keys, aggs)
    all_tiers = all_tiers.append_column("speed_tier", pa.array([ALL_TIERS] * all_tiers.num_rows, pa.string()))
    out = pa.concat_tables([per_tier, all_tiers.select(per_tier.column_names)])
    out = out.filter(pc.greater(out["requests"], 0))
    return out.rename_columns([c if c != "day" else "active_days" for c in out.column_names])


def _lifecycle(aw: pa.Table, weeks: list[dt.date]) -> tuple[pa.Table, pa.Table]:
    """(lifecycle counts per week, model, tier; dormant rows: week, account, model for '*')."""
    t = aw.sort_by(
        [
            ("model", "ascending"),
            ("speed_tier", "ascending"),
            ("account_id", "ascending"),
            ("week_start", "ascending"),
        ]
    )
    n = t.num_rows
    week = t["week_start"].to_numpy().astype("datetime64[D]")
    prev_same = np.zeros(n, bool)  # row i continues the (model, tier, account) of row i-1
    if n > 1:
        eq = np.ones(n - 1, bool)
        for c in ("model", "speed_tier", "account_id"):
            col = t[c].combine_chunks()
            eq &= np.asarray(pc.equal(col.slice(1), col.slice(0, n - 1)).to_numpy(zero_copy_only=False), bool)
        prev_same[1:] = eq
    prev_week = np.where(prev_same, np.roll(week, 1), np.datetime64("NaT"))
    kind = np.where(~prev_same, "new", np.where(prev_week == week - 7, "returning", "resurrected"))
    next_same = np.zeros(n, bool)
    next_same[:-1] = prev_same[1:]
    next_week = np.where(next_same, np.roll(week, -1), np.datetime64("NaT"))
    last = np.datetime64(weeks[-1]) if weeks else np.datetime64("NaT")
    goes_dormant = (week < last) & ~(next_week == week + 7)  # dormant in week + 7
    counts = pa.table(
        {
            "week_start": t["week_start"],
            "model": t["model"],
            "speed_tier": t["speed_tier"],
            "kind": pa.array(kind),
        }
    )
    active = counts.group_by(["week_start", "model", "speed_tier", "kind"], use_threads=False).aggregate(
        [([], "count_all")]
    )
    idx = np.flatnonzero(goes_dormant)
    dormant_rows = pa.table(
        {
            "week_start": pa.array(week[idx] + 7),
            "account_id": t["account_id"].take(idx),
            "model": t["model"].take(idx),
            "speed_tier": t["speed_tier"].take(idx),
        }
    )
    dormant_rows = dormant_rows.filter(
        pc.is_in(dormant_rows["week_start"], value_set=pa.array(weeks, pa.date32()))
    )
    dormant = dormant_rows.group_by(["week_start", "model", "speed_tier"], use_threads=False).aggregate(
        [([], "count_all")]
    )
    dormant = dormant.append_column("kind", pa.array(["dormant"] * dormant.num_rows, pa.string()))
    counts = pa.concat_tables([active, dormant.select(active.column_names)])
    return counts, dormant_rows.filter(pc.equal(dormant_rows["speed_tier"], ALL_TIERS))


def weekly_metrics(
    usage: pa.Table, weeks: list[dt.date], cfg: AdoptionConfig, dq_failed: set[dt.date]
) -> pa.Table:
    """The model_weekly rows of ``weeks``."""
    aw = account_weeks(usage, weeks)
    heavy = pc.and_(
        pc.greater_equal(aw["active_days"], cfg.heavy_min_days),
        pc.greater_equal(aw["requests"], cfg.heavy_min_requests),
    )
    aw_h = aw.append_column("heavy", pc.cast(heavy, pa.int64()))
    keys = ["week_start", "model", "speed_tier"]
    base = aw_h.group_by(keys, use_threads=False).aggregate(
        [("account_id", "count"), ("requests", "sum"), ("tokens", "sum"), ("heavy", "sum")]
    )
    base = base.rename_columns(
        [
            {"account_id_count": "active_accounts", "heavy_sum": "heavy_accounts"}.get(
                c, c.removesuffix("_sum")
            )
            for c in base.column_names
        ]
    )
    all_rows = aw.filter(pc.equal(aw["speed_tier"], ALL_TIERS))
    platform = all_rows.group_by("week_start", use_threads=False).aggregate([("tokens", "sum")])
    platform = platform.rename_columns(["week_start", "platform_tokens"])
    base = base.join(platform, "week_start")
    share = pc.divide(pc.cast(base["tokens"], pa.float64()), pc.cast(base["platform_tokens"], pa.float64()))
    base = base.append_column("token_share", share).drop_columns(["platform_tokens"])
    counts, _ = _lifecycle(aw, weeks)
    # Every week of the window for every (model, tier) active in any of them: a week in which a
    # model lost its last accounts is a row of zero active accounts (and its dormant count), not a gap.
    pairs = aw.select(["model", "speed_tier"]).group_by(["model", "speed_tier"]).aggregate([])
    grid = (
        pa.concat_tables(
            [
                pairs.append_column("week_start", pa.repeat(pa.scalar(w, pa.date32()), pairs.num_rows))
                for w in weeks
            ]
        )
        if weeks
        else pairs.append_column("week_start", pa.array([], pa.date32()))
    )
    base = grid.select(keys).join(base, keys, join_type="left outer")
    zero = {"active_accounts": 0, "requests": 0, "tokens": 0, "heavy_accounts": 0, "token_share": 0.0}
    for column, value in zero.items():
        i = base.schema.get_field_index(column)
        base = base.set_column(
            i, column, pc.fill_null(base[column], pa.scalar(value, base.schema.field(i).type))
        )
    for kind in ("new", "returning", "resurrected", "dormant"):
        part = counts.filter(pc.equal(counts["kind"], kind)).drop_columns(["kind"])
        part = part.rename_columns([*keys, f"{kind}_accounts"])
        base = base.join(part, keys, join_type="left outer")
        base = base.set_column(
            base.num_columns - 1, f"{kind}_accounts", pc.fill_null(base[f"{kind}_accounts"], 0)
        )
    ratio = pc.divide(
        pc.cast(pc.add(base["new_accounts"], base["resurrected_accounts"]), pa.float64()),
        pc.cast(base["dormant_accounts"], pa.float64()),
    )
    ratio = pc.if_else(pc.equal(base["dormant_accounts"], 0), pa.scalar(None, pa.float64()), ratio)
    base = base.append_column("quick_ratio", ratio)
    failed = pc.is_in(base["week_start"], value_set=pa.array(sorted(dq_failed), pa.date32()))
    base = base.append_column("dq_failed", failed)
    return base.sort_by([(k, "ascending") for k in keys])


def moved(usage: pa.Table, weeks: list[dt.date]) -> pa.Table:
    """Per week, each account that went dormant on ``from_model`` and where it went: one row per
    (week, account, from_model, to_model) with the to_model's tokens that week; (none) for nowhere."""
    aw = account_weeks(usage, weeks)
    _, dormant = _lifecycle(aw, weeks)
    all_tiers = aw.filter(pc.equal(aw["speed_tier"], ALL_TIERS)).select(
        ["week_start", "account_id", "model", "tokens"]
    )
    left = dormant.select(["week_start", "account_id", "model"]).rename_columns(
        ["week_start", "account_id", "from_model"]
    )
    joined = left.join(
        all_tiers.rename_columns(["week_start", "account_id", "to_model", "tokens"]),
        ["week_start", "account_id"],
        join_type="left outer",
    )
    joined = joined.filter(pc.fill_null(pc.not_equal(joined["to_model"], joined["from_model"]), True))
    # An account that used only other models gets one row per destination; one that used nothing, (none).
    to = pc.fill_null(joined["to_model"], NONE)
    joined = joined.set_column(joined.schema.get_field_index("to_model"), "to_model", to)
    return joined.set_column(
        joined.schema.get_field_index("tokens"), "tokens", pc.fill_null(joined["tokens"], 0)
    )


def migrations(usage: pa.Table, weeks: list[dt.date]) -> pa.Table:
    """From model -> to model per week for accounts that went dormant on from_model that week."""
    g = (
        moved(usage, weeks)
        .group_by(["week_start", "from_model", "to_model"], use_threads=False)
        .aggregate([("account_id", "count_distinct"), ("tokens", "sum")])
    )
    return g.rename_columns(["week_start", "from_model", "to_model", "accounts", "tokens"]).sort_by(
        [("week_start", "ascending"), ("from_model", "ascending"), ("accounts", "descending")]
    )


def destinations(usage: pa.Table, weeks: list[dt.date], report_weeks: list[dt.date]) -> pa.Table:
    """Over ``report_weeks``: per (from_model, to_model), the distinct accounts that left from_model
    for to_model (an account that left twice counts once) and their tokens there."""
    rows = moved(usage, weeks)
    rows = rows.filter(pc.is_in(rows["week_start"], value_set=pa.array(report_weeks, pa.date32())))
    g = rows.group_by(["from_model", "to_model"], use_threads=False).aggregate(
        [("account_id", "count_distinct"), ("tokens", "sum")]
    )
    return g.rename_columns(["from_model", "to_model", "accounts", "tokens"])


def failed_days(engine: Engine) -> set[dt.date]:
    """Days the data-quality gate holds back (a failed error-level check no acceptance covers)."""
    return held_back(engine, None)


def load_usage(engine: Engine, first: dt.date, last: dt.date) -> pa.Table:
    u = UsageDaily.__table__.c
    query = select(
        u.day, u.account_id, u.model, u.speed_tier, u.requests, *(u[f] for f in token_fields())
    ).where(u.day.between(first, last))
    with engine.connect() as conn:
        return read_arrow(conn, query, USAGE_SCHEMA)


def refresh(
    engine: Engine, cfg: AdoptionConfig, as_of: dt.date, weeks_back: int
) -> tuple[pa.Table, pa.Table, list[dt.date]]:
    """Recompute model_weekly and model_migrations for the complete weeks up to ``as_of``.

    Reads ``weeks_back`` + 1 weeks of usage (one more, for the lifecycle of the first) and replaces
    those weeks' rows in one transaction. Returns (weekly, where the accounts that left went over the
    weeks: distinct accounts per from_model and to_model, weeks).
    """
    first = as_of - dt.timedelta(days=7 * (weeks_back + 2))
    usage = load_usage(engine, first, as_of)
    weeks = complete_weeks(usage["day"], as_of)
    bad = failed_days(engine)
    dq_weeks = {monday(d) for d in bad}
    weekly = weekly_metrics(usage, weeks, cfg, dq_weeks)
    moves = migrations(usage, weeks)
    report_weeks = weeks[1:] if len(weeks) > 1 else weeks  # the first has no week before it
    went = destinations(usage, weeks, report_weeks)
    weekly = weekly.filter(pc.is_in(weekly["week_start"], value_set=pa.array(report_weeks, pa.date32())))
    moves = moves.filter(pc.is_in(moves["week_start"], value_set=pa.array(report_weeks, pa.date32())))
    with engine.begin() as conn:
        for table in (ModelWeekly.__table__, ModelMigration.__table__):
            conn.execute(delete(table).where(table.c.week_start.in_(report_weeks)))
        insert_arrow(conn, ModelWeekly.__table__, weekly)
        insert_arrow(conn, ModelMigration.__table__, moves)
    return weekly, went, report_weeks
