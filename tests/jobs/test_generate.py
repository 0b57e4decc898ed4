from __future__ import annotations

import datetime as dt
import gzip

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.jobs.generate import GeneratorConfig, generate
from pipelines.jobs.landing import to_json_lines, write_landing
from schemas.events import EVENT_SCHEMA, RAW_JSON_SCHEMA
from schemas.jsonl import read_json_lines

SPARK = "gpt-5.3-codex-spark"


def test_same_seed_same_events_other_seed_other_events(catalog):
    cfg = GeneratorConfig(days=6, accounts=100, events_per_day=800, seed=3)
    a, b = generate(catalog, cfg), generate(catalog, cfg)
    assert a.events.equals(b.events)
    assert a.accounts == b.accounts
    c = generate(catalog, GeneratorConfig(days=6, accounts=100, events_per_day=800, seed=4))
    assert not a.events.equals(c.events)


def test_same_seed_same_files(catalog, tmp_path):
    cfg = GeneratorConfig(days=3, accounts=80, events_per_day=500, seed=5)
    for name in ("a", "b"):
        write_landing(generate(catalog, cfg), cfg, str(tmp_path / name))
    day = tmp_path / "a" / "2026-02-02" / "batch-2026-02-02.jsonl.gz"
    twin = tmp_path / "b" / "2026-02-02" / "batch-2026-02-02.jsonl.gz"
    assert gzip.decompress(day.read_bytes()) == gzip.decompress(twin.read_bytes())
    assert pq.read_table(tmp_path / "a" / "2026-02-02" / "gateway-2026-02-02.parquet").equals(
        pq.read_table(tmp_path / "b" / "2026-02-02" / "gateway-2026-02-02.parquet")
    )
    assert (tmp_path / "a" / "accounts.csv").read_text() == (tmp_path / "b" / "accounts.csv").read_text()


def test_scenario_shape(catalog):
    """The fast model rises, then declines to a few dozen weekly accounts; ultrafast from Aug 13."""
    gen = generate(catalog, GeneratorConfig(accounts=3000, events_per_day=4000, seed=9))
    ev = gen.events
    assert ev.schema.names[:-1] == EVENT_SCHEMA.names
    spark = ev.filter(pc.equal(ev["model"], SPARK))
    week = pc.floor_temporal(spark["event_time"], unit="week", week_starts_monday=True)
    weekly = (
        pa.table({"w": week, "a": spark["account_id"]}).group_by("w").aggregate([("a", "count_distinct")])
    )
    weekly = weekly.sort_by("w")["a_count_distinct"].to_pylist()
    peak = int(np.argmax(weekly))
    assert 2 <= peak <= 10, weekly
    last_full = weekly[-2]
    assert weekly[peak] > 4 * last_full and 10 <= last_full <= 80, weekly
    assert pc.min(spark["event_time"]).as_py().date() >= dt.date(2026, 2, 12)
    assert pc.max(spark["event_time"]).as_py().date() < dt.date(2026, 9, 11)
    ultra = ev.filter(pc.equal(ev["speed_tier"], "ultrafast"))
    assert ultra.num_rows > 0
    assert set(ultra["model"].unique().to_pylist()) == {"gpt-5.6-sol"}
    assert pc.min(ultra["event_time"]).as_py().date() >= dt.date(2026, 8, 13)
    retired = ev.filter(pc.equal(ev["model"], "gpt-5.1"))
    assert pc.max(retired["event_time"]).as_py().date() < dt.date(2026, 6, 2)
    assert len({a["timezone"] for a in gen.accounts}) >= 5
    assert {a["plan"] for a in gen.accounts} == {"", "free", "plus", "pro"}


def test_resends_are_exact_copies_and_late_events_land_later(catalog):
    cfg = GeneratorConfig(
        days=10, accounts=200, events_per_day=2000, seed=2, duplicate_rate=0.01, late_rate=0.01
    )
    gen = generate(catalog, cfg)
    ev = gen.events
    ids = ev["event_id"]
    assert ev.num_rows - len(pc.unique(ids)) == gen.duplicates > 0
    event_day = pc.cast(ev["event_time"], pa.date32())
    late = pc.sum(pc.greater(ev["landing_date"], event_day)).as_py()
    assert late >= gen.late > 0
    assert pc.all(pc.greater_equal(ev["landing_date"], event_day)).as_py()


def test_json_lines_encoding_round_trips_through_the_parser(catalog):
    gen = generate(catalog, GeneratorConfig(days=2, accounts=50, events_per_day=300, seed=1))
    table = gen.events.drop_columns(["landing_date"])
    parsed = read_json_lines(to_json_lines(table), RAW_JSON_SCHEMA)
    assert parsed.rejected == []
    for name in EVENT_SCHEMA.names:
        if name != "event_time":
            assert parsed.table[name].equals(table[name]), name
    times = pc.strftime(table["event_time"], "%Y-%m-%dT%H:%M:%SZ")
    assert parsed.table["event_time"].to_pylist() == times.to_pylist()


def test_fast_model_is_a_backup_tank_used_when_the_main_pool_is_exhausted(catalog):
    """Per account and UTC week, days after the main pool ran out carry most of the fast model's use."""
    import pandas as pd

    gen = generate(catalog, GeneratorConfig(days=120, accounts=1500, events_per_day=5000, seed=4))
    ev = gen.events.select(["event_time", "account_id", "model", "input_tokens", "output_tokens"]).to_pandas()
    plans = {a["account_id"]: a["plan"] for a in gen.accounts}
    weekly_main = {
        p.id: next(pool.allowance_tokens for pool in p.pools if "*" in pool.models)
        for p in catalog.plans
        if p.id != "free"
    }
    ev = ev[ev["account_id"].map(plans).isin(weekly_main)]
    ev["day"] = ev["event_time"].dt.tz_convert("UTC").dt.floor("D")
    ev["week"] = ev["day"] - pd.to_timedelta(ev["day"].dt.day_of_week, unit="D")
    ev["tokens"] = ev["input_tokens"] + ev["output_tokens"]
    is_spark = ev["model"] == SPARK
    main = ev[~is_spark].groupby(["account_id", "week", "day"])["tokens"].sum().reset_index()
    main["before"] = main.groupby(["account_id", "week"])["tokens"].cumsum() - main["tokens"]
    main["allowance"] = main["account_id"].map(plans).map(weekly_main)
    out_of_main = main.loc[main["before"] >= main["allowance"], ["account_id", "day"]]
    exhausted = set(map(tuple, out_of_main.to_numpy()))
    spark = ev[is_spark]
    keys = zip(spark["account_id"], spark["day"], strict=True)
    on_exhausted = spark[[key in exhausted for key in keys]]
    share = len(on_exhausted) / len(spark)
    spark_days = spark.groupby(["account_id", "day"]).size()
    days_exhausted = sum((a, d) in exhausted for a, d in spark_days.index)
    # Spark users spend a minority of their active days exhausted, yet most spark requests fall on them.
    assert share > 0.5, share
    assert share > 1.5 * days_exhausted / len(spark_days), (share, days_exhausted / len(spark_days))
