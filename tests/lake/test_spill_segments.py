"""Spill segments between Beam stages (``lake.write_ipc_segments``): each segment reads back alone,
exactly, from its byte range, on a local disk and on an object store (rclone's S3 server), and held in
memory (``lake.carried_segments``, what a Dask run carries between tasks: the same bytes when pickled);
each carries only the dictionary values its rows use; a range that is not a segment is a one-line
error."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from pipelines import lake
from pipelines.errors import UsageBillingError
from pipelines.lake import objects, spill
from tests.s3 import S3Store


def _table(rows: int = 3_000) -> pa.Table:
    accounts = pa.array([f"acct-{i % 997:05d}" for i in range(rows)]).dictionary_encode()
    tiers = pa.array([None if i % 7 == 0 else ("priority", "standard")[i % 2] for i in range(rows)])
    return pa.table(
        {
            "account_id": accounts,
            "speed_tier": tiers.dictionary_encode(),
            "tokens": pa.array(range(rows), pa.int64()),
        }
    )


SEGMENTS = [(0, 10), (10, 990), (1_000, 0), (1_000, 2_000)]


@pytest.fixture(params=["local", "s3"])
def folder(request, tmp_path: Path):  # type: ignore[no-untyped-def]
    return str(tmp_path) if request.param == "local" else request.getfixturevalue("s3_folder")


@pytest.fixture
def s3_folder(bucket: S3Store) -> str:
    return f"{bucket.root}/spill"


def test_each_segment_reads_back_alone_and_exactly(folder: str) -> None:
    table = _table()
    path = lake.join(folder, "unit.arrow")
    ranges = lake.write_ipc_segments(path, table, SEGMENTS)
    assert [r[0] for r in ranges[1:]] == [r[1] for r in ranges[:-1]]  # one after another, nothing between
    for (offset, length), (first, end) in reversed(list(zip(SEGMENTS, ranges, strict=True))):
        back = lake.read_ipc_segment(path, first, end)
        assert back.to_pylist() == table.slice(offset, length).to_pylist()
        assert back.schema == table.schema  # dictionary columns stay dictionary columns
    together = lake.read_ipc_segments([(path, first, end) for first, end in ranges] * 3)
    assert [t.to_pylist() for t in together] == [table.slice(o, n).to_pylist() for o, n in SEGMENTS] * 3
    with lake.IpcSegments() as segments:
        assert segments.read(path, *ranges[1]).to_pylist() == table.slice(10, 990).to_pylist()


def test_a_segment_carries_only_the_dictionary_values_it_uses(tmp_path: Path) -> None:
    table = _table(20_000)  # 997 accounts in the dictionary
    ranges = lake.write_ipc_segments(str(tmp_path / "unit.arrow"), table, [(0, 5), (5, 19_995)])
    small = ranges[0][1] - ranges[0][0]
    assert small < 4_000, small  # the whole dictionary alone is over 11,000 bytes
    back = lake.read_ipc_segment(str(tmp_path / "unit.arrow"), *ranges[0])
    assert len(back["account_id"].chunk(0).dictionary) == 5


def test_an_object_is_opened_once_for_all_its_segments(s3_folder: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    folder = s3_folder
    opened: list[str] = []
    real = objects.open_input
    monkeypatch.setattr(objects, "open_input", lambda p: opened.append(p) or real(p))
    path = lake.join(folder, "once.arrow")
    ranges = lake.write_ipc_segments(path, _table(), SEGMENTS)
    spill._OPENED.clear()
    lake.read_ipc_segments([(path, first, end) for first, end in ranges])
    assert opened == [path]


def test_a_range_that_is_not_a_segment_is_a_one_line_error(tmp_path: Path) -> None:
    path = str(tmp_path / "unit.arrow")
    ranges = lake.write_ipc_segments(path, _table(), SEGMENTS)
    with pytest.raises(UsageBillingError, match="not a spill segment"):
        lake.read_ipc_segment(path, ranges[1][0] + 3, ranges[1][1])


def test_an_object_written_again_longer_is_read_from_its_new_size(s3_folder: str) -> None:
    """A run retried under its run id writes its spill objects again under the same names, in a
    worker process that may have opened them already: a range past the size first seen still reads."""
    path = lake.join(s3_folder, "again.arrow")
    first = lake.write_ipc_segments(path, _table(100), [(0, 100)])
    assert lake.read_ipc_segments([(path, *first[0])] * 2)[0].num_rows == 100
    table = _table(5_000)
    again = lake.write_ipc_segments(path, table, [(0, 10), (10, 4_990)])
    assert again[1][1] > first[0][1]
    back = lake.read_ipc_segments([(path, *r) for r in again])
    assert [t.to_pylist() for t in back] == [table.slice(0, 10).to_pylist(), table.slice(10).to_pylist()]


def test_segments_that_follow_one_another_are_one_request(s3_folder: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Read in any order, with repeats and a gap: each run of touching segments of an object is one
    ranged request, and every segment still reads back exactly, in the order asked."""
    table = _table()
    a, b = lake.join(s3_folder, "a.arrow"), lake.join(s3_folder, "b.arrow")
    ra = lake.write_ipc_segments(a, table, SEGMENTS)
    rb = lake.write_ipc_segments(b, table, SEGMENTS)
    requests: list[tuple[str, int, int]] = []
    real = spill._read_range
    monkeypatch.setattr(spill, "_read_range", lambda *r: requests.append(r) or real(*r))
    asked = [(b, *rb[3]), (a, *ra[1]), (a, *ra[0]), (b, *rb[0]), (a, *ra[1]), (a, *ra[2])]
    back = lake.read_ipc_segments(asked)
    expected = [SEGMENTS[3], SEGMENTS[1], SEGMENTS[0], SEGMENTS[0], SEGMENTS[1], SEGMENTS[2]]
    assert [t.to_pylist() for t in back] == [table.slice(o, n).to_pylist() for o, n in expected]
    # a: segments 0, 1, 2 touch (one request); b: 0 and 3 do not (two requests).
    assert sorted(requests) == sorted([(a, ra[0][0], ra[2][1]), (b, *rb[0]), (b, *rb[3])])


