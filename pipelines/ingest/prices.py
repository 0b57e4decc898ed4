"""The ``no_price`` row check of usage events: a row whose model and tier had no price on its UTC
day could never be invoiced, so it stops at ingest instead of blocking the month's draft."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.ingest.masks import nulls
from pipelines.ingest.rules import Rules


def _codes(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[str]]:
    """(index of each row's value, the distinct values): a dictionary column as it is, text encoded."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not pa.types.is_dictionary(arr.type):
        arr = pc.dictionary_encode(arr)
    return arr.indices.fill_null(0).to_numpy(), arr.dictionary.to_pylist()


_EPOCH = dt.date(1970, 1, 1)
_DAY_US = 86_400_000_000


def unpriced(raw: pa.Table, times: pa.Array, rules: Rules) -> np.ndarray:
    """Rows of a catalog model and a known tier whose UTC day is before the first price of that pair
    (or the pair has none): they could never be invoiced, so they stop here instead of blocking the
    month's draft later.

    Only the (model, tier) pairs whose first price comes after the chunk's earliest day can have such
    rows (usually none): their rows are found by the pair's code, and only those rows' days are looked
    at. No loop over rows, and nearly no work on a chunk whose pairs were all priced by then."""
    n = raw.num_rows
    micros = pc.cast(times, pa.int64())  # as integers: a time past Python's year 9999 is still a number
    lo = pc.min(micros).as_py()
    if lo is None:
        return np.zeros(n, bool)
    earliest = lo // _DAY_US
    models, model_values = _codes(raw["model"])
    tiers, tier_values = _codes(raw["speed_tier"])
    first = {(m, t): (d - _EPOCH).days for m, t, d in rules.priced_from}
    suspect = [
        (i * len(tier_values) + j, first.get((m, t)))
        for i, m in enumerate(model_values)
        if m in rules.models
        for j, t in enumerate(tier_values)
        if t in rules.tiers and first.get((m, t), earliest + 1) > earliest
    ]
    if not suspect:
        return np.zeros(n, bool)
    codes = models.astype(np.int64) * len(tier_values) + tiers
    present = ~nulls(raw["model"]) & ~nulls(raw["speed_tier"]) & ~nulls(times)
    out = np.zeros(n, bool)
    us = micros.fill_null(0).to_numpy()
    for code, day in suspect:
        rows = np.flatnonzero((codes == code) & present)
        if len(rows):
            out[rows] = True if day is None else us[rows] // _DAY_US < day
    return out
