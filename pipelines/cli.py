"""The ``usage-billing`` command line (Typer). Beam flags go after ``--``.

Every user mistake ends with one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from typer._click import exceptions as click_errors

from pipelines.adoption.commands import retirement_app
from pipelines.effectiveness.commands import effectiveness_app
from pipelines.errors import UsageBillingError
from pipelines.ingest.commands import dq_app, events_app, print_day
from pipelines.invoicing.commands import invoices_app
from pipelines.quota.commands import quota_app
from pipelines.runtime.console import (
    BEAM,
    LAKE,
    DateOpt,
    FromOpt,
    ToOpt,
    err,
    lake_settings,
    out,
    settings_of,
    step,
    warehouse_of,
)
from pipelines.runtime.context import RunContext, StepOptions, split_argv
from pipelines.runtime.dates import date_range, parse_date
from pipelines.runtime.logs import quiet
from pipelines.runtime.startup import defer_collection_until_work, tune_allocator
from pipelines.settings import DEFAULT_CONFIG, DEFAULT_DATABASE_URL, DEFAULT_LAKE, DEFAULT_LANDING, Settings
from schemas.catalog import CatalogError

app = typer.Typer(
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Usage analytics and quota billing for an AI model provider.",
)
db_app = typer.Typer(no_args_is_help=False, help="Warehouse schema.")
accounts_app = typer.Typer(no_args_is_help=False, help="Accounts and their plans.")
usage_app = typer.Typer(no_args_is_help=False, help="Usage aggregates.")
app.add_typer(db_app, name="db")
app.add_typer(accounts_app, name="accounts")
app.add_typer(events_app, name="events")
app.add_typer(usage_app, name="usage")
app.add_typer(dq_app, name="dq")
app.add_typer(quota_app, name="quota")
app.add_typer(effectiveness_app, name="effectiveness")
app.add_typer(retirement_app, name="retirement")
lake_app = typer.Typer(no_args_is_help=False, help="The lake this warehouse is built from.")
app.add_typer(lake_app, name="lake")
app.add_typer(invoices_app, name="invoices")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        out.print(f"usage-billing {version('usage-billing')}")
        raise typer.Exit(0)


def _where(what: str, variable: str, default: str) -> str:
    return f"{what} (default: $USAGE_BILLING_{variable} if set, else {default})"


@app.callback()
def global_options(
    ctx: typer.Context,
    config: Annotated[str | None, typer.Option(help=_where("catalog TOML", "CONFIG", DEFAULT_CONFIG))] = None,
    database_url: Annotated[
        str | None,
        typer.Option(help=_where("the warehouse, an SQLAlchemy URL", "DATABASE_URL", DEFAULT_DATABASE_URL)),
    ] = None,
    lake: Annotated[
        str | None, typer.Option(help=_where("lake root, a folder or URL", "LAKE", DEFAULT_LAKE))
    ] = None,
    landing: Annotated[
        str | None, typer.Option(help=_where("landing root, one folder per date", "LANDING", DEFAULT_LANDING))
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_version, help="print the version and exit")
    ] = False,
) -> None:
    ctx.obj = Settings.from_env(config=config, database_url=database_url, lake=lake, landing=landing)


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context) -> None:
    """Apply every migration to the warehouse."""
    import migrations
    from pipelines.warehouse.engine import free_bytes, make_engine, redact, upgrade

    s = settings_of(ctx)
    engine = make_engine(s.database_url)
    applied = upgrade(engine)
    if not applied:
        out.print(f"warehouse at {redact(s.database_url)} was up to date (revision {migrations.HEAD})")
    else:
        names = applied[0] if len(applied) == 1 else f"{applied[0]} .. {applied[-1]}"
        out.print(
            f"warehouse at {redact(s.database_url)}: applied {len(applied)} migration(s), {names}; "
            f"now at revision {applied[-1]}"
        )
    free = free_bytes(engine) or 0
    if free >= FREE_HINT_BYTES:
        out.print(
            f"{free / 2**20:,.0f} MB of the SQLite file hold no data (tables a migration rebuilt, or "
            "deleted rows): `usage-billing db vacuum` gives them back to the disk"
        )


FREE_HINT_BYTES = 64 * 2**20


@db_app.command("vacuum")
def db_vacuum(ctx: typer.Context) -> None:
    """Give the warehouse's free space back to the disk (SQLite: VACUUM; PostgreSQL: VACUUM ANALYZE)."""
    from pipelines.warehouse.engine import make_engine, redact, vacuum

    s = settings_of(ctx)
    engine = make_engine(s.database_url)
    path = Path(engine.url.database) if engine.dialect.name == "sqlite" and engine.url.database else None
    before = path.stat().st_size if path and path.exists() else None
    vacuum(engine)
    engine.dispose()
    if before is None or path is None:
        out.print(f"vacuumed the warehouse at {redact(s.database_url)}")
    else:
        out.print(
            f"vacuumed the warehouse at {redact(s.database_url)}: "
            f"{before / 2**20:,.0f} MB -> {path.stat().st_size / 2**20:,.0f} MB"
        )


