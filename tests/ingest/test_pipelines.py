"""Ingest and aggregate end to end on generated landing files: conservation, idempotency, late data."""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from sqlalchemy import func, select

from pipelines.ingest import events as ingest
from pipelines.ingest import units
from pipelines.lake import ParquetAppender, write_parquet
from pipelines.usage import aggregate
from pipelines.warehouse.engine import make_engine
from schemas.events import INGEST_SCHEMA, LAKE_SCHEMA
from schemas.warehouse import IngestRun, UsageDaily
from tests.conftest import SMALL, date_args, run_day, small_dates, table_rows


def _lake_digest(lake: str) -> dict[str, str]:
    return {
        str(p.relative_to(lake)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(lake, "events").rglob("*.parquet"))
    }


def _usage_rows(url: str) -> list[tuple]:
    return table_rows(url, UsageDaily)


def _lake_tokens(lake: str) -> int:
    t = ds.dataset(str(Path(lake, "events")), format="parquet").to_table(
        columns=["input_tokens", "output_tokens"]
    )
    return pc.sum(t["input_tokens"]).as_py() + pc.sum(t["output_tokens"]).as_py()


def _ingest_all(settings) -> ingest.IngestResult:  # type: ignore[no-untyped-def]
    return ingest.main([*settings.argv(), *date_args(small_dates())])


def test_conservation_and_every_generated_event_exactly_once(sqlite_settings, catalog):
    from pipelines.jobs.generate import generate

    result = _ingest_all(sqlite_settings)
    gen = generate(catalog, SMALL)
    for day, s in result.stats.items():
        assert s["rows_read"] == s["clean"] + sum(s["quarantined"].values()) + s["duplicates"], day
    assert result.total("rows_read") == gen.events.num_rows
    assert result.total("duplicates") == gen.duplicates
    assert result.total("quarantined") == 0
    lake = ds.dataset(str(Path(sqlite_settings.lake, "events")), format="parquet").to_table()
    assert lake.num_rows == len(pc.unique(gen.events["event_id"]))
    assert len(pc.unique(lake["event_id"])) == lake.num_rows
    engine = make_engine(sqlite_settings.database_url)
    with engine.connect() as conn:
        runs = conn.execute(select(IngestRun.__table__)).all()
    assert sorted(r.dataset for r in runs) == ["events"] * SMALL.days + ["outcomes"] * SMALL.days
    assert sum(r.late_rows.get(d, 0) for r in runs for d in r.late_rows) > 0
    # Task outcomes go the same way: every row read is kept, a duplicate or quarantined; one per key.
    for s in result.outcome_stats.values():
        assert s["rows_read"] == s["clean"] + sum(s["quarantined"].values()) + s["duplicates"]
    assert result.total("rows_read", outcomes=True) == gen.outcomes.num_rows
    outcomes = ds.dataset(str(Path(sqlite_settings.lake, "outcomes")), format="parquet").to_table()
    keys = gen.outcomes.group_by(["account_id", "task_id"]).aggregate([])
    assert outcomes.num_rows == keys.num_rows == result.total("clean", outcomes=True)
    assert outcomes.group_by(["account_id", "task_id"]).aggregate([]).num_rows == outcomes.num_rows
    assert result.total("duplicates", outcomes=True) == gen.outcomes.num_rows - keys.num_rows > 0


@pytest.mark.slow
def test_rerunning_dates_changes_no_partition_and_no_row(sqlite_settings):
    run_day(sqlite_settings, small_dates())
    digest, rows = _lake_digest(sqlite_settings.lake), _usage_rows(sqlite_settings.database_url)
    again = run_day(sqlite_settings, small_dates())
    assert again.ingested.changed_dates == []
    assert again.ingested.total("clean") == 0
    assert again.ingested.total("duplicates") == again.ingested.total("rows_read")
    assert _lake_digest(sqlite_settings.lake) == digest
    assert _usage_rows(sqlite_settings.database_url) == rows
    # Re-aggregating only one date replaces exactly that date's rows.
    aggregate.main([*sqlite_settings.argv(), "--date", small_dates()[1].isoformat()])
    assert _usage_rows(sqlite_settings.database_url) == rows


