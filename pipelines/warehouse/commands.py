"""usage-billing db (upgrade, vacuum), accounts (load) and lake (show, files, rebind): the warehouse's
commands: its schema, the accounts and their plans, the lake it is bound to."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

import migrations
from pipelines.errors import UsageBillingError
from pipelines.runtime.console import (
    LAKE,
    DateOpt,
    FromOpt,
    ToOpt,
    lake_settings,
    out,
    settings_of,
    warehouse_of,
)
from pipelines.runtime.dates import date_range
from pipelines.warehouse.accounts import load_accounts
from pipelines.warehouse.engine import free_bytes, make_engine, redact, upgrade, vacuum
from pipelines.warehouse.remeter import stale_dates

db_app = typer.Typer(no_args_is_help=False, help="Warehouse schema.")
accounts_app = typer.Typer(no_args_is_help=False, help="Accounts and their plans.")
lake_app = typer.Typer(no_args_is_help=False, help="The lake this warehouse is built from.")


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context) -> None:
    """Apply every migration to the warehouse."""
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


@accounts_app.command("load")
def accounts_load(ctx: typer.Context, file: Path) -> None:
    """Load an accounts CSV (account_id,plan,timezone,active_from,active_until)."""
    s = settings_of(ctx)
    engine = warehouse_of(ctx)
    n = load_accounts(engine, file, s.catalog)
    out.print(f"loaded {n} account rows from {file}")
    stale = stale_dates(engine, s.catalog)
    if stale:
        out.print(
            f"{len(stale)} metered day(s) ({stale[0]} .. {stale[-1]}) are out of date for these accounts or "
            "the catalog's plans: the next run-day meters them again (or `usage-billing quota meter --stale`)"
        )


@lake_app.command("show", context_settings=LAKE)
def lake_show(ctx: typer.Context) -> None:
    """The lake the warehouse is bound to, and whether --lake is that lake."""
    from pipelines import lake as lake_files  # lazy: apache_beam
    from pipelines.warehouse.binding import current, where  # lazy: apache_beam

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
    from pipelines import lake as lake_files  # lazy: apache_beam

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
    from pipelines.warehouse.binding import rebind  # lazy: apache_beam

    s = lake_settings(ctx)
    engine = warehouse_of(ctx)
    before, after = rebind(engine, s.lake, reason)
    was = f"lake {before.lake_id} at {before.lake_path}" if before else "no lake"
    out.print(f"the warehouse is now bound to lake {after.lake_id} at {after.lake_path} (was {was})")
