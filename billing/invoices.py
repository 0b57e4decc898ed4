"""Invoice building: one account-month of billable usage and plans -> document lines, in Decimal.

Pure functions on Arrow tables (no database). ``build_lines`` computes what each account owes for a
local calendar month; ``difference`` compares that truth with what finalized documents already
billed and returns adjustment lines, so that original + adjustments = the recomputed truth, line by
line and to the cent.

Lines (README, "The billing rule"; docs/finance.md): ``plan_fee`` (monthly fee x active days / days
in month, half-up to cents), ``included_usage`` (pool-covered tokens, amount 0), ``overage_usage``
(per model, tier, token kind and unit price: quantity x price per 1M / 1M, half-up to cents),
``adjustment`` (the difference of one of those, ``adjusted_type`` naming which). The total is the
sum of the rounded lines.
"""

from __future__ import annotations

import calendar
import datetime as dt
from decimal import Decimal
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from billing.pricing import AMOUNT, amounts, applied_prices, cents
from schemas.catalog import Catalog
from schemas.lake import PRICE

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
LINE_ORDER = {"plan_fee": 0, "overage_usage": 1, "included_usage": 2}
KEY = ["account_id", "charge_type", "model", "speed_tier", "token_kind", "unit_price"]


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
    """One line per plan row in force in the month: fee x active days / days in month.

    ``plans``: account_id, plan, active_from, active_until (null = open); pay-as-you-go rows (null
    plan) pay no fee. The fee is computed once per distinct (plan, active days), then joined.
    """
    first, last = month_bounds(month)
    plans = plans.filter(pc.is_valid(plans["plan"]))
    if plans.num_rows == 0:
        return LINE_SCHEMA.empty_table()
    start = np.maximum(plans["active_from"].to_numpy().astype("datetime64[D]"), np.datetime64(first))
    until = pc.fill_null(plans["active_until"], pa.scalar(last, pa.date32()))
    end = np.minimum(until.to_numpy().astype("datetime64[D]"), np.datetime64(last))
    days = (end - start).astype(np.int64) + 1
    rows = pa.table({"account_id": plans["account_id"], "plan": plans["plan"], "days": pa.array(days)})
    rows = rows.filter(pa.array(days > 0))
    in_month = (last - first).days + 1
    distinct = rows.group_by(["plan", "days"]).aggregate([])
    fees, amounts_, texts = [], [], []
    for plan_id, n in zip(distinct["plan"].to_pylist(), distinct["days"].to_pylist(), strict=True):
        fee = catalog.plan(plan_id).monthly_fee
        fees.append(fee)
        amounts_.append(cents(fee * n / in_month))
        texts.append(f"{plan_id} plan, {n} of {in_month} days")
    priced = distinct.append_column("unit_price", pa.array(fees, PRICE))
    priced = priced.append_column("amount", pa.array(amounts_, AMOUNT))
    priced = priced.append_column("description", pa.array(texts, pa.string()))
    joined = rows.join(priced, ["plan", "days"])
    n = joined.num_rows
    return pa.table(
        {
            "account_id": joined["account_id"],
            "line_type": pa.array(["plan_fee"] * n, pa.string()),
            "adjusted_type": pa.nulls(n, pa.string()),
            "model": pa.nulls(n, pa.string()),
            "speed_tier": pa.nulls(n, pa.string()),
            "token_kind": pa.nulls(n, pa.string()),
            "description": joined["description"],
            "quantity": joined["days"],
            "unit_price": joined["unit_price"],
            "amount": joined["amount"],
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
            _usage_lines(over, "overage_usage", "over allowance"),
            _usage_lines(included, "included_usage", "within allowance"),
        ]
    )


def build_lines(billable: pa.Table, plans: pa.Table, catalog: Catalog, month: str) -> pa.Table:
    """Every line of every account's invoice for the month, ordered, numbered per account."""
    return number_lines(
        pa.concat_tables([plan_fee_lines(plans, catalog, month), usage_lines(billable, catalog)])
    )


