"""Exports of a month's numbered documents: CSV (or Parquet) for finance, printable HTML per account.

    usage-billing invoices export --month 2026-03 --out exports/2026-03 [--format parquet]

Writes ``invoices.csv`` and ``invoice_lines.csv`` with the export contract's columns (``INVOICE_COLUMNS``,
``LINE_COLUMNS``; the Parquet files' schemas are ``EXPORT_*`` in schemas/lake.py) for finalized and void
documents (the ones with a number; drafts are not documents yet), and ``html/<account>.html``:
the account's documents for the month, lines grouped by model and tier, its pool usage, totals.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import re
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as csv
import pyarrow.parquet as pq
from sqlalchemy import Engine, select

from billing.invoices import month_bounds
from pipelines.errors import UsageBillingError
from pipelines.invoicing.months import check_month
from pipelines.warehouse.engine import read_arrow
from schemas.lake import EXPORT_INVOICE_SCHEMA, EXPORT_LINE_SCHEMA
from schemas.warehouse import Invoice, InvoiceLine, PoolUsage

INVOICE_COLUMNS = ("invoice_number", "account_id", "period", "status", "currency", "subtotal", "total")
LINE_COLUMNS = (
    "invoice_number",
    "account_id",
    "period",
    "line_type",
    "model",
    "speed_tier",
    "token_kind",
    "quantity",
    "unit_price",
    "amount",
    "currency",
)


def export(
    engine: Engine, month: str, out: str | Path, fmt: str = "csv", html: bool = True
) -> dict[str, int]:
    month = check_month(month)
    if fmt not in ("csv", "parquet"):
        raise UsageBillingError(f"--format must be csv or parquet, got {fmt!r}")
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageBillingError(f"cannot write to {out}: {exc.strerror}") from None
    invoices, lines, pools = _read(engine, month)
    invoices = invoices.sort_by([("invoice_number", "ascending")])
    lines = lines.sort_by([("invoice_number", "ascending"), ("line_no", "ascending")])
    try:
        for name, table, columns in (
            ("invoices", invoices, INVOICE_COLUMNS),
            ("invoice_lines", lines, LINE_COLUMNS),
        ):
            table = table.select(list(columns))
            if fmt == "csv":
                csv.write_csv(table, out / f"{name}.csv")
            else:
                pq.write_table(table, out / f"{name}.parquet")
        pages = write_html(out / "html", month, invoices, lines, pools) if html else 0
    except OSError as exc:
        raise UsageBillingError(f"cannot write to {out}: {exc.strerror or exc}") from None
    return {"invoices": invoices.num_rows, "lines": lines.num_rows, "html": pages}


def _read(engine: Engine, month: str) -> tuple[pa.Table, pa.Table, list]:  # type: ignore[type-arg]
    i, line, p = Invoice.__table__.c, InvoiceLine.__table__.c, PoolUsage.__table__.c
    numbered = (i.period == month) & i.invoice_number.is_not(None)
    first, last = month_bounds(month)
    with engine.connect() as conn:
        invoices = read_arrow(
            conn, select(*(i[c] for c in EXPORT_INVOICE_SCHEMA.names)).where(numbered), EXPORT_INVOICE_SCHEMA
        )
        cols = [
            i[c] if c in ("invoice_number", "account_id", "period", "currency") else line[c]
            for c in EXPORT_LINE_SCHEMA.names
        ]
        query = (
            select(*cols)
            .select_from(InvoiceLine.__table__.join(Invoice.__table__, line.invoice_id == i.invoice_id))
            .where(numbered)
        )
        lines = read_arrow(conn, query, EXPORT_LINE_SCHEMA)
        pools = conn.execute(
            select(
                p.account_id,
                p.plan,
                p.pool,
                p.period_start,
                p.period_end,
                p.allowance,
                p.used,
                p.remaining,
                p.exhausted_at,
            )
            .where(p.period_end >= first, p.period_start <= last)
            .order_by(p.account_id, p.pool, p.period_start)
        ).all()
    return invoices, lines, pools


def file_name(account_id: str) -> str:
    """A safe file name for any account id (ids come from input files)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", account_id)[:80].lstrip(".") or "account"
    if safe != account_id:
        safe += "-" + hashlib.sha1(account_id.encode()).hexdigest()[:8]
    return f"{safe}.html"


def write_html(folder: Path, month: str, invoices: pa.Table, lines: pa.Table, pools: list) -> int:  # type: ignore[type-arg]
    folder.mkdir(parents=True, exist_ok=True)
    docs_by_account: dict[str, list[dict]] = defaultdict(list)
    for doc in invoices.to_pylist():
        docs_by_account[doc["account_id"]].append(doc)
    lines_by_doc: dict[str, list[dict]] = defaultdict(list)
    for row in lines.to_pylist():
        lines_by_doc[row["invoice_number"]].append(row)
    pools_by_account: dict[str, list] = defaultdict(list)  # type: ignore[type-arg]
    for row in pools:
        pools_by_account[row.account_id].append(row)
    for account, docs in docs_by_account.items():
        page = render_account(account, month, docs, lines_by_doc, pools_by_account.get(account, []))
        (folder / file_name(account)).write_text(page, encoding="utf-8")
    return len(docs_by_account)


