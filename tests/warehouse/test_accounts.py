from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select

from pipelines.errors import UsageBillingError
from pipelines.warehouse.accounts import load_accounts, parse_accounts
from pipelines.warehouse.engine import make_engine, upgrade
from schemas.warehouse import Account

HEADER = "account_id,plan,timezone,active_from,active_until\n"


def _csv(tmp_path, body: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "accounts.csv"
    path.write_text(HEADER + body)
    return path


def test_plan_changes_and_defaults(tmp_path, catalog):
    rows = parse_accounts(
        _csv(
            tmp_path,
            "a,plus,Pacific/Honolulu,2026-02-01,2026-03-14\n"
            "a,pro,Pacific/Honolulu,2026-03-15,\nb,,,2026-02-01,\n",
        ),
        catalog,
    )
    assert [(r.account_id, r.plan, r.active_until) for r in rows] == [
        ("a", "plus", dt.date(2026, 3, 14)),
        ("a", "pro", None),
        ("b", None, None),
    ]
    assert rows[2].timezone == "UTC"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("a,gold,UTC,2026-02-01,\n", "line 2: unknown plan 'gold'"),
        ("a,pro,Mars/Olympus,2026-02-01,\n", "line 2: unknown timezone 'Mars/Olympus'"),
        ("a,pro,UTC,01/02/2026,\n", "line 2: active_from '01/02/2026' is not a date"),
        ("a,pro,UTC,2026-02-05,2026-02-01\n", "active_until 2026-02-01 is before active_from"),
        ("a,pro,UTC,2026-02-01,\na,plus,UTC,2026-03-01,\n", "account a has overlapping rows"),
        (",pro,UTC,2026-02-01,\n", "line 2: account_id is empty"),
        # accepted by zoneinfo, unknown to the tz database metering uses
        ("a,pro,posix/Europe/Berlin,2026-02-01,\n", "line 2: unknown timezone 'posix/Europe/Berlin'"),
        ("a,pro,right/UTC,2026-02-01,\n", "line 2: unknown timezone 'right/UTC'"),
        # a quote never closed would swallow every later row into one field
        ('a,pro,UTC,2026-02-01,\nb,pro,UTC,"2026-02-01,\nc,pro,UTC,2026-02-01,\n', "line 3: not valid CSV"),
        ('a,pro,UTC,"2026-02-01"x,\n', "line 2: not valid CSV"),
    ],
)
def test_bad_rows_name_the_line(tmp_path, catalog, body, message):
    with pytest.raises(UsageBillingError, match=message):
        parse_accounts(_csv(tmp_path, body), catalog)


def test_missing_columns(tmp_path, catalog):
    path = tmp_path / "a.csv"
    path.write_text("account_id,plan\na,pro\n")
    with pytest.raises(UsageBillingError, match="missing column"):
        parse_accounts(path, catalog)


def test_reload_replaces_rows_of_named_accounts(tmp_path, catalog):
    engine = make_engine(f"sqlite:///{tmp_path / 'w.db'}")
    upgrade(engine)
    load_accounts(engine, _csv(tmp_path, "a,plus,UTC,2026-02-01,\nb,pro,UTC,2026-02-01,\n"), catalog)
    load_accounts(
        engine, _csv(tmp_path, "a,plus,UTC,2026-02-01,2026-02-28\na,pro,UTC,2026-03-01,\n"), catalog
    )
    load_accounts(
        engine, _csv(tmp_path, "a,plus,UTC,2026-02-01,2026-02-28\na,pro,UTC,2026-03-01,\n"), catalog
    )
    with engine.connect() as conn:
        rows = conn.execute(
            select(Account.account_id, Account.plan).order_by(Account.account_id, Account.active_from)
        ).all()
    assert [tuple(r) for r in rows] == [("a", "plus"), ("a", "pro"), ("b", "pro")]


CONTACT_HEADER = "account_id,plan,timezone,active_from,active_until,name,email,billing_address\n"


def test_contact_columns_are_optional_and_kept(tmp_path, catalog):
    path = tmp_path / "contacts.csv"
    path.write_text(
        CONTACT_HEADER + 'a,pro,UTC,2026-02-01,,Zoë & Co,ap@zoe.example,"1 Rue Haute\r\n75001 Paris"\n'
        "b,,UTC,2026-02-01,,,,\n",
        encoding="utf-8",
    )
    engine = make_engine(f"sqlite:///{tmp_path / 'w.db'}")
    upgrade(engine)
    load_accounts(engine, path, catalog)
    with engine.connect() as conn:
        rows = conn.execute(
            select(Account.account_id, Account.name, Account.email, Account.billing_address).order_by(
                Account.account_id
            )
        ).all()
    assert [tuple(r) for r in rows] == [
        ("a", "Zoë & Co", "ap@zoe.example", "1 Rue Haute\n75001 Paris"),
        ("b", None, None, None),
    ]
    # a file without them (the old format) loads as before
    assert parse_accounts(_csv(tmp_path, "c,pro,UTC,2026-02-01,\n"), catalog)[0].name is None


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("a,pro,UTC,2026-02-01,,x,not-an-email,\n", "line 2: email 'not-an-email' is not an email address"),
        ("a,pro,UTC,2026-02-01,,x,a@b,\n", "line 2: email 'a@b' is not an email address"),
        ("a,pro,UTC,2026-02-01,,bad\x07name,,\n", "line 2: name holds a control character"),
        ("a,pro,UTC,2026-02-01,," + "n" * 201 + ",,\n", "line 2: name is 201 characters; at most 200"),
        ('a,pro,UTC,2026-02-01,,x,,"' + "a" * 1001 + '"\n', "billing_address is 1,001 characters"),
        ('a,pro,UTC,2026-02-01,,x,,"street\x1b[31m"\n', "billing_address holds a control character"),
    ],
)
def test_bad_contact_fields_name_the_line(tmp_path, catalog, row, message):
    path = tmp_path / "contacts.csv"
    path.write_text(CONTACT_HEADER + row, encoding="utf-8")
    with pytest.raises(UsageBillingError, match=message):
        parse_accounts(path, catalog)
