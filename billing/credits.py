"""Commitments and credits on an invoice, after usage and fees are priced: pure functions, in Decimal.

``minimum_lines``: a plan's ``minimum_monthly`` is the least an invoice's charges come to. The
invoice's minimum is the sum over its plan periods (accounts rows clipped to the month) of
minimum_monthly x active days / days in month, each half-up to cents; when the charges (plan fees and
usage lines, rounded) fall short, one ``minimum_true_up`` line bills the difference.

``credit_lines``: the account's eligible grants cover the charge lines (plan fees, the true-up, then
overage lines by model id) in the grant order of ``GRANT_ORDER``: expires ascending (none last),
promotional before paid, priority, effective_from, grant_id. Each grant covers, line by line, as much
of the lines it applies to (every charge, or only usage lines of its ``models``) as its remaining
balance allows; a grant that covered something gives one ``credit`` line (quantity 1, unit price =
amount = minus what it covered, ``grant_id`` set). Covering is per line in that order, so only the
sums matter: the fixed charges (fees and true-up, which only an unrestricted grant covers) and each
model's overage. The loop is per account with grants and per grant, never per event or line.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

from billing.pricing import cents
from schemas import lines as line_types
from schemas.catalog import Catalog
from schemas.lake import AMOUNT, PRICE

PAID, PROMOTIONAL = "paid", "promotional"
KINDS = (PAID, PROMOTIONAL)
# The grants an invoice reads: eligible for its month, with what the other months left of each.
GRANT_SCHEMA = pa.schema(
    [
        ("grant_id", pa.string()),
        ("account_id", pa.string()),
        ("kind", pa.string()),
        ("effective_from", pa.date32()),
        ("expires", pa.date32()),
        ("priority", pa.int64()),
        ("models", pa.string()),  # ';'-separated model ids; null = every charge
        ("reason", pa.string()),
        ("remaining", AMOUNT),  # the amount less what other months' documents took of it
    ]
)
ZERO = Decimal(0)


def eligible(
    month_first: dt.date,
    month_last: dt.date,
    effective_from: dt.date,
    expires: dt.date | None,
    void_date: dt.date | None,
) -> bool:
    """A grant applies to the invoice of the month ``month_first .. month_last`` (local dates) when it
    starts on or before the month's last day, does not expire by then (``expires`` is exclusive) and
    is not void for it (a void on UTC date V ends it for months whose last day is on or after V)."""
    del month_first  # a grant that starts inside the month covers the month's whole invoice
    return (
        effective_from <= month_last
        and (expires is None or expires > month_last)
        and (void_date is None or void_date > month_last)
    )


def grant_order(
    kind: str, expires: dt.date | None, priority: int, effective_from: dt.date, grant_id: str
) -> tuple[object, ...]:
    """The order grants are applied in: expires ascending (none last), promotional before paid,
    priority ascending, effective_from ascending, grant_id ascending."""
    return (
        expires is None,
        expires or dt.date.max,
        0 if kind == PROMOTIONAL else 1,
        priority,
        effective_from,
        grant_id,
    )


def _line(
    account: list[str],
    text: list[str],
    amount: list[Decimal],
    line_type: str,
    grant: list[str] | None = None,
) -> pa.Table:
    n = len(account)
    return pa.table(
        {
            "account_id": pa.array(account, pa.string()),
            "line_type": pa.array([line_type] * n, pa.string()),
            "adjusted_type": pa.nulls(n, pa.string()),
            "model": pa.nulls(n, pa.string()),
            "speed_tier": pa.nulls(n, pa.string()),
            "token_kind": pa.nulls(n, pa.string()),
            "description": pa.array(text, pa.string()),
            "quantity": pa.array([1] * n, pa.int64()),
            "unit_price": pa.array(amount, PRICE),
            "amount": pa.array(amount, AMOUNT),
            "grant_id": pa.array(grant if grant is not None else [None] * n, pa.string()),
        }
    )


def minimum_lines(
    lines: pa.Table, plans: pa.Table, catalog: Catalog, month_first: dt.date, month_last: dt.date
) -> pa.Table | None:
    """One ``minimum_true_up`` line per account whose charges fall short of its plans' minimum."""
    committed = {p.id: p.minimum_monthly for p in catalog.plans if p.minimum_monthly}
    if not committed or plans.num_rows == 0:
        return None
    in_month = (month_last - month_first).days + 1
    minimum: dict[str, Decimal] = {}
    named: dict[str, list[str]] = {}
    for account, plan, start, until in zip(
        *(plans[c].to_pylist() for c in ("account_id", "plan", "active_from", "active_until")), strict=True
    ):
        if plan not in committed:
            continue
        start, until = max(start, month_first), min(until or month_last, month_last)
        if start > until:
            continue
        days = (until - start).days + 1
        minimum[account] = minimum.get(account, ZERO) + cents(committed[plan] * days / in_month)
        named.setdefault(account, []).append(
            f"{plan} {committed[plan]:,.2f}/month, {days} of {in_month} days"
        )
    if not minimum:
        return None
    charged = pc.is_in(
        lines["line_type"], value_set=pa.array([line_types.PLAN_FEE.id, line_types.OVERAGE.id])
    )
    mine = lines.filter(pc.and_(charged, pc.is_in(lines["account_id"], value_set=pa.array(list(minimum)))))
    sums = mine.group_by("account_id").aggregate([("amount", "sum")])
    charges = dict(zip(sums["account_id"].to_pylist(), sums["amount_sum"].to_pylist(), strict=True))
    accounts, texts, amounts = [], [], []
    for account in sorted(minimum):
        short = minimum[account] - charges.get(account, ZERO)
        if short > 0:
            accounts.append(account)
            texts.append(
                f"minimum commitment {minimum[account]:,.2f} ({'; '.join(named[account])}): "
                f"charges {charges.get(account, ZERO):,.2f}"
            )
            amounts.append(short)
    return _line(accounts, texts, amounts, line_types.MINIMUM_TRUE_UP.id) if accounts else None