def _fmt_money(value: Decimal, currency: str) -> str:
    return f"{value:,.2f} {currency}"


def _group_label(line: dict) -> str:
    if line["model"] is None:
        return "Plan"
    return f"{line['model']} · {line['speed_tier']}"


def _tr(*cells: object, head: bool = False, first_span: int = 1) -> str:
    """One table row; numbers (and money strings) are right-aligned, text is escaped."""
    tag = "th" if head else "td"
    out = []
    for i, cell in enumerate(cells):
        numeric = isinstance(cell, (int, Decimal)) or (isinstance(cell, str) and cell[:1].isdigit())
        text = f"{cell:,}" if isinstance(cell, int) else html.escape(str(cell))
        span = f" colspan='{first_span}'" if i == 0 and first_span > 1 else ""
        out.append(f"<{tag}{span}{' class=n' if numeric and i else ''}>{text}</{tag}>")
    return "<tr>" + "".join(out) + "</tr>"


def _document(doc: dict, lines: list[dict], currency: str) -> list[str]:
    e = html.escape
    title = "Invoice" if doc["kind"] == "invoice" else f"Adjustment to {doc['corrects'] or 'invoice'}"
    void = f" · Void: {e(doc['void_reason'])}" if doc["void_reason"] else ""
    plan = doc["plan"] or "pay as you go"
    parts = [
        f"<section class='doc {e(doc['status'])}'><h2>{e(title)} {e(doc['invoice_number'])}</h2>",
        f"<p class='meta'>Status: <b>{e(doc['status'])}</b> · Plan: {e(plan)}{void}</p>",
        "<table><thead>",
        _tr("Line", "Kind", "Quantity", "Unit price (per 1M)", "Amount", head=True),
        "</thead>",
    ]
    groups: dict[str, list[dict]] = defaultdict(list)
    for line in lines:
        groups[_group_label(line)].append(line)
    for label, rows in groups.items():
        subtotal = sum((r["amount"] for r in rows), Decimal(0))
        parts.append(
            "<tbody class='group'>" + _tr(label, _fmt_money(subtotal, currency), head=True, first_span=4)
        )
        for r in rows:
            kind = f"adjustment of {r['adjusted_type']}" if r["adjusted_type"] else r["line_type"]
            price = f"{r['unit_price']:,.6f}"
            parts.append(_tr(r["description"], kind, r["quantity"], price, _fmt_money(r["amount"], currency)))
        parts.append("</tbody>")
    total = _tr("Total", _fmt_money(doc["total"], currency), head=True, first_span=4)
    parts.append(f"<tfoot>{total}</tfoot></table></section>")
    return parts


def _pools(pools: list) -> list[str]:  # type: ignore[type-arg]
    parts = ["<h2>Quota pools</h2><table><thead>"]
    parts.append(_tr("Pool", "Period", "Allowance", "Used", "Remaining", "Exhausted at (UTC)", head=True))
    parts.append("</thead><tbody>")
    for p in pools:
        exhausted = (
            p.exhausted_at.strftime("%Y-%m-%d %H:%M") if isinstance(p.exhausted_at, dt.datetime) else ""
        )
        period = f"{p.period_start} to {p.period_end}"
        parts.append(_tr(f"{p.plan} / {p.pool}", period, p.allowance, p.used, p.remaining, exhausted))
    parts.append("</tbody></table>")
    return parts


def render_account(account: str, month: str, docs: list[dict], lines_by_doc: dict, pools: list) -> str:  # type: ignore[type-arg]
    """One printable page: the account's documents for the month, its pools, the amount due."""
    e = html.escape
    currency = docs[0]["currency"]
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>Invoice {e(month)} · {e(account)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Usage invoice · {e(month)}</h1><p class='meta'>Account <b>{e(account)}</b></p>",
    ]
    net = Decimal(0)
    for doc in sorted(docs, key=lambda d: d["invoice_number"]):
        parts += _document(doc, lines_by_doc.get(doc["invoice_number"], []), currency)
        if doc["status"] != "void":
            net += doc["total"]
    if pools:
        parts += _pools(pools)
    due = _fmt_money(net, currency)
    parts.append(f"<p class='total'>Amount due for {e(month)}: <b>{due}</b></p></body></html>")
    return "\n".join(parts)


_CSS = """
body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;color:#222}
table{border-collapse:collapse;width:100%;margin:.5rem 0 1.5rem}
th,td{padding:.25rem .5rem;border-bottom:1px solid #ddd;text-align:left}
.n{text-align:right;font-variant-numeric:tabular-nums}
tbody.group tr:first-child th{background:#f3f3f3}
.meta{color:#555}.total{font-size:1.2rem}
section.void{opacity:.5}
@media print{body{margin:0}section{break-inside:avoid}}
"""