@pytest.mark.slow
def test_day_by_day_equals_one_range_run(sqlite_settings, tmp_path):
    ranged = run_day(sqlite_settings, small_dates())
    ranged_rows = _usage_rows(sqlite_settings.database_url)
    from dataclasses import replace

    from pipelines.warehouse.engine import upgrade

    daily = replace(
        sqlite_settings, lake=str(tmp_path / "lake2"), database_url=f"sqlite:///{tmp_path / 'd.db'}"
    )
    upgrade(make_engine(daily.database_url))
    changed = set()
    for day in small_dates():
        changed |= set(run_day(daily, [day]).ingested.changed_dates)
    assert _usage_rows(daily.database_url) == ranged_rows
    assert sorted(changed) == sorted(ranged.ingested.changed_dates)


def test_late_events_rewrite_their_past_partition_and_run_day_reaggregates_it(sqlite_settings):
    first, last = small_dates()[0], small_dates()[-1]
    run_day(sqlite_settings, small_dates()[:-1])
    result = run_day(sqlite_settings, [last])
    late_dates = [d for d in result.ingested.changed_dates if d < last]
    assert late_dates, "the generator sends late events to the last landing date"
    assert set(result.aggregated) == {last, *late_dates}
    assert result.ingested.stats[last.isoformat()]["late"]
    assert first <= min(late_dates)
    # usage_daily equals a fresh aggregation of the whole lake.
    rows = _usage_rows(sqlite_settings.database_url)
    aggregate.main([*sqlite_settings.argv(), *date_args(small_dates())])
    assert _usage_rows(sqlite_settings.database_url) == rows


def test_tokens_in_the_lake_equal_tokens_in_usage_daily(sqlite_settings):
    run_day(sqlite_settings, small_dates())
    engine = make_engine(sqlite_settings.database_url)
    t = UsageDaily.__table__
    with engine.connect() as conn:
        tokens = conn.execute(select(func.sum(t.c.input_tokens + t.c.output_tokens))).scalar_one()
    assert tokens == _lake_tokens(sqlite_settings.lake)


def test_bad_rows_and_bad_files_are_quarantined_and_good_rows_still_arrive(sqlite_settings, tmp_path):
    landing = tmp_path / "landing"
    day = small_dates()[0]
    shutil.copytree(Path(sqlite_settings.landing) / day.isoformat(), landing / day.isoformat())
    folder = landing / day.isoformat()
    good = {
        "event_id": "extra-1",
        "event_time": f"{day}T08:00:00Z",
        "account_id": "acct-00001",
        "model": "gpt-5.6-sol",
        "speed_tier": "standard",
        "input_tokens": 5,
        "cached_input_tokens": 0,
        "output_tokens": 5,
        "status": "ok",
    }
    (folder / "mixed.jsonl").write_text(
        "\n".join(
            [
                json.dumps(good),
                "{oops",
                json.dumps({**good, "event_id": "extra-2", "speed_tier": "ludicrous"}),
            ]
        )
    )
    (folder / "truncated.jsonl.gz").write_bytes(gzip.compress(b'{"event_id": "t"}\n' * 50)[:30])
    (folder / "corrupt.parquet").write_bytes(b"PAR1 this is not parquet")
    (folder / "notes.txt").write_text("hello")
    from dataclasses import replace

    settings = replace(sqlite_settings, landing=str(landing))
    result = ingest.main([*settings.argv(), "--date", day.isoformat()])
    s = result.stats[day.isoformat()]
    assert s["quarantined"] == {
        "malformed_json": 1,
        "unknown_speed_tier": 1,
        "unreadable_file": 2,
        "unsupported_format": 1,
    }
    assert s["rows_read"] == s["clean"] + 5 + s["duplicates"]
    lake = ds.dataset(str(Path(settings.lake, "events")), format="parquet").to_table(columns=["event_id"])
    assert "extra-1" in set(lake["event_id"].to_pylist())
    quarantine = ds.dataset(str(Path(settings.lake, "quarantine")), format="parquet").to_table()
    assert quarantine.num_rows == 5
    assert set(quarantine["source_file"].to_pylist()) == {
        "mixed.jsonl",
        "truncated.jsonl.gz",
        "corrupt.parquet",
        "notes.txt",
    }


