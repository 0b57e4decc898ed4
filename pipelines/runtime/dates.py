"""Dates as commands and stages take them: one date, a range, a month, runs of consecutive days."""

from __future__ import annotations

import argparse
import calendar
import datetime as dt
import re

from pipelines.errors import UsageBillingError
from schemas.limits import date_problem

MAX_RANGE_DAYS = 800


def parse_date(value: str, what: str = "date") -> dt.date:
    try:
        day = dt.date.fromisoformat(value)
    except (TypeError, ValueError):
        raise UsageBillingError(f"invalid {what} {value!r}: {_why_not_a_date(value)}") from None
    problem = date_problem(day)
    if problem:
        raise UsageBillingError(f"{what} {day} {problem}")
    return day


def _why_not_a_date(value: object) -> str:
    """Why ``value`` is not a date: the wrong shape, or a day the calendar does not have."""
    shape = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", value) if isinstance(value, str) else None
    if shape is None:
        return "expected YYYY-MM-DD"
    year, month, day = (int(g) for g in shape.groups())
    if not 1 <= month <= 12:
        return f"no such date: there is no month {month:02d}"
    days = calendar.monthrange(year, month)[1]
    return f"no such date: {calendar.month_name[month]} {year} has days 01 to {days}, not {day:02d}"


def contiguous(dates: list[dt.date]) -> list[list[dt.date]]:
    """Split dates into sorted runs of consecutive days (one pipeline run per run of days)."""
    runs: list[list[dt.date]] = []
    for d in sorted(set(dates)):
        if runs and (d - runs[-1][-1]).days == 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    return runs


def date_ranges(dates: list[dt.date]) -> str:
    """Sorted dates as consecutive ranges: ``2026-02-01..2026-04-03, 2026-05-07``."""
    return ", ".join(f"{r[0]}" if len(r) == 1 else f"{r[0]}..{r[-1]}" for r in contiguous(dates))


def date_range(date: str | None, start_date: str | None, end_date: str | None) -> list[dt.date]:
    """The dates of ``--date D`` or ``--from D1 --to D2`` (inclusive)."""
    if date and (start_date or end_date):
        raise UsageBillingError("give either --date or --from/--to, not both")
    if date:
        return [parse_date(date)]
    if not (start_date and end_date):
        raise UsageBillingError("a date is required: --date YYYY-MM-DD or --from YYYY-MM-DD --to YYYY-MM-DD")
    start, end = parse_date(start_date, "--from date"), parse_date(end_date, "--to date")
    if end < start:
        raise UsageBillingError(f"--to {end} is before --from {start}")
    days = (end - start).days + 1
    if days > MAX_RANGE_DAYS:
        raise UsageBillingError(f"a range of {days} days is more than {MAX_RANGE_DAYS}")
    return [start + dt.timedelta(days=i) for i in range(days)]


def dates_of(flags: argparse.Namespace) -> list[dt.date]:
    """The dates of parsed ``--date`` or ``--from``/``--to`` flags."""
    return date_range(flags.date, flags.from_date, flags.to_date)


def month_dates(month: str) -> list[dt.date]:
    """Every date of ``month`` (YYYY-MM)."""
    if not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", month or ""):
        raise UsageBillingError(f"--month must look like 2026-03, got {month!r}")
    first = parse_date(f"{month}-01", "--month")
    last = (first.replace(day=28) + dt.timedelta(days=4)).replace(day=1) - dt.timedelta(days=1)
    return [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]
