"""The customer document: one numbered invoice or adjustment as its customer receives it.

One template gives the HTML page and, drawn by WeasyPrint, the PDF (``pipelines.invoicing.pdf``):
the seller and the customer as they were when the document was finalized, its number and type, issue
and due dates, the billing period as the account's local days, a summary by model and speed tier,
then the detail grouped the same way in words (token kinds and line types), the plan fee as "N of M
days at P per month", and the total due. Included usage is one line per group, not a line per token
kind at 0.00. Credits follow the charges: "Credits applied", each grant with its reason, what it
covered here and what remains of it after this document, then the total due after credits. An
adjustment names the document it corrects and lists only what changed: each line billed before and
no longer true, reversed, and the line as it is now.

Input: plain dicts of the export's rows (``pipelines.invoicing.export``); no database, no files.
"""

from __future__ import annotations

import datetime as dt
import html
from collections import defaultdict
from decimal import Decimal

from billing.invoices import month_bounds
from schemas import lines as line_types
from schemas import tokens
from schemas.catalog import DEFAULT_TIERS

# What a page prints for a speed tier: the catalog's labels (``[[tiers]]``), passed to ``render``.
DEFAULT_LABELS: dict[str, str] = dict(DEFAULT_TIERS)


def money(value: Decimal, currency: str | None = None) -> str:
    """1234.5 -> '1,234.50' (with the currency in front when given); a minus sign, never brackets."""
    text = f"{abs(value):,.2f}"
    text = f"{currency}\u00a0{text}" if currency else text
    return f"\u2212{text}" if value < 0 else text


def count(value: int) -> str:
    """1234567 -> '1,234,567'; negative with a minus sign, as money is."""
    return f"\u2212{abs(value):,}" if value < 0 else f"{value:,}"


def price(value: Decimal) -> str:
    """A unit price exactly as priced: at least two decimals, up to the six the catalog allows."""
    text = f"{value:,.6f}".rstrip("0")
    whole, _, fraction = text.partition(".")
    return f"{whole}.{fraction.ljust(2, '0')}"


def day_text(day: dt.date | None) -> str:
    return f"{day.day} {day:%B %Y}" if day else ""


def period_text(period: str, zone: str | None) -> str:
    first, last = month_bounds(period)
    return f"{day_text(first)} \u2013 {day_text(last)} ({zone or 'UTC'})"


def plan_name(plan: str | None) -> str:
    return f"{plan.replace('_', ' ').title()} plan" if plan else "Pay as you go"


def group_label(model: str, tier: str, labels: dict[str, str] | None = None) -> str:
    return f"{model} \u00b7 {(labels or DEFAULT_LABELS).get(tier, tier)}"


def _e(value: object) -> str:
    return html.escape(str(value))


def _lines_of(text: str | None) -> str:
    return "<br>".join(_e(part) for part in (text or "").splitlines() if part.strip())


def _charge(line: dict) -> str:
    return line["adjusted_type"] or line["line_type"]


def _fee_text(line: dict, currency: str, periods: list[dict]) -> str:
    """'Pro plan: 15 of 31 days (1 March 2026 – 15 March 2026) at USD 200.00 per month'."""
    plan = (line["description"] or "").removeprefix("previously billed: ").split(" plan,")[0]
    days = abs(line["quantity"])
    spans = [
        f"{day_text(p['active_from'])} \u2013 {day_text(p['active_until'])}"
        for p in periods
        if p["plan"] == plan and p["days"] == days
    ]
    span = f" ({spans[0]})" if len(spans) == 1 else ""
    fee = money(line["unit_price"], currency)
    return f"{plan_name(plan)}: {days} of {line['unit_size']} days{span} at {fee} per month"


FEE, INCLUDED, OVERAGE = line_types.PLAN_FEE.id, line_types.INCLUDED.id, line_types.OVERAGE.id
MINIMUM, CREDIT = line_types.MINIMUM_TRUE_UP.id, line_types.CREDIT.id
# Lines without a model group under a name of their own, listed before the usage groups.
OWN_GROUPS = {FEE: ("", "0 fee"), MINIMUM: ("", "1 minimum")}
GROUP_TITLES = {"0 fee": "Plan", "1 minimum": "Minimum commitment"}
SUMMARY_TITLES = {"0 fee": "Plan fee", "1 minimum": line_types.MINIMUM_TRUE_UP.label}