@pytest.mark.slow
@pytest.mark.postgres
def test_postgres_warehouse_gets_the_same_rows_as_sqlite(sqlite_settings, postgres_settings):
    from schemas.warehouse import ModelDaily, UsageDailyError

    run_day(sqlite_settings, small_dates())
    run_day(postgres_settings, small_dates())
    for model in (UsageDaily, UsageDailyError, ModelDaily):
        assert table_rows(postgres_settings.database_url, model) == table_rows(
            sqlite_settings.database_url, model
        )
    again = run_day(postgres_settings, small_dates())
    assert again.ingested.total("clean") == 0
    assert len(_usage_rows(postgres_settings.database_url)) == len(_usage_rows(sqlite_settings.database_url))


@pytest.mark.postgres
def test_copy_keeps_hostile_strings_and_nulls(postgres_settings):
    from pipelines.warehouse.engine import insert_arrow
    from schemas.warehouse import UsageDailyError

    rows = pa.table(
        {
            "day": [small_dates()[0]] * 4,
            "account_id": ["", "acct'; DROP TABLE x; --", 'q"uote', "ü😀"],
            "model": ["m"] * 4,
            "speed_tier": ["standard"] * 4,
            "error_code": ["a", "b", "c", "d"],
            "errors": [1, 2, 3, 4],
        }
    )
    engine = make_engine(postgres_settings.database_url)
    with engine.begin() as conn:
        insert_arrow(conn, UsageDailyError.__table__, rows)
    got = sorted(r[1] for r in table_rows(postgres_settings.database_url, UsageDailyError))
    assert got == sorted(rows["account_id"].to_pylist())


def test_a_missing_landing_folder_is_a_clear_error(sqlite_settings):
    from pipelines.errors import UsageBillingError

    with pytest.raises(UsageBillingError, match="no landing folder for 2030-01-01"):
        ingest.main([*sqlite_settings.argv(), "--date", "2030-01-01"])


def test_broken_conservation_fails_loudly_and_commits_nothing(sqlite_settings, monkeypatch):
    from pipelines.errors import DataQualityError

    real = ingest.collect

    def lossy(run_id, stage, dates):  # type: ignore[no-untyped-def]
        result = real(run_id, stage, dates)
        result.stats[dates[0].isoformat()]["clean"] -= 1  # one row unaccounted for
        return result

    monkeypatch.setattr(ingest, "collect", lossy)
    day = small_dates()[0]
    with pytest.raises(
        DataQualityError, match=f"conservation broken for landing {day}: read .* nothing was committed"
    ):
        ingest.main([*sqlite_settings.argv(), "--date", day.isoformat()])
    assert not (Path(sqlite_settings.lake) / "events").exists()
    assert not list((Path(sqlite_settings.lake) / "_staging").glob("*"))
    engine = make_engine(sqlite_settings.database_url)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(IngestRun.__table__)).scalar_one() == 0


def _lake_rows(lake: str) -> dict[str, list]:
    """Each partition's rows, order aside (sub-shards change the order of rows in a file, not the rows)."""
    return {
        str(p.parent.name): sorted(
            ds.dataset(str(p.parent), format="parquet").to_table().to_pylist(), key=repr
        )
        for p in sorted(Path(lake, "events").rglob("shard-0000.parquet"))
    }


def _seen(seen: list[int], subs: int, units) -> int:  # type: ignore[no-untyped-def]
    """Record the sub-shards of a usage-event run (an outcome run of a few rows has one)."""
    if any(u.dataset == "events" for u in units):
        seen.append(subs)
    return subs


