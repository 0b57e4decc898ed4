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
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from schemas import tokens
from schemas.catalog_sections import (
    AdoptionConfig,
    EffectivenessConfig,
    InvoicingConfig,
    NotificationsConfig,
    Seller,
    _no_float,
    _Strict,
)
from schemas.limits import MAX_ALLOWANCE_TOKENS

# The speed tiers of a catalog without ``[[tiers]]``, slowest first: (id, label).
DEFAULT_TIERS: tuple[tuple[str, str], ...] = (
    ("standard", "Standard"),
    ("priority", "Priority"),
    ("ultrafast", "Ultrafast"),
)
PERIODS: tuple[str, ...] = ("day", "week", "month")

Money = Annotated[Decimal, Field(ge=0, max_digits=18, decimal_places=6)]


class CatalogError(ValueError):
    """The catalog file is missing or invalid; the message is one line for the user."""


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


class Tier(_Strict):
    """A speed tier (``[[tiers]]``, listed slowest first): events name it, prices price it, documents
    and reports print its label."""

    id: str = Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")
    label: str = Field(min_length=1, max_length=64)

    @field_validator("label")
    @classmethod
    def _printable(cls, value: str) -> str:
        """Printed in tables, Markdown and terminals: no control character and none of | [ ] < > `."""
        value = value.strip()
        bad = sorted({c for c in value if ord(c) < 32 or c in "|[]<>`"})
        if bad or not value:
            raise ValueError(f"label {value!r} is empty or holds {', '.join(map(repr, bad))}")
        return value


class Price(_Strict):
    """The catalog currency per 1M tokens of each token kind (``schemas.tokens``): a ``[[prices]]`` row
    has one field per kind (``input = "1.25"``), gathered into ``rates``; a kind added to the registry
    is a required field of every row."""

    model: str
    tier: str
    effective_from: dt.date
    rates: dict[str, Money]

    @model_validator(mode="before")
    @classmethod
    def _kinds(cls, data: object) -> object:
        if not isinstance(data, dict) or "rates" in data:
            return data
        data = dict(data)
        rates = {}
        for kind in tokens.ids():
            if kind not in data:
                raise ValueError(f"no price for token kind {kind!r} (every row prices every kind)")
            rates[kind] = _no_float(data.pop(kind))
        return {**data, "rates": rates}

    def per_million(self, kind: str) -> Decimal:
        return self.rates[kind]


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
        return _no_float(value)


class Plan(_Strict):
    id: str = Field(min_length=1)
    monthly_fee: Money  # the fee from the start; later ones are ``fees`` rows
    pools: list[Pool] = Field(default_factory=list)
    fees: list[PlanFee] = Field(default_factory=list)
    # A commitment: the least the month's charges come to (prorated by the plan's days in the month);
    # a shortfall is billed as a ``minimum_true_up`` line. None: no commitment.
    minimum_monthly: Money | None = None

    @field_validator("monthly_fee", "minimum_monthly", mode="before")
    @classmethod
    def _no_float(cls, value: object) -> object:
        return value if value is None else _no_float(value)

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


class Catalog(_Strict):
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    tiers: list[Tier] = Field(
        default_factory=lambda: [Tier(id=i, label=label) for i, label in DEFAULT_TIERS], min_length=1
    )
    models: list[Model] = Field(min_length=1)
    prices: list[Price] = Field(default_factory=list)
    plans: list[Plan] = Field(default_factory=list)
    adoption: AdoptionConfig = Field(default_factory=AdoptionConfig)
    invoicing: InvoicingConfig = Field(default_factory=InvoicingConfig)
    effectiveness: EffectivenessConfig = Field(default_factory=EffectivenessConfig)
    notifications: NotificationsConfig = Field(default_factory=NotificationsConfig)
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
        tier_ids = [t.id for t in self.tiers]
        for tid in tier_ids:
            if tier_ids.count(tid) > 1:
                raise ValueError(f"tier {tid!r} is listed twice")
        seen: set[tuple[str, str, dt.date]] = set()
        for p in self.prices:
            if p.tier not in tier_ids:
                raise ValueError(
                    f"price for {p.model} names tier {p.tier!r}, which [[tiers]] does not list "
                    f"(tiers: {', '.join(tier_ids)})"
                )
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

    @property
    def tier_ids(self) -> tuple[str, ...]:
        """The speed tiers, slowest first."""
        return tuple(t.id for t in self.tiers)

    @property
    def tier_labels(self) -> dict[str, str]:
        return {t.id: t.label for t in self.tiers}

    def tier_label(self, tier_id: str) -> str:
        """What documents and reports print for a tier (an unlisted id prints as itself)."""
        return next((t.label for t in self.tiers if t.id == tier_id), tier_id)

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


def _location(loc: tuple[object, ...], data: dict[str, Any]) -> str:
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
        elif item == "rates" and isinstance(node, dict) and "rates" not in node:
            continue  # a price's kinds are fields of the row as written
        else:
            parts.append(str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return ".".join(parts)


def parse_catalog(data: dict[str, Any], source: str = "catalog") -> Catalog:
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
