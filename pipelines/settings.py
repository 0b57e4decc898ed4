"""Where things live: the one place that picks the environment (local files + SQLite, or a bucket +
PostgreSQL). Domain logic never branches on it; it receives paths and an engine.

The only module that reads the environment (the test-only fault hook, ``runtime/faults.py``, reads its
own two variables).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from pipelines.errors import UsageBillingError

if TYPE_CHECKING:  # the DAG files import this module at parse time: no pydantic there
    from schemas.catalog import Catalog

DEFAULT_CONFIG = "config/catalog.toml"
DEFAULT_DATABASE_URL = "sqlite:///data/warehouse.db"
DEFAULT_LAKE = "data/lake"
DEFAULT_LANDING = "data/landing"


@dataclass(frozen=True)
class NotifySettings:
    """Where ``notify deliver`` sends notifications and how it retries (``USAGE_BILLING_WEBHOOK_*``,
    ``USAGE_BILLING_NOTIFY_*``). No webhook URL: JSON lines under ``<lake>/notifications/``."""

    webhook_url: str | None = None
    webhook_secret: str | None = field(default=None, repr=False)  # never printed
    retry_base_s: float = 30.0  # the first retry's wait; each later one doubles it
    max_attempts: int = 8  # then the notification is dead (``notify retry --dead`` resends)
    timeout_s: float = 10.0  # no answer within this: a failed attempt
    concurrency: int = 4  # requests in flight at once

    @classmethod
    def from_env(cls) -> NotifySettings:
        url = os.environ.get("USAGE_BILLING_WEBHOOK_URL") or None
        secret = os.environ.get("USAGE_BILLING_WEBHOOK_SECRET") or None
        if url is not None and not url.startswith(("http://", "https://")):
            raise UsageBillingError(f"USAGE_BILLING_WEBHOOK_URL must be an http(s) URL, got {url!r}")
        if url is not None and secret is None:
            raise UsageBillingError(
                "USAGE_BILLING_WEBHOOK_URL is set but USAGE_BILLING_WEBHOOK_SECRET is not: webhooks are "
                "always signed (a Standard Webhooks secret, whsec_<base64>)"
            )
        return cls(
            webhook_url=url,
            webhook_secret=secret,
            retry_base_s=_at_least_zero(
                "USAGE_BILLING_NOTIFY_RETRY_BASE_S", "30", float, "a number of seconds"
            ),
            max_attempts=max(
                1, _at_least_zero("USAGE_BILLING_NOTIFY_MAX_ATTEMPTS", "8", int, "a whole number")
            ),
            timeout_s=_at_least_zero("USAGE_BILLING_NOTIFY_TIMEOUT_S", "10", float, "a number of seconds")
            or 10.0,
            concurrency=max(
                1, _at_least_zero("USAGE_BILLING_NOTIFY_CONCURRENCY", "4", int, "a whole number")
            ),
        )


@dataclass(frozen=True)
class Settings:
    config: str = DEFAULT_CONFIG
    database_url: str = DEFAULT_DATABASE_URL
    lake: str = DEFAULT_LAKE
    landing: str = DEFAULT_LANDING
    beam_args: tuple[str, ...] = ()  # Beam flags every pipeline of a DAG task runs with
    exports_root: str | None = None  # where the monthly DAG writes invoice exports (else beside the lake)
    reports_root: str | None = None  # where the weekly DAG writes retirement reports (else beside the lake)
    lock_wait: float = 0.0  # seconds a step waits for a lock another run holds
    dag_retries: int = 2  # how often an Airflow task is retried
    notify: NotifySettings = field(default_factory=lambda: NotifySettings())  # where notifications go

    @classmethod
    def from_env(cls, **overrides: str | None) -> Settings:
        """Explicit values win, then USAGE_BILLING_* environment variables, then the defaults."""
        values = {
            "config": os.environ.get("USAGE_BILLING_CONFIG", DEFAULT_CONFIG),
            "database_url": os.environ.get("USAGE_BILLING_DATABASE_URL", DEFAULT_DATABASE_URL),
            "lake": os.environ.get("USAGE_BILLING_LAKE", DEFAULT_LAKE),
            "landing": os.environ.get("USAGE_BILLING_LANDING", DEFAULT_LANDING),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(
            **values,
            beam_args=_shell_words("USAGE_BILLING_BEAM_ARGS"),
            exports_root=os.environ.get("USAGE_BILLING_EXPORTS"),
            reports_root=os.environ.get("USAGE_BILLING_REPORTS"),
            lock_wait=_at_least_zero("USAGE_BILLING_LOCK_WAIT", "0", float, "a number of seconds"),
            dag_retries=_at_least_zero("USAGE_BILLING_DAG_RETRIES", "2", int, "a whole number"),
            notify=NotifySettings.from_env(),
        )

    @property
    def exports(self) -> str:
        """Where the monthly DAG writes invoice exports: ``USAGE_BILLING_EXPORTS``, else beside the lake."""
        return self.exports_root or str(Path(self.lake).parent / "exports")

    @property
    def reports(self) -> str:
        """Where the weekly DAG writes retirement reports: ``USAGE_BILLING_REPORTS``, else beside the lake."""
        return self.reports_root or str(Path(self.lake).parent / "reports")

    @cached_property
    def catalog(self) -> Catalog:
        from schemas.catalog import load_catalog  # lazy: pydantic (the DAG files import this module)

        return load_catalog(self.config)

    def argv(self) -> list[str]:
        """The same settings as pipeline flags (for ``run(argv)`` entry points)."""
        return [
            "--config",
            self.config,
            "--database_url",
            self.database_url,
            "--lake",
            self.lake,
            "--landing",
            self.landing,
        ]


def _shell_words(name: str) -> tuple[str, ...]:
    """Beam flags for every pipeline a DAG task runs, and the lake's file-system flags for its other
    lake access: ``USAGE_BILLING_BEAM_ARGS`` as shell words (``--runner=... --dask_client_address=...``),
    what the command line takes after ``--``."""
    try:
        return tuple(shlex.split(os.environ.get(name, "")))
    except ValueError as exc:
        raise UsageBillingError(f"{name} is not shell words: {exc}") from None


def _at_least_zero(name: str, default: str, kind: type[int] | type[float], what: str):
    """The number in environment variable ``name`` (negative counts as 0); a non-number is one line."""
    raw = os.environ.get(name, default)
    try:
        return max(kind(0), kind(raw))
    except ValueError:
        raise UsageBillingError(f"{name} must be {what}, got {raw!r}") from None


def quiet_great_expectations() -> None:
    """Great Expectations sends usage analytics unless told not to; ours never does (unless set)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


