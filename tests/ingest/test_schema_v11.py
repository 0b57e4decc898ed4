"""Event schema v1.1: the optional task_id. v1 files stay valid, and a lake partition written before
v1.1 (no task_id column) is read, deduplicated against and rewritten with a null task_id."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from pipelines.ingest import events as ingest
from pipelines.settings import Settings
from pipelines.warehouse.engine import make_engine, upgrade
from tests.conftest import CATALOG_PATH

DAY = "2026-03-02"


def _event(eid: str, task: str | None = None, **over: object) -> dict:
    row = {"event_id": eid, "event_time": f"{DAY}T10:00:00Z", "account_id": "acct-1", "model": "gpt-5.6-sol",
           "speed_tier": "standard", "input_tokens": 100, "cached_input_tokens": 0, "output_tokens": 10,
           "duration_ms": 500, "status": "ok"}  # fmt: skip
    if task is not None:
        row["task_id"] = task
    return {**row, **over}


def _settings(tmp_path: Path) -> Settings:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    upgrade(make_engine(url))
    return Settings(str(CATALOG_PATH), url, str(tmp_path / "lake"), str(tmp_path / "landing"))


def _write(settings: Settings, name: str, rows: list[dict], day: str = DAY) -> None:
    folder = Path(settings.landing) / day
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_v1_files_and_v1_lake_partitions_still_work(tmp_path):
    settings = _settings(tmp_path)
    _write(settings, "v1.jsonl", [_event("a"), _event("b")])  # schema v1: no task_id
    first = ingest.main([*settings.argv(), "--date", DAY])
    assert first.stats[DAY]["clean"] == 2
    # Rewrite the partition as a lake written before v1.1 would hold it: no task_id column at all.
    part = Path(settings.lake) / "events" / f"date={DAY}"
    for path in part.glob("*.parquet"):
        table = pq.read_table(path)
        pq.write_table(table.drop_columns(["task_id"]), path)
        assert "task_id" not in pq.read_schema(path).names
    # A resend of a v1 event is still a duplicate; a v1.1 event with a task joins the same partition.
    _write(settings, "v11.jsonl", [_event("a"), _event("c", task="t-1")])
    again = ingest.main([*settings.argv(), "--date", DAY])
    assert again.stats[DAY]["duplicates"] == 3 and again.stats[DAY]["clean"] == 1  # a, b (v1 file again), a
    rows = ds.dataset(str(part), format="parquet").to_table()
    assert sorted(rows["event_id"].to_pylist()) == ["a", "b", "c"]
    tasks = dict(zip(rows["event_id"].to_pylist(), rows["task_id"].to_pylist(), strict=True))
    assert tasks == {"a": None, "b": None, "c": "t-1"}


def test_a_task_id_is_bounded_like_every_id(tmp_path):
    settings = _settings(tmp_path)
    _write(
        settings,
        "tasks.jsonl",
        [_event("ok", task="t"), _event("long", task="x" * 201), _event("esc", task="t\u001b")],
    )
    result = ingest.main([*settings.argv(), "--date", DAY])
    assert result.stats[DAY]["quarantined"] == {"value_too_long": 1, "control_character": 1}
    quarantine = ds.dataset(f"{settings.lake}/quarantine", format="parquet").to_table()
    assert sorted(quarantine["event_id"].to_pylist()) == ["esc", "long"]
    assert pc.sum(pc.is_valid(quarantine["raw"]).cast("int8")).as_py() == 2
