"""The words of the adoption and retirement reports, each defined once (from the catalog's thresholds):
the report's page and JSON print these, and ``docs/retirement.md`` holds the same sentences (a test
renders them and looks them up there)."""

from __future__ import annotations

from schemas.catalog_sections import AdoptionConfig


def definitions(cfg: AdoptionConfig) -> dict[str, str]:
    return {
        "active account": "an account with at least one request of the model in the week (UTC days)",
        "heavy account": (
            f"an account active on the model on at least {cfg.heavy_min_days} days of a week with at least "
            f"{cfg.heavy_min_requests} requests that week; a count of heavy accounts is always of one "
            "stated week"
        ),
        "affected account": (
            "an account with an event of the model on a local day of the preview month, whose bill the "
            "migration preview recomputes"
        ),
        "accounts to contact": (
            "every affected account, and every account active on the model in the last 4 complete weeks"
        ),
        "peak week by accounts": "the week of the window with the most active accounts",
        "revenue at stake": (
            "what the preview month's invoices charge for the model (its overage lines), as billed now"
        ),
        "backup tank": (
            "use of a model with a pool of its own after the account's main pool (the plan's pool for every "
            "model) ran out in the period of the event"
        ),
        "model time": (
            "the summed output time (duration_ms) of the model's requests in a week: the serving time "
            "retiring it frees"
        ),
    }