@pytest.mark.slow
def test_sub_shards_bound_the_piece_and_change_no_row_count_or_partition(
    sqlite_settings, tmp_path, monkeypatch
):
    """Day by day (late events merge into past partitions, a replay dedups against the lake), with each
    lake shard split into several pieces, equals the same run in one piece per shard."""
    whole = sqlite_settings
    pieces = type(whole)(
        whole.config, f"sqlite:///{tmp_path / 'p.db'}", str(tmp_path / "p-lake"), whole.landing
    )
    from pipelines.warehouse.engine import upgrade

    upgrade(make_engine(pieces.database_url))
    seen_subs = []
    original = ingest.sub_shards
    monkeypatch.setattr(units, "SUB_SHARD_ROWS", 40)
    for day in small_dates():
        for settings, small in ((whole, False), (pieces, True)):
            if not small:
                monkeypatch.setattr(ingest, "sub_shards", lambda units, shards: 1)
            else:
                monkeypatch.setattr(
                    ingest,
                    "sub_shards",
                    lambda units, shards: _seen(seen_subs, original(units, shards), units),
                )
            a = ingest.main([*settings.argv(), "--date", day.isoformat()])
            if day == small_dates()[-1]:  # a replay of the last day, its late events too: all duplicates
                b = ingest.main([*settings.argv(), "--date", day.isoformat()])
                assert b.total("clean") == 0
                assert b.total("duplicates") == a.total("rows_read") - a.total("quarantined")
    assert min(seen_subs) >= 3  # ~1,000-1,300 rows a day over 8 shards of 40 rows
    assert _lake_rows(pieces.lake) == _lake_rows(whole.lake)
    full = lambda s: ds.dataset(str(Path(s.lake, "events")), format="parquet").to_table()  # noqa: E731
    assert sorted(full(pieces)["event_id"].to_pylist()) == sorted(full(whole)["event_id"].to_pylist())
    counts = lambda url: sorted(  # noqa: E731
        (r.landing_date, r.rows_read, r.clean, r.duplicates, r.quarantined)
        for r in make_engine(url).connect().execute(select(IngestRun.__table__))
    )
    assert counts(pieces.database_url) == counts(whole.database_url)


def test_lake_files_split_the_bytes_of_numbers_and_times_and_read_back_unchanged(sqlite_settings):
    """Counts, dates and timestamps are byte-stream-split pages (smaller and faster to write and read
    than plain ones), the text of few values dictionary pages, ids plain; every row reads back as
    written, schema and field metadata included."""
    _ingest_all(sqlite_settings)
    files = sorted(Path(sqlite_settings.lake, "events").rglob("*.parquet"))
    assert files
    for path in files:
        meta = pq.ParquetFile(path).metadata
        names = meta.schema.names
        for g in range(meta.num_row_groups):
            enc = {names[i]: set(meta.row_group(g).column(i).encodings) for i in range(len(names))}
            for name in ("event_time", "input_tokens", "cached_input_tokens", "output_tokens", "duration_ms"):
                assert "BYTE_STREAM_SPLIT" in enc[name], (path, name, enc[name])
            assert "RLE_DICTIONARY" in enc["model"] and "RLE_DICTIONARY" in enc["_landing_date"], path
            assert enc["event_id"] & {"BYTE_STREAM_SPLIT", "RLE_DICTIONARY"} == set(), path
    table = pq.read_table(files[0])
    assert table.schema.equals(LAKE_SCHEMA, check_metadata=True)
    import duckdb  # the dev extra's DuckDB (>= 2.0) reads these pages

    got = duckdb.sql(
        f"SELECT sum(input_tokens), sum(duration_ms), max(event_time) FROM '{files[0]}'"
    ).fetchall()[0]
    assert got[0] == pc.sum(table["input_tokens"]).as_py() and got[1] == pc.sum(table["duration_ms"]).as_py()
    assert got[2] == pc.max(table["event_time"]).as_py()
    copy = Path(sqlite_settings.lake) / "copy.parquet"
    write_parquet(str(copy), table)
    assert pq.read_table(copy).equals(table) and pq.read_table(copy).schema.equals(
        LAKE_SCHEMA, check_metadata=True
    )


