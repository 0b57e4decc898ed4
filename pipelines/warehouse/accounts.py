"""Accounts CSV (``account_id,plan,timezone,active_from,active_until``) -> the ``accounts`` table.

Plan empty = pay as you go; timezone an IANA name (empty = UTC); dates inclusive, active_until empty
= open. An account may have several rows (plan changes) whose date ranges must not overlap. A load
replaces every row of the accounts it names, so reloading the same file changes nothing.

Optional columns for the customer documents: ``name``, ``email`` and ``billing_address`` (quoted, it
may span lines). A document prints the values of the row in force on the last day of its month.
"""

from __future__ import annotations

import csv
import datetime as dt
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from sqlalchemy import Engine, delete, insert, select

from billing.calendar import zone_problem
from pipelines.errors import UsageBillingError
from pipelines.warehouse.engine import read_arrow
from pipelines.warehouse.locks import step_lock
from pipelines.warehouse.remeter import account_rows, queue_account_changes
from schemas.catalog import Catalog
from schemas.limits import MAX_ID_LENGTH, account_id_problem, date_problem
from schemas.warehouse import Account

ACCOUNTS_LOCK = "accounts load"  # the step lock of a load (metering reads the accounts under it too)
COLUMNS = ("account_id", "plan", "timezone", "active_from", "active_until")
# Optional: who the customer documents are addressed to (column -> longest value allowed).
CONTACT_COLUMNS = {"name": 200, "email": 254, "billing_address": 1000}
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s.]+")


@dataclass(frozen=True)
class AccountRow:
    account_id: str
    plan: str | None
    timezone: str
    active_from: dt.date
    active_until: dt.date | None
    name: str | None = None
    email: str | None = None
    billing_address: str | None = None


def _date(value: str, where: str, column: str) -> dt.date:
    try:
        day = dt.date.fromisoformat(value)
    except ValueError:
        raise UsageBillingError(f"{where}: {column} {value!r} is not a date (YYYY-MM-DD)") from None
    problem = date_problem(day)
    if problem:
        raise UsageBillingError(f"{where}: {column} {day} {problem}")
    return day


def _contact(value: str | None, where: str, column: str) -> str | None:
    """An optional contact field: empty = none; bounded, printable; an email must look like one."""
    value = (value or "").strip()
    if not value:
        return None
    limit = CONTACT_COLUMNS[column]
    if len(value) > limit:
        raise UsageBillingError(
            f"{where}: {column} is {len(value):,} characters; at most {limit:,} are allowed"
        )
    allowed = "\n\r\t" if column == "billing_address" else ""
    if any(ord(c) < 32 and c not in allowed for c in value) or "\x7f" in value:
        raise UsageBillingError(f"{where}: {column} holds a control character")
    if column == "email" and not EMAIL.fullmatch(value):
        raise UsageBillingError(f"{where}: email {value!r} is not an email address (name@example.com)")
    return value.replace("\r\n", "\n")


def parse_accounts(path: Path, catalog: Catalog) -> list[AccountRow]:
    """Every row of the file, checked; the first problem is one line naming the file and line."""
    if not path.is_file():
        raise UsageBillingError(f"accounts file not found: {path}")
    try:
        return _parse(path, catalog)
    except UnicodeDecodeError as exc:
        raise UsageBillingError(f"{path}: not UTF-8 text (byte {exc.start} of a line)") from None
    except csv.Error as exc:
        raise UsageBillingError(f"{path}: not a readable CSV file: {exc}") from None


