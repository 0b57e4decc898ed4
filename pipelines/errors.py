"""User-facing errors: each carries one line that the CLI prints without a traceback."""

from __future__ import annotations

import re
import sys


class UsageBillingError(Exception):
    """A problem the user can fix (bad input, bad config, unreachable database...)."""


class DataQualityError(UsageBillingError):
    """A run broke an invariant (conservation, reconciliation): stop, do not continue downstream."""


# Beam appends the step to the message of an error raised in a DoFn; the user does not need it.
_STEP = re.compile(r"(?: \[while running '[^']*'\])+$")
# The last line of a traceback: "pipelines.errors.UsageBillingError: cannot write ... [while running 'X']".
_LAST_LINE = re.compile(r"^((?:pipelines|billing|schemas)(?:\.\w+)+)\.(\w+): (.*)$")


def user_error_in(text: str) -> UsageBillingError | None:
    """The user error whose traceback ``text`` is (Beam's report of a failed bundle), if it is one."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    found = _LAST_LINE.match(lines[-1]) if lines else None
    if not found:
        return None
    module, name, message = found.groups()
    kind = getattr(sys.modules.get(module), name, None)  # a worker thread raised it: already imported
    if not (isinstance(kind, type) and issubclass(kind, UsageBillingError)):
        return None
    return kind(without_step(message))


def without_step(message: str) -> str:
    """``message`` without the "[while running 'Step']" that Beam appends."""
    return _STEP.sub("", message)
