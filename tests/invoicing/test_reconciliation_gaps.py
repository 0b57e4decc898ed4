"""``finance_reconciliation_gaps`` says where each unreconciled token belongs: its account-local month
and the step that would close it; a fully processed month has no row (SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from sqlalchemy import text

from pipelines.invoicing import documents as invoicing
from pipelines.jobs.generate import GeneratorConfig, generate
from pipelines.jobs.landing import write_landing
from pipelines.quota import meter
from pipelines.settings import Settings
from pipelines.warehouse.accounts import load_accounts
from pipelines.warehouse.engine import make_engine, upgrade
from tests.conftest import CATALOG_PATH, run_day

pytestmark = pytest.mark.slow
START = dt.date(2026, 2, 1)
DAYS = 31  # UTC Feb 1 .. Mar 3: February whole, with the grace days that close it


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request, tmp_path):  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'warehouse.db'}"
    return request.getfixturevalue("postgres_url")


def _gaps(engine) -> dict[tuple[str, str], tuple[int, str]]:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT month, step, tokens, close_with FROM finance_reconciliation_gaps"))
        return {(r.month, r.step): (int(r.tokens), r.close_with) for r in rows}


def _reconciliation(engine) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT sum(unmetered_tokens), sum(uninvoiced_tokens) FROM finance_reconciliation")
        ).one()
    return int(row[0] or 0), int(row[1] or 0)


def test_gaps_are_named_by_local_month_and_step_and_a_processed_month_has_none(url, tmp_path, catalog):
    engine = make_engine(url)
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    upgrade(engine)
    config = GeneratorConfig(START, DAYS, 80, 200, seed=3, duplicate_rate=0, late_rate=0)
    landing = tmp_path / "landing"
    generated = generate(catalog, config)
    write_landing(generated, config, str(landing))
    # An event on an American account's local Jan 31 (UTC Feb 1, 02:00), whatever the generator drew.
    west = next(
        a
        for a in generated.accounts
        if a["timezone"].startswith("America/") and a["active_from"] <= "2026-02-01"
    )
    event = {"event_id": "jan-31-local", "event_time": "2026-02-01T02:00:00Z",
             "account_id": west["account_id"], "model": "gpt-5.6-sol", "speed_tier": "standard",
             "input_tokens": 1000, "cached_input_tokens": 0, "output_tokens": 100, "duration_ms": 900,
             "status": "ok"}  # fmt: skip
    (landing / "2026-02-01" / "edge.jsonl").write_text(json.dumps(event) + "\n")
    settings = Settings(str(CATALOG_PATH), url, str(tmp_path / "lake"), str(landing))
    load_accounts(engine, landing / "accounts.csv", catalog)
    dates = [START + dt.timedelta(days=i) for i in range(DAYS)]
    run_day(settings, dates)  # meters the local days around every UTC day: Jan 31 .. Mar 4
    # Undo the metering of local Jan 31 and of March, then meter February alone: February is fully
    # processed once invoiced; Jan 31 and March are metered never and not yet.
    with engine.begin() as conn:
        for table in ("billable_usage", "metered_days", "metered_dates"):
            conn.execute(
                text(f"DELETE FROM {table} WHERE local_day < :a OR local_day > :b"),
                {"a": dt.date(2026, 2, 1), "b": dt.date(2026, 2, 28)},
            )
    invoicing.draft(engine, catalog, "2026-02")
    invoicing.finalize(engine, catalog, "2026-02")

    gaps = _gaps(engine)
    assert not [key for key in gaps if key[0] == "2026-02"]  # February: every token on a document
    assert set(gaps) == {("2026-01", "meter"), ("2026-03", "meter")}
    assert gaps[("2026-01", "meter")][1] == "usage-billing quota meter --month 2026-01"
    unmetered, uninvoiced = _reconciliation(engine)
    assert sum(tokens for tokens, _ in gaps.values()) == unmetered > 0 and uninvoiced == 0

    # March metered, not invoiced yet: its gap moves from metering to invoicing, with the same tokens.
    meter.main([*settings.argv(), "--from", "2026-03-01", "--to", "2026-03-04"])
    after = _gaps(engine)
    assert set(after) == {("2026-01", "meter"), ("2026-03", "invoice")}
    assert after[("2026-03", "invoice")][0] == gaps[("2026-03", "meter")][0]
    assert after[("2026-03", "invoice")][1] == "usage-billing invoices draft --month 2026-03, then finalize"
    unmetered, uninvoiced = _reconciliation(engine)
    assert uninvoiced == after[("2026-03", "invoice")][0]
    engine.dispose()
