"""The Airflow DAGs: they parse cleanly without touching a database, follow the policy, and real runs
(`dag.test()` on a temporary Airflow home) produce the same warehouse rows as the command line."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from pipelines.cli import main
from pipelines.jobs.generate import GeneratorConfig, generate
from pipelines.jobs.landing import write_landing
from pipelines.settings import Settings
from pipelines.warehouse.accounts import load_accounts
from pipelines.warehouse.binding import rebind
from pipelines.warehouse.engine import make_engine, upgrade
from tests.conftest import CATALOG_PATH, ROOT, cli_args, close_month, table_rows

pytestmark = pytest.mark.slow
DAGS = ROOT / "airflow_dags"
DAYS = [dt.date(2026, 3, 29), dt.date(2026, 3, 30), dt.date(2026, 3, 31)]  # Sun, Mon, Tue

PARSE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
out = {
    "errors": {k: str(v) for k, v in bag.import_errors.items()},
    "dags": {
        i: {"file": d.fileloc, "tags": sorted(d.tags), "catchup": d.catchup, "doc": bool(d.doc_md),
            "retries": {t.task_id: t.retries for t in d.tasks},
            "schedule": str(getattr(d.timetable, "description", "")) + repr(d.schedule)}
        for i, d in bag.dags.items()
    },
    "ours": sorted(m for m in sys.modules if m.split(".")[0] in ("pipelines", "billing", "schemas")),
}
print(json.dumps(out))
"""

RUN = """
import datetime as dt, json, os, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
for dag_id, logical, conf, env in json.loads(sys.argv[2]):
    os.environ.update(env)  # the tasks read their settings when they run
    run = bag.dags[dag_id].test(logical_date=dt.datetime.fromisoformat(logical), run_conf=conf)
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    print("RESULT " + json.dumps({"state": str(run.state), "tasks": states}), flush=True)
"""


def _env(home: Path, settings: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "USAGE_BILLING"))}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(DAGS),
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
        GX_ANALYTICS_ENABLED="false",
        **(settings or {}),
    )
    return env


