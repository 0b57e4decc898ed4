"""Exports of a month's numbered documents: CSV or Parquet for finance, HTML and PDF for customers.

    usage-billing invoices export --month 2026-03 --out exports/2026-03 [--format csv,html] [--account A]

``--format`` takes one or more of ``csv``, ``parquet``, ``html`` and ``pdf`` (default ``csv,html``);
``--account`` exports one account's documents only, as support would. Writes ``invoices.csv`` and
``invoice_lines.csv`` (or ``.parquet``: schemas ``EXPORT_*`` in schemas/lake.py) for finalized and
void documents (the ones with a number; drafts are not documents yet), ``html/<number>.html`` and
``pdf/<number>.pdf``: each document as its customer receives it (``pipelines.invoicing.customer``),
and ``html/index.html``, the documents of the export with links to both.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Iterator
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as csv
import pyarrow.parquet as pq
from sqlalchemy import Engine, func, select

from billing.invoices import LINE_SCHEMA, PLAN_PERIOD_SCHEMA, charge_types, units
from pipelines.errors import UsageBillingError
from pipelines.invoicing import customer
from pipelines.invoicing.months import check_month
from pipelines.invoicing.pdf import write_pdfs
from pipelines.runtime.outputs import atomic, neutralize, output_folder, write_text
from pipelines.warehouse.engine import read_arrow
from schemas import lines as line_types
from schemas.lake import DOCUMENT_COLUMNS, EXPORT_INVOICE_SCHEMA, EXPORT_LINE_SCHEMA
from schemas.warehouse import CreditGrant, Invoice, InvoiceLine, InvoicePlan

FORMATS = ("csv", "parquet", "html", "pdf")
INVOICE_COLUMNS = tuple(EXPORT_INVOICE_SCHEMA.names)
LINE_COLUMNS = tuple(EXPORT_LINE_SCHEMA.names)
# What the customer documents read of a document besides the export's columns.
DOCUMENT_SCHEMA = pa.schema(
    [
        *EXPORT_INVOICE_SCHEMA,
        *(
            (name, pa.string())
            for name in ("timezone", "customer_name", "customer_email", "customer_address")
        ),
        *((name, pa.string()) for name in ("seller_name", "seller_address", "seller_tax_id", "void_reason")),
    ]
)
# A document's lines as drafted (billing.invoices.LINE_SCHEMA), by number and line number.
LINE_READ_SCHEMA = pa.schema(
    [
        ("invoice_number", pa.string()),
        ("line_no", pa.int32()),
        *(f for f in LINE_SCHEMA if f.name != "account_id"),
    ]
)
PLAN_READ_SCHEMA = pa.schema([("invoice_number", pa.string()), *list(PLAN_PERIOD_SCHEMA)[1:]])


def parse_formats(formats: str | list[str] | tuple[str, ...]) -> list[str]:
    """'csv,html' -> ['csv', 'html']; an unknown format is a one-line error."""
    items = formats.split(",") if isinstance(formats, str) else list(formats)
    chosen = [f.strip().lower() for f in items if f.strip()]
    unknown = [f for f in chosen if f not in FORMATS]
    if unknown or not chosen:
        raise UsageBillingError(
            f"--format takes one or more of {', '.join(FORMATS)} (comma separated), got {formats!r}"
        )
    return sorted(set(chosen), key=FORMATS.index)


def export(
    engine: Engine,
    month: str,
    out: str | Path,
    formats: str | list[str] | tuple[str, ...] = "csv,html",
    account: str | None = None,
    lake: str = "",
    landing: str = "",
    tier_labels: dict[str, str] | None = None,
) -> dict[str, int]:
    """Write the month's numbered documents (of ``account`` only, when given) in ``formats``;
    returns how many documents, lines, HTML pages and PDFs were written. ``out`` may not lie inside
    ``lake`` or ``landing``; every file is written whole or not at all (``runtime.outputs``).
    ``tier_labels``: what the pages print for each speed tier (the catalog's ``[[tiers]]``)."""
    month = check_month(month)
    chosen = parse_formats(formats)
    if not str(out).strip():
        raise UsageBillingError("--out is empty: give the folder to write to")
    docs, lines, plans = _read(engine, month, account)
    balances = credit_balances(engine, docs, lines)
    if account is not None and docs.num_rows == 0:
        raise UsageBillingError(f"account {account!r} has no numbered document for {month}")
    out = output_folder(out, lake, landing)
    counts = {"invoices": docs.num_rows, "lines": lines.num_rows, "html": 0, "pdf": 0}
    try:
        for fmt in ("csv", "parquet"):
            if fmt in chosen:
                for name, table in (("invoices", docs), ("invoice_lines", export_lines(lines, docs, month))):
                    table = table.select(list(INVOICE_COLUMNS if name == "invoices" else LINE_COLUMNS))
                    with atomic(out / f"{name}.{fmt}") as tmp:
                        if fmt == "csv":  # for spreadsheets: no cell runs as a formula
                            csv.write_csv(neutralize(table), tmp)
                        else:  # for machines: the raw values
                            pq.write_table(table, tmp)
        if "html" in chosen or "pdf" in chosen:
            pages = document_pages(
                docs, lines, plans, month, labels=tier_labels, credits=balances
            )  # a batch at a time
            if "html" in chosen:
                pages = _written_as_html(pages, out / "html", counts)
            if "pdf" in chosen:
                (out / "pdf").mkdir(exist_ok=True)
                counts["pdf"] = write_pdfs((page, out / "pdf" / f"{number}.pdf") for number, page in pages)
            else:
                for _ in pages:
                    pass
            if "html" in chosen:
                write_index(out / "html", docs)
    except OSError as exc:
        raise UsageBillingError(f"cannot write to {out}: {exc.strerror or exc}") from None
    return counts


def _read(engine: Engine, month: str, account: str | None) -> tuple[pa.Table, pa.Table, pa.Table]:
    """The month's numbered documents, their lines and plan periods, in number and line order."""
    i = Invoice.__table__.c
    numbered = (i.period == month) & i.invoice_number.is_not(None)
    if account is not None:
        numbered = numbered & (i.account_id == account)
    renamed = {"document_type": i.kind, "issued_at": i.finalized_at}
    with engine.connect() as conn:
        docs = read_arrow(
            conn,
            select(*(renamed[c] if c in renamed else i[c] for c in DOCUMENT_SCHEMA.names)).where(numbered),
            DOCUMENT_SCHEMA,
        )
        lines, plans = (
            read_arrow(
                conn,
                select(*(i.invoice_number if c == "invoice_number" else part.c[c] for c in schema.names))
                .select_from(part.join(Invoice.__table__, part.c.invoice_id == i.invoice_id))
                .where(numbered),
                schema,
            )
            for part, schema in (
                (InvoiceLine.__table__, LINE_READ_SCHEMA),
                (InvoicePlan.__table__, PLAN_READ_SCHEMA),
            )
        )
    return (
        docs.sort_by("invoice_number"),
        lines.sort_by([("invoice_number", "ascending"), ("line_no", "ascending")]),
        plans.sort_by([("invoice_number", "ascending"), ("active_from", "ascending")]),
    )


def credit_balances(engine: Engine, docs: pa.Table, lines: pa.Table) -> dict[str, dict[str, dict]]:
    """number -> grant -> {"reason", "kind", "amount", "remaining"} for each credit line of the documents:
    the grant's reason and what remains of it after that document (the grant's amount less what the
    finalized documents of the account's earlier months and this month's documents up to this one took)."""
    credit = line_types.CREDIT.id
    ids = sorted(set(lines.filter(pc.is_valid(lines["grant_id"]))["grant_id"].to_pylist()))
    if not ids:
        return {}
    g = CreditGrant.__table__.c
    i, line = Invoice.__table__.c, InvoiceLine.__table__.c
    grants: dict[str, dict] = {}
    taken: list = []
    with engine.connect() as conn:
        for k in range(0, len(ids), 500):
            chunk = ids[k : k + 500]
            for r in conn.execute(
                select(g.grant_id, g.reason, g.kind, g.amount).where(g.grant_id.in_(chunk))
            ):
                grants[r.grant_id] = {"reason": r.reason, "kind": r.kind, "amount": Decimal(str(r.amount))}
            taken += conn.execute(
                select(line.grant_id, i.period, i.sequence, i.status, i.invoice_number, line.amount)
                .select_from(InvoiceLine.__table__.join(Invoice.__table__, line.invoice_id == i.invoice_id))
                .where(
                    line.grant_id.in_(chunk),
                    func.coalesce(line.adjusted_type, line.line_type) == credit,
                )
            ).all()
    wanted = set(docs["invoice_number"].to_pylist())
    by_grant: dict[str, list] = {}
    for t in taken:
        by_grant.setdefault(t.grant_id, []).append(t)
    out: dict[str, dict[str, dict]] = {}
    for grant_id, rows in by_grant.items():
        info = grants.get(grant_id)
        for r in rows:
            if info is None or r.invoice_number not in wanted:
                continue
            here = (r.period, r.sequence)
            before = [
                t
                for t in rows
                if t.invoice_number == r.invoice_number
                or (t.status == "finalized" and (t.period, t.sequence) < here)
            ]
            used = sum((-Decimal(str(t.amount)) for t in before), Decimal(0))
            out.setdefault(r.invoice_number, {})[grant_id] = {
                "reason": info["reason"],
                "kind": info["kind"],
                "amount": info["amount"],
                "remaining": (info["amount"] - used).quantize(Decimal("0.01")),
            }
    return out


def export_lines(lines: pa.Table, docs: pa.Table, month: str) -> pa.Table:
    """The lines with their document's columns and their unit (quantity x unit_price / unit_size =
    amount), in the export's column order."""
    keep = ["invoice_number", "account_id", "period", "currency", *(name for name, _ in DOCUMENT_COLUMNS)]
    joined = lines.join(docs.select(keep), "invoice_number").sort_by(
        [("invoice_number", "ascending"), ("line_no", "ascending")]
    )
    unit, size = units(charge_types(joined), month)
    joined = joined.append_column("unit", unit).append_column("unit_size", size)
    return joined.select(list(LINE_COLUMNS)).cast(EXPORT_LINE_SCHEMA)


def _offsets(parts: pa.Table, numbers: pa.Array) -> np.ndarray:
    """Where each document's rows start in ``parts`` (sorted by invoice number like ``numbers``),
    with the end as the last entry: a document's rows are ``parts[offsets[i]:offsets[i + 1]]``."""
    counts = parts.group_by("invoice_number", use_threads=False).aggregate([([], "count_all")])
    index = pc.index_in(numbers, value_set=counts["invoice_number"])
    per_doc = pc.fill_null(pc.take(counts["count_all"], index), 0).to_numpy(zero_copy_only=False)
    return np.concatenate([[0], np.cumsum(per_doc)])


def _written_as_html(
    pages: Iterable[tuple[str, str]], folder: Path, counts: dict[str, int]
) -> Iterator[tuple[str, str]]:
    """Pass the pages on, writing each as ``folder/<number>.html`` on the way (counted)."""
    folder.mkdir(parents=True, exist_ok=True)
    for number, page in pages:
        write_text(folder / f"{number}.html", page)
        counts["html"] += 1
        yield number, page


def document_pages(
    docs: pa.Table,
    lines: pa.Table,
    plans: pa.Table,
    month: str,
    batch: int = 2_000,
    labels: dict[str, str] | None = None,
    credits: dict[str, dict[str, dict]] | None = None,
) -> Iterator[tuple[str, str]]:
    """(number, HTML page) of each document, made ``batch`` documents at a time (only a batch's rows
    are Python objects at once: 100,000 documents hold over a million lines)."""
    lines = lines.append_column("unit_size", units(charge_types(lines), month)[1])
    numbers = docs["invoice_number"]
    line_at, plan_at = _offsets(lines, numbers), _offsets(plans, numbers)
    issued = dict(zip(numbers.to_pylist(), docs["issued_at"].to_pylist(), strict=True))
    for first in range(0, docs.num_rows, batch):
        last = min(first + batch, docs.num_rows)
        batch_lines = lines.slice(line_at[first], line_at[last] - line_at[first]).to_pylist()
        batch_plans = plans.slice(plan_at[first], plan_at[last] - plan_at[first]).to_pylist()
        for i, doc in enumerate(docs.slice(first, last - first).to_pylist(), start=first):
            corrected = None
            if doc["corrects"]:
                when = issued.get(doc["corrects"])
                corrected = {"invoice_number": doc["corrects"], "issued": when.date() if when else None}
            own_lines = batch_lines[line_at[i] - line_at[first] : line_at[i + 1] - line_at[first]]
            own_plans = batch_plans[plan_at[i] - plan_at[first] : plan_at[i + 1] - plan_at[first]]
            grants = (credits or {}).get(doc["invoice_number"], {})
            yield (
                doc["invoice_number"],
                customer.render(doc, own_lines, own_plans, corrected, labels, grants),
            )


def write_index(folder: Path, docs: pa.Table) -> None:
    """``folder/index.html``: the documents of the export, with links to their HTML and to their PDF
    where there is one (``--format pdf``): every link resolves."""
    e = html.escape
    rows = []
    pdfs = folder.parent / "pdf"
    for d in docs.to_pylist():
        n = e(d["invoice_number"])
        pdf = f"<a href='../pdf/{n}.pdf'>PDF</a>" if (pdfs / f"{d['invoice_number']}.pdf").is_file() else ""
        rows.append(
            f"<tr><td><a href='{n}.html'>{n}</a></td><td>{e(d['document_type'])}</td>"
            f"<td>{e(d['status'])}</td><td>{e(d['account_id'])}</td><td>{e(d['customer_name'] or '')}</td>"
            f"<td class=n>{e(customer.money(d['total'], d['currency']))}</td>"
            f"<td>{pdf}</td></tr>"
        )
    month = e(docs["period"][0].as_py()) if docs.num_rows else ""
    write_text(
        folder / "index.html",
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>Documents {month}</title><style>{customer.CSS}</style></head><body>"
        f"<h1 style='text-align:left'>Documents {month}</h1><table class='summary'><thead><tr>"
        "<th>Number</th><th>Type</th><th>Status</th><th>Account</th><th>Customer</th>"
        "<th class=n>Total</th><th>PDF</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
        f"<p class='foot'>{len(rows):,} documents. A PDF is linked where the export wrote one "
        "(--format pdf).</p></body></html>",
    )
