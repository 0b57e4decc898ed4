"""Issue 9, point 4: a password in the database URL never leaks; hostile strings stay data.

Commands run against PostgreSQL (trust authentication accepts any password, so a URL with one works):
the failures as real processes (their exit code and the one line on stderr), the working steps in
the test's process with its file descriptors captured, so whatever they print is read as a
process's output would be. The tests grep everything a person or a tool could read afterwards: stdout,
stderr, every file the run wrote (lake, exports, reports) and a dump of the database.
"""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import json
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from pipelines import lake
from pipelines.settings import Settings
from pipelines.warehouse.engine import make_engine
from tests.conftest import CATALOG_PATH, cli_args, close_month
from tests.runtime.test_faults import cli

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

SECRET = "s3cr3t-Pw-7f3Qz"
DAY = dt.date(2026, 3, 2)


def _with_password(url: str) -> str:
    return make_url(url).set(password=SECRET).render_as_string(hide_password=False)


def _leaks(folder: Path) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


def test_a_password_in_the_database_url_appears_in_no_output_file_or_table(
    postgres_settings, tmp_path, small_landing, capfd
):
    url = _with_password(postgres_settings.database_url)
    s = Settings(
        config=str(CATALOG_PATH), database_url=url, lake=str(tmp_path / "lake"), landing=str(small_landing)
    )
    from pipelines.cli import main

    def here(*args: str) -> subprocess.CompletedProcess:
        """A step in this process, its file descriptors captured: what it prints is what a process would."""
        code = main([*cli_args(s), *args])
        printed = capfd.readouterr()
        return subprocess.CompletedProcess(args, code, printed.out, printed.err)

    runs = [
        here("db", "upgrade"),
        here("accounts", "load", str(Path(small_landing) / "accounts.csv")),
        here("run-day", "--date", DAY.isoformat()),
        here("quota", "show", "--account", "acct-00001", "--at", "2026-03-02T23:00:00+00:00"),
    ]
    close_month(s, "2026-03", tmp_path)
    capfd.readouterr()
    runs += [
        here("invoices", "draft", "--month", "2026-03"),
        here("invoices", "finalize", "--month", "2026-03"),
        here("invoices", "export", "--month", "2026-03", "--out", str(tmp_path / "exports")),
        cli(s, "retirement", "report", "--as-of", "2026-03-08", "--out", str(tmp_path / "reports")),
        cli(s, "run-day", "--date", "2026-02-30"),  # a user mistake
    ]
    assert [r.returncode for r in runs[:7]] == [0] * 7, [r.stderr for r in runs]
    assert runs[7].returncode == 2 and runs[8].returncode == 2  # too little history; not a date
    # The database is unreachable, or does not exist, or refuses: the error names it without the password.
    port_closed = make_url(url).set(port=1).render_as_string(hide_password=False)
    no_database = make_url(url).set(database="no_such_db_x").render_as_string(hide_password=False)
    for bad in (port_closed, no_database):
        failed = cli(Settings(s.config, bad, s.lake, s.landing), "run-day", "--date", DAY.isoformat())
        assert failed.returncode == 2 and "***" in failed.stderr, failed.stderr
        runs.append(failed)
    for r in runs:
        assert SECRET not in r.stdout + r.stderr, r.args
        assert "Traceback" not in r.stderr, r.stderr
    assert _leaks(tmp_path) == []
    name = make_url(url).database
    dump = subprocess.run(
        ["pg_dump", "-h", "127.0.0.1", "-U", "postgres", "--data-only", name],
        capture_output=True,
        timeout=300,
    )
    assert dump.returncode == 0 and b"acct-00001" in dump.stdout and SECRET.encode() not in dump.stdout


HOSTILE = [
    "o'brien",
    'q"uote',
    "a;drop/**/table/**/usage_daily;--",
    "x[/]y[bold]",
    "ünïcødé-账户-🚀",
    "back\\slash",
    "%s%(x)s{0}",
]
LONG = "z" * 10_000


