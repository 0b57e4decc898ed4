"""Issue 22: no operator mistake can wipe, invent or block billing. Points 1 (the lake a warehouse is
bound to), 2 (only closed months are invoiced), 6 (usage mistakes) and 7 (locks), on SQLite and
PostgreSQL where the point involves the warehouse."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy import func, select

from pipelines.cli import main
from pipelines.settings import Settings
from pipelines.warehouse import make_engine
from schemas.warehouse import BillableUsage, LakeBinding, UsageDaily
from tests.conftest import small_dates

DAYS = [d.isoformat() for d in small_dates()[:2]]


def _cli(capsys, s: Settings, *argv: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    code = main(
        [
            "--config",
            s.config,
            "--database-url",
            s.database_url,
            "--lake",
            s.lake,
            "--landing",
            s.landing,
            *argv,
        ]
    )
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line(code: int, err: str, *expected: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def _count(url: str, table) -> int:  # type: ignore[no-untyped-def]
    engine = make_engine(url)
    with engine.connect() as conn:
        n = conn.execute(select(func.count()).select_from(table)).scalar_one()
    engine.dispose()
    return n


@pytest.fixture(params=["sqlite", "postgres"])
def built(request, capsys):  # type: ignore[no-untyped-def]
    """A warehouse built from two generated days: accounts, ingest, aggregate, meter."""
    s: Settings = request.getfixturevalue(f"{request.param}_settings")
    assert _cli(capsys, s, "accounts", "load", str(Path(s.landing) / "accounts.csv"))[0] == 0
    for day in DAYS:
        assert _cli(capsys, s, "events", "ingest", "--date", day)[0] == 0
    assert _cli(capsys, s, "usage", "aggregate", "--from", DAYS[0], "--to", DAYS[-1])[0] == 0
    assert _cli(capsys, s, "quota", "meter", "--from", DAYS[0], "--to", DAYS[-1])[0] == 0
    return s


def _state(s: Settings) -> tuple[int, int]:
    return _count(s.database_url, UsageDaily.__table__), _count(s.database_url, BillableUsage.__table__)


def test_a_mistyped_lake_changes_nothing_in_any_step(built, capsys, tmp_path):
    before = _state(built)
    assert before[0] > 0 and before[1] > 0
    typo = Settings(built.config, built.database_url, built.lake + "-laek", built.landing)
    steps = [
        ("usage", "aggregate", "--from", DAYS[0], "--to", DAYS[-1]),
        ("quota", "meter", "--from", DAYS[0], "--to", DAYS[-1]),
        ("run-day", "--date", DAYS[-1]),
        ("events", "ingest", "--date", DAYS[-1]),
        ("dq", "check", "--date", DAYS[0]),
        ("retirement", "report", "--as-of", DAYS[-1], "--out", str(tmp_path / "r")),
    ]
    for step in steps:
        code, _, err = _cli(capsys, typo, *step)
        _one_line(code, err, "no lake at", "nothing changed", str(Path(built.lake).resolve()))
    assert _state(built) == before
    assert not Path(typo.lake).exists()  # not even created


def test_another_lake_or_an_emptied_one_is_refused(built, capsys, tmp_path):
    before = _state(built)
    other = tmp_path / "other-warehouse.db"
    elsewhere = Settings(built.config, f"sqlite:///{other}", str(tmp_path / "lake2"), built.landing)
    assert main(["--database-url", elsewhere.database_url, "db", "upgrade"]) == 0
    assert _cli(capsys, elsewhere, "events", "ingest", "--date", DAYS[0])[0] == 0  # a second lake
    foreign = Settings(built.config, built.database_url, elsewhere.lake, built.landing)
    code, _, err = _cli(capsys, foreign, "usage", "aggregate", "--date", DAYS[0])
    _one_line(code, err, "but this warehouse was built from lake", "nothing changed")
    shutil.rmtree(Path(built.lake) / "events")
    code, _, err = _cli(capsys, built, "usage", "aggregate", "--date", DAYS[0])
    _one_line(code, err, "holds no events partition")
    assert _state(built) == before


def test_a_removed_partition_is_not_aggregated_to_nothing(built, capsys):
    before = _state(built)
    shutil.rmtree(Path(built.lake) / "events" / f"date={DAYS[0]}")
    code, _, err = _cli(capsys, built, "usage", "aggregate", "--date", DAYS[0])
    _one_line(code, err, f"no events partition for {DAYS[0]}", "usage_daily holds")
    assert _state(built) == before


def test_a_moved_lake_needs_a_recorded_rebind(built, capsys, tmp_path):
    moved = tmp_path / "moved-lake"
    shutil.move(built.lake, moved)
    there = Settings(built.config, built.database_url, str(moved), built.landing)
    code, _, err = _cli(capsys, there, "usage", "aggregate", "--date", DAYS[0])
    _one_line(code, err, "lake rebind")
    code, _, err = _cli(capsys, there, "lake", "rebind", "--reason", "")
    _one_line(code, err, "needs a --reason")
    code, out, _ = _cli(capsys, there, "lake", "rebind", "--reason", "moved to the bigger disk")
    assert code == 0 and str(moved.resolve()) in out
    assert _cli(capsys, there, "usage", "aggregate", "--date", DAYS[0])[0] == 0
    engine = make_engine(built.database_url)
    with engine.connect() as conn:
        rows = conn.execute(select(LakeBinding).order_by(LakeBinding.bound_at)).all()
    engine.dispose()
    assert len(rows) == 2 and rows[0].lake_id == rows[1].lake_id
    assert rows[1].lake_path == str(moved.resolve()) and "moved to the bigger disk" in rows[1].reason
    assert "@" in rows[1].bound_by
    code, out, _ = _cli(capsys, there, "lake", "show")
    assert code == 0 and rows[1].lake_id in out
