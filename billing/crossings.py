"""Thresholds crossed: the event at which a pool's use in a period reaches a share of its allowance
(the catalog's ``[notifications]``), computed with the allocation that caused it (``billing.quota``).

A balance key's running demand only grows, so for each threshold at most one event of a key takes it
from below to at or above: that event, with the key's use right after it, is the crossing. A key
that starts above a threshold (a balance carried over from an earlier run) crossed it in that run.
The 1.0 crossing is the pool's exhaustion: the event ``exhausted_at`` names.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal

import numpy as np
import pyarrow as pa

from schemas.catalog import Pool

CROSSINGS_SCHEMA = pa.schema(
    [
        ("event_index", pa.int64()),  # the crossing event's row in the allocated events
        ("plan", pa.string()),
        ("pool", pa.string()),
        ("period_start", pa.date32()),
        ("threshold", pa.string()),  # the share as the catalog gives it, e.g. "0.8"
        ("used", pa.int64()),  # the key's use right after the event
        ("allowance", pa.int64()),
    ]
)


def tokens_at(share: Decimal, allowance: int) -> int:
    """The use at which ``share`` of ``allowance`` is reached: ceil(share x allowance), exact."""
    return int((share * allowance).to_integral_value(rounding=ROUND_CEILING))


def crossings(
    events: np.ndarray,
    starts: np.ndarray,
    running: np.ndarray,
    offered: np.ndarray,
    plan: str,
    pool: Pool,
    thresholds: list[Decimal],
) -> pa.Table:
    """One pool's crossings. Per event the pool was offered (in key and time order): ``events`` its
    row, ``starts`` its period start, ``running`` its key's running demand after it and ``offered``
    what it asked of the pool (the running demand before it is ``running - offered``)."""
    allowance = pool.allowance_tokens
    before = running - offered
    parts = []
    for share in thresholds:
        need = tokens_at(share, allowance)
        hit = np.flatnonzero((before < need) & (running >= need))
        n = len(hit)
        parts.append(
            pa.table(
                [
                    pa.array(events[hit], pa.int64()),
                    pa.repeat(pa.scalar(plan, pa.string()), n),
                    pa.repeat(pa.scalar(pool.id, pa.string()), n),
                    pa.array(starts[hit].astype("datetime64[D]"), pa.date32()),
                    pa.repeat(pa.scalar(str(share), pa.string()), n),
                    pa.array(np.minimum(running[hit], allowance), pa.int64()),
                    pa.array(np.full(n, allowance, np.int64), pa.int64()),
                ],
                schema=CROSSINGS_SCHEMA,
            )
        )
    return pa.concat_tables(parts)
