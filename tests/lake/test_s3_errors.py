"""A misconfigured S3 lake is one line, at once: Beam's S3 client alone would retry an unreachable
endpoint or missing credentials with back-off for minutes, logging a traceback at each attempt."""

from __future__ import annotations

import pytest

from pipelines.cli import main
from pipelines.lake.paths import use_filesystem_options
from tests.conftest import small_dates
from tests.s3 import S3Store, _free_port

pytestmark = pytest.mark.slow
CREDENTIALS = ["--s3_access_key_id=test", "--s3_secret_access_key=test", "--s3_region_name=us-east-1"]


@pytest.fixture(autouse=True)
def no_aws_environment(monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role to look for here
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    yield
    use_filesystem_options([])


def _one_line(capsys) -> str:  # type: ignore[no-untyped-def]
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_an_unreachable_endpoint_is_one_line(capsys, sqlite_settings):
    endpoint = f"--s3_endpoint_url=http://127.0.0.1:{_free_port()}"  # nothing listens there
    lake = ["--lake", "s3://lake-bucket/lake", "--database-url", sqlite_settings.database_url]
    assert main([*lake, "lake", "files", "events", "--", endpoint, *CREDENTIALS]) == 2
    assert "cannot reach the bucket of s3://lake-bucket/lake: Could not connect" in _one_line(capsys)
    day = small_dates()[0].isoformat()
    assert main([*lake, "usage", "aggregate", "--date", day, "--", endpoint, *CREDENTIALS]) == 2
    assert "cannot reach the bucket of s3://lake-bucket/lake" in _one_line(capsys)


def test_a_missing_bucket_and_missing_credentials_are_one_line(capsys, s3_endpoint, sqlite_settings):
    endpoint = f"--s3_endpoint_url={s3_endpoint}"
    bucket = S3Store(s3_endpoint)
    try:
        base = ["--database-url", sqlite_settings.database_url, "--landing", f"{bucket.root}/landing"]
        day = small_dates()[0].isoformat()
        missing = [*base, "--lake", "s3://no-such-bucket-here/lake"]
        assert main([*missing, "events", "ingest", "--date", day, "--", endpoint, *CREDENTIALS]) == 2
        assert _one_line(capsys).endswith("s3://no-such-bucket-here/lake: no such bucket")
        assert (
            main(
                [
                    *base,
                    "--lake",
                    f"{bucket.root}/lake",
                    "quota",
                    "explain",
                    "--event-id",
                    "e",
                    "--",
                    endpoint,
                ]
            )
            == 2
        )
        assert "no AWS credentials to read the bucket of" in _one_line(capsys)
    finally:
        bucket.clear()
