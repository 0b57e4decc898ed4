"""What ingest's row checks are judged against (``Rules``): the catalog's models, tiers and first
prices, the lateness window and the largest token count an event may report."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from pipelines.errors import UsageBillingError
from schemas.catalog import DEFAULT_TIERS
from schemas.limits import (
    DEFAULT_LATENESS_DAYS,
    DEFAULT_MAX_TOKENS_PER_EVENT,
    MAX_LATENESS_DAYS,
    MAX_TOKENS_LIMIT,
)


@dataclass(frozen=True)
class Rules:
    models: frozenset[str]
    lateness_days: int = DEFAULT_LATENESS_DAYS
    max_tokens_per_event: int = DEFAULT_MAX_TOKENS_PER_EVENT
    future_slack_hours: int = 24
    # (model, tier) -> the first UTC day a price is in force (prices never end: the newest
    # effective_from <= day applies). A pair missing here has no price at all.
    priced_from: tuple[tuple[str, str, dt.date], ...] = ()
    check_prices: bool = False  # on for a catalog's rules (for_catalog); off for rules without prices
    tiers: frozenset[str] = frozenset(t for t, _ in DEFAULT_TIERS)  # the catalog's [[tiers]]

    def __post_init__(self) -> None:
        if not 0 < self.lateness_days <= MAX_LATENESS_DAYS:
            raise UsageBillingError(
                f"--lateness_days must be between 1 and {MAX_LATENESS_DAYS}, got {self.lateness_days}"
            )
        if not 0 < self.max_tokens_per_event <= MAX_TOKENS_LIMIT:
            raise UsageBillingError(
                f"--max_tokens_per_event must be between 1 and {MAX_TOKENS_LIMIT:,}, "
                f"got {self.max_tokens_per_event}"
            )

    @classmethod
    def for_catalog(cls, catalog, **options: int) -> Rules:
        first: dict[tuple[str, str], dt.date] = {}
        for p in catalog.prices:
            key = (p.model, p.tier)
            first[key] = min(first.get(key, p.effective_from), p.effective_from)
        priced = tuple(sorted((m, t, d) for (m, t), d in first.items()))
        return cls(
            frozenset(catalog.model_ids),
            priced_from=priced,
            check_prices=True,
            tiers=frozenset(catalog.tier_ids),
            **options,
        )
