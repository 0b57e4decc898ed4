"""JSON-lines files read in chunks: every line once, in order, numbered as in the file, however the
blocks cut the lines, plain or gzip; a gzip stream that breaks part way quarantines the rest."""

from __future__ import annotations

import datetime as dt
import gzip
import json

import pyarrow as pa
import pytest

from pipelines.ingest import readers
from schemas.jsonl import ROW_NUMBER, newline_count

DAY = dt.date(2026, 3, 2)


def _lines(n: int) -> list[bytes]:
    """Events whose lines differ in length (ids and tokens of 1 to 6 digits)."""
    return [
        json.dumps(
            {
                "event_id": f"e-{i}" + "x" * (i % 7),
                "event_time": "2026-03-02T10:00:00Z",
                "account_id": "acct-1",
                "model": "gpt-5.1",
                "speed_tier": "standard",
                "input_tokens": 10 ** (i % 6),
                "cached_input_tokens": 0,
                "output_tokens": i,
                "status": "ok",
            }
        ).encode()
        for i in range(n)
    ]


def _write(tmp_path, body: bytes, gz: bool) -> str:
    path = tmp_path / ("day.jsonl.gz" if gz else "day.jsonl")
    path.write_bytes(gzip.compress(body, mtime=0) if gz else body)
    return str(path)


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("block", [7, 64, 301, 1 << 20])
@pytest.mark.parametrize("last_newline", [True, False])
def test_every_line_once_in_order_with_its_line_number_whatever_the_block(
    tmp_path, monkeypatch, gz, block, last_newline
):
    lines = _lines(120)
    body = readers.UTF8_BOM + b"\n".join(lines) + (b"\n" if last_newline else b"")
    path = _write(tmp_path, body, gz)
    monkeypatch.setattr(readers, "CHUNK_BYTES", block)

    pieces = list(readers._line_chunks(path))
    assert b"".join(p[0] for p in pieces) == body.removeprefix(readers.UTF8_BOM)
    for (data, before, newlines), nxt in zip(pieces, [*pieces[1:], None], strict=True):
        assert newlines == data.count(b"\n")
        if nxt is not None:
            assert data.endswith(b"\n") and nxt[1] == before + newlines

    chunks = list(readers.read_json_file(path, DAY))
    table = pa.concat_tables(c.table for c in chunks)
    assert sum(c.rows_read for c in chunks) == len(lines)
    assert all(c.quarantine.num_rows == 0 for c in chunks)
    assert table[ROW_NUMBER].to_pylist() == list(range(1, len(lines) + 1))
    assert table["event_id"].to_pylist() == [json.loads(x)["event_id"] for x in lines]
    assert table["input_tokens"].to_pylist() == [json.loads(x)["input_tokens"] for x in lines]


def test_a_gzip_stream_cut_short_keeps_the_rows_before_and_quarantines_the_rest(tmp_path, monkeypatch):
    lines = _lines(4000)
    whole = gzip.compress(b"\n".join(lines) + b"\n", mtime=0)
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(whole[: len(whole) * 3 // 4])
    monkeypatch.setattr(readers, "CHUNK_BYTES", 16 << 10)

    chunks = list(readers.read_json_file(str(path), DAY))
    rows = pa.concat_tables(c.table for c in chunks)
    assert 0 < rows.num_rows < len(lines)
    assert rows[ROW_NUMBER].to_pylist() == list(range(1, rows.num_rows + 1))
    last = chunks[-1].quarantine.to_pylist()
    assert [r["reason"] for r in last] == ["unreadable_file"]
    assert last[0]["detail"].startswith("OSError: Truncated gzip stream")
    assert sum(c.rows_read for c in chunks) == rows.num_rows + 1


@pytest.mark.parametrize("piece", [1, 3, 4 << 20])
def test_newline_count_counts_across_its_pieces(piece):
    data = b"\n\nab\n" * 1000 + b"tail"
    assert newline_count(data, piece) == data.count(b"\n") == 3000
    assert newline_count(b"", piece) == 0
