"""Token kinds: what billing counts, from what an event reports.

An event reports ``input_tokens`` (cached ones included), ``cached_input_tokens`` and
``output_tokens``. Billing counts three disjoint kinds, so every token is priced exactly once:
``input`` (the uncached part), ``cached_input`` and ``output``. Quota allowances count
``input_tokens + output_tokens``, which equals the sum of the three kinds; what a pool covers is
split over the kinds pro rata (``split_pro_rata``), exactly, in whole tokens.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.catalog import TOKEN_KINDS


def token_kinds(events: pa.Table) -> pa.Table:
    """Columns ``input``, ``cached_input``, ``output`` (int64) for each event row."""
    return pa.table(
        {
            "input": pc.subtract(events["input_tokens"], events["cached_input_tokens"]),
            "cached_input": events["cached_input_tokens"],
            "output": events["output_tokens"],
        }
    ).select(list(TOKEN_KINDS))


def kind_matrix(events: pa.Table) -> np.ndarray:
    """``token_kinds`` as an n x 3 int64 array (columns in ``TOKEN_KINDS`` order): what allocation
    splits and what its check adds up to."""
    kinds = token_kinds(events)
    return np.stack([kinds[k].to_numpy() for k in TOKEN_KINDS], axis=1).astype(np.int64)


def metered_tokens(events: pa.Table) -> pa.ChunkedArray | pa.Array:
    """Tokens that draw on a quota pool: input (cached included) + output."""
    return pc.add(events["input_tokens"], events["output_tokens"])


def split_pro_rata(total: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """Split ``total`` tokens of each row across its kinds (n x 3) pro rata, exactly.

    Floor first; the leftover tokens go to the largest remainders, ties in kind order. ``total`` is
    usually at most the row's tokens: a row covered whole or not at all needs no arithmetic.
    """
    whole = total == kinds.sum(axis=1)
    out = np.where(whole[:, None], kinds, 0)
    part = np.flatnonzero(~whole & (total > 0))
    if len(part):
        out[part] = _split(total[part], kinds[part])
    return out


def _split(total: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    n = len(total)
    weight = kinds.sum(axis=1)
    safe = np.where(weight > 0, weight, 1)
    scaled = total[:, None] * kinds  # <= 1e7 * 1e7: fits int64
    base = scaled // safe[:, None]
    remainder = scaled % safe[:, None]
    leftover = total - base.sum(axis=1)
    # Each kind's rank in its row: the kinds before it in (largest remainder, kind order); a few
    # column comparisons (three kinds), not a sort per row.
    rank = np.zeros(kinds.shape, np.int64)
    for k in range(kinds.shape[1]):
        for j in range(kinds.shape[1]):
            if j < k:
                rank[:, k] += remainder[:, j] >= remainder[:, k]
            elif j > k:
                rank[:, k] += remainder[:, j] > remainder[:, k]
    out = base + (rank < leftover[:, None])
    return np.where(weight[:, None] > 0, out, 0) if n else out
