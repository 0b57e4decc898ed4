"""Customer documents: HTML for 100k accounts, PDFs per second, beside the floor of each.

    .venv/bin/python -m benchmarks.documents [--accounts 100000] [--pdf-accounts 1000]

Loads the synthetic month of ``benchmarks.invoices`` (every account on a plan, 2 model x tier
combinations, 3 token kinds; names, emails and addresses) into a fresh SQLite warehouse, drafts and
finalizes it, then times as the CLI runs them (separate processes, start-up included):
- `usage-billing invoices export --format html` for all accounts, against a floor that reads the
  same documents and lines with pyarrow and writes one bare HTML table per document (no labels,
  grouping or summary): what any HTML export of these rows costs;
- `usage-billing invoices export --format pdf` for a month of ``--pdf-accounts`` accounts, against
  WeasyPrint drawing the same pages one after another in one process (the library's own speed).
Targets (issue 28): the HTML of 100,000 accounts in at most 2 minutes; at least 10 PDFs per second.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import pyarrow as pa

from benchmarks.common import command_line, machine, write_section
from benchmarks.invoices import MONTH, _cli, _load, synthetic_month
from pipelines.warehouse.engine import make_engine


def _warehouse(path: Path, accounts: int) -> str:
    url = f"sqlite:///{path}"
    acct, billable = synthetic_month(accounts)
    n = acct.num_rows
    ids = acct["account_id"].to_pylist()
    acct = acct.append_column("name", pa.array([f"Customer {a} Ltd" for a in ids], pa.string()))
    acct = acct.append_column("email", pa.array([f"billing@{a}.example.com" for a in ids], pa.string()))
    acct = acct.append_column(
        "billing_address", pa.array(["1 Main Street\nSpringfield\nUnited States"] * n, pa.string())
    )
    _load(url, acct, billable)
    for step in ("draft", "finalize"):
        _cli(url, "invoices", step, "--month", MONTH)
    return url


def html_floor(url: str, out: Path) -> tuple[float, int]:
    """Read the numbered documents and their lines, write one bare HTML table per document."""
    from pipelines.invoicing.export import _read

    start = time.perf_counter()
    docs, lines, _ = _read(make_engine(url), MONTH, None)
    out.mkdir(parents=True)
    numbers = lines["invoice_number"].to_pylist()
    cells = zip(
        numbers,
        lines["line_type"].to_pylist(),
        lines["model"].to_pylist(),
        lines["quantity"].to_pylist(),
        lines["amount"].to_pylist(),
        strict=True,
    )
    rows: dict[str, list[str]] = {n: [] for n in docs["invoice_number"].to_pylist()}
    for number, kind, model, quantity, amount in cells:
        rows[number].append(f"<tr><td>{kind}</td><td>{model}</td><td>{quantity}</td><td>{amount}</td></tr>")
    for number, body in rows.items():
        (out / f"{number}.html").write_text(f"<html><body><table>{''.join(body)}</table></body></html>")
    return time.perf_counter() - start, len(rows)


def pdf_floor(folder: Path, limit: int) -> tuple[float, int]:
    """WeasyPrint drawing ``limit`` of the exported pages one after another in this process."""
    import weasyprint

    pages = sorted(folder.glob("INV-*.html"))[:limit]
    start = time.perf_counter()
    for page in pages:
        weasyprint.HTML(string=page.read_text(encoding="utf-8")).write_pdf()
    return time.perf_counter() - start, len(pages)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--accounts", type=int, default=100_000)
    parser.add_argument("--pdf-accounts", type=int, default=1_000)
    parser.add_argument("--workdir", default="/tmp/ub-bench-documents")
    args = parser.parse_args()
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)

    url = _warehouse(work / "w.db", args.accounts)
    html_s, html_rss, said = _cli(
        url, "invoices", "export", "--month", MONTH, "--out", str(work / "html"), "--format", "html"
    )
    print(said.strip(), flush=True)
    html_docs = len(list((work / "html" / "html").glob("INV-*.html")))
    floor_s, floor_docs = html_floor(url, work / "floor")
    assert floor_docs == html_docs == args.accounts, (floor_docs, html_docs)
    print(f"html {html_s:.1f} s, floor {floor_s:.1f} s", flush=True)

    small = _warehouse(work / "small.db", args.pdf_accounts)
    pdf_s, pdf_rss, said = _cli(
        small, "invoices", "export", "--month", MONTH, "--out", str(work / "pdf"), "--format", "html,pdf"
    )
    print(said.strip(), flush=True)
    pdfs = len(list((work / "pdf" / "pdf").glob("INV-*.pdf")))
    assert pdfs == args.pdf_accounts
    one_s, one_docs = pdf_floor(work / "pdf" / "html", min(200, pdfs))
    print(f"pdf {pdf_s:.1f} s, floor {one_s:.1f} s for {one_docs}", flush=True)
    shutil.rmtree(work, ignore_errors=True)

    write_section(
        "Customer documents (issue 28)",
        f"""
Command: `{command_line("benchmarks.documents")}`
Machine: {machine()}
Data: the synthetic month of `benchmarks.invoices` (every account on a plan, 2 model x tier
combinations on 6 days, 3 token kinds, a name, email and address per account), drafted and finalized
on SQLite; about 13 lines per document. Each command a separate process, in one run.

| what | documents | wall | documents/s | peak RSS | x floor |
|---|---:|---:|---:|---:|---:|
| `invoices export --format html` | {html_docs:,} | {html_s:.1f} s | {html_docs / html_s:,.0f} | {html_rss:,.0f} MB | {html_s / floor_s:.2f} |
| floor: the same rows read with pyarrow, one bare HTML table per document | {floor_docs:,} | {floor_s:.1f} s | {floor_docs / floor_s:,.0f} | | 1.00 |
| `invoices export --format html,pdf` (process pool, one worker per core) | {pdfs:,} | {pdf_s:.1f} s | {pdfs / pdf_s:,.1f} | {pdf_rss:,.0f} MB | {(one_docs / one_s) / (pdfs / pdf_s):.2f} |
| floor: WeasyPrint drawing the same pages one after another, in one process | {one_docs:,} | {one_s:.1f} s | {one_docs / one_s:,.1f} | | 1.00 |

Targets (issue 28): the HTML documents of 100,000 accounts in at most 2 minutes; at least 10 PDFs per
second on this machine's two cores. The last column is our time per document over the floor's (for
PDFs below 1 means faster than one WeasyPrint process); our wall includes start-up, reading the
month and, for the PDFs, writing the HTML pages too.
""",
    )


if __name__ == "__main__":
    main()
