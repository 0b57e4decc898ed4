"""Rate cards: effective-dated prices per model, speed tier and token kind, in exact decimals.

A price's ``effective_from`` is a UTC date; the newest price with effective_from <= the event's UTC
date applies, for exactly the tier the event was served at (never another tier's price). Metering
records, per billable row, the UTC date of its first event (``rate_day``) among events that share the
same price in force, so the invoice looks up one price per (model, tier, rate_day), not per event.

Amounts: quantity x price per 1M tokens / 1,000,000, rounded half-up to cents, computed on Arrow
decimals (exact; no float anywhere).
"""

from __future__ import annotations

import datetime as dt
from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.catalog import Catalog

CENT = Decimal("0.01")
NO_RATE = np.datetime64("NaT", "D")
PER_TOKEN = pa.decimal128(13, 12)  # a price per 1M tokens below 1M, divided by 1M: exact
AMOUNT = pa.decimal128(20, 2)


class MissingPriceError(ValueError):
    """No price in force for a model, tier and token kind on a day: drafting stops."""


def cents(value: Decimal) -> Decimal:
    """Half-up to cents (0.005 -> 0.01)."""
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


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
    """Price per 1M tokens (decimal128(18, 6)) of each row; MissingPriceError names the first gap.

    Looked up once per distinct (model, tier, kind, rate_day), then joined back.
    """
    keys = pa.table({"model": model, "tier": tier, "kind": kind, "day": rate_day})
    distinct = keys.group_by(["model", "tier", "kind", "day"]).aggregate([])
    prices = []
    for m, t, k, d in zip(*(distinct[c].to_pylist() for c in ("model", "tier", "kind", "day")), strict=True):
        price = catalog.price(m, t, d)
        if price is None:
            raise MissingPriceError(f"no price for model {m}, tier {t}, token kind {k} on {d.isoformat()}")
        prices.append(price.per_million(k))
    distinct = distinct.append_column("price", pa.array(prices, pa.decimal128(18, 6)))
    keyed = keys.append_column("_row", pa.array(np.arange(keys.num_rows)))
    joined = keyed.join(distinct, ["model", "tier", "kind", "day"]).sort_by("_row")
    return joined["price"].combine_chunks()


def amounts(quantity: pa.Array, per_million: pa.Array) -> pa.Array:
    """quantity x price per 1M / 1,000,000, half-up to cents, exactly (decimal128(20, 2))."""
    per_token = pc.divide(pc.cast(per_million, pa.decimal128(24, 12)), pa.scalar(Decimal(10**6)))
    product = pc.multiply(pc.cast(quantity, pa.decimal128(19, 0)), pc.cast(per_token, PER_TOKEN))
    return pc.cast(pc.round(product, ndigits=2, round_mode="half_up"), AMOUNT)
