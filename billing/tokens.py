"""Token kinds: what billing counts, from what an event reports (the registry is ``schemas.tokens``).

An event reports token fields that may nest (cached input tokens are a part of the input). Billing
counts disjoint kinds, so every token is priced exactly once: a kind's tokens are its field minus the
fields that are part of it. Quota allowances count the kinds the registry marks; what a pool covers
is split over the kinds pro rata (``split_pro_rata``), exactly, in whole tokens.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from schemas import tokens


def token_kinds(events: pa.Table) -> pa.Table:
    """One int64 column per token kind (registry order) for each event row."""
    return tokens.billed(events)


def kind_matrix(events: pa.Table) -> np.ndarray:
    """``token_kinds`` as an n x kinds int64 array (columns in registry order): what allocation
    splits and what its check adds up to."""
    return tokens.billed_matrix(events)


def metered_tokens(events: pa.Table) -> pa.ChunkedArray | pa.Array:
    """Tokens that draw on a quota pool (the kinds the allowance counts)."""
    return tokens.allowance_tokens(events)


def split_pro_rata(total: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """Split ``total`` tokens of each row across its kinds (n x kinds) pro rata, exactly.

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
    # column comparisons (a few kinds), not a sort per row.
    rank = np.zeros(kinds.shape, np.int64)
    for k in range(kinds.shape[1]):
        for j in range(kinds.shape[1]):
            if j < k:
                rank[:, k] += remainder[:, j] >= remainder[:, k]
            elif j > k:
                rank[:, k] += remainder[:, j] > remainder[:, k]
    out = base + (rank < leftover[:, None])
    return np.where(weight[:, None] > 0, out, 0) if n else out
