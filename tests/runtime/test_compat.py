"""Each patch of ``pipelines/runtime/compat.py`` against the installed library: what it relies on is
still there, and the patch does what it says. A library upgrade that moves one fails here by name."""

from __future__ import annotations

import inspect

import typer
from typer.testing import CliRunner

from pipelines.runtime import compat


def test_beam_makes_its_s3_clients_through_the_module_attribute_we_replace():
    from apache_beam.io.aws import s3io
    from apache_beam.io.aws.clients.s3 import boto3_client

    assert "options" in inspect.signature(boto3_client.Client).parameters
    assert "boto3_client.Client(" in inspect.getsource(s3io)  # looked up on the module at each use
    options = {"s3_region_name": "us-east-1", "s3_access_key_id": "a", "s3_secret_access_key": "b"}
    # Beam's wrapper holds the boto3 client and the state of one download, nothing else: ours copy it.
    assert set(vars(boto3_client.Client(options=options))) == {"client", *compat.S3_DOWNLOAD_STATE}
    compat.share_s3_clients(fresh=True)
    first, second = (s3io.boto3_client.Client(options=dict(options)) for _ in range(2))
    assert second.client is first.client  # one boto3 client per set of options ...
    assert second is not first  # ... and a download state per reader
    first._download_pos = 7
    assert second._download_pos == 0 and second._download_stream is None
    assert isinstance(first, boto3_client.Client) and callable(first.get_range)
    other = s3io.boto3_client.Client(options={**options, "s3_region_name": "eu-west-1"})
    assert other.client is not first.client
    compat.share_s3_clients(fresh=True)
    assert s3io.boto3_client.Client(options=options).client is not first.client  # new options: new clients


def test_beam_file_systems_keep_the_options_they_were_given():
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    before = compat.filesystem_options()
    options = PipelineOptions(["--s3_region_name=us-east-1"])
    try:
        FileSystems.set_options(options)
        assert compat.filesystem_options() is options
    finally:
        FileSystems.set_options(before)


def test_beams_harness_prints_a_failed_bundle_through_a_module_level_print():
    from apache_beam.runners.worker import sdk_worker

    assert "print(" in inspect.getsource(sdk_worker)  # the name our function shadows
    seen: list[tuple] = []
    compat.quiet_harness_tracebacks(lambda *args, **kwargs: seen.append(args))
    try:
        exec("print('bundle failed')", vars(sdk_worker))  # a call in the module, as the harness makes it
    finally:
        del sdk_worker.print  # back to the builtin
    assert seen == [("bundle failed",)]


def test_typer_raises_the_click_exception_we_catch_for_a_usage_mistake():
    app = typer.Typer()

    @app.command()
    def only(count: int) -> None:  # pragma: no cover - never reached
        raise AssertionError(count)

    result = CliRunner().invoke(app, ["not-a-number"], standalone_mode=False)
    assert isinstance(result.exception, compat.ClickException)


def test_the_interpreter_still_has_the_exit_handlers_runner_we_call():
    import atexit

    assert callable(atexit._run_exitfuncs)  # tests/test_cli.py: the command's handlers run through it


def test_a_listing_without_key_count_gets_one_and_checksums_are_only_where_required():
    """Beam's S3 ``list`` reads ``KeyCount``, which some S3-compatible servers leave out (rclone's, for
    an empty prefix): the shared clients fill it in from what the answer lists."""
    from apache_beam.io.aws import s3io
    from apache_beam.io.aws.clients.s3 import boto3_client

    assert "boto_response['KeyCount']" in inspect.getsource(boto3_client.Client.list)
    compat.share_s3_clients(fresh=True)
    options = {"s3_region_name": "us-east-1", "s3_access_key_id": "a", "s3_secret_access_key": "b"}
    client = s3io.boto3_client.Client(options=options).client
    empty: dict = {"Name": "b", "Prefix": "x/"}
    client.meta.events.emit(
        "after-call.s3.ListObjectsV2", parsed=empty, http_response=None, model=None, context={}
    )
    assert empty["KeyCount"] == 0
    listed = {"Contents": [{"Key": "x/a"}, {"Key": "x/b"}], "KeyCount": 5}
    client.meta.events.emit(
        "after-call.s3.ListObjectsV2", parsed=listed, http_response=None, model=None, context={}
    )
    assert listed["KeyCount"] == 5  # a server's own count is kept
    config = client.meta.config
    assert (config.request_checksum_calculation, config.response_checksum_validation) == (
        "when_required",
        "when_required",
    )
    compat.share_s3_clients(fresh=True)


