"""Adoption tables and the retirement report end to end on generated months where the fast model fades.

The generator's scenario: the fast coding model peaks in spring and loses users week after week; the
report must flag it (and only it), name its successor, list its heavy accounts, and render charts
that a browser draws (headless Chromium screenshot).
"""

from __future__ import annotations

import csv
import datetime as dt
import html
import json
import re
import shutil
import subprocess
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from sqlalchemy import select, text

from pipelines.adoption import weekly as adoption
from pipelines.adoption.detect import rule_text
from pipelines.adoption.retirement import run as report
from pipelines.jobs.generate import GeneratorConfig, generate
from pipelines.jobs.landing import write_landing
from pipelines.settings import Settings
from pipelines.warehouse.accounts import load_accounts
from pipelines.warehouse.engine import make_engine, upgrade
from schemas.warehouse import ModelMigration, ModelWeekly, RetirementCandidate
from tests.adoption.test_report_pages import _rendered_boxes, assert_no_text_overlaps
from tests.conftest import CATALOG_PATH, run_day

pytestmark = pytest.mark.slow
START = dt.date(2026, 5, 25)  # a Monday
AS_OF = dt.date(2026, 9, 6)  # a Sunday: 15 complete weeks
FAST = "gpt-5.3-codex-spark"


@pytest.fixture(scope="module")
def adoption_db(tmp_path_factory, catalog) -> Settings:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("adoption")
    days = (AS_OF - START).days + 1
    cfg = GeneratorConfig(start=START, days=days, accounts=900, events_per_day=1400, seed=5, fmt="parquet")
    write_landing(generate(catalog, cfg), cfg, str(root / "landing"))
    settings = Settings(
        config=str(CATALOG_PATH),
        database_url=f"sqlite:///{root / 'w.db'}",
        lake=str(root / "lake"),
        landing=str(root / "landing"),
    )
    engine = make_engine(settings.database_url)
    upgrade(engine)
    load_accounts(engine, root / "landing" / "accounts.csv", catalog)
    run_day(settings, [START + dt.timedelta(days=i) for i in range(days)])
    return settings


def test_complete_weeks_need_all_seven_days_up_to_the_as_of_date():
    days = pa.array([dt.date(2026, 6, 1) + dt.timedelta(days=i) for i in range(16)], pa.date32())
    assert adoption.complete_weeks(days, dt.date(2026, 6, 16)) == [dt.date(2026, 6, 1), dt.date(2026, 6, 8)]
    assert adoption.complete_weeks(days, dt.date(2026, 6, 13)) == [dt.date(2026, 6, 1)]


def test_a_model_whose_last_accounts_left_has_zero_rows_not_gaps(catalog):
    """Week 1: two accounts on "fast", one on "main"; week 2: only "main"; week 3: only "main"."""
    weeks = [dt.date(2026, 6, 1), dt.date(2026, 6, 8), dt.date(2026, 6, 15)]
    rows = [(weeks[0], "a", "fast"), (weeks[0], "b", "fast")] + [(w, "c", "main") for w in weeks]
    usage = pa.Table.from_pylist(
        [
            {"day": d, "account_id": a, "model": m, "speed_tier": "standard", "requests": 10}
            | {"input_tokens": 100, "output_tokens": 50}
            for d, a, m in rows
        ],
        schema=adoption.USAGE_SCHEMA,
    )
    out = adoption.weekly_metrics(usage, weeks, catalog.adoption, set())
    fast = [r for r in out.to_pylist() if r["model"] == "fast" and r["speed_tier"] == "*"]
    got = [(r["week_start"], r["active_accounts"], r["dormant_accounts"], r["tokens"]) for r in fast]
    assert got == [(weeks[0], 2, 0, 300), (weeks[1], 0, 2, 0), (weeks[2], 0, 0, 0)]
    assert [r["quick_ratio"] for r in fast] == [None, 0.0, None]
    assert out.num_rows == 2 * 2 * 3  # (fast, main) x (standard, *) x 3 weeks
    assert pc.sum(out["tokens"]).as_py() == 2 * len(rows) * 150  # once per tier, once for all tiers


