"""A lake file written before a token kind existed reads that kind as 0 tokens.

A token kind added to the registry (``schemas.tokens``) is a new int64 column of the lake; the
partitions already written do not have it. Every reader of event rows (the Beam steps' row-group
units, the scans of reports) gives such a file's rows 0 of the new kind instead of failing or
reading nulls, so a lake needs no rewrite when a kind is added.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines import lake
from schemas.events import LAKE_SCHEMA, TOKEN_FIELDS

COLUMNS = ["event_id", *TOKEN_FIELDS]


def _files(tmp_path) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """An old file without the last part field (as if that kind came later) and a new one with it."""
    missing = next(f for f in TOKEN_FIELDS if f != TOKEN_FIELDS[0])
    old = pa.table(
        {"event_id": ["a", "b"], **{f: pa.array([5, 7], pa.int64()) for f in TOKEN_FIELDS if f != missing}}
    )
    new = pa.table({"event_id": ["c"], **{f: pa.array([3], pa.int64()) for f in TOKEN_FIELDS}})
    paths = (str(tmp_path / "old.parquet"), str(tmp_path / "new.parquet"))
    pq.write_table(old, paths[0])
    pq.write_table(new, paths[1])
    return paths


def test_row_group_units_fill_a_missing_token_field_with_zeros(tmp_path):
    old, new = _files(tmp_path)
    missing = next(f for f in TOKEN_FIELDS if f != TOKEN_FIELDS[0])
    table = lake.read_unit(((old, 0), (new, 0)), COLUMNS)
    assert table.column_names == COLUMNS
    assert table[missing].to_pylist() == [0, 0, 3]
    assert table[TOKEN_FIELDS[0]].to_pylist() == [5, 7, 3]


def test_scans_fill_a_missing_token_field_with_zeros_whichever_file_comes_first(tmp_path):
    old, new = _files(tmp_path)
    missing = next(f for f in TOKEN_FIELDS if f != TOKEN_FIELDS[0])
    for paths in ([old, new], [new, old]):
        table = lake.scan(paths, COLUMNS, pc.scalar(True), LAKE_SCHEMA).sort_by("event_id")
        assert table[missing].to_pylist() == [0, 0, 3]
        assert table[missing].null_count == 0
