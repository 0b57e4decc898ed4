"""Lake paths and objects: where a dataset's partitions live, listing, small JSON files.

The lake is Parquet partitions ``<lake>/<dataset>/date=YYYY-MM-DD/*.parquet``. Paths go through
Beam's ``FileSystems``, so a ``gs://`` or ``s3://`` lake works like a local one. On an object store
a committed partition's files are the ones its manifest (``_manifest.json``) names (``commit.py``):
``list_files`` and ``partition_file`` read through it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import fnmatch
import functools
import json
import os
import posixpath
from collections.abc import Iterator
from typing import Any

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options import pipeline_options
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.errors import UsageBillingError
from pipelines.lake import objects
from pipelines.runtime import compat
from pipelines.runtime.files import local_atomic

EVENTS = "events"
OUTCOMES = "outcomes"
QUARANTINE = "quarantine"
STAGING = "_staging"
META_FILE = "_lake.json"
MANIFEST = "_manifest.json"  # an object-store partition's files (``commit.commit``)
DEFAULT_SHARDS = 8
_OLD = ".old-"
ARROW_SCHEMA_KEY = b"ARROW:schema"  # where pyarrow keeps a file's Arrow schema in its footer


@contextlib.contextmanager
def writing(path: str) -> Iterator[None]:
    """A failed write (read-only folder, full disk, lost mount) becomes one clear line naming the path."""
    try:
        yield
    except OSError as exc:
        raise UsageBillingError(f"cannot write {exc.filename or path}: {exc.strerror or exc}") from None


def io_errors(fn):
    """``writing`` around a function whose first argument is the path it writes."""

    @functools.wraps(fn)
    def wrapper(path, *args, **kwargs):
        with writing(path):
            return fn(path, *args, **kwargs)

    return wrapper


def use_filesystem_options(flags: list[str] | None = None) -> None:
    """Give Beam's file systems the run's Beam flags, for every lake access outside a pipeline too
    (listing, commits, the gate, reports, ``quota explain``): an ``s3://`` lake needs its client's
    options (``--s3_endpoint_url`` and friends after ``--``, or the standard ``AWS_*`` environment
    variables, which boto3 reads when no flag names them)."""
    known, _ = _parse_filesystem_flags(flags or [])  # the runner's own flags are not known here
    values = {k: v for k, v in vars(known).items() if v is not None and v is not False}
    set_filesystem_options(PipelineOptions.from_dictionary(values))


# Beam's option groups that configure a file system: what a command that runs no pipeline accepts after
# ``--``, and what a Dask worker is given (``pipelines.runtime.dask``).
FILESYSTEM_OPTION_GROUPS = ("S3Options", "AzureOptions", "HadoopFileSystemOptions", "GoogleCloudOptions")


def _filesystem_parser():
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    for group in FILESYSTEM_OPTION_GROUPS:
        getattr(pipeline_options, group)._add_argparse_args(parser)
    return parser


def _parse_filesystem_flags(flags: list[str]):
    """(the file-system flags as a namespace, the other arguments); a malformed flag is one line."""
    try:
        return _filesystem_parser().parse_known_args(list(flags))
    except argparse.ArgumentError as exc:
        raise UsageBillingError(f"{exc} (Beam's file-system flags)") from None


def filesystem_flags(flags: list[str]) -> list[str]:
    """``flags`` checked to be Beam file-system flags only (``--s3_endpoint_url=...`` and friends):
    a command that runs no pipeline takes nothing else, so a mistyped option is an error, not a Beam
    flag silently dropped."""
    _, unknown = _parse_filesystem_flags(flags)
    if unknown:
        raise UsageBillingError(
            f"unknown option {unknown[0]!r}: this command takes only Beam's file-system flags "
            "(--s3_endpoint_url, --s3_region_name, ...) beyond its own options"
        )
    return list(flags)


def filesystem_values(options) -> dict[str, object]:
    """The file-system settings among a run's Beam options (not the default ones), by Beam's name."""
    names = {a.dest for a in _filesystem_parser()._actions}
    given = options.get_all_options(drop_default=True, retain_unknown_options=False)
    return {k: v for k, v in given.items() if k in names and v is not None}


def set_filesystem_options(options) -> None:
    """``FileSystems.set_options``, and S3 clients made anew for them (``compat.share_s3_clients``)."""
    FileSystems.set_options(options)
    compat.share_s3_clients(fresh=True)
    objects.forget()


_REACHED: set[tuple[str, int]] = set()


def check_reachable(root: str) -> None:
    """An ``s3://`` root's bucket answers with the options in force, or one line saying why not.

    Beam's S3 client retries an unreachable endpoint or missing credentials with exponential back-off
    for minutes, logging a traceback at each attempt, before the command fails: a run checks the
    bucket once first (botocore's own few retries only). Other roots: nothing to check here."""
    if not root.startswith("s3://"):
        return
    from apache_beam.io.aws import s3io  # lazy: boto3

    compat.share_s3_clients()
    bucket = root[len("s3://") :].split("/", 1)[0]
    client = s3io.boto3_client.Client(options=compat.filesystem_options()).client
    if (bucket, id(client)) in _REACHED:
        return
    import botocore.exceptions as boto  # lazy: botocore

    where = f"the bucket of {root}"
    try:
        client.head_bucket(Bucket=bucket)
    except boto.NoCredentialsError:
        raise UsageBillingError(
            f"no AWS credentials to read {where}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or an "
            "instance role), or pass --s3_access_key_id and --s3_secret_access_key after --"
        ) from None
    except boto.ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        why = {403: "access denied: check the credentials and the bucket's policy", 404: "no such bucket"}
        raise UsageBillingError(f"cannot read {where}: {why.get(status, exc)}") from None
    except boto.BotoCoreError as exc:  # no connection, a bad endpoint URL, a timeout
        raise UsageBillingError(f"cannot reach {where}: {exc}") from None
    _REACHED.add((bucket, id(client)))


def is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def join(*parts: str) -> str:
    return FileSystems.join(*parts) if not is_local(parts[0]) else posixpath.join(*parts)


def partition(lake: str, dataset: str, day: dt.date | str) -> str:
    return join(lake, dataset, f"date={day}")


def staging(lake: str, run_id: str) -> str:
    return join(lake, STAGING, run_id)


def open_object(path: str):
    """A remote file's bytes as stored (Beam's FileSystems would otherwise decompress a ``.gz`` name),
    seekable; an ``s3://`` object through Arrow's S3 client (``objects.py``)."""
    if objects.handles(path):
        return objects.open_input(path)
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def create_object(path: str):
    """A remote file to write, its bytes stored as given (no compression chosen by the name); an
    ``s3://`` object in one request when it is closed (``objects.ObjectWriter``)."""
    if objects.handles(path):
        return objects.ObjectWriter(
            path, lambda: FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)
        )
    return FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)


