"""Rate cards: effective-dated prices per model, speed tier and token kind, in exact decimals.

The one place the price in force is worked out. A price's ``effective_from`` is a UTC date; the
newest price with effective_from <= the event's UTC date applies, for exactly the tier the event was
served at (never another tier's price): ``price_in_force`` for one (model, tier, day), ``rate_from``
for a column of events. Metering records, per billable row, the ``effective_from`` of the price it
applied (``price_from``, null where none was in force) and the UTC date of the row's first event
(``rate_day``); the invoice prices each row by that key (``applied_prices``), so it charges exactly
the price the meter chose.

Amounts: quantity x price per 1M tokens / 1,000,000, rounded half-up to cents, computed on Arrow
decimals (exact; no float anywhere).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.catalog import Catalog, Price
from schemas.lake import AMOUNT, PRICE

CENT = Decimal("0.01")
NO_RATE = np.datetime64("NaT", "D")
PER_TOKEN = pa.decimal128(13, 12)  # a price per 1M tokens below 1M, divided by 1M: exact


class MissingPriceError(ValueError):
    """No price in force for a model, tier and token kind on a day: drafting stops."""


def cents(value: Decimal) -> Decimal:
    """Half-up to cents (0.005 -> 0.01)."""
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


def price_in_force(catalog: Catalog, model: str, tier: str, day: dt.date) -> Price | None:
    """The newest price with effective_from <= day for exactly this model and tier, else None."""
    best: Price | None = None
    for p in catalog.prices:
        if (
            p.model == model
            and p.tier == tier
            and p.effective_from <= day
            and (best is None or p.effective_from > best.effective_from)
        ):
            best = p
    return best


def tiers_sold(catalog: Catalog, model: str, day: dt.date) -> list[str]:
    """Speed tiers with a price in force for ``model`` on ``day``, in catalog tier order."""
    return [t for t in catalog.tier_ids if price_in_force(catalog, model, t, day) is not None]


def rate_from(catalog: Catalog, model: pa.Array, tier: pa.Array, utc_day: np.ndarray) -> np.ndarray:
    """Per event: the effective_from of the price in force on its UTC day for its model and tier, or NaT.

    One pass per (model, tier) of the catalog's prices, a binary search inside it: no loop over events.
    """
    out = np.full(len(utc_day), NO_RATE)
    cards: dict[tuple[str, str], list[dt.date]] = {}
    for price in catalog.prices:
        cards.setdefault((price.model, price.tier), []).append(price.effective_from)
    if not cards:
        return out
    # One hash lookup per event for its (model, tier) card, then integer masks per card.
    key = pc.binary_join_element_wise(model, tier, "\x1f")
    names = pa.array([f"{m}\x1f{t}" for m, t in cards], pa.string())
    card = pc.fill_null(pc.index_in(key, value_set=names), -1).to_numpy(zero_copy_only=False)
    for c, starts in enumerate(cards.values()):
        rows = np.flatnonzero(card == c)
        if not len(rows):
            continue
        effective = np.array(sorted(starts), dtype="datetime64[D]")
        idx = np.searchsorted(effective, utc_day[rows], side="right") - 1
        out[rows] = np.where(idx >= 0, effective[np.clip(idx, 0, None)], NO_RATE)
    return out


def unit_prices(
    catalog: Catalog, model: pa.Array, tier: pa.Array, kind: pa.Array, rate_day: pa.Array
) -> pa.Array:
    """Price per 1M tokens (``schemas.lake.PRICE``) in force on each row's day; MissingPriceError names the
    first gap. Looked up once per distinct (model, tier, kind, day), then joined back.
    """

    def lookup(m: str, t: str, k: str, d: dt.date) -> Decimal:
        price = price_in_force(catalog, m, t, d)
        if price is None:
            raise MissingPriceError(f"no price for model {m}, tier {t}, token kind {k} on {d.isoformat()}")
        return price.per_million(k)

    return _per_distinct(lookup, {"model": model, "tier": tier, "kind": kind, "day": rate_day})


def applied_prices(
    catalog: Catalog,
    model: pa.Array,
    tier: pa.Array,
    kind: pa.Array,
    price_from: pa.Array,
    first_day: pa.Array,
    last_day: pa.Array | None = None,
) -> pa.Array:
    """Price per 1M tokens of each billable row: the price metering applied (its ``effective_from``,
    ``price_from``), for rows whose events' UTC days run from ``first_day`` to ``last_day``.

    The catalog must still say the same: the price in force on both days is the one applied (prices
    are steps in time, so no other price starts between them). Where no price is in force,
    MissingPriceError names the gap as ``unit_prices`` does; where the catalog's prices changed after
    metering, it says so (the days must be metered again)."""
    last_day = first_day if last_day is None else last_day

    def lookup(m: str, t: str, k: str, start: dt.date | None, first: dt.date, last: dt.date) -> Decimal:
        now: list[Price] = []
        for d in (first, last):
            price = price_in_force(catalog, m, t, d)
            if price is None:
                raise MissingPriceError(
                    f"no price for model {m}, tier {t}, token kind {k} on {d.isoformat()}"
                )
            now.append(price)
        if start is None or any(p.effective_from != start for p in now):
            applied = f"the price effective {start.isoformat()}" if start else "no price"
            raise MissingPriceError(
                f"the prices of model {m}, tier {t} changed after metering: metering applied {applied} "
                f"to usage of {first.isoformat()}..{last.isoformat()}; meter those days again"
            )
        return now[0].per_million(k)

    columns = {
        "model": model,
        "tier": tier,
        "kind": kind,
        "start": price_from,
        "first": first_day,
        "last": last_day,
    }
    return _per_distinct(
        lookup, columns, key=["model", "tier", "kind", "start"], span={"first": "min", "last": "max"}
    )


def _per_distinct(
    lookup: Callable[..., Decimal],
    columns: dict[str, pa.Array],
    key: list[str] | None = None,
    span: dict[str, str] | None = None,
) -> pa.Array:
    """``lookup(*row)`` once per distinct ``key`` (default: every column), joined back onto the rows.
    The other columns (``span``: column -> "min" or "max") give the least or greatest value among the
    key's rows."""
    keys = pa.table(columns)
    key = key or list(columns)
    span = span or {}
    distinct = keys.group_by(key).aggregate([(c, how) for c, how in span.items()])
    names = {f"{c}_{how}": c for c, how in span.items()}
    distinct = distinct.rename_columns([names.get(c, c) for c in distinct.column_names])
    rows = zip(*(distinct[c].to_pylist() for c in columns), strict=True)
    prices = [lookup(*row) for row in rows]
    distinct = distinct.select(key).append_column("price", pa.array(prices, PRICE))
    keyed = keys.append_column("_row", pa.array(np.arange(keys.num_rows)))
    joined = keyed.join(distinct, key).sort_by("_row")
    return joined["price"].combine_chunks()


def amounts(quantity: pa.Array, per_million: pa.Array) -> pa.Array:
    """quantity x price per 1M / 1,000,000, half-up to cents, exactly (decimal128(20, 2))."""
    per_token = pc.divide(pc.cast(per_million, pa.decimal128(24, 12)), pa.scalar(Decimal(10**6)))
    product = pc.multiply(pc.cast(quantity, pa.decimal128(19, 0)), pc.cast(per_token, PER_TOKEN))
    return pc.cast(pc.round(product, ndigits=2, round_mode="half_up"), AMOUNT)
