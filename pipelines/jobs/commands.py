"""usage-billing run-day, demo, events generate and events replay: the jobs (the daily chain of
``jobs/chain.py``, the generator)."""

from __future__ import annotations

from typing import Annotated

import typer

from pipelines.errors import DataQualityError, UsageBillingError
from pipelines.ingest.commands import events_app, print_ingest
from pipelines.jobs.generate import GeneratorConfig, generate
from pipelines.jobs.landing import write_landing
from pipelines.runtime.console import BEAM, err, out, settings_of, step
from pipelines.runtime.context import RunContext
from pipelines.runtime.dates import date_ranges, parse_date

jobs_app = typer.Typer(no_args_is_help=False)


@jobs_app.command("run-day", context_settings=BEAM)
def run_day(
    ctx: typer.Context,
    date: Annotated[str, typer.Option("--date", help="landing date")],
    accept_dq: Annotated[
        str | None,
        typer.Option("--accept-dq", help="accept a failed data-quality gate for this date: the reason"),
    ] = None,
) -> None:
    """Ingest one landing date, gate it on data quality, aggregate and meter it and what it changed."""
    from pipelines.jobs.run_day import run_day as run_chain  # lazy: apache_beam

    s = settings_of(ctx)
    day = parse_date(date, "--date")
    try:
        with step(f"run-day {day}", total=5) as status, RunContext.open(s, ctx.args) as context:
            result = run_chain(
                context,
                [day],
                on_step=lambda n: status.update(f"run-day {day}: {n}"),
                accept_reason=accept_dq,
            )
    except DataQualityError as exc:
        done = getattr(exc, "done", None)
        if done is not None:  # what ran before the gate stopped the blocked dates
            print_day(done)
        raise
    print_day(result)


@jobs_app.command("demo", context_settings=BEAM)
def demo(
    ctx: typer.Context,
    days: int = typer.Option(242, help="days from 2026-02-01 (242 = to 2026-09-30)"),
    accounts: int = typer.Option(5000),
    events_per_day: int = typer.Option(9000),
    seed: int = typer.Option(7),
) -> None:
    """Everything on generated data with the embedded defaults (SQLite, local lake, in-process Beam)."""
    from pipelines.jobs.demo import run_demo  # lazy: apache_beam

    run_demo(
        settings_of(ctx),
        days=days,
        accounts=accounts,
        events_per_day=events_per_day,
        seed=seed,
        beam_args=ctx.args,
        out=out,
        err=err,
    )


@events_app.command("generate")
def events_generate(
    ctx: typer.Context,
    days: int = typer.Option(242, help="number of days"),
    start: str = typer.Option("2026-02-01", help="first day"),
    accounts: int = typer.Option(5000, help="number of accounts"),
    events_per_day: int = typer.Option(9000, help="average events per day"),
    seed: int = typer.Option(7, help="random seed (same seed, same files)"),
    duplicate_rate: float = typer.Option(0.004, help="share of events resent"),
    late_rate: float = typer.Option(0.003, help="share of events landing days late"),
    fmt: str = typer.Option("mixed", "--format", help="mixed | parquet | jsonl"),
) -> None:
    """Write synthetic landing files and an accounts CSV for the scenario."""
    s = settings_of(ctx)
    try:
        cfg = GeneratorConfig(
            start=parse_date(start),
            days=days,
            accounts=accounts,
            events_per_day=events_per_day,
            seed=seed,
            duplicate_rate=duplicate_rate,
            late_rate=late_rate,
            fmt=fmt,
        )
    except ValueError as exc:
        raise UsageBillingError(str(exc)) from None
    with step(f"generating {days} days of events"):
        gen = generate(s.catalog, cfg)
        files = write_landing(gen, cfg, s.landing)
    outcomes = gen.outcomes.num_rows if gen.outcomes is not None else 0
    out.print(
        f"wrote {gen.events.num_rows:,} events ({gen.duplicates:,} resends, {gen.late:,} late) and "
        f"{outcomes:,} task outcomes in {len(files)} files under {s.landing}, "
        f"and {len(gen.accounts):,} account rows"
    )


@events_app.command("replay", context_settings=BEAM)
def events_replay(
    ctx: typer.Context,
    date: Annotated[str, typer.Option("--date", help="the landing date whose quarantine is replayed")],
    reason: Annotated[
        str | None, typer.Option("--reason", help="only rows with this reason code (e.g. no_price)")
    ] = None,
) -> None:
    """Ingest a landing date's quarantined rows again (their cause fixed), then aggregate and meter them."""
    from pipelines.ingest import replay  # lazy: apache_beam
    from pipelines.jobs.run_day import run_day  # lazy: apache_beam

    s = settings_of(ctx)
    day = parse_date(date, "--date")
    status = step(f"replaying the quarantine of {day}", total=5)
    with status as progress, RunContext.open(s, ctx.args) as context:
        result, summary = replay.run(context, day, reason)
        done = run_day(context, [], on_step=lambda n: progress.update(f"replay {day}: {n}"), ingested=result)
    out.print(
        f"replayed {summary.selected:,} quarantined rows of {day}"
        + (f" with reason {reason}" if reason else "")
        + f"; {summary.kept:,} quarantine rows left as they were"
        + (
            f" ({summary.whole_file:,} stand for whole files: land those files again)"
            if summary.whole_file
            else ""
        ),
        soft_wrap=True,
    )
    print_day(done)


def print_day(done) -> None:
    """What a run-day (or a replay) did: the ingest, the dates aggregated, the metering runs."""
    print_ingest(done.ingested)
    out.print(f"aggregated {len(done.aggregated)} date(s): {date_ranges(done.aggregated) or 'none'}")
    if done.blocked:
        out.print(f"stopped by the data-quality gate: {date_ranges(done.blocked)}")
    for run in done.metered:
        out.print(f"metered {run}")
    if done.weeks:
        weeks = done.weeks
        out.print(f"effectiveness: {len(weeks)} week(s) computed, {weeks[0]} .. {weeks[-1]}")