def _group(line: dict) -> tuple[str, str]:
    return OWN_GROUPS.get(_charge(line)) or (line["model"], line["speed_tier"])


def _summary(lines: list[dict], currency: str, adjustment: bool, labels: dict[str, str]) -> list[str]:
    """One row for the plan fees and one per model and tier: tokens used, included, charged, amount."""
    rows: dict[tuple, dict] = {}
    for line in lines:
        charge = _charge(line)
        key = _group(line)
        row = rows.setdefault(key, {"included": 0, "charged": 0, "amount": Decimal(0)})
        if charge == INCLUDED:
            row["included"] += line["quantity"]
        elif charge == OVERAGE:
            row["charged"] += line["quantity"]
        row["amount"] += line["amount"]
    change = " (change)" if adjustment else ""
    out = [
        f"<table class='summary'><thead><tr><th>Charge</th><th class=n>Tokens used{change}</th>"
        f"<th class=n>Included{change}</th><th class=n>Charged{change}</th>"
        f"<th class=n>Amount ({_e(currency)})</th></tr></thead><tbody>"
    ]
    for (model, tier), row in sorted(rows.items()):
        if not model:
            out.append(
                f"<tr><td>{_e(SUMMARY_TITLES[tier])}</td><td></td><td></td><td></td>"
                f"<td class=n>{money(row['amount'])}</td></tr>"
            )
            continue
        used = row["included"] + row["charged"]
        out.append(
            f"<tr><td>{_e(group_label(model, tier, labels))}</td><td class=n>{count(used)}</td>"
            f"<td class=n>{count(row['included'])}</td><td class=n>{count(row['charged'])}</td>"
            f"<td class=n>{money(row['amount'])}</td></tr>"
        )
    out.append("</tbody></table>")
    return out


def _detail(
    lines: list[dict], currency: str, periods: list[dict], adjustment: bool, labels: dict[str, str]
) -> list[str]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for line in lines:
        groups[_group(line)].append(line)
    out = [
        "<table class='detail'><thead><tr><th>Description</th><th class=n>Quantity</th>"
        f"<th class=n>Unit price ({_e(currency)})</th><th class=n>Amount ({_e(currency)})</th></tr></thead>"
    ]
    covered = []  # groups of included usage only: one line at the end, their figures are in the summary
    for (model, tier), rows in sorted(groups.items()):
        title = GROUP_TITLES[tier] if not model else group_label(model, tier, labels)
        subtotal = sum((r["amount"] for r in rows), Decimal(0))
        if model and all(_charge(r) == INCLUDED for r in rows):
            covered.append(title)
            continue
        out.append(
            f"<tbody><tr class='group'><th colspan=3>{_e(title)}</th><th class=n>{money(subtotal)}</th></tr>"
        )
        included: dict[str, int] = defaultdict(int)
        for r in sorted(rows, key=lambda r: (tokens.rank(r["token_kind"]), r["quantity"])):
            charge = _charge(r)
            if charge == INCLUDED:
                included[r["token_kind"]] += r["quantity"]
                continue
            before = adjustment and r["quantity"] < 0
            if charge == FEE:
                text = _fee_text(r, currency, periods)
                quantity = f"{abs(r['quantity'])} days"
                unit_price = f"{price(r['unit_price'])} / month"
            elif charge == MINIMUM:
                described = (r["description"] or "").removeprefix("previously billed: ")
                text = f"Shortfall to the {described[:1].lower()}{described[1:]}"
                quantity, unit_price = "", ""
            else:
                text = f"{tokens.label(r['token_kind'])} beyond the allowances"
                quantity = count(r["quantity"])
                unit_price = f"{price(r['unit_price'])} / 1M"
            if before:
                text = f"Previously billed: {text} (reversed)"
            elif adjustment:
                text = f"Corrected: {text}"
            out.append(
                f"<tr><td>{_e(text)}</td><td class=n>{_e(quantity)}</td><td class=n>{_e(unit_price)}</td>"
                f"<td class=n>{money(r['amount'])}</td></tr>"
            )
        if included:
            net = {k: v for k, v in included.items() if v}
            if net:
                total = sum(net.values())
                parts = " \u00b7 ".join(
                    f"{tokens.label(k).removesuffix(' tokens').lower()} {count(v)}"
                    for k, v in sorted(net.items(), key=lambda kv: tokens.rank(kv[0]))
                )
                what = "Change in tokens covered" if adjustment else "Tokens covered"
                out.append(
                    f"<tr class='included'><td>{what} by the plan's allowances ({_e(parts)})</td>"
                    f"<td class=n>{count(total)}</td><td class=n>included</td><td class=n>{money(Decimal(0))}</td></tr>"
                )
        out.append("</tbody>")
    if covered:
        what = "Changed only within" if adjustment else "Covered entirely by"
        out.append(
            f"<tbody><tr class='included'><td colspan=3>{what} the plan's allowances (tokens in the summary): "
            f"{_e(', '.join(covered))}</td><td class=n>{money(Decimal(0))}</td></tr></tbody>"
        )
    out.append("</table>")
    return out


