"""CloudEvents 1.0 structured mode, written by the cloudevents SDK, ingested like any landing file."""

from __future__ import annotations

import datetime as dt

import pyarrow.dataset as ds
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from pipelines.ingest import events as ingest
from pipelines.settings import Settings
from pipelines.warehouse.engine import make_engine, upgrade
from tests.conftest import CATALOG_PATH

DAY = dt.date(2026, 3, 2)


def _event(i: int, **extra: object) -> CloudEvent:
    data = {
        "account_id": f"acct-ce-{i % 3}",
        "user_id": None,
        "model": "gpt-5.6-sol",
        "speed_tier": ["standard", "priority", "ultrafast"][i % 3] if i % 3 < 2 else "standard",
        "input_tokens": 1000 + i,
        "cached_input_tokens": i,
        "output_tokens": 50 + i,
        "duration_ms": 900,
        "status": "ok",
        "error_code": None,
        "sdk_extra_field": {"kept": "out of the lake"},
        **extra,
    }
    attributes = {
        "id": f"ce-{i}",
        "source": "/api-gateway/eu-1",
        "type": "com.example.model.usage",
        "time": dt.datetime(2026, 3, 2, 8, i % 60, tzinfo=dt.UTC),
        "datacontenttype": "application/json",
        "partitionkey": "ignored-extension",
    }
    return CloudEvent(attributes, data)


def test_sdk_structured_lines_and_batch_are_ingested(tmp_path):
    fmt = JSONFormat()
    folder = tmp_path / "landing" / DAY.isoformat()
    folder.mkdir(parents=True)
    lines = [fmt.write(_event(i)) for i in range(40)]
    (folder / "gateway.ce.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    batch = [fmt.write(_event(i)) for i in range(40, 50)] + [fmt.write(_event(3))]  # one resend
    (folder / "batch.ce.json").write_bytes(b"[" + b",".join(batch) + b"]")

    url = f"sqlite:///{tmp_path / 'w.db'}"
    upgrade(make_engine(url))
    settings = Settings(
        config=str(CATALOG_PATH),
        database_url=url,
        lake=str(tmp_path / "lake"),
        landing=str(tmp_path / "landing"),
    )
    stats = ingest.main([*settings.argv(), "--date", DAY.isoformat()]).stats[DAY.isoformat()]
    assert stats == {**stats, "rows_read": 51, "clean": 50, "duplicates": 1, "quarantined": {}}

    lake = ds.dataset(str(tmp_path / "lake" / "events"), format="parquet").to_table()
    assert "sdk_extra_field" not in lake.column_names and "partitionkey" not in lake.column_names
    row = next(r for r in lake.to_pylist() if r["event_id"] == "ce-7")
    assert row["event_time"] == dt.datetime(2026, 3, 2, 8, 7, tzinfo=dt.UTC)
    assert (row["account_id"], row["input_tokens"], row["cached_input_tokens"], row["output_tokens"]) == (
        "acct-ce-1",
        1007,
        7,
        57,
    )
    assert row["_source_file"] == "gateway.ce.jsonl"
