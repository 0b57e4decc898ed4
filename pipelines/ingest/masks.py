"""The two masks every row check starts from: a boolean Arrow array as numpy, and the null rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def as_mask(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean Arrow array -> numpy, nulls as False. Most checks find nothing: their answer is
    known from the bitmap (``any``) without unpacking a byte per row."""
    if not pc.any(arr).as_py():
        return np.zeros(len(arr), bool)
    return np.asarray(pc.fill_null(arr, False).to_numpy(zero_copy_only=False), dtype=bool)


def nulls(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Null rows (a column without nulls says so in its header: no row is looked at)."""
    return as_mask(col.is_null()) if col.null_count else np.zeros(len(col), bool)
