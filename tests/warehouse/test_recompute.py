"""The recompute queue's bookkeeping: ``usage aggregate`` and ``quota meter`` each mark what they
covered, in either order, whoever runs them; a row both marked is gone, and ``run-day`` takes only
what is left."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select

from pipelines.ingest import events as ingest
from pipelines.quota import meter
from pipelines.usage import aggregate
from pipelines.warehouse.engine import make_engine
from pipelines.warehouse.recompute import pending
from schemas.warehouse import RecomputeQueue
from tests.conftest import run_day, small_dates


def _queue(engine) -> list[tuple[dt.date, bool, bool]]:  # type: ignore[no-untyped-def]
    q = RecomputeQueue.__table__.c
    with engine.connect() as conn:
        rows = conn.execute(select(q.day, q.aggregated_at, q.metered_at).order_by(q.day)).all()
    return [(r.day, r.aggregated_at is not None, r.metered_at is not None) for r in rows]


def test_the_separate_steps_empty_the_queue_in_either_order(sqlite_settings):
    s = sqlite_settings
    engine = make_engine(s.database_url)
    dates = small_dates()
    first, last = dates[0], dates[-1]
    result = ingest.main([*s.argv(), "--from", str(first), "--to", str(last)])
    assert [d for d, *_ in _queue(engine)] == result.changed_dates and result.changed_dates
    assert pending(engine) == (result.changed_dates, result.changed_dates)

    meter.main(
        [*s.argv(), "--from", str(first - dt.timedelta(days=1)), "--to", str(last + dt.timedelta(days=1))]
    )
    assert all(metered and not aggregated for _, aggregated, metered in _queue(engine))
    assert pending(engine) == (result.changed_dates, [])
    aggregate.main([*s.argv(), "--from", str(first), "--to", str(last)])
    assert _queue(engine) == []

    # The other order, on the same partitions ingested again (a replay changes nothing: queue empty).
    again = ingest.main([*s.argv(), "--from", str(first), "--to", str(last)])
    assert again.changed_dates == [] and _queue(engine) == []


def test_a_meter_covers_a_utc_date_only_with_the_local_days_around_it(sqlite_settings):
    s = sqlite_settings
    engine = make_engine(s.database_url)
    dates = small_dates()
    ingest.main([*s.argv(), "--from", str(dates[0]), "--to", str(dates[-1])])
    aggregate.main([*s.argv(), "--from", str(dates[0]), "--to", str(dates[-1])])
    meter.main([*s.argv(), "--from", str(dates[0]), "--to", str(dates[-1])])  # no day on either side
    left = [d for d, _, metered in _queue(engine) if not metered]
    assert dates[0] in left and dates[-1] in left  # their local days before and after are not metered
    assert all(d in (dates[0], dates[-1]) or d < dates[0] or d > dates[-1] for d in left)


def test_run_day_takes_only_what_the_queue_still_needs(sqlite_settings):
    s = sqlite_settings
    engine = make_engine(s.database_url)
    dates = small_dates()
    ingest.main([*s.argv(), "--from", str(dates[0]), "--to", str(dates[-2])])
    aggregate.main([*s.argv(), "--from", str(dates[0]), "--to", str(dates[-2])])  # aggregated, not metered
    done = run_day(s, [dates[-1]])
    assert dates[-1] in done.aggregated
    assert set(done.aggregated) == {dates[-1], *done.ingested.changed_dates}  # not the earlier dates again
    assert _queue(engine) == []
    assert done.metered  # the earlier dates were metered around, not aggregated again
