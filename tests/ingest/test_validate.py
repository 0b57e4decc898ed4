from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from pipelines.ingest.readers import RawChunk
from pipelines.ingest.validate import Rules, parse_event_time, validate
from schemas.events import INGEST_SCHEMA, LAKE_SCHEMA, QUARANTINE_SCHEMA, RAW_JSON_SCHEMA
from schemas.jsonl import ROW_NUMBER, read_json_lines

LANDING = dt.date(2026, 3, 10)
RULES = Rules(frozenset({"gpt-5.6-sol"}), lateness_days=35, max_tokens_per_event=1_000_000)
GOOD = {
    "event_id": "e1",
    "event_time": "2026-03-10T12:00:00Z",
    "account_id": "a",
    "model": "gpt-5.6-sol",
    "speed_tier": "standard",
    "input_tokens": 100,
    "cached_input_tokens": 10,
    "output_tokens": 5,
    "status": "ok",
}


def _run(*rows: dict):  # type: ignore[no-untyped-def]
    import json

    data = "\n".join(json.dumps(r) for r in rows).encode()
    parsed = read_json_lines(data, RAW_JSON_SCHEMA)
    chunk = RawChunk(parsed.table, QUARANTINE_SCHEMA.empty_table(), parsed.table.num_rows, raw_text=parsed)
    return validate(chunk, LANDING, "f.jsonl", RULES)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"event_id": None}, "missing_event_id"),
        ({"event_id": ""}, "empty_event_id"),
        ({"account_id": None}, "missing_account_id"),
        ({"event_time": None}, "missing_event_time"),
        ({"event_time": "2026-03-10T12:00:00"}, "naive_event_time"),
        ({"event_time": "10/03/2026"}, "bad_event_time"),
        ({"event_time": "2026-02-30T12:00:00Z"}, "bad_event_time"),
        ({"event_time": "2026-03-12T00:00:00Z"}, "future_event"),
        ({"event_time": "2026-01-01T00:00:00Z"}, "too_late"),
        ({"model": "gpt-0"}, "unknown_model"),
        ({"speed_tier": "warp"}, "unknown_speed_tier"),
        ({"status": "meh"}, "unknown_status"),
        ({"input_tokens": -1}, "negative_tokens"),
        ({"output_tokens": 5_000_000}, "tokens_out_of_range"),
        ({"cached_input_tokens": 101}, "cached_exceeds_input"),
        ({"duration_ms": -5}, "negative_duration"),
    ],
)
def test_a_bad_row_is_quarantined_with_its_reason(change, reason):
    clean, quarantine = _run(GOOD, {**GOOD, "event_id": "bad", **change})
    assert clean["event_id"].to_pylist() == ["e1"]
    assert quarantine.num_rows == 1
    assert reason in quarantine["reason"][0].as_py().split(",")
    assert quarantine["row_number"].to_pylist() == [2]
    assert '"bad"' in quarantine["raw"][0].as_py() or change.get("event_id") in (None, "")


def test_several_reasons_are_all_recorded():
    _, quarantine = _run({**GOOD, "model": "x", "output_tokens": -1, "speed_tier": "warp"})
    assert set(quarantine["reason"][0].as_py().split(",")) == {
        "unknown_model",
        "negative_tokens",
        "unknown_speed_tier",
    }


def test_clean_rows_have_the_lake_schema_and_utc_times():
    """In flight, the low-cardinality columns are dictionary arrays (INGEST_SCHEMA); one cast gives
    the lake's schema, field metadata included."""
    clean, quarantine = _run({**GOOD, "event_time": "2026-03-10T14:30:00.25+02:00", "user_id": "u"})
    assert quarantine.num_rows == 0
    assert clean.drop_columns([ROW_NUMBER]).schema.equals(INGEST_SCHEMA, check_metadata=True)
    lake_rows = clean.drop_columns([ROW_NUMBER]).cast(LAKE_SCHEMA)
    assert lake_rows.schema.equals(LAKE_SCHEMA, check_metadata=True)
    assert lake_rows["model"].to_pylist() == ["gpt-5.6-sol"]
    assert clean["event_time"][0].as_py() == dt.datetime(2026, 3, 10, 12, 30, 0, 250000, tzinfo=dt.UTC)
    assert clean["_landing_date"][0].as_py() == LANDING
    assert clean["_source_file"][0].as_py() == "f.jsonl"


