"""usage-billing events (generate, ingest, replay) and dq (check, accept): the ingest stage's commands."""

from __future__ import annotations

from typing import Annotated

import typer

from pipelines.errors import UsageBillingError
from pipelines.runtime.console import (
    BEAM,
    LAKE,
    DateOpt,
    FromOpt,
    ToOpt,
    lake_settings,
    out,
    settings_of,
    step,
    warehouse_of,
)
from pipelines.runtime.context import RunContext, split_argv
from pipelines.runtime.dates import date_range, date_ranges, parse_date

events_app = typer.Typer(no_args_is_help=False, help="Usage events: generate and ingest.")


dq_app = typer.Typer(no_args_is_help=False, help="Data-quality gate on clean lake partitions.")


@events_app.command("ingest", context_settings=BEAM)
def events_ingest(ctx: typer.Context, date: DateOpt = None, start: FromOpt = None, end: ToOpt = None) -> None:
    """Validate, deduplicate and store landing files in the lake (Beam flags after --)."""
    from pipelines.ingest import events as ingest  # lazy: apache_beam
    from pipelines.ingest.options import IngestFlags, IngestOptions  # lazy: apache_beam

    s = settings_of(ctx)
    dates = date_range(date, start, end)
    _, flags, beam_args = split_argv(ctx.args, IngestFlags)
    options = IngestOptions.from_flags(flags)
    with step("ingesting"), RunContext.open(s, beam_args) as context:
        result = ingest.run(context, dates, options)
    print_ingest(result)


def print_ingest(result) -> None:
    out.print(
        f"run {result.run_id}: read {result.total('rows_read'):,} rows: clean {result.total('clean'):,}, "
        f"quarantined {result.total('quarantined'):,}, duplicates {result.total('duplicates'):,}"
    )
    for day, s in sorted(result.stats.items()):
        entries = s.get("not_read") or {}
        if entries:
            names = ", ".join(sorted(entries)[:5]) + (
                f" and {len(entries) - 5} more" if len(entries) > 5 else ""
            )
            out.print(
                f"landing {day}: {len(entries):,} entries not read ({names}): {next(iter(entries.values()))}"
            )
    if result.changed_dates:
        out.print(
            f"partitions changed: {len(result.changed_dates)} date(s), "
            f"{result.changed_dates[0]} .. {result.changed_dates[-1]}"
        )
    if result.outcome_stats:
        out.print(
            f"task outcomes: read {result.total('rows_read', True):,} rows: clean "
            f"{result.total('clean', True):,}, quarantined {result.total('quarantined', True):,}, "
            f"duplicates {result.total('duplicates', True):,}"
        )


@dq_app.command("check", context_settings=LAKE)
def dq_check(ctx: typer.Context, date: DateOpt = None, start: FromOpt = None, end: ToOpt = None) -> None:
    """Run the data-quality suite on committed partitions; store and render the results."""
    from pipelines.ingest import quality  # lazy: apache_beam
    from pipelines.ingest.quality_pages import html_path, index_path  # lazy: apache_beam

    s = lake_settings(ctx)
    dates = date_range(date, start, end)
    engine = warehouse_of(ctx)
    with step("checking data quality"):
        reports = quality.check_partitions(engine, s.lake, s.catalog, dates, "dq-check")
    passed = [r.day for r in reports if not r.failed_errors]
    if passed:
        rows = sum(r.rows for r in reports if not r.failed_errors)
        out.print(f"passed: {date_ranges(passed)} ({len(passed)} date(s), {rows:,} rows)")
    for r in reports:
        if r.failed_errors:
            state = "accepted" if r.accepted else "FAILED: " + ", ".join(r.failed_errors)
            out.print(f"{r.day}: {r.rows:,} rows, {state} ({html_path(s.lake, r.day)})")
    if not reports:
        raise UsageBillingError("no committed partition in those dates")
    out.print(f"every checked date: {index_path(s.lake)}")
    quality.require_passed(reports, s.lake)


@dq_app.command("accept", context_settings=LAKE)
def dq_accept(
    ctx: typer.Context,
    date: Annotated[str, typer.Option("--date", help="the date whose failed gate is accepted")],
    reason: Annotated[str, typer.Option("--reason", help="why the data is good enough anyway")],
) -> None:
    """Accept a failed data-quality gate for one date (recorded with who, when and why)."""
    from pipelines.ingest import quality  # lazy: apache_beam

    s = lake_settings(ctx)
    engine = warehouse_of(ctx)
    checks = quality.accept_and_render(engine, s.lake, parse_date(date), reason)
    out.print(
        f"accepted {', '.join(checks)} for {date}; rerun `usage-billing run-day --date {date}` to continue"
    )
