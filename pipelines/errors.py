"""User-facing errors: each carries one line that the CLI prints without a traceback."""

from __future__ import annotations

import builtins
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
# A builtin error's: "FileNotFoundError: [Errno 2] ..." (an OS error outside the lake's writers).
_OS_LINE = re.compile(r"^(\w+): (.*)$")


def user_error_in(text: str) -> UsageBillingError | None:
    """The user error whose traceback ``text`` is (Beam's report of a failed bundle), if it is one.

    The project's own errors come back as their class; an OS error (which the command line reports
    as "cannot use ...") as a UsageBillingError saying so.
    """
    lines = [line for line in text.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    # Beam wraps an error it cannot rebuild with the step's name (an OSError(errno, text)) in a
    # RuntimeError whose message starts with the original class: "RuntimeError: FileNotFoundError: ...".
    wrapped = _OS_LINE.match(last)
    if wrapped and wrapped.group(1) == "RuntimeError" and _OS_LINE.match(wrapped.group(2)):
        last = wrapped.group(2)
    found = _LAST_LINE.match(last)
    if not found:
        os_error = _OS_LINE.match(last)
        kind = getattr(builtins, os_error.group(1), None) if os_error else None
        if os_error and isinstance(kind, type) and issubclass(kind, OSError):
            return UsageBillingError(f"cannot use: {without_step(os_error.group(2))}")
        return None
    module, name, message = found.groups()
    kind = getattr(sys.modules.get(module), name, None)  # a worker thread raised it: already imported
    if not (isinstance(kind, type) and issubclass(kind, UsageBillingError)):
        return None
    return kind(without_step(message))


def without_step(message: str) -> str:
    """``message`` without the "[while running 'Step']" that Beam appends."""
    return _STEP.sub("", message)
