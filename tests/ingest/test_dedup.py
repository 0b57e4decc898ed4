from __future__ import annotations

import datetime as dt
import string

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.ingest import dedup
from pipelines.ingest.dedup import dedup_shard, sorted_hashes
from pipelines.ingest.hashing import HASH, runs, shard_of, shard_segments, stable_hash, with_hash
from schemas.events import LAKE_SCHEMA
from schemas.jsonl import ROW_NUMBER


def _rows(ids, tokens=None, landing=dt.date(2026, 3, 1), source="a.jsonl", day=1):  # type: ignore[no-untyped-def]
    n = len(ids)
    tokens = tokens or [10] * n
    t = pa.table(
        {
            "event_id": ids,
            "event_time": pa.array(
                [dt.datetime(2026, 3, day, 12, tzinfo=dt.UTC)] * n, pa.timestamp("us", tz="UTC")
            ),
            "account_id": ["acct"] * n,
            "user_id": pa.nulls(n, pa.string()),
            "model": ["m"] * n,
            "speed_tier": ["standard"] * n,
            "input_tokens": tokens,
            "cached_input_tokens": [0] * n,
            "output_tokens": [1] * n,
            "duration_ms": pa.nulls(n, pa.int64()),
            "status": ["ok"] * n,
            "error_code": pa.nulls(n, pa.string()),
            "task_id": pa.nulls(n, pa.string()),
            "_landing_date": [landing] * n,
            "_source_file": [source] * n,
        },
        schema=LAKE_SCHEMA,
    )
    return with_hash(t.append_column(ROW_NUMBER, pa.array(range(1, n + 1), pa.int64())))


class MemoryShard:
    """An ExistingShard backed by a dict of event date -> lake rows."""

    def __init__(self, files: dict[dt.date, pa.Table] | None = None) -> None:
        self.files = files or {}

    def dates(self):  # type: ignore[no-untyped-def]
        return sorted(self.files)

    def hashes(self, day):  # type: ignore[no-untyped-def]
        return sorted_hashes(self.files[day])

    def rows(self, day, event_ids):  # type: ignore[no-untyped-def]
        t = self.files[day]
        return t.filter(pc.is_in(t["event_id"], value_set=event_ids))

    def commit(self, result) -> None:  # type: ignore[no-untyped-def]
        """Append each date's new rows to its file, as the ingest's staged shard files do."""
        for day, rows in result.writes.items():
            rows = rows.cast(LAKE_SCHEMA)  # as the shard file's writer stores them
            self.files[day] = pa.concat_tables([self.files[day], rows]) if day in self.files else rows


def test_hash_is_stable_across_runs_and_spreads_ids():
    ids = pa.array(["a", "ev-1", "ev-2", "", "550e8400-e29b-41d4-a716-446655440000"])
    assert stable_hash(ids).tolist() == stable_hash(pa.chunked_array([ids[:2], ids[2:]])).tolist()
    assert stable_hash(ids.slice(1, 2)).tolist() == stable_hash(pa.array(["ev-1", "ev-2"])).tolist()
    many = pa.array([f"ev-7-{i}" for i in range(80_000)])
    counts = np.bincount(shard_of(many, 8), minlength=8)
    assert counts.min() > 0.96 * counts.mean()


def test_hash_known_values_do_not_drift():
    """Pinned values: a change here would re-shard every existing lake (shards are fixed per lake)."""
    got = stable_hash(pa.array(["ev-7-0", "ev-7-1", "abc", "x" * 40, ""])).tolist()
    assert got == [
        816029333626196007,
        6605417528636841464,
        3996509556691404557,
        5008250972881920384,
        11098195047241588884,
    ]
    assert len(set(stable_hash(pa.array([f"id{i}" for i in range(1000)])).tolist())) == 1000
    # Every length around the 8-byte words the hash reads (partial words are masked), and UTF-8.
    letters = string.ascii_letters
    lengths = (1, 7, 8, 9, 15, 16, 17, 23, 24, 25)
    assert stable_hash(pa.array([letters[:n] for n in lengths] + ["é€" * 5])).tolist() == [
        7681135988600625551,
        17386903137732033016,
        983455108840600656,
        1336248989476095817,
        10868586999117974562,
        17113082005861623055,
        15176023676973136126,
        11708526033956350038,
        1161997619719060546,
        2666090748785981293,
        3262137444420823307,
    ]


def test_shard_segments_sort_once_and_cover_every_row():
    t = pa.concat_tables(
        [_rows([f"e{i}" for i in range(50)], day=1), _rows([f"f{i}" for i in range(50)], day=2)]
    )
    table, segments = shard_segments(t, 4)
    assert sum(length for _, _, length in segments) == 100 == table.num_rows
    assert [s for s, _, _ in segments] == sorted({s for s, _, _ in segments})
    for shard, offset, length in segments:
        assert set(shard_of(table.slice(offset, length)["event_id"], 4).tolist()) == {shard}


def test_identical_resend_is_a_duplicate_and_different_payload_a_conflict():
    first = _rows(["a", "b", "c"])
    again = _rows(["a", "b", "c"], tokens=[10, 99, 10], landing=dt.date(2026, 3, 2), source="b.jsonl")
    result = dedup_shard([again, first], MemoryShard())  # arrival order of parts does not matter
    kept = result.writes[dt.date(2026, 3, 1)]
    assert sorted(kept["event_id"].to_pylist()) == ["a", "b", "c"]
    assert kept.filter(pc.equal(kept["event_id"], "b"))["input_tokens"].to_pylist() == [10]
    assert result.duplicates.num_rows == 2
    assert result.conflicts["event_id"].to_pylist() == ["b"]
    assert result.conflicts["source_file"].to_pylist() == ["b.jsonl"]
    assert "a.jsonl" in result.conflicts["detail"][0].as_py()
    assert result.new_clean.num_rows == 3