def test_gx_fingerprints_a_pandas_batch_only_below_the_threshold_we_lower():
    from great_expectations.execution_engine import pandas_execution_engine

    source = inspect.getsource(pandas_execution_engine.PandasExecutionEngine.get_batch_data_and_markers)
    assert "< HASH_THRESHOLD" in source and "hash_pandas_dataframe(df)" in source
    compat.skip_gx_fingerprints()
    assert pandas_execution_engine.HASH_THRESHOLD == 0


def test_acero_copies_misaligned_buffers_when_dask_workers_set_their_default(monkeypatch):
    """A table in buffers that are not aligned to their type (what crossing a Dask task can give):
    Acero warns on stderr per batch by default, and says nothing with what ``arrow_realigns`` sets,
    the same sums either way. Acero reads the setting once per process: each case is a fresh one."""
    import os
    import subprocess
    import sys

    from pipelines.settings import ARROW_ALIGNMENT, arrow_realigns

    script = (
        "import pyarrow as pa\n"
        "n = 1000\n"
        "data = pa.py_buffer(bytearray(8 * n + 1))[1:]  # one byte off: not aligned to int64\n"
        "keys = pa.Array.from_buffers(pa.int64(), n, [None, data])\n"
        "print(pa.table({'k': keys, 'v': pa.array(range(n))}).group_by('k').aggregate([('v', 'sum')]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ARROW_ALIGNMENT}
    plain = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    for name in ARROW_ALIGNMENT:  # recorded, so that what arrow_realigns sets is undone after the test
        monkeypatch.setenv(name, "unset")
        monkeypatch.delenv(name)
    arrow_realigns()
    realigned = subprocess.run(
        [sys.executable, "-c", script], env=dict(os.environ), capture_output=True, text=True
    )
    assert plain.returncode == realigned.returncode == 0
    assert "poorly aligned" in plain.stderr and "poorly aligned" not in realigned.stderr
    assert plain.stdout == realigned.stdout and "499500" in plain.stdout


def test_beams_timed_flush_drops_what_a_bundle_writes_during_it_and_ours_has_no_timer():
    from apache_beam.runners.worker import data_plane

    # Beam's timed stream: the timer thread's flush reads the buffer, hands it on, then clears it. A
    # bundle thread writing in between (it takes no lock) loses its bytes: here the write is made
    # from inside the flush callback, where the race puts it.
    sent: list[bytes] = []

    def flush_callback(data: bytes) -> None:
        sent.append(data)
        if len(sent) == 1:
            stream.write(b"written-during-flush")

    stream = data_plane.TimeBasedBufferingClosableOutputStream(
        close_callback=sent.append, flush_callback=flush_callback, time_flush_threshold_ms=60_000
    )
    stream.write(b"first")
    stream.flush()
    stream.close()
    assert b"".join(sent) == b"first"  # the second write is gone, without an error

    # The data plane makes its streams through this factory; ours flush by size and on close only.
    assert "ClosableOutputStream.create(" in inspect.getsource(data_plane._GrpcDataChannel)
    compat.buffer_by_size_only()
    made = data_plane.ClosableOutputStream.create(sent.append, sent.append, 1000)
    assert type(made) is data_plane.SizeBasedBufferingClosableOutputStream
    sent.clear()
    made.write(b"a")
    made.close()
    assert sent == [b"a"]