def _event(i: int, account: str, model: str = "gpt-5.1") -> dict:
    return {
        "event_id": f"evt-hostile-{i:04d}",
        "event_time": f"{DAY}T10:{i % 60:02d}:00Z",
        "account_id": account,
        "user_id": f"u-{account[:50]}",
        "model": model,
        "speed_tier": "standard",
        "input_tokens": 1000 + i,
        "cached_input_tokens": 0,
        "output_tokens": 10 + i,
        "duration_ms": 100,
        "status": "ok",
        "error_code": None,
    }


def test_hostile_account_ids_and_model_names_stay_data_through_the_command_line_and_ingest(
    postgres_settings, tmp_path, capfd
):
    from pipelines.cli import main

    landing = tmp_path / "landing"
    (landing / DAY.isoformat()).mkdir(parents=True)
    events = [_event(i, a) for i, a in enumerate(HOSTILE)]
    events.append(_event(100, LONG))  # quarantined: value_too_long
    events.append(_event(101, "acct-plain", model="gpt-5.1'; DROP TABLE invoices; --"))  # unknown_model
    with gzip.open(landing / DAY.isoformat() / "batch.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.writelines(json.dumps(e, ensure_ascii=False) + "\n" for e in events)
    with open(landing / "accounts.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["account_id", "plan", "timezone", "active_from", "active_until"])
        writer.writerows([a, "plus", "UTC", "2026-03-01", ""] for a in HOSTILE)
    s = Settings(
        postgres_settings.config, postgres_settings.database_url, str(tmp_path / "lake"), str(landing)
    )
    done = cli(s, "accounts", "load", str(landing / "accounts.csv"))
    assert done.returncode == 0, done.stderr
    done = cli(s, "run-day", "--date", DAY.isoformat())
    assert done.returncode == 0, done.stderr

    engine = make_engine(s.database_url)
    with engine.connect() as conn:
        stored = {r[0] for r in conn.execute(text("SELECT DISTINCT account_id FROM usage_daily"))}
        billed = {r[0] for r in conn.execute(text("SELECT DISTINCT account_id FROM billable_usage"))}
        tables = {
            r[0] for r in conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'"))
        }
    assert stored == billed == set(HOSTILE)
    assert {"usage_daily", "invoices", "accounts"} <= tables
    quarantine = pa.concat_tables(
        lake.read_parquet(f) for f in lake.list_files(lake.partition(s.lake, lake.QUARANTINE, DAY))
    ).to_pylist()
    reasons = {r["event_id"]: r["reason"] for r in quarantine}
    assert reasons == {"evt-hostile-0100": "value_too_long", "evt-hostile-0101": "unknown_model"}
    raw = next(r for r in quarantine if r["event_id"] == "evt-hostile-0101")
    assert "gpt-5.1'; DROP TABLE invoices; --" in json.dumps(raw, ensure_ascii=False, default=str)

    # each account id as an argument of the command, parsed as a process parses it (in this process:
    # what a real process adds, its exit code and one line on stderr, is shown by the commands below)
    for account in HOSTILE:
        code = main([*cli_args(s), "quota", "show", "--account", account, "--at", f"{DAY}T23:00:00+00:00"])
        shown = capfd.readouterr()
        assert code == 0, shown.err
        assert account in shown.out and "plus" in shown.out
    for account in (LONG, "nobody' OR '1'='1"):
        code = main([*cli_args(s), "quota", "show", "--account", account])
        shown = capfd.readouterr()
        assert code == 2 and len(shown.err.strip().splitlines()) == 1, shown.err
    voided = cli(
        s, "invoices", "void", "--number", "INV' OR '1'='1", "--reason", "'; DELETE FROM invoices; --"
    )
    assert voided.returncode == 2 and "Traceback" not in voided.stderr
    drafted = cli(s, "invoices", "draft", "--month", "2026-03", "--open-month")
    assert drafted.returncode == 0, drafted.stderr
    with engine.connect() as conn:
        invoiced = {r[0] for r in conn.execute(text("SELECT DISTINCT account_id FROM invoices"))}
    engine.dispose()
    assert invoiced == set(HOSTILE)

    too_long = tmp_path / "long.csv"
    too_long.write_text(f"account_id,plan,timezone,active_from,active_until\n{LONG},plus,UTC,2026-03-01,\n")
    refused = cli(s, "accounts", "load", str(too_long))
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"error: {too_long} line 2: account_id is 10,000 characters; at most 200 are allowed"
    ]
