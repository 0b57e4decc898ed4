"""A fresh bucket of the tests' S3 server for each test, reached through the standard ``AWS_*``
environment variables, as production reaches one."""

from __future__ import annotations

import pytest

from pipelines.lake.paths import use_filesystem_options
from tests.s3 import S3_ENV, S3Store


@pytest.fixture
def bucket(s3_endpoint, monkeypatch):  # type: ignore[no-untyped-def]
    for name, value in {**S3_ENV, "AWS_ENDPOINT_URL": s3_endpoint}.items():
        monkeypatch.setenv(name, value)
    use_filesystem_options([])
    store = S3Store(s3_endpoint)
    yield store
    store.clear()
    use_filesystem_options([])
