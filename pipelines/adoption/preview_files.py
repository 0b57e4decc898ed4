"""What a migration preview writes: ``preview.csv``, ``preview.json``, ``preview.md``, and its line on
the console."""

from __future__ import annotations

import csv
import json
from decimal import Decimal
from pathlib import Path

from pipelines.adoption.preview import PreviewResult
from pipelines.errors import UsageBillingError
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
