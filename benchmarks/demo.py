"""Wall time and peak memory of ``usage-billing demo`` (the README's first command, after install).

    .venv/bin/python -m benchmarks.demo

Runs the demo in a child process against temporary folders and a temporary SQLite file, so it
measures exactly what a user waits for. Target (issue 2): under 3 minutes on this 2-core machine.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from benchmarks.common import cli, command_line, machine, run_measured, write_section


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        argv = [*cli(Path(tmp) / "warehouse.db", Path(tmp) / "lake", Path(tmp) / "landing"), "demo"]
        wall, rss, out = run_measured(argv)
    rows = re.search(r"^\s*([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s*$", out, re.M)
    read = rows.group(1) if rows else "?"
    timing = re.search(r"^time per step: (.*)$", out, re.M)
    steps = f"Time per step (printed by the demo): {timing.group(1)}." if timing else ""
    write_section(
        "Demo end to end (issue 2)",
        f"""
Command: `{command_line("benchmarks.demo")}` (runs `usage-billing demo` on the embedded defaults)
Machine: {machine()}

| rows read | wall time | peak RSS | target |
|---:|---:|---:|---|
| {read} | {wall:.0f} s | {rss:,.0f} MB | under 180 s |

Steps: generate 242 days of landing files, load accounts, ingest all landing dates in one Beam run
(FnApiRunner), run the data-quality gate on all 242 partitions, aggregate the usage tables, meter
the quota pools over the whole range, print the summary (ingest counts, tokens per model per month,
output speed per model and tier, included vs overage, the fast model's backup-tank share), draft and
finalize the invoices of its eight months.

{steps}
""",
    )


if __name__ == "__main__":
    main()
