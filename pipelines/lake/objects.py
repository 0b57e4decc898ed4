"""Reads and copies of ``s3://`` objects through Arrow's own S3 client (C++), not Beam's.

Beam's S3 file system reads an object through a 16 MiB read-ahead buffer in Python: a reader that
seeks to a row group near the start of a file downloads up to 16 MiB past it, and every seek outside
the buffer is another request. Arrow's client reads exactly the ranges a Parquet or IPC reader asks
for (a row group's column chunks coalesced into one request), outside the GIL.

Writes stay with Beam for now (``paths.create_object``): Arrow's multipart writer once failed a
completion against rclone's server (NoSuchUpload), not yet explained. Beam's writer appends each
write to a bytes object and uploads every object in three requests: the next cost to cut. Listing,
existence and deletes stay with Beam's ``FileSystems`` (``paths.py``): they are few per run. Both
clients take the same settings: Beam's ``--s3_*`` flags when a run gives them, else the standard
``AWS_*`` environment variables (``AWS_ENDPOINT_URL`` for an S3-compatible server).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from apache_beam.options.pipeline_options import S3Options

from pipelines.runtime import compat
from pipelines.settings import s3_checksums_when_required, s3_environment

_FILESYSTEMS: dict[tuple, pafs.S3FileSystem] = {}
_LOCK = threading.Lock()
# The options last looked at and their file system: reading Beam's options builds an argument parser
# (milliseconds), too slow to do for every object opened.
_LAST: list[tuple[object, pafs.S3FileSystem]] = []


def handles(path: str) -> bool:
    """Whether Arrow's S3 client reads and copies ``path`` (``s3://`` objects; writes stay with Beam)."""
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
    key = tuple(sorted((k, str(v)) for k, v in given.items()))
    with _LOCK:
        found = _FILESYSTEMS.get(key)
        if found is None:
            s3_checksums_when_required()  # the C++ SDK reads them as botocore does
            found = _FILESYSTEMS[key] = pafs.S3FileSystem(**_arrow_arguments(given))
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


def _key(path: str) -> str:
    return path[len("s3://") :]


def open_input(path: str) -> pa.NativeFile:
    """A seekable reader of the object (ranged requests for what is read)."""
    return filesystem().open_input_file(_key(path))


def copy(sources: list[str], destinations: list[str]) -> None:
    """Server-side copies, one CopyObject request each (up to 5 GB an object), eight at a time.

    Not Beam's copy: boto3's managed copy turns an object over 8 MB into a multipart copy, whose parts
    some S3-compatible servers answer without the ETag boto3 reads (rclone's), and Beam then reports
    no error: the destination was simply missing."""
    fs = filesystem()
    with ThreadPoolExecutor(max_workers=8) as pool:
        pairs = zip(sources, destinations, strict=True)
        list(pool.map(lambda pair: fs.copy_file(_key(pair[0]), _key(pair[1])), pairs))
