"""Pipeline options shared by every pipeline: where things live and which dates to process.

Unknown flags pass through to Beam, so ``--runner`` and the runner's own flags just work; without a
``--runner`` the in-process FnApiRunner is used (plain DirectRunner would try to download Prism).
Ingest and metering run it with one thread per core (up to ``DEFAULT_THREADS``) unless a
``--direct_...`` flag says otherwise: their heavy work is in Arrow and numpy, which release the GIL
(benchmarks/RESULTS.md: 1.3x for a 10M-event Parquet ingest on two cores, 1.3x for metering,
without the start-up of worker processes). Aggregation stays on one thread: a second one bought it
1.2x for 1.9x the memory, past its 1 GB budget at 50M events.

In threaded mode Beam's SDK harness catches an error raised in a DoFn, prints its traceback and logs
it, and the runner raises a RuntimeError holding that traceback. ``run_pipeline`` keeps a user error
(a full disk, say) what it is on one thread: no traceback printed, the same exception class and one
line for the command line.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sys
from collections.abc import Iterator

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.errors import UsageBillingError, user_error_in, without_step
from pipelines.lake.paths import check_reachable, set_filesystem_options
from pipelines.runtime.startup import collect_from_here
from pipelines.settings import DEFAULT_CONFIG, DEFAULT_DATABASE_URL, DEFAULT_LAKE, DEFAULT_LANDING
from schemas.limits import RUN_ID, date_problem

DEFAULT_RUNNER = "FnApiRunner"
DEFAULT_THREADS = 4
MAX_RANGE_DAYS = 800


class CommonOptions(PipelineOptions):
    """Options of every step. A step's own options class lists PipelineOptions as a base too: Beam
    collects the options it knows from PipelineOptions' direct subclasses only, and warns that it
    discards any other flag (``--shards``, ``--month``) even though the step reads it."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        parser.add_argument("--config", default=DEFAULT_CONFIG, help="catalog TOML")
        parser.add_argument("--database_url", default=DEFAULT_DATABASE_URL)
        parser.add_argument("--lake", default=DEFAULT_LAKE)
        parser.add_argument("--landing", default=DEFAULT_LANDING)
        parser.add_argument("--date", default=None, help="one date, YYYY-MM-DD")
        parser.add_argument("--from", dest="from_date", default=None, help="first date of a range")
        parser.add_argument("--to", dest="to_date", default=None, help="last date of a range")
        parser.add_argument("--run_id", default=None, help="id of this run (default: generated)")


def pipeline_options(argv: list[str] | None, threads: bool = False) -> PipelineOptions:
    """Beam options from ``argv``; ``threads``: a step whose default is a thread per core."""
    flags = list(argv or [])
    if not any(f == "--runner" or f.startswith("--runner=") for f in flags):
        flags.append(f"--runner={DEFAULT_RUNNER}")
        if threads and not any(f.startswith("--direct_") for f in flags):
            workers = max(1, min(os.cpu_count() or 1, DEFAULT_THREADS))
            flags += ["--direct_running_mode=multi_threading", f"--direct_num_workers={workers}"]
    dask = _on_dask(flags)
    if dask:  # its options (--dask_client_address, ...) are known to Beam once its module is imported
        import apache_beam.runners.dask.dask_runner  # noqa: F401
    options = PipelineOptions(flags)
    run_id = options.view_as(CommonOptions).run_id
    if run_id is not None and not RUN_ID.fullmatch(run_id):
        raise UsageBillingError(
            f"--run_id {run_id[:80]!r} is not a run id: letters, digits, '.', '_' and '-', at most 64"
        )
    set_filesystem_options(options)  # the driver's own lake access (listing, commits) uses them too
    common = options.view_as(CommonOptions)
    for root in (common.lake, common.landing):
        check_reachable(root)
    if dask:
        from pipelines.runtime.dask import prepare_workers

        prepare_workers(options)
    return options


def _on_dask(flags: list[str]) -> bool:
    runner = [f.split("=", 1)[1] if "=" in f else None for f in flags if f.startswith("--runner")]
    if "--runner" in flags:
        at = flags.index("--runner")
        runner.append(flags[at + 1] if at + 1 < len(flags) else None)
    return any(r is not None and r.rsplit(".", 1)[-1] == "DaskRunner" for r in runner)


