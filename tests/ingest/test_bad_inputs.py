"""The bad-input corpus (tests/data/bad): every kind of bad input gets its outcome, nothing is lost."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from pipelines.ingest import events as ingest
from tests.data.bad import corpus


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):  # type: ignore[no-untyped-def]
    from pipelines.settings import Settings
    from pipelines.warehouse.engine import make_engine, upgrade
    from tests.conftest import CATALOG_PATH

    root = tmp_path_factory.mktemp("bad")
    cases = corpus.write(root / "landing" / corpus.DAY, big=True)
    url = f"sqlite:///{root / 'w.db'}"
    upgrade(make_engine(url))
    settings = Settings(
        config=str(CATALOG_PATH), database_url=url, lake=str(root / "lake"), landing=str(root / "landing")
    )
    result = ingest.main([*settings.argv(), "--date", corpus.DAY])
    quarantine = ds.dataset(str(root / "lake" / "quarantine"), format="parquet").to_table()
    lake = ds.dataset(str(root / "lake" / "events"), format="parquet").to_table()
    return cases, result, quarantine, lake, settings


def test_the_corpus_has_at_least_25_kinds_of_bad_input():
    kinds = [c for c in corpus.cases() if c.quarantined or c.duplicates]
    assert len(kinds) >= 25
    assert len({c.kind for c in kinds}) == len(kinds)


def test_committed_examples_match_the_corpus_script():
    for case in corpus.cases():
        if not case.big:
            assert (corpus.HERE / case.name).read_bytes() == case.content, case.name


def test_every_file_gets_its_outcome(outcome):
    cases, _, quarantine, lake, _ = outcome
    by_file = Counter(
        zip(quarantine["source_file"].to_pylist(), quarantine["reason"].to_pylist(), strict=True)
    )
    clean_by_file = Counter(lake["_source_file"].to_pylist())
    for case in cases:
        recorded = case.recorded or case.name
        got = {reason: n for (name, reason), n in by_file.items() if name == recorded}
        assert got == case.quarantined, f"{case.name} ({case.kind})"
        assert clean_by_file.get(recorded, 0) == case.clean, f"{case.name} ({case.kind})"


def test_conservation_and_duplicates(outcome):
    cases, result, quarantine, lake, _ = outcome
    stats = result.stats[corpus.DAY]
    assert stats["rows_read"] == stats["clean"] + sum(stats["quarantined"].values()) + stats["duplicates"]
    assert stats["duplicates"] == sum(c.duplicates for c in cases) == 1
    assert stats["clean"] == lake.num_rows == sum(c.clean for c in cases)
    assert sum(stats["quarantined"].values()) == quarantine.num_rows
    assert stats["files"] == len(cases)


def test_quarantine_rows_say_where_and_keep_the_raw_text(outcome):
    _, _, quarantine, _, _ = outcome
    rows = {(r["source_file"], r["reason"]): r for r in quarantine.to_pylist()}
    malformed = rows[("malformed_json.jsonl", "malformed_json")]
    assert malformed["row_number"] == 2 and malformed["raw"] == '{"event_id": "m1", "account_id": '
    assert rows[("non_utf8.jsonl", "invalid_utf8")]["raw"].startswith('{"event_id": "\\xff')
    truncated = rows[("truncated.jsonl.gz", "unreadable_file")]
    assert truncated["row_number"] is None and "Truncated" in truncated["detail"]
    assert "Corrupt gzip stream" in rows[("corrupt_deflate.jsonl.gz", "unreadable_file")]["detail"]
    assert (
        rows[("wrong_schema.parquet", "wrong_schema")]["detail"]
        == "column input_tokens is string, expected int64"
    )
    conflict = rows[("conflicting_ids.jsonl", "conflicting_duplicate")]
    assert conflict["event_id"] == "conflicting_ids-good" and conflict["row_number"] == 2
    naive = rows[("naive_timestamp.jsonl", "naive_event_time")]
    assert '"event_id": "nz"' in naive["raw"]


def test_hostile_strings_are_stored_verbatim(outcome):
    _, _, _, lake, _ = outcome
    accounts = set(
        lake.filter(pc.equal(lake["_source_file"], "hostile_but_valid.jsonl"))["account_id"].to_pylist()
    )
    assert accounts == {"acct-bad-corpus", "acct';drop/**/table/**/usage_daily;--", "акаунт-😀"}


def test_replaying_the_corpus_changes_nothing(outcome):
    _, first, quarantine, lake, settings = outcome
    again = ingest.main([*settings.argv(), "--date", corpus.DAY])
    stats = again.stats[corpus.DAY]
    assert again.changed_dates == [] and stats["clean"] == 0
    assert stats["rows_read"] == first.stats[corpus.DAY]["rows_read"]
    root = Path(settings.lake)
    assert ds.dataset(str(root / "events"), format="parquet").to_table().num_rows == lake.num_rows
    assert ds.dataset(str(root / "quarantine"), format="parquet").to_table().num_rows == quarantine.num_rows


def test_a_resend_in_a_later_landing_date_is_a_duplicate(outcome):
    _, _, _, _, settings = outcome
    later = dt.date.fromisoformat(corpus.DAY) + dt.timedelta(days=1)
    folder = Path(settings.landing) / later.isoformat()
    folder.mkdir()
    resent = corpus.line(corpus.event("malformed_json-good"))
    changed = corpus.line(corpus.event("tokens_as_text-good", input_tokens=5, cached_input_tokens=0))
    (folder / "late.jsonl").write_bytes(resent + b"\n" + changed + b"\n")
    stats = ingest.main([*replace(settings).argv(), "--date", later.isoformat()]).stats[later.isoformat()]
    assert (
        stats["duplicates"] == 1
        and stats["quarantined"] == {"conflicting_duplicate": 1}
        and stats["clean"] == 0
    )


def test_a_landing_entry_not_read_is_counted_and_named(tmp_path, capsys):
    """A producer's temporary ``.file`` is not read (it is still being written), but never silently:
    the run's output and ``ingest_runs.not_read`` name it."""
    from sqlalchemy import select

    from pipelines.cli import main
    from pipelines.warehouse.engine import make_engine
    from schemas.warehouse import IngestRun
    from tests.conftest import CATALOG_PATH

    folder = tmp_path / "landing" / corpus.DAY
    folder.mkdir(parents=True)
    (folder / "gateway.jsonl").write_bytes(corpus.line(corpus.event("landed-1")) + b"\n")
    (folder / ".gateway-2.jsonl.tmp").write_bytes(corpus.line(corpus.event("in-flight")) + b"\n")
    url = f"sqlite:///{tmp_path / 'w.db'}"
    argv = ["--config", str(CATALOG_PATH), "--database-url", url, "--lake", str(tmp_path / "lake")]
    argv += ["--landing", str(tmp_path / "landing")]
    assert main([*argv, "db", "upgrade"]) == 0
    assert main([*argv, "events", "ingest", "--date", corpus.DAY]) == 0
    out = capsys.readouterr().out
    assert f"landing {corpus.DAY}: 1 entries not read (.gateway-2.jsonl.tmp)" in out, out
    engine = make_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(IngestRun.dataset, IngestRun.rows_read, IngestRun.not_read)).all()
    engine.dispose()
    assert [(d, n, list(nr or {})) for d, n, nr in rows] == [("events", 1, [".gateway-2.jsonl.tmp"])]