@lake_app.command("show", context_settings=LAKE)
def lake_show(ctx: typer.Context) -> None:
    """The lake the warehouse is bound to, and whether --lake is that lake."""
    from pipelines import lake as lake_files
    from pipelines.warehouse.binding import current, where

    s = lake_settings(ctx)
    engine = warehouse_of(ctx)
    bound = current(engine)
    meta = lake_files.lake_meta(s.lake)
    here = meta.get("lake_id") if meta else None
    out.print(f"--lake {where(s.lake)}: {'lake ' + str(here) if here else 'no lake (no _lake.json)'}")
    if bound is None:
        out.print("the warehouse is not bound to a lake yet: the next step that uses a lake binds it")
    else:
        out.print(
            f"the warehouse is bound to lake {bound.lake_id} at {bound.lake_path} since {bound.bound_at}"
        )


@lake_app.command("files", context_settings=LAKE)
def lake_files_command(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Argument(help="events, outcomes, quarantine, allocations, ...")],
    date: DateOpt = None,
    start: FromOpt = None,
    end: ToOpt = None,
) -> None:
    """The files a dataset's committed partitions hold now, one path per line (all dates, or --date or
    --from/--to): what DuckDB, pyarrow or Spark should read. On an object store a partition's manifest
    names them; files beside them are from commits not finished or superseded."""
    from pipelines import lake as lake_files

    s = lake_settings(ctx)
    names = sorted(
        n.rsplit("/", 1)[-1]
        for n in lake_files.list_folders(s.lake)
        if not n.rsplit("/", 1)[-1].startswith(("_", "."))
    )
    if dataset not in names:
        known = ", ".join(names) or "none"
        raise UsageBillingError(f"no dataset {dataset!r} in the lake at {s.lake} (datasets there: {known})")
    dates = lake_files.partition_dates(s.lake, dataset)
    if date or start or end:
        wanted = set(date_range(date, start, end))
        dates = [d for d in dates if d in wanted]
    for day in dates:
        for path in lake_files.list_files(lake_files.partition(s.lake, dataset, day)):
            sys.stdout.write(f"{path}\n")


@lake_app.command("rebind", context_settings=LAKE)
def lake_rebind(
    ctx: typer.Context,
    reason: Annotated[str, typer.Option("--reason", help="why (recorded with who and when)")],
) -> None:
    """Point the warehouse at the lake given by --lake on purpose (a moved or restored lake)."""
    from pipelines.warehouse.binding import rebind

    s = lake_settings(ctx)
    engine = warehouse_of(ctx)
    before, after = rebind(engine, s.lake, reason)
    was = f"lake {before.lake_id} at {before.lake_path}" if before else "no lake"
    out.print(f"the warehouse is now bound to lake {after.lake_id} at {after.lake_path} (was {was})")


@accounts_app.command("load")
def accounts_load(ctx: typer.Context, file: Path) -> None:
    """Load an accounts CSV (account_id,plan,timezone,active_from,active_until)."""
    from pipelines.warehouse.accounts import load_accounts

    s = settings_of(ctx)
    engine = warehouse_of(ctx)
    n = load_accounts(engine, file, s.catalog)
    out.print(f"loaded {n} account rows from {file}")
    from pipelines.quota.remeter import stale_dates

    stale = stale_dates(engine, s.catalog)
    if stale:
        out.print(
            f"{len(stale)} metered day(s) ({stale[0]} .. {stale[-1]}) are out of date for these accounts or "
            "the catalog's plans: the next run-day meters them again (or `usage-billing quota meter --stale`)"
        )


@usage_app.command("aggregate", context_settings=BEAM)
def usage_aggregate(
    ctx: typer.Context, date: DateOpt = None, start: FromOpt = None, end: ToOpt = None
) -> None:
    """Aggregate lake partitions into usage_daily (Beam flags after --)."""
    from pipelines.usage import aggregate

    s = settings_of(ctx)
    dates = date_range(date, start, end)
    _, flags, beam_args = split_argv(ctx.args)
    with step("aggregating"), RunContext.open(s, beam_args) as context:
        loaded = aggregate.run(context, dates, StepOptions(flags.run_id))
    out.print(f"usage_daily: {sum(loaded.values()):,} rows for {len(loaded)} day(s)")


