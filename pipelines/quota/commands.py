"""usage-billing quota: meter, show and explain."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from pipelines.errors import UsageBillingError
from pipelines.quota.show import pool_state
from pipelines.runtime.console import (
    BEAM,
    LAKE,
    AccountOpt,
    DateOpt,
    FromOpt,
    ToOpt,
    lake_settings,
    out,
    settings_of,
    step,
    warehouse_of,
)
from pipelines.runtime.context import RunContext, StepOptions, split_argv
from pipelines.runtime.dates import parse_date
from pipelines.warehouse.remeter import stale_dates

quota_app = typer.Typer(no_args_is_help=False, help="Quota pools: metering and balances.")


@quota_app.command("meter", context_settings=BEAM)
def quota_meter(
    ctx: typer.Context,
    date: DateOpt = None,
    start: FromOpt = None,
    end: ToOpt = None,
    month: Annotated[str | None, typer.Option("--month", help="a whole month, YYYY-MM")] = None,
    stale: Annotated[
        bool,
        typer.Option("--stale", help="every metered day an accounts load or a plan change made out of date"),
    ] = False,
) -> None:
    """Meter account-local dates against the quota pools (Beam flags after --)."""
    from pipelines.quota import meter  # lazy: apache_beam

    s = settings_of(ctx)
    if stale:
        if date or start or end or month:
            raise UsageBillingError("give either --stale or dates, not both")
        _meter_stale(s, ctx.args)
        return
    dates = meter.meter_dates(date, start, end, month)
    _, flags, beam_args = split_argv(ctx.args)
    with step("metering quota pools"), RunContext.open(s, beam_args) as context:
        result = meter.run(context, dates, StepOptions(flags.run_id))
    out.print(", ".join(f"{name}: {n:,} rows" for name, n in result.counts.items()))
    out.print(f"notifications: {result.notifications:,} written (thresholds crossed and retractions)")
    for note in result.notes:
        out.print(note)
    seconds = result.seconds
    out.print(f"Beam pipeline {seconds['pipeline']:.1f} s, warehouse load {seconds['load']:.1f} s")


def _meter_stale(s, beam_args: list[str]) -> None:
    from pipelines.quota.meter import meter_runs  # lazy: apache_beam

    with RunContext.open(s, beam_args) as context:
        days = stale_dates(context.engine, context.catalog)
        if not days:
            out.print("no metered day is out of date")
            return
        with step(f"metering {len(days)} out-of-date day(s) again"):
            runs = meter_runs(context, days)
    out.print(f"metered again: {', '.join(runs)}")


@quota_app.command("show")
def quota_show(
    ctx: typer.Context,
    account: AccountOpt,
    at: Annotated[str | None, typer.Option("--at", help="ISO time with zone (default: now)")] = None,
) -> None:
    """Each pool of the account's plan at a moment: allowance, used, remaining and when it resets."""
    s = settings_of(ctx)
    engine = warehouse_of(ctx)
    view = pool_state(engine, s.catalog, account, at)
    out.print(view.header)
    for line in view.lines:
        out.print(line, markup=False, highlight=False)


@quota_app.command("explain", context_settings=LAKE)
def quota_explain(
    ctx: typer.Context,
    event_id: Annotated[str, typer.Option("--event-id", help="the event's id")],
    date: Annotated[
        str | None, typer.Option("--date", help="its UTC date, YYYY-MM-DD (default: search every date)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object (for support tools)")] = False,
) -> None:
    """Why one event was charged what it was: its pools, what each covered, the overage and its price."""
    from pipelines.quota.explain import as_dict, explain_event, render  # lazy: apache_beam

    s = lake_settings(ctx)
    day = parse_date(date, "--date") if date is not None else None
    engine = warehouse_of(ctx)
    charge = explain_event(engine, s.lake, s.catalog, event_id, day)
    if as_json:
        sys.stdout.write(json.dumps(as_dict(charge), indent=2) + "\n")
        return
    for line in render(charge):
        out.print(line, markup=False, highlight=False, soft_wrap=True)
