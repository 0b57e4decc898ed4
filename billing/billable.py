"""Billable rows: what metering hands to the warehouse for invoicing, as pure functions on Arrow tables.

Per (account, model, speed tier, account-local day, token kind, price in force): included and overage
tokens; and per (local day, UTC day) the metered tokens that tie billable usage to usage_daily."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from billing.pricing import rate_from
from schemas import tokens
from schemas.catalog import Catalog
from schemas.events import utc_date


def billable_rows(
    events: pa.Table, included: np.ndarray, overage: np.ndarray, keep: pa.Array, catalog: Catalog
) -> pa.Table:
    """Per (account, model, tier, local day, token kind, price in force): included and overage tokens.

    ``price_from`` is the effective_from of the price in force on the events' UTC days
    (``billing.pricing.rate_from``; null where none was), the key invoicing prices the row by;
    ``rate_day`` the UTC date of the row's first event. Events of one local day priced differently (a
    price change at UTC midnight) get rows of their own.
    """
    utc_day = utc_date(events["event_time"]).to_numpy().astype("datetime64[D]")
    price_from = pa.array(rate_from(catalog, events["model"], events["speed_tier"], utc_day))  # NaT: null
    # Sum per event group first (two token columns per kind), then one row per token kind: a third of the rows
    # through the group_by.
    keys = ["account_id", "model", "speed_tier", "local_day", "price_from"]
    columns = {k: events[k] for k in keys[:-1]}
    columns |= {"price_from": price_from, "rate_day": pa.array(utc_day)}
    for k in range(len(tokens.KINDS)):
        columns |= {f"included_{k}": pa.array(included[:, k]), f"overage_{k}": pa.array(overage[:, k])}
    sums = [c for c in columns if c.startswith(("included_", "overage_"))]
    g = (
        pa.table(columns)
        .filter(keep)
        .group_by(keys, use_threads=False)
        .aggregate([(c, "sum") for c in sums] + [("rate_day", "min")])
    )
    parts = [
        pa.table(
            {
                **{c: g[c] for c in keys[:-1]},
                "token_kind": pa.repeat(pa.scalar(kind, pa.string()), g.num_rows),
                "included_tokens": g[f"included_{k}_sum"],
                "overage_tokens": g[f"overage_{k}_sum"],
                "rate_day": g["rate_day_min"],
                "price_from": g["price_from"],
            }
        )
        for k, kind in enumerate(tokens.ids())
    ]
    return pa.concat_tables(parts)


def metered_days(events: pa.Table, included: np.ndarray, overage: np.ndarray, keep: pa.Array) -> pa.Table:
    """Tokens per (account-local day, UTC day): what ties billable usage (local days) to usage_daily
    (UTC days) in the reconciliation, without a UTC day on every billable row."""
    rows = pa.table(
        {
            "local_day": events["local_day"],
            "utc_day": utc_date(events["event_time"]),
            "included_tokens": pa.array(included.sum(axis=1)),
            "overage_tokens": pa.array(overage.sum(axis=1)),
        }
    ).filter(keep)
    return sum_by(rows, ["local_day", "utc_day"])


def sum_by(rows: pa.Table, keys: list[str]) -> pa.Table:
    values = [c for c in rows.column_names if c not in keys]
    g = rows.group_by(keys, use_threads=False).aggregate([(c, "sum") for c in values])
    return g.rename_columns([c.removesuffix("_sum") for c in g.column_names])