MIXED = [
    GOOD,
    {**GOOD, "event_id": "e2", "model": "gpt-0"},
    {**GOOD, "event_id": "e3", "speed_tier": "warp", "status": None},
    {**GOOD, "event_id": "e4", "error_code": "x" * 201},
    {**GOOD, "event_id": "e5", "model": "é" * 150},  # 300 bytes but 150 characters: not too long
    {**GOOD, "event_id": "e6", "status": "error", "error_code": "context_length_exceeded"},
    {**GOOD, "event_id": "e7", "model": None},
]


@pytest.mark.parametrize("dictionary_pages", [True, False], ids=["dictionary pages", "plain pages"])
def test_a_parquet_file_gets_the_verdicts_and_rows_of_the_same_json(tmp_path, dictionary_pages):
    """Parquet's text columns of few values are read as dictionary arrays and checked once per value:
    the same reasons and the same clean rows as the JSON lines of the same events, whether the file's
    pages are dictionary-encoded or plain."""
    import json

    import pyarrow.parquet as pq

    from pipelines.ingest.parquet_files import read_parquet_unit

    parsed = read_json_lines("\n".join(json.dumps(r) for r in MIXED).encode(), RAW_JSON_SCHEMA)
    path = tmp_path / "f.jsonl"  # the name validate gets for both, so _source_file agrees
    pq.write_table(parsed.table, path, use_dictionary=dictionary_pages)
    chunk = read_parquet_unit(str(path), 0, LANDING)
    assert chunk.table["model"].type == pa.dictionary(pa.int32(), pa.string())
    clean, quarantine = validate(chunk, LANDING, "f.jsonl", RULES)
    json_clean, json_quarantine = _run(*MIXED)

    def reasons(q: pa.Table) -> dict:
        return {
            e: set(r.split(","))
            for e, r in zip(q["event_id"].to_pylist(), q["reason"].to_pylist(), strict=True)
        }

    assert (
        reasons(quarantine)
        == reasons(json_quarantine)
        == {
            "e2": {"unknown_model"},
            "e3": {"unknown_speed_tier", "missing_status"},
            "e4": {"value_too_long"},
            "e5": {"unknown_model"},
            "e7": {"missing_model"},
        }
    )
    as_lake = [t.drop_columns([ROW_NUMBER]).cast(LAKE_SCHEMA) for t in (clean, json_clean)]
    assert as_lake[0].equals(as_lake[1])
    assert as_lake[0]["event_id"].to_pylist() == ["e1", "e6"]
    assert as_lake[0]["error_code"].to_pylist() == [None, "context_length_exceeded"]


def test_a_late_event_inside_the_window_is_clean():
    clean, quarantine = _run({**GOOD, "event_time": "2026-02-10T00:00:00Z"})
    assert clean.num_rows == 1 and quarantine.num_rows == 0


def test_event_time_parser_is_strict():
    values, bad, naive = parse_event_time(
        pa.array(
            [
                "2026-03-10T00:00:00Z",
                "2026-03-10 01:00:00.5-10:00",
                "2026-03-10T25:00:00Z",
                "2026-03-10T00:00:00",
                "soon",
                None,
                "2026-03-10T00:00:00+1400",
            ]
        )
    )
    assert values.to_pylist()[:2] == [
        dt.datetime(2026, 3, 10, tzinfo=dt.UTC),
        dt.datetime(2026, 3, 10, 11, 0, 0, 500000, tzinfo=dt.UTC),
    ]
    assert values[6].as_py() == dt.datetime(2026, 3, 9, 10, tzinfo=dt.UTC)
    assert bad.tolist() == [False, False, True, False, True, False, False]
    assert naive.tolist() == [False, False, False, True, False, False, False]