def test_lifecycle_counts_add_up_week_to_week(adoption_db, catalog):
    engine = make_engine(adoption_db.database_url)
    weekly, _moves, weeks = adoption.refresh(engine, catalog.adoption, AS_OF, 20)
    rows = weekly.filter(pa.compute.equal(weekly["speed_tier"], adoption.ALL_TIERS)).to_pylist()
    by = {(r["model"], r["week_start"]): r for r in rows}
    checked = 0
    for (model, week), r in by.items():
        before = by.get((model, week - dt.timedelta(days=7)))
        if before is None:
            continue
        # last week's actives = this week's returning + this week's dormant
        assert before["active_accounts"] == r["returning_accounts"] + r["dormant_accounts"], (model, week)
        assert r["active_accounts"] == r["new_accounts"] + r["returning_accounts"] + r["resurrected_accounts"]
        checked += 1
    assert checked > 20
    shares = {}
    for r in rows:
        shares[r["week_start"]] = shares.get(r["week_start"], 0) + r["token_share"]
    assert all(abs(s - 1) < 1e-9 for s in shares.values())
    with engine.connect() as conn:
        stored = conn.execute(select(ModelWeekly.__table__).where(ModelWeekly.week_start.in_(weeks))).all()
        migrated = conn.execute(
            select(ModelMigration.__table__).where(ModelMigration.from_model == FAST)
        ).all()
    assert len(stored) == weekly.num_rows and migrated


def test_the_fading_fast_model_is_the_only_candidate_with_the_facts_a_pm_needs(
    adoption_db, catalog, tmp_path
):
    engine = make_engine(adoption_db.database_url)
    data = report(engine, catalog, AS_OF, tmp_path, adoption_db.lake)
    flagged = [m for m in data["models"] if m["flagged"]]
    assert [m["model"] for m in flagged] == [FAST]
    c = flagged[0]["candidate"]
    assert c["decline_per_week"] <= -0.05 and c["decline_interval_90"][1] < 0
    assert c["successor"] == "gpt-5.6-sol" and c["source"] == "catalog" and c["migration"]
    assert c["last_week"]["active_accounts"] < c["peak_week_by_accounts"]["active_accounts"]
    assert c["last_week"]["heavy_accounts"] <= c["last_week"]["active_accounts"]
    # the preview of the last complete month, on each tier of the successor priced all of August
    p = c["preview"]
    assert p["error"] is None and p["month"] == "2026-08" and set(p["tiers"]) == {"standard", "priority"}
    assert all(t["accounts"] == p["affected_accounts"] > 0 for t in p["tiers"].values())
    preview = json.loads((tmp_path / f"preview-{FAST}" / "preview.json").read_text())
    assert preview["tiers"]["standard"]["delta"] == p["tiers"]["standard"]["delta"]
    assert Decimal(p["revenue_at_stake"]) == Decimal(preview["current_model_revenue"]) > 0
    # what transition credits would cost: 3 months of each paying-more account's largest increase
    increase: dict[str, Decimal] = {}
    for row in preview["accounts"]:
        if Decimal(row["delta"]) > 0:
            increase[row["account_id"]] = max(
                increase.get(row["account_id"], Decimal(0)), Decimal(row["delta"])
            )
    t = p["transition"]
    assert (t["months"], t["accounts"], Decimal(t["total"])) == (3, len(increase), 3 * sum(increase.values()))
    page = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", (tmp_path / "report.html").read_text())).split())
    assert increase  # some accounts would pay more on the successor
    assert f"USD {Decimal(t['total']):,.2f} in promotional credits on gpt-5.6-sol" in page.replace(
        "\u00a0", " "
    )
    # the accounts to contact: everyone active in the last 4 weeks or affected, with a change per tier
    with open(tmp_path / f"accounts-{FAST}.csv", encoding="utf-8") as f:
        contacts = list(csv.DictReader(f))
    assert len(contacts) == c["contacts"]["accounts"] >= p["affected_accounts"]
    assert {"delta_standard", "delta_priority", "heavy_last_week", "current_total"} <= set(contacts[0])
    affected = {r["account_id"] for r in preview["accounts"]}
    assert affected <= {r["account_id"] for r in contacts}
    heavy = sum(r["heavy_last_week"] == "True" for r in contacts)
    assert heavy == c["contacts"]["heavy_last_week"] == c["last_week"]["heavy_accounts"]
    assert c["serving_time"]["last_week_hours"] > 0
    assert c["catalog_successor"] == "gpt-5.6-sol" and c["observed_successor"]["to_model"]
    assert c["backup_tank"] is not None and 0 < c["backup_tank"]["token_share"] <= 1
    assert len(c["timeline"]) == 4
    for name in ("report.html", "report.json", "report.md"):
        assert (tmp_path / name).stat().st_size > 500
    stored = json.loads((tmp_path / "report.json").read_text())
    assert stored["method_version"] == data["method_version"]
    assert stored["rule"] == rule_text(catalog.adoption) and stored["currency"] == "USD"
    assert FAST in (tmp_path / "report.md").read_text()
    with engine.connect() as conn:
        rows = conn.execute(
            select(RetirementCandidate.__table__).where(RetirementCandidate.as_of == AS_OF)
        ).all()
        flagged_rows = conn.execute(text("SELECT model FROM retirement_candidates WHERE flagged = 1")).all()
    assert len(rows) == len(data["models"]) and [r.model for r in flagged_rows] == [FAST]
    again = report(engine, catalog, AS_OF, tmp_path, adoption_db.lake)  # a rerun replaces its rows
    assert [m["model"] for m in again["models"] if m["flagged"]] == [FAST]