def parse_date(value: str, what: str = "date") -> dt.date:
    try:
        day = dt.date.fromisoformat(value)
    except (TypeError, ValueError):
        raise UsageBillingError(f"invalid {what} {value!r}: {_why_not_a_date(value)}") from None
    problem = date_problem(day)
    if problem:
        raise UsageBillingError(f"{what} {day} {problem}")
    return day


def _why_not_a_date(value: object) -> str:
    """Why ``value`` is not a date: the wrong shape, or a day the calendar does not have."""
    import re

    shape = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", value) if isinstance(value, str) else None
    if shape is None:
        return "expected YYYY-MM-DD"
    year, month, day = (int(g) for g in shape.groups())
    if not 1 <= month <= 12:
        return f"no such date: there is no month {month:02d}"
    import calendar

    days = calendar.monthrange(year, month)[1]
    return f"no such date: {calendar.month_name[month]} {year} has days 01 to {days}, not {day:02d}"


def contiguous(dates: list[dt.date]) -> list[list[dt.date]]:
    """Split dates into sorted runs of consecutive days (one pipeline run per run of days)."""
    runs: list[list[dt.date]] = []
    for d in sorted(set(dates)):
        if runs and (d - runs[-1][-1]).days == 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    return runs


def date_ranges(dates: list[dt.date]) -> str:
    """Sorted dates as consecutive ranges: ``2026-02-01..2026-04-03, 2026-05-07``."""
    return ", ".join(f"{r[0]}" if len(r) == 1 else f"{r[0]}..{r[-1]}" for r in contiguous(dates))


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


def make_pipeline(options: PipelineOptions):
    """A Beam pipeline for ``options``; an unknown ``--runner`` is a user error, not a traceback."""
    import apache_beam as beam

    try:
        return beam.Pipeline(options=options)
    except ValueError as exc:
        if "runner" in str(exc).lower():
            raise UsageBillingError(str(exc).split(". Valid values")[0]) from None
        raise


# -- user errors raised inside a worker thread ------------------------------------------------
def _harness_print(*args, file=None, **kwargs) -> None:
    """``print`` for Beam's SDK harness: it prints the traceback of a failed bundle to stderr before
    reporting it to the runner; a user error's is left to ``run_pipeline``, anything else printed."""
    if file is sys.stderr and args and isinstance(args[0], str) and user_error_in(args[0]) is not None:
        return
    print(*args, file=file, **kwargs)


@contextlib.contextmanager
def run_pipeline(options: PipelineOptions) -> Iterator:
    """``with run_pipeline(options) as p:`` builds a pipeline and runs it on leaving the block.

    A user error raised in a DoFn comes out as that error whether the runner ran it on this thread or
    in a worker thread (which reports it as a RuntimeError with the traceback as text).
    """
    from apache_beam.runners.worker import sdk_worker

    sdk_worker.print = _harness_print  # type: ignore[attr-defined]  # module global shadows the builtin
    pipeline = make_pipeline(options)
    collect_from_here()
    try:
        with pipeline:
            yield pipeline
    except RuntimeError as exc:  # from a worker thread: the traceback as text
        user = user_error_in(str(exc))
        if user is None:
            raise
        raise user from None
    except UsageBillingError as exc:  # from this thread, with the step Beam appended
        message = without_step(str(exc))
        if message == str(exc):
            raise
        raise type(exc)(message) from None
    finally:
        _close_runner_client(pipeline)


def _close_runner_client(pipeline) -> None:
    """The DaskRunner connects a client to the cluster for each run and leaves it open (an Airflow
    worker running one pipeline after another would pile them up); its result holds it."""
    client = getattr(getattr(pipeline, "result", None), "client", None)
    if client is not None and hasattr(client, "close"):
        client.close()


# -- several outputs without tagged outputs ----------------------------------------------------
# Beam's DaskRunner hands every output of a multi-output ParDo to every tag (one receiver for all),
# so pipelines emit (kind, payload) pairs from a single output and split them with filters.
CLEAN, QUARANTINE, STATS = "clean", "quarantine", "stats"


def _keep(element: tuple[str, object], kind: str) -> list[object]:
    return [element[1]] if element[0] == kind else []


def split(pcoll, label: str, kinds: tuple[str, ...]) -> dict:
    """{kind: PCollection of the payloads of that kind} from a PCollection of (kind, payload)."""
    import apache_beam as beam

    return {kind: pcoll | f"{label}{kind.title()}" >> beam.FlatMap(_keep, kind) for kind in kinds}
