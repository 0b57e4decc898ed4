"""Pipeline options shared by every pipeline: where things live and which dates to process.

Unknown flags pass through to Beam, so ``--runner`` and the runner's own flags just work; without a
``--runner`` the in-process FnApiRunner is used (plain DirectRunner would try to download Prism),
on one thread. ``--direct_running_mode=multi_threading --direct_num_workers=2`` is faster for ingest
(1.5x) and metering (1.3x) on two cores (benchmarks/RESULTS.md), but it is not the default: Beam's
SDK harness prints the traceback of an error raised in a DoFn (a full disk, say) to stderr and the
runner re-raises it as a RuntimeError, so a user error would no longer end as one line.
"""

from __future__ import annotations

import datetime as dt

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.errors import UsageBillingError
from pipelines.settings import DEFAULT_CONFIG, DEFAULT_DATABASE_URL, DEFAULT_LAKE, DEFAULT_LANDING

DEFAULT_RUNNER = "FnApiRunner"
MAX_RANGE_DAYS = 800


class CommonOptions(PipelineOptions):
    """Options of every step. A step's own options class lists PipelineOptions as a base too: Beam
    collects the options it knows from PipelineOptions' direct subclasses only, and warns that it
    discards any other flag (``--shards``, ``--month``) even though the step reads it."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:  # type: ignore[no-untyped-def]
        parser.add_argument("--config", default=DEFAULT_CONFIG, help="catalog TOML")
        parser.add_argument("--database_url", default=DEFAULT_DATABASE_URL)
        parser.add_argument("--lake", default=DEFAULT_LAKE)
        parser.add_argument("--landing", default=DEFAULT_LANDING)
        parser.add_argument("--date", default=None, help="one date, YYYY-MM-DD")
        parser.add_argument("--from", dest="from_date", default=None, help="first date of a range")
        parser.add_argument("--to", dest="to_date", default=None, help="last date of a range")
        parser.add_argument("--run_id", default=None, help="id of this run (default: generated)")


def pipeline_options(argv: list[str] | None) -> PipelineOptions:
    flags = list(argv or [])
    if not any(f == "--runner" or f.startswith("--runner=") for f in flags):
        flags.append(f"--runner={DEFAULT_RUNNER}")
    return PipelineOptions(flags)


def parse_date(value: str, what: str = "date") -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except (TypeError, ValueError):
        raise UsageBillingError(f"invalid {what} {value!r}: expected YYYY-MM-DD") from None


def date_range(opts: CommonOptions) -> list[dt.date]:
    """The dates of ``--date D`` or ``--from D1 --to D2`` (inclusive)."""
    if opts.date and (opts.from_date or opts.to_date):
        raise UsageBillingError("give either --date or --from/--to, not both")
    if opts.date:
        return [parse_date(opts.date)]
    if not (opts.from_date and opts.to_date):
        raise UsageBillingError("a date is required: --date YYYY-MM-DD or --from YYYY-MM-DD --to YYYY-MM-DD")
    start, end = parse_date(opts.from_date, "--from date"), parse_date(opts.to_date, "--to date")
    if end < start:
        raise UsageBillingError(f"--to {end} is before --from {start}")
    days = (end - start).days + 1
    if days > MAX_RANGE_DAYS:
        raise UsageBillingError(f"a range of {days} days is more than {MAX_RANGE_DAYS}")
    return [start + dt.timedelta(days=i) for i in range(days)]


def make_pipeline(options: PipelineOptions):  # type: ignore[no-untyped-def]
    """A Beam pipeline for ``options``; an unknown ``--runner`` is a user error, not a traceback."""
    import apache_beam as beam

    try:
        return beam.Pipeline(options=options)
    except ValueError as exc:
        if "runner" in str(exc).lower():
            raise UsageBillingError(str(exc).split(". Valid values")[0]) from None
        raise


# -- several outputs without tagged outputs ----------------------------------------------------
# Beam's DaskRunner hands every output of a multi-output ParDo to every tag (one receiver for all),
# so pipelines emit (kind, payload) pairs from a single output and split them with filters.
CLEAN, QUARANTINE, STATS = "clean", "quarantine", "stats"


def _keep(element: tuple[str, object], kind: str) -> list[object]:
    return [element[1]] if element[0] == kind else []


def split(pcoll, label: str, kinds: tuple[str, ...]) -> dict:  # type: ignore[no-untyped-def]
    """{kind: PCollection of the payloads of that kind} from a PCollection of (kind, payload)."""
    import apache_beam as beam

    return {kind: pcoll | f"{label}{kind.title()}" >> beam.FlatMap(_keep, kind) for kind in kinds}
