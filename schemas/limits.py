"""Bounds every value is held to where it enters (files, the catalog, the accounts file, the command
line), chosen so that no sum a later stage computes can leave the 64-bit range.

- A token count per event is at most ``MAX_TOKENS_LIMIT`` (2^31 - 1; ingest's default cap is lower,
  10M, and an operator may raise it only up to this). A day's sum over even a billion events stays
  below 2^63.
- A duration per event is at most ``MAX_DURATION_MS`` (7 days): a request does not run for a week,
  and the day's sum of durations stays in range.
- A pool's allowance is at most ``MAX_ALLOWANCE_TOKENS`` (10^15 per period); balances and included
  tokens are bounded by it.
- Dates are between ``EARLIEST_DATE`` and ``LATEST_DATE``: a month, week or pool period computed from
  them never leaves Python's or Arrow's calendar.
- Ids (events, accounts, users, models, plans, pools) are not empty, not only white space, and hold
  no control character (a NUL, a newline, an escape: they break SQL drivers, CSV files and terminals).
"""

from __future__ import annotations

import datetime as dt
import re

MAX_TOKENS_LIMIT = 2**31 - 1
MAX_DURATION_MS = 7 * 86_400_000
MAX_ALLOWANCE_TOKENS = 10**15
EARLIEST_DATE = dt.date(2000, 1, 1)
LATEST_DATE = dt.date(2099, 12, 31)

# C0 and C1 control characters and DEL (Unicode category Cc).
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be an id (None when it can)."""
    if not value.strip():
        return "is empty" if not value else "is only white space"
    found = CONTROL_CHARACTERS.search(value)
    if found:
        return f"holds the control character U+{ord(found.group()):04X}"
    return None


def date_problem(day: dt.date) -> str | None:
    if not EARLIEST_DATE <= day <= LATEST_DATE:
        return f"is outside the supported range {EARLIEST_DATE} .. {LATEST_DATE}"
    return None
