"""Objects written to an object store (rclone's S3 server): uploaded whole when closed, in one request
or, past ``objects.PUT_MAX``, through a multipart upload; bytes equal to what was written; a write
left by an exception leaves no object."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipelines import lake
from pipelines.lake import objects
from tests.s3 import S3Store

pytestmark = pytest.mark.slow


def _table(rows: int) -> pa.Table:
    return pa.table({"event_id": [f"e-{i:08d}" for i in range(rows)], "tokens": pa.array(range(rows))})


@pytest.mark.parametrize("put_max", [objects.PUT_MAX, 10_000], ids=["one-request", "multipart"])
def test_a_file_written_in_pieces_is_stored_whole(bucket: S3Store, monkeypatch, put_max: int) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(objects, "PUT_MAX", put_max)
    path = f"{bucket.root}/lake/part-0000.parquet"
    writer = lake.ParquetAppender(path, _table(1).schema)
    pieces = [_table(20_000).slice(i * 5_000, 5_000) for i in range(4)]
    for piece in pieces:
        writer.write(piece)
    writer.close()
    back = lake.read_parquet(path)
    assert back.to_pylist() == pa.concat_tables(pieces).to_pylist()
    assert lake.open_parquet(path).metadata.num_row_groups == 4
    if put_max == 10_000:  # large enough to have gone through the multipart writer
        assert len(bucket.get(path)) > put_max


def test_a_write_left_by_an_exception_stores_nothing(bucket: S3Store) -> None:
    path = f"{bucket.root}/lake/half.bin"
    with pytest.raises(RuntimeError), lake.create_object(path) as handle:
        handle.write(b"x" * 1000)
        raise RuntimeError("stopped")
    assert not lake.exists(path)
    with lake.create_object(path) as handle:
        assert handle.write(b"abc") == 3 and handle.write(memoryview(b"de")) == 2 and handle.tell() == 5
    assert lake.exists(path)
