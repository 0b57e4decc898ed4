"""Reads and copies of ``s3://`` objects through Arrow's own S3 client (C++), not Beam's.

Beam's S3 file system reads an object through a 16 MiB read-ahead buffer in Python: a reader that
seeks to a row group near the start of a file downloads up to 16 MiB past it, and every seek outside
the buffer is another request. Arrow's client reads exactly the ranges a Parquet or IPC reader asks
for (a row group's column chunks coalesced into one request), outside the GIL.

Writes (``ObjectWriter``) collect an object's bytes and upload them when it is closed in one
PutObject request through the shared boto3 client: Beam's writer uploads every object, however small,
in three requests (a multipart upload) and copies what it holds on every write. An object past
``PUT_MAX`` goes on through Beam's multipart writer. (Arrow's multipart writer once failed a
completion against rclone's server, NoSuchUpload, not explained; it is not used.) A file's size and
time (``paths.stamps``) is one HEAD request here (Beam's match of one name makes three), and a
folder's files (``paths.list_files``) one listing. Existence, deep listings and deletes stay with
Beam's ``FileSystems`` (``paths.py``): they are few per run. Both
clients take the same settings: Beam's ``--s3_*`` flags when a run gives them, else the standard
``AWS_*`` environment variables (``AWS_ENDPOINT_URL`` for an S3-compatible server).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from apache_beam.options.pipeline_options import S3Options

from pipelines.runtime import compat
from pipelines.settings import s3_checksums_when_required, s3_environment

FILE = pafs.FileType.File
_FILESYSTEMS: dict[tuple, pafs.S3FileSystem] = {}
_LOCK = threading.Lock()
# The options last looked at and their file system: reading Beam's options builds an argument parser
# (milliseconds), too slow to do for every object opened.
_LAST: list[tuple[object, pafs.S3FileSystem]] = []


def handles(path: str) -> bool:
    """Whether this module reads, writes and copies ``path`` (``s3://`` objects)."""
    return path.startswith("s3://")


def forget() -> None:
    """The S3 settings changed: the clients made so far are dropped."""
    with _LOCK:
        _FILESYSTEMS.clear()
        _LAST.clear()


def _settings() -> dict[str, Any]:
    """The S3 settings of the run (Beam's ``--s3_*`` options), those not given left out."""
    options = compat.filesystem_options()
    if options is None:
        return {}
    given = options.view_as(S3Options).get_all_options(retain_unknown_options=False)
    return {k: v for k, v in given.items() if k.startswith("s3_") and v not in (None, False)}


def filesystem() -> pafs.S3FileSystem:
    """Arrow's S3 file system for the settings in force, one per set of settings and process."""
    options = compat.filesystem_options()
    last = _LAST[:1]
    if last and last[0][0] is options:
        return last[0][1]
    given = _settings()
    settings = tuple(sorted((k, str(v)) for k, v in given.items()))
    with _LOCK:
        found = _FILESYSTEMS.get(settings)
        if found is None:
            s3_checksums_when_required()  # the C++ SDK reads them as botocore does
            found = _FILESYSTEMS[settings] = pafs.S3FileSystem(**_arrow_arguments(given))
        _LAST[:] = [(options, found)]
    return found


def _arrow_arguments(given: dict[str, Any]) -> dict[str, Any]:
    """``pafs.S3FileSystem`` arguments from Beam's S3 options, else from the ``AWS_*`` variables."""
    env = s3_environment()
    endpoint = given.get("s3_endpoint_url") or env["endpoint"]
    region = given.get("s3_region_name") or env["region"]
    arguments: dict[str, Any] = {}
    if given.get("s3_access_key_id"):
        arguments["access_key"] = given["s3_access_key_id"]
        arguments["secret_key"] = given.get("s3_secret_access_key")
        if given.get("s3_session_token"):
            arguments["session_token"] = given["s3_session_token"]
    if region:
        arguments["region"] = region
    if endpoint:
        scheme, _, rest = endpoint.partition("://")
        arguments["endpoint_override"] = rest or scheme
        arguments["scheme"] = scheme if rest else "https"
    if given.get("s3_disable_ssl"):
        arguments["scheme"] = "http"
    return arguments


def key(path: str) -> str:
    """An ``s3://bucket/key`` path as Arrow's S3 file system names it (``bucket/key``)."""
    return path[len("s3://") :]


def listing(directory: str) -> dict[str, str]:
    """name -> ``s3://`` path of each object directly inside ``directory`` (none if there is none):
    Arrow's listing, its answers parsed in C++ (Beam's parses each page of names in Python)."""
    selector = pafs.FileSelector(key(directory).rstrip("/"), allow_not_found=True, recursive=False)
    found = filesystem().get_file_info(selector)
    return {info.base_name: f"s3://{info.path}" for info in found if info.type == FILE}


def open_input(path: str) -> pa.NativeFile:
    """A seekable reader of the object (ranged requests for what is read)."""
    return filesystem().open_input_file(key(path))


def read_whole(path: str) -> pa.Buffer:
    """The whole object in one GET (no HEAD first, as a seekable reader would ask)."""
    with filesystem().open_input_stream(key(path)) as stream:
        return stream.read_buffer()


def copy(sources: list[str], destinations: list[str]) -> None:
    """Server-side copies, one CopyObject request each (up to 5 GB an object), eight at a time.

    Not Beam's copy: boto3's managed copy turns an object over 8 MB into a multipart copy, whose parts
    some S3-compatible servers answer without the ETag boto3 reads (rclone's), and Beam then reports
    no error: the destination was simply missing."""
    fs = filesystem()
    with ThreadPoolExecutor(max_workers=8) as pool:
        pairs = zip(sources, destinations, strict=True)
        list(pool.map(lambda pair: fs.copy_file(key(pair[0]), key(pair[1])), pairs))


PUT_MAX = 64 << 20  # bytes an object may have to be uploaded in one request; beyond, a multipart upload


class ObjectWriter(io.RawIOBase):
    """A new object, written like a file: its bytes are held and uploaded in one PutObject request when
    it is closed; past ``PUT_MAX`` bytes they go on through ``larger()`` (a multipart writer) instead.
    Left by an exception (``with``) before it grew past ``PUT_MAX``, nothing is uploaded: no object
    rather than part of one (past it, the multipart writer is closed as before, with what it got)."""

    def __init__(self, path: str, larger: Callable[[], Any]) -> None:
        super().__init__()
        self.path, self._larger = path, larger
        self._held: io.BytesIO | None = io.BytesIO()
        self._stream: Any = None
        self._position = 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def write(self, data: Any) -> int:
        size = memoryview(data).nbytes
        if self._stream is not None:
            self._stream.write(data)
        else:
            assert self._held is not None, "write after close"
            self._held.write(data)
            if self._held.tell() > PUT_MAX:
                self._stream = self._larger()
                self._stream.write(self._held.getbuffer())
                self._held = None
        self._position += size
        return size

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._stream is not None:
                self._stream.close()
            elif self._held is not None:
                bucket, _, name = key(self.path).partition("/")
                client = compat.shared_s3_client(compat.filesystem_options())
                client.put_object(Bucket=bucket, Key=name, Body=self._held.getvalue())
        finally:
            self._held = None
            super().close()

    def __exit__(self, kind: object, *rest: object) -> None:
        if kind is not None and self._stream is None:
            self._held = None  # not uploaded
        self.close()