def render(
    doc: dict,
    lines: list[dict],
    periods: list[dict],
    corrected: dict | None = None,
    labels: dict[str, str] | None = None,
    grants: dict[str, dict] | None = None,
) -> str:
    """The document's page. ``doc``: an export row of the document with its customer and seller;
    ``lines`` and ``periods`` (its plan periods) as exported; ``corrected``: the document an
    adjustment corrects (its number and issue date), when known; ``labels``: the catalog's speed
    tier labels by id; ``grants``: for each grant of the document's credit lines, its ``reason``,
    ``kind`` and what ``remaining`` of it after this document."""
    labels = labels or DEFAULT_LABELS
    credit_lines = [line for line in lines if _charge(line) == CREDIT]
    lines = [line for line in lines if _charge(line) != CREDIT]
    currency = doc["currency"]
    adjustment = doc["document_type"] == line_types.ADJUSTMENT_DOCUMENT
    title = "Adjustment" if adjustment else "Invoice"
    issued = doc["issued_at"].date() if doc["issued_at"] else None
    customer = doc["customer_name"] or f"Account {doc['account_id']}"
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{title} {_e(doc['invoice_number'])} \u00b7 {_e(customer)}</title>",
        f"<style>{CSS}@page{{@bottom-right{{content:'{_e(doc['invoice_number'])} \\b7  page ' counter(page) ' of ' counter(pages);font-family:'DejaVu Sans',sans-serif;font-size:8pt;color:#666}}}}</style></head><body>",
    ]
    if doc["status"] == "void":
        parts.append(
            f"<p class='void'>VOID \u2014 {_e(doc['void_reason'] or '')}. This document is not payable.</p>"
        )
    seller_lines = _lines_of(doc["seller_address"])
    tax = f"<br>Tax ID: {_e(doc['seller_tax_id'])}" if doc["seller_tax_id"] else ""
    email = f"<br>{_e(doc['customer_email'])}" if doc["customer_email"] else ""
    address = f"<br>{_lines_of(doc['customer_address'])}" if doc["customer_address"] else ""
    parts += [
        "<header>",
        f"<div class='seller'><b>{_e(doc['seller_name'] or '')}</b><br>{seller_lines}{tax}</div>",
        f"<div class='title'><h1>{title}</h1><table class='facts'>",
        f"<tr><th>Number</th><td>{_e(doc['invoice_number'])}</td></tr>",
        f"<tr><th>Issue date</th><td>{_e(day_text(issued))}</td></tr>",
        f"<tr><th>Due date</th><td>{_e(day_text(doc['due_date']))}</td></tr>",
        f"<tr><th>Billing period</th><td>{_e(period_text(doc['period'], doc['timezone']))}</td></tr>",
        "</table></div></header>",
        f"<section class='to'><h2>Bill to</h2><b>{_e(customer)}</b>{address}{email}"
        + (f"<br>Account {_e(doc['account_id'])}" if doc["customer_name"] else "")
        + "</section>",
    ]
    if adjustment:
        what = (
            f"invoice {_e(corrected['invoice_number'])} issued {_e(day_text(corrected['issued']))}"
            if corrected
            else f"document {_e(doc['corrects'] or '')}"
        )
        parts.append(
            f"<p class='corrects'>This adjustment corrects {what}. Usage, plans or credits of the period "
            "changed after it was issued; only what changed is listed: what was billed before, reversed, "
            "and the charge or credit as it is now.</p>"
        )
    plans = [p for p in periods if p["days"]]
    if plans:
        listed = "; ".join(
            f"{plan_name(p['plan'])} {day_text(p['active_from'])} \u2013 {day_text(p['active_until'])}"
            for p in plans
        )
        parts.append(f"<p class='plans'>Plan: {_e(listed)}</p>")
    parts.append("<h2>Summary</h2>")
    nothing = "<p>No charges changed.</p>" if adjustment else "<p>No charges.</p>"
    parts += _summary(lines, currency, adjustment, labels) if lines else [nothing]
    if credit_lines:
        parts += _credits(lines, credit_lines, grants or {}, currency, adjustment)
    due = "Total due" if doc["total"] >= 0 else "Total credited to the account"
    if credit_lines and doc["total"] >= 0:
        due = "Total due after credits"
    parts.append(
        f"<p class='total'>{due} <b class=n>{_e(money(abs(doc['total']), currency))}</b>"
        + (f" by {_e(day_text(doc['due_date']))}" if doc["due_date"] and doc["total"] > 0 else "")
        + "</p>"
    )
    if lines:
        parts.append("<h2>Detail</h2>")
        parts += _detail(lines, currency, periods, adjustment, labels)
    parts.append(
        f"<p class='foot'>Amounts in {_e(currency)}. Token prices are per 1M tokens; each amount is "
        "quantity \u00d7 unit price, rounded half-up to the cent, and the total is the sum of the "
        "rounded amounts.</p></body></html>"
    )
    return "\n".join(parts)


