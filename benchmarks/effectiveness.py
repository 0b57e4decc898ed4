"""Effectiveness: this pipeline vs DuckDB computing the same groups from the same lake files.

    .venv/bin/python -m benchmarks.effectiveness [--events 10000000] [--tasks 2000000] [--weeks 4]

Writes a lake of ``--events`` usage events in ``--tasks`` tasks (about five requests each, a few on a
second model or tier) over ``--weeks`` ISO weeks, with an outcome for 97% of the tasks and 1% orphan
outcomes, as the lake stores them (zstd Parquet, one file per date). Then, as separate processes and
in one run:
- `usage-billing effectiveness compute` over the weeks (Beam, FnApiRunner, one week at a time),
  writing task_effectiveness into SQLite and the weeks' task rows into the lake;
- DuckDB (2 threads) computing the same groups (attribution, nearest-rank percentiles, exact costs at
  the rate card in force) from the same files into Parquet; the two results are compared row by row.
Then the same again with half the weeks and half the events (the same events per week), to show that
peak memory follows a week, not the number of weeks.
Targets (issue 26): wall at most 2x DuckDB's; peak RSS under 1.5 GB and not growing with the weeks.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.common import ROOT, cli, command_line, machine, run_duckdb, run_measured, write_section

START = dt.date(2026, 8, 17)  # a Monday; every (model, tier) below has a price from 2026-08-13
PAIRS = [
    ("gpt-5.6-sol", "standard"),
    ("gpt-5.6-sol", "priority"),
    ("gpt-5.6-sol", "ultrafast"),
    ("gpt-5.3-codex-spark", "standard"),
    ("gpt-5.3-codex-spark", "priority"),
    ("gpt-5.5-mini", "standard"),
    ("gpt-5.5-mini", "priority"),
]
CLASSES = ["completion", "single_file_edit", "extraction", "multi_file", "tool_chain"]
DAY_US = 86_400_000_000


def _write_lake(lake_root: Path, events: int, tasks: int, weeks: int, seed: int = 26) -> None:
    """The lake, one week at a time (bounded memory), with the lake's own writer and layout."""
    from pipelines import lake
    from schemas.events import LAKE_SCHEMA
    from schemas.outcomes import OUTCOME_LAKE_SCHEMA

    lake.shard_count(str(lake_root), 1)
    rng = np.random.default_rng(seed)
    per_week_tasks = tasks // weeks
    per_week_events = events // weeks
    for w in range(weeks):
        t0 = np.datetime64(START + dt.timedelta(days=7 * w), "us").astype(np.int64)
        k = 1 + rng.multinomial(per_week_events - per_week_tasks, np.full(per_week_tasks, 1 / per_week_tasks))
        task = np.repeat(np.arange(per_week_tasks) + w * per_week_tasks, k)
        n = len(task)
        first = np.concatenate(([0], np.cumsum(k)[:-1]))
        start = t0 + rng.integers(0, 7 * DAY_US - 4 * 3600 * 1_000_000, per_week_tasks)
        gaps = rng.integers(5_000_000, 90_000_000, n)
        gaps[first] = 0
        offset = np.cumsum(gaps) - np.repeat(np.cumsum(gaps)[first], k)
        times = np.repeat(start, k) + offset
        pair = np.repeat(rng.integers(0, len(PAIRS), per_week_tasks), k)
        other = rng.random(n) < 0.04
        pair = np.where(other, rng.integers(0, len(PAIRS), n), pair)
        account = np.repeat(rng.integers(0, 20_000, per_week_tasks), k)
        inp = rng.integers(100, 20_000, n)
        duration = rng.integers(200, 30_000, n)
        ev = pa.table(
            {
                "event_id": pc.binary_join_element_wise(
                    "e", pa.array(np.arange(n) + w * per_week_events).cast(pa.string()), ""
                ),
                "event_time": pa.array(times).cast(pa.timestamp("us", tz="UTC")),
                "account_id": pc.binary_join_element_wise("acct-", pa.array(account).cast(pa.string()), ""),
                "user_id": pa.nulls(n, pa.string()),
                "model": pa.array([p[0] for p in PAIRS]).take(pa.array(pair)),
                "speed_tier": pa.array([p[1] for p in PAIRS]).take(pa.array(pair)),
                "input_tokens": pa.array(inp),
                "cached_input_tokens": pa.array((inp * rng.random(n) * 0.6).astype(np.int64)),
                "output_tokens": pa.array(rng.integers(1, 4, n) * 100 + rng.integers(0, 3, n)),
                "duration_ms": pa.array(duration, mask=rng.random(n) < 0.05),
                "status": pa.array(["ok"] * n),
                "error_code": pa.nulls(n, pa.string()),
                "task_id": pc.binary_join_element_wise("t", pa.array(task).cast(pa.string()), ""),
                "_landing_date": pa.array(times // DAY_US, pa.int32()).cast(pa.date32()),
                "_source_file": pa.array(["bench.parquet"] * n),
            },
            schema=LAKE_SCHEMA,
        )
        last = first + k - 1
        end = times[last] + duration[last] * 1000
        verdict = rng.random(per_week_tasks)
        rework = (verdict >= 0.6) & (verdict < 0.85)
        rework_ms = np.where(rework, rng.integers(10_000, 1_200_000, per_week_tasks), 0)
        completed = end + rng.integers(1_000_000, 60_000_000, per_week_tasks) + rework_ms * 1000
        keep = rng.random(per_week_tasks) >= 0.03  # open tasks
        orphans = per_week_tasks // 100
        ids = np.concatenate(
            [np.arange(per_week_tasks)[keep] + w * per_week_tasks, -1 - np.arange(orphans) - w * orphans]
        )
        m = len(ids)
        starts = np.concatenate([start[keep] - 5_000_000, t0 + rng.integers(0, 6 * DAY_US, orphans)])
        dones = (
            np.concatenate([completed[keep], starts[-orphans:] + 600_000_000]) if orphans else completed[keep]
        )
        cls = rng.integers(0, len(CLASSES) + 1, m)  # the last: unclassified
        oc = pa.table(
            {
                "task_id": pc.binary_join_element_wise("t", pa.array(ids).cast(pa.string()), ""),
                "account_id": pc.binary_join_element_wise(
                    "acct-",
                    pa.array(np.concatenate([account[first][keep], rng.integers(0, 20_000, orphans)])).cast(
                        pa.string()
                    ),
                    "",
                ),
                "task_class": pa.array([*CLASSES, None]).take(pa.array(cls)),
                "started_at": pa.array(starts).cast(pa.timestamp("us", tz="UTC")),
                "completed_at": pa.array(dones).cast(pa.timestamp("us", tz="UTC")),
                "outcome": pa.array(
                    np.where(
                        np.concatenate([verdict[keep], np.zeros(orphans)]) < 0.85, "accepted", "abandoned"
                    )
                ),
                "rework": pa.array(np.concatenate([rework[keep], np.zeros(orphans, bool)])),
                "rework_ms": pa.array(np.concatenate([rework_ms[keep], np.zeros(orphans, np.int64)])),
                "_landing_date": pa.array(dones // DAY_US, pa.int32()).cast(pa.date32()),
                "_source_file": pa.array(["outcomes-bench.parquet"] * m),
            },
            schema=OUTCOME_LAKE_SCHEMA,
        )
        for name, table, column in (("events", ev, "event_time"), ("outcomes", oc, "completed_at")):
            day = pc.cast(table[column], pa.date32())
            for d in pc.unique(day).to_pylist():
                folder = lake_root / name / f"date={d}"
                part = table.filter(pc.equal(day, d))
                existing = sorted(folder.glob("*.parquet")) if folder.exists() else []
                lake.write_parquet(str(folder / f"shard-{len(existing):04d}.parquet"), part)


def _prices_sql() -> str:
    from schemas.catalog import load_catalog

    catalog = load_catalog(ROOT / "config" / "catalog.toml")
    rows = ", ".join(
        f"('{p.model}', '{p.tier}', DATE '{p.effective_from}', {p.per_million('input')}::DECIMAL(18,6), "
        f"{p.per_million('cached_input')}::DECIMAL(18,6), {p.per_million('output')}::DECIMAL(18,6))"
        for p in catalog.prices
    )
    return f"CREATE TABLE prices AS SELECT * FROM (VALUES {rows}) t(model, tier, effective_from, input, cached_input, output)"


DUCKDB_SQL = """
SET threads = 2; SET enable_progress_bar = false; SET TimeZone = 'UTC';
{prices};
CREATE TABLE oc AS SELECT row_number() OVER () AS tid, account_id, task_id, task_class, started_at, completed_at,
       outcome, rework, rework_ms, CAST(started_at AS DATE) AS first_day, CAST(completed_at AS DATE) AS last_day
  FROM read_parquet('{lake}/outcomes/*/*.parquet');
CREATE TABLE j AS SELECT o.tid, e.model, e.speed_tier, e.input_tokens, e.cached_input_tokens, e.output_tokens,
       e.duration_ms, CAST(e.event_time AS DATE) AS day
  FROM read_parquet('{lake}/events/*/*.parquet') e JOIN oc o
    ON e.account_id = o.account_id AND e.task_id = o.task_id
   AND CAST(e.event_time AS DATE) BETWEEN o.first_day AND o.last_day;
CREATE TABLE jc AS SELECT j.*, (j.input_tokens - j.cached_input_tokens) * p.input + j.cached_input_tokens * p.cached_input
       + j.output_tokens * p.output AS cost
  FROM j ASOF JOIN prices p ON j.model = p.model AND j.speed_tier = p.tier AND j.day >= p.effective_from;
CREATE TABLE t AS
  WITH pairs AS (SELECT tid, model, speed_tier, sum(output_tokens) AS out FROM jc GROUP BY ALL),
       ranked AS (SELECT *, count(*) OVER (PARTITION BY tid) AS n, row_number() OVER (PARTITION BY tid
                  ORDER BY out DESC, model, CASE speed_tier WHEN 'standard' THEN 0 WHEN 'priority' THEN 1 ELSE 2 END) AS rn
                  FROM pairs),
       sums AS (SELECT tid, sum(coalesce(duration_ms, 0)) AS model_ms, sum(cost) AS cost FROM jc GROUP BY tid)
  SELECT CAST(date_trunc('week', o.completed_at) AS DATE) AS week_start, r.model, r.speed_tier,
         coalesce(o.task_class, 'unclassified') AS task_class, r.n > 1 AS mixed,
         o.outcome = 'accepted' AND NOT o.rework AS one_pass, o.outcome = 'accepted' AND o.rework AS reworked,
         o.outcome = 'abandoned' AS abandoned, epoch_us(o.completed_at) - epoch_us(o.started_at) AS e2e_us,
         s.model_ms, o.rework_ms, s.cost
    FROM ranked r JOIN oc o USING (tid) JOIN sums s USING (tid) WHERE r.rn = 1;
CREATE TABLE rows AS SELECT week_start, model, speed_tier, task_class, one_pass, reworked, abandoned, mixed, e2e_us, model_ms, rework_ms, cost FROM t
  UNION ALL SELECT week_start, model, speed_tier, '*', one_pass, reworked, abandoned, mixed, e2e_us, model_ms, rework_ms, cost FROM t;
COPY (
  WITH ordered AS (SELECT *, row_number() OVER (PARTITION BY week_start, model, speed_tier, task_class ORDER BY e2e_us) AS rk,
                          count(*) OVER (PARTITION BY week_start, model, speed_tier, task_class) AS n FROM rows)
  SELECT week_start, model, speed_tier, task_class, count(*) AS tasks, count(*) FILTER (WHERE one_pass) AS one_pass,
         count(*) FILTER (WHERE reworked) AS reworked, count(*) FILTER (WHERE abandoned) AS abandoned,
         count(*) FILTER (WHERE mixed) AS mixed,
         min(e2e_us) FILTER (WHERE rk = CAST(ceil(n * 0.5) AS BIGINT)) AS p50_us,
         min(e2e_us) FILTER (WHERE rk = CAST(ceil(n * 0.9) AS BIGINT)) AS p90_us,
         sum(e2e_us) AS e2e_us_sum, sum(model_ms) AS model_ms_sum, sum(rework_ms) AS rework_ms_total,
         CAST(sum(cost) AS VARCHAR) AS cost_sum
    FROM ordered GROUP BY ALL
) TO '{out}/groups.parquet' (FORMAT parquet);
SELECT count(*) FROM read_parquet('{out}/groups.parquet');
"""


def _ours(work: Path, weeks: int) -> tuple[float, float]:
    db = work / "w.db"
    db.unlink(missing_ok=True)
    base = cli(db, work / "lake")
    run_measured([*base, "db", "upgrade"])
    end = START + dt.timedelta(days=7 * weeks - 1)
    wall, rss, out = run_measured([*base, "effectiveness", "compute", "--from", str(START), "--to", str(end)])
    assert "week(s) computed" in out, out
    return wall, rss


def _duckdb(work: Path) -> tuple[float, float]:
    out = work / "duck"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    wall, rss, _ = run_duckdb(DUCKDB_SQL.format(lake=work / "lake", out=out, prices=_prices_sql()))
    return wall, rss


def _same_groups(work: Path) -> int:
    """Every group of task_effectiveness equals DuckDB's (counts, nearest-rank percentiles, the means
    and token cost rounded as the contract says); returns the number of groups."""
    import sqlite3

    import pyarrow.parquet as pq

    duck = {
        (r["week_start"], r["model"], r["speed_tier"], r["task_class"]): r
        for r in pq.read_table(work / "duck" / "groups.parquet").to_pylist()
    }
    con = sqlite3.connect(work / "w.db")
    ours = con.execute(
        "SELECT week_start, model, speed_tier, task_class, tasks, one_pass, reworked, abandoned, mixed, "
        "e2e_ms_p50, e2e_ms_p90, e2e_ms_mean, model_ms_mean, rework_ms_total, token_cost FROM task_effectiveness"
    ).fetchall()
    assert len(ours) == len(duck), (len(ours), len(duck))
    for row in ours:
        key = (dt.date.fromisoformat(row[0]), *row[1:4])
        d = duck[key]
        n = d["tasks"]
        assert tuple(row[4:9]) == (n, d["one_pass"], d["reworked"], d["abandoned"], d["mixed"]), key
        assert (
            Decimal(str(row[9])) == Decimal(d["p50_us"]) / 1000
            and Decimal(str(row[10])) == Decimal(d["p90_us"]) / 1000
        ), key
        assert row[11] == (2 * d["e2e_us_sum"] + 1000 * n) // (2000 * n), key  # half up, whole ms
        assert row[12] == (2 * int(d["model_ms_sum"]) + n) // (2 * n) and row[13] == d["rework_ms_total"], key
        cents = (Decimal(d["cost_sum"]) / 1_000_000).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        assert Decimal(str(row[14])).quantize(Decimal("0.01")) == cents, key
    return len(ours)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--tasks", type=int, default=2_000_000)
    parser.add_argument("--weeks", type=int, default=4)
    parser.add_argument("--workdir", default="/tmp/ub-bench-effectiveness")
    args = parser.parse_args()
    rows, measured = [], {}
    for weeks, factor in ((args.weeks, 1), (max(1, args.weeks // 2), 2)):
        events, tasks = args.events // factor, args.tasks // factor
        work = Path(args.workdir)
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        _write_lake(work / "lake", events, tasks, weeks)
        duck = _duckdb(work)
        ours = _ours(work, weeks)
        groups = _same_groups(work)
        measured[weeks] = (events, ours, duck)
        for label, (wall, rss) in (
            ("usage-billing effectiveness compute", ours),
            ("DuckDB, 2 threads", duck),
        ):
            rows.append(
                f"| {weeks} | {events:,} | {tasks:,} | {label} | {wall:.1f} s | {events / wall:,.0f} | {rss:,.0f} MB |"
            )
        rows.append(
            f"| {weeks} | | | ratio (ours / DuckDB), {groups:,} groups equal | {ours[0] / duck[0]:.2f}x | | {ours[1] / duck[1]:.2f}x |"
        )
        print("\n".join(rows[-3:]), flush=True)
        shutil.rmtree(work, ignore_errors=True)
    (big_events, big, big_duck), (_, small, _) = measured[args.weeks], measured[max(1, args.weeks // 2)]
    write_section(
        "Effectiveness (issue 26)",
        f"""
Command: `{command_line("benchmarks.effectiveness")}`
Machine: {machine()}
Data: written straight into the lake's layout (zstd Parquet, one file per date): tasks of about five
requests (4% of requests on a second model or tier), 20,000 accounts, seven (model, tier) pairs, an
outcome for 97% of the tasks and 1% orphan outcomes.

| weeks | events | tasks | engine | wall | events/s | peak RSS (tree) |
|---|---:|---:|---|---:|---:|---:|
{chr(10).join(rows)}

- At {big_events:,} events: {big[0]:.1f} s against DuckDB's {big_duck[0]:.1f} s, {big[0] / big_duck[0]:.2f}x (target: at most 2x).
- Peak RSS {big[1]:,.0f} MB over {args.weeks} weeks and {small[1]:,.0f} MB over {max(1, args.weeks // 2)} weeks of the same size
  ({100 * (big[1] / small[1] - 1):+.0f}%; target: under 1.5 GB, not growing with the weeks): one week's tasks at a time.
- Every group of task_effectiveness equals DuckDB's (counts, nearest-rank p50 and p90, the means and
  the token cost rounded half up). This pipeline also writes the weeks' task rows into the lake and
  task_effectiveness into SQLite; DuckDB writes its groups to Parquet. Wall includes process start-up.
""",
    )


if __name__ == "__main__":
    sys.exit(main())
