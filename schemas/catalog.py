"""The catalog (``config/catalog.toml``): models, effective-dated prices, plans and their quota pools.

Loading validates everything that later stages rely on and reports the first problem as one line
naming the file and the entry: an unknown model in a price, a duplicate price, a pool with a
non-positive allowance, a successor that does not exist, and so on.
"""

from __future__ import annotations

import datetime as dt
import itertools
import tomllib
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from schemas.events import SPEED_TIERS
from schemas.limits import MAX_ALLOWANCE_TOKENS, catalog_id_problem, date_problem

TOKEN_KINDS: tuple[str, ...] = ("input", "cached_input", "output")
PERIODS: tuple[str, ...] = ("day", "week", "month")

Money = Annotated[Decimal, Field(ge=0, max_digits=18, decimal_places=6)]


class CatalogError(ValueError):
    """The catalog file is missing or invalid; the message is one line for the user."""


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


class Model(_Strict):
    id: str = Field(min_length=1)
    launched: dt.date
    retires: dt.date | None = None
    successor: str | None = None

    @model_validator(mode="after")
    def _retires_after_launch(self) -> Model:
        if self.retires is not None and self.retires <= self.launched:
            raise ValueError(
                f"model {self.id!r} retires ({self.retires}) before it launched ({self.launched})"
            )
        return self


class Price(_Strict):
    """USD (or the catalog currency) per 1M tokens, by token kind."""

    model: str
    tier: Literal[SPEED_TIERS]  # type: ignore[valid-type]  # the tiers of the event schema, one list
    effective_from: dt.date
    input: Money
    cached_input: Money
    output: Money

    @field_validator("input", "cached_input", "output", mode="before")
    @classmethod
    def _no_float(cls, value: object) -> object:
        if isinstance(value, float):
            raise ValueError('prices are strings like "1.25", not floats (floats are not exact)')
        return value

    def per_million(self, kind: str) -> Decimal:
        return getattr(self, kind)


class Pool(_Strict):
    id: str = Field(min_length=1)
    models: list[str] = Field(min_length=1)
    exclude_models: list[str] = Field(default_factory=list)
    allowance_tokens: int
    period: Literal["day", "week", "month"]
    priority: int = Field(1, ge=-(10**6), le=10**6)

    @field_validator("allowance_tokens")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError(f"allowance_tokens must be positive, got {value}")
        if value > MAX_ALLOWANCE_TOKENS:
            raise ValueError(
                f"allowance_tokens must be at most {MAX_ALLOWANCE_TOKENS:_} per period, got {value}"
            )
        return value

    def covers(self, model: str) -> bool:
        return ("*" in self.models or model in self.models) and model not in self.exclude_models


class PlanFee(_Strict):
    """A plan's monthly fee from an account-local date on (``[[plans.fees]]``): billed history is
    never re-priced, so a fee changes by a new row, not by editing ``monthly_fee``."""

    effective_from: dt.date
    monthly_fee: Money

    @field_validator("monthly_fee", mode="before")
    @classmethod
    def _no_float(cls, value: object) -> object:
        return Price._no_float(value)


class Plan(_Strict):
    id: str = Field(min_length=1)
    monthly_fee: Money  # the fee from the start; later ones are ``fees`` rows
    pools: list[Pool] = Field(default_factory=list)
    fees: list[PlanFee] = Field(default_factory=list)

    @field_validator("monthly_fee", mode="before")
    @classmethod
    def _no_float(cls, value: object) -> object:
        return Price._no_float(value)

    @model_validator(mode="after")
    def _fees_in_order(self) -> Plan:
        days = [f.effective_from for f in self.fees]
        for a, b in itertools.pairwise(days):
            if b <= a:
                raise ValueError(
                    f"plan {self.id!r}: fees must be listed by effective_from, each later than the one "
                    f"before ({b} follows {a})"
                )
        return self

    def fee_pieces(
        self, start: dt.date, until: dt.date
    ) -> list[tuple[dt.date, dt.date, Decimal, dt.date | None]]:
        """``start .. until`` (local days, inclusive) split where the fee changes: (first day, last
        day, monthly fee, the fee row's effective_from or None for ``monthly_fee``)."""
        out: list[tuple[dt.date, dt.date, Decimal, dt.date | None]] = []
        fee, since = self.monthly_fee, None
        day = start
        for row in self.fees:
            if row.effective_from <= day:
                fee, since = row.monthly_fee, row.effective_from
                continue
            if row.effective_from > until:
                break
            out.append((day, row.effective_from - dt.timedelta(days=1), fee, since))
            day, fee, since = row.effective_from, row.monthly_fee, row.effective_from
        out.append((day, until, fee, since))
        return out

    @model_validator(mode="after")
    def _unique_pools(self) -> Plan:
        ids = [p.id for p in self.pools]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"plan {self.id!r} has pool {dupes[0]!r} twice")
        return self

    def pools_in_draw_order(self) -> list[Pool]:
        """Ascending priority; equal priorities keep the order the plan lists them (stable sort)."""
        return sorted(self.pools, key=lambda p: p.priority)


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
        return Price._no_float(value)

    @property
    def costed(self) -> bool:
        """Whether rework is costed at all (absent: it counts 0, and reports say so)."""
        return self.rework_cost_per_hour is not None

    @property
    def per_hour(self) -> Decimal:
        return self.rework_cost_per_hour if self.rework_cost_per_hour is not None else Decimal("0")


