"""What the data-quality gate holds back: the partitions later steps must not read.

A UTC date whose stored results hold a failed error-level check of a dataset's suite, not covered by
a recorded acceptance (``dq accept``), is held back for that dataset: aggregation, metering of any
local day, effectiveness and migration previews read the lake as if that partition were not there,
the recompute queue keeps the date until it is accepted, and a month whose UTC days include it is not
closed. One query, here, for every step (``held_back``; ``without_held`` for a step given dates).
"""

from __future__ import annotations

import datetime as dt
import logging

from sqlalchemy import Connection, Engine, select

from pipelines import lake
from pipelines.errors import UsageBillingError
from pipelines.warehouse.engine import as_date
from schemas.quality import check_dataset
from schemas.warehouse import DqAcceptance, DqResult

log = logging.getLogger(__name__)


def failed_checks(conn: Connection) -> dict[dt.date, set[str]]:
    """Per date, the failed error-level checks no acceptance covers."""
    r, a = DqResult.__table__.c, DqAcceptance.__table__.c
    failed: dict[dt.date, set[str]] = {}
    for day, name in conn.execute(
        select(r.day, r.check_name).where(r.level == "error", r.success.is_(False))
    ):
        failed.setdefault(as_date(day), set()).add(name)
    if not failed:
        return {}
    accepted: dict[dt.date, set[str]] = {}
    for day, checks in conn.execute(select(a.day, a.failed_checks).where(a.day.in_(list(failed)))):
        accepted.setdefault(as_date(day), set()).update((checks or {}).get("checks", []))
    return {
        d: names - accepted.get(d, set()) for d, names in failed.items() if names - accepted.get(d, set())
    }


def held_back(source: Engine | Connection, dataset: str | None = lake.EVENTS) -> set[dt.date]:
    """UTC dates the gate holds back for ``dataset`` (``None``: for either dataset)."""
    if isinstance(source, Engine):
        with source.connect() as conn:
            return held_back(conn, dataset)
    return {
        day
        for day, names in failed_checks(source).items()
        if dataset is None or any(check_dataset(n) == dataset for n in names)
    }


def _days(dates: list[dt.date]) -> str:
    shown = ", ".join(str(d) for d in dates[:5])
    return shown + (f" and {len(dates) - 5} more" if len(dates) > 5 else "")


def without_held(source: Engine | Connection, dates: list[dt.date], step: str) -> list[dt.date]:
    """``dates`` but those the gate holds back for usage events (a step leaves their rows as they are;
    the queue keeps them). When it holds every one of them: one line naming them and how to proceed."""
    held = sorted(held_back(source) & set(dates))
    if not held:
        return dates
    if len(held) == len(set(dates)):
        raise UsageBillingError(
            f"{step}: the data-quality gate holds back {_days(held)}; nothing to do until it is accepted "
            f"(its page: usage-billing dq check --date {held[0]}; to proceed anyway: usage-billing dq "
            f"accept --date {held[0]} --reason '...')"
        )
    log.warning("%s: skipping %s, held back by the data-quality gate", step, _days(held))
    return [d for d in dates if d not in held]