def test_batches_hold_at_most_the_budget_and_keep_the_order() -> None:
    sizes = [5, 3, 9, 1, 1, 20, 2]
    batches = list(lake.in_batches(range(len(sizes)), lambda i: sizes[i], 10))
    assert [i for batch in batches for i in batch] == list(range(len(sizes)))
    assert batches == [[0, 1], [2, 3], [4], [5], [6]]  # an item over the budget goes alone
    assert list(lake.in_batches([], len, 10)) == []


def test_segments_carried_in_memory_are_the_bytes_a_spill_file_holds(tmp_path: Path) -> None:
    """On Dask the segments travel between tasks in memory instead of through a spill file: within a
    worker the rows as they are (no copy), and when Dask pickles one to move it to another worker, the
    same IPC stream a spill file holds for it, not the whole table a slice points into."""
    import pickle

    table = _table()
    path = str(tmp_path / "unit.arrow")
    ranges = lake.write_ipc_segments(path, table, SEGMENTS)
    buffers = lake.ipc_segments(table, SEGMENTS)
    on_disk = Path(path).read_bytes()
    assert [b.to_pybytes() for b in buffers] == [on_disk[first:end] for first, end in ranges]
    assert lake.ipc_segments(table, []) == [] and lake.carried_segments(table, []) == []

    carried = lake.carried_segments(table, SEGMENTS)
    assert [c.table.to_pylist() for c in carried] == [table.slice(o, n).to_pylist() for o, n in SEGMENTS]
    for protocol in (4, 5):
        out_of_band: list[pickle.PickleBuffer] = []
        callback = out_of_band.append if protocol == 5 else None
        pickled = [pickle.dumps(c, protocol=protocol, buffer_callback=callback) for c in carried]
        if protocol == 5:  # the stream goes out of band, as it is (what Dask does between workers)
            assert [bytes(b.raw()) for b in out_of_band] == [b.to_pybytes() for b in buffers]
            moved = [pickle.loads(p, buffers=[b]) for p, b in zip(pickled, out_of_band, strict=True)]
        else:
            assert [len(p) < len(on_disk) // 2 for p in pickled[:2]] == [True, True]
            moved = [pickle.loads(p) for p in pickled]
        assert all(isinstance(m, lake.CarriedSegment) for m in moved)
        assert [m.table.to_pylist() for m in moved] == [c.table.to_pylist() for c in carried]
    # Only the values its rows use: a segment's stream does not carry the table's every account again.
    first = pickle.loads(pickle.dumps(carried[0], protocol=4)).table
    assert len(first.column(0).chunk(0).dictionary) < len(table.column(0).chunk(0).dictionary)
