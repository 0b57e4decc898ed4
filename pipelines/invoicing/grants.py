"""Credit grants in: the credits CSV and ``credits grant``, checked and loaded
(``pipelines.invoicing.credits`` applies, voids and shows them).

A credits CSV has the columns ``grant_id,account_id,amount,kind,effective_from,expires,priority,
models,reason``. A load is one transaction: every row is checked first and the first bad row refuses
the whole file with one line naming the row and the field; a row whose ``grant_id`` is loaded already
changes nothing when it is identical and refuses the file when it differs (a grant never changes: it
ends with ``credits void``, a new fact, and a new grant is a new id).
"""

from __future__ import annotations

import csv
import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from sqlalchemy import Connection, Engine, func, select

from billing.credits import KINDS
from pipelines.errors import UsageBillingError
from pipelines.runtime.dates import parse_date
from pipelines.warehouse.accounts import checked_header, records
from pipelines.warehouse.engine import as_date
from pipelines.warehouse.locks import step_lock
from schemas.catalog import Catalog
from schemas.limits import MAX_ID_LENGTH, id_problem
from schemas.warehouse import Account, CreditGrant

COLUMNS = (
    "grant_id",
    "account_id",
    "amount",
    "kind",
    "effective_from",
    "expires",
    "priority",
    "models",
    "reason",
)
CREDITS_LOCK = "credits"
AMOUNT_TEXT = re.compile(r"\d{1,15}(\.\d{1,2})?")
PRIORITY_TEXT = re.compile(r"[+-]?\d{1,7}")
MAX_PRIORITY = 10**6
MAX_REASON = 1000


@dataclass(frozen=True)
class Grant:
    grant_id: str
    account_id: str
    amount: Decimal
    kind: str
    effective_from: dt.date
    expires: dt.date | None
    priority: int
    models: str | None  # ';'-separated, as loaded; None = every charge
    reason: str

    def values(self) -> dict[str, object]:
        return {c: getattr(self, c) for c in COLUMNS}


def _date(value: str, where: str, field: str) -> dt.date:
    try:
        return parse_date(value, field)
    except UsageBillingError as exc:
        raise UsageBillingError(f"{where}, {field}: {exc}") from None


def check_grant(raw: Mapping[str, str | None], where: str, catalog: Catalog, known: set[str]) -> Grant:
    """One grant's fields as text -> a Grant, or one line naming ``where`` and the field at fault."""

    def field(name: str) -> str:
        return (raw.get(name) or "").strip()

    grant_id = raw.get("grant_id") or ""
    problem = id_problem(grant_id) or (
        f"is {len(grant_id):,} characters; at most {MAX_ID_LENGTH} are allowed"
        if len(grant_id) > MAX_ID_LENGTH
        else None
    )
    if problem is None and grant_id != grant_id.strip():
        problem = "has white space around it"
    if problem:
        raise UsageBillingError(f"{where}, grant_id: {problem}")
    account = raw.get("account_id") or ""
    if account not in known:
        shown = repr(account) if len(account) <= MAX_ID_LENGTH else "(too long)"
        raise UsageBillingError(
            f"{where}, account_id: {shown} is not an account the accounts table holds "
            "(load it with `usage-billing accounts load` first)"
        )
    amount_text = field("amount")
    if not AMOUNT_TEXT.fullmatch(amount_text):
        raise UsageBillingError(
            f"{where}, amount: {amount_text!r} is not an amount in {catalog.currency} with at most 2 "
            "decimals (like 250.00)"
        )
    amount = Decimal(amount_text)  # the pattern admits only decimals
    if amount <= 0:
        raise UsageBillingError(f"{where}, amount: {amount_text} must be more than 0")
    kind = field("kind")
    if kind not in KINDS:
        raise UsageBillingError(f"{where}, kind: {kind!r} is not one of {' | '.join(KINDS)}")
    since = _date(field("effective_from"), where, "effective_from")
    expires = _date(field("expires"), where, "expires") if field("expires") else None
    if expires is not None and expires <= since:
        raise UsageBillingError(
            f"{where}, expires: {expires} must be after effective_from {since} (expires is exclusive)"
        )
    priority_text = field("priority") or "0"
    if not PRIORITY_TEXT.fullmatch(priority_text) or abs(int(priority_text)) > MAX_PRIORITY:
        raise UsageBillingError(
            f"{where}, priority: {priority_text!r} is not an integer between -{MAX_PRIORITY:,} and "
            f"{MAX_PRIORITY:,}"
        )
    models_text = field("models")
    models = None
    if models_text:
        ids = [m.strip() for m in models_text.split(";")]
        catalog_models = {m.id for m in catalog.models}
        for m in ids:
            if m not in catalog_models:
                raise UsageBillingError(
                    f"{where}, models: {m!r} is not a model of the catalog (separate model ids with ';')"
                )
        models = ";".join(sorted(set(ids)))
    reason = field("reason")
    if len(reason) > MAX_REASON or any(ord(c) < 32 for c in reason):
        raise UsageBillingError(f"{where}, reason: at most {MAX_REASON} characters on one line")
    return Grant(grant_id, account, amount, kind, since, expires, int(priority_text), models, reason)


