"""User mistakes end with one clear line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.cli import main
from pipelines.runtime.context import RunContext
from pipelines.settings import Settings
from pipelines.warehouse.locks import lock_wait
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


def test_a_task_whose_dask_workers_all_died_is_one_line(capsys, monkeypatch, sqlite_settings):
    from types import SimpleNamespace

    from distributed.scheduler import KilledWorker

    from pipelines.lake import paths

    def lost(flags):  # type: ignore[no-untyped-def]
        raise KilledWorker("apply_dofn_to_bundle-1", SimpleNamespace(address="tcp://10.0.0.7:4100"), 3)

    monkeypatch.setattr(paths, "use_filesystem_options", lost)
    code, _, err = _run(capsys, "--database-url", sqlite_settings.database_url, "db", "upgrade")
    assert code == 2
    assert err.startswith("error: 4 Dask workers in turn died running one task of this run")
    assert "tcp://10.0.0.7:4100" in err and "rerun" in err and len(err.strip().splitlines()) == 1

    def broken(flags):  # type: ignore[no-untyped-def]
        raise ValueError("a bug")  # anything else is not dressed up as a lost worker

    monkeypatch.setattr(paths, "use_filesystem_options", broken)
    with pytest.raises(ValueError, match="a bug"):
        _run(capsys, "--database-url", sqlite_settings.database_url, "db", "upgrade")


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
    import sqlite3

    sqlite3.connect(tmp_path / "empty.db").close()  # a file, no tables
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


def test_an_impossible_date_is_called_impossible(capsys, tmp_path):
    code, _, err = _run(
        capsys, "--database-url", f"sqlite:///{tmp_path / 'w.db'}", "run-day", "--date", "2026-02-30"
    )
    _one_line_error(
        code, err, "invalid --date '2026-02-30': no such date: February 2026 has days 01 to 28, not 30"
    )
    code, _, err = _run(capsys, "events", "ingest", "--date", "2026-13-01")
    _one_line_error(code, err, "no such date: there is no month 13")


@pytest.mark.parametrize(
    "argv",
    [
        ["events", "ingest", "--date", "2026-03-02"],
        ["usage", "aggregate", "--date", "2026-03-02"],
        ["quota", "meter", "--month", "2026-03"],
        ["quota", "show", "--account", "acct-1"],
        ["dq", "check", "--date", "2026-03-02"],
        ["accounts", "load", "accounts.csv"],
        ["run-day", "--date", "2026-03-02"],
        ["invoices", "draft", "--month", "2026-03"],
        ["invoices", "export", "--month", "2026-03", "--out", "{new}/exports"],
        ["retirement", "report", "--as-of", "2026-03-02", "--out", "{new}/reports"],
        ["lake", "show"],
    ],
)
def test_a_failing_command_leaves_no_folder_or_file_behind(capsys, tmp_path, argv):
    """No warehouse yet at a path in a folder that does not exist: the command fails with one line
    and creates neither the folder, an empty database file, the lake, nor its output folder."""
    new = tmp_path / "new"
    args = [a.replace("{new}", str(new)) for a in argv]
    code, _, err = _run(
        capsys,
        "--database-url",
        f"sqlite:///{new / 'deeper' / 'warehouse.db'}",
        "--lake",
        str(new / "lake"),
        "--landing",
        str(new / "landing"),
        *args,
    )
    _one_line_error(code, err, "")
    assert not new.exists(), sorted(str(p) for p in new.rglob("*"))


@pytest.mark.parametrize(
    "argv",
    [
        ["invoices", "export", "--month", "2026-13", "--out", "{new}/exports"],
        ["retirement", "report", "--as-of", "2026-02-30", "--out", "{new}/reports"],
        ["events", "ingest", "--date", "2026-03-02"],
    ],
)
def test_a_failing_command_on_a_warehouse_creates_nothing_either(capsys, tmp_path, argv):
    from pipelines.warehouse.engine import make_engine, upgrade

    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    upgrade(make_engine(url))
    new = tmp_path / "new"
    args = [a.replace("{new}", str(new)) for a in argv]
    code, _, err = _run(
        capsys, "--database-url", url, "--lake", str(new / "lake"), "--landing", str(new / "landing"), *args
    )
    _one_line_error(code, err, "")
    assert not new.exists(), sorted(str(p) for p in new.rglob("*"))


def test_db_upgrade_names_the_revisions_it_applied(capsys, tmp_path):
    import migrations

    url = f"sqlite:///{tmp_path / 'sub' / 'warehouse.db'}"
    code, out, _ = _run(capsys, "--database-url", url, "db", "upgrade")
    assert code == 0 and f"applied {int(migrations.HEAD)} migration(s), 0001 .. {migrations.HEAD}" in out
    code, out, _ = _run(capsys, "--database-url", url, "db", "upgrade")
    assert code == 0 and f"was up to date (revision {migrations.HEAD})" in out


def test_an_export_with_nothing_to_export_says_so(capsys, tmp_path):
    from pipelines.warehouse.engine import make_engine, upgrade

    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    upgrade(make_engine(url))
    code, out, err = _run(
        capsys,
        "--database-url",
        url,
        "invoices",
        "export",
        "--month",
        "2026-03",
        "--out",
        str(tmp_path / "x"),
    )
    assert code == 0 and "0 documents" in out
    assert err.startswith("warning: 2026-03 has no numbered documents") and len(err.strip().splitlines()) == 1


def test_output_into_a_file_is_not_wrapped(tmp_path):
    """Into a pipe, a long line stays one line (here the one-line error of a long path)."""
    long = tmp_path / ("x" * 150) / "warehouse.db"
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "--database-url", f"sqlite:///{long}", "lake", "show"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and len(proc.stderr) > 200


def test_numbers_from_the_environment_are_read_once_into_the_settings(capsys, monkeypatch, sqlite_settings):
    """USAGE_BILLING_LOCK_WAIT reaches every step lock through the settings and the engine made from
    them; a value that is not a number is one line naming the variable."""
    monkeypatch.setenv("USAGE_BILLING_LOCK_WAIT", "7.5")
    monkeypatch.setenv("USAGE_BILLING_DAG_RETRIES", "-3")
    settings = Settings.from_env(database_url=sqlite_settings.database_url, config=sqlite_settings.config)
    assert (settings.lock_wait, settings.dag_retries) == (7.5, 0)
    monkeypatch.setenv("USAGE_BILLING_LOCK_WAIT", "0")  # read once: a later change does not reach it
    with RunContext.open(settings, []) as context:
        assert lock_wait(context.engine) == 7.5

    monkeypatch.setenv("USAGE_BILLING_LOCK_WAIT", "soon")
    code, _, err = _run(capsys, "--database-url", sqlite_settings.database_url, "db", "upgrade")
    _one_line_error(code, err, "USAGE_BILLING_LOCK_WAIT must be a number of seconds, got 'soon'")
