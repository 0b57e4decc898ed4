"""The usage stage's composite on TestPipeline: DailyUsage over real lake files and its CombineFn."""

from __future__ import annotations

import datetime as dt

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.usage.aggregate import CombineDayPartials, DailyUsage, batches_of
from pipelines.usage.partials import partial_usage
from schemas.events import LAKE_SCHEMA

OPTIONS = ["--runner=FnApiRunner"]


def _lake_file(path, rows):  # type: ignore[no-untyped-def]
    n = len(rows)
    table = pa.table(
        {
            "event_id": [f"e{i}" for i in range(n)],
            "event_time": pa.array([r[0] for r in rows], pa.timestamp("us", tz="UTC")),
            "account_id": [r[1] for r in rows],
            "user_id": pa.nulls(n, pa.string()),
            "model": [r[2] for r in rows],
            "speed_tier": [r[3] for r in rows],
            "input_tokens": [r[4] for r in rows],
            "cached_input_tokens": [r[5] for r in rows],
            "output_tokens": [r[6] for r in rows],
            "duration_ms": pa.array([r[8] if len(r) > 8 else None for r in rows], pa.int64()),
            "status": [r[7] for r in rows],
            "error_code": pa.array(["timeout" if r[7] == "error" else None for r in rows], pa.string()),
            "task_id": pa.nulls(n, pa.string()),
            "_landing_date": [dt.date(2026, 3, 2)] * n,
            "_source_file": ["x"] * n,
        },
        schema=LAKE_SCHEMA,
    )
    pq.write_table(table, path, row_group_size=2)


@pytest.mark.parametrize("tasks", [1, 3], ids=["a day across batches", "a batch a unit"])
def test_daily_usage_sums_per_account_model_tier_and_day(tmp_path, tasks):
    d1 = dt.datetime(2026, 3, 1, 23, 59, tzinfo=dt.UTC)
    d2 = dt.datetime(2026, 3, 2, 0, 1, tzinfo=dt.UTC)
    _lake_file(
        tmp_path / "a.parquet",
        [
            (d1, "acct-1", "m", "standard", 100, 10, 5, "ok", 500),
            (d1, "acct-1", "m", "standard", 50, 0, 1, "error"),
            (d2, "acct-1", "m", "standard", 7, 7, 7, "ok", 70),
            (d2, "acct-2", "m", "priority", 1, 0, 2, "ok", 10),
            (d2, "acct-1", "m", "standard", 3, 0, 0, "ok"),
        ],
    )
    units = [((str(tmp_path / "a.parquet"), g),) for g in range(3)]  # 5 rows in row groups of 2
    batches = batches_of(units, tasks)
    assert [u for b in batches for u in b] == units and len(batches) == min(3, 2 * tasks)
    with TestPipeline(options=beam.options.pipeline_options.PipelineOptions(OPTIONS)) as p:
        days = p | beam.Create(batches) | DailyUsage()
        usage = days | "Usage" >> beam.FlatMap(
            lambda kv: [tuple(r.values()) for r in kv[1].usage.to_pylist()]
        )
        errors = days | "Errors" >> beam.FlatMap(
            lambda kv: [tuple(r.values()) for r in kv[1].errors.to_pylist()]
        )
        speed = days | "Speed" >> beam.FlatMap(
            lambda kv: [(r["model"], r["speed_tier"], r["requests"]) for r in kv[1].speed.to_pylist()]
        )
        assert_that(
            usage,
            equal_to(
                [
                    (dt.date(2026, 3, 1), "acct-1", "m", "standard", 2, 1, 150, 10, 6, 500, 5),
                    (dt.date(2026, 3, 2), "acct-1", "m", "standard", 2, 0, 10, 7, 7, 70, 7),
                    (dt.date(2026, 3, 2), "acct-2", "m", "priority", 1, 0, 1, 0, 2, 10, 2),
                ]
            ),
            label="CheckUsage",
        )
        assert_that(
            errors,
            equal_to([(dt.date(2026, 3, 1), "acct-1", "m", "standard", "timeout", 1)]),
            label="CheckErrors",
        )
        assert_that(
            speed,
            equal_to([("m", "standard", 1), ("m", "standard", 1), ("m", "priority", 1)]),
            label="CheckSpeed",
        )


def test_combine_fn_merges_partials_in_any_grouping():
    events = pa.table(
        {
            "event_time": pa.array(
                [dt.datetime(2026, 3, 1, 9, tzinfo=dt.UTC)] * 3, pa.timestamp("us", tz="UTC")
            ),
            "account_id": ["a", "a", "b"],
            "model": ["m"] * 3,
            "speed_tier": ["standard"] * 3,
            "status": ["ok", "error", "ok"],
            "error_code": [None, "timeout", None],
            "input_tokens": [5, 6, 7],
            "cached_input_tokens": [1, 0, 0],
            "output_tokens": [2, 0, 100],
            "duration_ms": [1000, None, 1000],
        }
    )
    fn = CombineDayPartials()
    one = fn.add_input(fn.create_accumulator(), partial_usage(events.slice(0, 1)))
    two = fn.add_input(
        fn.add_input(fn.create_accumulator(), partial_usage(events.slice(1, 1))),
        partial_usage(events.slice(2, 1)),
    )
    merged = fn.extract_output(fn.merge_accumulators([two, one]))
    whole = partial_usage(events)
    for name in ("usage", "errors", "speed"):
        key = [(c, "ascending") for c in getattr(whole, name).column_names]
        assert getattr(merged, name).sort_by(key).equals(getattr(whole, name).sort_by(key)), name
    assert (
        merged.usage.filter(pa.compute.equal(merged.usage["account_id"], "a")).to_pylist()[0]["requests"] == 2
    )
