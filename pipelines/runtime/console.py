"""What every command prints through and the options several commands share: two consoles without markup
(ids and paths from users and files are printed as they are), the date options, the settings a command
runs with and the warehouse it works on."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from pipelines.settings import Settings
from pipelines.warehouse.engine import require_schema, warehouse_engine
from schemas.limits import account_id_problem

if TYPE_CHECKING:
    from sqlalchemy import Engine


def _console(stderr: bool) -> Console:
    """No markup: printed text carries ids and paths from users and files, and "[/]" in one is not a
    tag. On a terminal, Rich fits the text to its width; into a file or a pipe nothing is wrapped (a
    line is one line for grep and for a log) and tables take the width their content needs."""
    stream = sys.stderr if stderr else sys.stdout
    terminal = hasattr(stream, "isatty") and stream.isatty()
    if terminal:
        return Console(stderr=stderr, markup=False, highlight=False)
    return Console(stderr=stderr, markup=False, highlight=False, soft_wrap=True, width=UNWRAPPED)


UNWRAPPED = 400  # the width a table may take when the output is not a terminal
err = _console(stderr=True)
out = _console(stderr=False)

BEAM = {"allow_extra_args": True, "ignore_unknown_options": True}
LAKE = BEAM  # a command that reads the lake outside a pipeline: file-system flags after -- (lake_settings)
DateOpt = Annotated[str | None, typer.Option("--date", help="one date, YYYY-MM-DD")]
FromOpt = Annotated[str | None, typer.Option("--from", help="first date of a range")]
ToOpt = Annotated[str | None, typer.Option("--to", help="last date of a range")]
MonthOpt = Annotated[str, typer.Option("--month", help="account-local calendar month, YYYY-MM")]
# Checked by runtime.outputs.output_folder: not empty, not inside the lake or the landing area.
OutOpt = Annotated[str, typer.Option("--out", help="output folder (not inside the lake or the landing area)")]


def _account_id(value: str | None) -> str | None:
    """An account id on the command line obeys the rule every entry point does (schemas.limits)."""
    problem = None if value is None else account_id_problem(value)
    if problem:
        raise typer.BadParameter(f"account id {value!r} {problem}", param_hint="'--account'")
    return value


AccountOpt = Annotated[str, typer.Option("--account", help="account id", callback=_account_id)]
OptionalAccountOpt = Annotated[
    str | None,
    typer.Option("--account", help="only this account's documents (as support would)", callback=_account_id),
]


def settings_of(ctx: typer.Context) -> Settings:
    return ctx.find_root().obj


def lake_settings(ctx: typer.Context) -> Settings:
    """The settings of a command that reads the lake outside a pipeline (``context_settings=LAKE``):
    the extra arguments it was given must be Beam's file-system flags (``--s3_endpoint_url=...``,
    after ``--``), and they configure the lake's file access; anything else is an unknown option."""
    from pipelines.lake.paths import (  # lazy: apache_beam
        check_reachable,
        filesystem_flags,
        use_filesystem_options,
    )

    use_filesystem_options(filesystem_flags(ctx.args))
    settings = settings_of(ctx)
    check_reachable(settings.lake)
    return settings


def warehouse_of(ctx: typer.Context) -> Engine:
    """The warehouse of the command's settings, checked to be at the migrations' head."""
    engine = warehouse_engine(settings_of(ctx))
    require_schema(engine)
    return engine


def step(label: str, total: int | None = None):
    """What a long command shows on a terminal while it runs (nothing into a file or a pipe): a
    spinner with ``label``, or with ``total`` steps a bar that each ``update(name)`` advances."""
    if total is None:
        return err.status(Text(label, style="bold"), spinner="dots")
    return _Steps(label, total)


class _Steps:
    def __init__(self, label: str, total: int) -> None:
        self.label = label
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=True,
            disable=not err.is_terminal,
        )
        self.task = self.progress.add_task(label, total=total)
        self.started = False

    def __enter__(self) -> _Steps:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def update(self, text: str) -> None:
        """A new step starts: the bar counts the one before as done."""
        if self.started:
            self.progress.advance(self.task)
        self.started = True
        self.progress.update(self.task, description=text)
