"""The meter's composite on TestPipeline: MeterQuota over real lake files and accounts, its output
asserted per kind (billable usage, the local x UTC day bridge, pool balances)."""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from billing.plan import attach_accounts
from pipelines import lake
from pipelines.ingest import events as ingest
from pipelines.quota.transforms import MeterQuota
from pipelines.warehouse.accounts import load_accounts, load_accounts_table
from pipelines.warehouse.engine import make_engine
from tests.conftest import date_args, small_dates

OPTIONS = ["--runner=FnApiRunner"]


def test_meter_quota_returns_every_metered_token_once_per_shard_and_kind(sqlite_settings, catalog, tmp_path):
    engine = make_engine(sqlite_settings.database_url)
    load_accounts(engine, Path(sqlite_settings.landing) / "accounts.csv", catalog)
    dates = small_dates()
    ingest.main([*sqlite_settings.argv(), *date_args(dates)])
    accounts = load_accounts_table(engine)
    files = [f for d in dates for f in lake.list_files(lake.partition(sqlite_settings.lake, lake.EVENTS, d))]
    first, last = dates[1], dates[-2]  # events of the days around them are read, not billed
    shards = 3

    p = TestPipeline(options=beam.options.pipeline_options.PipelineOptions(OPTIONS))
    metered = (
        p
        | beam.Create(lake.row_group_units(files))
        | MeterQuota(catalog, accounts, first, last, str(tmp_path / "stage"), shards)
    )

    def totals(rows):  # type: ignore[no-untyped-def]
        """(kind, shards seen, tokens) over every (kind, shard, table) the composite returned."""
        out = {}
        for kind, shard, table in rows:
            tokens = 0
            if kind.startswith("events_"):  # not tokens: the events read, and allocated
                tokens = pc.sum(table["events"]).as_py()
            elif kind not in ("pools", "pool_draws", "crossings") and table.num_rows:
                tokens = pc.sum(table["included_tokens"]).as_py() + pc.sum(table["overage_tokens"]).as_py()
            seen, total = out.get(kind, (set(), 0))
            out[kind] = (seen | {shard}, total + tokens)
        return sorted((kind, sorted(seen), total) for kind, (seen, total) in out.items())

    events = attach_accounts(
        ds.dataset(f"{sqlite_settings.lake}/events", format="parquet").to_table(), accounts
    )
    local = events["local_day"]
    billed = events.filter(pc.and_(pc.greater_equal(local, first), pc.less_equal(local, last)))
    tokens = pc.sum(pc.add(billed["input_tokens"], billed["output_tokens"])).as_py()
    assert tokens > 0
    read = pc.sum(pc.less_equal(local, last).cast(pa.int64())).as_py()  # the days before first too
    everyone = list(range(shards))
    assert_that(
        metered | "All" >> beam.combiners.ToList() | "Totals" >> beam.Map(totals),
        equal_to(
            [
                [
                    ("billable", everyone, tokens),
                    ("crossings", everyone, 0),
                    ("events_allocated", everyone, read),
                    ("metered_days", everyone, tokens),
                    ("pool_draws", everyone, 0),
                    ("pools", everyone, 0),
                ]
            ]
        ),
    )

    def drawn_is_included(rows):  # type: ignore[no-untyped-def]
        """What the pools covered per day and model adds up to the included tokens, per shard."""
        out = {}
        for kind, shard, table in rows:
            if kind in ("billable", "pool_draws") and table.num_rows:
                column = "included_tokens" if kind == "billable" else "tokens"
                out.setdefault(shard, {}).setdefault(kind, 0)
                out[shard][kind] += pc.sum(table[column]).as_py()
        return all(v.get("billable", 0) == v.get("pool_draws", 0) for v in out.values()) and bool(out)

    assert_that(
        metered | "AllDraws" >> beam.combiners.ToList() | "Drawn" >> beam.Map(drawn_is_included),
        equal_to([True]),
        label="DrawnIsIncluded",
    )

    def pool_rows(rows):  # type: ignore[no-untyped-def]
        """Every pool balance returned is within its allowance and overlaps the metered dates."""
        pools = pa.concat_tables([t for kind, _, t in rows if kind == "pools"])
        ok = pc.and_(
            pc.less_equal(pools["used"], pools["allowance"]),
            pc.and_(
                pc.greater_equal(pools["period_end"], pa.scalar(first)),
                pc.less_equal(pools["period_start"], pa.scalar(last)),
            ),
        )
        return [pools.num_rows > 0, pc.all(ok).as_py()]

    assert_that(
        metered | "AllPools" >> beam.combiners.ToList() | "PoolRows" >> beam.Map(pool_rows),
        equal_to([[True, True]]),
        label="pools",
    )
    p.run().wait_until_finish()
    # The events read, counted per read unit, staged by the composite itself: the same events.
    staged = lake.list_files(str(tmp_path / "stage" / "events_read"))
    assert pc.sum(pa.concat_tables([lake.read_parquet(f) for f in staged])["events"]).as_py() == read
