"""Customer documents of a generated month: invoices, an adjustment for a plan change and one for late
usage, a voided invoice billed again; exported as CSV, Parquet, HTML and PDF.

What a customer and a finance analyst rely on: every document's lines add up to its subtotal and
total, each line's quantity x unit price / unit size is its amount, an adjustment names a finalized
document of the same account and month and lists only what changed, every document has a PDF whose
text holds its number, customer, period and total, and the HTML reads right in Chromium.
"""

from __future__ import annotations

import csv
import datetime as dt
import re
import shutil
import subprocess
from collections import defaultdict
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select, text

from pipelines.cli import main
from pipelines.invoicing import credits
from pipelines.invoicing import documents as invoicing
from pipelines.invoicing.customer import period_text
from pipelines.invoicing.export import INVOICE_COLUMNS, LINE_COLUMNS, export
from pipelines.warehouse.accounts import load_accounts
from pipelines.warehouse.engine import make_engine, upgrade
from schemas.warehouse import Invoice, InvoiceLine, InvoicePlan
from tests.browser import measure
from tests.conftest import cli_args, close_month, run_day, small_dates, sqlite_at

pytestmark = pytest.mark.slow
MONTH = "2026-03"
HOSTILE = 'Zoë & <Søn> "Ltd" <script>alert(1)</script>'


