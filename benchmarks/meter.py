"""Quota metering throughput and memory, beside the tests' event-by-event reference implementation.

    .venv/bin/python -m benchmarks.meter [--sizes 5000000 10000000] [--reference-events 200000]

For each size, the generator writes events straight into lake partitions (28 days, 5,000 accounts on
the catalog's plans, several timezones), then `usage-billing quota meter --from .. --to ..` runs as
a separate process, with one thread, two threads (the default) and two worker processes: read the
lake, attach plans and local days, shard by account, allocate every pool with cumulative sums, write
the allocation records to the lake and load pool_usage, billable_usage and metered_days into SQLite. The reference
(`tests/billing/test_quota.py::reference`, one event at a time in plain Python) runs on a sample in memory.
Target (issue 5): at least 2M events/s at 10M events; peak memory bounded by the largest account.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import shutil
import sys
import time
from pathlib import Path

import pyarrow.compute as pc

from benchmarks.common import ROOT, cli, command_line, machine, run_measured, write_event_lake, write_section

START = dt.date(2026, 3, 2)
DAYS = 28
POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/{db}"
MODES = {  # the default is one thread per core (up to 4): two threads here
    "1 thread": ["--", "--direct_num_workers=1"],
    "2 threads (default)": [],
    "2 worker processes": ["--", "--direct_running_mode=multi_processing", "--direct_num_workers=2"],
}


def _generate(root: Path, events: int) -> tuple[int, int]:
    """Exactly ``events`` events into lake partitions; returns (events, largest account's events)."""
    from pipelines.jobs.generate import GeneratorConfig, generate
    from schemas.catalog import load_catalog

    catalog = load_catalog(ROOT / "config" / "catalog.toml")
    cfg = GeneratorConfig(
        start=START,
        days=DAYS,
        accounts=5000,
        events_per_day=int(events / DAYS * 1.15),
        seed=9,
        duplicate_rate=0,
        late_rate=0,
    )
    gen = generate(catalog, cfg)
    table = gen.events.drop_columns(["landing_date"]).slice(0, events)
    write_event_lake(root, table, gen.accounts)
    largest = table.group_by("account_id").aggregate([([], "count_all")])["count_all"]
    return table.num_rows, int(pc.max(largest).as_py())


PHASES = r"Beam pipeline ([\d.]+) s, warehouse load ([\d.]+) s"


def _warehouse(root: Path, database_url: str | None = None) -> list[str]:
    """A fresh warehouse (the SQLite file, or ``database_url``) with the accounts loaded: the
    ``usage-billing`` command line on it and the lake."""
    db = root / "w.db"
    db.unlink(missing_ok=True)
    base = cli(db, root / "lake")
    if database_url:  # another warehouse than the SQLite file
        base[base.index("--database-url") + 1] = database_url
    run_measured([*base, "db", "upgrade"])
    run_measured([*base, "accounts", "load", str(root / "accounts.csv")])
    return base


def _ours(root: Path, extra: list[str], database_url: str | None = None) -> tuple[float, float, str]:
    base = _warehouse(root, database_url)
    end = START + dt.timedelta(days=DAYS - 1)
    wall, rss, out = run_measured(
        [*base, "quota", "meter", "--from", START.isoformat(), "--to", end.isoformat(), *extra]
    )
    assert "billable" in out or "pool" in out, out
    billable = re.search(r"billable_usage: ([\d,]+) rows", out)
    phases = re.search(PHASES, out)
    assert billable and phases, out
    return wall, rss, f"{phases[1]} s | {phases[2]} s ({billable[1]} billable rows)"


def _postgres(root: Path) -> tuple[float, float, str] | None:
    """The default mode with a PostgreSQL warehouse (a database of its own, dropped after): the load
    goes through COPY. None when no server answers on 127.0.0.1:5432."""
    import psycopg

    name = "ub_bench_meter"
    try:
        admin = psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True)
    except psycopg.OperationalError:
        return None
    with admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
        try:
            return _ours(root, [], POSTGRES.format(db=name))
        finally:
            admin.execute(f"DROP DATABASE IF EXISTS {name}")


def _daily(root: Path) -> list[str]:
    """The last day with events metered alone, as a daily run does: from the balances the full run stored, and
    from the period starts (the stored balances moved away). Rows of the second table."""
    base = _warehouse(root)
    # The last UTC day with events (taking the first N events of the generator cuts its last days).
    day = max(p.name.removeprefix("date=") for p in (root / "lake" / "events").iterdir())
    state, aside = root / "lake" / "pool_state", root / "pool_state.aside"
    rows = []
    for how in ("from the stored balances of the day before", "from the period starts"):
        if how == "from the period starts":
            state.rename(aside)
        try:
            wall, rss, out = run_measured([*base, "quota", "meter", "--date", day])
        finally:
            if aside.exists():
                shutil.rmtree(state, ignore_errors=True)
                aside.rename(state)
        assert ("started from" in out) == how.startswith("from the stored"), out
        phases = re.search(PHASES, out)
        assert phases, out
        rows.append(f"| {day} | {how} | {wall:.1f} s | {phases[1]} s | {phases[2]} s | {rss:,.0f} MB |")
        print(rows[-1], flush=True)
    return rows


