"""A partition the data-quality gate holds back is invisible to every later step until it is
accepted: metering of any local day reads around it, aggregation refuses it, the recompute queue keeps
it, and once accepted the next metering bills it. On SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select

from pipelines.cli import main
from pipelines.settings import Settings
from pipelines.warehouse.engine import make_engine
from pipelines.warehouse.gate import held_back
from schemas.warehouse import DqResult, MeteredDay, RecomputeQueue, UsageDaily
from tests.conftest import cli_args, small_dates

FIRST, HELD = small_dates()[:2]


def _cli(capsys, s: Settings, *argv: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    code = main([*cli_args(s), *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _metered_tokens(engine, utc_day: dt.date) -> int:  # type: ignore[no-untyped-def]
    m = MeteredDay.__table__.c
    with engine.connect() as conn:
        got = conn.execute(
            select(func.sum(m.included_tokens + m.overage_tokens)).where(m.utc_day == utc_day)
        ).scalar()
    return int(got or 0)


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_held_partition_is_not_billed_until_it_is_accepted(request, capsys, backend):
    s: Settings = request.getfixturevalue(f"{backend}_settings")
    assert _cli(capsys, s, "accounts", "load", str(Path(s.landing) / "accounts.csv"))[0] == 0
    days = (FIRST.isoformat(), HELD.isoformat())
    assert _cli(capsys, s, "events", "ingest", "--from", days[0], "--to", days[1])[0] == 0
    assert _cli(capsys, s, "usage", "aggregate", "--from", days[0], "--to", days[1])[0] == 0
    engine = make_engine(s.database_url)
    with engine.begin() as conn:  # the gate's verdict as a failed check stores it
        conn.execute(
            insert(DqResult.__table__),
            [
                {
                    "day": HELD,
                    "check_name": "event_id_unique",
                    "run_id": "test",
                    "level": "error",
                    "success": False,
                    "observed": "3 unexpected",
                    "details": {},
                    "checked_at": dt.datetime.now(dt.UTC),
                }
            ],
        )
    assert held_back(engine) == {HELD}
    u = UsageDaily.__table__.c
    with engine.connect() as conn:
        held_tokens = int(
            conn.execute(select(func.sum(u.input_tokens + u.output_tokens)).where(u.day == HELD)).scalar()
        )
    assert held_tokens > 0

    # metering local days whose events lie in the held UTC day reads around it, and says so
    until = (HELD + dt.timedelta(days=1)).isoformat()
    code, out, err = _cli(capsys, s, "quota", "meter", "--from", days[0], "--to", until)
    assert code == 0, err
    assert f"left out {HELD}: held back by the data-quality gate" in out
    assert _metered_tokens(engine, HELD) == 0 and _metered_tokens(engine, FIRST) > 0
    q = RecomputeQueue.__table__.c
    with engine.connect() as conn:
        waiting = conn.execute(select(q.day).where(q.metered_at.is_(None))).scalars().all()
    assert HELD in waiting  # kept in the queue for when it is accepted

    # aggregating only the held date is one line, nothing replaced
    code, _, err = _cli(capsys, s, "usage", "aggregate", "--date", days[1])
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "holds back" in lines[0] and "dq accept" in lines[0], err

    # once accepted, the next metering bills every token of it
    assert _cli(capsys, s, "dq", "accept", "--date", days[1], "--reason", "a known resend")[0] == 0
    assert held_back(engine) == set()
    code, out, err = _cli(capsys, s, "quota", "meter", "--from", days[0], "--to", until)
    assert code == 0, err
    assert _metered_tokens(engine, HELD) == held_tokens
    engine.dispose()


def test_a_reason_too_long_for_the_record_is_refused_not_cut(sqlite_settings, capsys):
    s = sqlite_settings
    assert _cli(capsys, s, "db", "upgrade")[0] == 0
    code, _, err = _cli(capsys, s, "dq", "accept", "--date", FIRST.isoformat(), "--reason", "x" * 1001)
    assert code == 2 and "1,001 characters; at most 1,000" in err, err
