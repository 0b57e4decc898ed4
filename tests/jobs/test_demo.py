"""End to end: a small `usage-billing demo` as a user runs it, in its own process."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
from sqlalchemy import func, select

from pipelines.warehouse.engine import make_engine
from schemas.warehouse import IngestRun, UsageDaily
from tests.conftest import CATALOG_PATH, ROOT


@pytest.mark.slow
def test_small_demo_runs_end_to_end_and_keeps_the_invariants(tmp_path):
    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    lake, landing = tmp_path / "lake", tmp_path / "landing"
    cmd = [
        sys.executable,
        "-m",
        "pipelines.cli",
        "--config",
        str(CATALOG_PATH),
        "--database-url",
        url,
        "--lake",
        str(lake),
        "--landing",
        str(landing),
        "demo",
        "--days",
        "21",
        "--accounts",
        "400",
        "--events-per-day",
        "3000",
        "--seed",
        "5",
    ]
    proc = subprocess.run(
        cmd, cwd=tmp_path, env=os.environ.copy(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "rows read" in proc.stdout and "gpt-5.6-sol" in proc.stdout and "Feb" in proc.stdout
    # Support's view of the last event that ran the fast model's own pool dry.
    assert "why was this charged? `usage-billing quota explain --event-id" in proc.stdout
    assert "this event used its last tokens" in proc.stdout

    engine = make_engine(url)
    with engine.connect() as conn:
        read, clean, quarantined, dups = conn.execute(
            select(
                func.sum(IngestRun.rows_read),
                func.sum(IngestRun.clean),
                func.sum(IngestRun.quarantined),
                func.sum(IngestRun.duplicates),
            )
        ).one()
        t = UsageDaily.__table__
        usage_tokens = conn.execute(
            select(func.sum(t.c.input_tokens + t.c.cached_input_tokens + t.c.output_tokens))
        ).scalar_one()
    assert read == clean + quarantined + dups and read > 50_000
    events = ds.dataset(str(lake / "events"), format="parquet").to_table(
        columns=["input_tokens", "cached_input_tokens", "output_tokens"]
    )
    assert events.num_rows == clean
    lake_tokens = sum(pc.sum(events[c]).as_py() for c in events.column_names)
    assert usage_tokens == lake_tokens
    # The demo refuses to wipe folders it did not create.
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "data.txt").write_text("keep me")
    cmd[cmd.index(str(landing))] = str(tmp_path / "precious")
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "holds data the demo did not create" in proc.stderr
    assert (tmp_path / "precious" / "data.txt").read_text() == "keep me"


def test_readme_starts_with_the_two_commands():
    lines = [line.strip() for line in (ROOT / "README.md").read_text().splitlines()]
    commands = [line for line in lines if line.startswith("make ")]
    assert commands[:2] == ["make demo", "make test"]
