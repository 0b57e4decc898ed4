"""What a migration preview writes: ``preview.csv``, ``preview.json``, ``preview.md``, and its line on
the console."""

from __future__ import annotations

import csv
import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

from billing.invoices import month_bounds
from pipelines.adoption.preview import PreviewResult
from pipelines.errors import UsageBillingError
from pipelines.invoicing.grants import COLUMNS
from pipelines.runtime.outputs import atomic, neutralize_value, write_text

CSV_COLUMNS = [
    "account_id",
    "month",
    "tier",
    "current_total",
    "projected_total",
    "delta",
    "currency",
    "moved_tokens",
    "current_overage_tokens",
    "projected_overage_tokens",
    "current_main_pool_exhausted",
    "projected_main_pool_exhausted",
]


def write(result: PreviewResult, out: str | Path) -> Path:
    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with atomic(folder / "preview.csv") as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
            w.writeheader()
            w.writerows({k: neutralize_value(v) for k, v in _strings(r).items()} for r in result.rows)
        payload = result.to_json()
        write_text(folder / "preview.json", json.dumps(payload, indent=2, default=str))
        write_text(folder / "preview.md", markdown(result))
    except OSError as exc:
        raise UsageBillingError(f"cannot write the preview to {folder}: {exc.strerror or exc}") from None
    return folder


def _strings(row: dict) -> dict:
    return {k: (f"{v:.2f}" if isinstance(v, Decimal) else v) for k, v in row.items()}


def line(result: PreviewResult) -> str:
    """One line per tier: what moving the month's use to the successor does to the bills."""
    r, cur = result.request, result.currency
    parts = [
        f"{result.tier_label(t)}: {s['accounts_paying_more']:,} of {s['accounts']:,} accounts pay more, "
        f"median {cur} {s['median_delta']:+,.2f}, total {cur} {s['delta']:+,.2f}"
        for t, s in result.tiers.items()
    ]
    return f"{r.model} -> {r.successor} in {r.month}: " + "; ".join(parts)


def markdown(result: PreviewResult) -> str:
    r, cur = result.request, result.currency
    lines = [
        f"# Migration preview: {r.model} -> {r.successor}, {r.month}",
        "",
        f"Every event of {r.model} that metering {r.month} reads becomes an event of {r.successor} at the "
        "tier named (keep: its own tier); plans, pools, prices and the billing rule stay as they are. "
        f"Amounts in {cur}; an affected account is one with an event of {r.model} on a local day of "
        f"{r.month}.",
        "",
        f"| {r.successor} tier | affected accounts | paying more | current total | projected total | "
        "total change | median change |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for t, s in result.tiers.items():
        lines.append(
            f"| {result.tier_label(t)} | {s['accounts']:,} | {s['accounts_paying_more']:,} | "
            f"{cur} {s['current_total']:,.2f} | "
            f"{cur} {s['projected_total']:,.2f} | {cur} {s['delta']:+,.2f} | "
            f"{cur} {s['median_delta']:+,.2f} |"
        )
    return "\n".join(lines) + "\n"


# What the retirement report prices transition credits over, unless --months says otherwise.
TRANSITION_MONTHS = 3


def months_later(day: dt.date, months: int) -> dt.date:
    """The first day of the month ``months`` after ``day``'s."""
    index = day.year * 12 + day.month - 1 + months
    return dt.date(index // 12, index % 12 + 1, 1)


def transition_grants(result: PreviewResult, months: int) -> list[dict[str, str]]:
    """One promotional grant per account that would pay more on the successor: its monthly increase
    x ``months`` (the largest over the previewed tiers, so the move is free at whichever tier it takes),
    restricted to the successor, effective the first day after the month, expiring ``months`` later.
    Rows of the credits CSV (``usage-billing credits load``); ids are stable, so a reload is a no-op."""
    if months < 1:
        raise UsageBillingError(f"--months must be at least 1, got {months}")
    r = result.request
    increase: dict[str, Decimal] = {}
    for row in result.rows:
        if row["delta"] > 0:
            increase[row["account_id"]] = max(increase.get(row["account_id"], Decimal(0)), row["delta"])
    start = month_bounds(r.month)[1] + dt.timedelta(days=1)
    ends = months_later(start, months)
    return [
        {
            "grant_id": f"transition-{r.model}-{r.month}-{account}"[:200],
            "account_id": account,
            "amount": f"{delta * months:.2f}",
            "kind": "promotional",
            "effective_from": start.isoformat(),
            "expires": ends.isoformat(),
            "priority": "0",
            "models": r.successor,
            "reason": f"transition from {r.model} (retiring) to {r.successor}: {months} months of the "
            "increase",
        }
        for account, delta in sorted(increase.items())
    ]


def write_credits(result: PreviewResult, path: str | Path, months: int) -> tuple[int, Decimal]:
    """Write the transition grants as a credits CSV; returns (grants, their total)."""
    grants = transition_grants(result, months)
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic(target) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=list(COLUMNS))
            w.writeheader()
            w.writerows({k: neutralize_value(v) for k, v in g.items()} for g in grants)
    except OSError as exc:
        raise UsageBillingError(f"cannot write the credits to {target}: {exc.strerror or exc}") from None
    return len(grants), sum((Decimal(g["amount"]) for g in grants), Decimal(0))
