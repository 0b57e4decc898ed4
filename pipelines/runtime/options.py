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

import concurrent.futures
import contextlib
import os
import sys
from collections.abc import Iterator

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from pipelines.errors import UsageBillingError, user_error_in, without_step
from pipelines.lake.paths import set_filesystem_options
from pipelines.runtime import compat
from pipelines.runtime.startup import collect_from_here

DEFAULT_RUNNER = "FnApiRunner"
DEFAULT_THREADS = 4


def pipeline_options(beam_args: list[str] | None, threads: bool = False) -> PipelineOptions:
    """Beam options from Beam's own flags; ``threads``: a step whose default is a thread per core."""
    flags = list(beam_args or [])
    if not any(f == "--runner" or f.startswith("--runner=") for f in flags):
        flags.append(f"--runner={DEFAULT_RUNNER}")
        if threads and not any(f.startswith("--direct_") for f in flags):
            workers = max(1, min(os.cpu_count() or 1, DEFAULT_THREADS))
            flags += ["--direct_running_mode=multi_threading", f"--direct_num_workers={workers}"]
    dask = _on_dask(flags)
    if dask:  # its options (--dask_client_address, ...) are known to Beam once its module is imported
        import apache_beam.runners.dask.dask_runner  # noqa: F401  # lazy: dask
    options = PipelineOptions(flags)
    set_filesystem_options(options)  # the driver's own lake access (listing, commits) uses them too
    if dask:
        from pipelines.runtime.dask import prepare_workers  # lazy: distributed

        prepare_workers(options)
    return options


Executor = concurrent.futures.Executor


def cluster(options: PipelineOptions) -> contextlib.AbstractContextManager[Executor | None]:
    """Where a step's own Python work runs: an executor on the run's Dask cluster when the run names one
    (``runtime.dask.cluster_executor``), else None: in this process."""
    if not on_dask(options):
        return contextlib.nullcontext(None)
    from pipelines.runtime.dask import cluster_executor  # lazy: distributed

    return cluster_executor(options)


def on_dask(options: PipelineOptions) -> bool:
    """Whether ``options`` run pipelines on Beam's DaskRunner."""
    runner = options.view_as(StandardOptions).runner
    return _on_dask([f"--runner={runner}"] if runner else [])


def parallel_tasks(options: PipelineOptions) -> int:
    """How many tasks of a pipeline run at once: the Dask cluster's worker threads (``prepare_workers``
    asks for ``PARTITIONS_PER_THREAD`` partitions per thread), or the in-process runner's threads."""
    if on_dask(options):
        from apache_beam.runners.dask.dask_runner import DaskOptions  # lazy: dask

        from pipelines.runtime.dask import PARTITIONS_PER_THREAD  # lazy: distributed

        return max(1, (options.view_as(DaskOptions).npartitions or 0) // PARTITIONS_PER_THREAD)
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode in ("multi_threading", "multi_processing"):
        return max(1, direct.direct_num_workers or 1)
    return 1


def _on_dask(flags: list[str]) -> bool:
    runner = [f.split("=", 1)[1] if "=" in f else None for f in flags if f.startswith("--runner")]
    if "--runner" in flags:
        at = flags.index("--runner")
        runner.append(flags[at + 1] if at + 1 < len(flags) else None)
    return any(r is not None and r.rsplit(".", 1)[-1] == "DaskRunner" for r in runner)


def make_pipeline(options: PipelineOptions):
    """A Beam pipeline for ``options``; an unknown ``--runner`` is a user error, not a traceback.
    Threaded runs flush their data streams by size only: a timed flush drops elements
    (``compat.buffer_by_size_only``)."""
    compat.buffer_by_size_only()
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
    compat.quiet_harness_tracebacks(_harness_print)
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
    return {kind: pcoll | f"{label}{kind.title()}" >> beam.FlatMap(_keep, kind) for kind in kinds}
