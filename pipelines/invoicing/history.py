"""Billed history is immutable: a catalog row that priced a finalized document never changes in place.

When a month is finalized, every ``[[prices]]`` row its overage used and every plan fee its plan
periods paid (``monthly_fee`` or a ``[[plans.fees]]`` row) is recorded in ``billed_catalog_rows``
with its values and the days it priced. From then on ``check`` (run by every draft and finalize)
refuses a catalog in which such a row changed its values, disappeared, or is cut short by a new row
starting on a day it already priced, naming the row and how to make the change instead: a new row
with a later ``effective_from``. So an adjustment is only ever a correction of usage, plans or credits,
never a silent re-pricing. A plan's ``minimum_monthly`` is recorded the same way (kind ``minimum``):
a commitment that billed finalized months changes by moving the accounts to a new plan.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import Connection, func, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from billing.invoices import month_bounds
from billing.pricing import price_in_force
from pipelines.errors import UsageBillingError
from schemas import lines as line_types
from schemas.catalog import Catalog
from schemas.tokens import ids as kind_ids
from schemas.warehouse import BillableUsage, BilledCatalogRow

PRICE, FEE = "price", line_types.PLAN_FEE.id  # the kinds of catalog row that bill
MINIMUM = "minimum"  # a plan's minimum_monthly (its commitment): what its true-ups were measured against


@dataclass(frozen=True)
class Billed:
    """One catalog row as it billed finalized documents."""

    kind: str  # PRICE | FEE
    subject: str  # the model (prices) or the plan (fees)
    tier: str  # the speed tier of a price; "" for a fee
    effective_from: dt.date | None  # None: a plan's ``monthly_fee`` (in force from the start)
    values: dict[str, str]  # token kind -> per 1M, or {"monthly_fee": ...}
    first_day: dt.date  # the days it priced: UTC days (prices), account-local days (fees)
    last_day: dt.date

    @property
    def key(self) -> str:
        since = self.effective_from.isoformat() if self.effective_from else "start"
        return f"{self.kind}:{self.subject}:{self.tier}:{since}"

    def name(self) -> str:
        if self.kind == PRICE:
            return f"[[prices]] {self.subject} / {self.tier} effective {self.effective_from}"
        if self.kind == MINIMUM:
            return f"plan {self.subject!r} minimum_monthly"
        if self.effective_from is None:
            return f"plan {self.subject!r} monthly_fee"
        return f"plan {self.subject!r} [[plans.fees]] effective {self.effective_from}"


def _price_values(price) -> dict[str, str]:
    return {k: str(price.per_million(k)) for k in kind_ids()}


def _same(billed: dict[str, str], now: dict[str, str]) -> bool:
    """The values a row billed with still hold. A token kind added since (it is not in ``billed``)
    priced nothing on those documents: only the kinds that billed are compared."""
    return billed.keys() <= now.keys() and all(Decimal(billed[k]) == Decimal(now[k]) for k in billed)


def _problem(row: Billed, catalog: Catalog) -> str | None:
    """What about ``row`` the catalog no longer says as it billed (None: it still does)."""
    if row.kind == PRICE:
        for day in (row.first_day, row.last_day):
            now = price_in_force(catalog, row.subject, row.tier, day)
            if now is None or now.effective_from != row.effective_from:
                found = f"a row effective {now.effective_from}" if now is not None else "no row"
                return f"on {day}, a day it priced, the catalog now has {found} in force"
        now = price_in_force(catalog, row.subject, row.tier, row.last_day)
        if not _same(row.values, _price_values(now)):
            changed = ", ".join(
                f"{k} {row.values[k]} -> {_price_values(now).get(k, 'absent')}"
                for k in row.values
                if k not in _price_values(now) or Decimal(row.values[k]) != Decimal(_price_values(now)[k])
            )
            return f"its values changed ({changed})"
        return None
    try:
        plan = catalog.plan(row.subject)
    except KeyError:
        return "the plan is gone from the catalog"
    if row.kind == MINIMUM:
        minimum = _minimum_text(plan.minimum_monthly)
        if _minimum_text(row.values["minimum_monthly"]) != minimum:
            return f"its minimum changed ({row.values['minimum_monthly'] or 'none'} -> {minimum or 'none'})"
        return None
    pieces = plan.fee_pieces(row.first_day, row.last_day)
    if len(pieces) != 1 or pieces[0][3] != row.effective_from:
        return f"the catalog now changes the fee on {pieces[1][0] if len(pieces) > 1 else row.first_day}"
    fee = str(pieces[0][2])
    if Decimal(fee) != Decimal(row.values["monthly_fee"]):
        return f"its fee changed ({row.values['monthly_fee']} -> {fee})"
    return None


def _minimum_text(value: object) -> str:
    """A commitment as compared: '' for none, else the normalized decimal."""
    return "" if value in (None, "") else str(Decimal(str(value)).normalize())


def _how(row: Billed) -> str:
    if row.kind == MINIMUM:
        return (
            f"restore it; a commitment that changes is a new plan: add a plan with the new minimum_monthly "
            f"and move the accounts to it (accounts rows) from a day after {row.last_day}"
        )
    if row.kind == PRICE:
        return (
            f"restore it and add a new [[prices]] row for {row.subject} / {row.tier} with an effective_from "
            f"after {row.last_day}"
        )
    return (
        f"restore it and add a [[plans.fees]] row to plan {row.subject!r} with an effective_from after "
        f"{row.last_day}"
    )


def recorded(conn: Connection) -> list[Billed]:
    t = BilledCatalogRow.__table__.c
    return [
        Billed(r.row_kind, r.subject, r.tier, r.effective_from, r.row_values, r.first_day, r.last_day)
        for r in conn.execute(select(BilledCatalogRow.__table__).order_by(t.row_key))
    ]


def check(conn: Connection, catalog: Catalog, what: str) -> None:
    """Refuse (one line) a catalog that re-prices billed history."""
    t = BilledCatalogRow.__table__.c
    for row in recorded(conn):
        problem = _problem(row, catalog)
        if problem:
            first = conn.execute(select(t.first_document).where(t.row_key == row.key)).scalar()
            raise UsageBillingError(
                f"{what}: the catalog's {row.name()} priced finalized documents ({first} and later, "
                f"{row.first_day} .. {row.last_day}) but {problem}: billed history is never re-priced; "
                f"{_how(row)}"
            )


def used_by(conn: Connection, catalog: Catalog, month: str) -> list[Billed]:
    """The catalog rows the month's documents are priced with: the prices of its overage (by the
    effective_from metering applied) and the fees of its plan periods."""
    first, last = month_bounds(month)
    b = BillableUsage.__table__.c
    rows: list[Billed] = []
    priced = conn.execute(
        select(b.model, b.speed_tier, b.price_from, func.min(b.rate_day), func.max(b.rate_day))
        .where(b.local_day.between(first, last), b.overage_tokens > 0, b.price_from.is_not(None))
        .group_by(b.model, b.speed_tier, b.price_from)
    ).all()
    for model, tier, since, lo, hi in priced:
        price = price_in_force(catalog, model, tier, hi)
        if price is None:
            continue  # a draft would have refused: nothing to record
        rows.append(Billed(PRICE, model, tier, since, _price_values(price), lo, hi))
    periods = conn.execute(
        text(
            "SELECT p.plan, p.active_from, p.active_until FROM invoice_plans p "
            "JOIN invoices i ON i.invoice_id = p.invoice_id "
            "WHERE i.period = :m AND i.status = 'draft' AND p.plan IS NOT NULL "
            "GROUP BY p.plan, p.active_from, p.active_until"
        ),
        {"m": month},
    ).all()
    known_plans = {p.id for p in catalog.plans}
    fees: dict[tuple[str, dt.date | None], list] = {}
    for plan_id, start, until in periods:
        try:
            plan = catalog.plan(plan_id)
        except KeyError:
            continue
        start, until = _date(start), _date(until)
        for a, z, fee, since in plan.fee_pieces(start, until):
            seen = fees.setdefault((plan_id, since), [a, z, fee])
            seen[0], seen[1] = min(seen[0], a), max(seen[1], z)
    for (plan_id, since), (a, z, fee) in sorted(fees.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        rows.append(Billed(FEE, plan_id, "", since, {"monthly_fee": str(fee)}, a, z))
    committed: dict[str, list] = {}
    for plan_id, start, until in periods:
        if plan_id in known_plans:
            span = committed.setdefault(plan_id, [_date(start), _date(until)])
            span[0], span[1] = min(span[0], _date(start)), max(span[1], _date(until))
    for plan_id, (a, z) in sorted(committed.items()):
        value = _minimum_text(catalog.plan(plan_id).minimum_monthly)
        rows.append(Billed(MINIMUM, plan_id, "", None, {"minimum_monthly": value}, a, z))
    return rows


def _date(value: object) -> dt.date:
    return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))


def record(conn: Connection, rows: list[Billed], first_document: str | None) -> None:
    """Inside finalize's transaction: remember each row with the days it priced (widened when a later
    month bills it again; the first document that used it is kept)."""
    if not rows:
        return
    table = BilledCatalogRow.__table__
    insert_ = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    now = dt.datetime.now(dt.UTC)
    for row in rows:
        statement = insert_(table).values(
            row_key=row.key,
            row_kind=row.kind,
            subject=row.subject,
            tier=row.tier,
            effective_from=row.effective_from,
            row_values=row.values,
            first_day=row.first_day,
            last_day=row.last_day,
            first_document=first_document,
            recorded_at=now,
        )
        conn.execute(
            statement.on_conflict_do_update(
                index_elements=["row_key"],
                set_={
                    "first_day": func.min(table.c.first_day, statement.excluded.first_day)
                    if conn.dialect.name == "sqlite"
                    else func.least(table.c.first_day, statement.excluded.first_day),
                    "last_day": func.max(table.c.last_day, statement.excluded.last_day)
                    if conn.dialect.name == "sqlite"
                    else func.greatest(table.c.last_day, statement.excluded.last_day),
                },
            )
        )


def check_drafts(conn: Connection, catalog: Catalog, month: str) -> None:
    """Refuse to number drafts priced by another catalog than the one in force now (a price or fee
    edited between draft and finalize): they must be drafted again first."""
    allowed = {
        (r.subject, r.tier, kind, Decimal(value).normalize())
        for r in [*recorded(conn), *used_by(conn, catalog, month)]
        if r.kind == PRICE
        for kind, value in r.values.items()
    }
    lines = conn.execute(
        text(
            "SELECT DISTINCT l.model, l.speed_tier, l.token_kind, l.unit_price FROM invoice_lines l "
            "JOIN invoices i ON i.invoice_id = l.invoice_id WHERE i.period = :m AND i.status = 'draft' "
            f"AND coalesce(l.adjusted_type, l.line_type) = '{line_types.OVERAGE.id}'"
        ),
        {"m": month},
    ).all()
    for model, tier, kind, price in lines:
        if (model, tier, kind, Decimal(str(price)).normalize()) not in allowed:
            raise UsageBillingError(
                f"cannot finalize {month}: its drafts price {model} / {tier} {kind} at {price}, which the "
                f"catalog no longer says; draft it again (`usage-billing invoices draft --month {month}`)"
            )
    periods = conn.execute(
        text(
            "SELECT p.plan, p.active_from, p.active_until, p.monthly_fee, p.minimum_monthly "
            "FROM invoice_plans p "
            "JOIN invoices i ON i.invoice_id = p.invoice_id "
            "WHERE i.period = :m AND i.status = 'draft' AND p.plan IS NOT NULL"
        ),
        {"m": month},
    ).all()
    for plan_id, start, until, fee, minimum in periods:
        try:
            plan = catalog.plan(plan_id)
        except KeyError:
            plan = None
        pieces = plan.fee_pieces(_date(start), _date(until)) if plan else []
        if plan is not None and _minimum_text(minimum) != _minimum_text(plan.minimum_monthly):
            raise UsageBillingError(
                f"cannot finalize {month}: its drafts hold plan {plan_id!r} to a minimum of "
                f"{minimum or 'none'}, which the catalog no longer says; draft it again "
                f"(`usage-billing invoices draft --month {month}`)"
            )
        if len(pieces) != 1 or Decimal(str(pieces[0][2])) != Decimal(str(fee)):
            raise UsageBillingError(
                f"cannot finalize {month}: its drafts bill plan {plan_id!r} at {fee} from {start}, which the "
                f"catalog no longer says; draft it again (`usage-billing invoices draft --month {month}`)"
            )
