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
from rich.console import Console
from rich.text import Text
from typer._click import exceptions as click_errors

from pipelines.errors import UsageBillingError
from pipelines.runtime.logs import quiet
from pipelines.runtime.startup import defer_collection_until_work, tune_allocator
from pipelines.settings import Settings
from schemas.catalog import CatalogError

# No markup: printed text carries ids and paths from users and files, and "[/]" in one is not a tag.
err = Console(stderr=True, markup=False, highlight=False)
out = Console(markup=False, highlight=False)

app = typer.Typer(
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Usage analytics and quota billing for an AI model provider.",
)
db_app = typer.Typer(no_args_is_help=False, help="Warehouse schema.")
accounts_app = typer.Typer(no_args_is_help=False, help="Accounts and their plans.")
events_app = typer.Typer(no_args_is_help=False, help="Usage events: generate and ingest.")
usage_app = typer.Typer(no_args_is_help=False, help="Usage aggregates.")
app.add_typer(db_app, name="db")
app.add_typer(accounts_app, name="accounts")
app.add_typer(events_app, name="events")
app.add_typer(usage_app, name="usage")
dq_app = typer.Typer(no_args_is_help=False, help="Data-quality gate on clean lake partitions.")
app.add_typer(dq_app, name="dq")
quota_app = typer.Typer(no_args_is_help=False, help="Quota pools: metering and balances.")
app.add_typer(quota_app, name="quota")
retirement_app = typer.Typer(no_args_is_help=False, help="Adoption analytics and retirement reports.")
app.add_typer(retirement_app, name="retirement")
lake_app = typer.Typer(no_args_is_help=False, help="The lake this warehouse is built from.")
app.add_typer(lake_app, name="lake")
invoices_app = typer.Typer(no_args_is_help=False, help="Invoices: draft, finalize, void, export.")
app.add_typer(invoices_app, name="invoices")

BEAM = {"allow_extra_args": True, "ignore_unknown_options": True}
DateOpt = Annotated[str | None, typer.Option("--date", help="one date, YYYY-MM-DD")]
FromOpt = Annotated[str | None, typer.Option("--from", help="first date of a range")]
ToOpt = Annotated[str | None, typer.Option("--to", help="last date of a range")]


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        out.print(f"usage-billing {version('usage-billing')}")
        raise typer.Exit(0)


@app.callback()
def global_options(
    ctx: typer.Context,
    config: Annotated[str | None, typer.Option(envvar="USAGE_BILLING_CONFIG", help="catalog TOML")] = None,
    database_url: Annotated[
        str | None,
        typer.Option(envvar="USAGE_BILLING_DATABASE_URL", show_default=False, help="SQLAlchemy URL"),
    ] = None,
    lake: Annotated[str | None, typer.Option(envvar="USAGE_BILLING_LAKE", help="lake root")] = None,
    landing: Annotated[str | None, typer.Option(envvar="USAGE_BILLING_LANDING", help="landing root")] = None,
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_version, help="print the version and exit")
    ] = False,
) -> None:
    ctx.obj = Settings.from_env(config=config, database_url=database_url, lake=lake, landing=landing)


def _settings(ctx: typer.Context) -> Settings:
    return ctx.find_root().obj


def _dates_argv(date: str | None, start: str | None, end: str | None) -> list[str]:
    argv: list[str] = []
    for flag, value in (("--date", date), ("--from", start), ("--to", end)):
        if value is not None:
            argv += [flag, value]
    return argv


def _step(label: str):  # type: ignore[no-untyped-def]
    return err.status(Text(label, style="bold"), spinner="dots")


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context) -> None:
    """Apply every migration to the warehouse."""
    from pipelines.warehouse.engine import free_bytes, make_engine, redact, upgrade

    s = _settings(ctx)
    engine = make_engine(s.database_url)
    upgrade(engine)
    out.print(f"warehouse at {redact(s.database_url)} is up to date")
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

    s = _settings(ctx)
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


