"""usage-billing invoices: draft, finalize, void and export."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipelines.runtime.console import (
    AccountOpt,
    MonthOpt,
    OptionalAccountOpt,
    OutOpt,
    err,
    out,
    settings_of,
    step,
    warehouse_of,
)
from pipelines.runtime.dates import parse_date
from pipelines.warehouse.unknown import describe

invoices_app = typer.Typer(no_args_is_help=False, help="Invoices: draft, finalize, void, export.")


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
    from pipelines.invoicing.documents import draft  # lazy: apache_beam

    with step(f"drafting invoices for {month}"):
        r = draft(warehouse_of(ctx), settings_of(ctx).catalog, month, open_month=open_month)
    out.print(
        f"{r.month}: {r.invoices:,} draft invoices, {r.adjustments:,} draft adjustments, {r.lines:,} lines, "
        f"total {r.total:,.2f} {settings_of(ctx).catalog.currency} (replaced {r.replaced_drafts:,} drafts)"
        + ("; OPEN MONTH: these drafts are marked open_month and cannot be finalized" if r.open_month else "")
    )
    if r.unknown:
        unknown = describe(list(r.unknown), settings_of(ctx).catalog.currency)
        out.print(
            f"{r.month}: drafts of {unknown}, billed at the rate card: the accounts table has never held "
            "them (finance_unknown_accounts); finalize refuses them until they are loaded or accepted "
            "with --accept-unknown-accounts"
        )


@invoices_app.command("finalize")
def invoices_finalize(
    ctx: typer.Context,
    month: MonthOpt,
    accept_unknown: Annotated[
        str | None,
        typer.Option(
            "--accept-unknown-accounts",
            metavar="REASON",
            help="number drafts of accounts the accounts table never held too (the reason is recorded)",
        ),
    ] = None,
) -> None:
    """Number the month's drafts (INV-YYYYMM-NNNNNN, gapless) and freeze them."""
    from pipelines.invoicing.documents import finalize  # lazy: apache_beam

    r = finalize(warehouse_of(ctx), settings_of(ctx).catalog, month, accept_unknown)
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
    from pipelines.invoicing.documents import void  # lazy: apache_beam

    account = void(warehouse_of(ctx), number, reason)
    out.print(f"voided {number} (account {account})")


@invoices_app.command("export")
def invoices_export(
    ctx: typer.Context,
    month: MonthOpt,
    out_dir: OutOpt,
    fmt: Annotated[
        str,
        typer.Option("--format", help="one or more of csv, parquet, html, pdf, comma separated"),
    ] = "csv,html",
    account: OptionalAccountOpt = None,
) -> None:
    """Write the month's numbered documents: CSV or Parquet for finance, HTML and PDF for customers."""
    from pipelines.invoicing.export import export  # lazy: apache_beam

    with step(f"exporting the documents of {month}"):
        s = settings_of(ctx)
        n = export(
            warehouse_of(ctx),
            month,
            out_dir,
            fmt,
            account=account,
            lake=s.lake,
            landing=s.landing,
            tier_labels=s.catalog.tier_labels,
        )
    written = [f"{n['invoices']:,} documents, {n['lines']:,} lines"]
    written += [f"{n[kind]:,} {kind.upper()} documents" for kind in ("html", "pdf") if n[kind]]
    out.print(f"{month}: {', '.join(written)} in {out_dir}")
    if not n["invoices"]:
        err.print(
            f"warning: {month} has no numbered documents, so the files hold headers only: exports cover "
            "finalized and void documents; drafts are numbered by "
            f"`usage-billing invoices finalize --month {month}`"
        )


credits_app = typer.Typer(
    no_args_is_help=False, help="Prepaid and promotional credits: load, grant, void, show."
)


@credits_app.command("load")
def credits_load(ctx: typer.Context, file: Path) -> None:
    """Load a credits CSV (grant_id,account_id,amount,kind,effective_from,expires,priority,models,reason):
    all rows or none; a grant id loaded already must be identical."""
    from pipelines.invoicing import credits  # lazy: apache_beam

    r = credits.load(warehouse_of(ctx), file, settings_of(ctx).catalog)
    out.print(
        f"loaded {r.loaded:,} credit grants from {file} ({r.unchanged:,} were loaded already, unchanged)"
    )


@credits_app.command("grant")
def credits_grant(
    ctx: typer.Context,
    grant_id: Annotated[str, typer.Option("--grant", help="the new grant's id")],
    account: AccountOpt,
    amount: Annotated[str, typer.Option("--amount", help="in the catalog currency, at most 2 decimals")],
    kind: Annotated[str, typer.Option("--kind", help="paid | promotional")],
    effective_from: Annotated[str, typer.Option("--from", help="first account-local day, YYYY-MM-DD")],
    expires: Annotated[str, typer.Option("--expires", help="account-local day it ends (exclusive)")] = "",
    priority: Annotated[str, typer.Option("--priority", help="lower is applied first")] = "0",
    models: Annotated[str, typer.Option("--models", help="model ids separated by ';' (default: all)")] = "",
    reason: Annotated[str, typer.Option("--reason", help="shown on the customer's documents")] = "",
) -> None:
    """Add one grant, by the rules of a credits file's row."""
    from pipelines.invoicing import credits  # lazy: apache_beam

    fields = {
        "grant_id": grant_id,
        "account_id": account,
        "amount": amount,
        "kind": kind,
        "effective_from": effective_from,
        "expires": expires,
        "priority": priority,
        "models": models,
        "reason": reason,
    }
    r = credits.grant(warehouse_of(ctx), settings_of(ctx).catalog, fields)
    state = "granted" if r.loaded else "was granted already (identical)"
    out.print(f"credit {grant_id} {state}: {amount} {settings_of(ctx).catalog.currency} to {account}")


@credits_app.command("void")
def credits_void(
    ctx: typer.Context,
    grant_id: Annotated[str, typer.Option("--grant", help="the grant to end")],
    reason: Annotated[str, typer.Option("--reason", help="why (recorded)")],
    on: Annotated[
        str | None, typer.Option("--on", help="UTC date it takes effect (default today), YYYY-MM-DD")
    ] = None,
) -> None:
    """End a grant for every month whose last day is on or after the void date."""
    from pipelines.invoicing import credits  # lazy: apache_beam

    day = parse_date(on, "--on") if on else None
    done = credits.void(warehouse_of(ctx), grant_id, reason, day)
    out.print(f"voided credit {grant_id} for months ending on or after {done}")


@credits_app.command("show")
def credits_show(ctx: typer.Context, account: AccountOpt) -> None:
    """Each grant of an account: amount, applied per month, remaining, expiry."""
    from pipelines.invoicing import credits  # lazy: apache_beam

    views = credits.show(warehouse_of(ctx), account)
    if not views:
        out.print(f"{account} has no credit grants")
        return
    for v in views:
        g = v.grant
        ends = f"expires {g.expires}" if g.expires else "never expires"
        void = f", VOID from {v.void_date}" if v.void_date else ""
        only = f", only {g.models.replace(';', ', ')}" if g.models else ""
        out.print(
            f"{g.grant_id}  {g.kind}  {g.amount:,.2f} {v.currency}  from {g.effective_from}, {ends}{void}"
            f"{only}, priority {g.priority}: {g.reason or '-'}"
        )
        for month, amount in v.applied.items():
            out.print(f"    {month}  applied  {amount:,.2f}")
        for month, amount in v.drafted.items():
            out.print(f"    {month}  in drafts  {amount:,.2f} (not finalized)")
        out.print(f"    remaining  {v.remaining:,.2f}")