def _parse(path: Path, catalog: Catalog) -> list[AccountRow]:
    plans = {p.id for p in catalog.plans}
    zones: dict[str, str | None] = {}  # zone -> why it cannot be used (None: it can)
    rows: list[AccountRow] = []
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle, strict=True)
        checked_header(reader, path, COLUMNS)
        for start, rec in records(reader, path):
            where = f"{path} line {start}"
            if None in rec:
                raise UsageBillingError(f"{where}: more fields than the header has columns")
            account = rec["account_id"] or ""  # as ingest reads it: a look-alike is refused, not trimmed
            problem = account_id_problem(account)
            if problem:
                shown = f" {account!r}" if account.strip() and len(account) <= MAX_ID_LENGTH else ""
                raise UsageBillingError(f"{where}: account_id{shown} {problem}")
            plan = (rec["plan"] or "") or None
            if plan is not None and plan not in plans:
                raise UsageBillingError(
                    f"{where}: unknown plan {plan!r} (catalog plans: {', '.join(sorted(plans))})"
                )
            tz = (rec["timezone"] or "").strip() or "UTC"
            if tz not in zones:
                zones[tz] = zone_problem(tz)
            if zones[tz]:
                raise UsageBillingError(
                    f"{where}: unknown timezone {tz!r}: it {zones[tz]} (use an IANA name like Europe/Berlin)"
                )
            active_from = _date((rec["active_from"] or "").strip(), where, "active_from")
            until_text = (rec["active_until"] or "").strip()
            until = _date(until_text, where, "active_until") if until_text else None
            if until is not None and until < active_from:
                raise UsageBillingError(f"{where}: active_until {until} is before active_from {active_from}")
            contact = {c: _contact(rec.get(c), where, c) for c in CONTACT_COLUMNS}
            rows.append(AccountRow(account, plan, tz, active_from, until, **contact))
    _check_overlaps(rows, path)
    return rows


def checked_header(reader: csv.DictReader, path: Path, required: tuple[str, ...]) -> list[str]:
    """The CSV's header, trimmed, set on ``reader``: refused (one line) when a ``required`` column is
    missing or a column appears twice (a DictReader would keep the last one's values silently)."""
    header = [(name or "").strip() for name in (reader.fieldnames or [])]
    missing = [c for c in required if c not in header]
    if missing:
        raise UsageBillingError(
            f"{path}: missing column(s) {', '.join(missing)}; expected {','.join(required)}"
        )
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise UsageBillingError(f"{path}: column {twice[0]!r} appears more than once in the header")
    reader.fieldnames = header
    return header


def records(reader: csv.DictReader, path: Path) -> Iterator[tuple[int, dict]]:
    """Each record with the line it starts on. Parsed strictly: a quote that is never closed (which
    would swallow every later row into one field) or text after a closing quote refuses the file,
    naming the line where that record began."""
    while True:
        start = reader.line_num + 1
        try:
            rec = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise UsageBillingError(
                f"{path} line {start}: not valid CSV ({exc}): is a quote opened there and never closed?"
            ) from None
        yield start, rec


def _check_overlaps(rows: list[AccountRow], path: Path) -> None:
    by_account: dict[str, list[AccountRow]] = {}
    for r in rows:
        by_account.setdefault(r.account_id, []).append(r)
    for account, periods in by_account.items():
        periods.sort(key=lambda r: r.active_from)
        for a, b in itertools.pairwise(periods):
            if a.active_until is None or a.active_until >= b.active_from:
                raise UsageBillingError(
                    f"{path}: account {account} has overlapping rows "
                    f"starting {a.active_from} and {b.active_from}"
                )
        zones = {p.timezone for p in periods}
        if len(zones) > 1:
            raise UsageBillingError(
                f"{path}: account {account} has several timezones ({', '.join(sorted(zones))})"
            )


def load_accounts(engine: Engine, path: Path, catalog: Catalog) -> int:
    rows = parse_accounts(path, catalog)
    ids = sorted({r.account_id for r in rows})
    table = Account.__table__
    with step_lock(engine, ACCOUNTS_LOCK) as fence, engine.begin() as conn:
        before = account_rows(conn, ids)
        for i in range(0, len(ids), 500):
            conn.execute(delete(table).where(table.c.account_id.in_(ids[i : i + 500])))
        if rows:
            conn.execute(insert(table), [r.__dict__ for r in rows])
        # Metered days whose plan in force or timezone this load changed: metered again before a draft.
        queue_account_changes(conn, before, rows, dt.datetime.now(dt.UTC))
        fence.check(conn)
    return len(rows)


ACCOUNT_SCHEMA = pa.schema(
    [
        ("account_id", pa.string()),
        ("active_from", pa.date32()),
        ("active_until", pa.date32()),
        ("plan", pa.string()),
        ("timezone", pa.string()),
    ]
)


def load_accounts_table(engine) -> pa.Table:
    """What metering and the reports need of every account period (``ACCOUNT_SCHEMA``), straight from
    the driver's rows: a hundred thousand accounts as SQLAlchemy rows made into dictionaries took half
    a second of every metering run."""
    t = Account.__table__
    with engine.connect() as conn:
        return read_arrow(conn, select(*(t.c[name] for name in ACCOUNT_SCHEMA.names)), ACCOUNT_SCHEMA)