def credit_lines(lines: pa.Table, grants: pa.Table) -> pa.Table | None:
    """The ``credit`` lines the eligible ``grants`` (GRANT_SCHEMA) give the charge ``lines``."""
    grants = grants.filter(pc.greater(grants["remaining"], pa.scalar(ZERO, AMOUNT)))
    if grants.num_rows == 0 or lines.num_rows == 0:
        return None
    with_grants = pa.array(pc.unique(grants["account_id"]).to_pylist(), pa.string())
    mine = lines.filter(pc.is_in(lines["account_id"], value_set=with_grants))
    fixed_types = pa.array([line_types.PLAN_FEE.id, line_types.MINIMUM_TRUE_UP.id])
    fixed = mine.filter(pc.is_in(mine["line_type"], value_set=fixed_types))
    fixed = fixed.group_by("account_id").aggregate([("amount", "sum")])
    over = mine.filter(pc.equal(mine["line_type"], line_types.OVERAGE.id))
    over = over.group_by(["account_id", "model"]).aggregate([("amount", "sum")])
    # per account: [fixed charges, then each model's overage in model id order]
    buckets: dict[str, dict[str | None, Decimal]] = {}
    for account, amount in zip(fixed["account_id"].to_pylist(), fixed["amount_sum"].to_pylist(), strict=True):
        buckets.setdefault(account, {})[None] = amount
    for account, model, amount in zip(
        *(over[c].to_pylist() for c in ("account_id", "model", "amount_sum")), strict=True
    ):
        buckets.setdefault(account, {})[model] = amount
    rows = sorted(
        zip(*(grants[c].to_pylist() for c in GRANT_SCHEMA.names), strict=True),
        key=lambda g: (g[1], grant_order(g[2], g[4], g[5], g[3], g[0])),
    )
    accounts, texts, amounts, ids = [], [], [], []
    left: dict[str | None, Decimal] = {}
    current = None
    for grant_id, account, _kind, _since, _expires, _priority, models, reason, remaining in rows:
        if account != current:
            current = account
            charges = buckets.get(account, {})
            order = ([None] if None in charges else []) + sorted(m for m in charges if m is not None)
            left = {k: charges[k] for k in order}
        allowed = set(models.split(";")) if models else None
        covered = ZERO
        for key, open_amount in left.items():
            if remaining <= 0:
                break
            if open_amount <= 0 or (allowed is not None and key not in allowed):
                continue
            take = min(open_amount, remaining)
            left[key] = open_amount - take
            remaining -= take
            covered += take
        if covered > 0:
            accounts.append(account)
            texts.append(f"credit {grant_id}: {reason}" if reason else f"credit {grant_id}")
            amounts.append(-covered)
            ids.append(grant_id)
    return _line(accounts, texts, amounts, line_types.CREDIT.id, ids) if accounts else None
