"""Daily-usage aggregation: this pipeline vs DuckDB vs a naive one-dict-per-event Beam pipeline.

    .venv/bin/python -m benchmarks.aggregate [--sizes 5000000 50000000] [--naive-events 1000000]

For each size, the project's generator writes events into lake partitions (Parquet, 256k-row row
groups, 30 days, 5,000 accounts); then, as separate processes and in one run:
- `usage-billing usage aggregate` in process (FnApiRunner) with one thread (the default), two threads
  and two worker processes, loading
  usage_daily, usage_daily_errors and model_daily into SQLite;
- DuckDB (2 threads) computing the same outputs (exact quantiles) from the same files into Parquet;
- at --naive-events only: the same sums in Beam with one Python dict per event, scaled to events/s.
Targets (issue 4): wall at most 2x DuckDB's at 50M; at least 50x the naive pipeline's events/s;
peak RSS under 1 GB at 50M and growing less than 25% from 5M to 50M.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
from pathlib import Path

from benchmarks.common import ROOT, cli, command_line, machine, run_duckdb, run_measured, write_section

START = dt.date(2026, 4, 1)
DAYS = 30
MODES = {  # aggregation's default is one thread (ingest and metering default to a thread per core)
    "1 thread (default)": [],
    "2 threads": ["--", "--direct_running_mode=multi_threading", "--direct_num_workers=2"],
    "2 worker processes": ["--", "--direct_running_mode=multi_processing", "--direct_num_workers=2"],
}

DUCKDB_SQL = """
SET threads = 2; SET enable_progress_bar = false;
CREATE VIEW ev AS SELECT *, CAST(event_time AS DATE) AS day FROM read_parquet('{lake}/events/*/*.parquet');
COPY (SELECT day, account_id, model, speed_tier, count(*) AS requests,
             count(*) FILTER (WHERE status = 'error') AS errors, sum(input_tokens) AS input_tokens,
             sum(cached_input_tokens) AS cached_input_tokens, sum(output_tokens) AS output_tokens,
             sum(CASE WHEN duration_ms > 0 THEN duration_ms ELSE 0 END) AS output_ms,
             sum(CASE WHEN duration_ms > 0 THEN output_tokens ELSE 0 END) AS timed_output_tokens
      FROM ev GROUP BY ALL) TO '{out}/usage.parquet' (FORMAT parquet);
COPY (SELECT day, account_id, model, speed_tier, coalesce(error_code, 'unknown') AS error_code, count(*) AS errors
      FROM ev WHERE status = 'error' GROUP BY ALL) TO '{out}/errors.parquet' (FORMAT parquet);
COPY (SELECT day, model, speed_tier, count(DISTINCT account_id) AS active_accounts, count(*) AS requests,
             quantile_cont(output_tokens * 1000.0 / duration_ms, 0.5) FILTER (WHERE duration_ms > 0 AND output_tokens > 0) AS median_tps,
             quantile_cont(output_tokens * 1000.0 / duration_ms, 0.95) FILTER (WHERE duration_ms > 0 AND output_tokens > 0) AS p95_tps
      FROM ev GROUP BY ALL) TO '{out}/model_daily.parquet' (FORMAT parquet);
COPY (SELECT date_trunc('week', day) AS week_start, model, speed_tier, count(DISTINCT account_id) AS active_accounts
      FROM ev GROUP BY ALL) TO '{out}/weekly.parquet' (FORMAT parquet);
SELECT count(*) FROM read_parquet('{out}/usage.parquet');
"""

NAIVE = r"""
import sys, apache_beam as beam, pyarrow.parquet as pq
from pipelines import lake
units = lake.row_groups(sys.argv[1:])

def to_dicts(unit):
    path, g = unit
    for row in pq.ParquetFile(path).read_row_group(g).to_pylist():   # one dict per event
        yield row

def keyed(e):
    return ((e["event_time"].date().isoformat(), e["account_id"], e["model"], e["speed_tier"]),
            (1, int(e["status"] == "error"), e["input_tokens"], e["cached_input_tokens"], e["output_tokens"]))

with beam.Pipeline(options=beam.options.pipeline_options.PipelineOptions(["--runner=FnApiRunner"])) as p:
    (p | beam.Create(units) | beam.FlatMap(to_dicts) | beam.Map(keyed)
       | beam.CombinePerKey(beam.combiners.TupleCombineFn(sum, sum, sum, sum, sum)) | beam.combiners.Count.Globally()
       | beam.Map(print))
