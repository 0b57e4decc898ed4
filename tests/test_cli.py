"""User mistakes end with one clear line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.cli import main
from tests.conftest import CATALOG_PATH, ROOT


def _run(capsys, *argv: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line_error(code: int, err: str, expected: str) -> None:
    assert code != 0
    assert "Traceback" not in err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and expected in lines[0], lines[0]


def test_missing_config_file(capsys, tmp_path):
    code, _, err = _run(
        capsys,
        "--config",
        str(tmp_path / "nope.toml"),
        "--landing",
        str(tmp_path),
        "events",
        "generate",
        "--days",
        "1",
    )
    _one_line_error(code, err, "catalog file not found")


def test_unknown_model_in_catalog(capsys, tmp_path):
    bad = tmp_path / "catalog.toml"
    bad.write_text(CATALOG_PATH.read_text().replace('model = "gpt-5.1"', 'model = "gpt-0.1"', 1))
    code, _, err = _run(
        capsys, "--config", str(bad), "--landing", str(tmp_path), "events", "generate", "--days", "1"
    )
    _one_line_error(code, err, "unknown model 'gpt-0.1'")


@pytest.mark.parametrize("value", ["2026-13-01", "yesterday", "2026-02-30"])
def test_bad_date(capsys, tmp_path, value):
    code, _, err = _run(
        capsys,
        "--database-url",
        f"sqlite:///{tmp_path / 'w.db'}",
        "--lake",
        str(tmp_path),
        "--landing",
        str(tmp_path),
        "events",
        "ingest",
        "--date",
        value,
    )
    _one_line_error(code, err, f"invalid date '{value}'")


def test_range_backwards(capsys, tmp_path):
    code, _, err = _run(
        capsys,
        "--database-url",
        f"sqlite:///{tmp_path / 'w.db'}",
        "usage",
        "aggregate",
        "--from",
        "2026-03-05",
        "--to",
        "2026-03-01",
    )
    _one_line_error(code, err, "--to 2026-03-01 is before --from 2026-03-05")


def test_unreachable_database_hides_the_password(capsys):
    code, _, err = _run(
        capsys, "--database-url", "postgresql+psycopg://billing:s3cret@127.0.0.1:1/nowhere", "db", "upgrade"
    )
    _one_line_error(code, err, "cannot reach database postgresql+psycopg://billing:***@127.0.0.1:1/nowhere")
    assert "s3cret" not in err


def test_bad_database_url(capsys):
    code, _, err = _run(capsys, "--database-url", "not a url", "db", "upgrade")
    _one_line_error(code, err, "invalid database URL")


def test_bad_accounts_file(capsys, tmp_path):
    _run(capsys, "--database-url", f"sqlite:///{tmp_path / 'w.db'}", "db", "upgrade")
    csv = tmp_path / "accounts.csv"
    csv.write_text("account_id,plan,timezone,active_from,active_until\na,gold,UTC,2026-02-01,\n")
    code, _, err = _run(
        capsys, "--database-url", f"sqlite:///{tmp_path / 'w.db'}", "accounts", "load", str(csv)
    )
    _one_line_error(code, err, "unknown plan 'gold'")


def test_generator_rejects_bad_sizes(capsys, tmp_path):
    code, _, err = _run(capsys, "--landing", str(tmp_path), "events", "generate", "--days", "0")
    _one_line_error(code, err, "must be positive")


def test_real_process_exit_code_and_stderr(tmp_path):
    env = {**os.environ, "USAGE_BILLING_CONFIG": str(tmp_path / "missing.toml")}
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "events", "generate", "--days", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: catalog file not found: {Path(tmp_path / 'missing.toml')}"
    ]


def test_the_command_leaves_fast_but_flushes_its_output_and_runs_exit_handlers(tmp_path):
    """``run`` skips the interpreter teardown (os._exit): what the step printed still reaches the pipe
    in full, exit handlers still run, and the exit code is kept (success and user error alike)."""
    script = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('exit handler ran', flush=False))\n"
        "from pipelines.cli import run\n"
        "sys.argv = ['usage-billing', *sys.argv[1:]]\n"
        "run()\n"
    )
    base = [sys.executable, "-c", script, "--config", str(CATALOG_PATH), "--landing", str(tmp_path)]
    ok = subprocess.run(
        [*base, "events", "generate", "--days", "1", "--accounts", "20", "--events-per-day", "200"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("wrote ") and ok.stdout.rstrip().endswith("exit handler ran"), ok.stdout
    assert list(tmp_path.rglob("*.jsonl*")) or list(tmp_path.rglob("*.parquet"))
    bad = subprocess.run(
        [*base, "events", "generate", "--days", "0"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: ") and "must be positive" in bad.stderr
    assert bad.stdout.strip() == "exit handler ran"


def test_under_a_profiler_the_command_exits_the_usual_way(tmp_path):
    """``python -m cProfile -o F -m pipelines.cli ...`` still gets its profile written."""
    profile = tmp_path / "run.prof"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cProfile",
            "-o",
            str(profile),
            "-m",
            "pipelines.cli",
            "--config",
            str(CATALOG_PATH),
            "--landing",
            str(tmp_path / "landing"),
            "events",
            "generate",
            "--days",
            "1",
            "--accounts",
            "20",
            "--events-per-day",
            "200",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("wrote ")
    import pstats

    assert any("events_generate" in name for _, _, name in pstats.Stats(str(profile)).stats)


def test_beam_flags_after_double_dash_reach_the_pipeline(capsys, sqlite_settings):
    from tests.conftest import small_dates

    day = small_dates()[0].isoformat()
    code, out, err = _run(
        capsys,
        "--database-url",
        sqlite_settings.database_url,
        "--lake",
        sqlite_settings.lake,
        "--landing",
        sqlite_settings.landing,
        "events",
        "ingest",
        "--date",
        day,
        "--",
        "--direct_num_workers=1",
        "--runner=FnApiRunner",
    )
    assert code == 0, err
    assert "clean" in out


def test_unknown_beam_runner(capsys, sqlite_settings):
    from tests.conftest import small_dates

    code, _, err = _run(
        capsys,
        "--database-url",
        sqlite_settings.database_url,
        "--lake",
        sqlite_settings.lake,
        "--landing",
        sqlite_settings.landing,
        "events",
        "ingest",
        "--date",
        small_dates()[0].isoformat(),
        "--",
        "--runner=NoSuchRunner",
    )
    _one_line_error(code, err, "Unexpected pipeline runner: NoSuchRunner")


def test_a_warehouse_without_migrations_is_named_before_any_work(capsys, tmp_path):
    code, _, err = _run(
        capsys,
        "--database-url",
        f"sqlite:///{tmp_path / 'empty.db'}",
        "--lake",
        str(tmp_path),
        "--landing",
        str(tmp_path),
        "events",
        "ingest",
        "--date",
        "2026-03-02",
    )
    _one_line_error(code, err, "is not initialised: run `usage-billing db upgrade`")
