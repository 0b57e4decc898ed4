"""Quiet library logging: what the command line and its worker processes print is ours.

No heavy imports here: a worker process runs ``quiet`` before it imports Beam (whose import logs a
warning about missing Google Cloud clients).
"""

from __future__ import annotations

import logging
import warnings

from pipelines.errors import UsageBillingError, user_error_in
from pipelines.settings import quiet_great_expectations


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], UsageBillingError | OSError):
            return False  # a runner logging a user error it re-raises: the CLI prints it as one line
        if record.name.startswith("apache_beam") and any(
            isinstance(arg, str) and user_error_in(arg) for arg in record.args or ()
        ):
            return False  # a worker thread logging the traceback of a user error (run_pipeline)
        if record.name.startswith("great_expectations") and record.levelno < logging.WARNING:
            return False  # GX sets its own loggers to INFO (temporary-folder notices)
        return "apitools not found" not in record.getMessage()


def quiet() -> None:
    quiet_great_expectations()
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_DropNoise())