def test_every_dag_parses_without_errors_or_project_imports_and_follows_the_policy(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", PARSE, str(DAGS)],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["errors"] == {}
    assert sorted(out["dags"]) == ["billing_monthly", "retirement_weekly", "usage_daily"]
    assert set(out["ours"]) <= {
        "pipelines",
        "pipelines.jobs",
        "pipelines.jobs.chain",
        "pipelines.jobs.dag_defaults",
        "pipelines.settings",
        "pipelines.errors",
    }  # no warehouse code at parse time
    for dag_id, d in out["dags"].items():
        assert Path(d["file"]).stem == dag_id
        assert "usage-billing" in d["tags"] and d["catchup"] is False and d["doc"]
        gates = {"quality_gate", "reconcile"}
        assert all(r >= 1 for task, r in d["retries"].items() if task not in gates), d["retries"]
    assert "usage_month_closed" in out["dags"]["billing_monthly"]["schedule"]
    assert "usage_week_complete" in out["dags"]["retirement_weekly"]["schedule"]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory, catalog):  # type: ignore[no-untyped-def]
    """Three landing days at the end of a month, accounts, a migrated Airflow home."""
    root = tmp_path_factory.mktemp("airflow")
    cfg = GeneratorConfig(
        start=DAYS[0], days=len(DAYS), accounts=120, events_per_day=900, seed=21, late_rate=0.02
    )
    write_landing(generate(catalog, cfg), cfg, str(root / "landing"))
    home = root / "home"
    home.mkdir()
    migrate = subprocess.run(
        [str(Path(sys.executable).with_name("airflow")), "db", "migrate"],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    return root, home


def _warehouse(root: Path, name: str, catalog) -> dict[str, str]:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{root / name / 'w.db'}"
    (root / name).mkdir()
    engine = make_engine(url)
    upgrade(engine)
    load_accounts(engine, root / "landing" / "accounts.csv", catalog)
    engine.dispose()
    return {
        "USAGE_BILLING_CONFIG": str(CATALOG_PATH),
        "USAGE_BILLING_DATABASE_URL": url,
        "USAGE_BILLING_LAKE": str(root / name / "lake"),
        "USAGE_BILLING_LANDING": str(root / "landing"),
        "USAGE_BILLING_EXPORTS": str(root / name / "exports"),
        "USAGE_BILLING_REPORTS": str(root / name / "reports"),
    }


def _dag_tests(
    home: Path, runs: list[tuple[dict, str, str, dict | None]], printed: list[str] | None = None
) -> list[dict]:
    """``dag.test()`` of each (settings, dag id, logical date, conf) in turn, in one Airflow process
    (starting Airflow and Beam once), each with its settings in the environment its tasks read;
    ``printed`` gets what the process wrote (stdout and stderr)."""
    env = {**_env(home), "USAGE_BILLING_DAG_RETRIES": "0"}  # dag.test() would wait out retries
    plan = [[dag_id, logical, conf or {}, settings] for settings, dag_id, logical, conf in runs]
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(DAGS), json.dumps(plan)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if printed is not None:
        printed.append(done.stdout + done.stderr)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and len(lines) == len(runs), (done.stdout[-2000:], done.stderr[-4000:])
    return [json.loads(line.removeprefix("RESULT ")) for line in lines]


def _dag_test(home: Path, settings: dict, dag_id: str, logical: str, conf: dict | None = None) -> dict:
    return _dag_tests(home, [(settings, dag_id, logical, conf)])[0]


def _rows(env: dict, query: str) -> list[tuple]:
    engine = make_engine(env["USAGE_BILLING_DATABASE_URL"])
    with engine.connect() as conn:
        rows = [tuple(r) for r in conn.execute(text(query))]
    engine.dispose()
    return rows


def _settings_of(env: dict) -> Settings:
    return Settings(
        config=env["USAGE_BILLING_CONFIG"],
        database_url=env["USAGE_BILLING_DATABASE_URL"],
        lake=env["USAGE_BILLING_LAKE"],
        landing=env["USAGE_BILLING_LANDING"],
    )


def _cli(settings: dict, *args: str) -> None:
    """The command, in this process, on the settings a DAG's tasks get from the environment."""
    assert main([*cli_args(_settings_of(settings)), *args]) == 0, args


def _invoices(url: str) -> list[tuple]:
    engine = make_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT i.invoice_number, i.account_id, i.kind, i.status, i.total, l.line_no, l.line_type, "
                "l.model, l.speed_tier, l.token_kind, l.quantity, l.unit_price, l.amount "
                "FROM invoices i JOIN invoice_lines l ON l.invoice_id = i.invoice_id ORDER BY 1, 6"
            )
        ).all()
    engine.dispose()
    return [tuple(r) for r in rows]


def _unmetered_copy(settings: dict[str, str], scratch: Path) -> dict[str, str]:
    """A copy of a closed month's warehouse and lake holding usage that was never metered."""
    shutil.copytree(Path(settings["USAGE_BILLING_DATABASE_URL"].removeprefix("sqlite:///")).parent, scratch)
    copy = {
        **settings,
        "USAGE_BILLING_DATABASE_URL": f"sqlite:///{scratch / 'w.db'}",
        "USAGE_BILLING_LAKE": str(scratch / "lake"),
        "USAGE_BILLING_EXPORTS": str(scratch / "exports"),
        "USAGE_BILLING_REPORTS": str(scratch / "reports"),
    }
    engine = make_engine(copy["USAGE_BILLING_DATABASE_URL"])
    rebind(engine, copy["USAGE_BILLING_LAKE"], "the test runs on a copy of the warehouse and lake")
    with engine.begin() as conn:
        key = conn.execute(text("SELECT day, account_id, model, speed_tier FROM usage_daily LIMIT 1")).one()
        conn.execute(
            text(
                "UPDATE usage_daily SET output_tokens = output_tokens + 1 WHERE day = :day "
                "AND account_id = :account_id AND model = :model AND speed_tier = :speed_tier"
            ),
            key._asdict(),
        )
    engine.dispose()
    return copy


SECRET = "s3cr3t-Af-91xQ"


