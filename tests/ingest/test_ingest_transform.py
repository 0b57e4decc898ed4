"""The ingest composite on TestPipeline: IngestEvents over a real landing file, and its stats CombineFn."""

from __future__ import annotations

import json

import apache_beam as beam
import pyarrow.parquet as pq
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.ingest.events import IngestEvents
from pipelines.ingest.stats import MergeStats
from pipelines.ingest.units import ReadUnit
from pipelines.ingest.validate import Rules

OPTIONS = ["--runner=FnApiRunner"]


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
