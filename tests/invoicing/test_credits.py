"""Prepaid credits and commitments against a reference written from the contract, on SQLite and
PostgreSQL: random grants (both kinds, priorities, model filters, expiry inside and at the month's
edges), month after month, then backdated grants and late usage after finalization, corrected by
adjustments so that original + adjustments = the recomputed truth for every line and every grant.

The warehouse here is built directly (accounts loaded, ``billable_usage`` rows written) and the
month-closing rules are switched off: what is under test is what a draft does with credits, not when
a month closes (tests/invoicing/test_invoicing.py covers that on metered data)."""

from __future__ import annotations

import datetime as dt
import random
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from sqlalchemy import insert, select, text

from billing.invoices import month_bounds, plan_fee_lines, usage_lines
from billing.pricing import price_in_force
from pipelines.errors import UsageBillingError
from pipelines.invoicing import credits
from pipelines.invoicing import documents as invoicing
from pipelines.notify.outbox import CREDIT_CROSSED, CREDIT_EXPIRING, payload
from pipelines.warehouse.accounts import load_accounts
from pipelines.warehouse.engine import make_engine, upgrade
from schemas.warehouse import BillableUsage, Notification
from tests.conftest import CATALOG_PATH
from tests.reference_credits import RefGrant, month_truth

MONTHS = ("2026-01", "2026-02", "2026-03")
HEADER = "grant_id,account_id,amount,kind,effective_from,expires,priority,models,reason\n"
# (account, plan, from, until): a team plan (a commitment) that changes to pro mid-February, pay as
# you go, and the catalog's other plans
ACCOUNTS = [
    ("acct-a", "team", "2026-01-01", "2026-02-14"),
    ("acct-a", "pro", "2026-02-15", ""),
    ("acct-b", "team", "2026-01-10", ""),
    ("acct-c", "", "2026-01-01", ""),
    ("acct-d", "plus", "2026-01-01", ""),
    ("acct-e", "pro", "2026-01-01", ""),
    ("acct-f", "free", "2026-01-01", ""),
    ("acct-g", "team", "2026-01-01", ""),
    ("acct-h", "", "2026-01-01", ""),
]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger(request, tmp_path, catalog, monkeypatch):  # type: ignore[no-untyped-def]
    """An empty warehouse with the accounts loaded, every month treated as closed."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'w.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
        engine = make_engine(url)
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
        engine.dispose()
    engine = make_engine(url)
    upgrade(engine)
    path = tmp_path / "accounts.csv"
    path.write_text(
        "account_id,plan,timezone,active_from,active_until\n"
        + "".join(f"{a},{p},UTC,{f},{u}\n" for a, p, f, u in ACCOUNTS)
    )
    load_accounts(engine, path, catalog)
    for module in (invoicing,):
        monkeypatch.setattr(module, "open_reason", lambda *a, **k: None)
        monkeypatch.setattr(module, "stale_reason", lambda *a, **k: None)
    yield engine
    engine.dispose()


def _usage(catalog, rng: random.Random, months, scale: int = 1) -> list[dict]:  # type: ignore[no-untyped-def]
    """Billable rows: a few priced (model, tier) rows per account and month, some of them overage."""
    accounts = sorted({a for a, *_ in ACCOUNTS})
    rows: dict[tuple, dict] = {}
    for month in months:
        first, last = month_bounds(month)
        for account in accounts:
            for _ in range(rng.randint(0, 4)):
                day = first + dt.timedelta(days=rng.randint(0, (last - first).days))
                sold = [(p.model, p.tier) for p in catalog.prices if p.effective_from <= day]
                model, tier = rng.choice(sorted(set(sold)))
                price = price_in_force(catalog, model, tier, day)
                for kind in ("input", "cached_input", "output"):
                    key = (day, account, model, tier, kind)
                    row = rows.setdefault(
                        key,
                        {
                            "local_day": day,
                            "account_id": account,
                            "model": model,
                            "speed_tier": tier,
                            "token_kind": kind,
                            "rate_day": day,
                            "price_from": price.effective_from,
                            "included_tokens": 0,
                            "overage_tokens": 0,
                        },
                    )
                    row["included_tokens"] += rng.choice([0, 50_000])
                    row["overage_tokens"] += scale * rng.choice([0, 20_000, 3_000_000, 40_000_000])
    return list(rows.values())


def _write_usage(engine, rows: list[dict]) -> None:  # type: ignore[no-untyped-def]
    """Add ``rows`` to billable_usage (a row already there grows: late usage of the same grain)."""
    t = BillableUsage.__table__
    with engine.begin() as conn:
        for r in rows:
            done = conn.execute(
                t.update()
                .where(
                    *(
                        t.c[k] == r[k]
                        for k in ("local_day", "account_id", "model", "speed_tier", "token_kind")
                    )
                )
                .values(
                    included_tokens=t.c.included_tokens + r["included_tokens"],
                    overage_tokens=t.c.overage_tokens + r["overage_tokens"],
                )
            ).rowcount
            if not done:
                conn.execute(insert(t), [r])


def _grants(catalog, rng: random.Random, prefix: str, months) -> list[dict]:  # type: ignore[no-untyped-def]
    """Random grants: both kinds, priorities, model filters; starting and expiring inside months and
    exactly at their edges (an ``expires`` on the 1st ends the month before; on the last day, that month)."""
    models = sorted({p.model for p in catalog.prices})
    accounts = sorted({a for a, *_ in ACCOUNTS})
    out = []
    for i in range(14):
        month = rng.choice(months)
        first, last = month_bounds(month)
        since = rng.choice([first, last, first + dt.timedelta(days=13), first - dt.timedelta(days=1)])
        nxt = last + dt.timedelta(days=1)
        expires = rng.choice(
            [None, None, last, nxt, month_bounds(f"{nxt:%Y-%m}")[1], nxt + dt.timedelta(days=31)]
        )
        if expires is not None and expires <= since:
            expires = None
        out.append(
            {
                "grant_id": f"{prefix}-{i:02d}",
                "account_id": rng.choice(accounts),
                "amount": f"{rng.randint(1, 900)}.{rng.randint(0, 99):02d}",
                "kind": rng.choice(["paid", "promotional"]),
                "effective_from": since.isoformat(),
                "expires": expires.isoformat() if expires else "",
                "priority": str(rng.choice([0, 0, 1, -2])),
                "models": rng.choice(["", "", ";".join(rng.sample(models, 2)), models[0]]),
                "reason": f"grant {i} of {prefix}",
            }
        )
    return out


def _csv(path: Path, grants: list[dict]) -> Path:
    path.write_text(HEADER + "".join(",".join(g[c] for c in credits.COLUMNS) + "\n" for g in grants))
    return path


def _ref_grants(grants: list[dict], voids: dict[str, dt.date]) -> list[RefGrant]:
    return [
        RefGrant(
            g["grant_id"],
            g["account_id"],
            Decimal(g["amount"]),
            g["kind"],
            dt.date.fromisoformat(g["effective_from"]),
            dt.date.fromisoformat(g["expires"]) if g["expires"] else None,
            int(g["priority"]),
            frozenset(g["models"].split(";")) if g["models"] else None,
            voids.get(g["grant_id"]),
        )
        for g in grants
    ]


def _truth(engine, catalog, grants: list[RefGrant], months) -> dict:  # type: ignore[no-untyped-def]
    """(account, month) -> {"true_up": Decimal, "credits": {grant: Decimal}, "total": Decimal}."""
    used: dict[str, Decimal] = {}
    out = {}
    for month in months:
        first, last = month_bounds(month)
        with engine.connect() as conn:
            billable = invoicing.billable_by_price(conn, first, last)
            plans = invoicing._plans(conn, first, last)
        base = pa.concat_tables([plan_fee_lines(plans, catalog, month), usage_lines(billable, catalog)])
        lines: dict[str, list[dict]] = defaultdict(list)
        for r in base.to_pylist():
            lines[r["account_id"]].append(r)
        plan_rows: dict[str, list[dict]] = defaultdict(list)
        for r in plans.to_pylist():
            plan_rows[r["account_id"]].append(r)
        minimums = {p.id: p.minimum_monthly for p in catalog.plans if p.minimum_monthly}
        for account in sorted(lines):
            mine = [g for g in grants if g.account_id == account]
            true_up, covered = month_truth(
                lines[account], plan_rows[account], minimums, mine, used, month, catalog.tier_ids
            )
            charges = sum((r["amount"] for r in lines[account]), Decimal(0)) + true_up
            out[(account, month)] = {
                "true_up": true_up,
                "credits": covered,
                "total": charges - sum(covered.values(), Decimal(0)),
            }
    return out


def _billed(engine) -> dict:  # type: ignore[no-untyped-def]
    """The same from the finalized documents (original + adjustments) through the finance view."""
    out: dict = defaultdict(
        lambda: {"true_up": Decimal(0), "credits": defaultdict(Decimal), "total": Decimal(0)}
    )
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT account_id, period, charge_type, grant_id, amount FROM finance_invoice_lines "
                "WHERE status = 'finalized'"
            )
        ).all()
    for account, month, charge, grant_id, amount in rows:
        amount = Decimal(str(amount)).quantize(Decimal("0.01"))
        got = out[(account, month)]
        got["total"] += amount
        if charge == "minimum_true_up":
            got["true_up"] += amount
        elif charge == "credit":
            got["credits"][grant_id] -= amount
    return {k: {**v, "credits": {g: a for g, a in v["credits"].items() if a}} for k, v in out.items()}


def _close(engine, catalog, month: str) -> None:  # type: ignore[no-untyped-def]
    invoicing.draft(engine, catalog, month)
    invoicing.finalize(engine, catalog, month)


def _finalize_as_told(engine, catalog, months) -> None:  # type: ignore[no-untyped-def]
    """Finalize the drafted ``months`` in order, except that a month whose finalization would take
    more of a grant than its amount waits for the month its refusal names (the one that gives some of
    the grant back): finalized documents never take more of a grant than its amount, at any time."""
    pending = list(months)
    while pending:
        for month in pending:
            try:
                invoicing.finalize(engine, catalog, month)
            except UsageBillingError as exc:
                assert "first" in str(exc), exc
                continue
            pending.remove(month)
            break
        else:
            raise AssertionError(f"no month of {pending} could be finalized")


def _check_invariants(engine, grants: list[dict]) -> None:  # type: ignore[no-untyped-def]
    amounts = {g["grant_id"]: Decimal(g["amount"]) for g in grants}
    with engine.connect() as conn:
        taken = conn.execute(
            text(
                "SELECT grant_id, -sum(amount) FROM finance_invoice_lines WHERE status = 'finalized' "
                "AND charge_type = 'credit' GROUP BY grant_id"
            )
        ).all()
        negative = conn.execute(
            text(
                "SELECT account_id, period, sum(total) FROM invoices WHERE status = 'finalized' "
                "GROUP BY account_id, period HAVING sum(total) < 0"
            )
        ).all()
        view = {r.grant_id: r for r in conn.execute(text("SELECT * FROM finance_credit_grants"))}
    for grant_id, amount in taken:
        amount = Decimal(str(amount)).quantize(Decimal("0.01"))  # SQLite sums NUMERIC as floating point
        assert amount <= amounts[grant_id], grant_id
        assert Decimal(str(view[grant_id].applied)) == amount
        assert Decimal(str(view[grant_id].remaining)) == amounts[grant_id] - Decimal(
            str(view[grant_id].applied)
        )
    assert negative == []


def _standing(engine, type_: str | None) -> dict:  # type: ignore[no-untyped-def]
    """The notifications of ``type_`` (None: all) not retracted: (grant, threshold) -> their data."""
    with engine.connect() as conn:
        rows = conn.execute(select(Notification)).all()
    gone = {r.retracts for r in rows if r.retracts}
    return {
        (r.grant_id, r.threshold): payload(r)
        for r in rows
        if r.notification_id not in gone and not r.retracts and (type_ is None or r.type == type_)
    }


def _credit_crossings(truth: dict, grants: list[dict], catalog) -> dict:  # type: ignore[no-untyped-def]
    out = {}
    for g in grants:
        amount, cum = Decimal(g["amount"]), Decimal(0)
        shares = list(catalog.notifications.credit_thresholds)
        for month in MONTHS:
            cum += truth.get((g["account_id"], month), {"credits": {}})["credits"].get(
                g["grant_id"], Decimal(0)
            )
            while shares and cum >= shares[0] * amount:
                share = shares.pop(0)
                out[(g["grant_id"], str(share))] = {
                    "account_id": g["account_id"],
                    "grant_id": g["grant_id"],
                    "threshold": float(share),
                    "applied": f"{cum:.2f}",
                    "amount": f"{amount:.2f}",
                    "month": month,
                }
    return out


def _expiring(truth: dict, grants: list[dict], catalog, month: str) -> dict:  # type: ignore[no-untyped-def]
    last = month_bounds(month)[1]
    out = {}
    for g in grants:
        expires = dt.date.fromisoformat(g["expires"]) if g["expires"] else None
        if expires is None or not last < expires <= last + dt.timedelta(
            days=catalog.notifications.expiry_notice_days
        ):
            continue
        amount = Decimal(g["amount"])
        applied = sum((v["credits"].get(g["grant_id"], Decimal(0)) for v in truth.values()), Decimal(0))
        if applied < amount:
            out[(g["grant_id"], None)] = {
                "account_id": g["account_id"],
                "grant_id": g["grant_id"],
                "threshold": None,
                "applied": f"{applied:.2f}",
                "amount": f"{amount:.2f}",
                "remaining": f"{amount - applied:.2f}",
                "expires": expires.isoformat(),
                "month": month,
            }
    return out


def test_credits_and_commitments_equal_the_reference_month_after_month_and_after_backdating(
    ledger, catalog, tmp_path
):
    engine = ledger
    rng = random.Random(42)
    _write_usage(engine, _usage(catalog, rng, MONTHS))
    first = _grants(catalog, rng, "g", MONTHS[:2])
    assert credits.load(engine, _csv(tmp_path / "a.csv", first), catalog).loaded == len(first)
    for month in MONTHS[:2]:
        _close(engine, catalog, month)
    _check_invariants(engine, first)
    assert _billed(engine) == _truth(engine, catalog, _ref_grants(first, {}), MONTHS[:2])

    # After finalization: grants backdated into the finalized months, and late usage in January that
    # changes what the grants covered; the next drafts correct both, month after month.
    late = _grants(catalog, rng, "late", MONTHS[:1])
    assert credits.load(engine, _csv(tmp_path / "b.csv", late), catalog).loaded == len(late)
    _write_usage(engine, _usage(catalog, rng, MONTHS[:1], scale=2))
    everything = first + late
    for month in MONTHS:  # drafted in order: each month's credits start from the drafts before it
        assert invoicing.draft(engine, catalog, month).adjustments or month == MONTHS[-1]
    _finalize_as_told(engine, catalog, MONTHS)
    _check_invariants(engine, everything)
    truth = _truth(engine, catalog, _ref_grants(everything, {}), MONTHS)
    assert _billed(engine) == truth
    assert sum(len(v["credits"]) for v in truth.values()) >= 10  # the scenario applies many grants
    assert sum(1 for v in truth.values() if v["true_up"]) >= 2  # and bills the commitment's shortfall
    assert any(v["total"] == 0 and v["credits"] for v in truth.values())  # credits cover a whole invoice
    # The notifications standing after all this: each grant's thresholds crossed in the month the
    # reference's credits first reach them, with the figures of then.
    assert _standing(engine, CREDIT_CROSSED) == _credit_crossings(truth, everything, catalog)
    # A grant expiring within the notice after a month's end can serve no later month: each month's
    # draft gives the notices of its window, with the balance the reference leaves.
    notices = {k: v for month in MONTHS for k, v in _expiring(truth, everything, catalog, month).items()}
    assert _standing(engine, CREDIT_EXPIRING) == notices and len(notices) >= 2
    with engine.connect() as conn:  # the backdating moved crossings: retracted, then said as they are now
        moved = conn.execute(
            text(f"SELECT count(*) FROM notifications WHERE type = '{CREDIT_CROSSED}.retracted'")
        )
        assert moved.scalar_one() > 0
    said = _standing(engine, None)
    # nothing changed: drafting again issues nothing, and says nothing new
    assert (
        invoicing.draft(engine, catalog, MONTHS[0]).adjustments,
        invoicing.draft(engine, catalog, MONTHS[-1]).adjustments,
    ) == (0, 0)
    assert _standing(engine, None) == said


def test_loads_are_all_or_nothing_idempotent_and_name_the_row_and_field(ledger, catalog, tmp_path):
    engine = ledger
    good = _grants(catalog, random.Random(7), "g", MONTHS)
    path = _csv(tmp_path / "good.csv", good)
    assert credits.load(engine, path, catalog).loaded == len(good)
    again = credits.load(engine, path, catalog)
    assert (again.loaded, again.unchanged) == (0, len(good))
    changed = [*good[:3], {**good[3], "amount": "1.00"}, {**good[0], "grant_id": "new-one"}]
    with pytest.raises(UsageBillingError, match=r"row 4, amount: grant 'g-03' is loaded already"):
        credits.load(engine, _csv(tmp_path / "changed.csv", changed), catalog)
    assert credits.count(engine) == len(good)  # the new row of the refused file was not loaded either
    bad_rows = {
        "account_id": ({"account_id": "Acct-A"}, "is not an account the accounts table holds"),
        "amount": ({"amount": "10.005"}, "at most 2"),
        "kind": ({"kind": "gift"}, "is not one of paid | promotional"),
        "expires": ({"effective_from": "2026-02-01", "expires": "2026-02-01"}, "must be after"),
        "models": ({"models": "gpt-9"}, "is not a model of the catalog"),
        "priority": ({"priority": "1.5"}, "is not an integer"),
        "effective_from": ({"effective_from": "2026-02-30"}, "no such date: February 2026 has days 01 to 28"),
    }
    for field, (edit, says) in bad_rows.items():
        rows = [{**good[0], "grant_id": "x1"}, {**good[1], "grant_id": "x2", **edit}]
        with pytest.raises(UsageBillingError, match=rf"row 2 \(line 3\), {field}: .*{says}"):
            credits.load(engine, _csv(tmp_path / f"{field}.csv", rows), catalog)
    twice = tmp_path / "twice.csv"  # a column twice: a reader would keep one of its values silently
    twice.write_text(HEADER.strip() + ",amount\n" + ",".join(good[0][c] for c in credits.COLUMNS) + ",1.00\n")
    with pytest.raises(UsageBillingError, match="column 'amount' appears more than once in the header"):
        credits.load(engine, twice, catalog)
    zero = [{**good[0], "grant_id": "x0", "amount": "0"}]
    with pytest.raises(UsageBillingError, match=r"row 1 .* amount: 0 must be more than 0"):
        credits.load(engine, _csv(tmp_path / "zero.csv", zero), catalog)
    assert credits.count(engine) == len(good)
    with engine.begin() as conn, pytest.raises(Exception, match="never change"):
        conn.execute(text("UPDATE credit_grants SET amount = 1"))


def test_a_void_ends_later_months_only_and_is_refused_where_a_finalized_document_applied_it(
    ledger, catalog, tmp_path
):
    engine = ledger
    _write_usage(engine, _usage(catalog, random.Random(3), MONTHS, scale=3))
    grant = {
        "grant_id": "prepaid-1",
        "account_id": "acct-e",
        "amount": "100000.00",
        "kind": "paid",
        "effective_from": "2026-01-01",
        "expires": "",
        "priority": "0",
        "models": "",
        "reason": "prepaid block",
    }
    credits.load(engine, _csv(tmp_path / "v.csv", [grant]), catalog)
    _close(engine, catalog, "2026-01")
    with pytest.raises(
        UsageBillingError, match=r"finalized document INV-202601-\d{6} \(2026-01\) applies it"
    ):
        credits.void(engine, "prepaid-1", "refund", dt.date(2026, 1, 20))
    assert credits.void(engine, "prepaid-1", "refund", dt.date(2026, 2, 1)) == dt.date(2026, 2, 1)
    with pytest.raises(UsageBillingError, match="void already"):
        credits.void(engine, "prepaid-1", "again", dt.date(2026, 3, 1))
    _close(engine, catalog, "2026-02")
    with engine.connect() as conn:
        months = conn.execute(
            text("SELECT DISTINCT period FROM finance_invoice_lines WHERE grant_id = 'prepaid-1'")
        ).scalars()
        assert sorted(months) == ["2026-01"]
        row = conn.execute(text("SELECT void, void_date FROM finance_credit_grants")).one()
    assert row.void == 1 and str(row.void_date) == "2026-02-01"
    (view,) = credits.show(engine, "acct-e")
    assert (
        list(view.applied) == ["2026-01"] and view.remaining == Decimal("100000.00") - view.applied["2026-01"]
    )


def test_cli_credits_commands_and_their_one_line_errors(tmp_path, catalog, capsys):
    from pipelines.cli import main

    url = f"sqlite:///{tmp_path / 'w.db'}"
    engine = make_engine(url)
    upgrade(engine)
    accounts = tmp_path / "accounts.csv"
    accounts.write_text("account_id,plan,timezone,active_from,active_until\nacct-a,pro,UTC,2026-01-01,\n")
    load_accounts(engine, accounts, catalog)
    engine.dispose()
    base = ["--database-url", url, "--config", str(CATALOG_PATH)]
    grant = ["credits", "grant", "--grant", "p-1", "--account", "acct-a", "--amount", "120.00"]
    assert main([*base, *grant, "--kind", "paid", "--from", "2026-02-01", "--reason", "prepaid"]) == 0
    assert main([*base, *grant, "--kind", "paid", "--from", "2026-02-01", "--reason", "prepaid"]) == 0
    assert main([*base, "credits", "show", "--account", "acct-a"]) == 0
    out = capsys.readouterr().out
    assert "credit p-1 granted" in out and "was granted already (identical)" in out
    assert "p-1  paid  120.00 USD  from 2026-02-01, never expires" in out and "remaining  120.00" in out
    assert main([*base, "credits", "void", "--grant", "p-1", "--reason", "refund", "--on", "2026-03-01"]) == 0
    assert "voided credit p-1 for months ending on or after 2026-03-01" in capsys.readouterr().out
    mistakes = [
        [*grant[:3], "p-2", *grant[4:7], "12.345", "--kind", "paid", "--from", "2026-02-01"],
        ["credits", "void", "--grant", "nope", "--reason", "x"],
        ["credits", "void", "--grant", "p-1", "--reason", "x", "--on", "2026-13-01"],
        ["credits", "load", str(tmp_path / "missing.csv")],
    ]
    for argv in mistakes:
        assert main([*base, *argv]) == 2, argv
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: credits grant, amount: '12.345' is not an amount in USD with at most 2 decimals "
        "(like 250.00)",
        "error: no credit grant 'nope' (see `usage-billing credits show --account A`)",
        "error: invalid --on '2026-13-01': no such date: there is no month 13",
        f"error: credits file not found: {tmp_path / 'missing.csv'}",
    ]
