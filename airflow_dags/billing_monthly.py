"""
### billing_monthly

Runs when `usage_daily` publishes `usage_month_closed` (a month has ended and its grace period for
late events has passed), or by hand with `{"month": "YYYY-MM"}`. Meters again the month's days that
an accounts load or a change of the catalog's plans made out of date, drafts the month's invoices, checks
the reconciliation (tokens in usage_daily = metered = on documents; stops otherwise), finalizes them
(gapless numbers), exports CSV and HTML, then re-drafts the earlier finalized months: late events
that changed an account become adjustment documents, which are reconciled and finalized too.

Each step is idempotent: re-drafting replaces drafts only, finalizing numbers only drafts, an export
rewrites its folder.
"""

from __future__ import annotations

from airflow.sdk import Param, dag, task

from pipelines.jobs.chain import MONTHLY
from pipelines.jobs.dag_defaults import DEFAULT_ARGS, MONTH_CLOSED, START, TAGS


@dag(
    dag_id="billing_monthly",
    schedule=[MONTH_CLOSED],
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=[*TAGS, "billing", "monthly"],
    params={
        "month": Param(None, type=["null", "string"], description="YYYY-MM; default: from the asset event")
    },
    doc_md=__doc__,
)
def billing_monthly():
    @task
    def resolve_month(params=None, triggering_asset_events=None, logical_date=None) -> str:
        from pipelines.jobs.tasks import previous_month

        if params and params.get("month"):
            return params["month"]
        for events in (triggering_asset_events or {}).values():
            for event in events:
                if event.extra.get("month"):
                    return event.extra["month"]
        return previous_month(logical_date.date())

    @task
    def monthly_step(name: str, state: dict | str) -> dict:
        from pipelines.jobs.tasks import monthly_step

        return monthly_step(name, state)

    @task
    def adjust_earlier_months(state: dict) -> list[dict]:
        from pipelines.jobs.tasks import adjust_months, months_to_adjust

        return adjust_months(months_to_adjust(state["month"]))

    # one task per step of the monthly chain, named as the step, each given the state the one before
    # returned; a reconciliation that fails needs a person, not a retry
    state = resolve_month()
    for step in MONTHLY:
        settings: dict = {"retries": 0} if step.gate else {}
        state = monthly_step.override(task_id=step.name, **settings)(step.name, state)
        if step.name == "finalize":
            adjust_earlier_months(state)


billing_monthly()