def test_an_appender_stores_dictionary_columns_as_text_from_their_own_dictionaries(tmp_path):
    """Tables whose text of few values are dictionary arrays (chunks with different dictionaries, as
    the pieces of a run have) are written as dictionary pages and read back as the lake's text columns,
    footer schema and field metadata included."""
    n = 30_000
    cycle = {
        "model": ["gpt-5.1", "gpt-5.2-mini", "gpt-5.6-sol"],
        "speed_tier": ["standard", "priority"],
        "status": ["ok", "error"],
        "error_code": [None, None, "context_length_exceeded"],
        "_source_file": [f"f{k}.parquet" for k in range(7)],
    }
    columns = {}
    for f in LAKE_SCHEMA:
        if f.name in cycle:
            columns[f.name] = pa.array([cycle[f.name][i % len(cycle[f.name])] for i in range(n)], f.type)
        elif pa.types.is_string(f.type):
            columns[f.name] = pa.array([f"{f.name}-{i}" for i in range(n)])
        elif f.name == "event_time":
            columns[f.name] = pa.array([dt.datetime(2026, 3, 1, tzinfo=dt.UTC)] * n, f.type)
        elif f.name == "_landing_date":
            columns[f.name] = pa.array([dt.date(2026, 3, 1)] * n, f.type)
        else:
            columns[f.name] = pa.array(range(n), f.type)
    plain = pa.table(columns, schema=LAKE_SCHEMA)
    # Each half encoded on its own, the second backwards: its dictionaries list the values in
    # another order.
    second = plain.slice(n // 2)
    second = second.take(pa.array(range(second.num_rows - 1, -1, -1)))
    encoded = pa.concat_tables([plain.slice(0, n // 2).cast(INGEST_SCHEMA), second.cast(INGEST_SCHEMA)])
    assert not encoded["model"].chunk(0).dictionary.equals(encoded["model"].chunk(1).dictionary)
    path = tmp_path / "f.parquet"
    writer = ParquetAppender(str(path), INGEST_SCHEMA, stored=LAKE_SCHEMA)
    writer.write(encoded)
    writer.write(encoded.slice(0, 1000))
    writer.close()
    back = pq.read_table(path)
    assert back.schema.equals(LAKE_SCHEMA, check_metadata=True)
    assert back.equals(pa.concat_tables([encoded, encoded.slice(0, 1000)]).cast(LAKE_SCHEMA))
    meta = pq.ParquetFile(path).metadata
    model = meta.schema.names.index("model")
    # Dictionary indices take a few bits a row; the text itself (plain pages, when the writer falls
    # back from a dictionary) 8 bytes or more.
    assert meta.row_group(0).column(model).total_uncompressed_size < n, "dictionary pages fell back"


def test_lake_files_keep_the_time_statistics_scans_prune_by_and_no_others(sqlite_settings):
    """Row groups carry min/max of their dates and times (a scan of a window of days skips the rest
    unread) and none of their text or counts (no reader uses them; they cost a sixth of the write)."""
    _ingest_all(sqlite_settings)
    files = sorted(Path(sqlite_settings.lake, "events").rglob("*.parquet"))
    last = max(p.parent.name.removeprefix("date=") for p in files)
    since = pc.field("event_time") >= pa.scalar(
        dt.datetime.combine(dt.date.fromisoformat(last), dt.time(), dt.UTC)
    )
    for path in files:
        fragment = next(ds.dataset(str(path), format="parquet").get_fragments())
        meta = fragment.metadata
        names = meta.schema.names
        for g in range(meta.num_row_groups):
            stats = {names[i]: meta.row_group(g).column(i).is_stats_set for i in range(len(names))}
            assert stats["event_time"] and stats["_landing_date"], path
            assert not stats["event_id"] and not stats["model"] and not stats["input_tokens"], path
        kept = fragment.split_by_row_group(filter=since)
        if path.parent.name == f"date={last}":
            assert kept, path
        else:
            assert kept == [], f"{path}: a day before {last} was not pruned by its statistics"
