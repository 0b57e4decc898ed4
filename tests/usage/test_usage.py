"""Daily usage outputs: speed quantiles from histograms, model_daily, weekly accounts, errors by code."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from pipelines.adoption import weekly
from pipelines.jobs.generate import GeneratorConfig, generate
from pipelines.jobs.landing import write_landing
from pipelines.usage.partials import DayPartials, model_daily, partial_usage, quantiles_from_histogram
from pipelines.warehouse.engine import make_engine
from schemas.warehouse import ModelDaily, ModelWeekly, UsageDailyError
from tests.conftest import run_day


def _events(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    out = rng.integers(1, 5000, n)
    ms = rng.integers(50, 60_000, n)
    return pa.table(
        {
            "event_time": pa.array(
                [dt.datetime(2026, 3, 2, 12, tzinfo=dt.UTC)] * n, pa.timestamp("us", tz="UTC")
            ),
            "account_id": pa.array([f"a{i % 97}" for i in range(n)]),
            "model": ["m"] * n,
            "speed_tier": pa.array(np.where(rng.random(n) < 0.3, "priority", "standard").astype(object)),
            "status": ["ok"] * n,
            "error_code": pa.nulls(n, pa.string()),
            "input_tokens": out * 3,
            "cached_input_tokens": out,
            "output_tokens": out,
            "duration_ms": ms,
        }
    )


def test_histogram_quantiles_are_within_two_percent_of_exact():
    events = _events(20_000)
    parts = [partial_usage(events.slice(i, 5000)) for i in range(0, 20_000, 5000)]
    q = quantiles_from_histogram(DayPartials.combine(parts).speed)
    for tier in ("standard", "priority"):
        sel = events.filter(pc.equal(events["speed_tier"], tier))
        tps = sel["output_tokens"].to_numpy() / sel["duration_ms"].to_numpy() * 1000
        row = q.filter(pc.equal(q["speed_tier"], tier)).to_pylist()[0]
        assert row["q50"] == pytest.approx(np.quantile(tps, 0.5), rel=0.02)
        assert row["q95"] == pytest.approx(np.quantile(tps, 0.95), rel=0.02)


def test_model_daily_counts_distinct_accounts_and_sums():
    events = _events(3000, seed=1)
    partial = partial_usage(events)
    daily = model_daily(partial.usage, partial.speed)
    std = daily.filter(pc.equal(daily["speed_tier"], "standard")).to_pylist()[0]
    sel = events.filter(pc.equal(events["speed_tier"], "standard"))
    assert std["active_accounts"] == len(pc.unique(sel["account_id"]))
    assert std["requests"] == sel.num_rows
    assert std["output_tokens"] == pc.sum(sel["output_tokens"]).as_py()
    assert std["median_output_tps"] > 0 and std["p95_output_tps"] >= std["median_output_tps"]


@pytest.fixture
def nine_days(tmp_path, catalog, sqlite_settings):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    cfg = GeneratorConfig(
        start=dt.date(2026, 3, 2), days=9, accounts=120, events_per_day=800, seed=21, late_rate=0.0
    )
    write_landing(generate(catalog, cfg), cfg, str(tmp_path / "landing9"))
    settings = replace(sqlite_settings, landing=str(tmp_path / "landing9"))
    dates = [cfg.start + dt.timedelta(days=i) for i in range(cfg.days)]
    run_day(settings, dates)
    return settings


def test_weekly_accounts_only_for_complete_iso_weeks(nine_days, catalog):
    engine = make_engine(nine_days.database_url)
    weekly.refresh(engine, catalog.adoption, dt.date(2026, 3, 10), weeks_back=4)
    with Session(engine) as session:
        weeks = session.scalars(select(ModelWeekly)).all()
        daily = session.scalars(select(ModelDaily)).all()
        errors = session.scalars(select(UsageDailyError)).all()
    assert {w.week_start for w in weeks} == {dt.date(2026, 3, 2)}  # the week of Mar 9 has 2 of 7 days
    lake = ds.dataset(f"{nine_days.lake}/events", format="parquet").to_table()
    in_week = lake.filter(pc.less(lake["event_time"], pa.scalar(dt.datetime(2026, 3, 9, tzinfo=dt.UTC))))
    for w in weeks:
        sel = in_week.filter(pc.equal(in_week["model"], w.model))
        if w.speed_tier != "*":
            sel = sel.filter(pc.equal(sel["speed_tier"], w.speed_tier))
        assert w.active_accounts == len(pc.unique(sel["account_id"])), (w.model, w.speed_tier)
    assert sum(d.requests for d in daily) == lake.num_rows
    failed = lake.filter(pc.equal(lake["status"], "error"))
    assert sum(e.errors for e in errors) == failed.num_rows
    assert {e.error_code for e in errors} <= {
        "context_length_exceeded",
        "rate_limited",
        "server_error",
        "timeout",
    }
