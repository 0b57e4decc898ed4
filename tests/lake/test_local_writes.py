"""Files the lake writes on a local disk appear whole or not at all: each writer writes beside the
file and renames it into place. A task that Dask runs again after its worker was lost writes the
same file again while tasks of the next stage may be reading the first copy; they must keep reading
a whole file, and a write that fails leaves the earlier file and nothing else."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipelines import lake
from pipelines.lake.parquet import ParquetAppender
from pipelines.runtime.files import local_atomic


def _table(rows: int) -> pa.Table:
    return pa.table({"event_id": [f"e-{i:08d}" for i in range(rows)], "tokens": pa.array(range(rows))})


def _appender(path: str, rows: int) -> None:
    table = _table(rows)
    appender = ParquetAppender(path, table.schema)
    appender.write(table)
    appender.close()


WRITERS: dict[str, Callable[[str, int], object]] = {
    "write_parquet": lambda path, rows: lake.write_parquet(path, _table(rows)),
    "ParquetAppender": _appender,
    "write_ipc_segments": lambda path, rows: lake.write_ipc_segments(path, _table(rows), [(0, rows)]),
    "write_npy": lambda path, rows: lake.write_npy(path, np.arange(rows, dtype=np.int64)),
    "write_bytes": lambda path, rows: lake.write_bytes(path, b"x" * rows),
}


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_reader_of_the_first_copy_reads_it_whole_while_written_again(name: str, tmp_path: Path) -> None:
    path = str(tmp_path / "stage" / "shard-0000.out")
    WRITERS[name](path, 20_000)
    first = Path(path).read_bytes()
    with open(path, "rb") as reader:  # a task of the next stage has opened the first copy
        WRITERS[name](path, 5)  # the task that wrote it runs again (a shorter file shows truncation)
        assert reader.read() == first
    assert Path(path).read_bytes() != first
    assert os.listdir(tmp_path / "stage") == ["shard-0000.out"]  # nothing left beside it


def test_a_write_that_fails_leaves_the_earlier_file_and_nothing_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "stage" / "shard-0000.parquet"
    lake.write_parquet(str(path), _table(100))
    before = path.read_bytes()
    with pytest.raises(OSError, match="No space left"), local_atomic(str(path)) as partial:
        Path(partial).write_bytes(b"half a file")
        raise OSError(28, "No space left on device")
    assert path.read_bytes() == before
    assert os.listdir(path.parent) == [path.name]
    assert lake.list_files(str(path.parent)) == [str(path)]