def parse_grants(path: Path, catalog: Catalog, known: set[str]) -> list[Grant]:
    """Every row of a credits CSV, checked; the first problem is one line naming the row and field."""
    if not path.is_file():
        raise UsageBillingError(f"credits file not found: {path}")
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle, strict=True)
            extra = [c for c in checked_header(reader, path, COLUMNS) if c not in COLUMNS]
            if extra:
                raise UsageBillingError(f"{path}: unknown column {extra[0]!r}; expected {','.join(COLUMNS)}")
            grants: list[Grant] = []
            seen: dict[str, int] = {}
            for n, (line, rec) in enumerate(records(reader, path), start=1):
                where = f"{path} row {n} (line {line})"
                if None in rec:
                    raise UsageBillingError(f"{where}: more fields than the header has columns")
                grant = check_grant(rec, where, catalog, known)
                if grant.grant_id in seen:
                    raise UsageBillingError(
                        f"{where}, grant_id: {grant.grant_id!r} is on row {seen[grant.grant_id]} too"
                    )
                seen[grant.grant_id] = n
                grants.append(grant)
    except UnicodeDecodeError as exc:
        raise UsageBillingError(f"{path}: not UTF-8 text (byte {exc.start} of a line)") from None
    return grants


def known_accounts(conn: Connection) -> set[str]:
    a = Account.__table__.c
    return set(conn.execute(select(a.account_id).distinct()).scalars())


def _stored(conn: Connection, ids: list[str]) -> dict[str, Grant]:
    g = CreditGrant.__table__.c
    out: dict[str, Grant] = {}
    for i in range(0, len(ids), 500):
        for r in conn.execute(select(*(g[c] for c in COLUMNS)).where(g.grant_id.in_(ids[i : i + 500]))):
            out[r.grant_id] = grant_of(r)
    return out


def money_of(value: object) -> Decimal:
    """A sum of money as the database returns it, in cents (SQLite sums NUMERIC as floating point)."""
    return Decimal(str(value)).quantize(Decimal("0.01"))


@dataclass(frozen=True)
class LoadResult:
    loaded: int
    unchanged: int


def _insert(
    conn: Connection, grants: list[Grant], catalog: Catalog, source: str, where: list[str]
) -> LoadResult:
    stored = _stored(conn, [g.grant_id for g in grants])
    fresh = []
    for grant, at in zip(grants, where, strict=True):
        before = stored.get(grant.grant_id)
        if before is None:
            fresh.append(grant)
            continue
        changed = [c for c in COLUMNS if getattr(before, c) != getattr(grant, c)]
        if changed:
            c = changed[0]
            raise UsageBillingError(
                f"{at}, {c}: grant {grant.grant_id!r} is loaded already with {c} {getattr(before, c)!s} "
                f"(this row says {getattr(grant, c)!s}); a grant never changes: void it "
                "(`usage-billing credits void`) and load a new grant id"
            )
    now = dt.datetime.now(dt.UTC)
    if fresh:
        conn.execute(
            CreditGrant.__table__.insert(),
            [{**g.values(), "currency": catalog.currency, "loaded_at": now, "source": source} for g in fresh],
        )
    return LoadResult(len(fresh), len(grants) - len(fresh))


def load(engine: Engine, path: Path, catalog: Catalog) -> LoadResult:
    """Load a credits CSV: all of it in one transaction, or nothing."""
    with step_lock(engine, CREDITS_LOCK) as fence, engine.begin() as conn:
        grants = parse_grants(path, catalog, known_accounts(conn))
        where = [f"{path} row {n}" for n in range(1, len(grants) + 1)]
        result = _insert(conn, grants, catalog, str(path)[:MAX_REASON], where)
        fence.check(conn)
    return result


def grant(engine: Engine, catalog: Catalog, fields: Mapping[str, str | None]) -> LoadResult:
    """Add one grant (``credits grant``) by the rules of a file's row."""
    with step_lock(engine, CREDITS_LOCK) as fence, engine.begin() as conn:
        g = check_grant(fields, "credits grant", catalog, known_accounts(conn))
        result = _insert(conn, [g], catalog, "credits grant", ["credits grant"])
        fence.check(conn)
    return result


def grant_of(r) -> Grant:
    return Grant(
        r.grant_id, r.account_id, money_of(r.amount), r.kind,
        as_date(r.effective_from), as_date(r.expires) if r.expires is not None else None,
        int(r.priority), r.models, r.reason,
    )  # fmt: skip


def count(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(CreditGrant.__table__)).scalar_one()
