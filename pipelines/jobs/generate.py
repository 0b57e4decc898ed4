"""Synthetic usage events for the demo scenario (README), vectorized with numpy (deterministic by seed).

What the data shows, driven by the catalog:
- thousands of accounts on every plan and pay-as-you-go, in several timezones, some joining late,
  some changing plan mid-period, with heavy-tailed activity and weekly seasonality;
- each model's share rises after launch and fades before its retirement date;
- a model with its own quota pool (the fast coding model) is adopted after launch, then adopters
  churn week after week until a few dozen heavy users remain; they use it mostly on days when
  their main pool is already exhausted (the backup tank);
- a speed tier that starts selling mid-range (the flagship's ultrafast) is adopted from its first day;
- a configurable share of resends (exact duplicates) and of late events (landing days later);
- requests grouped into tasks with their outcomes (``generate_tasks``): one-pass, rework and
  abandoned shares per model and task class, rework times, orphan outcomes and open tasks.

Usage: ``usage-billing events generate --days 30 --accounts 2000 --events-per-day 20000``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from billing.calendar import weekday
from pipelines.jobs import generate_tasks
from pipelines.jobs.generate_accounts import account_ids as _account_ids
from pipelines.jobs.generate_accounts import account_rows as _account_rows
from pipelines.jobs.generate_mix import tier_probs, tier_speed, token_fields
from schemas.catalog import Catalog
from schemas.events import EVENT_SCHEMA
from schemas.limits import LATEST_DATE

DAY_US = 86_400_000_000
TIMEZONES = (
    ("UTC", 0.22),
    ("America/New_York", 0.18),
    ("America/Los_Angeles", 0.14),
    ("Europe/Berlin", 0.14),
    ("Europe/London", 0.08),
    ("Asia/Tokyo", 0.08),
    ("Asia/Kolkata", 0.07),
    ("Australia/Sydney", 0.04),
    ("Pacific/Honolulu", 0.03),
    ("Pacific/Kiritimati", 0.02),
)
PLAN_MIX = {"free": 0.40, "plus": 0.30, "pro": 0.15, None: 0.15}
ACTIVITY = {"free": 0.5, "plus": 1.4, "pro": 3.0, None: 1.0}
ERROR_CODES = ("context_length_exceeded", "rate_limited", "server_error", "timeout")


@dataclass(frozen=True)
class GeneratorConfig:
    start: dt.date = dt.date(2026, 2, 1)
    days: int = 242
    accounts: int = 5000
    events_per_day: int = 9000
    seed: int = 7
    duplicate_rate: float = 0.004
    late_rate: float = 0.003
    late_max_days: int = 4
    fmt: str = "mixed"  # mixed | parquet | jsonl
    rows_per_file: int = 1_000_000  # producers roll files; a large day becomes several

    def __post_init__(self) -> None:
        if self.days < 1 or self.accounts < 1 or self.events_per_day < 1:
            raise ValueError("--days, --accounts and --events-per-day must be positive")
        last = self.start + dt.timedelta(days=self.days + 40)  # late events land up to weeks after
        if last > LATEST_DATE:
            raise ValueError(
                f"--start {self.start} with --days {self.days} runs past {LATEST_DATE} (the last date)"
            )
        if not (0 <= self.duplicate_rate < 1 and 0 <= self.late_rate < 1):
            raise ValueError("duplicate and late rates must be in [0, 1)")
        if self.fmt not in ("mixed", "parquet", "jsonl"):
            raise ValueError(f"unknown format {self.fmt!r}: use mixed, parquet or jsonl")

    @property
    def end(self) -> dt.date:
        return self.start + dt.timedelta(days=self.days - 1)


@dataclass
class Generated:
    events: pa.Table  # EVENT_SCHEMA + landing_date (date32); resends included
    accounts: list[dict[str, str]]
    duplicates: int
    late: int
    outcomes: pa.Table | None = None  # OUTCOME_SCHEMA + landing_date (date32); orphans and resends included


def _ramp(x: np.ndarray) -> np.ndarray:
    return np.clip(x, 0.0, 1.0)


def _model_weights(catalog: Catalog, days: np.ndarray, models: list[str]) -> np.ndarray:
    """[day, model] popularity: ramps up over 4 weeks after launch, fades over 16 weeks before retiring."""
    w = np.zeros((len(days), len(models)))
    for j, mid in enumerate(models):
        m = catalog.model(mid)
        age = (days - np.datetime64(m.launched)).astype(np.int64)
        weight = _ramp((age + 1) / 28.0) * (1.0 + 0.004 * np.maximum(age, 0).clip(0, 200))
        if m.retires is not None:
            left = (np.datetime64(m.retires) - days).astype(np.int64)
            weight = weight * _ramp(left / 112.0) ** 1.5
        w[:, j] = weight
    return w


def _sample_categorical(rng: np.random.Generator, cum: np.ndarray) -> np.ndarray:
    """One draw per row of the cumulative-probability matrix ``cum`` [n, k]."""
    u = rng.random(len(cum))[:, None] * cum[:, -1:]
    return (u >= cum).sum(axis=1).clip(0, cum.shape[1] - 1)


def _pool_models(catalog: Catalog) -> list[str]:
    """Models that some plan gives their own pool (listed by name, not through "*")."""
    named = {
        m for plan in catalog.plans for pool in plan.pools if "*" not in pool.models for m in pool.models
    }
    return [m for m in catalog.model_ids if m in named]


def _main_allowance(catalog: Catalog, plan: str | None, pool_models: list[str]) -> float:
    """Weekly token allowance of the plan's pools that cover the ordinary models (inf without a plan)."""
    if plan is None:
        return np.inf
    total = 0.0
    for pool in catalog.plan(plan).pools:
        if "*" in pool.models:
            per_week = {"day": 7, "week": 1, "month": 7 / 30}[pool.period]
            total += pool.allowance_tokens * per_week
    return total or np.inf


