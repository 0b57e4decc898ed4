"""Soak: `run-day` for 30 consecutive generated days, then every invariant checked exactly.

    .venv/bin/python -m benchmarks.soak [--days 30] [--events-per-day 40000] [--accounts 3000]

The generator writes the landing days with 1% resent duplicates and 0.5% late events (up to 4 days
late); each landing day also gets 0.1% bad rows (malformed JSON, negative tokens, unknown model,
missing event_id, a timestamp without zone, cached > input), in a file of their own. Then each day
runs as its own process, `usage-billing run-day --date D` on SQLite and a local lake, measured
(wall, peak RSS of the process tree), and the month is drafted. At the end (exact equalities):
- conservation per ingest run: rows read = clean + quarantined + duplicates;
- totals: rows read = generated rows + bad rows; quarantined = bad rows; duplicates = resends;
  clean = distinct generated events = rows in the lake = distinct event ids in the lake;
- tokens: lake = usage_daily = metered (metered_days) = billable_usage, per token kind; the
  month's reconciliation view has nothing unmetered or uninvoiced;
- the recompute queue is empty and no staging folder is left;
- memory: the peak RSS of the last five days against days 6-10, once the first week has filled the
  weekly metering windows (it must not grow with the days processed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sqlite3
import statistics
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.common import ROOT, cli, command_line, machine, run_measured, write_section

START = dt.date(2026, 3, 1)
BAD_RATE = 0.001


def _bad_rows(day: dt.date, n: int) -> list[str]:
    """``n`` bad lines of six kinds, each with an id of its own."""
    lines = []
    for i in range(n):
        row = {
            "event_id": f"bad-{day}-{i:05d}",
            "event_time": f"{day}T12:00:00Z",
            "account_id": "acct-00001",
            "user_id": "u-1",
            "model": "gpt-5.1",
            "speed_tier": "standard",
            "input_tokens": 100,
            "cached_input_tokens": 0,
            "output_tokens": 10,
            "duration_ms": 50,
            "status": "ok",
            "error_code": None,
        }
        kind = i % 6
        if kind == 0:
            lines.append('{"event_id": "broken' + str(i))
            continue
        if kind == 1:
            row["input_tokens"] = -5
        elif kind == 2:
            row["model"] = "gpt-0-nonexistent"
        elif kind == 3:
            del row["event_id"]
        elif kind == 4:
            row["event_time"] = f"{day}T12:00:00"
        else:
            row["cached_input_tokens"] = 500
        lines.append(json.dumps(row))
    return lines


def _generate(workdir: Path, days: int, events: int, accounts: int) -> dict:
    from pipelines.jobs.generate import GeneratorConfig, generate
    from pipelines.jobs.landing import write_landing
    from schemas.catalog import load_catalog

    catalog = load_catalog(ROOT / "config" / "catalog.toml")
    cfg = GeneratorConfig(
        start=START,
        days=days,
        accounts=accounts,
        events_per_day=events,
        seed=30,
        duplicate_rate=0.01,
        late_rate=0.005,
        late_max_days=4,
    )
    gen = generate(catalog, cfg)
    landing = workdir / "landing"
    write_landing(gen, cfg, str(landing))
    landed = gen.events["landing_date"].to_numpy(zero_copy_only=False).astype("datetime64[D]")
    bad = 0
    for i in range(days):
        day = START + dt.timedelta(days=i)
        n = max(1, round(BAD_RATE * int((landed == np.datetime64(day)).sum())))
        (landing / day.isoformat() / f"bad-{day}.jsonl").write_text("\n".join(_bad_rows(day, n)) + "\n")
        bad += n
    ids = gen.events["event_id"]
    return {
        "rows": gen.events.num_rows,
        "duplicates": gen.duplicates,
        "late": gen.late,
        "distinct": len(pc.unique(ids)),
        "bad": bad,
        "landing": landing,
    }


def _lake_totals(lake: Path) -> dict:
    from pipelines import lake as lk

    tables = [
        lk.read_parquet(f, columns=["event_id", "input_tokens", "cached_input_tokens", "output_tokens"])
        for d in lk.partition_dates(str(lake), lk.EVENTS)
        for f in lk.list_files(lk.partition(str(lake), lk.EVENTS, d))
    ]
    t = pa.concat_tables(tables)
    return {
        "rows": t.num_rows,
        "distinct": len(pc.unique(t["event_id"])),
        "input": pc.sum(t["input_tokens"]).as_py(),
        "cached_input": pc.sum(t["cached_input_tokens"]).as_py(),
        "output": pc.sum(t["output_tokens"]).as_py(),
    }


def _check(db: Path, lake: Path, gen: dict) -> tuple[list[str], list[str]]:
    """(lines describing each invariant, the ones that failed)."""
    con = sqlite3.connect(db)
    q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    lines, failed = [], []

    def check(name: str, ok: bool, detail: str) -> None:
        lines.append(f"| {name} | {detail} | {'holds' if ok else 'BROKEN'} |")
        if not ok:
            failed.append(name)

    broken = q("SELECT count(*) FROM ingest_runs WHERE rows_read <> clean + quarantined + duplicates")[0][0]
    runs = q("SELECT count(*) FROM ingest_runs")[0][0]
    check("conservation per ingest run", broken == 0, f"{runs} runs, {broken} broken")
    read, clean, quar, dups = q(
        "SELECT sum(rows_read), sum(clean), sum(quarantined), sum(duplicates) FROM ingest_runs"
    )[0]
    check(
        "rows read = generated + bad",
        read == gen["rows"] + gen["bad"],
        f"{read:,} = {gen['rows']:,} + {gen['bad']:,}",
    )
    check("quarantined = bad rows", quar == gen["bad"], f"{quar:,} = {gen['bad']:,}")
    check("duplicates = resends", dups == gen["duplicates"], f"{dups:,} = {gen['duplicates']:,}")
    lake_t = _lake_totals(lake)
    check(
        "clean = distinct events = lake rows = distinct lake ids",
        clean == gen["distinct"] == lake_t["rows"] == lake_t["distinct"],
        f"{clean:,} = {gen['distinct']:,} = {lake_t['rows']:,} = {lake_t['distinct']:,}",
    )
    usage = dict(
        zip(
            ("input", "cached_input", "output"),
            q("SELECT sum(input_tokens), sum(cached_input_tokens), sum(output_tokens) FROM usage_daily")[0],
            strict=True,
        )
    )
    billable = dict(
        q("SELECT token_kind, sum(included_tokens + overage_tokens) FROM billable_usage GROUP BY token_kind")
    )
    metered = q("SELECT sum(included_tokens + overage_tokens) FROM metered_days")[0][0]
    lake_tokens = {k: lake_t[k] for k in ("input", "cached_input", "output")}
    check(
        "tokens: lake = usage_daily",
        lake_tokens == usage,
        f"{usage['input'] + usage['output']:,} tokens, per kind",
    )
    by_kind = {
        "input": billable.get("input", 0) + billable.get("cached_input", 0),
        "cached_input": billable.get("cached_input", 0),
        "output": billable.get("output", 0),
    }
    check("tokens: usage_daily = billable_usage", by_kind == usage, "per kind (input includes cached)")
    total = usage["input"] + usage["output"]
    check("tokens: usage_daily = metered_days", metered == total, f"{metered:,} = {total:,}")
    recon = q("SELECT month, unmetered_tokens, uninvoiced_tokens FROM finance_reconciliation ORDER BY month")
    check(
        "reconciliation view (March)",
        all(r[1] == 0 and (r[0] != "2026-03" or r[2] == 0) for r in recon),
        "; ".join(f"{m}: unmetered {u:,}, uninvoiced {i:,}" for m, u, i in recon),
    )
    queued = q("SELECT count(*) FROM recompute_queue")[0][0]
    staging = list((lake / "_staging").iterdir()) if (lake / "_staging").exists() else []
    check(
        "recompute queue empty, no staging left",
        queued == 0 and not staging,
        f"{queued} queued, {len(staging)} staged",
    )
    return lines, failed


def _remeter_from_scratch(
    workdir: Path, landing: Path, db: Path, runs: int, resumed: int
) -> tuple[str, bool]:
    """The whole metered range again in a fresh warehouse, from the period starts: billable_usage and
    pool_usage must equal what the daily runs (most from stored balances) left."""
    fresh = workdir / "from-scratch.db"
    base = cli(fresh, workdir / "lake", landing)
    run_measured([*base, "db", "upgrade"])
    run_measured([*base, "accounts", "load", str(landing / "accounts.csv")])
    con = sqlite3.connect(db)
    lo, hi = con.execute("SELECT min(local_day), max(local_day) FROM billable_usage").fetchone()
    _, _, out = run_measured([*base, "quota", "meter", "--from", lo, "--to", hi])
    assert "started from" not in out, out
    same = []
    for table in ("billable_usage", "pool_usage", "metered_days"):
        rows = [sorted(sqlite3.connect(d).execute(f"SELECT * FROM {table}").fetchall()) for d in (db, fresh)]
        same.append(rows[0] == rows[1] and len(rows[0]) > 0)
    detail = (
        f"{resumed} of {runs} daily metering runs started from stored balances; billable_usage, "
        f"pool_usage, metered_days equal to one run over {lo}..{hi}"
    )
    return f"| metered day by day = metered at once | {detail} | {'holds' if all(same) else 'BROKEN'} |", all(
        same
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--events-per-day", type=int, default=40_000)
    parser.add_argument("--accounts", type=int, default=3_000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ub-bench-soak"))
    args = parser.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    gen = _generate(args.workdir, args.days, args.events_per_day, args.accounts)
    db, lake = args.workdir / "warehouse.db", args.workdir / "lake"
    base = cli(db, lake, gen["landing"])
    run_measured([*base, "db", "upgrade"])
    run_measured([*base, "accounts", "load", str(gen["landing"] / "accounts.csv")])
    per_day = []
    meter_runs = resumed = 0
    for i in range(args.days):
        day = START + dt.timedelta(days=i)
        wall, rss, out = run_measured([*base, "run-day", "--date", day.isoformat()])
        per_day.append((day, wall, rss))
        meter_runs += out.count("metered ")
        resumed += out.count("started from the pool balances")
        print(f"{day}: {wall:.1f} s, {rss:,.0f} MB", flush=True)
    run_measured([*base, "invoices", "draft", "--month", START.strftime("%Y-%m")])
    lines, failed = _check(db, lake, gen)
    line, ok = _remeter_from_scratch(args.workdir, gen["landing"], db, meter_runs, resumed)
    lines.append(line)
    if not ok:
        failed.append("metered day by day = metered at once")

    first = [r for _, _, r in per_day[:5]]
    settled = [r for _, _, r in per_day[5:10]]  # weekly pool windows and late-date spans are full now
    last = [r for _, _, r in per_day[-5:]]
    growth = statistics.mean(last) / statistics.mean(settled)
    table = "\n".join(
        f"| {d} | {w:.1f} s | {r:,.0f} MB |"
        for j, (d, w, r) in enumerate(per_day)
        if j % 5 == 0 or j == len(per_day) - 1
    )
    body = f"""
