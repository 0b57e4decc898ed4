"""Beam's DaskRunner and the lake's file systems.

Portable runners (Dataflow, Flink, Spark) hand each worker the pipeline's options, and their SDK
harness gives them to Beam's file systems. The DaskRunner runs DoFns in Dask worker processes that
nobody gives options: an ``s3://`` lake configured by ``--s3_*`` flags would be reached there with no
endpoint or credentials at all. ``prepare_workers`` registers a worker plugin, before the pipeline
runs, that gives every worker of the cluster (and any that joins later) the run's file-system settings
and its allocators' settings (``startup.tune_allocator`` and ``startup.arrow_memory_pool``, the
command line's, with less free memory kept). Without them a worker took ten times the page faults of
the embedded run and a fifth of its CPU went to the kernel. Settings taken from the environment
(``AWS_*``) are the workers' own environment's. It also spreads the run over the cluster's workers
(``PARTITIONS_PER_THREAD``). ``cluster_executor`` hands a step's own Python work (the data-quality
gate) to the same cluster.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Iterator

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.errors import UsageBillingError

try:
    from distributed import Client, WorkerPlugin
except ImportError:  # without the dask extra: prepare_workers says so
    Client = None  # type: ignore[assignment,misc]  # stands for the optional class when it is absent
    WorkerPlugin = object  # type: ignore[assignment,misc]  # the same: a base class to subclass
from pipelines.lake.paths import filesystem_values, set_filesystem_options
from pipelines.runtime.startup import (
    WORKER_DECAY_MS,
    WORKER_TRIM_THRESHOLD,
    arrow_memory_pool,
    tune_allocator,
)
from pipelines.settings import arrow_realigns

PLUGIN = "usage-billing-worker-settings"
# The DaskRunner splits each Create into partitions of 128 elements by default, and every later step
# keeps the partitions of its input: the few hundred read units of a day made one partition, so one
# worker did all the work while the others idled. Without --dask_npartitions or --dask_partition_size,
# a run gets this many partitions per worker thread of the cluster.
PARTITIONS_PER_THREAD = 2


class WorkerSettings(WorkerPlugin):
    """Gives a worker's Beam file systems the driver's file-system settings, its C library's allocator
    the settings the command line runs with, and Arrow the memory pool a worker runs best with."""

    name = PLUGIN

    def __init__(self, values: dict[str, object]) -> None:
        self.values = values

    def setup(self, worker) -> None:
        tune_allocator(trim_threshold=WORKER_TRIM_THRESHOLD)
        arrow_memory_pool(WORKER_DECAY_MS)
        arrow_realigns()
        set_filesystem_options(PipelineOptions.from_dictionary(self.values))


def _address(options) -> tuple[str | None, str | None, int]:
    from apache_beam.runners.dask.dask_runner import DaskOptions  # lazy: dask

    dask = options.view_as(DaskOptions)
    return dask.address, dask.scheduler_file, dask.timeout if isinstance(dask.timeout, int) else 30


def _client(options):
    address, scheduler_file, timeout = _address(options)
    try:
        return Client(address=address, scheduler_file=scheduler_file, timeout=timeout)
    except (OSError, TimeoutError) as exc:
        where = address or scheduler_file
        raise UsageBillingError(f"cannot reach the Dask scheduler at {where}: {exc}") from None


@contextlib.contextmanager
def cluster_executor(options) -> Iterator[concurrent.futures.Executor | None]:
    """An executor whose tasks run on the run's Dask cluster (its workers have the file-system settings
    ``prepare_workers`` registered), or None when the run names no cluster (the DaskRunner's own local
    cluster lives only as long as one pipeline run). Tasks are not cached by their arguments: the lake
    they read changes between runs."""
    address, scheduler_file, _ = _address(options)
    if Client is None or not (address or scheduler_file):
        yield None
        return
    client = _client(options)
    try:
        yield client.get_executor(pure=False)
    finally:
        client.close()


def prepare_workers(options) -> None:
    """Register ``WorkerSettings`` with the run's Dask cluster (``--dask_client_address`` or
    ``--dask_scheduler_file``). Without either the DaskRunner starts a local cluster of its own, whose
    workers inherit this process's environment but not its flags."""
    if Client is None:
        raise UsageBillingError("the DaskRunner needs dask.distributed: pip install 'usage-billing[dask]'")
    from apache_beam.runners.dask.dask_runner import DaskOptions  # lazy: dask

    dask = options.view_as(DaskOptions)
    if not (dask.address or dask.scheduler_file):
        return
    client = _client(options)
    try:
        client.register_plugin(WorkerSettings(filesystem_values(options)), name=PLUGIN)
        if not (dask.npartitions or dask.partition_size):
            threads = sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values())
            dask.npartitions = PARTITIONS_PER_THREAD * max(1, threads)
    finally:
        client.close()
