"""The data-quality suite for a clean lake partition, defined next to the event schema it protects.

Each check is a great-expectations (GX 1.x) expectation with a stable name and a level: ``error``
(GX severity critical: a failure stops the downstream steps for that date until an operator accepts
it) or ``warn`` (reported only). Volume is checked against the same weekday's trailing median; its
bounds are suite parameters filled in per date.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas.events import REQUIRED_FIELDS, SPEED_TIERS, STATUSES, TOKEN_FIELDS

SUITE_NAME = "usage_events_partition"
VOLUME_MIN, VOLUME_MAX = "volume_min_rows", "volume_max_rows"


@dataclass(frozen=True)
class Check:
    name: str  # stable id, the key of dq_results
    expectation: str  # GX expectation class name
    kwargs: dict = field(default_factory=dict)
    level: str = "error"  # error | warn


def partition_checks(models: list[str], max_tokens_per_event: int) -> list[Check]:
    checks = [Check("event_id_unique", "ExpectColumnValuesToBeUnique", {"column": "event_id"})]
    checks += [
        Check(f"{c}_not_null", "ExpectColumnValuesToNotBeNull", {"column": c}) for c in REQUIRED_FIELDS
    ]
    checks += [
        Check("model_known", "ExpectColumnValuesToBeInSet", {"column": "model", "value_set": sorted(models)}),
        Check(
            "speed_tier_accepted",
            "ExpectColumnValuesToBeInSet",
            {"column": "speed_tier", "value_set": list(SPEED_TIERS)},
        ),
        Check(
            "status_accepted",
            "ExpectColumnValuesToBeInSet",
            {"column": "status", "value_set": list(STATUSES)},
        ),
    ]
    checks += [
        Check(
            f"{c}_in_range",
            "ExpectColumnValuesToBeBetween",
            {"column": c, "min_value": 0, "max_value": max_tokens_per_event},
        )
        for c in TOKEN_FIELDS
    ]
    checks += [
        Check(
            "volume_vs_same_weekday",
            "ExpectTableRowCountToBeBetween",
            {"min_value": {"$PARAMETER": VOLUME_MIN}, "max_value": {"$PARAMETER": VOLUME_MAX}},
        ),
        Check(
            "duration_mostly_present",
            "ExpectColumnValuesToNotBeNull",
            {"column": "duration_ms", "mostly": 0.8},
            level="warn",
        ),
        Check(
            "errors_below_10_percent",
            "ExpectColumnValuesToBeInSet",
            {"column": "status", "value_set": ["ok"], "mostly": 0.9},
            level="warn",
        ),
    ]
    return checks


def build_suite(checks: list[Check]):  # type: ignore[no-untyped-def]
    """The GX ExpectationSuite for ``checks`` (GX is imported here: it takes seconds to import)."""
    import great_expectations as gx
    from great_expectations.expectations.metadata_types import FailureSeverity

    suite = gx.ExpectationSuite(name=SUITE_NAME)
    for check in checks:
        cls = getattr(gx.expectations, check.expectation)
        severity = FailureSeverity.CRITICAL if check.level == "error" else FailureSeverity.WARNING
        suite.add_expectation(cls(**check.kwargs, severity=severity, meta={"check": check.name}))
    return suite