Command: `{command_line("benchmarks.soak")}`
Machine: {machine()}
Data: {args.days} landing days from {START}, {args.accounts:,} accounts, {gen["rows"]:,} generated rows
({gen["duplicates"]:,} resends = 1%, {gen["late"]:,} late events = 0.5%, up to 4 days late) and {gen["bad"]:,}
bad rows (0.1%, six kinds). Each day: `usage-billing run-day --date D` as its own process (SQLite, local lake).

| invariant | numbers | |
|---|---|---|
{chr(10).join(lines)}

February's uninvoiced tokens are its last local day for accounts west of UTC (events of 1 March UTC):
metered and billable, but only March is drafted.

Memory per run {"does not grow" if growth < 1.15 else "GROWS"} with the days processed: mean peak RSS
{statistics.mean(first):,.0f} MB on days 1-5 (the first week: metering windows, late dates and
same-weekday history still filling), {statistics.mean(settled):,.0f} MB on days 6-10 and
{statistics.mean(last):,.0f} MB on the last five days (last five vs days 6-10: {growth:.2f}; under 1.15
counts as flat).
Wall per day: median {statistics.median(w for _, w, _ in per_day):.1f} s, total {sum(w for _, w, _ in per_day) / 60:.1f} min.

| day | wall | peak RSS (tree) |
|---|---:|---:|
{table}
"""
    write_section("Soak: 30 days of run-day (issue 9)", body)
    if failed:
        raise SystemExit(f"invariants broken: {', '.join(failed)}")


if __name__ == "__main__":
    main()
