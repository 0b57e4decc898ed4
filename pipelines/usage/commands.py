"""usage-billing usage (aggregate): the usage stage's command."""

from __future__ import annotations

import typer

from pipelines.runtime.console import BEAM, DateOpt, FromOpt, ToOpt, out, settings_of, step
from pipelines.runtime.context import RunContext, StepOptions, split_argv
from pipelines.runtime.dates import date_range

usage_app = typer.Typer(no_args_is_help=False, help="Usage aggregates.")


@usage_app.command("aggregate", context_settings=BEAM)
def usage_aggregate(
    ctx: typer.Context, date: DateOpt = None, start: FromOpt = None, end: ToOpt = None
) -> None:
    """Aggregate lake partitions into usage_daily (Beam flags after --)."""
    from pipelines.usage import aggregate  # lazy: apache_beam

    s = settings_of(ctx)
    dates = date_range(date, start, end)
    _, flags, beam_args = split_argv(ctx.args)
    with step("aggregating"), RunContext.open(s, beam_args) as context:
        loaded = aggregate.run(context, dates, StepOptions(flags.run_id))
    out.print(f"usage_daily: {sum(loaded.values()):,} rows for {len(loaded)} day(s)")
