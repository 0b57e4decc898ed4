"""A new user's first contact, as the README tells it: in a fresh folder, the demo (what `make demo`
runs once `.venv` exists), then the step-by-step commands in the order the README lists them. Every
output the README and the demo name exists, and the step-by-step run leaves the warehouse
consistent: nothing waits in the recompute queue, and a `run-day` afterwards takes one date."""

from __future__ import annotations

import datetime as dt
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow
COMMAND = str(Path(sys.executable).with_name("usage-billing"))
# The demo's own timeline (Feb to Sep) at 1,500 of its 5,000 accounts and a third of its events: the
# same story (the fading models are retirement candidates, the fast model's pool runs dry, every
# output is written) in a fraction of the time. What the default size costs is benchmarks/RESULTS.md's
# business.
DEMO_SIZE = ["--accounts", "1500", "--events-per-day", "3000"]
INVOICE_NUMBER = re.compile(r"INV-\d{6}-\d{6}")


def _readme_blocks() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    return [block.strip().splitlines() for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S)]


def _fresh(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    shutil.copytree(ROOT / "config", folder / "config")  # what a clone has beside the code
    return folder


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GX_ANALYTICS_ENABLED": "false"}
    for name in (
        "USAGE_BILLING_DATABASE_URL",
        "USAGE_BILLING_LAKE",
        "USAGE_BILLING_LANDING",
        "USAGE_BILLING_CONFIG",
    ):
        env.pop(name, None)  # the embedded defaults, as a new user has them
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{' '.join(argv)}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr
    return proc


def test_the_demo_writes_every_output_the_readme_names(tmp_path):
    first = _readme_blocks()[0]
    assert first == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    # what `make demo` runs after the install (and, as root, the Debian packages of `make system-deps`)
    assert re.search(
        r"\ndemo: venv\n(\t@\$\(AS_ROOT_SYSTEM_DEPS\)\n)?\t\$\(BIN\)/usage-billing demo\n", makefile
    )
    folder = _fresh(tmp_path, "demo")
    out = _run([COMMAND, "demo", *DEMO_SIZE], folder).stdout
    listed = out.split("\noutputs:\n", 1)[1].split("\ntime per step:", 1)[0]
    written = [
        [x.strip() for x in line.strip().rsplit("  ", 1)] for line in listed.splitlines() if line.strip()
    ]
    for name, path in written:
        if not path.startswith("sqlite"):
            assert (folder / path).exists(), (name, path)
    assert [name for name, _ in written][:5] == [
        "retirement report",
        "effectiveness report",
        "data quality, every date",
        "customer documents 2026-08 (HTML, with an index)",
        "the largest bill of 2026-08 as a PDF",
    ]
    readme = (ROOT / "README.md").read_text()
    shown = readme.split("\noutputs:\n", 1)[1].split("```", 1)[0]
    printed = INVOICE_NUMBER.sub("INV-N", listed)
    for line in shown.splitlines():
        if line.strip() and line.strip() != "...":  # the README's excerpt is what the demo prints
            assert INVOICE_NUMBER.sub("INV-N", line) in printed, line
    html = list((folder / "data" / "exports" / "2026-08" / "html").glob("INV-*.html"))
    assert len(html) > 1000 and (folder / "data" / "exports" / "2026-08" / "html" / "index.html").is_file()
    pdfs = list((folder / "data" / "exports" / "2026-08" / "pdf").glob("INV-*.pdf"))
    assert len(pdfs) == 1 and pdfs[0].stem in out  # the largest bill, named in the outputs
    assert (
        pdfs[0].stem
        in subprocess.run(["pdftotext", str(pdfs[0]), "-"], capture_output=True, text=True).stdout
    )
    for name in ("invoices.csv", "invoice_lines.csv", "invoices.parquet", "invoice_lines.parquet"):
        assert (folder / "data" / "exports" / "2026-08" / name).stat().st_size > 1000
    assert {p.name for p in (folder / "data" / "reports" / "2026-08-24").iterdir()} >= {
        "report.html",
        "report.json",
        "report.md",
    }
    effect = folder / "data" / "reports" / "effectiveness"
    assert {p.name for p in effect.iterdir()} == {
        "effectiveness.html",
        "effectiveness.json",
        "effectiveness.md",
    }
    assert "on multi_file tasks gpt-5.3-codex-spark costs USD " in out  # the head to head's sentence
    retirement = (folder / "data" / "reports" / "2026-08-24" / "report.html").read_text()
    assert "Effectiveness against gpt-5.6-sol" in retirement  # beside the candidate's adoption figures
    assert out.rstrip().splitlines()[-1].startswith("demo finished in ")
    assert "…" not in out  # Rich cuts a cell that does not fit with an ellipsis: none here
    with sqlite3.connect(folder / "data" / "warehouse.db") as db:
        assert db.execute("SELECT count(*) FROM recompute_queue").fetchone() == (0,)
        read, clean, quarantined, dups = db.execute(
            "SELECT sum(rows_read), sum(clean), sum(quarantined), sum(duplicates) FROM ingest_runs "
            "WHERE dataset = 'events'"
        ).fetchone()
        assert db.execute("SELECT count(*) FROM effectiveness_queue").fetchone() == (0,)
        assert db.execute("SELECT count(DISTINCT week_start) FROM task_effectiveness").fetchone()[0] >= 30
        usage = db.execute(
            "SELECT sum(input_tokens + cached_input_tokens + output_tokens) FROM usage_daily"
        ).fetchone()[0]
        assert db.execute(
            "SELECT count(*) FROM dq_results WHERE NOT success AND level = 'error'"
        ).fetchone() == (0,)
    # The invariants: every row read is clean, quarantined or a duplicate; the lake's tokens are the
    # usage tables' tokens.
    assert read == clean + quarantined + dups > 500_000
    events = ds.dataset(str(folder / "data" / "lake" / "events"), format="parquet").to_table(
        columns=["input_tokens", "cached_input_tokens", "output_tokens"]
    )
    assert events.num_rows == clean
    assert usage == sum(pc.sum(events[c]).as_py() for c in events.column_names)
    assert "this event used its last tokens" in out  # support's view of a charge
    assert "retirement report as of 2026-08-24: candidates gpt-5.2-mini, gpt-5.3-codex-spark" in out
    # credits: prepaid and promotional grants from the start; the fast model's users who would pay more
    # on its successor offered transition credits, which their August documents show
    assert re.search(r"credits: prepaid 2 .*; promotional 2 .*; transition \d+", out), out
    assert re.search(r"transition credits: \d+ of gpt-5.3-codex-spark's accounts would pay more", out)
    # notifications: the pools' thresholds crossed, delivered as JSON lines; the backup tank as they saw it
    found = re.search(
        r"main pools: ([\d,]+) accounts crossed 80%, ([\d,]+) accounts crossed 100%; ([\d,]+) of", out
    )
    assert found, out
    crossed80, crossed100, tank = (int(g.replace(",", "")) for g in found.groups())
    assert crossed80 >= crossed100 >= tank > 0
    delivered = re.search(r"notifications: ([\d,]+) written .*; ([\d,]+) delivered \(JSON lines", out)
    assert delivered and delivered.group(1) == delivered.group(2), out
    sent = [
        x
        for f in (folder / "data" / "lake" / "notifications").rglob("*.jsonl")
        for x in f.read_text().splitlines()
    ]
    assert len(sent) == int(delivered.group(2).replace(",", ""))
    shows = [p for p in html if "transition-gpt-5.3-codex-spark-2026-07-" in p.read_text(encoding="utf-8")]
    assert shows and "Credits applied" in shows[0].read_text(encoding="utf-8")
    _fits_a_terminal_of_80_columns(folder)


def _fits_a_terminal_of_80_columns(folder: Path) -> None:
    """On a terminal the demo's tables take its width: at 80 columns none is cut."""
    import io

    from rich.console import Console

    from pipelines.jobs import demo_summary
    from pipelines.settings import Settings
    from pipelines.warehouse.engine import make_engine

    settings = Settings(
        str(folder / "config" / "catalog.toml"),
        f"sqlite:///{folder / 'data' / 'warehouse.db'}",
        str(folder / "data" / "lake"),
        str(folder / "data" / "landing"),
    )
    engine = make_engine(settings.database_url)
    screen = io.StringIO()
    console = Console(file=screen, width=80, force_terminal=True, markup=False, highlight=False)
    months = [f"2026-{m:02d}" for m in range(2, 10)]
    from pipelines.effectiveness import report
    from pipelines.jobs.demo import FAST_MODEL
    from schemas.catalog import load_catalog

    catalog = load_catalog(settings.config)
    demo_summary.invoices(console, engine, months, catalog)
    demo_summary.speed(console, demo_summary.speed_by_model_tier(engine), catalog)
    demo_summary.backup_tank(console, engine, settings)
    view = report.build(engine, settings.lake, catalog, dt.date(2026, 2, 1), dt.date(2026, 9, 30)).view
    demo_summary.head_to_head(console, view, FAST_MODEL)
    engine.dispose()
    shown = screen.getvalue()
    assert "2026-08" in shown and "Ultrafast" in shown and "…" not in shown, shown
    assert "multi_file" in shown and "tool_chain" in shown


def test_the_step_by_step_example_runs_as_written_and_leaves_nothing_queued(tmp_path):
    steps = next(b for b in _readme_blocks() if b and b[0].endswith("usage-billing db upgrade"))
    folder = _fresh(tmp_path, "steps")
    for line in steps:
        argv = shlex.split(line)
        assert argv[0] == ".venv/bin/usage-billing", line  # the README's commands, in its order
        _run([COMMAND, *argv[1:]], folder)
    db = folder / "data" / "warehouse.db"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM recompute_queue").fetchone() == (0,)
        assert conn.execute("SELECT count(DISTINCT day) FROM usage_daily").fetchone() == (30,)
        assert conn.execute("SELECT count(*) FROM billable_usage").fetchone()[0] > 0
    assert (folder / "data" / "lake" / "dq" / "index.html").exists()
    # The README's next step: a run-day of a landing date takes that date only.
    again = _run([COMMAND, "run-day", "--date", "2026-03-02"], folder).stdout
    assert "aggregated 1 date(s): 2026-03-02" in again