def generate(catalog: Catalog, cfg: GeneratorConfig) -> Generated:
    rng = np.random.default_rng(cfg.seed)
    n_acc, n_days = cfg.accounts, cfg.days
    day_list = [cfg.start + dt.timedelta(days=i) for i in range(n_days)]
    days = np.array(day_list, dtype="datetime64[D]")
    plan_names = [p for p in PLAN_MIX if p is None or p in {pl.id for pl in catalog.plans}]
    plan_p = np.array([PLAN_MIX[p] for p in plan_names])
    plan_idx = rng.choice(len(plan_names), size=n_acc, p=plan_p / plan_p.sum())
    tz_names = [t for t, _ in TIMEZONES]
    tz_p = np.array([p for _, p in TIMEZONES])
    tz_idx = rng.choice(len(tz_names), size=n_acc, p=tz_p / tz_p.sum())
    joined = np.where(rng.random(n_acc) < 0.7, 0, rng.integers(0, n_days, n_acc))
    leaves = np.where(rng.random(n_acc) < 0.05, rng.integers(0, n_days, n_acc), n_days)
    leaves = np.maximum(leaves, joined + 1)
    upgrade_day = np.where(
        (np.array(plan_names, dtype=object)[plan_idx] == "plus") & (rng.random(n_acc) < 0.06),
        rng.integers(0, n_days, n_acc),
        -1,
    )
    upgrade_day = np.where(upgrade_day > joined, upgrade_day, -1)
    activity = rng.lognormal(0.0, 1.0, n_acc) * np.array([ACTIVITY[plan_names[i]] for i in plan_idx])

    # -- ordinary models: requests per (account, day) -------------------------------------------
    dow = weekday(days.astype("datetime64[D]"))  # 0 = Monday
    day_weight = np.where(dow < 5, 1.0, np.where(dow == 5, 0.55, 0.5))
    growth = 1.0 + 0.25 * np.arange(n_days) / max(n_days - 1, 1)
    active = (np.arange(n_days)[None, :] >= joined[:, None]) & (np.arange(n_days)[None, :] < leaves[:, None])
    rate = activity[:, None] * (day_weight * growth)[None, :] * active
    pool_models = _pool_models(catalog)
    ordinary = [m for m in catalog.model_ids if m not in pool_models]
    rate *= cfg.events_per_day * n_days * 0.9 / max(rate.sum(), 1e-9)
    counts = rng.poisson(rate)
    cell = np.repeat(np.arange(n_acc * n_days), counts.ravel())
    acc = cell // n_days
    day = cell % n_days
    weights = _model_weights(catalog, days, ordinary)
    model_local = _sample_categorical(rng, np.cumsum(weights, axis=1)[day])
    model = np.array([catalog.model_ids.index(m) for m in ordinary])[model_local]
    input_tok, output_tok = _tokens(rng, len(acc), 10.0, 6.5)

    # -- pool models: adopters, churn, and use when the main pool is exhausted ------------------
    spark_parts = []
    for mid in pool_models:
        spark_parts.append(
            _pool_model_events(
                catalog,
                cfg,
                rng,
                mid,
                plan_names,
                plan_idx,
                activity,
                active,
                days,
                acc,
                day,
                input_tok + output_tok,
            )
        )
    if spark_parts:
        s_acc = np.concatenate([p[0] for p in spark_parts])
        s_day = np.concatenate([p[1] for p in spark_parts])
        s_model = np.concatenate([p[2] for p in spark_parts])
        s_in, s_out = _tokens(rng, len(s_acc), 10.3, 6.9)
        acc = np.concatenate([acc, s_acc])
        day = np.concatenate([day, s_day])
        model = np.concatenate([model, s_model])
        input_tok = np.concatenate([input_tok, s_in])
        output_tok = np.concatenate([output_tok, s_out])

    n = len(acc)
    tier_cum = np.cumsum(tier_probs(catalog, day_list, catalog.model_ids), axis=2)
    tier = _sample_categorical(rng, tier_cum[day, model])
    cached = np.floor(input_tok * rng.beta(2.0, 2.5, n)).astype(np.int64)
    is_error = rng.random(n) < 0.015
    output_tok = np.where(is_error, 0, output_tok)
    speed = (
        np.array([_base_speed(m) for m in catalog.model_ids])[model]
        * np.array([tier_speed(k) for k in range(len(catalog.tier_ids))])[tier]
    )
    duration = (output_tok / (speed * rng.lognormal(0, 0.15, n)) * 1000 + rng.integers(150, 900, n)).astype(
        np.int64
    )
    has_duration = rng.random(n) >= 0.05
    start_us = (days.astype("datetime64[us]").astype(np.int64))[day]
    times = start_us + rng.integers(0, DAY_US, n)
    task_rng = np.random.default_rng([cfg.seed, 26])  # its own stream: the events' draws stay as they were
    think = np.array([generate_tasks.THINK_S[generate_tasks.model_kind(m)] for m in catalog.model_ids])
    task, times, tier = generate_tasks.group_tasks(task_rng, acc, model, tier, day, times, duration, think)
    user_n = rng.integers(0, 4, n)
    no_user = rng.random(n) < 0.1
    err_idx = rng.integers(0, len(ERROR_CODES), n)
    # Put every column in time order first, then build strings already in order (no random take).
    order = np.argsort(times, kind="stable")
    times, acc, model, tier = times[order], acc[order], model[order], tier[order]
    input_tok, cached, output_tok = input_tok[order], cached[order], output_tok[order]
    counts = token_fields(np.random.default_rng([cfg.seed, 40]), input_tok, cached, output_tok)
    duration, has_duration, is_error = duration[order], has_duration[order], is_error[order]
    user_n, no_user, err_idx, event_day = user_n[order], no_user[order], err_idx[order], day[order]
    task = task[order]

    ids = pc.binary_join_element_wise("ev-", str(cfg.seed), "-", pa.array(np.arange(n)).cast(pa.string()), "")
    user_ids = pc.binary_join_element_wise(
        "u-", pa.array(acc).cast(pa.string()), "-", pa.array(user_n).cast(pa.string()), ""
    )
    user_ids = pc.if_else(pa.array(no_user), pa.nulls(n, pa.string()), user_ids)
    account_ids = _account_ids(n_acc)
    error_code = pa.array(ERROR_CODES).take(pa.array(err_idx))
    table = pa.table(
        {
            "event_id": ids,
            "event_time": pa.array(times, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "account_id": account_ids.take(pa.array(acc)),
            "user_id": user_ids,
            "model": pa.array(catalog.model_ids).take(pa.array(model)),
            "speed_tier": pa.array(catalog.tier_ids).take(pa.array(tier)),
            **{field: pa.array(v) for field, v in counts.items()},
            "duration_ms": pa.array(duration, mask=~has_duration),
            "status": pa.array(["ok", "error"]).take(pa.array(is_error.astype(np.int8))),
            "error_code": pc.if_else(pa.array(is_error), error_code, pa.nulls(n, pa.string())),
            "task_id": pc.if_else(
                pa.array(task >= 0),
                pc.binary_join_element_wise("t-", str(cfg.seed), "-", pa.array(task).cast(pa.string()), ""),
                pa.nulls(n, pa.string()),
            ),
        },
        schema=EVENT_SCHEMA,
    )
    outcomes, outcome_landing = generate_tasks.outcomes(
        task_rng,
        table,
        task,
        catalog.model_ids,
        n_days,
        int(days[0].astype("datetime64[us]").astype(np.int64)),
        cfg.seed,
        account_ids,
    )
    outcomes = outcomes.append_column("landing_date", pa.array(days[outcome_landing]).cast(pa.date32()))
    table, landing, dups, late = _arrivals(rng, cfg, table, event_day)
    table = table.append_column("landing_date", pa.array(days[landing]).cast(pa.date32()))
    accounts = _account_rows(
        cfg, account_ids, plan_names, plan_idx, tz_names, tz_idx, joined, leaves, upgrade_day, day_list
    )
    return Generated(events=table, accounts=accounts, duplicates=dups, late=late, outcomes=outcomes)


def _base_speed(model_id: str) -> float:
    """Output tokens per second at the standard tier: small and fast models are quicker."""
    if "spark" in model_id:
        return 900.0
    if "mini" in model_id:
        return 150.0
    return 70.0


def _tokens(rng: np.random.Generator, n: int, in_log: float, out_log: float) -> tuple[np.ndarray, np.ndarray]:
    inp = np.clip(rng.lognormal(in_log, 1.0, n), 1, 400_000).astype(np.int64)
    out = np.clip(rng.lognormal(out_log, 0.9, n), 1, 64_000).astype(np.int64)
    return inp, out


def _pool_model_events(
    catalog, cfg, rng, mid, plan_names, plan_idx, activity, active, days, acc, day, tokens
):
    """Requests for a model with its own pool: adoption, churn to a heavy core, backup-tank use."""
    n_acc, n_days = len(plan_idx), len(days)
    model = catalog.model(mid)
    eligible_plans = {p.id for p in catalog.plans if any(mid in pool.models for pool in p.pools)}
    eligible = np.array([plan_names[i] in eligible_plans for i in plan_idx])
    launch = (np.datetime64(model.launched) - days[0]).astype(np.int64)
    end = (np.datetime64(model.retires) - days[0]).astype(np.int64) if model.retires else n_days
    adopts = eligible & (rng.random(n_acc) < 0.6)
    adopt_day = launch + (rng.geometric(0.22, n_acc) - 1) * 7 + rng.integers(0, 7, n_acc)
    threshold = np.quantile(activity[adopts], 0.96) if adopts.any() else np.inf
    heavy = adopts & (activity >= threshold)
    stay = np.where(heavy, n_days * 2, (rng.exponential(5.0, n_acc) * 7).astype(np.int64) + 7)
    drop_day = adopt_day + stay
    d = np.arange(n_days)[None, :]
    using = adopts[:, None] & (d >= adopt_day[:, None]) & (d < drop_day[:, None]) & (d < end) & active

    # Main-pool exhaustion per (account, day): cumulative ordinary tokens within the UTC week.
    per_cell = np.bincount(acc * n_days + day, weights=tokens, minlength=n_acc * n_days).reshape(
        n_acc, n_days
    )
    week = ((days.astype(np.int64) + 3) // 7).astype(np.int64)
    week_start = np.searchsorted(week, week)
    cum = np.cumsum(per_cell, axis=1)
    before = cum - per_cell - np.where(week_start > 0, cum[:, np.maximum(week_start - 1, 0)], 0)
    allowance = np.array([_main_allowance(catalog, plan_names[i], [mid]) for i in plan_idx])
    exhausted = before >= 0.9 * allowance[:, None]
    daily_rate = np.where(exhausted, 4.0, 0.25) * np.sqrt(activity)[:, None] * (1 + 2 * heavy)[:, None]
    counts = rng.poisson(daily_rate * using)
    cell = np.repeat(np.arange(n_acc * n_days), counts.ravel())
    return cell // n_days, cell % n_days, np.full(len(cell), catalog.model_ids.index(mid))


def _arrivals(rng, cfg: GeneratorConfig, table: pa.Table, event_day: np.ndarray):
    """Landing day per row: most on their event day, some late; resends are exact copies."""
    n = table.num_rows
    landing = event_day.copy()
    late = rng.random(n) < cfg.late_rate
    landing[late] += 1 + np.minimum(rng.geometric(0.5, late.sum()) - 1, cfg.late_max_days - 1)
    dup_idx = np.flatnonzero(rng.random(n) < cfg.duplicate_rate)
    dup_landing = landing[dup_idx] + rng.integers(0, 2, len(dup_idx))
    table = pa.concat_tables([table, table.take(pa.array(dup_idx))])
    landing = np.minimum(np.concatenate([landing, dup_landing]), cfg.days - 1)
    return table, landing, len(dup_idx), int(late.sum())


# -- writing landing files ----------------------------------------------------------------------