def number_lines(lines: pa.Table) -> pa.Table:
    """Sort lines (account; plan fee, overage, included; model, tier, kind) and add ``line_no`` 1..n."""
    charge = pc.coalesce(lines["adjusted_type"], lines["line_type"])
    rank = pc.index_in(charge, value_set=pa.array(list(LINE_ORDER)))
    lines = lines.append_column("_rank", pc.fill_null(rank, len(LINE_ORDER)))
    lines = lines.sort_by(
        [(c, "ascending") for c in ("account_id", "_rank", "model", "speed_tier", "token_kind", "unit_price")]
    ).drop_columns(["_rank"])
    accounts = lines["account_id"].combine_chunks()
    n = lines.num_rows
    starts = np.ones(n, bool)
    if n > 1:
        starts[1:] = pc.not_equal(accounts.slice(1), accounts.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    position = np.arange(n)
    first = np.maximum.accumulate(np.where(starts, position, 0))
    return lines.append_column("line_no", pa.array(position - first + 1, pa.int32()))


def totals(lines: pa.Table) -> pa.Table:
    """Per account: subtotal (usage and fee lines) and total (all lines), sums of rounded amounts."""
    is_adjustment = pc.equal(lines["line_type"], "adjustment")
    base = pc.if_else(is_adjustment, pa.scalar(Decimal(0), AMOUNT), lines["amount"])
    t = pa.table({"account_id": lines["account_id"], "subtotal": base, "total": lines["amount"]})
    g = t.group_by("account_id").aggregate([("subtotal", "sum"), ("total", "sum")])
    return g.rename_columns([c.removesuffix("_sum") for c in g.column_names])


def _keyed(lines: pa.Table) -> pa.Table:
    """Lines summed by their charge key (empty strings for absent keys, so that joins match them)."""
    t = pa.table(
        {
            "account_id": lines["account_id"],
            "charge_type": pc.coalesce(lines["adjusted_type"], lines["line_type"]),
            "model": pc.fill_null(lines["model"], ""),
            "speed_tier": pc.fill_null(lines["speed_tier"], ""),
            "token_kind": pc.fill_null(lines["token_kind"], ""),
            "unit_price": lines["unit_price"],
            "description": lines["description"],
            "quantity": lines["quantity"],
            "amount": lines["amount"],
        }
    )
    g = t.group_by(KEY).aggregate([("quantity", "sum"), ("amount", "sum"), ("description", "min")])
    return g.rename_columns([c.removesuffix("_sum").removesuffix("_min") for c in g.column_names])


def difference(truth: pa.Table, billed: pa.Table) -> pa.Table:
    """Adjustment lines: truth - billed per (account, charge type, model, tier, kind, unit price).

    Differences of rounded amounts (never re-rounded), so billed + adjustment = truth exactly. Keys
    present on one side only count as zero on the other; all-zero differences are dropped.
    """
    t = _keyed(truth).rename_columns([*KEY, "q_truth", "a_truth", "d_truth"])
    b = _keyed(billed).rename_columns([*KEY, "q_billed", "a_billed", "d_billed"])
    j = t.join(b, KEY, join_type="full outer")
    zero_amount = pa.scalar(Decimal(0), AMOUNT)
    quantity = pc.subtract(pc.fill_null(j["q_truth"], 0), pc.fill_null(j["q_billed"], 0))
    amount = pc.subtract(
        pc.cast(pc.fill_null(j["a_truth"], zero_amount), AMOUNT),
        pc.cast(pc.fill_null(j["a_billed"], zero_amount), AMOUNT),
    )
    j = j.append_column("dq", quantity).append_column("da", pc.cast(amount, AMOUNT))
    changed = pc.or_(pc.not_equal(j["dq"], 0), pc.not_equal(j["da"], zero_amount))
    j = j.filter(changed)
    n = j.num_rows

    def absent_is_null(column: str) -> pa.Array:
        values = j[column]
        return pc.if_else(pc.equal(values, ""), pa.nulls(n, pa.string()), values)

    return number_lines(
        pa.table(
            {
                "account_id": j["account_id"],
                "line_type": pa.array(["adjustment"] * n, pa.string()),
                "adjusted_type": j["charge_type"],
                "model": absent_is_null("model"),
                "speed_tier": absent_is_null("speed_tier"),
                "token_kind": absent_is_null("token_kind"),
                "description": pc.binary_join_element_wise(
                    "correction: ", pc.coalesce(j["d_truth"], j["d_billed"]), ""
                ),
                "quantity": j["dq"],
                "unit_price": pc.cast(j["unit_price"], PRICE),
                "amount": j["da"],
            },
            schema=LINE_SCHEMA,
        )
    )