def _with_contacts(source: Path, target: Path, split: str | None = None) -> None:
    """The accounts file with names, emails and addresses for most accounts (one hostile name; every
    fifth account has none), and ``split``'s plan changed to ``plus`` from March 4 on."""
    with open(source, newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for i, r in enumerate(rows):
        if i % 5:
            r |= {
                "name": HOSTILE if i % 7 == 1 else f"Customer {r['account_id']} GmbH",
                "email": f"billing+{i}@example.com",
                "billing_address": f"Hauptstrasse {i}\n10115 Berlin\nGermany",
            }
        if r["account_id"] == split:
            out.append(r | {"active_until": "2026-03-03"})
            r = r | {"plan": "plus", "active_from": "2026-03-04"}
        out.append(r)
    with open(target, "w", newline="") as f:
        writer = csv.DictWriter(
            f, fieldnames=list(dict.fromkeys([*rows[0], "name", "email", "billing_address"]))
        )
        writer.writeheader()
        writer.writerows(out)


@pytest.fixture(scope="module")
def month(tmp_path_factory, small_landing, catalog) -> dict:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("documents")
    landing = root / "landing"
    shutil.copytree(small_landing, landing)
    _with_contacts(small_landing / "accounts.csv", landing / "accounts.csv")
    settings = sqlite_at(root, landing)
    engine = make_engine(settings.database_url)
    upgrade(engine)
    load_accounts(engine, landing / "accounts.csv", catalog)
    run_day(settings, small_dates())
    close_month(settings, MONTH, root)
    credited = _grant(engine, catalog, root)
    invoicing.draft(engine, catalog, MONTH)
    invoicing.finalize(engine, catalog, MONTH)
    # 0. a goodwill credit granted after finalization: an adjustment applies it
    goodwill = root / "goodwill.csv"
    goodwill.write_text(
        CREDITS_HEADER + f"goodwill-1,{credited[2]},3.00,promotional,2026-03-01,,0,,outage on March 9\n"
    )
    credits.load(engine, goodwill, catalog)
    # 1. a plan change after finalization: an account on the pro plan from the start moves to plus on March 4
    with open(small_landing / "accounts.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    single = [r["account_id"] for r in rows if [x["account_id"] for x in rows].count(r["account_id"]) == 1]
    from_march = {
        r["account_id"]
        for r in rows
        if r["account_id"] in single
        and r["plan"] == "pro"
        and r["active_from"] <= "2026-03-03"
        and not r["active_until"]
    }
    start = {r["account_id"]: dt.date.fromisoformat(r["active_from"]) for r in rows}
    i = Invoice.__table__.c
    with engine.connect() as conn:
        pro = conn.execute(
            select(i.account_id)
            .where(i.account_id.in_(sorted(from_march)), i.total > 100)
            .order_by(i.total.desc(), i.account_id)
            .limit(1)
        ).scalar_one()
    _with_contacts(small_landing / "accounts.csv", landing / "accounts.csv", split=pro)
    load_accounts(engine, landing / "accounts.csv", catalog)
    assert main([*cli_args(settings), "quota", "meter", "--stale"]) == 0
    # 2. late usage of other accounts
    late_day = small_dates()[-1] + dt.timedelta(days=3)
    late = ds.dataset(f"{settings.lake}/events", format="parquet").to_table().slice(200, 6)
    late = late.drop_columns(["_landing_date", "_source_file"])
    late = late.set_column(0, "event_id", pa.array([f"late-doc-{n}" for n in range(6)]))
    (landing / late_day.isoformat()).mkdir(exist_ok=True)
    pq.write_table(late, landing / late_day.isoformat() / "late.parquet")
    run_day(settings, [late_day])
    invoicing.draft(engine, catalog, MONTH)
    invoicing.finalize(engine, catalog, MONTH)
    # 3. a voided invoice, billed again
    with engine.connect() as conn:
        voided = conn.execute(
            select(i.invoice_number)
            .where(i.kind == "invoice", i.status == "finalized", i.account_id != pro)
            .order_by(i.invoice_number)
            .limit(1)
        ).scalar_one()
    invoicing.void(engine, voided, "billed to the wrong entity")
    invoicing.draft(engine, catalog, MONTH)
    invoicing.finalize(engine, catalog, MONTH)
    out = root / "exports"
    # PDFs (a WeasyPrint page each, the slow part) of the accounts whose documents show every case: the
    # plan change's adjustment, the voided invoice and its rebill, the credits, the largest bill; then
    # the whole month as CSV, Parquet and HTML (its index links the PDFs there are)
    with engine.connect() as conn:
        largest, was_voided = (
            conn.execute(
                select(i.account_id).order_by(i.total.desc(), i.invoice_number).limit(1)
            ).scalar_one(),
            conn.execute(select(i.account_id).where(i.invoice_number == voided)).scalar_one(),
        )
    with_pdf = sorted({pro, was_voided, largest, *credited})
    pdfs = sum(export(engine, MONTH, out, "pdf", account=a)["pdf"] for a in with_pdf)
    counts = export(engine, MONTH, out, "csv,parquet,html") | {"pdf": pdfs}
    engine.dispose()
    return {
        "settings": settings,
        "out": out,
        "counts": counts,
        "split": pro,
        "split_from": start[pro],
        "voided": voided,
        "credited": credited,
        "with_pdf": with_pdf,
    }


CREDITS_HEADER = "grant_id,account_id,amount,kind,effective_from,expires,priority,models,reason\n"


def _grant(engine, catalog, root: Path) -> list[str]:  # type: ignore[no-untyped-def]
    """Credits before the first draft: a welcome credit larger than its account's month (the invoice
    comes to 0.00) and a prepaid block that covers part of another's; a third account is credited later."""
    with engine.connect() as conn:
        top = list(
            conn.execute(
                text(
                    "SELECT account_id FROM billable_usage GROUP BY account_id "
                    "ORDER BY sum(overage_tokens) DESC, account_id LIMIT 3"
                )
            ).scalars()
        )
    path = root / "credits.csv"
    path.write_text(
        CREDITS_HEADER
        + f"welcome-1,{top[0]},5000.00,promotional,2026-03-01,2026-06-01,0,,welcome credit\n"
        + f"prepaid-1,{top[1]},10.00,paid,2026-02-01,,0,,prepaid block\n"
    )
    credits.load(engine, path, catalog)
    return top


def _csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_the_scenario_has_every_kind_of_document(month):
    docs = _csv(month["out"] / "invoices.csv")
    kinds = {(d["document_type"], d["status"]) for d in docs}
    assert {("invoice", "finalized"), ("adjustment", "finalized"), ("invoice", "void")} <= kinds
    adjusted = {d["account_id"] for d in docs if d["document_type"] == "adjustment"}
    assert month["split"] in adjusted and len(adjusted) >= 2  # the plan change and the late usage
    assert month["counts"]["html"] == len(docs) == month["counts"]["invoices"]
    assert month["counts"]["pdf"] == sum(d["account_id"] in month["with_pdf"] for d in docs)  # one each


def test_every_document_adds_up_and_every_line_gives_its_amount(month):
    docs = {d["invoice_number"]: d for d in _csv(month["out"] / "invoices.csv")}
    lines = _csv(month["out"] / "invoice_lines.csv")
    assert list(docs[next(iter(docs))]) == list(INVOICE_COLUMNS)
    sums: dict[str, Decimal] = defaultdict(Decimal)
    for line in lines:
        quantity, price, size = int(line["quantity"]), Decimal(line["unit_price"]), int(line["unit_size"])
        expected = (quantity * price / size).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        assert Decimal(line["amount"]) == expected, line
        charge = line["adjusted_type"] or line["line_type"]
        units = {"plan_fee": ("month", False), "credit": ("credit", False)}
        assert (line["unit"], size == 1_000_000) == units.get(charge, ("1M tokens", True)), line
        assert bool(line["grant_id"]) == (charge == "credit"), line
        if charge == "plan_fee":
            assert size == 31  # March's days; the quantity is the plan's active days
        doc = docs[line["invoice_number"]]
        for column in (
            "account_id",
            "period",
            "currency",
            "document_type",
            "corrects",
            "issued_at",
            "due_date",
        ):
            assert line[column] == doc[column]
        sums[line["invoice_number"]] += Decimal(line["amount"])
    for number, doc in docs.items():
        assert Decimal(doc["subtotal"]) == Decimal(doc["total"]) == sums[number], number
    parquet = pq.read_table(month["out"] / "invoice_lines.parquet")
    assert parquet.column_names == list(LINE_COLUMNS) and parquet.num_rows == len(lines)
    assert sum(parquet["amount"].to_pylist()) == sum(Decimal(r["amount"]) for r in lines)


def test_an_adjustment_corrects_a_finalized_document_of_its_account_and_month_and_lists_only_changes(
    month,
):
    engine = make_engine(month["settings"].database_url)
    i, line = Invoice.__table__.c, InvoiceLine.__table__.c
    with engine.connect() as conn:
        docs = {r.invoice_number: r for r in conn.execute(select(Invoice.__table__)) if r.invoice_number}
        rows = conn.execute(
            select(
                i.invoice_number, *(line[c] for c in ("adjusted_type", "model", "speed_tier", "token_kind"))
            )
            .add_columns(line.unit_price, line.quantity, line.amount)
            .select_from(InvoiceLine.__table__.join(Invoice.__table__, line.invoice_id == i.invoice_id))
            .where(i.kind == "adjustment")
        ).all()
    engine.dispose()
    adjustments = [d for d in docs.values() if d.kind == "adjustment"]
    assert adjustments
    for adj in adjustments:
        original = docs[adj.corrects]
        assert original.status == "finalized" and original.finalized_at <= adj.finalized_at
        assert (original.account_id, original.period) == (adj.account_id, adj.period)
    # a line billed before and still true is never listed again: no reversal has an identical rebill
    by_doc: dict[str, list[tuple]] = defaultdict(list)
    for r in rows:
        by_doc[r[0]].append(tuple(r[1:]))
    for number, doc_lines in by_doc.items():
        reversed_ = {(*r[:5], -r[5], -r[6]) for r in doc_lines if r[5] < 0}
        billed_again = {r for r in doc_lines if r[5] > 0}
        assert not reversed_ & billed_again, number
    # the plan change: the month's pro fee reversed, then pro until March 3 and plus from March 4 billed
    split = next(a for a in adjustments if a.account_id == month["split"])
    fees = sorted((q, a, p) for kind, *_, p, q, a in by_doc[split.invoice_number] if kind == "plan_fee")
    pro_days = 4 - month["split_from"].day

    def fee(monthly: int, days: int) -> Decimal:
        return (Decimal(monthly) * days / 31).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)

    assert fees == sorted(
        [
            (-(pro_days + 28), -fee(200, pro_days + 28), Decimal("200")),
            (pro_days, fee(200, pro_days), Decimal("200")),
            (28, fee(20, 28), Decimal("20")),  # 20 x 28 / 31 = 18.064... -> 18.06
        ]
    )


def test_plan_periods_cover_each_month_once_and_say_pay_as_you_go(month):
    engine = make_engine(month["settings"].database_url)
    with engine.connect() as conn:
        periods = conn.execute(select(InvoicePlan.__table__)).all()
        docs = {r.invoice_id: r for r in conn.execute(select(Invoice.__table__))}
    engine.dispose()
    days: dict[str, int] = defaultdict(int)
    plans: dict[str, list] = defaultdict(list)
    for p in periods:
        days[p.invoice_id] += p.days
        plans[p.invoice_id].append(p.plan)
        assert p.days == (p.active_until - p.active_from).days + 1
    assert set(days) == set(docs) and set(days.values()) == {31}
    split = [plans[k] for k, d in docs.items() if d.account_id == month["split"] and d.kind == "adjustment"]
    # before its accounts row starts, an account pays as it goes (the billing rule's "no plan")
    assert split == [[None] * (month["split_from"].day > 1) + ["pro", "plus"]]
    assert any(None in v for v in plans.values())  # pay as you go, as a period of its own


def _pdf_text(path: Path) -> str:
    return subprocess.run(
        ["pdftotext", "-layout", str(path), "-"], capture_output=True, text=True, check=True
    ).stdout


def test_each_document_has_a_pdf_with_its_number_customer_period_and_total(month, catalog):
    docs = _csv(month["out"] / "invoices.csv")
    engine = make_engine(month["settings"].database_url)
    i = Invoice.__table__.c
    with engine.connect() as conn:
        names = dict(conn.execute(select(i.invoice_number, i.customer_name)).all())
        zones = dict(conn.execute(select(i.invoice_number, i.timezone)).all())
    engine.dispose()
    credited = {
        ln["invoice_number"]: ln["grant_id"]
        for ln in _csv(month["out"] / "invoice_lines.csv")
        if ln["grant_id"]
    }
    assert len(credited) >= 3
    docs = [d for d in docs if d["account_id"] in month["with_pdf"]]  # a PDF for each of their documents
    pdfs = sorted(p.name for p in (month["out"] / "pdf").iterdir())
    assert pdfs == sorted(f"{d['invoice_number']}.pdf" for d in docs)
    assert {d["document_type"] for d in docs} == {"invoice", "adjustment"} and any(
        d["status"] == "void" for d in docs
    )
    for d in docs:
        text = " ".join(_pdf_text(month["out"] / "pdf" / f"{d['invoice_number']}.pdf").split())
        assert d["invoice_number"] in text
        assert (names[d["invoice_number"]] or f"Account {d['account_id']}") in text
        assert " ".join(period_text(MONTH, zones[d["invoice_number"]]).split()) in text
        total = Decimal(d["total"])
        assert f"{catalog.currency}\u00a0{abs(total):,.2f}".replace("\u00a0", " ") in text.replace(
            "\u00a0", " "
        )
        assert ("Adjustment" in text) == (d["document_type"] == "adjustment")
        if d["document_type"] == "adjustment":
            assert f"corrects invoice {d['corrects']}" in text or f"corrects document {d['corrects']}" in text
        if d["status"] == "void":
            assert "VOID" in text and "billed to the wrong entity" in text
        if d["invoice_number"] in credited:  # the PDF shows the credits as the page does
            assert "Credits applied" in text and credited[d["invoice_number"]] in text


def test_the_first_pdf_page_renders_as_a_page_with_ink(month, tmp_path):
    from PIL import Image

    largest = max(_csv(month["out"] / "invoices.csv"), key=lambda d: Decimal(d["total"]))
    pdf = month["out"] / "pdf" / f"{largest['invoice_number']}.pdf"
    subprocess.run(
        ["pdftoppm", "-r", "50", "-png", "-f", "1", "-l", "1", str(pdf), str(tmp_path / "p")], check=True
    )
    page = Image.open(next(tmp_path.glob("p*.png"))).convert("L")
    assert page.size == (414, 585)  # A4 at 50 dpi
    dark = sum(page.histogram()[:128]) / (page.size[0] * page.size[1])
    assert 0.005 < dark < 0.5, dark  # text on a white page: neither blank nor a black block


def _layout(page: Path, tmp: Path, width: int) -> dict:
    """How Chromium lays the page out at ``width`` px: the lines each numeric cell takes, whether the
    page is wider than the window, and the text a person reads."""
    return measure(  # type: ignore[return-value]
        page,
        tmp,
        "{cells:[...document.querySelectorAll('td.n,th.n,b.n')].map(e=>{"
        "const r=document.createRange();r.selectNodeContents(e);"
        "const lines=new Set([...r.getClientRects()].map(x=>Math.round(x.top)));"
        "return {text:e.textContent,lines:lines.size}}),"
        "overflow:document.documentElement.scrollWidth>window.innerWidth,text:document.body.innerText}",
        width,
    )


def test_chromium_shows_amounts_on_one_line_and_no_raw_codes(month, tmp_path):
    docs = _csv(month["out"] / "invoices.csv")
    adjustment = next(d for d in docs if d["document_type"] == "adjustment")
    largest = max(docs, key=lambda d: Decimal(d["total"]))
    hostile = next(
        d
        for d in docs
        if "Zoë &amp; &lt;Søn&gt;" in (month["out"] / "html" / f"{d['invoice_number']}.html").read_text()
    )
    for doc in (largest, adjustment, hostile):
        layout = _layout(month["out"] / "html" / f"{doc['invoice_number']}.html", tmp_path, 900)
        assert layout["cells"] and all(c["lines"] == 1 for c in layout["cells"]), [
            c for c in layout["cells"] if c["lines"] != 1
        ]
        assert not layout["overflow"]
        text = layout["text"]
        if doc is hostile:
            assert HOSTILE in text  # shown as written, not run as markup
        for code in ("plan_fee", "overage_usage", "included_usage", "cached_input", "200.000000"):
            assert code not in text, code
        assert "Issue date" in text and "Due date" in text and "Billing period" in text and "Bill to" in text
    layout = _layout(month["out"] / "html" / f"{largest['invoice_number']}.html", tmp_path, 900)
    # the plan fee in words
    assert re.search(r"plan: \d+ of 31 days .*at USD\s\d+\.\d\d per month", layout["text"])
    # included usage is one line per model and tier, never a line per token kind at 0.00
    assert layout["text"].count("Tokens covered by the plan's allowances") <= layout["text"].count(" \u00b7 ")
    pages = list((month["out"] / "html").glob("INV-*.html"))
    shown = [p for p in pages if "Zoë &amp; &lt;Søn&gt;" in p.read_text(encoding="utf-8")]
    assert shown and all("<script>alert" not in p.read_text(encoding="utf-8") for p in pages)


def test_support_exports_one_accounts_pdf_alone(month, tmp_path, capsys):
    account = month["split"]
    args = [*cli_args(month["settings"]), "invoices", "export", "--month", MONTH]
    assert main([*args, "--out", str(tmp_path / "one"), "--format", "pdf", "--account", account]) == 0
    written = sorted(
        p.relative_to(tmp_path / "one").as_posix() for p in (tmp_path / "one").rglob("*") if p.is_file()
    )
    numbers = [d["invoice_number"] for d in _csv(month["out"] / "invoices.csv") if d["account_id"] == account]
    assert written == sorted(f"pdf/{n}.pdf" for n in numbers) and len(numbers) == 2
    assert main([*args, "--out", str(tmp_path / "x"), "--format", "pdf", "--account", "no-such-account"]) == 2
    assert main([*args, "--out", str(tmp_path / "y"), "--format", "docx"]) == 2
    err = capsys.readouterr().err
    assert "no-such-account" in err and "--format takes one or more of csv, parquet, html, pdf" in err
    assert "Traceback" not in err


def test_the_index_links_only_files_that_exist_and_outputs_never_land_in_the_lake(month, tmp_path, capsys):
    import re

    s = month["settings"]
    args = [*cli_args(s), "invoices", "export", "--month", MONTH]
    assert main([*args, "--out", str(tmp_path / "no-pdf"), "--format", "csv,html"]) == 0
    index = (tmp_path / "no-pdf" / "html" / "index.html").read_text(encoding="utf-8")
    links = re.findall(r"href='([^']+)'", index)
    assert links and all((tmp_path / "no-pdf" / "html" / link).resolve().is_file() for link in links)
    assert not any(link.endswith(".pdf") for link in links)
    full = (month["out"] / "html" / "index.html").read_text(encoding="utf-8")  # the export with PDFs
    pdf_links = [link for link in re.findall(r"href='([^']+)'", full) if link.endswith(".pdf")]
    assert len(pdf_links) == month["counts"]["pdf"] > 0
    capsys.readouterr()
    for out in (f"{s.lake}/events/date=2026-03-02", s.lake, f"{s.landing}/x", "", "   "):
        assert main([*args, "--out", out]) == 2, out
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and ("inside the" in lines[0] or "is empty" in lines[0]), err
    assert not (Path(s.lake) / "events" / "date=2026-03-02" / "invoices.csv").exists()


def test_chromium_shows_the_credits_applied_and_the_total_due_after_them(month, tmp_path):
    docs = _csv(month["out"] / "invoices.csv")
    lines = _csv(month["out"] / "invoice_lines.csv")
    welcome, prepaid, goodwill = month["credited"]
    shown = {}
    for account, grant, amount, reason in (
        (welcome, "welcome-1", Decimal("5000.00"), "welcome credit"),
        (prepaid, "prepaid-1", Decimal("10.00"), "prepaid block"),
        (goodwill, "goodwill-1", Decimal("3.00"), "outage on March 9"),
    ):
        numbers = [ln["invoice_number"] for ln in lines if ln["grant_id"] == grant]
        assert numbers, grant
        doc = next(d for d in docs if d["invoice_number"] == numbers[-1] and d["status"] == "finalized")
        assert doc["account_id"] == account
        mine = [ln for ln in lines if ln["invoice_number"] == doc["invoice_number"]]
        applied = -sum(Decimal(ln["amount"]) for ln in mine if ln["grant_id"] == grant)
        charges = sum(Decimal(ln["amount"]) for ln in mine if not ln["grant_id"])
        total = Decimal(doc["total"])
        assert charges - applied == total and 0 < applied <= amount
        text = _layout(month["out"] / "html" / f"{doc['invoice_number']}.html", tmp_path, 900)["text"]
        assert "Credits applied" in text and reason in text and grant in text
        assert f"{applied:,.2f}" in text  # what it covered here
        assert f"{amount - applied:,.2f}" in text  # what remains of it after this document
        assert re.search(rf"Charges( \(change\))? USD\s{charges:,.2f}", text), text
        # an adjustment that only applies a credit pays money back
        assert ("Total due after credits" if total >= 0 else "Total credited to the account") in text
        shown[grant] = (doc["document_type"], Decimal(doc["total"]))
    assert shown["welcome-1"] == ("invoice", Decimal("0.00"))  # a credit larger than the month
    # granted after finalization: an adjustment applies it, crediting the account
    assert shown["goodwill-1"] == ("adjustment", Decimal("-3.00"))