class Catalog(_Strict):
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    models: list[Model] = Field(min_length=1)
    prices: list[Price] = Field(default_factory=list)
    plans: list[Plan] = Field(default_factory=list)
    adoption: AdoptionConfig = Field(default_factory=AdoptionConfig)
    invoicing: InvoicingConfig = Field(default_factory=InvoicingConfig)
    effectiveness: EffectivenessConfig = Field(default_factory=EffectivenessConfig)
    seller: Seller = Field(default_factory=lambda: Seller(name="usage-billing"))
    payment_terms_days: int = Field(
        30, ge=0, le=365, strict=True, description="days from a document's issue date to its due date"
    )

    @model_validator(mode="after")
    def _references(self) -> Catalog:
        model_ids = [m.id for m in self.models]
        known = set(model_ids)
        for mid in model_ids:
            if model_ids.count(mid) > 1:
                raise ValueError(f"model {mid!r} is listed twice")
        for m in self.models:
            if m.successor is not None and m.successor not in known:
                raise ValueError(f"model {m.id!r}: successor {m.successor!r} is not a model in the catalog")
            if m.successor == m.id:
                raise ValueError(f"model {m.id!r} is its own successor")
        seen: set[tuple[str, str, dt.date]] = set()
        for p in self.prices:
            if p.model not in known:
                raise ValueError(f"price for unknown model {p.model!r} (tier {p.tier})")
            key = (p.model, p.tier, p.effective_from)
            if key in seen:
                raise ValueError(f"duplicate price for {p.model} / {p.tier} effective {p.effective_from}")
            seen.add(key)
        plan_ids = [p.id for p in self.plans]
        for plan in self.plans:
            if plan_ids.count(plan.id) > 1:
                raise ValueError(f"plan {plan.id!r} is listed twice")
            for pool in plan.pools:
                for mid in [*pool.models, *pool.exclude_models]:
                    if mid != "*" and mid not in known:
                        raise ValueError(f"plan {plan.id!r} pool {pool.id!r}: unknown model {mid!r}")
        return self

    # -- lookups -------------------------------------------------------------------------------

    @property
    def model_ids(self) -> list[str]:
        return [m.id for m in self.models]

    def model(self, model_id: str) -> Model:
        for m in self.models:
            if m.id == model_id:
                return m
        raise KeyError(model_id)

    def plan(self, plan_id: str) -> Plan:
        for p in self.plans:
            if p.id == plan_id:
                return p
        raise KeyError(plan_id)


def _location(loc: tuple[object, ...], data: dict) -> str:
    """('prices', 3, 'input') -> 'prices[3] (gpt-5.6-sol/ultrafast).input'."""
    parts: list[str] = []
    node: object = data
    for item in loc:
        if isinstance(item, int):
            parts[-1] = f"{parts[-1]}[{item}]"
            node = node[item] if isinstance(node, list) and item < len(node) else None
            if isinstance(node, dict):
                label = node.get("id") or "/".join(str(node[k]) for k in ("model", "tier") if k in node)
                if label:
                    parts[-1] += f" ({str(label).encode('unicode_escape').decode()})"
        else:
            parts.append(str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return ".".join(parts)


def parse_catalog(data: dict, source: str = "catalog") -> Catalog:
    try:
        return Catalog.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = _location(tuple(err["loc"]), data)
        msg = err["msg"].removeprefix("Value error, ")
        raise CatalogError(f"{source}: {where + ': ' if where else ''}{msg}") from None


def load_catalog(path: str | Path) -> Catalog:
    path = Path(path)
    if not path.is_file():
        raise CatalogError(f"catalog file not found: {path}")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{path}: not valid TOML: {exc}") from None
    return parse_catalog(data, str(path))
