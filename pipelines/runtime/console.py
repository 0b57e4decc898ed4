"""What every command prints through and the options several commands share: two consoles without markup
(ids and paths from users and files are printed as they are), the date options, the settings a command
runs with and the warehouse it works on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.text import Text

from pipelines.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

# No markup: printed text carries ids and paths from users and files, and "[/]" in one is not a tag.
err = Console(stderr=True, markup=False, highlight=False)
out = Console(markup=False, highlight=False)

BEAM = {"allow_extra_args": True, "ignore_unknown_options": True}
DateOpt = Annotated[str | None, typer.Option("--date", help="one date, YYYY-MM-DD")]
FromOpt = Annotated[str | None, typer.Option("--from", help="first date of a range")]
ToOpt = Annotated[str | None, typer.Option("--to", help="last date of a range")]
MonthOpt = Annotated[str, typer.Option("--month", help="account-local calendar month, YYYY-MM")]


def settings_of(ctx: typer.Context) -> Settings:
    return ctx.find_root().obj


def warehouse_of(ctx: typer.Context) -> Engine:
    """The warehouse of the command's settings, checked to be at the migrations' head."""
    from pipelines.warehouse.engine import make_engine, require_schema

    engine = make_engine(settings_of(ctx).database_url)
    require_schema(engine)
    return engine


def dates_argv(date: str | None, start: str | None, end: str | None) -> list[str]:
    argv: list[str] = []
    for flag, value in (("--date", date), ("--from", start), ("--to", end)):
        if value is not None:
            argv += [flag, value]
    return argv


def step(label: str):  # type: ignore[no-untyped-def]
    return err.status(Text(label, style="bold"), spinner="dots")
