"""
### usage_daily

One landing date per run (the data interval's start, UTC): wait for `landing/<date>/`, ingest it,
run the data-quality gate on every partition it changed, aggregate those dates, re-meter the quota
pools they touch (to the end of their periods), deliver the notifications of the thresholds that
metering crossed (beside the rest: a receiver that is down holds nothing back), and compute the
effectiveness of every ISO week whose
requests or task outcomes changed. Late events are recomputed: ingest reports the past
dates it changed and the next steps include them, with any date an earlier, interrupted run left in the
recompute queue (the aggregate and meter steps mark the queue rows they took).

Every task reads and writes only its dates' partitions and replaces them, so a rerun or a backfill
(`airflow backfill create --dag-id usage_daily --from-date ... --to-date ...`) is safe. A failed quality gate
stops the run with a message naming the checks; accept with `usage-billing dq accept` and clear it.

Publishes `usage_daily` every day, `usage_week_complete` after a Sunday and `usage_month_closed`
when the grace period after a month end has passed (the weekly and monthly DAGs run on those).
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import dag, task

from pipelines.jobs.chain import DAILY
from pipelines.jobs.dag_defaults import (
    DEFAULT_ARGS,
    MONTH_CLOSED,
    START,
    TAGS,
    USAGE_DAY,
    WEEK_COMPLETE,
)

PUBLISHED = next(step for step in DAILY if step.publishes == USAGE_DAY.name)  # after metering


@dag(
    dag_id="usage_daily",
    schedule="@daily",
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=[*TAGS, "daily"],
    doc_md=__doc__,
)
def usage_daily():
    @task.sensor(poke_interval=300, timeout=6 * 3600, mode="reschedule")
    def wait_for_landing(ds=None) -> bool:
        from pipelines.jobs.tasks import landing_ready

        return landing_ready(ds)

    @task
    def daily_step(name: str, state: dict | None, ds=None, outlet_events=None) -> dict:
        from pipelines.jobs.tasks import daily_step

        done = daily_step(name, state, ds)
        if name == PUBLISHED.name:
            outlet_events[USAGE_DAY].extra = {"date": ds, "recomputed": done["aggregated"]}
        return done

    @task
    def deliver_notifications(_: dict) -> dict:
        """Thresholds the metering crossed, to the webhook (or JSON lines under the lake); a leaf, so a
        receiver that is down never holds billing back: what is not sent stays pending."""
        from pipelines.jobs.tasks import deliver_notifications

        return deliver_notifications()

    @task(outlets=[WEEK_COMPLETE])
    def week_complete(_: dict, ds=None, outlet_events=None) -> str:
        from airflow.exceptions import AirflowSkipException

        day = dt.date.fromisoformat(ds)
        if day.weekday() != 6:
            raise AirflowSkipException(f"{ds} is not a Sunday")
        outlet_events[WEEK_COMPLETE].extra = {"as_of": ds}
        return ds

    @task(outlets=[MONTH_CLOSED])
    def month_closed(_: dict, ds=None, outlet_events=None) -> str:
        from airflow.exceptions import AirflowSkipException

        from pipelines.jobs.tasks import month_grace_days

        grace = month_grace_days()
        day = dt.date.fromisoformat(ds)
        closed = day - dt.timedelta(days=grace)
        if closed.month == (closed + dt.timedelta(days=1)).month:
            raise AirflowSkipException(f"{ds} is not {grace} days after a month end")
        month = closed.strftime("%Y-%m")
        outlet_events[MONTH_CLOSED].extra = {"month": month}
        return month

    # one task per step of the daily chain, named as the step, each given the state the one before
    # returned; a gate's failure needs a person, not a retry
    previous = wait_for_landing()
    state = None
    for step in DAILY:
        settings: dict = {"retries": 0} if step.gate else {}
        if step.publishes:
            settings["outlets"] = [USAGE_DAY]
        done = daily_step.override(task_id=step.name, **settings)(step.name, state)
        previous >> done
        previous = state = done
        if step is PUBLISHED:
            deliver_notifications(done)
            week_complete(done)
            month_closed(done)


usage_daily()
