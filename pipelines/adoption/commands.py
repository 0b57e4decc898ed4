"""usage-billing retirement: the weekly adoption metrics, the detector and the retirement report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipelines.runtime.console import (
    LAKE,
    OutOpt,
    lake_settings,
    out,
    step,
    warehouse_of,
)
from pipelines.runtime.dates import parse_date
from pipelines.runtime.outputs import output_folder

retirement_app = typer.Typer(no_args_is_help=False, help="Adoption analytics and retirement reports.")


@retirement_app.command("report", context_settings=LAKE)
def retirement_report(
    ctx: typer.Context,
    as_of: Annotated[str, typer.Option("--as-of", help="report date, YYYY-MM-DD (complete weeks up to it)")],
    out_dir: OutOpt,
) -> None:
    """Weekly adoption metrics, declining-model detection and the retirement report (HTML, JSON, Markdown)."""
    from pipelines.adoption.retirement import run as report  # lazy: apache_beam

    s = lake_settings(ctx)
    day = parse_date(as_of, "--as-of")
    folder = output_folder(out_dir, s.lake, s.landing, create=False)
    engine = warehouse_of(ctx)
    with step(f"retirement report as of {as_of}"):
        data = report(engine, s.catalog, day, folder, s.lake)
    flagged = [m["model"] for m in data["models"] if m["flagged"]]
    out.print(
        f"{as_of}: {len(data['models'])} models over weeks {data['weeks'][0]}..{data['weeks'][-1]}; "
        f"candidates: {', '.join(flagged) if flagged else 'none'}; report in {folder / 'report.html'}"
    )


@retirement_app.command("preview", context_settings=LAKE)
def retirement_preview(
    ctx: typer.Context,
    model: Annotated[str, typer.Option("--model", help="the model to retire")],
    month: Annotated[str, typer.Option("--month", help="account-local calendar month, YYYY-MM")],
    out_dir: OutOpt,
    successor: Annotated[
        str | None, typer.Option("--successor", help="the model its use moves to (default: the catalog's)")
    ] = None,
    tier: Annotated[
        str,
        typer.Option(
            "--tier",
            help="the successor's speed tier: one of the catalog's tiers, keep (each event's own) or all "
            "(each tier with a price on every day of the month)",
        ),
    ] = "all",
    credits_out: Annotated[
        Path | None,
        typer.Option(
            "--credits-out",
            help="also write a credits CSV: a promotional grant per account that would pay more, covering "
            "the increase for --months months on the successor",
        ),
    ] = None,
    months: Annotated[int, typer.Option("--months", help="months the transition credits cover")] = 3,
) -> None:
    """What each account would pay for the month if its use of the model had been on the successor
    (preview.csv, preview.json, preview.md). Writes nothing to the warehouse or the lake."""
    from pipelines.adoption.preview import preview  # lazy: apache_beam
    from pipelines.adoption.preview_files import line, write, write_credits  # lazy: apache_beam

    s = lake_settings(ctx)
    target = output_folder(out_dir, s.lake, s.landing, create=False)
    engine = warehouse_of(ctx)
    with step(f"migration preview of {model} in {month}"):
        result = preview(engine, s.catalog, s.lake, model, month, successor, tier)
        folder = write(result, target)
    out.print(line(result))
    out.print(f"preview in {folder / 'preview.csv'}")
    if credits_out is not None:
        n, total = write_credits(result, credits_out, months)
        out.print(
            f"transition credits: {n:,} accounts would pay more; {result.currency} {total:,.2f} over "
            f"{months} months makes the move free for them ({credits_out}; load it with "
            "`usage-billing credits load`)"
        )
