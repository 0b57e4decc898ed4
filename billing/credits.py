"""Commitments and credits on an invoice, after usage and fees are priced: pure functions, in Decimal.

``minimum_lines``: a plan's ``minimum_monthly`` is the least an invoice's charges come to. The
invoice's minimum is the sum over its plan periods (accounts rows clipped to the month) of
minimum_monthly x active days / days in month, each half-up to cents; when the charges (plan fees and
usage lines, rounded) fall short, one ``minimum_true_up`` line bills the difference.

``credit_lines``: the account's eligible grants cover the charge lines (plan fees, the true-up, then
overage lines by model id) in the grant order of ``APPLY_ORDER``: expires ascending (none last),
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

import numpy as np
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


# The order an account's grants apply in (columns of GRANT_SCHEMA, ascending, a missing expiry last):
# the soonest expiry first, promotional before paid, then priority, effective_from and grant_id.
APPLY_ORDER = ("expires", "_paid", "priority", "effective_from", "grant_id")


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
    plans = plans.filter(pc.is_in(plans["plan"], value_set=pa.array(list(committed), pa.string())))
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


def _cents(amounts: pa.ChunkedArray | pa.Array) -> list[int]:
    """Money as integer cents, exactly: a decimal128 of scale 2 stores its value in cents as a 128-bit
    integer, whose low 64 bits are the value (amounts here are far below 2**63 cents)."""
    array = amounts.combine_chunks() if isinstance(amounts, pa.ChunkedArray) else amounts
    if not pa.types.is_decimal128(array.type) or array.type.scale != 2 or array.null_count:
        raise ValueError(f"expected money (decimal128, 2 decimals, no nulls), got {array.type}")
    words = np.frombuffer(array.buffers()[1], dtype=np.int64)
    low = words[2 * array.offset : 2 * (array.offset + len(array)) : 2]
    high = words[2 * array.offset + 1 : 2 * (array.offset + len(array)) : 2]
    if np.any(high != (low >> 63)):  # pragma: no cover - more than 92 quadrillion
        raise ValueError("an amount too large for 64-bit cents")
    return low.tolist()  # type: ignore[no-any-return]


def _charges(lines: pa.Table, accounts: pa.Array) -> dict[str, dict[str | None, int]]:
    """Per account of ``accounts``, in cents and in the order grants cover them: the fixed charges
    (plan fees and the true-up: key None), then each model's overage in model id order."""
    mine = lines.filter(pc.is_in(lines["account_id"], value_set=accounts))
    fixed_types = pa.array([line_types.PLAN_FEE.id, line_types.MINIMUM_TRUE_UP.id])
    fixed = mine.filter(pc.is_in(mine["line_type"], value_set=fixed_types))
    fixed = fixed.group_by("account_id").aggregate([("amount", "sum")])
    over = mine.filter(pc.equal(mine["line_type"], line_types.OVERAGE.id))
    over = over.group_by(["account_id", "model"]).aggregate([("amount", "sum")])
    over = over.sort_by([("account_id", "ascending"), ("model", "ascending")])
    buckets: dict[str, dict[str | None, int]] = {}
    for account, amount in zip(fixed["account_id"].to_pylist(), _cents(fixed["amount_sum"]), strict=True):
        buckets[account] = {None: amount}
    for account, model, amount in zip(
        over["account_id"].to_pylist(), over["model"].to_pylist(), _cents(over["amount_sum"]), strict=True
    ):
        buckets.setdefault(account, {})[model] = amount
    return buckets


def _cover(grants: pa.Table, buckets: dict[str, dict[str | None, int]]) -> tuple[list[int], list[int]]:
    """(rows of ``grants`` that covered something, what each covered in cents): ``grants`` in the
    order they apply, each covering the open charges of its account in order, as far as it goes."""
    given: list[int] = []
    covered_cents: list[int] = []
    left: dict[str | None, int] = {}
    current = None
    accounts, models = grants["account_id"].to_pylist(), grants["models"].to_pylist()
    for row, (account, only, remaining) in enumerate(
        zip(accounts, models, _cents(grants["remaining"]), strict=True)
    ):
        if account != current:
            current = account
            left = dict(buckets.get(account, {}))  # None (fees, true-up) first, then models in order
        allowed = set(only.split(";")) if only else None
        covered = 0
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
            given.append(row)
            covered_cents.append(covered)
    return given, covered_cents


def credit_lines(lines: pa.Table, grants: pa.Table) -> pa.Table | None:
    """The ``credit`` lines the eligible ``grants`` (GRANT_SCHEMA) give the charge ``lines``."""
    grants = grants.filter(pc.greater(grants["remaining"], pa.scalar(ZERO, AMOUNT)))
    if grants.num_rows == 0 or lines.num_rows == 0:
        return None
    buckets = _charges(lines, pc.unique(grants["account_id"]))
    # the grants of each account in the order they apply
    grants = grants.append_column("_paid", pc.equal(grants["kind"], PAID))
    keys = ("account_id", *APPLY_ORDER)
    grants = grants.take(pc.sort_indices(grants, sort_keys=[(k, "ascending", "at_end") for k in keys]))
    given, covered_cents = _cover(grants, buckets)
    if not given:
        return None
    chosen = grants.take(pa.array(given, pa.int64()))
    amounts = [-Decimal(n).scaleb(-2) for n in covered_cents]
    said = pc.binary_join_element_wise(
        pa.scalar("credit "), chosen["grant_id"], pa.scalar(": "), chosen["reason"], ""
    )
    texts = pc.if_else(
        pc.equal(chosen["reason"], ""), pc.binary_join_element_wise("credit ", chosen["grant_id"], ""), said
    )
    return _line(
        chosen["account_id"].to_pylist(),
        texts.to_pylist(),
        amounts,
        line_types.CREDIT.id,
        chosen["grant_id"].to_pylist(),
    )
