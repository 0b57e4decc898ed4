"""The production profile, end to end: an S3 lake and landing area (``rclone serve s3`` on loopback,
reached through Beam's S3 file system configured by ``--s3_*`` flags after ``--``, no AWS variable
set), every Beam pipeline on the DaskRunner against a dask.distributed cluster of two worker
processes, PostgreSQL.

Three generated days through ``run-day``, the month metered, drafted and finalized, then a late event
and its adjustment: the warehouse rows and the lake's committed partitions equal those of the same commands
on the embedded defaults (SQLite, a local lake, Beam in process), step by step.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select, text

from billing.plan import own_pool_models
from pipelines import lake
from pipelines.cli import main
from pipelines.jobs.generate import GeneratorConfig, generate
from pipelines.jobs.landing import write_landing
from pipelines.lake.paths import use_filesystem_options
from pipelines.settings import Settings
from pipelines.warehouse.engine import make_engine
from schemas.warehouse import Base, Invoice, InvoiceLine
from tests.conftest import CATALOG_PATH, cli_args
from tests.s3 import S3Store

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

START = dt.date(2026, 2, 27)
DAYS = [START + dt.timedelta(days=i) for i in range(3)]  # Feb 27, Feb 28, Mar 1
MONTH = "2026-02"
CONFIG = GeneratorConfig(
    start=START, days=3, accounts=60, events_per_day=700, seed=5, duplicate_rate=0.02, late_rate=0.03,
    late_max_days=2,
)  # fmt: skip
VOLATILE = {"run_id", "invoice_id", "corrects", "lake_id", "lake_path", "bound_by", "details", "source"}


def _catalog(tmp_path: Path) -> str:
    """The catalog with no grace days: three landing days close February (it began on the 27th)."""
    path = tmp_path / "catalog.toml"
    path.write_text(CATALOG_PATH.read_text() + "\n[invoicing]\nclose_grace_days = 0\n")
    return str(path)


def _norm(value):  # type: ignore[no-untyped-def]
    if isinstance(value, float):
        return round(value, 9)
    if isinstance(value, Decimal):
        return value.normalize()
    return value


def _warehouse(url: str) -> dict[str, list[tuple]]:
    """Every table's rows without run ids, timestamps and generated ids; invoice lines by number."""
    engine = make_engine(url)
    found: dict[str, list[tuple]] = {}
    with engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            if table.name in {
                "pipeline_locks",
                "lock_fences",
                "lake_bindings",
                "invoice_lines",
                "invoice_plans",
            }:
                continue
            columns = [c for c in table.columns if c.name not in VOLATILE and not c.name.endswith("_at")]
            rows = conn.execute(select(*columns)).all()
            found[table.name] = sorted((tuple(_norm(v) for v in r) for r in rows), key=repr)
        i, line = Invoice.__table__.c, InvoiceLine.__table__.c
        lines = conn.execute(
            select(
                i.account_id, i.kind, i.status, i.invoice_number, *[c for c in line if c.name != "invoice_id"]
            ).join_from(InvoiceLine.__table__, Invoice.__table__, line.invoice_id == i.invoice_id)
        ).all()
        found["invoice_lines"] = sorted((tuple(_norm(v) for v in r) for r in lines), key=repr)
    engine.dispose()
    return found


def _lake(root: str, read) -> dict[str, pa.Table]:  # type: ignore[no-untyped-def]
    """Each committed partition of every dataset as a reader sees it: its files (through the manifest on
    S3) by name, rows in a canonical order, without run ids and timestamps."""
    found = {}
    for folder in lake.list_folders(root):
        dataset = folder.rsplit("/", 1)[-1]
        if dataset.startswith("_"):
            continue
        for day in lake.partition_dates(root, dataset):
            for path in lake.list_files(lake.partition(root, dataset, day)):
                table = read(path)
                table = table.drop_columns(
                    [c for c in table.column_names if c in VOLATILE or c.endswith("_at")]
                )
                keys = [
                    (c, "ascending")
                    for c in table.column_names
                    if not pa.types.is_nested(table.schema.field(c).type)
                ]
                found[f"{dataset}/date={day}/{path.rsplit('/', 1)[-1]}"] = table.sort_by(keys)
    return found


