"""Every place this project reaches into a library's internals, each with the reason, in one module.

``tests/runtime/test_compat.py`` checks each against the installed library: an upgrade that moves or
renames what a patch relies on fails there, by name, rather than somewhere deep in a run.

- ``share_s3_clients``: Beam's S3 file system makes a boto3 client per operation; one per set of
  options is shared instead (replaces ``s3io.boto3_client``). Each shared client also fills in a
  listing's ``KeyCount`` when an S3-compatible server leaves it out (Beam's ``list`` reads it), and
  computes and validates checksums only where the S3 API requires them (botocore's settings).
- ``filesystem_options``: the options Beam's ``FileSystems`` were given (``FileSystems._pipeline_options``),
  which its S3 client needs outside a pipeline.
- ``skip_gx_fingerprints``: great-expectations hashes every pandas batch under 1 GB for a batch
  marker (``pandas_data_fingerprint``) that nothing here reads: a fifth of the gate's CPU. Lowers
  ``pandas_execution_engine.HASH_THRESHOLD`` to 0.
- ``quiet_harness_tracebacks``: Beam's SDK harness prints a failed bundle's traceback with the builtin
  ``print``; a user error's is left to the command's one line (shadows ``sdk_worker.print``).
- ``buffer_by_size_only``: with ``direct_running_mode=multi_threading`` Beam's SDK harness flushes each
  output stream from a timer thread every second (``TimeBasedBufferingClosableOutputStream``) while
  the bundle's thread writes to the same buffer without a lock: elements written between the flush's
  read of the buffer and its clear are dropped without an error (thousands of a few million, run to
  run). Streams flush by size and on close only (``data_plane.ClosableOutputStream.create``): the
  timer exists for a streaming job's latency, which a batch run does not need.
- ``ClickException``: what Typer raises for a usage mistake (``typer._click``, Typer's vendored Click).
- ``exit_now``: leave without the interpreter's teardown, exit handlers first (``atexit._run_exitfuncs``,
  ``os._exit``).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from typer._click.exceptions import ClickException

from pipelines.settings import s3_checksums_when_required

__all__ = [
    "ClickException",
    "buffer_by_size_only",
    "exit_now",
    "filesystem_options",
    "quiet_harness_tracebacks",
    "share_s3_clients",
    "shared_s3_client",
    "skip_gx_fingerprints",
]


_S3_CLIENTS: dict[tuple, object] = {}
_S3_LOCK = threading.Lock()
_S3_LAST: list[tuple[object, tuple]] = []  # the options last read and their key


# What Beam's S3 client wrapper keeps of one download in progress (the open stream of a ranged read):
# it belongs to the reader that made the wrapper and is never shared.
S3_DOWNLOAD_STATE = {"_download_request": None, "_download_stream": None, "_download_pos": 0}


def _count_keys(parsed: dict, **_: object) -> None:
    """A ListObjectsV2 answer without ``KeyCount`` (some S3-compatible servers leave it out for an
    empty prefix) gets the number of keys it lists: Beam's S3 ``list`` reads the field."""
    if isinstance(parsed, dict) and "KeyCount" not in parsed and "Error" not in parsed:
        parsed["KeyCount"] = len(parsed.get("Contents") or []) + len(parsed.get("CommonPrefixes") or [])


