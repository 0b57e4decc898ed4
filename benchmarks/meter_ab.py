"""Metering before and after a change, run alternately on one generated lake: does it cost anything?

    git worktree add /tmp/before <commit>
    .venv/bin/python -m benchmarks.meter_ab --before /tmp/before [--events 5000000] [--rounds 3]

The lake and accounts of ``benchmarks.meter`` (28 days, 5,000 accounts, the catalog's plans) are
generated once. Each round runs, for the checkout before the change and then this one, each in a
fresh SQLite warehouse of its own (``db upgrade``, ``accounts load``): the whole range metered at once
(default two threads), then its last day alone from the balances that run stored (a daily run). The
machine is shared and noisy, so the sides alternate and the table gives every round and the ratio of
the medians.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import shutil
import statistics
from pathlib import Path

from benchmarks.common import ROOT, cli, command_line, machine, run_measured
from benchmarks.meter import DAYS, PHASES, START, _generate


def _meter(checkout: Path, root: Path, argv: list[str]) -> tuple[float, float, float]:
    """(wall, Beam pipeline, warehouse load) seconds of one ``quota meter`` run of ``checkout``'s code."""
    wall, _, out = run_measured(argv, cwd=str(checkout))
    phases = re.search(PHASES, out)
    assert phases, out
    return wall, float(phases[1]), float(phases[2])


def _side(checkout: Path, root: Path) -> dict[str, tuple[float, float, float]]:
    db = root / f"w-{checkout.name}.db"
    db.unlink(missing_ok=True)
    base = cli(db, root / "lake")
    run_measured([*base, "db", "upgrade"], cwd=str(checkout))
    run_measured([*base, "accounts", "load", str(root / "accounts.csv")], cwd=str(checkout))
    end = START + dt.timedelta(days=DAYS - 1)
    last = max(p.name.removeprefix("date=") for p in (root / "lake" / "events").iterdir())
    return {
        "whole range": _meter(
            checkout, root, [*base, "quota", "meter", "--from", str(START), "--to", str(end)]
        ),
        "last day alone": _meter(checkout, root, [*base, "quota", "meter", "--date", last]),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True, help="a checkout of the commit before the change")
    parser.add_argument("--events", type=int, default=5_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", default="/tmp/ub-bench-meter-ab")
    args = parser.parse_args()
    root = Path(args.workdir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    n, _ = _generate(root, args.events)
    sides = {"before": Path(args.before).resolve(), "after": ROOT}
    runs: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for r in range(args.rounds):
        for side, checkout in sides.items():
            for what, times in _side(checkout, root).items():
                runs.setdefault((what, side), []).append(times)
                print(
                    f"round {r + 1} {side:6} {what}: wall {times[0]:.1f} s, pipeline {times[1]:.1f} s, load {times[2]:.1f} s",
                    flush=True,
                )
    print(f"\n{n:,} events; {machine()}; {command_line('benchmarks.meter_ab')}")
    print(
        "| run | side | wall per round | median wall | median Beam pipeline | after / before (median wall) |"
    )
    print("|---|---|---|---:|---:|---:|")
    for what in ("whole range", "last day alone"):
        medians = {side: statistics.median(t[0] for t in runs[(what, side)]) for side in sides}
        for side in sides:
            walls = ", ".join(f"{t[0]:.1f}" for t in runs[(what, side)])
            pipeline = statistics.median(t[1] for t in runs[(what, side)])
            ratio = f"{medians['after'] / medians['before']:.2f}" if side == "after" else "-"
            print(f"| {what} | {side} | {walls} s | {medians[side]:.1f} s | {pipeline:.1f} s | {ratio} |")


if __name__ == "__main__":
    main()
