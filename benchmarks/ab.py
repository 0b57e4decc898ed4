"""Ingest, aggregate and meter before and after a change, run alternately on one landing area.

    git worktree add /tmp/before <commit>
    .venv/bin/python -m benchmarks.ab --before /tmp/before [--days 28] [--events-per-day 60000] [--rounds 3]

For a change that should cost nothing (a restructuring): the landing area of the demo's generator
(mixed JSON lines, gzip, Parquet and CloudEvents files, late and resent events) is generated once.
Each round runs, for the checkout before the change and then this one, each in a fresh SQLite
warehouse and lake of its own: ``db upgrade``, ``accounts load``, then the three timed steps over
the whole range, ``events ingest``, ``usage aggregate`` and ``quota meter``, each one command as a
user runs it. The machine is shared and noisy, so the sides alternate and the table gives every
round and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
from pathlib import Path

from benchmarks.common import ROOT, cli, command_line, machine, run_measured

START = dt.date(2026, 3, 2)
STEPS = ("events ingest", "usage aggregate", "quota meter")


def _side(checkout: Path, root: Path, days: int) -> dict[str, float]:
    work = root / checkout.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    base = cli(work / "warehouse.db", work / "lake", root / "landing")
    run_measured([*base, "db", "upgrade"], cwd=str(checkout))
    run_measured([*base, "accounts", "load", str(root / "landing" / "accounts.csv")], cwd=str(checkout))
    dates = ["--from", str(START), "--to", str(START + dt.timedelta(days=days - 1))]
    out = {}
    for step in STEPS:
        wall, _, _ = run_measured([*base, *step.split(), *dates], cwd=str(checkout))
        out[step] = wall
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True, help="a checkout of the commit before the change")
    parser.add_argument("--days", type=int, default=28)
    parser.add_argument("--events-per-day", type=int, default=60_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", default="/tmp/ub-bench-ab")
    args = parser.parse_args()
    root = Path(args.workdir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    generate = cli(root / "gen.db", root / "gen-lake", root / "landing")
    run_measured(
        [
            *generate,
            "events",
            "generate",
            "--start",
            str(START),
            "--days",
            str(args.days),
            "--events-per-day",
            str(args.events_per_day),
        ]
    )
    sides = {"before": Path(args.before).resolve(), "after": ROOT}
    runs: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for side, checkout in sides.items():
            for step, wall in _side(checkout, root, args.days).items():
                runs.setdefault((step, side), []).append(wall)
                print(f"round {r + 1} {side:6} {step}: {wall:.1f} s", flush=True)
    events = args.days * args.events_per_day
    print(f"\nabout {events:,} events over {args.days} days; {machine()}; {command_line('benchmarks.ab')}")
    print("| step | side | wall per round | median | after / before (median) |")
    print("|---|---|---|---:|---:|")
    for step in STEPS:
        medians = {side: statistics.median(runs[(step, side)]) for side in sides}
        for side in sides:
            walls = ", ".join(f"{w:.1f}" for w in runs[(step, side)])
            ratio = f"{medians['after'] / medians['before']:.2f}" if side == "after" else "-"
            print(f"| {step} | {side} | {walls} s | {medians[side]:.1f} s | {ratio} |")


if __name__ == "__main__":
    main()
