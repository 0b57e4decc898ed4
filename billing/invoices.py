"""Invoice building: one account-month of billable usage and plans -> document lines, in Decimal.

Pure functions on Arrow tables (no database). ``build_lines`` computes what each account owes for a
local calendar month; ``difference`` compares that truth with what finalized documents already
billed and returns adjustment lines, so that original + adjustments = the recomputed truth, line by
line and to the cent.

Lines (README, "The billing rule"; docs/finance.md): ``plan_fee`` (monthly fee x active days / days
in month, half-up to cents), ``included_usage`` (pool-covered tokens, amount 0), ``overage_usage``
(per model, tier, token kind and unit price: quantity x price per 1M / 1M, half-up to cents),
``adjustment`` (a line of one of those billed again or reversed, ``adjusted_type`` naming which).
The subtotal and the total are the sum of the rounded lines. Every line has a unit (``units``):
quantity x unit price / unit size = amount, half-up to cents.
"""

from __future__ import annotations

import calendar
import datetime as dt
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from billing import credits
from billing.plan import fee_pieces
from billing.pricing import amounts, applied_prices, cents
from schemas import lines as line_types
from schemas.catalog import Catalog
from schemas.lake import AMOUNT, PRICE

LINE_SCHEMA = pa.schema(
    [
        ("account_id", pa.string()),
        ("line_type", pa.string()),
        ("adjusted_type", pa.string()),
        ("model", pa.string()),
        ("speed_tier", pa.string()),
        ("token_kind", pa.string()),
        ("description", pa.string()),
        ("quantity", pa.int64()),
        ("unit_price", PRICE),
        ("amount", AMOUNT),
        ("grant_id", pa.string()),  # credit lines (and their corrections): the grant applied
    ]
)
# What build_lines reads: billable usage of the month (any grain finer than the lines) and plan rows.
BILLABLE_SCHEMA = pa.schema(
    [
        ("account_id", pa.string()),
        ("model", pa.string()),
        ("speed_tier", pa.string()),
        ("token_kind", pa.string()),
        ("price_from", pa.date32()),
        ("rate_day", pa.date32()),
        ("last_rate_day", pa.date32()),
        ("included_tokens", pa.int64()),
        ("overage_tokens", pa.int64()),
    ]
)
# The columns a billable row is priced by (billing.pricing.applied_prices).
PRICE_KEY = ("model", "speed_tier", "token_kind", "price_from", "rate_day", "last_rate_day")
PLAN_SCHEMA = pa.schema(
    [
        ("account_id", pa.string()),
        ("plan", pa.string()),
        ("active_from", pa.date32()),
        ("active_until", pa.date32()),
    ]
)
LINE_ORDER = line_types.order()
KEY = ["account_id", "charge_type", "model", "speed_tier", "token_kind", "unit_price", "grant_id"]


def month_bounds(month: str) -> tuple[dt.date, dt.date]:
    """'2026-03' -> (2026-03-01, 2026-03-31)."""
    first = dt.date.fromisoformat(f"{month}-01")
    return first, first.replace(day=calendar.monthrange(first.year, first.month)[1])


def utc_span(month: str, zones: set[str] | frozenset[str]) -> tuple[dt.date, dt.date]:
    """The first and last UTC dates that the local month ``month`` touches in any of ``zones``."""
    first, last = month_bounds(month)
    starts, ends = [], []
    for zone in zones or {"UTC"}:
        tz = ZoneInfo(zone)
        start = dt.datetime.combine(first, dt.time(), tzinfo=tz)
        end = dt.datetime.combine(last + dt.timedelta(days=1), dt.time(), tzinfo=tz) - dt.timedelta(
            microseconds=1
        )
        starts.append(start.astimezone(dt.UTC).date())
        ends.append(end.astimezone(dt.UTC).date())
    return min(starts), max(ends)


