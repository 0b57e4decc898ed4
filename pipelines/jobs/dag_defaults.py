"""What the three DAGs (airflow_dags/) share: the assets that chain them, default arguments, the start date.

Imported by the DAG files at parse time, so it imports only Airflow's SDK, pendulum (the [airflow]
extra) and ``pipelines.settings``, nothing that touches the warehouse.

No database, Variable or connection access here or in the DAG files at parse time; settings are the
USAGE_BILLING_* environment variables, read by the tasks when they run (docs/airflow.md).
"""

from __future__ import annotations

import datetime as dt

import pendulum
from airflow.sdk import Asset

from pipelines.settings import Settings

START = pendulum.datetime(2026, 2, 1, tz="UTC")
TAGS = ["usage-billing"]
DEFAULT_ARGS = {
    "owner": "data-platform",
    "retries": Settings.from_env().dag_retries,  # USAGE_BILLING_DAG_RETRIES; the tests set 0
    "retry_delay": dt.timedelta(minutes=5),
    "retry_exponential_backoff": True,
}
# Grace period after a month closes before it is invoiced: events may land late (lateness window).

USAGE_DAY = Asset(uri="usage-billing://warehouse/usage_daily", name="usage_daily")
WEEK_COMPLETE = Asset(uri="usage-billing://warehouse/usage_week_complete", name="usage_week_complete")
MONTH_CLOSED = Asset(uri="usage-billing://warehouse/usage_month_closed", name="usage_month_closed")
