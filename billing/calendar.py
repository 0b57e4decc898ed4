"""The calendar of billing, in one place: pool periods of local dates (day, ISO week from Monday,
calendar month), for numpy arrays of dates and for single dates.

Pool periods and invoice months are evaluated in the account's timezone, so the dates given here are
already local; a week is ISO (it starts on Monday).
"""

from __future__ import annotations

import datetime as dt

import numpy as np

EPOCH = np.datetime64("1970-01-01", "D")  # a Thursday


def weekday(days: np.ndarray) -> np.ndarray:
    """ISO day of the week of each date, 0 = Monday .. 6 = Sunday."""
    return ((days.astype("datetime64[D]") - EPOCH).astype(np.int64) + 3) % 7


def period_start(day: np.ndarray, period: str) -> np.ndarray:
    """Start of the pool period holding each local date: the day, its ISO week's Monday, its month."""
    if period == "day":
        return day
    if period == "week":
        return day - weekday(day)
    if period == "month":
        return day.astype("datetime64[M]").astype("datetime64[D]")
    raise ValueError(f"unknown period {period!r}")


def period_end(start: np.ndarray, period: str) -> np.ndarray:
    """Last local date of each period (inclusive)."""
    if period == "day":
        return start
    if period == "week":
        return start + 6
    return (start.astype("datetime64[M]") + 1).astype("datetime64[D]") - 1


def day_period(day: dt.date, period: str) -> tuple[dt.date, dt.date]:
    """(first, last) local date of the pool period holding ``day``."""
    start = period_start(np.array([day], dtype="datetime64[D]"), period)
    return start[0].item(), period_end(start, period)[0].item()


def monday(day: dt.date) -> dt.date:
    """The Monday of the ISO week holding ``day``."""
    return day - dt.timedelta(days=day.weekday())
