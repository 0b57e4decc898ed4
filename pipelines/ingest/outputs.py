"""What an ingest run stages besides the lake partitions: each landing date's quarantined rows (one file
per dataset) and its counts."""

from __future__ import annotations

import apache_beam as beam
import pyarrow as pa
from apache_beam.metrics import Metrics

from pipelines import lake
from pipelines.ingest.commit import stats_file
from pipelines.ingest.datasets import EVENTS, Dataset
from pipelines.ingest.stats import reason_counts


class ConcatQuarantine(beam.DoFn):
    """A landing date's quarantined rows from every worker, in (source file, row number) order; each
    reason code also counts in the Beam metrics (namespace ``quarantine``, one counter per reason)."""

    def process(self, element):
        landing, tables = element
        table = pa.concat_tables(list(tables)).sort_by(
            [("source_file", "ascending"), ("row_number", "ascending")]
        )
        for reason, n in reason_counts(table).items():
            Metrics.counter("quarantine", reason).inc(n)
        yield landing, table


class StageQuarantine(beam.DoFn):
    """A landing date's quarantined rows of one dataset, as its own file of the date's quarantine."""

    def __init__(self, stage_root: str, dataset: Dataset = EVENTS) -> None:
        self.stage_root = stage_root
        self.file = dataset.quarantine_file

    def process(self, element):
        landing, table = element
        lake.write_parquet(
            lake.join(lake.partition(self.stage_root, lake.QUARANTINE, landing), self.file), table
        )


class StageStats(beam.DoFn):
    def __init__(self, stage_root: str, dataset: Dataset = EVENTS) -> None:
        self.stage_root = stage_root
        self.dataset = dataset

    def process(self, element):
        landing, stats = element
        lake.write_json(stats_file(self.stage_root, landing, self.dataset), stats)