def plan_fee_lines(plans: pa.Table, catalog: Catalog, month: str) -> pa.Table:
    """One line per plan row in force in the month and fee (a row is split where the plan's fee
    changes): fee x active days / days in month.

    ``plans``: account_id, plan, active_from, active_until (null = open); pay-as-you-go rows (null
    plan) pay no fee. The amount is computed once per distinct (plan, active days, fee), then joined.
    """
    first, last = month_bounds(month)
    plans = plans.filter(pc.is_valid(plans["plan"]))
    if plans.num_rows == 0:
        return LINE_SCHEMA.empty_table()
    rows = fee_pieces(plans, catalog, first, last)
    in_month = (last - first).days + 1
    distinct = rows.group_by(["plan", "days", "monthly_fee"]).aggregate([])
    amounts_, texts = [], []
    for plan_id, n, fee in zip(
        *(distinct[c].to_pylist() for c in ("plan", "days", "monthly_fee")), strict=True
    ):
        amounts_.append(cents(fee * n / in_month))
        texts.append(f"{plan_id} plan, {n} of {in_month} days")
    priced = distinct.append_column("amount", pa.array(amounts_, AMOUNT))
    priced = priced.append_column("description", pa.array(texts, pa.string()))
    joined = rows.join(priced, ["plan", "days", "monthly_fee"])
    n = joined.num_rows
    return pa.table(
        {
            "account_id": joined["account_id"],
            "line_type": pa.array([line_types.PLAN_FEE.id] * n, pa.string()),
            "adjusted_type": pa.nulls(n, pa.string()),
            "model": pa.nulls(n, pa.string()),
            "speed_tier": pa.nulls(n, pa.string()),
            "token_kind": pa.nulls(n, pa.string()),
            "description": joined["description"],
            "quantity": joined["days"],
            "unit_price": joined["monthly_fee"],
            "amount": joined["amount"],
            "grant_id": pa.nulls(n, pa.string()),
        },
        schema=LINE_SCHEMA,
    )


def _usage_lines(rows: pa.Table, line_type: str, what: str) -> pa.Table:
    n = rows.num_rows
    return pa.table(
        {
            "account_id": rows["account_id"],
            "line_type": pa.array([line_type] * n, pa.string()),
            "adjusted_type": pa.nulls(n, pa.string()),
            "model": rows["model"],
            "speed_tier": rows["speed_tier"],
            "token_kind": rows["token_kind"],
            "description": pc.binary_join_element_wise(
                rows["model"], rows["speed_tier"], rows["token_kind"], f"tokens {what}", " "
            ),
            "quantity": rows["quantity"],
            "unit_price": rows["unit_price"],
            "amount": rows["amount"],
            "grant_id": pa.nulls(n, pa.string()),
        },
        schema=LINE_SCHEMA,
    )


def usage_lines(billable: pa.Table, catalog: Catalog) -> pa.Table:
    """Included and overage lines from billable usage rows of the month.

    ``billable``: account_id, model, speed_tier, token_kind, price_from, rate_day, last_rate_day,
    included_tokens, overage_tokens (any finer grain; summed here). Overage is priced at the price
    metering applied (``price_from``); a missing price raises MissingPriceError.
    """
    keys = ["account_id", "model", "speed_tier", "token_kind"]
    included = billable.filter(pc.greater(billable["included_tokens"], 0))
    included = included.group_by(keys).aggregate([("included_tokens", "sum")])
    n = included.num_rows
    included = included.append_column("unit_price", pa.array([Decimal(0)] * n, PRICE))
    included = included.append_column("amount", pa.array([Decimal(0)] * n, AMOUNT))
    included = included.rename_columns(
        [c.replace("included_tokens_sum", "quantity") for c in included.column_names]
    )

    over = billable.filter(pc.greater(billable["overage_tokens"], 0))
    price = applied_prices(catalog, *(over[c] for c in PRICE_KEY))
    over = over.append_column("unit_price", price)
    over = over.group_by([*keys, "unit_price"]).aggregate([("overage_tokens", "sum")])
    over = over.rename_columns([c.replace("overage_tokens_sum", "quantity") for c in over.column_names])
    over = over.append_column("amount", amounts(over["quantity"], over["unit_price"]))
    return pa.concat_tables(
        [
            _usage_lines(over, line_types.OVERAGE.id, "over allowance"),
            _usage_lines(included, line_types.INCLUDED.id, "within allowance"),
        ]
    )


def build_lines(
    billable: pa.Table, plans: pa.Table, catalog: Catalog, month: str, grants: pa.Table | None = None
) -> pa.Table:
    """Every line of every account's invoice for the month, ordered, numbered per account: plan fees,
    usage, the minimum commitment's true-up, and the credits of ``grants`` (``billing.credits``:
    eligible for the month, with their remaining balance) if given."""
    lines = pa.concat_tables([plan_fee_lines(plans, catalog, month), usage_lines(billable, catalog)])
    first, last = month_bounds(month)
    true_up = credits.minimum_lines(lines, plans, catalog, first, last)
    if true_up is not None:
        lines = pa.concat_tables([lines, true_up])
    if grants is not None:
        given = credits.credit_lines(lines, grants)
        if given is not None:
            lines = pa.concat_tables([lines, given])
    check_signs(lines)
    return number_lines(lines)