@app.command("run-day", context_settings=BEAM)
def run_day(
    ctx: typer.Context,
    date: Annotated[str, typer.Option("--date", help="landing date")],
    accept_dq: Annotated[
        str | None,
        typer.Option("--accept-dq", help="accept a failed data-quality gate for this date: the reason"),
    ] = None,
) -> None:
    """Ingest one landing date, gate it on data quality, aggregate and meter it and what it changed."""
    from pipelines.errors import DataQualityError
    from pipelines.jobs.run_day import run_day as run_chain

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


@app.command("demo", context_settings=BEAM)
def demo(
    ctx: typer.Context,
    days: int = typer.Option(242, help="days from 2026-02-01 (242 = to 2026-09-30)"),
    accounts: int = typer.Option(5000),
    events_per_day: int = typer.Option(9000),
    seed: int = typer.Option(7),
) -> None:
    """Everything on generated data with the embedded defaults (SQLite, local lake, in-process Beam)."""
    from pipelines.jobs.demo import run_demo

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


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the app and turns user errors into one line on stderr."""
    import sqlite3

    import psycopg
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError

    from pipelines.warehouse import sqlite_files

    quiet()  # before Beam is imported: its import logs a warning about Google Cloud clients
    sqlite_files.forget()  # only the files this command opens count
    from pipelines.lake.paths import use_filesystem_options

    args = sys.argv[1:] if argv is None else argv
    try:
        use_filesystem_options(args[args.index("--") + 1 :] if "--" in args else [])
        app(args=argv, standalone_mode=False, prog_name="usage-billing")
    except (UsageBillingError, CatalogError) as exc:
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return getattr(exc, "exit_code", 2)
    except typer.Exit as exc:
        return exc.exit_code
    except click_errors.ClickException as exc:  # a usage mistake the command-line library caught
        context = getattr(exc, "ctx", None)  # the usage errors carry the command they were found in
        where = context.command_path if context else "usage-billing"
        message = " ".join(exc.format_message().split())
        group = context.command if context else None
        commands = getattr(group, "list_commands", None)  # a group's, for a missing command
        if message == "Missing command." and commands is not None:
            message = f"missing command, one of: {', '.join(commands(context))}"
        err.print(f"error: {message} (see `{where} --help`)", markup=False, highlight=False, soft_wrap=True)
        return 2
    except OSError as exc:  # a disk or folder problem outside the lake's own writers
        where = f" {exc.filename}" if exc.filename else ""
        err.print(f"error: cannot use{where}: {exc.strerror or exc}", soft_wrap=True)
        return 2
    except typer.Abort:
        err.print("aborted", markup=False)
        return 130
    except DBAPIError as exc:  # e.g. the database went away mid-step: its transaction rolled back
        return _database_failed(str(exc.orig) if exc.orig else "database error")
    except SQLAlchemyError as exc:
        return _database_failed(str(exc))
    except (psycopg.Error, sqlite3.Error) as exc:  # raised by the driver itself (a COPY, a raw cursor)
        return _database_failed(str(exc) or type(exc).__name__)
    lost = sqlite_files.vanished()
    if lost:
        err.print(
            f"error: the warehouse file {lost[0]} was removed or replaced while the command ran: what it "
            "wrote is not in the warehouse; restore the file (or `db upgrade` a new one) and rerun",
            markup=False,
            soft_wrap=True,
        )
        return 2
    return 0


def _database_failed(reason: str) -> int:
    first = (reason.strip().splitlines() or ["database error"])[0]
    err.print(
        f"error: database operation failed, its transaction was rolled back: {first}; "
        "rerun the command when the database is reachable",
        markup=False,
        soft_wrap=True,
    )
    return 2


def run() -> None:
    """The ``usage-billing`` command: ``main``, then leave without Python's interpreter teardown.

    By then the step's work is committed and its files closed; what the teardown adds is freeing every
    module and object one by one and waiting on Beam's and gRPC's idle threads: 0.5 s after a
    10M-event ingest, on every run. Exit handlers (logging's flush among them) still run first. Under
    a profiler or a tracer (``python -m cProfile``, coverage) it exits the usual way, so they can
    write what they measured. Garbage collection waits for the step's work to start, and the C
    library's allocator keeps the memory it reuses (``startup``).
    """
    defer_collection_until_work()
    tune_allocator()
    code = main()
    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
