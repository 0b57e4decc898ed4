"""usage-billing effectiveness: compute the weekly figures and write the report."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

import typer

from billing.effectiveness import complete_weeks
from pipelines.effectiveness.figures import sentence
from pipelines.errors import UsageBillingError
from pipelines.runtime.console import (
    BEAM,
    DateOpt,
    FromOpt,
    OutOpt,
    ToOpt,
    out,
    settings_of,
    step,
)
from pipelines.runtime.context import RunContext, split_argv
from pipelines.runtime.dates import date_range, parse_date
from pipelines.runtime.outputs import output_folder

effectiveness_app = typer.Typer(
    no_args_is_help=False, help="One-pass rate, rework and end-to-end time per model and speed tier."
)


@effectiveness_app.command("compute", context_settings=BEAM)
def effectiveness_compute(
    ctx: typer.Context, date: DateOpt = None, start: FromOpt = None, end: ToOpt = None
) -> None:
    """Join task outcomes to their requests and store the ISO weeks touching the dates in
    task_effectiveness (without a date: the weeks that changed since they were computed)."""
    from pipelines.effectiveness import pipeline  # lazy: apache_beam

    s = settings_of(ctx)
    dates = date_range(date, start, end) if (date or start or end) else None
    _, flags, beam_args = split_argv(ctx.args)
    with step("computing effectiveness"), RunContext.open(s, beam_args) as context:
        weeks = pipeline.run(context, dates, pipeline.EffectivenessOptions(flags.run_id))
    if weeks:
        out.print(f"task_effectiveness: {len(weeks)} week(s) computed, {weeks[0]} .. {weeks[-1]}")
    else:
        out.print("task_effectiveness: no week to compute")


@effectiveness_app.command("report", context_settings=BEAM)
def effectiveness_report(
    ctx: typer.Context,
    start: Annotated[str, typer.Option("--from", help="first date, YYYY-MM-DD")],
    end: Annotated[str, typer.Option("--to", help="last date, YYYY-MM-DD (complete ISO weeks in between)")],
    out_dir: OutOpt,
) -> None:
    """effectiveness.json, .md and .html over the complete ISO weeks from --from to --to (weeks that
    changed or were never computed are computed first)."""
    from pipelines.effectiveness import pipeline, report  # lazy: apache_beam

    s = settings_of(ctx)
    first, last = parse_date(start, "--from date"), parse_date(end, "--to date")
    if last < first:
        raise UsageBillingError(f"--to {last} is before --from {first}")
    folder = output_folder(out_dir, s.lake, s.landing, create=False)
    with step(f"effectiveness report {first} .. {last}"), RunContext.open(s, ctx.args) as context:
        engine = context.engine
        pipeline.run(context)  # the weeks that changed since they were computed
        weeks = complete_weeks(first, last)
        missing = report.uncomputed(engine, s.lake, weeks) if weeks else []
        if missing:
            span = (missing[-1] - missing[0]).days + 7  # the weeks from the first to the last missing one
            pipeline.run(context, [missing[0] + dt.timedelta(days=i) for i in range(span)])
        built = report.run(engine, s.lake, s.catalog, first, last, folder)
    view = built.view
    out.print(
        f"{len(view.weeks)} week(s), {view.tasks:,} tasks, {built.data['orphan_outcomes']:,} orphan "
        f"outcomes, {built.data['open_tasks']:,} open tasks; report in {folder / 'effectiveness.html'}"
    )
    for item in view.head_to_head:
        out.print(sentence(item, view.currency))
