"""
### retirement_weekly

Runs when `usage_daily` publishes `usage_week_complete` (a Sunday's data is in), or by hand with
`{"as_of": "YYYY-MM-DD"}`: refreshes the weekly adoption tables, runs the declining-adoption detector
and writes the retirement report (HTML, JSON, Markdown) under `$USAGE_BILLING_REPORTS/<as_of>/`,
with each candidate's migration preview of the last complete month (`preview-<model>/`) and its
accounts to contact (`accounts-<model>.csv`); candidates land in `retirement_candidates`, the
preview's summary in their details. The task returns the preview per candidate in words.
Rerunning a week replaces its rows and files.
"""

from __future__ import annotations

from airflow.sdk import Param, dag, task

from pipelines.jobs.dag_defaults import DEFAULT_ARGS, START, TAGS, WEEK_COMPLETE


@dag(
    dag_id="retirement_weekly",
    schedule=[WEEK_COMPLETE],
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=[*TAGS, "adoption", "weekly"],
    params={
        "as_of": Param(None, type=["null", "string"], description="YYYY-MM-DD; default: from the asset event")
    },
    doc_md=__doc__,
)
def retirement_weekly():
    @task
    def resolve_as_of(params=None, triggering_asset_events=None, logical_date=None) -> str:
        import datetime as dt

        if params and params.get("as_of"):
            return params["as_of"]
        for events in (triggering_asset_events or {}).values():
            for event in events:
                if event.extra.get("as_of"):
                    return event.extra["as_of"]
        day = logical_date.date()
        return (day - dt.timedelta(days=(day.weekday() + 1) % 7)).isoformat()  # the last Sunday

    @task
    def report(as_of: str) -> dict:
        from pipelines.jobs.tasks import retirement_report

        return retirement_report(as_of)

    report(resolve_as_of())


retirement_weekly()
