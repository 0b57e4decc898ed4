"""A real S3 API for the tests: moto's server on 127.0.0.1, reached through Beam's own S3 file system.

``s3_server()`` starts one for the test session on a free port; ``S3Store`` gives a test the same
small interface as ``tests.memfs.STORE`` (put, get, under, clear) on a bucket of it, through boto3.
The lake's code reaches it like production does: the standard ``AWS_*`` environment variables (which
boto3 reads) or Beam's ``--s3_*`` flags.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

S3_ENV = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def s3_server() -> Iterator[str]:
    """moto's S3 server on loopback, in a process of its own (in this one it would share the GIL with
    the pipelines' threads); yields its endpoint URL once it answers."""
    import subprocess
    import sys
    import time
    import urllib.request

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1)
                break
            except OSError:
                if server.poll() is not None:
                    raise RuntimeError("moto's S3 server did not start") from None
                time.sleep(0.05)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=10)


class S3Store:
    """One fresh bucket: ``root`` is ``s3://<bucket>``; paths are full ``s3://`` URLs."""

    def __init__(self, endpoint: str) -> None:
        import boto3

        self.client = boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )
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
