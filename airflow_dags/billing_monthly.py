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
    def remeter(month: str) -> str:
        from pipelines.jobs.tasks import remeter_month

        remeter_month(month)
        return month

    @task
    def draft(month: str) -> str:
        from pipelines.jobs.tasks import draft_month

        draft_month(month)
        return month

    @task(retries=0)  # a mismatch needs a person
    def reconcile(month: str) -> str:
        from pipelines.jobs.tasks import reconcile_month

        reconcile_month(month)
        return month

    @task
    def finalize(month: str) -> str:
        from pipelines.jobs.tasks import finalize_month

        finalize_month(month)
        return month

    @task
    def export(month: str) -> str:
        from pipelines.jobs.tasks import export_month

        return export_month(month)

    @task
    def adjust_earlier_months(month: str) -> list[dict]:
        from pipelines.jobs.tasks import adjust_months, months_to_adjust

        return adjust_months(months_to_adjust(month))

    month = finalize(reconcile(draft(remeter(resolve_month()))))
    export(month)
    adjust_earlier_months(month)


billing_monthly()
