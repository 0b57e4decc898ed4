"""The data-quality gate's task-outcome suite: a partition of lake/outcomes that breaks it stops the
week's effectiveness (not billing) until an operator accepts it, and the date's page says why."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.errors import DataQualityError
from pipelines.ingest import quality
from pipelines.settings import Settings
from pipelines.warehouse.accounts import load_accounts
from pipelines.warehouse.engine import make_engine, upgrade
from tests.conftest import CATALOG_PATH, run_day

DAY = dt.date(2026, 8, 12)


def _settings(tmp_path: Path, catalog) -> Settings:  # type: ignore[no-untyped-def]
    landing = tmp_path / "landing"
    folder = landing / DAY.isoformat()
    folder.mkdir(parents=True)
    events = [
        {"event_id": f"e{i}", "event_time": f"{DAY}T10:0{i}:00+00:00", "account_id": "acct-g",
         "model": "gpt-5.6-sol", "speed_tier": "standard", "input_tokens": 100, "cached_input_tokens": 0,
         "output_tokens": 20, "duration_ms": 500, "status": "ok", "task_id": f"t{i}"}
        for i in range(3)
    ]  # fmt: skip
    outcomes = [
        {"task_id": f"t{i}", "account_id": "acct-g", "task_class": "completion",
         "started_at": f"{DAY}T10:00:00+00:00", "completed_at": f"{DAY}T10:30:00+00:00",
         "outcome": "accepted", "rework": False, "rework_ms": 0}
        for i in range(3)
    ]  # fmt: skip
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (folder / "outcomes.jsonl").write_text("".join(json.dumps(o) + "\n" for o in outcomes))
    (landing / "accounts.csv").write_text(
        "account_id,plan,timezone,active_from,active_until\nacct-g,,UTC,2026-01-01,\n"
    )
    url = f"sqlite:///{tmp_path / 'w.db'}"
    engine = make_engine(url)
    upgrade(engine)
    load_accounts(engine, landing / "accounts.csv", catalog)
    return Settings(
        config=str(CATALOG_PATH), database_url=url, lake=str(tmp_path / "lake"), landing=str(landing)
    )


def test_a_clean_outcome_partition_passes_the_outcome_suite(tmp_path, catalog):
    settings = _settings(tmp_path, catalog)
    done = run_day(settings, [DAY])
    assert list(done.weeks) == [dt.date(2026, 8, 10)] and list(done.blocked) == []
    engine = make_engine(settings.database_url)
    report = quality.check_partitions(engine, settings.lake, catalog, [DAY], "test")[0]
    names = [o.check.name for o in report.outcomes]
    assert "outcome_task_unique" in names and "event_id_unique" in names
    assert all(o.success for o in report.outcomes if o.check.dataset == "outcomes")


@pytest.mark.slow
def test_a_broken_outcome_partition_stops_effectiveness_not_billing(tmp_path, catalog):
    settings = _settings(tmp_path, catalog)
    run_day(settings, [DAY])
    # Someone copies rows into the committed partition: a task twice, and one completed before it started.
    part = Path(settings.lake) / "outcomes" / f"date={DAY}"
    table = pq.read_table(next(part.glob("*.parquet")))
    broken = table.slice(0, 1)
    start = broken.schema.field("started_at")
    later = pa.array([broken["completed_at"][0].as_py() + dt.timedelta(hours=2)], start.type)
    backwards = broken.set_column(broken.schema.get_field_index("started_at"), start, later)
    broken = pa.concat_tables([broken, backwards])
    pq.write_table(broken, part / "copied-in.parquet")
    more = {"event_id": "late-1", "event_time": f"{DAY}T11:00:00+00:00", "account_id": "acct-g",
            "model": "gpt-5.6-sol", "speed_tier": "standard", "input_tokens": 5, "cached_input_tokens": 0,
            "output_tokens": 1, "duration_ms": 10, "status": "ok", "task_id": "t0"}  # fmt: skip
    (Path(settings.landing) / DAY.isoformat() / "more.jsonl").write_text(json.dumps(more) + "\n")
    with pytest.raises(DataQualityError, match="outcome_task_unique") as raised:
        run_day(settings, [DAY])
    done = raised.value.done  # type: ignore[attr-defined]
    assert list(done.aggregated) == [DAY] and done.metered  # billing went on
    assert list(done.weeks) == [] and list(done.blocked) == [DAY]  # the week's effectiveness waits
    failed = set(str(raised.value).split("(")[1].split(")")[0].split(", "))
    assert failed == {"outcome_task_unique", "outcome_completed_after_start"}
    page = (Path(settings.lake) / "dq" / f"date={DAY}" / "index.html").read_text()
    assert "completed_at is at or after started_at" in page
    engine = make_engine(settings.database_url)
    quality.accept_and_render(engine, settings.lake, DAY, "copied by hand, removed next run", "oncall")
    again = run_day(settings, [DAY])
    assert list(again.weeks) == [dt.date(2026, 8, 10)] and list(again.blocked) == []
