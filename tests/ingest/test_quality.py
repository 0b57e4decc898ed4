"""The data-quality gate: GX suite on clean partitions, stored results, blocking and acceptance."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from pipelines.errors import DataQualityError
from pipelines.ingest import quality
from pipelines.jobs.generate import GeneratorConfig, generate
from pipelines.jobs.landing import to_json_lines
from pipelines.jobs.run_day import ingest_and_aggregate
from pipelines.warehouse.engine import make_engine
from schemas.warehouse import DqAcceptance, DqResult, UsageDaily

DAY = dt.date(2026, 3, 23)  # a Monday; history on the three Mondays before


def _landing(tmp_path: Path, catalog, counts: dict[dt.date, int]) -> Path:  # type: ignore[no-untyped-def]
    """Landing folders holding ``counts[d]`` clean events of day d (JSON lines)."""
    root = tmp_path / "landing"
    for day, n in counts.items():
        gen = generate(
            catalog,
            GeneratorConfig(
                start=day,
                days=1,
                accounts=200,
                events_per_day=n * 2,
                seed=day.day,
                duplicate_rate=0,
                late_rate=0,
            ),
        )
        events = gen.events.drop_columns(["landing_date"]).slice(0, n)
        folder = root / day.isoformat()
        folder.mkdir(parents=True)
        (folder / "events.jsonl").write_bytes(to_json_lines(events))
    return root


@pytest.fixture
def volume_drop(tmp_path, catalog, sqlite_settings):  # type: ignore[no-untyped-def]
    counts = {DAY - dt.timedelta(days=7 * k): 1000 for k in (3, 2, 1)}
    counts[DAY] = 120  # a drop far below a third of the same-weekday median
    settings = replace(sqlite_settings, landing=str(_landing(tmp_path, catalog, counts)))
    for day in sorted(counts)[:-1]:
        ingest_and_aggregate(settings, [day])
    return settings


def test_clean_partitions_pass_and_results_are_stored_and_rendered(volume_drop):
    engine = make_engine(volume_drop.database_url)
    first = DAY - dt.timedelta(days=21)
    with Session(engine) as session:
        rows = session.scalars(select(DqResult).where(DqResult.day == first)).all()
    names = {r.check_name for r in rows}
    assert {"event_id_unique", "model_known", "input_tokens_in_range", "volume_vs_same_weekday"} <= names
    assert all(r.success for r in rows if r.level == "error")
    volume = next(r for r in rows if r.check_name == "volume_vs_same_weekday")
    assert "not judged" in volume.observed  # no history before the first Monday
    page = Path(quality.html_path(volume_drop.lake, first)).read_text()
    assert "Gate: passed" in page and "event_id_unique" in page


def test_a_volume_drop_blocks_downstream_until_accepted(volume_drop):
    with pytest.raises(DataQualityError) as info:
        ingest_and_aggregate(volume_drop, [DAY])
    message = str(info.value)
    assert "data-quality gate failed for 2026-03-23 (volume_vs_same_weekday)" in message
    assert "usage-billing dq accept --date 2026-03-23" in message and "\n" not in message
    engine = make_engine(volume_drop.database_url)
    with Session(engine) as session:
        aggregated = session.execute(select(UsageDaily.day).where(UsageDaily.day == DAY)).all()
        failed = session.scalars(
            select(DqResult).where(DqResult.day == DAY, DqResult.success.is_(False))
        ).all()
    assert aggregated == []  # the blocked date was not aggregated
    assert [f.check_name for f in failed] == ["volume_vs_same_weekday"]
    assert "FAILED" in Path(quality.html_path(volume_drop.lake, DAY)).read_text()

    assert quality.accept(engine, DAY, "marketing paused traffic that day", who="oncall") == [
        "volume_vs_same_weekday"
    ]
    result = ingest_and_aggregate(volume_drop, [DAY])
    assert DAY in result.aggregated
    with Session(engine) as session:
        acceptance = session.scalars(select(DqAcceptance)).one()
        assert session.execute(select(UsageDaily.day).where(UsageDaily.day == DAY)).first() is not None
    assert acceptance.accepted_by == "oncall" and acceptance.failed_checks == {
        "checks": ["volume_vs_same_weekday"]
    }


def test_run_day_flag_accepts_and_records(volume_drop):
    result = ingest_and_aggregate(volume_drop, [DAY], accept_reason="known partial day")
    assert DAY in result.aggregated
    engine = make_engine(volume_drop.database_url)
    with engine.connect() as conn:
        assert conn.execute(select(DqAcceptance.reason)).scalars().all() == ["known partial day"]


def test_nothing_to_accept_is_a_clear_error(sqlite_settings):
    from pipelines.errors import UsageBillingError

    with pytest.raises(UsageBillingError, match="nothing to accept"):
        quality.accept(make_engine(sqlite_settings.database_url), DAY, "why not")


def test_error_level_checks_catch_bad_partitions(catalog, tmp_path):
    gen = generate(catalog, GeneratorConfig(start=DAY, days=1, accounts=50, events_per_day=400, seed=1))
    table = gen.events.drop_columns(["landing_date"])
    dup = pa.concat_tables([table, table.slice(0, 3)])  # a partition that somehow holds duplicates
    report = quality.Gate(catalog).validate(dup, DAY, (1, 10))
    assert set(report.failed_errors) == {"event_id_unique", "volume_vs_same_weekday"}
    assert report.blocked


def test_stored_details_are_strict_json():
    assert quality._plain({"a": [float("nan"), 1.5, float("inf")], "b": (1, "x")}) == {
        "a": [None, 1.5, None],
        "b": [1, "x"],
    }


def test_many_dates_are_validated_in_two_processes_with_the_same_outcomes(volume_drop, catalog, monkeypatch):
    """A backfill's dates are split between worker processes; every outcome equals the one-process run."""
    days = [DAY - dt.timedelta(days=7 * k) for k in (3, 2, 1)]
    engine = make_engine(volume_drop.database_url)

    def outcomes(reports):  # type: ignore[no-untyped-def]
        return [(r.day, r.rows, [(o.check.name, o.success, o.observed) for o in r.outcomes]) for r in reports]

    monkeypatch.setattr(quality, "PARALLEL_WORKERS", 1)
    serial = quality.check_partitions(engine, volume_drop.lake, catalog, days, "serial")
    monkeypatch.setattr(quality, "PARALLEL_WORKERS", 2)
    monkeypatch.setattr(quality, "PARALLEL_MIN_DATES", 1)
    spawned = []
    real = quality.concurrent.futures.ProcessPoolExecutor
    monkeypatch.setattr(
        quality.concurrent.futures, "ProcessPoolExecutor", lambda *a, **k: spawned.append(a) or real(*a, **k)
    )
    parallel = quality.check_partitions(engine, volume_drop.lake, catalog, days, "parallel")
    assert spawned and spawned[0][0] == 2
    assert outcomes(parallel) == outcomes(serial) and len(serial) == 3
