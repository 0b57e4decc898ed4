"""``USAGE_BILLING_BEAM_ARGS``: the Beam flags every pipeline an Airflow task runs gets (the runner and
its cluster), whose file-system flags also configure the task's other lake access."""

from __future__ import annotations

import pytest

from pipelines.errors import UsageBillingError
from pipelines.jobs import tasks
from pipelines.lake.paths import use_filesystem_options
from tests.conftest import small_dates
from tests.s3 import S3Store


@pytest.fixture
def task_env(monkeypatch, sqlite_settings):  # type: ignore[no-untyped-def]
    for name, value in (
        ("USAGE_BILLING_CONFIG", sqlite_settings.config),
        ("USAGE_BILLING_DATABASE_URL", sqlite_settings.database_url),
        ("USAGE_BILLING_LAKE", sqlite_settings.lake),
        ("USAGE_BILLING_LANDING", sqlite_settings.landing),
    ):
        monkeypatch.setenv(name, value)
    return monkeypatch


def test_every_pipeline_task_runs_with_the_beam_args(task_env):
    """A runner Beam does not know stops each pipeline task with Beam's one line: the flags got there."""
    day = small_dates()[0].isoformat()
    task_env.setenv("USAGE_BILLING_BEAM_ARGS", "--runner=NoSuchRunner")
    state = {"landing": [day], "todo": [day], "aggregated": [day]}
    for step in ("ingest", "aggregate", "meter"):
        with pytest.raises(UsageBillingError, match="NoSuchRunner"):
            tasks.daily_step(step, state if step != "ingest" else None, day)
    task_env.setenv("USAGE_BILLING_BEAM_ARGS", "--direct_num_workers=1")
    assert tasks.daily_step("ingest", None, day)["todo"]  # and flags Beam knows run as given


def test_beam_args_that_are_not_shell_words_are_one_line(task_env):
    task_env.setenv("USAGE_BILLING_BEAM_ARGS", "--runner='unclosed")
    with pytest.raises(UsageBillingError, match="USAGE_BILLING_BEAM_ARGS is not shell words"):
        tasks.settings()


@pytest.mark.slow
def test_the_file_system_flags_reach_the_landing_sensor(task_env, s3_endpoint, small_landing):
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        task_env.delenv(name, raising=False)
    bucket = S3Store(s3_endpoint)
    day = small_dates()[0].isoformat()
    try:
        for path in sorted((small_landing / day).iterdir()):
            bucket.put(f"{bucket.root}/landing/{day}/{path.name}", path.read_bytes())
        task_env.setenv("USAGE_BILLING_LANDING", f"{bucket.root}/landing")
        flags = f"--s3_endpoint_url={s3_endpoint} --s3_access_key_id=test --s3_secret_access_key=test"
        task_env.setenv("USAGE_BILLING_BEAM_ARGS", f"--runner=FnApiRunner {flags} --s3_region_name=us-east-1")
        assert tasks.landing_ready(day)
        assert not tasks.landing_ready("2026-01-01")
    finally:
        use_filesystem_options([])
        bucket.clear()
