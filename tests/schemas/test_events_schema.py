from __future__ import annotations

import pyarrow as pa

from schemas.events import EVENT_SCHEMA, LAKE_SCHEMA, RAW_JSON_SCHEMA, REQUIRED_FIELDS, SCHEMA_VERSION
from schemas.jsonl import ROW_NUMBER, read_json_lines


def test_every_field_states_its_rule_and_the_schema_its_version():
    assert EVENT_SCHEMA.metadata[b"version"] == str(SCHEMA_VERSION).encode()
    for f in EVENT_SCHEMA:
        assert f.metadata[b"rule"], f.name
    assert EVENT_SCHEMA.field("event_time").type == pa.timestamp("us", tz="UTC")
    assert EVENT_SCHEMA.field("input_tokens").metadata[b"unit"] == b"tokens"
    assert set(REQUIRED_FIELDS) == {f.name for f in EVENT_SCHEMA if not f.nullable}
    assert {"user_id", "duration_ms", "error_code", "task_id"} == {f.name for f in EVENT_SCHEMA if f.nullable}
    assert LAKE_SCHEMA.names[: len(EVENT_SCHEMA)] == EVENT_SCHEMA.names


def test_json_lines_keep_line_numbers_and_drop_unknown_fields():
    data = (
        b'{"event_id":"a","input_tokens":1,"surprise":{"x":[1]}}\n'
        b"\n"
        b'{"event_id":"b","input_tokens":2}\r\n'
        b'{"event_id":"c","input_tokens":3}'
    )
    result = read_json_lines(data, RAW_JSON_SCHEMA)
    assert result.table.column_names == [*RAW_JSON_SCHEMA.names, ROW_NUMBER]
    assert result.table["event_id"].to_pylist() == ["a", "b", "c"]
    assert result.table[ROW_NUMBER].to_pylist() == [1, 3, 4]
    assert result.blank_lines == 1
    assert result.rejected == []


def test_each_bad_line_is_rejected_with_its_reason_and_the_rest_survive():
    lines = [
        b'{"event_id":"ok1","input_tokens":1}',
        b'{"event_id":"x","input_tokens":"12"}',
        b"{not json",
        b'\xff\xfe{"event_id":"y"}',
        b"[1, 2]",
        b'{"event_id":"z","input_tokens":123456789012345678901234}',
        b'{"event_id":"ok2","input_tokens":2}',
    ]
    result = read_json_lines(b"\n".join(lines), RAW_JSON_SCHEMA)
    assert result.table["event_id"].to_pylist() == ["ok1", "ok2"]
    assert result.table[ROW_NUMBER].to_pylist() == [1, 7]
    got = {(r.row_number, r.reason) for r in result.rejected}
    assert got == {
        (2, "wrong_type"),
        (3, "malformed_json"),
        (4, "invalid_utf8"),
        (5, "not_an_object"),
        (6, "wrong_type"),
    }
    assert next(r for r in result.rejected if r.row_number == 2).detail.startswith("input_tokens")
    assert next(r for r in result.rejected if r.row_number == 3).raw == "{not json"
    assert result.table.num_rows + len(result.rejected) == len(lines)


def test_raw_text_of_rows_is_available_for_quarantine():
    result = read_json_lines(b'{"event_id":"a"}\n{"event_id":"b"}\n', RAW_JSON_SCHEMA)
    assert result.raw_text(pa.array([2])).to_pylist() == ['{"event_id":"b"}']


def test_utc_date_is_arrows_cast_for_every_unit_zone_and_null():
    import datetime as dt

    import numpy as np
    import pyarrow.compute as pc

    from schemas.events import utc_date

    # Instants from 1935 to 2105, near midnights, before 1970 (negative values floor, not truncate).
    seconds = np.random.default_rng(7).integers(-(2**31), 2**32, 20_000)
    seconds = np.concatenate([seconds, [-1, 0, 1, 86_399, 86_400, -86_400, -86_401]])
    for unit, scale in (("s", 1), ("ms", 10**3), ("us", 10**6), ("ns", 10**9)):
        for zone in ("UTC", "+00:00", "Etc/UTC", "Europe/Berlin", "Pacific/Kiritimati", None):
            values = pa.array(seconds * scale, pa.timestamp(unit, tz=zone))
            values = pa.chunked_array([values, pa.nulls(2, values.type)])
            got = utc_date(values)
            assert got.type == pa.date32()
            assert got.equals(pc.cast(values, pa.date32())), (unit, zone)
    assert utc_date(pa.array([-1], pa.timestamp("us", tz="UTC"))).to_pylist() == [dt.date(1969, 12, 31)]