def _with_password(postgres_settings, root: Path, catalog) -> tuple[dict, dict]:  # type: ignore[no-untyped-def]
    """Settings of a PostgreSQL warehouse whose URL carries a password: working, and on a closed port."""
    from sqlalchemy.engine import make_url

    url = make_url(postgres_settings.database_url).set(password=SECRET).render_as_string(hide_password=False)
    engine = make_engine(url)
    load_accounts(engine, root / "landing" / "accounts.csv", catalog)
    engine.dispose()
    settings = {
        "USAGE_BILLING_CONFIG": str(CATALOG_PATH),
        "USAGE_BILLING_DATABASE_URL": url,
        "USAGE_BILLING_LAKE": str(root / "secret" / "lake"),
        "USAGE_BILLING_LANDING": str(root / "landing"),
    }
    closed = make_url(url).set(port=1).render_as_string(hide_password=False)
    return settings, {**settings, "USAGE_BILLING_DATABASE_URL": closed}


def test_daily_monthly_and_weekly_dags_produce_what_the_command_line_produces(
    scenario, catalog, postgres_settings
):
    """... and a password in USAGE_BILLING_DATABASE_URL (the daily DAG once working, once against a
    closed port, in the same Airflow process) reaches no task output, no log file and not Airflow's
    metadata database."""
    from schemas.warehouse import BillableUsage, MeteredDay, ModelDaily, PoolUsage, UsageDaily

    root, home = scenario
    via_airflow = _warehouse(root, "airflow", catalog)
    daily = [(via_airflow, "usage_daily", f"{day.isoformat()}T00:00:00+00:00", None) for day in DAYS]
    # Three days are not the history the weekly detector needs: its report task fails clearly.
    weekly = (via_airflow, "retirement_weekly", "2026-03-30T00:00:00+00:00", {"as_of": "2026-03-29"})
    secret, closed = _with_password(postgres_settings, root, catalog)
    printed: list[str] = []
    *days, week, with_secret, refused = _dag_tests(
        home,
        [
            *daily,
            weekly,
            (secret, "usage_daily", f"{DAYS[0].isoformat()}T00:00:00+00:00", None),
            (closed, "usage_daily", f"{DAYS[1].isoformat()}T00:00:00+00:00", None),
        ],
        printed,
    )
    assert with_secret["state"] == "success" and refused["state"] == "failed", (with_secret, refused)
    assert "Connection refused" in printed[0] and SECRET not in printed[0]
    leaks = [p for p in root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaks == []  # the Airflow home (logs, metadata database) and the lake
    for day, result in zip(DAYS, days, strict=True):
        assert result["state"] == "success", result
        sunday = day.weekday() == 6
        assert result["tasks"]["week_complete"] == ("success" if sunday else "skipped"), result
        assert result["tasks"]["deliver_notifications"] == "success", result
    # The crossings the metering wrote, delivered after it (by default as JSON lines under the lake).
    lake = Path(via_airflow["USAGE_BILLING_LAKE"])
    delivered = [
        json.loads(x)["id"] for f in lake.glob("notifications/*/*.jsonl") for x in f.read_text().splitlines()
    ]
    said = {
        r[0] for r in _rows(via_airflow, "SELECT notification_id FROM notifications WHERE status = 'sent'")
    }
    assert len(delivered) == len(said) > 0 and set(delivered) == said
    assert week["state"] == "failed" and week["tasks"]["report"] == "failed", week

    close_month(_settings_of(via_airflow), "2026-03", root / "airflow")
    unmetered = _unmetered_copy(via_airflow, root / "mismatch")
    month = {"month": "2026-03"}
    stopped, monthly, again = _dag_tests(
        home,
        [
            (unmetered, "billing_monthly", "2026-04-03T00:00:00+00:00", month),
            (via_airflow, "billing_monthly", "2026-04-03T00:00:00+00:00", month),
            # A rerun of a day (a backfill or a cleared task) changes nothing: compared below.
            (via_airflow, "usage_daily", f"{DAYS[1].isoformat()}T00:00:00+00:00", None),
        ],
    )
    # Usage that was never metered: the reconciliation fails and nothing is finalized.
    assert stopped["state"] == "failed" and stopped["tasks"]["reconcile"] == "failed", stopped
    assert stopped["tasks"]["finalize"] in ("upstream_failed", "None")
    assert monthly["state"] == "success" and set(monthly["tasks"].values()) == {"success"}, monthly
    assert (Path(via_airflow["USAGE_BILLING_EXPORTS"]) / "2026-03" / "invoices.csv").exists()
    assert again["state"] == "success", again

    via_cli = _warehouse(root, "cli", catalog)
    for day in DAYS:
        _cli(via_cli, "run-day", "--date", day.isoformat())
    close_month(_settings_of(via_cli), "2026-03", root / "cli")
    for step in ("draft", "finalize"):
        _cli(via_cli, "invoices", step, "--month", "2026-03")

    for model in (UsageDaily, ModelDaily, BillableUsage, MeteredDay, PoolUsage):
        assert table_rows(via_airflow["USAGE_BILLING_DATABASE_URL"], model) == table_rows(
            via_cli["USAGE_BILLING_DATABASE_URL"], model
        ), model.__tablename__
    airflow_invoices = _invoices(via_airflow["USAGE_BILLING_DATABASE_URL"])
    assert airflow_invoices and airflow_invoices == _invoices(via_cli["USAGE_BILLING_DATABASE_URL"])


def test_weekly_dag_writes_the_report_the_command_line_writes(scenario, catalog, tmp_path):
    """Fifteen weeks built once from the command line; the weekly DAG and `retirement report` each run
    on a copy and must store the same adoption rows and candidates, and the same migration previews of
    the candidates (the week as of 2026-08-30 flags two models on this data; a week later the fast
    model's decline is no longer significant)."""
    from schemas.warehouse import ModelMigration, ModelWeekly

    _, home = scenario
    start, end, as_of = dt.date(2026, 5, 25), dt.date(2026, 9, 6), dt.date(2026, 8, 30)
    base = tmp_path / "base"
    cfg = GeneratorConfig(
        start=start, days=(end - start).days + 1, accounts=700, events_per_day=900, seed=5, fmt="parquet"
    )
    write_landing(generate(catalog, cfg), cfg, str(base / "landing"))
    settings = _warehouse(base, "w", catalog)
    settings["USAGE_BILLING_LANDING"] = str(base / "landing")
    _cli(settings, "events", "ingest", "--from", start.isoformat(), "--to", end.isoformat())
    _cli(settings, "usage", "aggregate", "--from", start.isoformat(), "--to", end.isoformat())
    _cli(settings, "quota", "meter", "--from", start.isoformat(), "--to", end.isoformat())
    copies = {}
    for name in ("dag", "cli"):
        shutil.copytree(base / "w", tmp_path / name)
        copies[name] = {
            **settings,
            "USAGE_BILLING_DATABASE_URL": f"sqlite:///{tmp_path / name / 'w.db'}",
            "USAGE_BILLING_LAKE": str(tmp_path / name / "lake"),
            "USAGE_BILLING_REPORTS": str(tmp_path / name / "reports"),
        }
        engine = make_engine(copies[name]["USAGE_BILLING_DATABASE_URL"])  # a copy is a moved lake
        rebind(
            engine, copies[name]["USAGE_BILLING_LAKE"], "the test runs on a copy of the warehouse and lake"
        )
        engine.dispose()
    run = _dag_test(
        home, copies["dag"], "retirement_weekly", "2026-08-31T00:00:00+00:00", {"as_of": as_of.isoformat()}
    )
    assert run["state"] == "success", run
    out = tmp_path / "cli" / "reports" / as_of.isoformat()
    _cli(copies["cli"], "retirement", "report", "--as-of", as_of.isoformat(), "--out", str(out))
    for model in (ModelWeekly, ModelMigration):
        rows = table_rows(copies["dag"]["USAGE_BILLING_DATABASE_URL"], model)
        assert rows and rows == table_rows(copies["cli"]["USAGE_BILLING_DATABASE_URL"], model)
    picked = "SELECT model, detected, flagged, weeks_used, accounts_q, successor FROM retirement_candidates"
    results = []
    for name in ("dag", "cli"):
        engine = make_engine(copies[name]["USAGE_BILLING_DATABASE_URL"])
        with engine.connect() as conn:
            results.append(sorted(tuple(r) for r in conn.execute(text(picked))))
        engine.dispose()
    assert results[0] and results[0] == results[1]
    dag_out = tmp_path / "dag" / "reports" / as_of.isoformat()
    assert (dag_out / "report.html").exists()
    # the DAG ran each candidate's migration preview and stored it with the report, as the CLI does
    flagged = [r[0] for r in results[0] if r[2]]
    assert "gpt-5.3-codex-spark" in flagged
    for model in flagged:
        for name in (f"preview-{model}/preview.csv", f"accounts-{model}.csv"):
            assert (dag_out / name).read_text() == (out / name).read_text(), name
