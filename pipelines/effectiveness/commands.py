"""usage-billing effectiveness: compute the weekly figures and write the report."""

from __future__ import annotations

from typing import Annotated

import typer

from pipelines.runtime.console import (
    BEAM,
    DateOpt,
    FromOpt,
    OutOpt,
    ToOpt,
    dates_argv,
    out,
    settings_of,
    step,
    warehouse_of,
)
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
    from pipelines.effectiveness import pipeline

    s = settings_of(ctx)
    argv = [*s.argv(), *(dates_argv(date, start, end) if (date or start or end) else []), *ctx.args]
    with step("computing effectiveness"):
        weeks = pipeline.run(argv)
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
    import datetime as dt

    from billing.effectiveness import complete_weeks
    from pipelines.effectiveness import pipeline, report
    from pipelines.effectiveness.figures import sentence
    from pipelines.errors import UsageBillingError
    from pipelines.runtime.options import parse_date

    s = settings_of(ctx)
    first, last = parse_date(start, "--from date"), parse_date(end, "--to date")
    if last < first:
        raise UsageBillingError(f"--to {last} is before --from {first}")
    folder = output_folder(out_dir, s.lake, s.landing, create=False)
    engine = warehouse_of(ctx)
    with step(f"effectiveness report {first} .. {last}"):
        pipeline.run([*s.argv(), *ctx.args])  # the weeks that changed since they were computed
        weeks = complete_weeks(first, last)
        missing = report.uncomputed(engine, s.lake, weeks) if weeks else []
        if missing:
            pipeline.run(
                [
                    *s.argv(),
                    "--from",
                    str(missing[0]),
                    "--to",
                    str(missing[-1] + dt.timedelta(days=6)),
                    *ctx.args,
                ]
            )
        built = report.run(engine, s.lake, s.catalog, first, last, folder)
    view = built.view
    out.print(
        f"{len(view.weeks)} week(s), {view.tasks:,} tasks, {built.data['orphan_outcomes']:,} orphan "
        f"outcomes, {built.data['open_tasks']:,} open tasks; report in {folder / 'effectiveness.html'}"
    )
    for item in view.head_to_head:
        out.print(sentence(item, view.currency))
