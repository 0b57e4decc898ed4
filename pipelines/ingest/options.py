"""Ingest's own options: typed for ``events.run``, and as flags in an argument list (``events.main``,
the command line's extra arguments)."""

from __future__ import annotations

from dataclasses import dataclass

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.runtime.context import StepOptions
from schemas.limits import DEFAULT_LATENESS_DAYS, DEFAULT_MAX_TOKENS_PER_EVENT


@dataclass(frozen=True)
class IngestOptions(StepOptions):
    """Ingest's own options: dedup ``shards`` (fixed when the lake is created; None: the lake's, or the
    default for a new lake), the oldest accepted event in days, the cap per token count, and a
    ``landing`` root other than the settings' (a replay reads its own)."""

    shards: int | None = None
    lateness_days: int = DEFAULT_LATENESS_DAYS
    max_tokens_per_event: int = DEFAULT_MAX_TOKENS_PER_EVENT
    landing: str | None = None

    @classmethod
    def from_flags(cls, flags) -> IngestOptions:
        """From parsed ``IngestFlags`` (an edge's argument list)."""
        return cls(flags.run_id, flags.shards, flags.lateness_days, flags.max_tokens_per_event)


class IngestFlags(PipelineOptions):
    """Ingest's own flags in an argument list (``split_argv``)."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        parser.add_argument("--shards", type=int, default=None, help="dedup shards (fixed at lake creation)")
        parser.add_argument(
            "--lateness_days", type=int, default=DEFAULT_LATENESS_DAYS, help="oldest accepted event, in days"
        )
        parser.add_argument("--max_tokens_per_event", type=int, default=DEFAULT_MAX_TOKENS_PER_EVENT)
