"""Token kinds: what billing counts, from what an event reports.

An event reports ``input_tokens`` (cached ones included), ``cached_input_tokens`` and
``output_tokens``. Billing counts three disjoint kinds, so every token is priced exactly once:
``input`` (the uncached part), ``cached_input`` and ``output``. Quota allowances count
``input_tokens + output_tokens``, which equals the sum of the three kinds.
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
