"""A fourth token kind is an entry in the registry, a price on every ``[[prices]]`` row and the
migration that adds its usage columns (revision 0020's ``token_columns.add_missing`` does it for a new
warehouse): no stage changes.

The registry gains ``cache_write`` (cache writes, a part of the input, optional for producers) in a
process of its own (``fourth_kind_driver.py``), before anything else is imported. Landing files with
the new field go through ``run-day``, metering, drafting, finalizing and the export, and every stage
carries the kind: ingest checks it (parts of the input never exceed it), usage_daily sums it, the
pools split over it, invoices price it at its own rate, the finance views count it, effectiveness
costs it and the customer document names it.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from tests.browser import measure

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> dict:  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("fourth-kind")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.schemas.fourth_kind_driver", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def test_every_step_succeeds_and_the_kind_sits_in_registry_order(result):
    assert result["steps"] == dict.fromkeys(
        ("upgrade", "accounts", "run-day", "draft", "finalize", "export"), 0
    )
    assert result["kinds"] == ["input", "cached_input", "cache_write", "output"]


def test_ingest_checks_the_parts_and_usage_daily_sums_the_kind(result):
    assert result["reasons"] == ["parts_exceed_input"]  # cached + cache writes > input
    assert result["usage_daily_cache_write"] == result["sent"]["cache_write"] > 0


def test_metering_counts_every_token_of_every_kind_once_and_pools_cover_the_new_one(result):
    assert result["billable"] == result["sent"]
    assert result["included"]["cache_write"] > 0  # a pool covered part of it, split pro rata


def test_invoices_price_the_kind_at_its_own_rate_and_finance_counts_it(result):
    lines = result["cache_write_lines"]
    assert {line[0] for line in lines} == {"included_usage", "overage_usage"}
    sol = [line for line in lines if line[0] == "overage_usage" and line[1:3] == ["gpt-5.6-sol", "standard"]]
    assert sol and all(Decimal(line[5]) == Decimal(result["cache_write_price"]) for line in sol)
    assert result["finance_revenue_cache_write_tokens"] == result["sent"]["cache_write"]
    with open(Path(result["exports"]) / "invoice_lines.csv", newline="") as f:
        assert "cache_write" in {r["token_kind"] for r in csv.DictReader(f)}


def test_effectiveness_costs_the_kind(result):
    # 500k uncached input x 1.50 + 200k cached x 0.15 + 300k cache writes x 1.875 (per 1M tokens)
    assert Decimal(result["request_cost"]) == Decimal(500_000 * 150 + 200_000 * 15) / 100 + Decimal("562500")


def test_the_customer_document_names_the_kind(result, tmp_path):
    pages = sorted((Path(result["exports"]) / "html").glob("INV-*.html"))
    texts = [measure(p, tmp_path, "document.body.innerText") for p in pages]
    assert any("Cache write tokens beyond the allowances" in t for t in texts)
