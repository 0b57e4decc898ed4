"""Helpers shared by the benchmark scripts: timing, peak memory, machine description, results file."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, Python {platform.python_version()}"


def timed(fn: Callable[[], object], repeat: int = 1) -> tuple[float, object]:
    """Best wall time of ``repeat`` runs and the last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def run_measured(
    argv: list[str], env: dict | None = None, cwd: str | None = None
) -> tuple[float, float, str]:
    """Run a command; (wall seconds, peak RSS summed over its process tree in MB, stdout).

    Sums the tree because Beam's multi-process mode and DuckDB's threads live in several places;
    sampled every 50 ms with psutil.
    """
    import psutil

    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    parent = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            procs = [parent, *parent.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in procs if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.05)
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:4]}... failed ({proc.returncode}): {err[-2000:]}")
    return wall, peak / 2**20, out


def write_section(title: str, body: str) -> None:
    """Replace (or append) the section ``## title`` of RESULTS.md."""
    intro = "# Benchmark results\n\nEach section: the command, the machine, then the numbers of one run.\n"
    text = RESULTS.read_text() if RESULTS.exists() else intro
    header = f"## {title}\n"
    section = header + body.rstrip() + "\n"
    if header in text:
        start = text.index(header)
        end = text.find("\n## ", start + len(header))
        text = text[:start] + section + ("\n" + text[end + 1 :] if end >= 0 else "")
    else:
        text = text.rstrip() + "\n\n" + section
    RESULTS.write_text(text)
    print(section)


def command_line(module: str) -> str:
    return " ".join([".venv/bin/python -m", module, *[a if " " not in a else repr(a) for a in sys.argv[1:]]])


ROOT = Path(__file__).resolve().parents[1]


def cli(database: Path, lake: Path, landing: Path | None = None) -> list[str]:
    """``usage-billing`` with the default catalog, a SQLite warehouse file and a lake (and landing)."""
    argv = [
        sys.executable,
        "-m",
        "pipelines.cli",
        "--config",
        str(ROOT / "config" / "catalog.toml"),
        "--database-url",
        f"sqlite:///{database}",
        "--lake",
        str(lake),
    ]
    return argv + (["--landing", str(landing)] if landing is not None else [])


DUCKDB_RUNNER = (
    "import duckdb, sys\ncon = duckdb.connect()\n"
    "for stmt in [s for s in sys.argv[1].split(';') if s.strip()]:\n    rows = con.execute(stmt).fetchall()\n"
    "print(rows[0][0])"
)


def run_duckdb(sql: str) -> tuple[float, float, str]:
    """Run ``;``-separated DuckDB statements in a child process; (wall, peak RSS MB, last result)."""
    wall, rss, out = run_measured([sys.executable, "-c", DUCKDB_RUNNER, sql])
    return wall, rss, out.strip().splitlines()[-1]


def write_event_lake(root: Path, table, accounts: list[dict]) -> None:  # type: ignore[no-untyped-def]
    """``root/lake``: the events as one shard file per UTC date (the lake's ``_lake.json`` made as
    ingest makes it), and ``root/accounts.csv`` for `accounts load`."""
    import csv

    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipelines import lake

    day = pc.cast(table["event_time"], "date32")
    for d in pc.unique(day).to_pylist():
        folder = root / "lake" / "events" / f"date={d}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(
            table.filter(pc.equal(day, d)), folder / "shard-0000.parquet", row_group_size=256 * 1024
        )
    lake.shard_count(str(root / "lake"))
    with open(root / "accounts.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(accounts[0]))
        writer.writeheader()
        writer.writerows(accounts)