def exists(path: str) -> bool:
    """A file exists (on an object store: an object; a folder there is only a prefix, see
    ``folder_exists``)."""
    return os.path.exists(path) if is_local(path) else FileSystems.exists(path)


def objects_under(folder: str, limit: int | None = None) -> list[str]:
    """Every object whose name starts with ``folder/`` (an object store has no directories)."""
    found = FileSystems.match([join(folder, "**")], limits=None if limit is None else [limit])
    return sorted(m.path for m in found[0].metadata_list)


def folder_exists(path: str) -> bool:
    """A folder: a directory on a local disk; on an object store, any object under ``path/``."""
    return os.path.isdir(path) if is_local(path) else bool(objects_under(path, limit=1))


def list_folders(directory: str) -> list[str]:
    """The folders directly inside ``directory``, sorted (on an object store: the distinct next
    name component of the objects under it)."""
    if is_local(directory):
        if not os.path.isdir(directory):
            return []
        return sorted(join(directory, n) for n in os.listdir(directory) if os.path.isdir(join(directory, n)))
    prefix = join(directory, "")
    names = {p[len(prefix) :].split("/", 1)[0] for p in objects_under(directory) if "/" in p[len(prefix) :]}
    return sorted(join(directory, n) for n in names)


def list_files(directory: str, pattern: str = "*.parquet") -> list[str]:
    """Files directly inside ``directory`` matching ``pattern``, sorted by name (empty if it does not
    exist). On an object store a committed partition's files are the ones its manifest names
    (``commit.commit``): the paths returned are where they are stored, under the names they have in
    the partition."""
    if is_local(directory):
        if not os.path.isdir(directory):
            return []
        return sorted(join(directory, n) for n in os.listdir(directory) if fnmatch.fnmatch(n, pattern))
    if objects.handles(directory):
        listed = objects.listing(directory)
    else:
        found = FileSystems.match([join(directory, "*")])[0].metadata_list
        listed = {posixpath.basename(m.path): m.path for m in found}
    if MANIFEST in listed:
        files = manifest_files(directory)
        return [files[n] for n in sorted(files) if fnmatch.fnmatch(n, pattern)]
    return [listed[n] for n in sorted(listed) if fnmatch.fnmatch(n, pattern)]


