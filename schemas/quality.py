"""The data-quality suite for a clean lake partition, defined next to the event schema it protects.

Each check is a great-expectations (GX 1.x) expectation with a stable name, a level, and the words a
data-quality page shows for what passing means. ``error`` (GX severity critical): a failure stops the
downstream steps for that date until an operator accepts it; ``warn``: reported only.

Two scopes. ``rows`` checks look at the partition's events, one value at a time (or, for uniqueness,
at the whole partition). ``profile`` checks look at the partition as a whole: its row count against
the same weekday's trailing median, and the shares of rows with a duration and of successful
requests. Those are judged on the partitions' profile, one row per partition with the columns of
``PROFILE_COLUMNS``, so that one GX run judges many partitions at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas import outcomes
from schemas.events import REQUIRED_FIELDS, STATUSES, TOKEN_FIELDS

SUITE_NAME = "usage_events_partition"
OUTCOME_SUITE_NAME = "task_outcomes_partition"
PROFILE_SUITE_NAME = "usage_events_partition_profile"
# The profile row of a partition: rows over the median of the same weekday's previous partitions
# (null: too little history, not judged), share of rows with a duration, share of status "ok".
RATIO_TO_MEDIAN, DURATION_SHARE, OK_SHARE = "rows_to_median", "duration_share", "ok_share"
PROFILE_COLUMNS = (RATIO_TO_MEDIAN, DURATION_SHARE, OK_SHARE)
VOLUME_CHECK = "volume_vs_same_weekday"


@dataclass(frozen=True)
class Check:
    name: str  # stable id, the key of dq_results
    expectation: str  # GX expectation class name
    kwargs: dict[str, Any] = field(default_factory=dict)
    level: str = "error"  # error | warn
    scope: str = "rows"  # rows | profile
    expected: str = ""  # what passing means, as a page says it
    row_local: bool = True  # a row's outcome depends on that row alone (not so for uniqueness)
    dataset: str = "events"  # the partition it judges: usage events, or task outcomes (``outcomes``)

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns the check reads."""
        k = self.kwargs
        return tuple(
            k.get("column_list") or [c for c in (k.get("column"), k.get("column_A"), k.get("column_B")) if c]
        )


def check_dataset(name: str) -> str:
    """The dataset a stored check judges, from its name: the task outcomes' checks are ``outcome_*``."""
    return "outcomes" if name.startswith("outcome_") else "events"


def partition_checks(
    models: list[str], max_tokens_per_event: int, volume_factor: float = 3.0, tiers: tuple[str, ...] = ()
) -> list[Check]:
    """The events suite; ``models`` and ``tiers`` (slowest first) are the catalog's."""
    checks = [
        Check(
            "event_id_unique",
            "ExpectColumnValuesToBeUnique",
            {"column": "event_id"},
            expected="no event_id twice in the partition",
            row_local=False,
        )
    ]
    checks += [
        Check(f"{c}_not_null", "ExpectColumnValuesToNotBeNull", {"column": c}, expected=f"every row has {c}")
        for c in REQUIRED_FIELDS
    ]
    for name, column, values in (
        ("model_known", "model", sorted(models)),
        ("speed_tier_accepted", "speed_tier", list(tiers)),
        ("status_accepted", "status", list(STATUSES)),
    ):
        checks.append(
            Check(
                name,
                "ExpectColumnValuesToBeInSet",
                {"column": column, "value_set": values},
                expected=f"{column} is one of {', '.join(values)}",
            )
        )
    checks += [
        Check(
            f"{c}_in_range",
            "ExpectColumnValuesToBeBetween",
            {"column": c, "min_value": 0, "max_value": max_tokens_per_event},
            expected=f"{c} between 0 and {max_tokens_per_event:,}",
        )
        for c in TOKEN_FIELDS
    ]
    checks += [
        Check(
            VOLUME_CHECK,
            "ExpectColumnValuesToBeBetween",
            {"column": RATIO_TO_MEDIAN, "min_value": 1 / volume_factor, "max_value": volume_factor},
            scope="profile",
            expected=f"rows within {volume_factor:g}x of the same weekday's median over the previous weeks",
        ),
        Check(
            "duration_mostly_present",
            "ExpectColumnValuesToBeBetween",
            {"column": DURATION_SHARE, "min_value": 0.8},
            level="warn",
            scope="profile",
            expected="at least 80% of rows have duration_ms",
        ),
        Check(
            "errors_below_10_percent",
            "ExpectColumnValuesToBeBetween",
            {"column": OK_SHARE, "min_value": 0.9},
            level="warn",
            scope="profile",
            expected="at least 90% of rows have status ok",
        ),
    ]
    return checks


def outcome_checks() -> list[Check]:
    """The task outcomes' suite, on each clean partition of ``lake/outcomes`` (by completion date).
    A failure stops the effectiveness of that date's week, not billing."""
    checks = [
        Check(
            "outcome_task_unique",
            "ExpectCompoundColumnsToBeUnique",
            {"column_list": ["account_id", "task_id"]},
            expected="no (account_id, task_id) twice in the partition",
            row_local=False,
            dataset="outcomes",
        )
    ]
    checks += [
        Check(
            f"outcome_{c}_not_null",
            "ExpectColumnValuesToNotBeNull",
            {"column": c},
            expected=f"every outcome has {c}",
            dataset="outcomes",
        )
        for c in outcomes.REQUIRED_FIELDS
    ]
    checks += [
        Check(
            "outcome_accepted_or_abandoned",
            "ExpectColumnValuesToBeInSet",
            {"column": "outcome", "value_set": list(outcomes.OUTCOMES)},
            expected="outcome is " + " or ".join(outcomes.OUTCOMES),
            dataset="outcomes",
        ),
        Check(
            "outcome_rework_ms_in_range",
            "ExpectColumnValuesToBeBetween",
            {"column": "rework_ms", "min_value": 0},
            expected="rework_ms is 0 or more",
            dataset="outcomes",
        ),
        Check(
            "outcome_completed_after_start",
            "ExpectColumnPairValuesAToBeGreaterThanB",
            {"column_A": "completed_at", "column_B": "started_at", "or_equal": True},
            expected="completed_at is at or after started_at",
            dataset="outcomes",
        ),
    ]
    return checks


def build_suite(checks: list[Check], name: str = SUITE_NAME):  # type: ignore[no-untyped-def]  # GX's suite, imported here
    """The GX ExpectationSuite for ``checks`` (GX is imported here: it takes seconds to import)."""
    import great_expectations as gx  # lazy: great_expectations
    from great_expectations.expectations.metadata_types import FailureSeverity  # lazy: great_expectations

    suite = gx.ExpectationSuite(name=name)
    for check in checks:
        cls = getattr(gx.expectations, check.expectation)
        severity = FailureSeverity.CRITICAL if check.level == "error" else FailureSeverity.WARNING
        suite.add_expectation(cls(**check.kwargs, severity=severity, meta={"check": check.name}))
    return suite
