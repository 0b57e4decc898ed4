"""A reference for commitments and credits, written from the contract in plain Python and Decimal: an
account's months in order, each invoice's charge lines one at a time, each grant in the contract's
order. It shares nothing with ``billing.credits`` but the line rows ``billing.invoices.build_lines``
makes for fees and usage (tested against an event-by-event reference of their own)."""

from __future__ import annotations

import calendar
import datetime as dt
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from schemas import tokens


@dataclass(frozen=True)
class RefGrant:
    grant_id: str
    account_id: str
    amount: Decimal
    kind: str
    effective_from: dt.date
    expires: dt.date | None
    priority: int
    models: frozenset[str] | None
    void_date: dt.date | None = None


def _cents(value: Decimal) -> Decimal:
    return value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def _last_day(month: str) -> dt.date:
    y, m = int(month[:4]), int(month[5:])
    return dt.date(y, m, calendar.monthrange(y, m)[1])


def minimum(plan_rows: list[dict], minimums: dict[str, Decimal], month: str) -> Decimal:
    """Sum over the month's plan periods of minimum_monthly x days / days in month, each half-up."""
    last = _last_day(month)
    first = last.replace(day=1)
    total = Decimal(0)
    for row in plan_rows:
        if row["plan"] not in minimums:
            continue
        start, until = max(row["active_from"], first), min(row["active_until"] or last, last)
        if start <= until:
            total += _cents(minimums[row["plan"]] * ((until - start).days + 1) / last.day)
    return total


def month_truth(
    lines: list[dict],
    plan_rows: list[dict],
    minimums: dict[str, Decimal],
    grants: list[RefGrant],
    used: dict[str, Decimal],
    month: str,
    tiers: tuple[str, ...],
) -> tuple[Decimal, dict[str, Decimal]]:
    """One account's invoice of ``month``: (the true-up, {grant: what it covered}); ``used`` (what
    earlier months took of each grant) grows by what this month takes."""
    fees = [r for r in lines if r["line_type"] == "plan_fee"]
    over = [r for r in lines if r["line_type"] == "overage_usage"]
    charges = sum((r["amount"] for r in fees + over), Decimal(0))
    true_up = max(minimum(plan_rows, minimums, month) - charges, Decimal(0))
    kinds = tokens.ids()
    over.sort(
        key=lambda r: (
            r["model"],
            tiers.index(r["speed_tier"]),
            kinds.index(r["token_kind"]),
            r["unit_price"],
        )
    )
    # the charge lines in the contract's order: [model or None (a fee, the true-up), amount left]
    open_lines = [[None, r["amount"]] for r in fees]
    if true_up:
        open_lines.append([None, true_up])
    open_lines += [[r["model"], r["amount"]] for r in over]
    last = _last_day(month)
    eligible = [
        g
        for g in grants
        if g.effective_from <= last
        and (g.expires is None or g.expires > last)
        and (g.void_date is None or g.void_date > last)
    ]
    eligible.sort(
        key=lambda g: (
            g.expires is None,
            g.expires or dt.date.max,
            g.kind != "promotional",
            g.priority,
            g.effective_from,
            g.grant_id,
        )
    )
    covered: dict[str, Decimal] = {}
    for g in eligible:
        balance = g.amount - used.get(g.grant_id, Decimal(0))
        took = Decimal(0)
        for line in open_lines:
            if balance <= 0:
                break
            model, left = line
            if g.models is not None and model not in g.models:
                continue  # a grant with models covers usage lines of those models only (never a fee)
            take = min(left, balance)
            line[1] = left - take
            balance -= take
            took += take
        if took:
            covered[g.grant_id] = took
            used[g.grant_id] = used.get(g.grant_id, Decimal(0)) + took
    return true_up, covered