@lake_app.command("show")
def lake_show(ctx: typer.Context) -> None:
    """The lake the warehouse is bound to, and whether --lake is that lake."""
    from pipelines import lake as lake_files
    from pipelines.warehouse.binding import current, where
    from pipelines.warehouse.engine import make_engine, require_schema

    s = _settings(ctx)
    engine = make_engine(s.database_url)
    require_schema(engine)
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


@lake_app.command("rebind")
def lake_rebind(
    ctx: typer.Context,
    reason: Annotated[str, typer.Option("--reason", help="why (recorded with who and when)")],
) -> None:
    """Point the warehouse at the lake given by --lake on purpose (a moved or restored lake)."""
    from pipelines.warehouse.binding import rebind
    from pipelines.warehouse.engine import make_engine, require_schema

    s = _settings(ctx)
    engine = make_engine(s.database_url)
    require_schema(engine)
    before, after = rebind(engine, s.lake, reason)
    was = f"lake {before.lake_id} at {before.lake_path}" if before else "no lake"
    out.print(f"the warehouse is now bound to lake {after.lake_id} at {after.lake_path} (was {was})")


@accounts_app.command("load")
def accounts_load(ctx: typer.Context, file: Path) -> None:
    """Load an accounts CSV (account_id,plan,timezone,active_from,active_until)."""
    from pipelines.warehouse.accounts import load_accounts
    from pipelines.warehouse.engine import make_engine, require_schema

    s = _settings(ctx)
    engine = make_engine(s.database_url)
    require_schema(engine)
    n = load_accounts(engine, file, s.catalog)
    out.print(f"loaded {n} account rows from {file}")
    from pipelines.quota.remeter import stale_dates

    stale = stale_dates(engine, s.catalog)
    if stale:
        out.print(
            f"{len(stale)} metered day(s) ({stale[0]} .. {stale[-1]}) are out of date for these accounts or "
            "the catalog's plans: the next run-day meters them again (or `usage-billing quota meter --stale`)"
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
    from pipelines.jobs.generate import GeneratorConfig, generate, write_landing
    from pipelines.runtime.options import parse_date

    s = _settings(ctx)
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
    with _step(f"generating {days} days of events"):
        gen = generate(s.catalog, cfg)
        files = write_landing(gen, cfg, s.landing)
    out.print(
        f"wrote {gen.events.num_rows:,} events ({gen.duplicates:,} resends, {gen.late:,} late) "
        f"in {len(files)} files under {s.landing}, and {len(gen.accounts):,} account rows"
    )


@events_app.command("ingest", context_settings=BEAM)
def events_ingest(ctx: typer.Context, date: DateOpt = None, start: FromOpt = None, end: ToOpt = None) -> None:
    """Validate, deduplicate and store landing files in the lake (Beam flags after --)."""
    from pipelines.ingest import events as ingest

    s = _settings(ctx)
    with _step("ingesting"):
        result = ingest.run([*s.argv(), *_dates_argv(date, start, end), *ctx.args])
    _print_ingest(result)


@events_app.command("replay", context_settings=BEAM)
def events_replay(
    ctx: typer.Context,
    date: Annotated[str, typer.Option("--date", help="the landing date whose quarantine is replayed")],
    reason: Annotated[
        str | None, typer.Option("--reason", help="only rows with this reason code (e.g. no_price)")
    ] = None,
) -> None:
    """Ingest a landing date's quarantined rows again (once their cause is fixed), then aggregate and
    meter what they changed, as run-day does."""
    from pipelines.ingest import replay
    from pipelines.jobs.run_day import ingest_and_aggregate
    from pipelines.runtime.options import parse_date

    s = _settings(ctx)
    day = parse_date(date, "--date")
    with _step(f"replaying the quarantine of {day}") as status:
        result, summary = replay.run(s, day, reason, ctx.args)
        done = ingest_and_aggregate(
            s, [], ctx.args, on_step=lambda n: status.update(f"replay {day}: {n}"), ingested=result
        )
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
    _print_day(done)


def _print_day(done) -> None:  # type: ignore[no-untyped-def]
    """What a run-day (or a replay) did: the ingest, the dates aggregated, the metering runs."""
    _print_ingest(done.ingest)
    out.print(f"aggregated {len(done.aggregated)} date(s): {', '.join(str(d) for d in done.aggregated)}")
    for run in done.metered:
        out.print(f"metered {run}")


def _print_ingest(result) -> None:  # type: ignore[no-untyped-def]
    out.print(
        f"run {result.run_id}: read {result.total('rows_read'):,} rows: clean {result.total('clean'):,}, "
        f"quarantined {result.total('quarantined'):,}, duplicates {result.total('duplicates'):,}"
    )
    if result.changed_dates:
        out.print(
            f"partitions changed: {len(result.changed_dates)} date(s), "
            f"{result.changed_dates[0]} .. {result.changed_dates[-1]}"
        )


@usage_app.command("aggregate", context_settings=BEAM)
def usage_aggregate(
    ctx: typer.Context, date: DateOpt = None, start: FromOpt = None, end: ToOpt = None
) -> None:
    """Aggregate lake partitions into usage_daily (Beam flags after --)."""
    from pipelines.usage import aggregate

    s = _settings(ctx)
    with _step("aggregating"):
        loaded = aggregate.run([*s.argv(), *_dates_argv(date, start, end), *ctx.args])
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
    """Ingest one landing date, gate it on data quality, then aggregate it and every past date its late
    events changed."""
    from pipelines.jobs.run_day import ingest_and_aggregate
    from pipelines.runtime.options import parse_date

    s = _settings(ctx)
    day = parse_date(date)
    with _step(f"run-day {day}") as status:
        result = ingest_and_aggregate(
            s,
            [day],
            ctx.args,
            on_step=lambda n: status.update(f"run-day {day}: {n}"),
            accept_reason=accept_dq,
        )
    _print_day(result)


@dq_app.command("check")
def dq_check(ctx: typer.Context, date: DateOpt = None, start: FromOpt = None, end: ToOpt = None) -> None:
    """Run the data-quality suite on committed partitions; store and render the results."""
    from pipelines.ingest import quality
    from pipelines.runtime.options import CommonOptions, date_range
    from pipelines.warehouse.engine import make_engine, require_schema

    s = _settings(ctx)
    dates = date_range(CommonOptions(_dates_argv(date, start, end)))
    engine = make_engine(s.database_url)
    require_schema(engine)
    with _step("checking data quality"):
        reports = quality.check_partitions(engine, s.lake, s.catalog, dates, "dq-check")
    for r in reports:
        state = (
            "accepted"
            if r.accepted
            else ("FAILED: " + ", ".join(r.failed_errors) if r.failed_errors else "passed")
        )
        out.print(f"{r.day}: {r.rows:,} rows, {state} ({quality.html_path(s.lake, r.day)})")
    if not reports:
        raise UsageBillingError("no committed partition in those dates")
    quality.require_passed(reports, s.lake)


@dq_app.command("accept")
def dq_accept(
    ctx: typer.Context,
    date: Annotated[str, typer.Option("--date", help="the date whose failed gate is accepted")],
    reason: Annotated[str, typer.Option("--reason", help="why the data is good enough anyway")],
) -> None:
    """Accept a failed data-quality gate for one date (recorded with who, when and why)."""
    from pipelines.ingest import quality
    from pipelines.runtime.options import parse_date
    from pipelines.warehouse.engine import make_engine, require_schema

    s = _settings(ctx)
    engine = make_engine(s.database_url)
    require_schema(engine)
    checks = quality.accept(engine, parse_date(date), reason)
    out.print(
        f"accepted {', '.join(checks)} for {date}; rerun `usage-billing run-day --date {date}` to continue"
    )


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
    from pipelines.quota import meter

    s = _settings(ctx)
    if stale:
        if date or start or end or month:
            raise UsageBillingError("give either --stale or dates, not both")
        _meter_stale(s, ctx.args)
        return
    argv = [*s.argv(), *_dates_argv(date, start, end), *(["--month", month] if month else []), *ctx.args]
    seconds: dict[str, float] = {}
    notes: list[str] = []
    with _step("metering quota pools"):
        counts = meter.run(argv, seconds, notes)
    out.print(", ".join(f"{name}: {n:,} rows" for name, n in counts.items()))
    for note in notes:
        out.print(note)
    out.print(f"Beam pipeline {seconds['pipeline']:.1f} s, warehouse load {seconds['load']:.1f} s")


def _meter_stale(s, beam_args: list[str]) -> None:  # type: ignore[no-untyped-def]
    from pipelines.jobs.run_day import meter_runs, out_of_date_days

    days = out_of_date_days(s)
    if not days:
        out.print("no metered day is out of date")
        return
    with _step(f"metering {len(days)} out-of-date day(s) again"):
        runs = meter_runs(s, days, beam_args)
    out.print(f"metered again: {', '.join(runs)}")


@quota_app.command("show")
def quota_show(
    ctx: typer.Context,
    account: Annotated[str, typer.Option("--account", help="account id")],
    at: Annotated[str | None, typer.Option("--at", help="ISO time with zone (default: now)")] = None,
) -> None:
    """Each pool of the account's plan at a moment: allowance, used, remaining and when it resets."""
    from pipelines.quota.show import pool_state
    from pipelines.warehouse.engine import make_engine, require_schema

    s = _settings(ctx)
    engine = make_engine(s.database_url)
    require_schema(engine)
    view = pool_state(engine, s.catalog, account, at)
    out.print(view.header)
    for line in view.lines:
        out.print(line, markup=False, highlight=False)


@quota_app.command("explain")
def quota_explain(
    ctx: typer.Context,
    event_id: Annotated[str, typer.Option("--event-id", help="the event's id")],
    date: Annotated[
        str | None, typer.Option("--date", help="its UTC date, YYYY-MM-DD (default: search every date)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object (for support tools)")] = False,
) -> None:
    """Why one event was charged what it was: its pools, what each covered, the overage and its price."""
    from pipelines.quota.explain import as_dict, explain_event, render
    from pipelines.runtime.options import parse_date
    from pipelines.warehouse.engine import make_engine, require_schema

    s = _settings(ctx)
    day = parse_date(date, "--date") if date is not None else None
    engine = make_engine(s.database_url)
    require_schema(engine)
    charge = explain_event(engine, s.lake, s.catalog, event_id, day)
    if as_json:
        import json

        sys.stdout.write(json.dumps(as_dict(charge), indent=2) + "\n")
        return
    for line in render(charge):
        out.print(line, markup=False, highlight=False, soft_wrap=True)


MonthOpt = Annotated[str, typer.Option("--month", help="account-local calendar month, YYYY-MM")]


def _invoice_engine(ctx: typer.Context):  # type: ignore[no-untyped-def]
    from pipelines.warehouse.engine import make_engine, require_schema

    engine = make_engine(_settings(ctx).database_url)
    require_schema(engine)
    return engine


@invoices_app.command("draft")
def invoices_draft(
    ctx: typer.Context,
    month: MonthOpt,
    open_month: Annotated[
        bool,
        typer.Option("--open-month", help="draft a month that is not closed yet (marked; never finalized)"),
    ] = False,
) -> None:
    """(Re)build the month's draft invoices and adjustments; finalized documents are never touched."""
    from pipelines.invoicing.documents import draft

    with _step(f"drafting invoices for {month}"):
        r = draft(_invoice_engine(ctx), _settings(ctx).catalog, month, open_month=open_month)
    out.print(
        f"{r.month}: {r.invoices:,} draft invoices, {r.adjustments:,} draft adjustments, {r.lines:,} lines, "
        f"total {r.total:,.2f} {_settings(ctx).catalog.currency} (replaced {r.replaced_drafts:,} drafts)"
        + ("; OPEN MONTH: these drafts are marked open_month and cannot be finalized" if r.open_month else "")
    )


@invoices_app.command("finalize")
def invoices_finalize(ctx: typer.Context, month: MonthOpt) -> None:
    """Number the month's drafts (INV-YYYYMM-NNNNNN, gapless) and freeze them."""
    from pipelines.invoicing.documents import finalize

    r = finalize(_invoice_engine(ctx), _settings(ctx).catalog, month)
    if r.finalized == 0:
        out.print(f"{r.month}: no drafts to finalize")
    else:
        out.print(f"{r.month}: finalized {r.finalized:,} documents, {r.first_number} .. {r.last_number}")


@invoices_app.command("void")
def invoices_void(
    ctx: typer.Context,
    number: Annotated[str, typer.Option("--number", help="INV-YYYYMM-NNNNNN")],
    reason: Annotated[str, typer.Option("--reason", help="why (recorded on the invoice)")],
) -> None:
    """Void a finalized invoice; the next draft of its month bills the account afresh."""
    from pipelines.invoicing.documents import void

    account = void(_invoice_engine(ctx), number, reason)
    out.print(f"voided {number} (account {account})")


@invoices_app.command("export")
def invoices_export(
    ctx: typer.Context,
    month: MonthOpt,
    out_dir: Annotated[Path, typer.Option("--out", help="output folder")],
    fmt: Annotated[str, typer.Option("--format", help="csv | parquet")] = "csv",
) -> None:
    """Write invoices and lines (CSV or Parquet) and one printable HTML page per account."""
    from pipelines.invoicing.export import export

    n = export(_invoice_engine(ctx), month, out_dir, fmt)
    out.print(
        f"{month}: {n['invoices']:,} documents, {n['lines']:,} lines, {n['html']:,} HTML pages in {out_dir}"
    )


@retirement_app.command("report")
def retirement_report(
    ctx: typer.Context,
    as_of: Annotated[str, typer.Option("--as-of", help="report date, YYYY-MM-DD (complete weeks up to it)")],
    out_dir: Annotated[Path, typer.Option("--out", help="output folder")],
) -> None:
    """Weekly adoption metrics, declining-model detection and the retirement report (HTML, JSON, Markdown)."""
    from pipelines.adoption.retirement import run as report
    from pipelines.runtime.options import parse_date
    from pipelines.warehouse.engine import make_engine, require_schema

    s = _settings(ctx)
    engine = make_engine(s.database_url)
    require_schema(engine)
    with _step(f"retirement report as of {as_of}"):
        data = report(engine, s.catalog, parse_date(as_of, "--as-of"), out_dir, s.lake)
    flagged = [m["model"] for m in data["models"] if m["flagged"]]
    out.print(
        f"{as_of}: {len(data['models'])} models over weeks {data['weeks'][0]}..{data['weeks'][-1]}; "
        f"candidates: {', '.join(flagged) if flagged else 'none'}; report in {out_dir / 'report.html'}"
    )


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
        _settings(ctx),
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

    from pipelines.warehouse.engine import forget_warehouses, vanished_warehouses

    quiet()
    forget_warehouses()  # only the files this command opens count
    try:
        app(args=argv, standalone_mode=False, prog_name="usage-billing")
    except (UsageBillingError, CatalogError) as exc:
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return getattr(exc, "exit_code", 2)
    except typer.Exit as exc:
        return exc.exit_code
    except click_errors.ClickException as exc:  # a usage mistake the command-line library caught
        where = exc.ctx.command_path if getattr(exc, "ctx", None) else "usage-billing"
        message = " ".join(exc.format_message().split())
        group = exc.ctx.command if getattr(exc, "ctx", None) else None
        if message == "Missing command." and hasattr(group, "list_commands"):
            message = f"missing command, one of: {', '.join(group.list_commands(exc.ctx))}"  # type: ignore[union-attr]
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
    lost = vanished_warehouses()
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