def share_s3_clients(fresh: bool = False) -> None:
    """Beam's S3 file system builds a boto3 session and client for every operation (each loads
    botocore's endpoint tables: about 50 ms, more than most listings take). Share one boto3 client per
    set of S3 options instead (boto3 clients are thread-safe), each of Beam's wrappers around it with a
    download state of its own: the wrapper keeps the stream of the read in progress, so two readers
    sharing one wrapper close each other's streams (Beam then retries with back-off, seconds each).
    ``fresh``: the options changed, so the clients made so far are dropped. A no-op without Beam's AWS
    extra.

    Replaces ``apache_beam.io.aws.s3io.boto3_client`` (the module attribute s3io makes its clients
    with) by a factory of wrappers around shared clients."""
    if fresh:
        with _S3_LOCK:
            _S3_CLIENTS.clear()
            _S3_LAST.clear()
    try:
        from apache_beam.io.aws import s3io  # lazy: apache_beam
        from apache_beam.io.aws.clients.s3 import boto3_client  # lazy: apache_beam
    except ImportError:
        return
    if getattr(s3io, "_shared_clients", False):
        return

    def client(options):
        wrapper = boto3_client.Client.__new__(boto3_client.Client)  # Beam's methods, no new session
        wrapper.client = shared_s3_client(options)
        vars(wrapper).update(S3_DOWNLOAD_STATE)
        return wrapper

    class _Shared:
        Client = staticmethod(lambda options: client(options))

    s3io.boto3_client = _Shared  # type: ignore[assignment]  # Beam's module attribute, replaced on purpose
    s3io._shared_clients = True  # type: ignore[attr-defined]  # our mark that it was replaced


def shared_s3_client(options: Any) -> Any:
    """The boto3 S3 client shared by every user of one set of S3 options (Beam's ``PipelineOptions``,
    a dict of ``s3_*`` items, or None: boto3's own settings, the ``AWS_*`` environment)."""
    from apache_beam.io.aws.clients.s3 import boto3_client  # lazy: apache_beam
    from apache_beam.options.pipeline_options import PipelineOptions, S3Options  # lazy: apache_beam

    if options is None:
        options = {}
    if isinstance(options, PipelineOptions):
        with _S3_LOCK:  # reading the options builds an argument parser: once per options object
            last = _S3_LAST[:1]
        if last and last[0][0] is options:
            key = last[0][1]
        else:
            given = options.view_as(S3Options).get_all_options(retain_unknown_options=False)
            key = tuple(sorted(given.items()))
            with _S3_LOCK:
                _S3_LAST[:] = [(options, key)]
    else:
        key = tuple(sorted((k, str(v)) for k, v in dict(options).items()))
    key = tuple((k, str(v)) for k, v in key if k.startswith("s3_"))
    with _S3_LOCK:
        shared = _S3_CLIENTS.get(key)
        if shared is None:
            s3_checksums_when_required()  # botocore reads them when it makes the client
            shared = _S3_CLIENTS[key] = boto3_client.Client(options=options).client
            shared.meta.events.register("after-call.s3.ListObjectsV2", _count_keys)
    return shared


def filesystem_options() -> Any:
    """The options Beam's file systems were last given (``FileSystems.set_options``), or None."""
    from apache_beam.io.filesystems import FileSystems  # lazy: apache_beam

    return FileSystems._pipeline_options


def skip_gx_fingerprints() -> None:
    """No fingerprint of each validated frame (GX computes it only below this size)."""
    from great_expectations.execution_engine import pandas_execution_engine  # lazy: great_expectations

    pandas_execution_engine.HASH_THRESHOLD = 0


def buffer_by_size_only() -> None:
    """Every output stream of Beam's data plane flushed by size and on close, never by a timer."""
    from apache_beam.runners.worker import data_plane  # lazy: apache_beam

    def create(close_callback, flush_callback, data_buffer_time_limit_ms=0):
        stream = data_plane.SizeBasedBufferingClosableOutputStream
        return stream(close_callback, flush_callback=flush_callback)

    data_plane.ClosableOutputStream.create = staticmethod(create)  # type: ignore[method-assign]


def quiet_harness_tracebacks(print_function: Callable[..., None]) -> None:
    """Beam's SDK harness prints through ``print_function`` (it looks ``print`` up as a module global
    first, then as the builtin)."""
    from apache_beam.runners.worker import sdk_worker  # lazy: apache_beam

    sdk_worker.print = print_function  # type: ignore[attr-defined]  # module global shadows the builtin


def exit_now(code: int) -> None:
    """Run the exit handlers, flush, and leave the process without the interpreter's teardown."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
