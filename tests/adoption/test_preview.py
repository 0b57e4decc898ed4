"""The migration preview on a generated, metered month: it gives the totals ``invoices draft`` gives,
before the what-if and after it (on a copy of the warehouse and lake whose events were rewritten the
same way and metered again), and it writes nothing.

The scenario of ``tests/adoption/test_preview_rule.py`` checks the rule itself against hand-computed
amounts; this file checks that the preview and the pipeline agree.
"""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from pipelines.adoption.preview import preview
from pipelines.adoption.preview_files import CSV_COLUMNS
from pipelines.cli import app
from pipelines.invoicing import documents as invoicing
from pipelines.quota import meter
from pipelines.settings import Settings
from pipelines.warehouse.accounts import load_accounts
from pipelines.warehouse.binding import rebind
from pipelines.warehouse.engine import make_engine, upgrade
from schemas.warehouse import Invoice
from tests.conftest import cli_args, close_month, run_day, small_dates, sqlite_at

pytestmark = pytest.mark.slow
MONTH = "2026-03"
FAST, SUCCESSOR = "gpt-5.3-codex-spark", "gpt-5.6-sol"


@pytest.fixture(scope="module")
def metered(tmp_path_factory, small_landing, catalog) -> Settings:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("preview-metered")
    settings = sqlite_at(root, small_landing)
    engine = make_engine(settings.database_url)
    upgrade(engine)
    load_accounts(engine, Path(settings.landing) / "accounts.csv", catalog)
    engine.dispose()
    run_day(settings, small_dates())
    close_month(settings, MONTH, root)
    return settings


def _copy(settings: Settings, target: Path) -> Settings:
    target.mkdir(parents=True)
    shutil.copytree(settings.lake, target / "lake")
    shutil.copy(settings.database_url.removeprefix("sqlite:///"), target / "w.db")
    copy = Settings(settings.config, f"sqlite:///{target / 'w.db'}", str(target / "lake"), settings.landing)
    rebind(make_engine(copy.database_url), copy.lake, "a test's copy")
    return copy


def _draft_totals(settings: Settings, catalog) -> dict[str, Decimal]:  # type: ignore[no-untyped-def]
    engine = make_engine(settings.database_url)
    invoicing.draft(engine, catalog, MONTH)
    i = Invoice.__table__.c
    with engine.connect() as conn:
        rows = conn.execute(select(i.account_id, i.total).where(i.period == MONTH, i.status == "draft")).all()
    engine.dispose()
    return {a: Decimal(t) for a, t in rows}


def _fingerprint(settings: Settings) -> dict[str, str]:
    files = sorted(p for p in Path(settings.lake).rglob("*") if p.is_file())
    files.append(Path(settings.database_url.removeprefix("sqlite:///")))
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_current_totals_are_the_drafts_and_the_preview_writes_nothing(metered, catalog, tmp_path):
    before = _fingerprint(metered)
    result = CliRunner().invoke(
        app,
        [
            *cli_args(metered),
            "retirement",
            "preview",
            "--model",
            FAST,
            "--month",
            MONTH,
            "--out",
            str(tmp_path / "p"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert f"{FAST} -> {SUCCESSOR} in {MONTH}: Standard:" in result.output  # the catalog's label
    assert _fingerprint(metered) == before  # neither the warehouse file nor a lake file changed
    with open(tmp_path / "p" / "preview.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == CSV_COLUMNS
    payload = json.loads((tmp_path / "p" / "preview.json").read_text())
    assert payload["model"] == FAST and payload["successor"] == SUCCESSOR and payload["month"] == MONTH
    assert set(payload["tiers"]) == {"standard", "priority"}  # the flagship's ultrafast starts in August
    assert set(payload["tiers"]["standard"]) == {
        "accounts",
        "current_total",
        "projected_total",
        "delta",
        "accounts_paying_more",
        "median_delta",
    }
    assert "| Standard |" in (tmp_path / "p" / "preview.md").read_text()
    drafts = _draft_totals(_copy(metered, tmp_path / "copy"), catalog)
    standard = [r for r in rows if r["tier"] == "standard"]
    assert len(standard) > 10
    for r in standard:
        assert Decimal(r["current_total"]) == drafts[r["account_id"]], r["account_id"]
        assert Decimal(r["delta"]) == Decimal(r["projected_total"]) - Decimal(r["current_total"])
    total = sum(Decimal(r["delta"]) for r in standard)
    assert Decimal(payload["tiers"]["standard"]["delta"]) == total
    assert payload["tiers"]["standard"]["accounts"] == len(standard)


def _rewrite_lake(lake: str, model: str, successor: str, tier: str) -> int:
    """Every event of ``model`` in the lake becomes ``successor``'s at ``tier`` (``keep``: its own);
    returns how many."""
    moved = 0
    for path in sorted(Path(lake, "events").rglob("*.parquet")):
        table = pq.read_table(path)
        schema = pq.read_schema(path)
        is_model = pc.equal(table["model"], model)
        moved += pc.sum(pc.cast(is_model, pa.int64())).as_py() or 0
        for column, value in (("model", successor), ("speed_tier", tier))[: 1 if tier == "keep" else 2]:
            i = table.schema.get_field_index(column)
            table = table.set_column(i, table.schema.field(i), pc.if_else(is_model, value, table[column]))
        pq.write_table(table.cast(schema), path)
    return moved


@pytest.mark.parametrize("tier", ["priority", "keep"])
def test_projected_totals_are_the_drafts_of_a_rewritten_copy(metered, catalog, tmp_path, tier):
    result = preview(make_engine(metered.database_url), catalog, metered.lake, FAST, MONTH, tier=tier)
    projected = {r["account_id"]: r for r in result.rows if r["tier"] == tier}
    assert any(r["delta"] != 0 for r in projected.values())
    copy = _copy(metered, tmp_path / "copy")
    original = _draft_totals(_copy(metered, tmp_path / "original"), catalog)
    assert _rewrite_lake(copy.lake, FAST, SUCCESSOR, tier) > 0
    args = [
        "--month",
        MONTH,
        "--config",
        copy.config,
        "--database_url",
        copy.database_url,
        "--lake",
        copy.lake,
    ]
    meter.main(args)
    drafts = _draft_totals(copy, catalog)
    for account, row in projected.items():
        assert drafts[account] == row["projected_total"], account
        assert original[account] == row["current_total"], account
    untouched = set(original) - set(projected)
    assert untouched and all(drafts[a] == original[a] for a in untouched)
