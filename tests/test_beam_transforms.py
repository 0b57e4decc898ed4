"""The Beam transforms on a TestPipeline, checked with assert_that."""

from __future__ import annotations

import datetime as dt
import json

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.ingest.events import IngestEvents
from pipelines.ingest.stats import MergeStats
from pipelines.ingest.units import ReadUnit
from pipelines.ingest.validate import Rules
from pipelines.usage.aggregate import CombineDayPartials, DailyUsage
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
            "_landing_date": [dt.date(2026, 3, 2)] * n,
            "_source_file": ["x"] * n,
        },
        schema=LAKE_SCHEMA,
    )
    pq.write_table(table, path, row_group_size=2)


def test_daily_usage_sums_per_account_model_tier_and_day(tmp_path):
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
    with TestPipeline(options=beam.options.pipeline_options.PipelineOptions(OPTIONS)) as p:
        days = p | beam.Create(units) | DailyUsage()
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


def test_ingest_transform_stages_clean_rows_and_returns_quarantine_and_counts(tmp_path):
    landing = tmp_path / "landing" / "2026-03-02"
    landing.mkdir(parents=True)
    good = {
        "event_time": "2026-03-02T10:00:00Z",
        "account_id": "a",
        "model": "m",
        "speed_tier": "standard",
        "input_tokens": 10,
        "cached_input_tokens": 0,
        "output_tokens": 1,
        "status": "ok",
    }
    lines = [json.dumps({**good, "event_id": f"e{i}"}) for i in range(5)]
    lines += [
        json.dumps({**good, "event_id": "e0"}),
        "{broken",
        json.dumps({**good, "event_id": "z", "model": "?"}),
    ]
    (landing / "f.jsonl").write_text("\n".join(lines))
    stage = str(tmp_path / "stage")
    p = TestPipeline(options=beam.options.pipeline_options.PipelineOptions(OPTIONS))
    ingested = (
        p
        | beam.Create([ReadUnit(str(landing / "f.jsonl"), "2026-03-02")])
        | IngestEvents(Rules(frozenset({"m"})), 2, str(tmp_path / "lake"), stage, [])
    )

    def counts(pairs):  # type: ignore[no-untyped-def]
        return [(day, s["rows_read"], s["clean"], s["duplicates"], s["quarantined"]) for day, s in pairs]

    def quarantined(pairs):  # type: ignore[no-untyped-def]
        return [(day, t["row_number"].to_pylist(), t["reason"].to_pylist()) for day, t in pairs]

    assert_that(
        ingested["stats"] | "AllStats" >> beam.combiners.ToList() | "Counts" >> beam.Map(counts),
        equal_to([[("2026-03-02", 8, 5, 1, {"malformed_json": 1, "unknown_model": 1})]]),
        label="stats",
    )
    assert_that(
        ingested["quarantine"] | "AllQuarantine" >> beam.combiners.ToList() | "Rows" >> beam.Map(quarantined),
        equal_to([[("2026-03-02", [7, 8], ["malformed_json", "unknown_model"])]]),
        label="quarantine",
    )
    result = p.run()
    result.wait_until_finish()
    reasons = {
        c.key.metric.name: c.committed
        for c in result.metrics().query(MetricsFilter().with_namespace("quarantine"))["counters"]
    }
    assert reasons == {"malformed_json": 1, "unknown_model": 1}
    # the clean rows, deduplicated, are the staged shard files (the caller stages quarantine and stats)
    staged = pq.read_table(tmp_path / "stage" / "events" / "date=2026-03-02")
    assert sorted(staged["event_id"].to_pylist()) == ["e0", "e1", "e2", "e3", "e4"]
    assert not (tmp_path / "stage" / "quarantine").exists() and not (tmp_path / "stage" / "stats").exists()


def test_merge_stats_adds_nested_counts():
    fn = MergeStats()
    acc = fn.add_input(fn.create_accumulator(), {"rows_read": 2, "quarantined": {"x": 1}, "late": {}})
    acc = fn.merge_accumulators(
        [acc, fn.add_input(fn.create_accumulator(), {"rows_read": 3, "quarantined": {"x": 2, "y": 1}})]
    )
    assert acc["rows_read"] == 5 and acc["quarantined"] == {"x": 3, "y": 1}
