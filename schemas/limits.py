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
- Ids that name a customer (``account_id``) are canonical: equal to their own NFKC form in lower
  case, with no white space and no invisible character. So a look-alike (``" acct-3"``,
  ``"ACCT-3"``, a zero-width space, a fullwidth digit, a decomposed accent) is never a second
  customer: ingest quarantines it (``non_canonical_account_id``), the accounts file and the command
  line refuse it. Every entry point uses ``account_id_problem`` (ingest its vectorized twin).
- Catalog ids (models, plans, pools, tiers) match ``CATALOG_ID``: lower-case ASCII letters, digits,
  ``.``, ``_`` and ``-``, starting with a letter or digit, at most 64 characters. They become file and
  folder names (a preview per model), so no id can leave an output folder.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata

MAX_TOKENS_LIMIT = 2**31 - 1
DEFAULT_MAX_TOKENS_PER_EVENT = 10_000_000  # ingest's cap per token count unless --max_tokens_per_event
MAX_ID_LENGTH = 200  # the warehouse stores ids as VARCHAR(200)
DEFAULT_LATENESS_DAYS = 35  # ingest keeps events this many days older than their landing date
MAX_LATENESS_DAYS = 366  # --lateness_days at most a year (at least 1)
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # a run id names a staging folder
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


# Characters that make two ids look alike: separators (spaces of every kind) and invisible ones
# (format characters such as U+200B, private use, surrogates). Control characters are told apart.
INVISIBLE_CATEGORIES = frozenset({"Zs", "Zl", "Zp", "Cf", "Co", "Cs"})
CATALOG_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def canonical(value: str) -> str:
    """The canonical form of an id: NFKC, then lower case."""
    return unicodedata.normalize("NFKC", value).lower()


def looks_alike(value: str) -> bool:
    """An id another id looks like: not in canonical form, or holding an invisible character."""
    return canonical(value) != value or any(unicodedata.category(c) in INVISIBLE_CATEGORIES for c in value)


def account_id_problem(value: str) -> str | None:
    """Why ``value`` cannot be an account id (None when it can): ``id_problem``, too long, or not in
    canonical form (a look-alike of another id)."""
    problem = id_problem(value)
    if problem:
        return problem
    if len(value) > MAX_ID_LENGTH:
        return f"is {len(value):,} characters; at most {MAX_ID_LENGTH} are allowed"
    hidden = next((c for c in value if unicodedata.category(c) in INVISIBLE_CATEGORIES), None)
    if hidden is not None:
        return (
            f"holds U+{ord(hidden):04X} ({unicodedata.name(hidden, 'an invisible character').lower()}); "
            "account ids have no white space or invisible characters"
        )
    if canonical(value) != value:
        return (
            f"is not in canonical form (it would be {canonical(value)!r}); account ids are lower case "
            "NFKC text, so that a look-alike is never a second customer"
        )
    return None


def catalog_id_problem(value: str) -> str | None:
    """Why ``value`` cannot be a catalog id (None when it can)."""
    if CATALOG_ID.fullmatch(value):
        return None
    return (
        "is not a catalog id: lower-case letters, digits, '.', '_' and '-', starting with a letter or "
        "digit, at most 64 characters"
    )


def date_problem(day: dt.date) -> str | None:
    if not EARLIEST_DATE <= day <= LATEST_DATE:
        return f"is outside the supported range {EARLIEST_DATE} .. {LATEST_DATE}"
    return None
