"""The effectiveness pipeline end to end: generated tasks through ingest, run-day and the Beam pipeline,
task_effectiveness held to the reference (tests/reference_effectiveness) on SQLite and PostgreSQL;
orphans and open tasks; a late outcome and a late request recompute their week; reruns change
nothing; the report's files."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from decimal import Decimal
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from pipelines.effectiveness import pipeline, report, weeks
from pipelines.errors import UsageBillingError
from pipelines.jobs.generate import GeneratorConfig, generate
from pipelines.jobs.landing import write_landing
from pipelines.settings import Settings
from pipelines.warehouse.accounts import load_accounts
from pipelines.warehouse.engine import make_engine, upgrade
from schemas.warehouse import EffectivenessWeek, TaskEffectiveness
from tests import reference_effectiveness as ref
from tests.conftest import CATALOG_PATH, run_day, table_rows

_split = weeks.split
CFG = GeneratorConfig(
    start=dt.date(2026, 8, 10), days=14, accounts=120, events_per_day=900, seed=5, late_rate=0.01
)
DATES = [CFG.start + dt.timedelta(days=i) for i in range(CFG.days)]
WEEKS = [dt.date(2026, 8, 10), dt.date(2026, 8, 17)]


@pytest.fixture(scope="module")
def landing(tmp_path_factory, catalog) -> Path:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("eff-landing")
    write_landing(generate(catalog, CFG), CFG, str(root))
    return root


def _settings(root: Path, landing: Path, url: str | None = None) -> Settings:
    from schemas.catalog import load_catalog

    url = url or f"sqlite:///{root / 'w.db'}"
    engine = make_engine(url)
    upgrade(engine)
    load_accounts(engine, landing / "accounts.csv", load_catalog(CATALOG_PATH))
    engine.dispose()
    copy = root / "landing"
    shutil.copytree(landing, copy)
    return Settings(config=str(CATALOG_PATH), database_url=url, lake=str(root / "lake"), landing=str(copy))


@pytest.fixture(scope="module")
def computed(tmp_path_factory, landing, catalog):  # type: ignore[no-untyped-def]
    settings = _settings(tmp_path_factory.mktemp("eff"), landing)
    result = run_day(settings, DATES)
    return settings, result


def _lake(settings: Settings, dataset: str) -> list[dict]:
    return ds.dataset(f"{settings.lake}/{dataset}", format="parquet").to_table().to_pylist()


def _expected(settings: Settings, catalog) -> tuple[dict, int]:  # type: ignore[no-untyped-def]
    outcomes = [o for o in _lake(settings, "outcomes") if o["completed_at"].date() >= WEEKS[0]]
    tasks, orphans = ref.task_rows(outcomes, _lake(settings, "events"), catalog)
    return ref.groups(tasks, catalog.effectiveness.per_hour), orphans


def _stored(url: str) -> dict[tuple, dict]:
    names = [c.name for c in TaskEffectiveness.__table__.columns]
    rows = [dict(zip(names, r, strict=True)) for r in table_rows(url, TaskEffectiveness)]
    return {(r["week_start"], r["model"], r["speed_tier"], r["task_class"]): r for r in rows}


def _assert_matches(stored: dict[tuple, dict], expected: dict[tuple, dict]) -> None:
    assert stored.keys() == expected.keys()
    for key, want in expected.items():
        got = stored[key]
        for name, value in want.items():
            if name in ("e2e_ms_p50", "e2e_ms_p90"):
                value = Decimal(value.numerator) / Decimal(value.denominator)
            if isinstance(value, float):
                assert got[name] == pytest.approx(value, abs=1e-9), (key, name)  # stored rounded to 9
            else:
                assert got[name] == value, (key, name)


def test_run_day_computes_every_week_as_the_reference_does(computed, catalog):
    settings, result = computed
    assert list(result.weeks) == WEEKS
    expected, orphans = _expected(settings, catalog)
    _assert_matches(_stored(settings.database_url), expected)
    weeks = {r[0]: r for r in table_rows(settings.database_url, EffectivenessWeek)}
    assert sum(r[3] for r in weeks.values()) == orphans > 0  # orphan outcomes, never in a rate
    classes = {k[3] for k in expected}
    assert {"*", "multi_file", "unclassified"} <= classes
    assert any(r["mixed"] for r in expected.values())


def test_the_story_the_generator_tells(computed):
    settings, _ = computed
    stored = _stored(settings.database_url)

    def total(model: str, cls: str, tier: str | None = None) -> dict:
        rows = [
            r for k, r in stored.items() if k[1] == model and k[3] == cls and (tier is None or k[2] == tier)
        ]
        n = sum(r["tasks"] for r in rows)
        accepted = sum(r["one_pass"] + r["reworked"] for r in rows)
        cost = sum(r["token_cost"] + r["rework_cost"] for r in rows)
        return {
            "one_pass": sum(r["one_pass"] for r in rows) / n,
            "cost": cost / accepted,
            "e2e_without_rework": sum(r["e2e_ms_mean"] * r["tasks"] - r["rework_ms_total"] for r in rows) / n,
        }

    fast, flagship = "gpt-5.3-codex-spark", "gpt-5.6-sol"
    assert total(fast, "multi_file")["one_pass"] < total(flagship, "multi_file")["one_pass"] - 0.2
    assert abs(total(fast, "completion")["one_pass"] - total(flagship, "completion")["one_pass"]) < 0.15
    assert total(fast, "multi_file")["cost"] > 2 * total(flagship, "multi_file")["cost"]
    without = total(fast, "multi_file")["e2e_without_rework"]
    assert without < total(flagship, "multi_file")["e2e_without_rework"]  # faster, leaving rework out


def test_rerunning_changes_no_row(computed, monkeypatch):
    settings, _ = computed
    before = [r[:-1] for r in table_rows(settings.database_url, TaskEffectiveness)]  # all but computed_at
    # the rerun on three threads computes each week in three parts, each reading two files at a time
    monkeypatch.setattr(weeks, "PART_FILES", 2)
    planned: list[int] = []

    def spy(files: list[str], n: int) -> list[list[str]]:
        planned.append(n)
        return _split(files, n)

    monkeypatch.setattr(weeks, "split", spy)
    threads = ["--direct_running_mode=multi_threading", "--direct_num_workers=3"]
    argv = [*settings.argv(), "--from", str(WEEKS[0]), "--to", str(DATES[-1]), *threads]
    assert pipeline.main(argv) == WEEKS
    assert planned == [3] * 3 * len(WEEKS)
    assert [r[:-1] for r in table_rows(settings.database_url, TaskEffectiveness)] == before
    assert pipeline.main(settings.argv()) == []  # nothing queued: nothing to do


def test_the_report_files_orphans_and_open_tasks(computed, catalog, tmp_path):
    settings, _ = computed
    engine = make_engine(settings.database_url)
    built = report.run(engine, settings.lake, catalog, DATES[0], DATES[-1], tmp_path)
    data = json.loads((tmp_path / "effectiveness.json").read_text())
    assert list(data) == ["from", "to", "groups", "orphan_outcomes", "open_tasks"]
    assert list(data["groups"][0]) == list(report.GROUP_FIELDS)
    g = data["groups"][0]
    assert isinstance(g["token_cost"], str) and isinstance(g["one_pass_rate"], float)
    assert len(data["groups"]) == len(_stored(settings.database_url))
    _, orphans = _expected(settings, catalog)
    assert data["orphan_outcomes"] == orphans
    events = _lake(settings, "events")
    requested = {(e["account_id"], e["task_id"]) for e in events if e["task_id"] is not None}
    known = {(o["account_id"], o["task_id"]) for o in _lake(settings, "outcomes")}
    assert data["open_tasks"] == len(requested - known) > 0
    md = (tmp_path / "effectiveness.md").read_text()
    assert "gpt-5.3-codex-spark" in md and "Rework is costed at USD 90.00 per hour" in md
    assert any(i["model"] == "gpt-5.3-codex-spark" for i in built.view.head_to_head)


def _line(**row: object) -> str:
    return json.dumps(row) + "\n"


def _request(event_id: str, task: str, at: str, model: str = "gpt-5.6-sol", tier: str = "standard") -> str:
    return _line(
        event_id=event_id,
        event_time=at,
        account_id="acct-late",
        model=model,
        speed_tier=tier,
        input_tokens=1000,
        cached_input_tokens=0,
        output_tokens=200,
        duration_ms=900,
        status="ok",
        task_id=task,
    )


def _outcome(task: str, start: str, end: str, verdict: str = "accepted") -> str:
    return _line(
        task_id=task,
        account_id="acct-late",
        task_class="multi_file",
        started_at=start,
        completed_at=end,
        outcome=verdict,
        rework=False,
        rework_ms=0,
    )


def test_a_late_outcome_and_a_late_request_recompute_their_week(tmp_path, catalog):
    """Week of 2026-08-10: task A complete on 08-12; task B's outcome and orphan O's only request land
    late, on 08-18; run-day of 08-18 recomputes the week of 08-10."""
    landing = tmp_path / "landing"
    day1 = landing / "2026-08-12"
    day1.mkdir(parents=True)
    (day1 / "events.jsonl").write_text(
        _request("e-a", "A", "2026-08-12T10:01:00+00:00")
        + _request("e-b", "B", "2026-08-12T11:01:00+00:00", "gpt-5.3-codex-spark")
    )
    (day1 / "outcomes-1.jsonl").write_text(
        _outcome("A", "2026-08-12T10:00:00+00:00", "2026-08-12T10:04:00+00:00")
        + _outcome("O", "2026-08-12T12:00:00+00:00", "2026-08-12T12:09:00+00:00")
    )
    (landing / "accounts.csv").write_text(
        "account_id,plan,timezone,active_from,active_until\nacct-late,,UTC,2026-01-01,\n"
    )
    url = f"sqlite:///{tmp_path / 'w.db'}"
    upgrade(make_engine(url))
    load_accounts(make_engine(url), landing / "accounts.csv", catalog)
    settings = Settings(
        config=str(CATALOG_PATH), database_url=url, lake=str(tmp_path / "lake"), landing=str(landing)
    )
    week = dt.date(2026, 8, 10)
    assert list(run_day(settings, [dt.date(2026, 8, 12)]).weeks) == [week]
    weeks = {r[0]: r for r in table_rows(url, EffectivenessWeek)}
    assert weeks[week][1:4] == (2, 1, 1)  # outcomes, tasks, orphans
    late = landing / "2026-08-18"
    late.mkdir()
    (late / "late.jsonl").write_text(_request("e-o", "O", "2026-08-12T12:05:00+00:00"))
    (late / "outcomes-late.jsonl").write_text(
        _outcome("B", "2026-08-12T11:00:00+00:00", "2026-08-12T11:30:00+00:00", "abandoned")
    )
    result = run_day(settings, [dt.date(2026, 8, 18)])
    assert list(result.weeks) == [week]  # the late date's own week has nothing: only 08-10's changed
    weeks = {r[0]: r for r in table_rows(url, EffectivenessWeek)}
    assert weeks[week][1:4] == (3, 3, 0)
    stored = _stored(url)
    assert stored[(week, "gpt-5.6-sol", "standard", "*")]["tasks"] == 2  # A and O
    assert stored[(week, "gpt-5.3-codex-spark", "standard", "*")]["abandoned"] == 1  # B
    expected, _ = _expected(settings, catalog)
    _assert_matches(stored, expected)


@pytest.mark.slow
def test_postgres_gives_the_same_rows(postgres_url, tmp_path, landing, computed):
    from sqlalchemy import text

    engine = make_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    engine.dispose()
    settings = _settings(tmp_path, landing, postgres_url)
    run_day(settings, DATES)
    local, _ = computed
    assert [r[:-1] for r in table_rows(settings.database_url, TaskEffectiveness)] == [
        r[:-1] for r in table_rows(local.database_url, TaskEffectiveness)
    ]


def _chromium() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None or shutil.which("pdftotext") is None:
        pytest.fail("chromium and pdftotext are needed (.ci/run installs chromium and poppler-utils)")
    return browser


def _bars(image, rgb: tuple[int, int, int]) -> list[tuple[int, int, int]]:  # type: ignore[no-untyped-def]
    """(top row, left x, width) of each horizontal bar of exactly ``rgb`` in a screenshot's charts (the
    legends' swatches, left of the charts' axis, are not bars)."""
    import numpy as np

    px = np.asarray(image.convert("RGB"))
    mask = np.all(px == rgb, axis=2)
    mask[:, :200] = False
    rows = np.flatnonzero(mask.any(axis=1))
    bars, start = [], None
    for i, y in enumerate(rows):
        if start is None:
            start = y
        if i + 1 == len(rows) or rows[i + 1] != y + 1:
            top = min(start + 1, y)  # the bar's second row: above the whisker of an interval
            xs = np.flatnonzero(mask[top])
            bars.append((int(start), int(xs.min()), int(xs.max() - xs.min() + 1)))
            start = None
    return bars


def test_the_page_shows_the_rates_times_and_costs_as_drawn(computed, catalog, tmp_path):
    """Screenshot the page in headless Chromium: each one-pass bar is as long as its rate, each cost
    bar with rework is longer than the one without, and the printed page says the head-to-head."""
    import subprocess

    from PIL import Image

    from pipelines.effectiveness import html as page

    settings, _ = computed
    built = report.run(
        make_engine(settings.database_url), settings.lake, catalog, DATES[0], DATES[-1], tmp_path
    )
    rows = [g for g in built.view.overall if g["task_class"] == "*" and g["speed_tier"] != "*"]
    shot = tmp_path / "page.png"
    url = (tmp_path / "effectiveness.html").as_uri()
    subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--screenshot={shot}", "--window-size=1100,2600", url],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    image = Image.open(shot)
    rate_bars = _bars(image, (0x4C, 0x78, 0xA8))
    assert len(rate_bars) == len(rows)
    full = 900 - 230 - 30  # the chart's 0..100% width in pixels
    for (_, _, width), g in zip(rate_bars, rows, strict=True):
        assert abs(width - full * g["one_pass_rate"]) <= 1.5, (g["model"], g["speed_tier"], width)
    with_rework = _bars(image, (0xF5, 0x85, 0x18))
    without = _bars(image, (0x54, 0xA2, 0x4B))
    assert len(with_rework) == len(rows) and len(without) >= 1
    widest = max(float(g["cost_per_accepted_task"]) for g in rows)
    for (_, _, width), g in zip(with_rework, rows, strict=True):
        assert abs(width - (900 - 230 - 110) * float(g["cost_per_accepted_task"]) / widest) <= 1.5
    assert len(_bars(image, (0x72, 0xB7, 0xB2))) == len(rows)  # model time, one per row
    pdf = tmp_path / "page.pdf"
    subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-pdf-header-footer",
         f"--print-to-pdf={pdf}", url],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    printed = subprocess.run(
        ["pdftotext", "-layout", str(pdf), "-"], check=True, capture_output=True, text=True
    )
    text = " ".join(printed.stdout.split()).replace("- ", "-")  # a line may break after "one-"
    item = next(i for i in built.view.head_to_head if i["task_class"] == "multi_file")
    assert " ".join(page.sentence(item, "USD").split()) in text
    assert "Rework is costed at USD 90.00 per hour" in text and "{" not in text


def test_a_week_whose_outcomes_changed_under_its_parts_stops(tmp_path, catalog):
    finish = weeks.FinishWeek(str(tmp_path / "lake"), str(tmp_path / "stage"), catalog)
    with pytest.raises(UsageBillingError, match="outcomes changed while it was computed"):
        list(finish.process((WEEKS[0].isoformat(), [(0, 1, "a stamp of other files")])))
    with pytest.raises(UsageBillingError, match="1 of 2 parts were staged"):
        list(finish.process((WEEKS[0].isoformat(), [(1, 2, "")])))
