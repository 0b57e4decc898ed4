"""The bad task-outcome corpus (tests/data/bad/outcomes-*): every kind of bad outcome row gets its
outcome, through the same ingest as usage events, and nothing is lost."""

from __future__ import annotations

from collections import Counter

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from pipelines.ingest import events as ingest
from tests.data.bad import outcome_corpus
from tests.data.bad.corpus import DAY, HERE


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):  # type: ignore[no-untyped-def]
    from pipelines.settings import Settings
    from pipelines.warehouse.engine import make_engine, upgrade
    from tests.conftest import CATALOG_PATH

    root = tmp_path_factory.mktemp("bad-outcomes")
    cases = outcome_corpus.write(root / "landing" / DAY)
    url = f"sqlite:///{root / 'w.db'}"
    upgrade(make_engine(url))
    settings = Settings(
        config=str(CATALOG_PATH), database_url=url, lake=str(root / "lake"), landing=str(root / "landing")
    )
    result = ingest.main([*settings.argv(), "--date", DAY])
    quarantine = ds.dataset(str(root / "lake" / "quarantine"), format="parquet").to_table()
    lake = ds.dataset(str(root / "lake" / "outcomes"), format="parquet").to_table()
    return cases, result, quarantine, lake, settings


def test_at_least_12_kinds_of_bad_outcome_rows():
    bad = [c for c in outcome_corpus.cases() if c.quarantined or c.duplicates]
    assert len(bad) >= 12
    assert len({c.kind for c in bad}) == len(bad)
    assert len({r for c in bad for r in c.quarantined}) >= 12  # distinct reasons, not one reason twelve times


def test_committed_examples_match_the_corpus_script():
    for case in outcome_corpus.cases():
        assert (HERE / case.name).read_bytes() == case.content, case.name


def test_every_outcome_file_gets_its_outcome(ingested):
    cases, _, quarantine, lake, _ = ingested
    by_file = Counter(
        zip(quarantine["source_file"].to_pylist(), quarantine["reason"].to_pylist(), strict=True)
    )
    clean = Counter(lake["_source_file"].to_pylist())
    for case in cases:
        got = {reason: n for (name, reason), n in by_file.items() if name == case.name}
        assert got == case.quarantined, f"{case.name} ({case.kind})"
        assert clean.get(case.name, 0) == case.clean, f"{case.name} ({case.kind})"


def test_conservation_per_dataset_and_the_run_record(ingested):
    cases, result, quarantine, lake, settings = ingested
    stats = result.outcome_stats[DAY]
    assert stats["rows_read"] == stats["clean"] + sum(stats["quarantined"].values()) + stats["duplicates"]
    assert stats["duplicates"] == sum(c.duplicates for c in cases) == 1
    assert stats["clean"] == lake.num_rows == sum(c.clean for c in cases)
    assert sum(stats["quarantined"].values()) == quarantine.num_rows
    assert stats["files"] == len(cases)
    assert result.stats[DAY]["rows_read"] == 0  # no usage event in the folder: none counted as one
    from sqlalchemy import select

    from pipelines.warehouse.engine import make_engine
    from schemas.warehouse import IngestRun

    with make_engine(settings.database_url).connect() as conn:
        runs = {r.dataset: r for r in conn.execute(select(IngestRun.__table__))}
    assert runs["outcomes"].rows_read == stats["rows_read"] and runs["outcomes"].clean == lake.num_rows
    assert runs["outcomes"].quarantined_by_reason == stats["quarantined"]


def test_quarantine_rows_name_the_task_and_keep_the_raw_text(ingested):
    _, _, quarantine, lake, _ = ingested
    rows = {(r["source_file"], r["reason"]): r for r in quarantine.to_pylist()}
    conflict = rows[("outcomes-conflict.jsonl", "conflicting_duplicate")]
    assert conflict["event_id"] == "conflict-good" and conflict["row_number"] == 2  # the task_id
    assert '"outcome": "merged"' in rows[("outcomes-unknown_outcome.jsonl", "unknown_outcome")]["raw"]
    wrong = rows[("outcomes-wrong_schema.parquet", "wrong_schema")]
    assert wrong["detail"] == "column rework is int64, expected bool"
    # the key is (account_id, task_id): the same task id under another account is another task
    same = lake.filter(pc.equal(lake["task_id"], "same_task_other_account-good"))
    assert sorted(same["account_id"].to_pylist()) == ["acct-bad-outcomes", "acct-other"]
    assert lake.filter(pc.equal(lake["task_id"], "nc2"))["task_class"].to_pylist() == [None]
    assert (
        lake.filter(pc.equal(lake["task_id"], "ce-good")).num_rows == 1
    )  # id -> task_id, time -> completed_at


def test_replaying_the_outcomes_changes_nothing(ingested):
    _, first, quarantine, lake, settings = ingested
    again = ingest.main([*settings.argv(), "--date", DAY])
    stats = again.outcome_stats[DAY]
    assert again.outcome_changed_dates == [] and stats["clean"] == 0
    assert stats["rows_read"] == first.outcome_stats[DAY]["rows_read"]
    root = settings.lake
    assert ds.dataset(f"{root}/outcomes", format="parquet").to_table().num_rows == lake.num_rows
    assert ds.dataset(f"{root}/quarantine", format="parquet").to_table().num_rows == quarantine.num_rows
