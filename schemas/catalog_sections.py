"""The catalog's base model and its settings sections (``[adoption]``, ``[invoicing]``, ``[seller]``,
``[effectiveness]``); ``schemas.catalog`` holds the catalog itself."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.limits import catalog_id_problem, date_problem


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="after")
    def _bounded(self) -> _Strict:
        """Ids are real ids and dates lie in the supported range (schemas.limits), wherever they sit."""
        for name, value in self:
            values = value if isinstance(value, list) else [value]
            for v in values:
                if name in _ID_FIELDS and isinstance(v, str) and v != "*":
                    problem = catalog_id_problem(v)
                    if problem:
                        raise ValueError(f"{name} {v!r} {problem}")
                if isinstance(v, dt.date):
                    problem = date_problem(v)
                    if problem:
                        raise ValueError(f"{name} {v} {problem}")
        return self


_ID_FIELDS = frozenset({"id", "model", "successor", "models", "exclude_models"})


def _no_float(value: object) -> object:
    if isinstance(value, float):
        raise ValueError('prices are strings like "1.25", not floats (floats are not exact)')
    return value


class AdoptionConfig(_Strict):
    """Thresholds of the adoption analytics and the retirement detector (``[adoption]``)."""

    weeks: int = Field(12, ge=8, le=104, description="complete ISO weeks looked at")
    min_weeks: int = Field(8, ge=4, description="usable weeks needed to test a model")
    fdr_q: float = Field(0.10, gt=0, lt=1, description="Benjamini-Hochberg level across models and metrics")
    min_weekly_decline: float = Field(0.05, ge=0, lt=1, description="accounts lost per week, at least")
    min_median_drop: float = Field(0.25, ge=0, lt=1, description="last 4 weeks' median below the first 4's")
    floor_accounts: int = Field(25, ge=1, description="active accounts at which a model is not worth running")
    heavy_min_days: int = Field(3, ge=1, le=7, description="active days in a week to count as heavy")
    heavy_min_requests: int = Field(50, ge=1, description="requests in a week to count as heavy")
    notice_days: int = Field(90, ge=0, description="notice between the announcement and retirement")


class InvoicingConfig(_Strict):
    """When a month may be invoiced (``[invoicing]``)."""

    close_grace_days: int = Field(
        2,
        ge=0,
        le=35,
        description="landing days after a month's last UTC day that must be ingested before it closes",
    )


class Seller(_Strict):
    """Who issues the customer documents (``[seller]``): printed on every invoice and adjustment."""

    name: str = Field(min_length=1, max_length=200)
    address: str = Field("", max_length=1000, description="postal address; new lines are kept")
    tax_id: str = Field("", max_length=64, description="VAT or tax number, printed as given")

    @field_validator("name", "address", "tax_id")
    @classmethod
    def _printable(cls, value: str) -> str:
        value = value.strip()
        if any(ord(c) < 32 and c not in "\n\t" for c in value):
            raise ValueError("holds a control character")
        return value

    @field_validator("name")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value:
            raise ValueError("is empty")
        return value


class EffectivenessConfig(_Strict):
    """How effectiveness costs a person's rework (``[effectiveness]``)."""

    rework_cost_per_hour: Decimal | None = Field(
        None, ge=0, max_digits=14, decimal_places=2, description="the cost of an hour of rework"
    )

    @field_validator("rework_cost_per_hour", mode="before")
    @classmethod
    def _no_float(cls, value: object) -> object:
        return _no_float(value)

    @property
    def costed(self) -> bool:
        """Whether rework is costed at all (absent: it counts 0, and reports say so)."""
        return self.rework_cost_per_hour is not None

    @property
    def per_hour(self) -> Decimal:
        return self.rework_cost_per_hour if self.rework_cost_per_hour is not None else Decimal("0")


def _threshold_list(value: object, what: str) -> list[Decimal]:
    """Shares of an allowance or a grant: numbers (or decimal strings) in (0, 1], ascending, unique."""
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a list of shares like [0.8, 1.0]")
    out: list[Decimal] = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int | float | str | Decimal):
            raise ValueError(f"{what}: {v!r} is not a number")
        try:
            share = Decimal(str(v))
        except ArithmeticError:
            raise ValueError(f"{what}: {v!r} is not a number") from None
        if not share.is_finite() or not 0 < share <= 1:
            raise ValueError(f"{what}: {v} is not a share in (0, 1]")
        if share.as_tuple().exponent < -4:  # type: ignore[operator]
            raise ValueError(f"{what}: {v} has more than 4 decimal places")
        out.append(share.normalize())
    if out != sorted(set(out)):
        raise ValueError(f"{what} must be ascending and each given once, got {value}")
    return out


class NotificationsConfig(_Strict):
    """When accounts are told (``[notifications]``): shares of a pool's allowance used in a period,
    shares of a credit grant used, and how many days before a grant with a balance left expires.
    Absent: no notifications."""

    pool_thresholds: list[Decimal] = Field(default_factory=list)
    credit_thresholds: list[Decimal] = Field(default_factory=list)
    expiry_notice_days: int | None = Field(None, ge=1, le=366, strict=True)

    @field_validator("pool_thresholds", mode="before")
    @classmethod
    def _pool(cls, value: object) -> list[Decimal]:
        return _threshold_list(value, "pool_thresholds")

    @field_validator("credit_thresholds", mode="before")
    @classmethod
    def _credit(cls, value: object) -> list[Decimal]:
        return _threshold_list(value, "credit_thresholds")

    @property
    def any(self) -> bool:
        return bool(self.pool_thresholds or self.credit_thresholds or self.expiry_notice_days)