def check_signs(lines: pa.Table) -> None:
    """Each line's amount has its type's sign (``schemas.lines``: charges >= 0, credits <= 0); a line
    that breaks it is a bug in the code that made it, never something to bill."""
    zero = pa.scalar(Decimal(0), AMOUNT)
    for t in line_types.LINES:
        if not t.sign:
            continue
        wrong = pc.less(lines["amount"], zero) if t.sign > 0 else pc.greater(lines["amount"], zero)
        bad = pc.and_(pc.equal(lines["line_type"], t.id), wrong)
        if pc.any(bad).as_py():
            row = lines.filter(bad).slice(0, 1).to_pylist()[0]
            raise ValueError(
                f"a {t.id} line of {row['account_id']} has amount {row['amount']}: against its sign"
            )


def number_lines(lines: pa.Table) -> pa.Table:
    """Sort lines (account; plan fee, overage, included; model, tier, kind) and add ``line_no`` 1..n."""
    charge = pc.coalesce(lines["adjusted_type"], lines["line_type"])
    rank = pc.index_in(charge, value_set=pa.array(list(LINE_ORDER)))
    lines = lines.append_column("_rank", pc.fill_null(rank, len(LINE_ORDER)))
    order = ("account_id", "_rank", "model", "speed_tier", "token_kind", "unit_price", "quantity", "grant_id")
    lines = lines.sort_by([(c, "ascending") for c in order]).drop_columns(["_rank"])
    accounts = lines["account_id"].combine_chunks()
    n = lines.num_rows
    starts = np.ones(n, bool)
    if n > 1:
        starts[1:] = pc.not_equal(accounts.slice(1), accounts.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    position = np.arange(n)
    first = np.maximum.accumulate(np.where(starts, position, 0))
    return lines.append_column("line_no", pa.array(position - first + 1, pa.int32()))


def totals(lines: pa.Table) -> pa.Table:
    """Per account: subtotal (the sum of its rounded lines, whatever their type) and total (what the
    document asks to pay: the subtotal, since no tax is computed)."""
    g = lines.group_by("account_id").aggregate([("amount", "sum")])
    return pa.table({"account_id": g["account_id"], "subtotal": g["amount_sum"], "total": g["amount_sum"]})


# Units (schemas.lines): quantity x unit_price / unit_size = amount (half-up to cents) holds for every
# line; a plan fee's quantity is days, its unit size the days in the month.
TOKEN_UNIT, TOKEN_UNIT_SIZE, FEE_UNIT = line_types.TOKEN_UNIT, line_types.TOKEN_UNIT_SIZE, line_types.FEE_UNIT


def charge_types(lines: pa.Table) -> pa.Array:
    """What each line charges for: its type, or for an adjustment line the type it corrects."""
    return pc.coalesce(lines["adjusted_type"], lines["line_type"])


def units(charge: pa.Array, month: str) -> tuple[pa.Array, pa.Array]:
    """(unit, unit_size) of lines of ``month`` from their charge types."""
    first, last = month_bounds(month)
    sizes = {FEE_UNIT: (last - first).days + 1, TOKEN_UNIT: TOKEN_UNIT_SIZE}
    ids = [t.id for t in line_types.LINES]
    at = pc.index_in(charge, value_set=pa.array(ids, pa.string()))
    unit = pc.take(pa.array([t.unit for t in line_types.LINES], pa.string()), at)
    size = pc.take(pa.array([sizes.get(t.unit, 1) for t in line_types.LINES], pa.int64()), at)
    return pc.fill_null(unit, ""), pc.fill_null(size, 1)


def _signed(lines: pa.Table, sign: int) -> pa.Table:
    """Lines by charge key, each oriented positive (a reversal counts as minus one of its twin)."""
    negative = pc.or_(
        pc.less(lines["quantity"], 0),
        pc.and_(pc.equal(lines["quantity"], 0), pc.less(lines["amount"], pa.scalar(Decimal(0), AMOUNT))),
    )
    flip = pc.if_else(negative, -1, 1)
    description = pc.replace_substring_regex(lines["description"], r"^(correction|previously billed): ", "")
    return pa.table(
        {
            "account_id": lines["account_id"],
            "charge_type": charge_types(lines),
            "model": pc.fill_null(lines["model"], ""),
            "speed_tier": pc.fill_null(lines["speed_tier"], ""),
            "token_kind": pc.fill_null(lines["token_kind"], ""),
            "unit_price": pc.cast(lines["unit_price"], PRICE),
            "quantity": pc.multiply(lines["quantity"], flip),
            "amount": pc.if_else(negative, pc.negate(lines["amount"]), lines["amount"]),
            "count": pc.multiply(flip, sign),
            "description": description,
            "grant_id": pc.fill_null(lines["grant_id"], ""),
        }
    )


def difference(truth: pa.Table, billed: pa.Table) -> pa.Table:
    """Adjustment lines that turn what was billed into the recomputed truth, whole lines at a time.

    Lines are compared whole (charge type, model, tier, kind, unit price, quantity and amount). A
    billed line that is still true is left out; one that is no longer true is reversed (negated,
    "previously billed"); a new or changed line of the truth is billed as it is. Every adjustment
    line is thus a line of one side, negated or not, so quantity x unit price / unit size = amount
    holds on it as on the original (rounding half-up is symmetric), and billed + adjustments = truth
    per charge, exactly. Reversals of earlier reversals cancel: only what is still billed is reversed.
    """
    keys = [*KEY, "quantity", "amount"]
    both = pa.concat_tables([_signed(truth, 1), _signed(billed, -1)])
    g = both.group_by(keys).aggregate([("count", "sum"), ("description", "min")])
    empty = pc.and_(pc.equal(g["quantity"], 0), pc.equal(g["amount"], pa.scalar(Decimal(0), AMOUNT)))
    g = g.filter(
        pc.and_(pc.not_equal(g["count_sum"], 0), pc.invert(empty))
    )  # a line of nothing carries nothing
    counts = g["count_sum"].to_numpy()
    take = np.repeat(np.arange(len(counts)), np.abs(counts))
    g = g.take(pa.array(take, pa.int64()))
    sign = pa.array(np.sign(counts[take]).astype(np.int64)) if len(take) else pa.array([], pa.int64())
    reversal = pc.less(sign, 0)
    n = g.num_rows

    def absent_is_null(column: str) -> pa.Array:
        values = g[column]
        return pc.if_else(pc.equal(values, ""), pa.nulls(n, pa.string()), values)

    return number_lines(
        pa.table(
            {
                "account_id": g["account_id"],
                "line_type": pa.array([line_types.ADJUSTMENT.id] * n, pa.string()),
                "adjusted_type": g["charge_type"],
                "model": absent_is_null("model"),
                "speed_tier": absent_is_null("speed_tier"),
                "token_kind": absent_is_null("token_kind"),
                "description": pc.if_else(
                    reversal,
                    pc.binary_join_element_wise("previously billed: ", g["description_min"], ""),
                    g["description_min"],
                ),
                "quantity": pc.multiply(g["quantity"], sign),
                "unit_price": g["unit_price"],
                "amount": pc.if_else(reversal, pc.negate(g["amount"]), g["amount"]),
                "grant_id": absent_is_null("grant_id"),
            },
            schema=LINE_SCHEMA,
        )
    )


PLAN_PERIOD_SCHEMA = pa.schema(
    [
        ("account_id", pa.string()),
        ("active_from", pa.date32()),
        ("active_until", pa.date32()),
        ("plan", pa.string()),
        ("days", pa.int32()),
        ("monthly_fee", PRICE),
        ("minimum_monthly", PRICE),  # the plan's commitment as drafted (null: none)
    ]
)


def plan_periods(plans: pa.Table, accounts: list[str], catalog: Catalog, month: str) -> pa.Table:
    """The month of each of ``accounts`` day by day as plan periods: its accounts rows clipped to the
    month, and pay as you go (null plan) for the days no row covers (before an account starts, after
    it ends, an unknown account). The periods of an account cover the month exactly once."""
    first, last = month_bounds(month)
    by_account: dict[str, list[tuple[dt.date, dt.date, str | None]]] = {}
    for account, plan, start, until in zip(
        *(plans[c].to_pylist() for c in ("account_id", "plan", "active_from", "active_until")), strict=True
    ):
        start, until = max(start, first), min(until or last, last)
        if start <= until:
            by_account.setdefault(account, []).append((start, until, plan))
    out: dict[str, list[Any]] = {name: [] for name in PLAN_PERIOD_SCHEMA.names}
    known = {p.id for p in catalog.plans}

    def add(account: str, start: dt.date, until: dt.date, plan: str | None) -> None:
        # a period is split where its plan's fee changes: each piece is one plan_fee line
        pieces = (
            catalog.plan(plan).fee_pieces(start, until) if plan in known else [(start, until, None, None)]
        )
        minimum = catalog.plan(plan).minimum_monthly if plan in known else None
        for a, b, fee, _ in pieces:
            values = (account, a, b, plan, (b - a).days + 1, fee, minimum)
            for name, value in zip(PLAN_PERIOD_SCHEMA.names, values, strict=True):
                out[name].append(value)

    one_day = dt.timedelta(days=1)
    for account in accounts:
        day = first
        for start, until, plan in sorted(by_account.get(account, [])):
            if start > day:
                add(account, day, start - one_day, None)
            add(account, start, until, plan)
            day = until + one_day
        if day <= last:
            add(account, day, last, None)
    return pa.table(out, schema=PLAN_PERIOD_SCHEMA)
