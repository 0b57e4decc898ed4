"""Generator throughput: the vectorized generator vs a naive one-dict-per-event generator.

    .venv/bin/python -m benchmarks.generate [--events-per-day 9000] [--days 242]

Both produce the same kind of events (same columns, random models, tiers and tokens); the naive one
is the per-event Python loop that the vectorized code replaces, measured on fewer events and
compared as events per second in the same run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
from pathlib import Path

from benchmarks.common import command_line, machine, timed, write_section
from pipelines.jobs.generate import GeneratorConfig, generate
from schemas.catalog import load_catalog


def naive(catalog, n: int) -> list[dict]:  # type: ignore[no-untyped-def]
    rng = random.Random(7)
    models = catalog.model_ids
    start = dt.datetime(2026, 2, 1, tzinfo=dt.UTC)
    events = []
    for i in range(n):
        inp = int(rng.lognormvariate(8.6, 1.0))
        events.append(
            {
                "event_id": f"ev-7-{i}",
                "event_time": start + dt.timedelta(seconds=rng.randrange(86400 * 242)),
                "account_id": f"acct-{rng.randrange(5000):05d}",
                "user_id": None,
                "model": rng.choice(models),
                "speed_tier": rng.choice(["standard", "priority"]),
                "input_tokens": inp,
                "cached_input_tokens": int(inp * rng.random()),
                "output_tokens": int(rng.lognormvariate(6.2, 0.9)),
                "duration_ms": rng.randrange(100, 9000),
                "status": "ok",
                "error_code": None,
            }
        )
    return events


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=242)
    parser.add_argument("--accounts", type=int, default=5000)
    parser.add_argument("--events-per-day", type=int, default=9000)
    parser.add_argument("--naive-events", type=int, default=200_000)
    args = parser.parse_args()
    catalog = load_catalog(Path(__file__).resolve().parents[1] / "config" / "catalog.toml")
    cfg = GeneratorConfig(days=args.days, accounts=args.accounts, events_per_day=args.events_per_day)
    generate(catalog, GeneratorConfig(days=7, accounts=100, events_per_day=100))  # warm imports
    seconds, gen = timed(lambda: generate(catalog, cfg), repeat=3)
    rows = gen.events.num_rows
    naive_seconds, _ = timed(lambda: naive(catalog, args.naive_events))
    fast = rows / seconds
    slow = args.naive_events / naive_seconds
    write_section(
        "Generator (issue 2)",
        f"""
Command: `{command_line("benchmarks.generate")}`
Machine: {machine()}

| implementation | events | seconds | events/s |
|---|---:|---:|---:|
| vectorized (`pipelines.jobs.generate`, best of 3) | {rows:,} | {seconds:.2f} | {fast:,.0f} |
| naive, one dict per event | {args.naive_events:,} | {naive_seconds:.2f} | {slow:,.0f} |

Ratio: the vectorized generator is {fast / slow:.0f}x the naive one. Target: at least 1M events/s
generated (in memory, before writing files).
""",
    )


if __name__ == "__main__":
    main()