def _credits(
    lines: list[dict], credit_lines: list[dict], grants: dict[str, dict], currency: str, adjustment: bool
) -> list[str]:
    """The charges before credits, then "Credits applied": each grant's reason, what it covered here
    and what remains of it after this document."""
    charges = sum((line["amount"] for line in lines), Decimal(0))
    applied: dict[str, Decimal] = defaultdict(Decimal)
    for line in credit_lines:
        applied[line["grant_id"] or ""] += line["amount"]
    change = " (change)" if adjustment else ""
    out = [
        f"<p class='charges'>Charges{change} <b class=n>{_e(money(charges, currency))}</b></p>",
        "<h2>Credits applied</h2>",
        "<table class='credits'><thead><tr><th>Credit</th><th>Reason</th>"
        f"<th class=n>Applied{change} ({_e(currency)})</th><th class=n>Remaining after this document</th>"
        "</tr></thead><tbody>",
    ]
    for grant_id, amount in sorted(applied.items()):
        info = grants.get(grant_id, {})
        kind = {"paid": "prepaid", "promotional": "promotional"}.get(info.get("kind", ""), "")
        remaining = info.get("remaining")
        out.append(
            f"<tr><td>{_e(grant_id)}{f' ({kind})' if kind else ''}</td><td>{_e(info.get('reason') or '')}</td>"
            f"<td class=n>{money(amount)}</td>"
            f"<td class=n>{money(remaining) if remaining is not None else ''}</td></tr>"
        )
    total = sum(applied.values(), Decimal(0))
    out.append(
        f"</tbody><tfoot><tr><th colspan=2>Credits applied{change}</th><th class=n>{money(total)}</th>"
        "<th></th></tr></tfoot></table>"
    )
    return out


CSS = """
@page{size:A4;margin:16mm 14mm}
body{font-family:'DejaVu Sans',system-ui,sans-serif;font-size:10pt;color:#222;max-width:58rem;margin:1.5rem auto}
header{display:flex;justify-content:space-between;gap:2rem;align-items:flex-start}
h1{margin:0 0 .4rem;font-size:20pt;text-align:right}
h2{font-size:11pt;margin:1.2rem 0 .3rem}
table{border-collapse:collapse;width:100%}
th,td{padding:.22rem .45rem;text-align:left;vertical-align:top}
.facts th{color:#555;font-weight:normal;padding-right:1rem}
.facts td,.facts th{padding:.1rem .3rem;white-space:nowrap}
.summary td,.summary th,.detail td,.detail th{border-bottom:1px solid #ddd}
.n{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
tr.group th{background:#f1f3f5}
tr.included td{color:#555}
.total{font-size:13pt;text-align:right;margin:.8rem 0}
.charges{text-align:right;margin:.6rem 0 0}
.credits td,.credits th{border-bottom:1px solid #ddd}
.corrects,.plans{background:#f8f9fa;padding:.4rem .6rem}
.void{border:2px solid #b00;color:#b00;font-weight:bold;padding:.4rem .6rem;text-align:center}
.foot{color:#666;font-size:8.5pt;margin-top:1.2rem}
tbody{break-inside:avoid}
"""