def test_rows_already_in_the_lake_win_and_a_replay_changes_nothing():
    lake = MemoryShard()
    lake.commit(dedup_shard([_rows(["a", "b"])], lake))
    replay = dedup_shard([_rows(["a", "b"])], lake)
    assert replay.writes == {} and replay.new_clean.num_rows == 0 and replay.duplicates.num_rows == 2
    more = dedup_shard([_rows(["b", "c"], landing=dt.date(2026, 3, 3))], lake)
    assert more.new_clean["event_id"].to_pylist() == ["c"]
    assert more.writes[dt.date(2026, 3, 1)]["event_id"].to_pylist() == ["c"]  # appended, not rewritten
    lake.commit(more)
    assert sorted(lake.files[dt.date(2026, 3, 1)]["event_id"].to_pylist()) == ["a", "b", "c"]


def test_a_conflicting_copy_with_another_event_date_is_caught():
    lake = MemoryShard()
    lake.commit(dedup_shard([_rows(["a"], day=1)], lake))
    moved = dedup_shard([_rows(["a"], day=3, landing=dt.date(2026, 3, 4), source="late.jsonl")], lake)
    assert moved.writes == {}
    assert moved.conflicts["event_id"].to_pylist() == ["a"]


def test_hash_collisions_between_different_ids_are_not_duplicates(monkeypatch):
    # Force every id to the same hash: dedup must still compare the ids themselves.
    monkeypatch.setattr(dedup, "stable_hash", lambda values: np.zeros(len(values), np.uint64))
    rows = _rows(["b", "a", "b", "c", "a"])
    rows = rows.set_column(rows.schema.get_field_index(HASH), HASH, pa.array(np.zeros(5, np.uint64)))
    lake = MemoryShard()
    result = dedup_shard([rows], lake)
    assert sorted(result.new_clean["event_id"].to_pylist()) == ["a", "b", "c"]
    assert result.duplicates.num_rows == 2 and result.conflicts.num_rows == 0
    lake.commit(result)
    extra = _rows(["d", "a"], landing=dt.date(2026, 3, 2))
    extra = extra.set_column(extra.schema.get_field_index(HASH), HASH, pa.array(np.zeros(2, np.uint64)))
    again = dedup_shard([extra], lake)
    assert again.new_clean["event_id"].to_pylist() == ["d"] and again.duplicates.num_rows == 1


def test_runs_are_the_spans_of_equal_values_of_a_sorted_array():
    assert runs(np.array([1, 1, 2, 5, 5, 5])) == [(0, 2), (2, 3), (3, 6)]
    assert runs(np.array(["2026-03-01", "2026-03-02"], dtype="datetime64[D]")) == [(0, 1), (1, 2)]
    assert runs(np.array([7])) == [(0, 1)]
    assert runs(np.array([], np.int64)) == []


@settings(max_examples=60, deadline=None)
@given(
    st.lists(  # parts: (landing day offset, [(id, tokens, event day)])
        st.tuples(
            st.integers(0, 2),
            st.lists(
                st.tuples(st.sampled_from("abcdefghij"), st.integers(1, 2), st.integers(1, 2)), max_size=12
            ),
        ),
        min_size=1,
        max_size=4,
    ),
    st.sets(st.sampled_from("abcdefghij"), max_size=4),
)
def test_dedup_matches_a_row_by_row_reference(parts, stored):
    """Against a loop over the rows in (landing date, source file, row number) order: the first copy of
    an id is kept (the lake's, if the lake holds it), a later identical one is a duplicate, a different
    one a conflict naming the kept copy's file. Each date's index hashes are the written rows', sorted."""
    lake = MemoryShard()
    if stored:
        lake.commit(
            dedup_shard([_rows(sorted(stored), source="lake.jsonl", landing=dt.date(2026, 2, 28))], lake)
        )
    tables, flat = [], []
    for i, (landing_offset, rows) in enumerate(parts):
        if not rows:
            continue
        landing = dt.date(2026, 3, 1) + dt.timedelta(days=landing_offset)
        source = f"p{i}.jsonl"
        t = _rows([r[0] for r in rows], [r[1] for r in rows], landing, source)
        times = [dt.datetime(2026, 3, r[2], 12, tzinfo=dt.UTC) for r in rows]
        t = t.set_column(1, "event_time", pa.array(times, pa.timestamp("us", tz="UTC")))
        tables.append(t)
        flat += [(landing, source, n, r) for n, r in enumerate(rows, start=1)]
    if not tables:
        return
    result = dedup_shard(tables, lake)

    kept: dict[str, tuple] = {e: (10, 1, "lake.jsonl") for e in stored}  # id -> (tokens, day, source)
    new, duplicates, conflicts = [], 0, {}
    for _landing, source, _, (event_id, tokens, day) in sorted(flat, key=lambda r: r[:3]):
        if event_id not in kept:
            kept[event_id] = (tokens, day, source)
            new.append(event_id)
        elif kept[event_id][:2] == (tokens, day):
            duplicates += 1
        else:
            conflicts.setdefault(event_id, []).append(kept[event_id][2])
    assert sorted(result.new_clean["event_id"].to_pylist()) == sorted(new)
    assert result.duplicates.num_rows == duplicates
    got: dict[str, list] = {}
    for event_id, detail in zip(
        result.conflicts["event_id"].to_pylist(), result.conflicts["detail"].to_pylist(), strict=True
    ):
        got.setdefault(event_id, []).append(detail.split("kept from ")[1].split(" (")[0])
    assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in conflicts.items()}
    for day, rows in result.writes.items():
        assert result.write_hashes[day].tolist() == np.sort(stable_hash(rows["event_id"])).tolist()
