"""What the generator draws from the catalog's shape: the mix and speed of speed tiers (by their
position in ``[[tiers]]``, slowest first) and the event's token fields (``schemas.tokens``)."""

from __future__ import annotations

import datetime as dt

import numpy as np

from billing.pricing import tiers_sold
from schemas import tokens
from schemas.catalog import Catalog

# Speed tiers by position in the catalog (slowest first): the output speed multiplier, and the share of
# requests of a tier sold since the model's first price (a tier added later ramps up instead). Tiers
# past the table continue the pattern.
TIER_SPEEDS = (1.0, 1.6, 3.8)
TIER_SHARES = (0.72, 0.28)


def tier_speed(position: int) -> float:
    if position < len(TIER_SPEEDS):
        return TIER_SPEEDS[position]
    return TIER_SPEEDS[-1] * 2.0 ** (position - len(TIER_SPEEDS) + 1)


def tier_share(position: int) -> float:
    if position < len(TIER_SHARES):
        return TIER_SHARES[position]
    return TIER_SHARES[-1] * 0.4 ** (position - len(TIER_SHARES) + 1)


def tier_probs(catalog: Catalog, days: list[dt.date], models: list[str]) -> np.ndarray:
    """[day, model, tier] probabilities over the tiers sold that day (catalog order). A tier sold since
    the model's first price takes its position's share; a tier added later ramps up over 6 weeks."""
    tiers = catalog.tier_ids
    probs = np.zeros((len(days), len(models), len(tiers)))
    first: dict[tuple[str, str], dt.date] = {}
    for p in catalog.prices:
        key = (p.model, p.tier)
        first[key] = min(first.get(key, p.effective_from), p.effective_from)
    for i, day in enumerate(days):
        for j, mid in enumerate(models):
            sold = tiers_sold(catalog, mid, day)
            opened = min((d for (m, _), d in first.items() if m == mid), default=day)
            for k, tier in enumerate(tiers):
                if tier not in sold:
                    continue
                since = first[(mid, tier)]
                if since > opened:
                    probs[i, j, k] = 0.05 + 0.40 * min(1.0, (day - since).days / 42.0)
                else:
                    probs[i, j, k] = tier_share(k)
            total = probs[i, j].sum()
            if total > 0:
                probs[i, j] /= total
    return probs


def token_fields(
    rng: np.random.Generator, whole: np.ndarray, part: np.ndarray, timed: np.ndarray
) -> dict[str, np.ndarray]:
    """The event's token fields (``schemas.tokens``) from the draws: the timed field gets ``timed``,
    the first other top-level field ``whole`` and its first part ``part``. Fields a registry adds
    beyond those get draws of ``rng`` (its own stream: the others stay as they were): a top-level
    field a small lognormal, a further part a share of what its field has left."""
    n = len(whole)
    out: dict[str, np.ndarray] = {tokens.timed_field(): timed}
    for k in tokens.KINDS:
        if k.part_of is None and k.field not in out:
            fresh = not any(v is whole for v in out.values())
            out[k.field] = whole if fresh else np.clip(rng.lognormal(5.0, 1.0, n), 1, 64_000).astype(np.int64)
    for k in tokens.KINDS:
        if k.part_of is not None:
            siblings = [out[p] for p in tokens.parts(k.part_of) if p in out]
            if not siblings and k.part_of in out and out[k.part_of] is whole:
                out[k.field] = part
            else:
                left = out[k.part_of] - sum(siblings, np.zeros(n, np.int64))
                out[k.field] = np.floor(left * rng.beta(1.0, 8.0, n)).astype(np.int64)
    return {f: out[f] for f in tokens.fields()}