def test_s3_dask_and_postgresql_give_the_embedded_results(  # type: ignore[no-untyped-def]
    tmp_path, postgres_url, s3_endpoint, dask_address, monkeypatch, catalog
):
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    landing = tmp_path / "landing"
    write_landing(generate(catalog, CONFIG), CONFIG, str(landing))
    config = _catalog(tmp_path)
    embedded = Settings(
        config, f"sqlite:///{tmp_path / 'warehouse.db'}", str(tmp_path / "lake"), str(landing)
    )
    bucket = S3Store(s3_endpoint)
    for path in sorted(landing.rglob("*")):
        if path.is_file():
            bucket.put(f"{bucket.root}/landing/{path.relative_to(landing).as_posix()}", path.read_bytes())
    engine = make_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    engine.dispose()
    production = dataclasses.replace(
        embedded, database_url=postgres_url, lake=f"{bucket.root}/lake", landing=f"{bucket.root}/landing"
    )
    s3_flags = [
        f"--s3_endpoint_url={s3_endpoint}", "--s3_access_key_id=test", "--s3_secret_access_key=test",
        "--s3_region_name=us-east-1",
    ]  # fmt: skip
    dask_flags = [
        "--runner=apache_beam.runners.dask.dask_runner.DaskRunner", f"--dask_client_address={dask_address}",
    ]  # fmt: skip

    def both(*command: str, pipeline: bool = False, lake_flags: bool = False, out: str = "") -> None:
        """The command on each profile (with ``out``: ``--out <tmp>/<out>/<profile>``)."""
        for name, settings, extra in (
            ("embedded", embedded, []),
            ("production", production, [*dask_flags, *s3_flags]),
        ):
            flags = extra if pipeline else [f for f in extra if f in s3_flags] if lake_flags else []
            where = ["--out", str(tmp_path / out / name)] if out else []
            argv = [*cli_args(settings), *command, *where, *(["--", *flags] if flags else [])]
            assert main(argv) == 0, (settings.database_url, command)
        use_filesystem_options([])

    def same_file(out: str, name: str) -> None:
        here, there = (
            json.loads((tmp_path / out / p / name).read_text()) for p in ("embedded", "production")
        )
        assert there == here, name

    def same() -> None:
        use_filesystem_options(s3_flags)
        here, there = _warehouse(embedded.database_url), _warehouse(production.database_url)
        for table in here:
            assert there[table] == here[table], table
        local = _lake(embedded.lake, pq.read_table)
        remote = _lake(production.lake, lambda p: pq.read_table(io.BytesIO(bucket.get(p))))
        assert sorted(remote) == sorted(local)
        for name, table in local.items():
            assert remote[name].equals(table), name
        use_filesystem_options([])

    try:
        both("db", "upgrade")
        both("accounts", "load", str(landing / "accounts.csv"))
        for day in DAYS:
            both("run-day", "--date", day.isoformat(), pipeline=True)
        both("quota", "meter", "--month", MONTH, pipeline=True)
        both("invoices", "draft", "--month", MONTH)
        both("invoices", "finalize", "--month", MONTH)
        same()
        # What reads the lake outside the pipelines, on S3 through the same flags: the gate, the
        # reports, the migration preview, the files a reader should read.
        both("dq", "check", "--from", DAYS[0].isoformat(), "--to", DAYS[-1].isoformat(), lake_flags=True)
        week = ["--from", "2026-02-23", "--to", "2026-03-01"]
        both("effectiveness", "report", *week, pipeline=True, out="effectiveness")
        same_file("effectiveness", "effectiveness.json")
        fast = own_pool_models(catalog)[0]
        both("retirement", "preview", "--model", fast, "--month", MONTH, lake_flags=True, out="preview")
        same_file("preview", "preview.json")
        counts = _warehouse(production.database_url)
        assert counts["usage_daily"] and counts["billable_usage"] and counts["task_effectiveness"]
        assert [r for r in counts["invoices"] if "finalized" in r], "February was finalized"

        # A late event for February 28 lands with March 1's files and is billed by an adjustment. (That
        # a rerun on the object store changes nothing is tests/lake/test_remote_lake.py's.)
        account = _warehouse(embedded.database_url)["usage_daily"][0][1]
        late = {"event_id": "late-feb-28", "event_time": "2026-02-28T23:00:00Z", "account_id": account,
                "model": "gpt-5.6-sol", "speed_tier": "priority", "input_tokens": 500000,
                "cached_input_tokens": 0, "output_tokens": 90000, "status": "ok"}  # fmt: skip
        body = (json.dumps(late) + "\n").encode()
        (landing / DAYS[2].isoformat() / "late.jsonl").write_bytes(body)
        bucket.put(f"{bucket.root}/landing/{DAYS[2].isoformat()}/late.jsonl", body)
        both("run-day", "--date", DAYS[2].isoformat(), pipeline=True)
        both("invoices", "draft", "--month", MONTH)
        both("invoices", "finalize", "--month", MONTH)
        both("quota", "explain", "--event-id", "late-feb-28", "--date", "2026-02-28", lake_flags=True)
        same()
        rows = _warehouse(production.database_url)["invoices"]
        assert any("adjustment" in r and account in r for r in rows), (
            "the late event was billed by an adjustment"
        )
    finally:
        use_filesystem_options([])
        bucket.clear()