def manifest_files(directory: str) -> dict[str, str]:
    """name -> stored path of the files a partition's manifest names (empty without a manifest)."""
    path = join(directory, MANIFEST)
    try:
        manifest = read_json(path)
    except (OSError, ValueError) as exc:
        if not exists(path):
            return {}
        raise UsageBillingError(f"cannot read the partition manifest {path}: {exc}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise UsageBillingError(f"{path} is not a partition manifest (no files object)")
    return {name: join(directory, stored) for name, stored in manifest["files"].items()}


def partition_file(directory: str, name: str) -> str:
    """Where the file ``name`` of a committed partition is stored: ``directory/name`` on a local disk
    (and on an object store without a manifest), else the path its manifest gives (a path that does
    not exist when the manifest does not name it)."""
    if is_local(directory):
        return join(directory, name)
    return manifest_files(directory).get(name, join(directory, name))


def stamps(paths: list[str]) -> list[tuple[str, int, float]]:
    """(path, size, modification time) of each file: what changes when a file is rewritten."""
    if not paths:
        return []
    if is_local(paths[0]):
        return [(p, (st := os.stat(p)).st_size, st.st_mtime_ns) for p in paths]
    if objects.handles(paths[0]):
        # One HEAD request each through Arrow's client; Beam's match of an exact name makes three
        # (exists, size, time), each through boto3's Python. Seconds since the epoch, as Beam gives.
        found_infos = objects.filesystem().get_file_info([objects.key(p) for p in paths])
        return [
            (p, info.size, info.mtime_ns / 1e9)
            for p, info in zip(paths, found_infos, strict=True)
            if info.type == objects.FILE
        ]
    found = FileSystems.match(paths)
    return [(m.path, m.size_in_bytes, m.last_updated_in_seconds) for r in found for m in r.metadata_list]


def partition_dates(lake: str, dataset: str) -> list[dt.date]:
    """The dates that have a committed partition of ``dataset``."""
    root = join(lake, dataset)
    if is_local(root):
        names = os.listdir(root) if os.path.isdir(root) else []
    else:
        matched = FileSystems.match([join(root, "date=*/*")])[0].metadata_list
        names = [posixpath.basename(posixpath.dirname(m.path)) for m in matched]
    out = set()
    for name in names:
        if name.startswith("date=") and _OLD not in name:
            try:
                out.add(dt.date.fromisoformat(name[5:]))
            except ValueError:
                continue
    return sorted(out)


@io_errors
def write_json(path: str, payload: object) -> None:
    write_bytes(path, json.dumps(payload, sort_keys=True, default=str).encode())


def write_bytes(path: str, data: bytes) -> None:
    """A whole file at once (a local file appears complete or not at all)."""
    if is_local(path):
        with local_atomic(path) as partial, open(partial, "wb") as handle:
            handle.write(data)
    else:
        with create_object(path) as handle:
            handle.write(data)


def read_json(path: str) -> Any:  # what the JSON holds
    with open(path, "rb") if is_local(path) else open_object(path) as handle:
        return json.loads(handle.read())
