"""usage-billing invoices: draft, finalize, void and export."""

from __future__ import annotations

from typing import Annotated

import typer

from pipelines.runtime.console import (
    MonthOpt,
    OptionalAccountOpt,
    OutOpt,
    err,
    out,
    settings_of,
    step,
    warehouse_of,
)
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
