"""User-facing errors: each carries one line that the CLI prints without a traceback."""

from __future__ import annotations


class UsageBillingError(Exception):
    """A problem the user can fix (bad input, bad config, unreachable database...)."""


class DataQualityError(UsageBillingError):
    """A run broke an invariant (conservation, reconciliation): stop, do not continue downstream."""