def test_a_week_whose_quality_gate_failed_is_left_out(adoption_db, catalog, tmp_path):
    engine = make_engine(adoption_db.database_url)
    day = AS_OF - dt.timedelta(days=10)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO dq_results "
                "(day, check_name, run_id, level, success, observed, details, checked_at) "
                "VALUES (:d, 'test_volume', 'test', 'error', 0, 'x', '{}', '2026-09-07 00:00:00')"
            ),
            {"d": day},
        )
    try:
        data = report(engine, catalog, AS_OF, tmp_path, adoption_db.lake)
        week = (day - dt.timedelta(days=day.weekday())).isoformat()
        assert data["dq_failed_weeks"] == [week]
        fast = next(m for m in data["models"] if m["model"] == FAST)
        assert fast["weeks_used"] == len(data["weeks"]) - 1
    finally:
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM dq_results WHERE run_id = 'test'"))


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_the_html_report_renders_its_charts_in_a_browser(adoption_db, catalog, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.fail("chromium is not installed (.ci/run installs Debian's chromium)")
    from PIL import Image

    engine = make_engine(adoption_db.database_url)
    report(engine, catalog, AS_OF, tmp_path, adoption_db.lake)
    page = tmp_path / "report.html"
    source = page.read_text()
    assert source.count("<svg") >= 3 and "<script" not in source and "http" not in source.split("<body>")[1]
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--screenshot={shot}",
            "--window-size=1100,2600",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    image = Image.open(shot).convert("RGB")
    colors = image.getcolors(maxcolors=1 << 20)
    red = sum(n for n, (r, g, b) in colors if r > 190 and g < 80 and b < 80)  # the candidate's line
    green = sum(n for n, (r, g, b) in colors if g > 130 and r < 90 and b < 90)  # lifecycle bars: new
    assert red > 300 and green > 300, (red, green)
    top = image.crop((0, 0, 1100, 700)).getcolors(maxcolors=1 << 20)
    assert len(top) > 20  # the accounts chart drew lines and labels, not a blank page
    # as Chromium lays the chart out: decade ticks and line labels never overlap
    boxes = _rendered_boxes(page, tmp_path)
    ticks = [b["text"] for b in sorted((b for b in boxes if b["cls"] == "tick"), key=lambda b: -b["top"])]
    assert ticks[:2] == ["10", "100"] and len(ticks) >= 3
    assert_no_text_overlaps(boxes)
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", source)).split())
    assert " ".join(rule_text(catalog.adoption).split()) in text
    assert "heavy account an account active on the model" in text and "USD" in text


def test_too_little_history_is_a_clear_error(adoption_db, catalog, tmp_path):
    from pipelines.errors import UsageBillingError

    engine = make_engine(adoption_db.database_url)
    with pytest.raises(UsageBillingError, match="complete weeks"):
        report(engine, catalog, START + dt.timedelta(days=40), tmp_path, adoption_db.lake)


def test_cli_writes_the_report(adoption_db, tmp_path, capsys):
    from pipelines.cli import main

    args = [
        "--database-url",
        adoption_db.database_url,
        "--lake",
        adoption_db.lake,
        "--config",
        adoption_db.config,
    ]
    assert (
        main([*args, "retirement", "report", "--as-of", AS_OF.isoformat(), "--out", str(tmp_path / "r")]) == 0
    )
    assert FAST in capsys.readouterr().out and (tmp_path / "r" / "report.html").exists()
    assert main([*args, "retirement", "report", "--as-of", "2026-13-01", "--out", str(tmp_path)]) == 2
