"""The ``usage-billing`` command line (Typer). Beam flags go after ``--``.

Every user mistake ends with one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import sqlite3
import sys
from importlib.metadata import version
from typing import Annotated

import typer
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from pipelines.adoption.commands import retirement_app
from pipelines.effectiveness.commands import effectiveness_app
from pipelines.errors import UsageBillingError
from pipelines.ingest.commands import dq_app, events_app
from pipelines.invoicing.commands import credits_app, invoices_app
from pipelines.jobs.commands import jobs_app
from pipelines.notify.commands import notify_app
from pipelines.quota.commands import quota_app
from pipelines.runtime import compat
from pipelines.runtime.console import err, out
from pipelines.runtime.logs import quiet
from pipelines.runtime.startup import arrow_memory_pool, defer_collection_until_work, tune_allocator
from pipelines.settings import DEFAULT_CONFIG, DEFAULT_DATABASE_URL, DEFAULT_LAKE, DEFAULT_LANDING, Settings
from pipelines.usage.commands import usage_app
from pipelines.warehouse import sqlite_files
from pipelines.warehouse.commands import accounts_app, db_app, lake_app
from schemas.catalog import CatalogError

app = typer.Typer(
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Usage analytics and quota billing for an AI model provider.",
)
app.add_typer(db_app, name="db")
app.add_typer(accounts_app, name="accounts")
app.add_typer(events_app, name="events")
app.add_typer(usage_app, name="usage")
app.add_typer(dq_app, name="dq")
app.add_typer(quota_app, name="quota")
app.add_typer(effectiveness_app, name="effectiveness")
app.add_typer(retirement_app, name="retirement")
app.add_typer(lake_app, name="lake")
app.add_typer(invoices_app, name="invoices")
app.add_typer(credits_app, name="credits")
app.add_typer(notify_app, name="notify")
app.registered_commands += jobs_app.registered_commands  # run-day and demo: top-level commands


def _version(value: bool) -> None:
    if value:
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


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the app and turns user errors into one line on stderr."""
    import psycopg  # lazy: psycopg

    quiet()  # before Beam is imported: its import logs a warning about Google Cloud clients
    sqlite_files.forget()  # only the files this command opens count
    from pipelines.lake.paths import use_filesystem_options  # lazy: apache_beam

    args = sys.argv[1:] if argv is None else argv
    try:
        use_filesystem_options(args[args.index("--") + 1 :] if "--" in args else [])
        app(args=argv, standalone_mode=False, prog_name="usage-billing")
    except (UsageBillingError, CatalogError) as exc:
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return getattr(exc, "exit_code", 2)
    except typer.Exit as exc:
        return exc.exit_code
    except compat.ClickException as exc:  # a usage mistake the command-line library caught
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
    except Exception as exc:
        workers = _lost_workers(exc)
        if workers is None:
            raise
        err.print(f"error: {workers}", markup=False, highlight=False, soft_wrap=True)
        return 2
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


def _lost_workers(exc: Exception) -> str | None:
    """Dask's ``KilledWorker`` as one line: a task whose workers all died while running it (each time
    another worker ran it again, ``distributed.scheduler.allowed-failures`` times). Known by its name:
    a command that uses no cluster does not import Dask to recognize it."""
    if type(exc).__name__ != "KilledWorker" or len(exc.args) != 3:
        return None
    task, worker, allowed = exc.args
    where = getattr(worker, "address", worker)
    return (
        f"{int(allowed) + 1} Dask workers in turn died running one task of this run ({task}; the last "
        f"was {where}; out of memory or killed: see its log); the step committed nothing: rerun the "
        "command once the cluster is healthy"
    )


def run() -> None:
    """The ``usage-billing`` command: ``main``, then leave without Python's interpreter teardown.

    By then the step's work is committed and its files closed; what the teardown adds is freeing every
    module and object one by one and waiting on Beam's and gRPC's idle threads: 0.5 s after a
    10M-event ingest, on every run. Exit handlers (logging's flush among them) still run first. Under
    a profiler or a tracer (``python -m cProfile``, coverage) it exits the usual way, so they can
    write what they measured. Garbage collection waits for the step's work to start, and the C
    library's allocator and Arrow's keep the memory they reuse (``startup``).
    """
    defer_collection_until_work()
    tune_allocator()
    arrow_memory_pool()
    code = main()
    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    compat.exit_now(code)


if __name__ == "__main__":  # pragma: no cover
    run()