def _reference(root: Path, n: int) -> float:
    """The tests' reference implementation on the first ``n`` events, in memory: events/s."""
    import pyarrow.dataset as ds

    sys.path.insert(0, str(ROOT))
    import pyarrow as pa

    from billing.plan import attach_accounts
    from pipelines.warehouse.accounts import parse_accounts
    from schemas.catalog import load_catalog
    from tests.billing.test_quota import reference

    catalog = load_catalog(ROOT / "config" / "catalog.toml")
    accounts = pa.Table.from_pylist([r.__dict__ for r in parse_accounts(root / "accounts.csv", catalog)])
    events = ds.dataset(root / "lake" / "events", format="parquet").head(n)
    events = attach_accounts(events, accounts).to_pylist()
    start = time.perf_counter()
    reference(events, catalog)
    return len(events) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 5_000_000, 10_000_000])
    parser.add_argument("--reference-events", type=int, default=200_000)
    parser.add_argument("--workdir", default="/tmp/ub-bench-meter")
    args = parser.parse_args()
    rows = []
    ref_rate = None
    walls: dict[tuple[int, str], float] = {}
    daily: list[str] = []
    for size in args.sizes:
        root = Path(args.workdir) / str(size)
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        n, largest = _generate(root, size)
        if ref_rate is None and n >= args.reference_events:
            ref_rate = _reference(root, args.reference_events)
            rows.append(
                f"| {args.reference_events:,} | tests' reference, one event at a time (in memory) | - | - | - | {ref_rate:,.0f} | - | - | 1 |"
            )
        for mode, extra in MODES.items():
            wall, rss, phases = _ours(root, extra)
            ratio = f"{n / wall / ref_rate:.0f}" if ref_rate else "-"
            rows.append(
                f"| {n:,} | usage-billing, {mode} | {wall:.1f} s | {phases} | {n / wall:,.0f} | {rss:,.0f} MB | {largest:,} | {ratio} |"
            )
            print(rows[-1], flush=True)
            walls[(n, mode)] = wall
        if size == max(args.sizes):
            pg = _postgres(root)
            if pg is not None:
                wall, rss, phases = pg
                rows.append(
                    f"| {n:,} | usage-billing, 2 threads, PostgreSQL 15 warehouse (COPY) | {wall:.1f} s | {phases} | {n / wall:,.0f} | {rss:,.0f} MB | {largest:,} | {f'{n / wall / ref_rate:.0f}' if ref_rate else '-'} |"
                )
                print(rows[-1], flush=True)
            daily = _daily(root)
        shutil.rmtree(root, ignore_errors=True)
    body = "\n".join(rows)
    small, large = min(n for n, _ in walls), max(n for n, _ in walls)
    small_walls = ", ".join(f"{walls[(small, mode)]:.1f} s {mode}" for mode in MODES)
    floor = (
        f"At {large:,} events the 2M events/s target leaves {large / 2e6:.1f} s for the whole run; the same "
        f"command on {small:,} events takes {small_walls} (start-up, Beam's set-up and worker processes, "
        "the warehouse transaction): what a run costs whatever its size."
    )
    write_section(
        "Quota metering (issue 5)",
        f"""
Command: `{command_line("benchmarks.meter")}`
Machine: {machine()}
Data: generator events over {DAYS} days, 5,000 accounts (the catalog's plans, several timezones), written
straight into lake partitions (256k-row row groups).

| events | engine | wall | Beam pipeline | warehouse load | events/s | peak RSS (tree) | largest account's events | x reference |
|---:|---|---:|---:|---:|---:|---:|---:|---:|
{body}

{floor}

Wall includes process start-up and the SQLite load of billable_usage, pool_usage and metered_days
in one transaction, and writing one allocation record per event and pool and the open pool
balances of each day to the lake.

A daily run meters one date; a balance depends on its whole period, so without stored balances it
reads from the period starts. The last day of the {max(args.sizes):,}-event lake metered alone (default threads):

| local date | starting | wall | Beam pipeline | warehouse load | peak RSS (tree) |
|---|---|---:|---:|---:|---:|
{chr(10).join(daily)}
""",
    )


if __name__ == "__main__":
    main()