"""


def _generate(lake_root: Path, events: int) -> int:
    """Exactly ``events`` events into lake partitions, generated in 3-day chunks (bounded memory)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipelines.jobs.generate import GeneratorConfig, generate
    from schemas.catalog import load_catalog

    catalog = load_catalog(ROOT / "config" / "catalog.toml")
    chunk_days, written = 3, 0
    chunks = DAYS // chunk_days
    for i in range(chunks):
        cfg = GeneratorConfig(
            start=START + dt.timedelta(days=i * chunk_days),
            days=chunk_days,
            accounts=5000,
            events_per_day=int(events / DAYS * 1.2),
            seed=100 + i,
            duplicate_rate=0,
            late_rate=0,
        )
        table = generate(catalog, cfg).events.drop_columns(["landing_date"])
        day = pc.cast(table["event_time"], "date32")
        for d in pc.unique(day).to_pylist():
            part = table.filter(pc.equal(day, d)).slice(0, events - written)  # exactly `events` in all
            if part.num_rows == 0:
                continue
            folder = lake_root / "events" / f"date={d}"
            folder.mkdir(parents=True, exist_ok=True)
            pq.write_table(part, folder / "part-0000.parquet", row_group_size=256 * 1024, compression="zstd")
            written += part.num_rows
    return written


def _ours(lake_root: Path, extra: list[str]) -> tuple[float, float]:
    db = lake_root.parent / "w.db"
    db.unlink(missing_ok=True)
    base = cli(db, lake_root)
    run_measured([*base, "db", "upgrade"])
    end = START + dt.timedelta(days=DAYS - 1)
    wall, rss, out = run_measured(
        [*base, "usage", "aggregate", "--from", START.isoformat(), "--to", end.isoformat(), *extra]
    )
    assert "usage_daily" in out, out
    return wall, rss


def _duckdb(lake_root: Path) -> tuple[float, float]:
    out = lake_root.parent / "duck"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    sql = DUCKDB_SQL.format(lake=lake_root, out=out)
    wall, rss, _ = run_duckdb(sql)
    return wall, rss


def _naive(lake_root: Path) -> tuple[float, float]:
    files = sorted(str(p) for p in (lake_root / "events").rglob("*.parquet"))
    wall, rss, _ = run_measured([sys.executable, "-c", NAIVE, *files])
    return wall, rss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[5_000_000, 50_000_000])
    parser.add_argument("--naive-events", type=int, default=1_000_000)
    parser.add_argument("--workdir", default="/tmp/ub-bench-aggregate")
    args = parser.parse_args()
    work = Path(args.workdir)
    rows = []
    results: dict[int, dict[str, tuple[float, float]]] = {}
    for size in [args.naive_events, *args.sizes]:
        shutil.rmtree(work, ignore_errors=True)
        lake_root = work / "lake"
        n = _generate(lake_root, size)
        r: dict[str, tuple[float, float]] = {}
        if size == args.naive_events:
            r["naive"] = _naive(lake_root)
        r["duckdb"] = _duckdb(lake_root)
        for mode, extra in MODES.items():
            r[mode] = _ours(lake_root, extra)
        results[n] = r
        for name, (wall, rss) in r.items():
            label = {"naive": "Beam, one dict per event", "duckdb": "DuckDB, 2 threads"}.get(
                name, f"usage-billing, {name}"
            )
            rows.append(
                f"| {n:,} | {label} | {wall:.1f} s | {n / wall:,.0f} | {rss:,.0f} MB | "
                f"{r['duckdb'][0] / wall:.2f} |"
            )
        print(rows[-len(r) :], flush=True)
    shutil.rmtree(work, ignore_errors=True)
    sizes = sorted(results)
    naive_n = sizes[0]
    naive_eps = naive_n / results[naive_n]["naive"][0]
    best = {n: max(n / results[n][m][0] for m in MODES) for n in sizes}
    small, large = sizes[1], sizes[-1]
    default = "1 thread (default)"
    rss_small, rss_large = results[small][default][1], results[large][default][1]
    threads = results[large]["2 threads"]
    memory_x, speed_x = threads[1] / rss_large, results[large][default][0] / threads[0]
    body = "\n".join(rows)
    write_section(
        "Daily usage aggregation (issue 4)",
        f"""
Command: `{command_line("benchmarks.aggregate")}`
Machine: {machine()}
Data: exactly the stated number of generator events, over up to {DAYS} days, 5,000 accounts, Parquet with 256k-row row groups.

| events | engine | wall | events/s | peak RSS (tree) | speed vs DuckDB |
|---|---|---:|---:|---:|---:|
{body}

- At {large:,} events: best of this pipeline {large / best[large]:.1f} s vs DuckDB {results[large]["duckdb"][0]:.1f} s
  ({results[large]["duckdb"][0] / (large / best[large]):.2f}x DuckDB's speed; target: at least 0.5x).
- Throughput vs the naive one-dict-per-event pipeline: {best[large] / naive_eps:.0f}x (target: at least 50x).
- Peak RSS (the default, one thread): {rss_small:,.0f} MB at {small:,} and {rss_large:,.0f} MB at {large:,} events,
  {100 * (rss_large / rss_small - 1):+.0f}% (targets: under 1 GB; under +25%).
- Two threads hold two row groups' work at once ({memory_x:.1f}x the memory at {large:,} for {speed_x:.2f}x the speed);
  two worker processes each hold their own Beam and Arrow runtime.
- This pipeline also loads usage_daily, usage_daily_errors and model_daily into
  SQLite in one transaction; DuckDB writes its results to Parquet. Wall includes process start-up.
""",
    )


if __name__ == "__main__":
    main()