# botocore >= 1.36 and the AWS C++ SDK add a CRC to every upload and validate one on every download
# whose answer carries one. S3-compatible servers differ there (rclone's answers a ranged GET with the
# whole object's checksum: every ranged read fails), and a CRC of every spill object costs the workers
# CPU. Only where the S3 API requires one, as before; an operator's own setting of either variable wins.
S3_CHECKSUMS = {
    "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
    "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
}


def s3_checksums_when_required() -> None:
    """Set ``S3_CHECKSUMS`` where the environment does not say; before an S3 client is made."""
    for name, value in S3_CHECKSUMS.items():
        os.environ.setdefault(name, value)


# On a Dask worker some Arrow tables arrive in buffers not aligned to their type (seen at 10M events;
# which hand-over leaves them so was not pinned down); Acero then warns on stderr once per batch. It
# copies those buffers instead (an operator's own setting wins); Arrow reads it once, at its first plan.
ARROW_ALIGNMENT = {"ACERO_ALIGNMENT_HANDLING": "reallocate"}


def arrow_realigns() -> None:
    """Set ``ARROW_ALIGNMENT`` where the environment does not say; before the process's first Acero plan."""
    for name, value in ARROW_ALIGNMENT.items():
        os.environ.setdefault(name, value)


def arrow_pool_chosen() -> bool:
    """Whether the process was started with Arrow's pool named (``ARROW_DEFAULT_MEMORY_POOL``)."""
    return bool(os.environ.get("ARROW_DEFAULT_MEMORY_POOL"))


def s3_environment() -> dict[str, str | None]:
    """The S3 endpoint and region the standard AWS variables name (None where they do not)."""
    env = os.environ
    return {
        "endpoint": env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"),
        "region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
    }


STEP_TIMES = "USAGE_BILLING_STEP_TIMES"


def step_times_file() -> str | None:
    """Where each step of a chain appends its start and end times (``USAGE_BILLING_STEP_TIMES``)."""
    return os.environ.get(STEP_TIMES) or None
