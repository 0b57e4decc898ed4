"""Invoices in the warehouse, on SQLite and PostgreSQL: a reference to the cent, lifecycle, immutability,
gapless numbering under two finalizers, adjustments for late usage, exports."""

from __future__ import annotations

import csv
import datetime as dt
import shutil
import threading
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError

from billing.invoices import build_lines, month_bounds
from billing.pricing import cents, price_in_force
from pipelines.errors import UsageBillingError
from pipelines.invoicing import documents as invoicing
from pipelines.invoicing.export import LINE_COLUMNS, export
from pipelines.settings import Settings
from pipelines.warehouse.accounts import load_accounts
from pipelines.warehouse.binding import rebind
from pipelines.warehouse.engine import make_engine, upgrade
from pipelines.warehouse.locks import LockBusy
from schemas.catalog import parse_catalog
from schemas.warehouse import Account, Invoice, InvoiceLine
from tests.billing.test_quota import reference
from tests.conftest import CATALOG_PATH, close_month, run_day, small_dates, sqlite_at

MONTH = "2026-03"
pytestmark = pytest.mark.slow


def _build(settings: Settings, catalog) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(settings.database_url)
    upgrade(engine)
    load_accounts(engine, Path(settings.landing) / "accounts.csv", catalog)
    engine.dispose()
    run_day(settings, small_dates())
    close_month(settings, MONTH, Path(settings.lake).parent)


@pytest.fixture(scope="module")
def sqlite_built(tmp_path_factory, small_landing, catalog) -> Settings:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("invoicing-sqlite")
    settings = sqlite_at(root, small_landing)
    _build(settings, catalog)
    return settings


@pytest.fixture(scope="module")
def postgres_built(postgres_url, tmp_path_factory, small_landing, catalog) -> Settings:  # type: ignore[no-untyped-def]
    engine = make_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    engine.dispose()
    root = tmp_path_factory.mktemp("invoicing-pg")
    settings = Settings(
        config=str(CATALOG_PATH),
        database_url=postgres_url,
        lake=str(root / "lake"),
        landing=str(small_landing),
    )
    _build(settings, catalog)
    return settings


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request, tmp_path) -> Settings:  # type: ignore[no-untyped-def]
    """A metered warehouse with no invoices yet (a copy of the SQLite file; truncated PostgreSQL tables)."""
    if request.param == "sqlite":
        built = request.getfixturevalue("sqlite_built")
        target = tmp_path / "warehouse.db"
        shutil.copy(built.database_url.removeprefix("sqlite:///"), target)
        return Settings(
            config=built.config, database_url=f"sqlite:///{target}", lake=built.lake, landing=built.landing
        )
    built = request.getfixturevalue("postgres_built")
    engine = make_engine(built.database_url)
    with engine.begin() as conn:  # TRUNCATE is the test's reset; row triggers guard UPDATE and DELETE
        conn.execute(
            text(
                "TRUNCATE invoice_lines, invoice_plans, invoices, invoice_counters, "
                "unknown_account_acceptances, billed_catalog_rows"
            )
        )
        conn.execute(text("TRUNCATE lake_bindings"))  # a test may have bound its own copy of the lake
    engine.dispose()
    return built


# -- the reference: plain Python and Decimal, one event at a time ---------------------------------


def _reference_invoices(settings: Settings, catalog) -> dict[str, dict]:  # type: ignore[no-untyped-def]
    """account -> {"total": Decimal, "lines": {(type, model, tier, kind, unit price): (quantity, amount)}}."""
    engine = make_engine(settings.database_url)
    with engine.connect() as conn:
        accounts = [dict(r._mapping) for r in conn.execute(select(Account.__table__))]
    engine.dispose()
    zone = {a["account_id"]: a["timezone"] for a in accounts}
    events = ds.dataset(f"{settings.lake}/events", format="parquet").to_table().to_pylist()
    for e in events:
        local = e["event_time"].astimezone(ZoneInfo(zone.get(e["account_id"], "UTC"))).date()
        e["local_day"] = local
        e["plan"] = next(
            (
                a["plan"]
                for a in accounts
                if a["account_id"] == e["account_id"]
                and a["active_from"] <= local
                and (a["active_until"] is None or local <= a["active_until"])
            ),
            None,
        )
    included, overage, _ = reference(events, catalog)
    first, last = month_bounds(MONTH)
    out: dict[str, dict] = defaultdict(lambda: {"lines": defaultdict(lambda: [0, Decimal(0)])})
    kinds = ("input", "cached_input", "output")
    for e in events:
        if not first <= e["local_day"] <= last:
            continue
        utc_day = e["event_time"].astimezone(dt.UTC).date()
        for k, kind in enumerate(kinds):
            lines = out[e["account_id"]]["lines"]
            if included[e["event_id"]][k]:
                lines[("included_usage", e["model"], e["speed_tier"], kind, Decimal(0))][0] += included[
                    e["event_id"]
                ][k]
            if overage[e["event_id"]][k]:
                price = price_in_force(catalog, e["model"], e["speed_tier"], utc_day).per_million(kind)
                lines[("overage_usage", e["model"], e["speed_tier"], kind, price)][0] += overage[
                    e["event_id"]
                ][k]
    days_in_month = (last - first).days + 1
    for a in accounts:
        if a["plan"] is None or a["active_from"] > last or (a["active_until"] and a["active_until"] < first):
            continue
        start, end = max(a["active_from"], first), min(a["active_until"] or last, last)
        days = (end - start).days + 1
        fee = catalog.plan(a["plan"]).monthly_fee
        out[a["account_id"]]["lines"][("plan_fee", None, None, None, fee)] = [
            days,
            cents(fee * days / days_in_month),
        ]
    result = {}
    for account, doc in out.items():
        lines = {}
        for key, (quantity, amount) in doc["lines"].items():
            if key[0] == "overage_usage":
                amount = cents(Decimal(quantity) * key[4] / 10**6)
            lines[key] = (quantity, amount)
        result[account] = {"lines": lines, "total": sum((a for _, a in lines.values()), Decimal(0))}
    return result


def _warehouse_invoices(settings: Settings, status: str = "draft") -> dict[str, dict]:
    engine = make_engine(settings.database_url)
    i = Invoice.__table__.c
    with engine.connect() as conn:
        docs = conn.execute(select(i.invoice_id, i.account_id, i.total).where(i.status == status)).all()
        rows = conn.execute(select(InvoiceLine.__table__)).all()
    engine.dispose()
    by_id = {d.invoice_id: d.account_id for d in docs}
    out = {d.account_id: {"lines": {}, "total": Decimal(d.total)} for d in docs}
    for r in rows:
        if r.invoice_id in by_id:
            key = (r.line_type, r.model, r.speed_tier, r.token_kind, Decimal(r.unit_price).normalize())
            out[by_id[r.invoice_id]]["lines"][key] = (r.quantity, Decimal(r.amount))
    return out


def _normalized(ref: dict[str, dict]) -> dict[str, dict]:
    return {
        a: {"total": d["total"], "lines": {(*k[:4], k[4].normalize()): v for k, v in d["lines"].items()}}
        for a, d in ref.items()
    }


def test_invoices_equal_an_event_by_event_reference_to_the_cent(db, catalog):
    result = invoicing.draft(make_engine(db.database_url), catalog, MONTH)
    ours = _warehouse_invoices(db)
    expected = _normalized(_reference_invoices(db, catalog))
    assert result.invoices == len(expected) > 100
    assert sorted(ours) == sorted(expected)
    for account in expected:
        assert ours[account] == expected[account], account
    assert result.total == sum(d["total"] for d in expected.values())
    assert any(k[0] == "overage_usage" for d in expected.values() for k in d["lines"])
    engine = make_engine(db.database_url)
    with engine.connect() as conn:  # the finance reconciliation of the month is clean
        row = conn.execute(text("SELECT * FROM finance_reconciliation WHERE month = :m"), {"m": MONTH}).one()
    assert row.usage_daily_tokens == row.metered_tokens == row.billable_tokens == row.invoiced_tokens > 0
    assert row.unmetered_tokens == 0 and row.uninvoiced_tokens == 0


def _numbers(settings: Settings) -> list[tuple[str, str, int]]:
    engine = make_engine(settings.database_url)
    i = Invoice.__table__.c
    with engine.connect() as conn:
        rows = conn.execute(
            select(i.invoice_number, i.account_id, i.sequence)
            .where(i.status != "draft")
            .order_by(i.invoice_number)
        ).all()
    engine.dispose()
    return [tuple(r) for r in rows]


def test_redraft_replaces_drafts_only_and_finalize_numbers_gaplessly(db, catalog):
    engine = make_engine(db.database_url)
    first = invoicing.draft(engine, catalog, MONTH)
    again = invoicing.draft(engine, catalog, MONTH)
    assert (again.invoices, again.lines, again.total, again.replaced_drafts) == (
        first.invoices,
        first.lines,
        first.total,
        first.invoices,
    )
    done = invoicing.finalize(engine, catalog, MONTH)
    assert done.finalized == first.invoices
    numbers = _numbers(db)
    assert [n for n, _, _ in numbers] == [f"INV-202603-{k:06d}" for k in range(1, first.invoices + 1)]
    assert [a for _, a, _ in numbers] == sorted(a for _, a, _ in numbers)  # numbered in account order
    assert invoicing.finalize(engine, catalog, MONTH).finalized == 0
    nothing_new = invoicing.draft(engine, catalog, MONTH)  # finalized and unchanged: no document at all
    assert (nothing_new.invoices, nothing_new.adjustments, nothing_new.replaced_drafts) == (0, 0, 0)
    assert _numbers(db) == numbers


def _forget_accounts(settings: Settings, where: str) -> dict[str, int]:
    """Delete the accounts rows ``where`` selects (as if never loaded); their billable tokens of MONTH."""
    engine = make_engine(settings.database_url)
    first, last = month_bounds(MONTH)
    with engine.begin() as conn:
        gone = [r[0] for r in conn.execute(text(f"SELECT DISTINCT account_id FROM accounts WHERE {where}"))]
        conn.execute(text(f"DELETE FROM accounts WHERE {where}"))
        tokens = dict(
            conn.execute(
                text(
                    "SELECT account_id, sum(included_tokens + overage_tokens) FROM billable_usage "
                    "WHERE local_day BETWEEN :a AND :b GROUP BY account_id"
                ),
                {"a": first, "b": last},
            ).all()
        )
    engine.dispose()
    return {a: int(tokens[a]) for a in gone if a in tokens}


def test_usage_of_unknown_accounts_is_listed_and_never_numbered_without_a_recorded_reason(db, catalog):
    from pipelines.warehouse.unknown import unknown_usage

    engine = make_engine(db.database_url)
    with engine.connect() as conn:
        saved = [dict(r._mapping) for r in conn.execute(select(Account.__table__))]
    known = sorted({r["account_id"] for r in saved})
    try:
        # the extreme case first: an empty accounts table numbers nothing
        everyone = _forget_accounts(db, "1 = 1")
        drafted = invoicing.draft(engine, catalog, MONTH)
        assert drafted.invoices == len(drafted.unknown) == len(everyone)
        with pytest.raises(UsageBillingError, match="unknown account"):
            invoicing.finalize(engine, catalog, MONTH)
        with engine.begin() as conn:
            conn.execute(
                Account.__table__.insert(), [r for r in saved if r["account_id"] not in known[1:5:3]]
            )
        forgotten = {a: everyone[a] for a in known[1:5:3]}
        with engine.connect() as conn:  # what metering counts and prints after a run
            met = unknown_usage(conn, *month_bounds(MONTH))
        assert {u.account_id: u.tokens for u in met} == forgotten
        drafted = invoicing.draft(engine, catalog, MONTH)
        assert {u.account_id: u.tokens for u in drafted.unknown} == forgotten
        with pytest.raises(UsageBillingError, match=f"cannot finalize {MONTH}: drafts of 2 unknown accounts"):
            invoicing.finalize(engine, catalog, MONTH)
        assert _numbers(db) == []  # nothing numbered, not even the known accounts' drafts
        done = invoicing.finalize(engine, catalog, MONTH, accept_unknown="test traffic of a partner")
        assert done.finalized == drafted.invoices
        with engine.connect() as conn:
            view = conn.execute(
                text(
                    "SELECT account_id, tokens, total, acceptance, reason FROM finance_unknown_accounts "
                    "WHERE month = :m ORDER BY account_id"
                ),
                {"m": MONTH},
            ).all()
            totals = dict(
                conn.execute(
                    text("SELECT account_id, total FROM invoices WHERE period = :m"), {"m": MONTH}
                ).all()
            )
        assert [(a, int(t), acc, r) for a, t, _, acc, r in view] == [
            (a, forgotten[a], "accepted", "test traffic of a partner") for a in sorted(forgotten)
        ]
        assert all(Decimal(str(total)) == Decimal(str(totals[a])) for a, _, total, _, _ in view)
    finally:
        with engine.begin() as conn:  # as they were: no accounts load, so nothing is queued again
            conn.execute(Account.__table__.delete())
            conn.execute(Account.__table__.insert(), saved)
        engine.dispose()


def _catalog_with(edit) -> object:  # type: ignore[no-untyped-def]
    """The test catalog after ``edit(data)`` changed its TOML data."""
    import tomllib

    data = tomllib.loads(CATALOG_PATH.read_text())
    edit(data)
    return parse_catalog(data, "edited catalog")


def test_billed_history_is_never_re_priced_by_a_catalog_edit(db, catalog):
    from pipelines.invoicing.history import recorded

    engine = make_engine(db.database_url)
    invoicing.draft(engine, catalog, MONTH)
    invoicing.finalize(engine, catalog, MONTH)
    with engine.connect() as conn:
        billed = recorded(conn)
    price = next(r for r in billed if r.kind == "price")
    fee = next(r for r in billed if r.kind == "plan_fee")
    assert fee.effective_from is None and price.first_day <= price.last_day

    def bump(data):  # the same row, another value
        row = next(
            p
            for p in data["prices"]
            if (p["model"], p["tier"], p["effective_from"])
            == (price.subject, price.tier, price.effective_from)
        )
        row["output"] = str(Decimal(row["output"]) + 1)

    def cut_short(data):  # a new row starting on a day the billed one priced
        row = next(p for p in data["prices"] if (p["model"], p["tier"]) == (price.subject, price.tier))
        data["prices"].append({**row, "effective_from": price.last_day, "output": "999.00"})

    def refee(data):
        next(p for p in data["plans"] if p["id"] == fee.subject)["monthly_fee"] = "999.00"

    def fee_inside(data):
        plan = next(p for p in data["plans"] if p["id"] == fee.subject)
        plan["fees"] = [{"effective_from": fee.last_day, "monthly_fee": "999.00"}]

    def commit(data):  # a plan that billed the month gets a monthly minimum
        next(p for p in data["plans"] if p["id"] == fee.subject)["minimum_monthly"] = "5000.00"

    assert any(r.kind == "minimum" and r.subject == fee.subject for r in billed)
    for edit, says in (
        (commit, "its minimum changed"),
        (bump, "its values changed"),
        (cut_short, "the catalog now has a row effective"),
        (refee, "its fee changed"),
        (fee_inside, "the catalog now changes the fee on"),
    ):
        edited = _catalog_with(edit)
        with pytest.raises(
            UsageBillingError, match=f"billed history is never re-priced.*{says}|{says}.*never"
        ):
            invoicing.draft(engine, edited, MONTH)
    # the way to change a fee: a row from a day not yet billed; nothing billed changes
    after = fee.last_day + dt.timedelta(days=1)

    def fee_later(data):
        plan = next(p for p in data["plans"] if p["id"] == fee.subject)
        plan["fees"] = [{"effective_from": after, "monthly_fee": "999.00"}]

    again = invoicing.draft(engine, _catalog_with(fee_later), MONTH)
    assert (again.invoices, again.adjustments, again.lines) == (0, 0, 0)
    engine.dispose()


def _first_finalized(settings: Settings) -> str:
    engine = make_engine(settings.database_url)
    with engine.connect() as conn:
        number = conn.execute(
            text("SELECT min(invoice_number) FROM invoices WHERE status = 'finalized'")
        ).scalar()
    engine.dispose()
    return number


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE invoices SET total = total + 1 WHERE invoice_number = :n",
        "UPDATE invoices SET status = 'draft' WHERE invoice_number = :n",
        "UPDATE invoices SET status = 'void', total = 0 WHERE invoice_number = :n",
        "DELETE FROM invoices WHERE invoice_number = :n",
        "UPDATE invoice_lines SET amount = 0 WHERE invoice_id = "
        "(SELECT invoice_id FROM invoices WHERE invoice_number = :n)",
        "DELETE FROM invoice_lines WHERE invoice_id = "
        "(SELECT invoice_id FROM invoices WHERE invoice_number = :n)",
        "INSERT INTO invoice_lines "
        "(invoice_id, line_no, line_type, description, quantity, unit_price, amount) "
        "SELECT invoice_id, 999, 'adjustment', 'sneaky', 1, 0, 5 FROM invoices WHERE invoice_number = :n",
    ],
)
def test_the_database_refuses_to_change_a_finalized_invoice(db, catalog, statement):
    engine = make_engine(db.database_url)
    invoicing.draft(engine, catalog, MONTH)
    invoicing.finalize(engine, catalog, MONTH)
    number = _first_finalized(db)
    before = _warehouse_invoices(db, "finalized")
    with pytest.raises(DBAPIError, match="not a draft"), engine.begin() as conn:
        conn.execute(text(statement), {"n": number})
    assert _warehouse_invoices(db, "finalized") == before


def test_void_keeps_the_invoice_and_the_next_draft_bills_the_account_afresh(db, catalog):
    engine = make_engine(db.database_url)
    invoicing.draft(engine, catalog, MONTH)
    invoicing.finalize(engine, catalog, MONTH)
    number = _first_finalized(db)
    with pytest.raises(UsageBillingError, match="reason"):
        invoicing.void(engine, number, "  ")
    account = invoicing.void(engine, number, "billed to the wrong entity")
    with pytest.raises(UsageBillingError, match="is void"):
        invoicing.void(engine, number, "again")
    redraft = invoicing.draft(engine, catalog, MONTH)
    assert (redraft.invoices, redraft.adjustments) == (1, 0)
    done = invoicing.finalize(engine, catalog, MONTH)
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT invoice_number, status, sequence, void_reason FROM invoices "
                "WHERE account_id = :a ORDER BY sequence"
            ),
            {"a": account},
        ).all()
    assert [(r.status, r.sequence) for r in rows] == [("void", 1), ("finalized", 2)]
    assert rows[0].invoice_number == number and rows[1].invoice_number == done.first_number
    assert rows[0].void_reason == "billed to the wrong entity"


@pytest.mark.postgres
def test_two_finalizers_at_once_number_every_draft_exactly_once(postgres_built, catalog):
    engine = make_engine(postgres_built.database_url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "TRUNCATE invoice_lines, invoice_plans, invoices, invoice_counters, "
                "unknown_account_acceptances"
            )
        )
        conn.execute(text("TRUNCATE lake_bindings"))  # a test may have bound its own copy of the lake
    drafted = invoicing.draft(engine, catalog, MONTH)
    barrier = threading.Barrier(2)
    results: list = []

    def finalize() -> None:
        own = make_engine(postgres_built.database_url)  # its own connection pool, like a second process
        barrier.wait()
        try:
            results.append(invoicing.finalize(own, catalog, MONTH).finalized)
        except LockBusy:  # the month's lock was held: this one did not start (exit 75 on the command line)
            results.append("busy")
        own.dispose()

    threads = [threading.Thread(target=finalize) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results, key=str) in ([0, drafted.invoices], [drafted.invoices, "busy"])
    numbers = [n for n, _, _ in _numbers(postgres_built)]
    assert numbers == [f"INV-202603-{k:06d}" for k in range(1, drafted.invoices + 1)]


def test_a_missing_price_stops_the_draft_and_names_what_is_missing(db):
    data = parse_catalog(__import__("tomllib").loads(Path(CATALOG_PATH).read_text())).model_dump()
    data["prices"] = [
        p for p in data["prices"] if not (p["model"] == "gpt-5.6-sol" and p["tier"] == "priority")
    ]
    broken = parse_catalog(data)
    engine = make_engine(db.database_url)
    with pytest.raises(
        UsageBillingError, match=r"no price for model gpt-5.6-sol, tier priority, token kind \w+ on 2026-03-"
    ):
        invoicing.draft(engine, broken, MONTH)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM invoices")).scalar() == 0


def test_late_usage_after_finalization_becomes_an_adjustment_that_adds_up_to_the_recomputation(
    db, catalog, tmp_path
):
    engine = make_engine(db.database_url)
    invoicing.draft(engine, catalog, MONTH)
    invoicing.finalize(engine, catalog, MONTH)
    # Late events for three accounts land two days later; run-day ingests and re-meters their dates.
    lake_copy = tmp_path / "lake"
    shutil.copytree(db.lake, lake_copy)
    landing = tmp_path / "landing"
    shutil.copytree(db.landing, landing)
    late_day = small_dates()[-1] + dt.timedelta(days=1)
    template = ds.dataset(f"{db.lake}/events", format="parquet").to_table().slice(0, 3)
    late = template.drop_columns(["_landing_date", "_source_file"])
    late = late.set_column(0, "event_id", pa.array([f"late-{i}" for i in range(3)]))
    late = late.set_column(
        late.schema.get_field_index("output_tokens"), "output_tokens", pa.array([4_000_000] * 3, pa.int64())
    )
    (landing / late_day.isoformat()).mkdir()
    pq.write_table(late, landing / late_day.isoformat() / "late.parquet")
    settings = Settings(
        config=db.config, database_url=db.database_url, lake=str(lake_copy), landing=str(landing)
    )
    rebind(engine, str(lake_copy), "the test works on its own copy of the lake")
    run_day(settings, [late_day])
    accounts = set(late["account_id"].to_pylist())

    result = invoicing.draft(engine, catalog, MONTH)
    assert result.invoices == 0 and result.adjustments == len(accounts)
    again = invoicing.draft(engine, catalog, MONTH)  # idempotent: the same adjustments, replaced
    assert (again.adjustments, again.lines, again.total) == (result.adjustments, result.lines, result.total)
    invoicing.finalize(engine, catalog, MONTH)

    # original + adjustment = a fresh recomputation, line key by line key, for every account
    first, last = month_bounds(MONTH)
    with engine.connect() as conn:
        billable = invoicing.billable_by_price(conn, first, last)
        plans = invoicing._plans(conn, first, last)
        docs = conn.execute(text("SELECT account_id, kind, corrects, invoice_number FROM invoices")).all()
    truth = build_lines(billable, plans, catalog, MONTH)
    fresh: dict = defaultdict(lambda: [0, Decimal(0)])
    for r in truth.to_pylist():
        key = (r["account_id"], r["line_type"], r["model"], r["speed_tier"], r["token_kind"], r["unit_price"])
        fresh[key][0] += r["quantity"]
        fresh[key][1] += r["amount"]
    billed: dict = defaultdict(lambda: [0, Decimal(0)])
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT account_id, charge_type, model, speed_tier, token_kind, unit_price, quantity, amount "
                "FROM finance_invoice_lines WHERE status = 'finalized'"
            )
        ).all()
    for r in rows:
        key = (r[0], r[1], r[2], r[3], r[4], Decimal(r[5]).quantize(Decimal("0.000001")))
        billed[key][0] += r[6]
        billed[key][1] += Decimal(r[7]).quantize(Decimal("0.01"))
    norm = {(*k[:5], k[5].quantize(Decimal("0.000001"))): v for k, v in fresh.items()}
    assert {k: v for k, v in billed.items() if v != [0, 0]} == norm
    adjustments = [d for d in docs if d.kind == "adjustment"]
    assert {d.account_id for d in adjustments} == accounts
    originals = {d.account_id: d.invoice_number for d in docs if d.kind == "invoice"}
    assert all(d.corrects == originals[d.account_id] for d in adjustments)


def test_export_writes_the_design_columns_and_one_html_document_per_document(db, catalog, tmp_path):
    engine = make_engine(db.database_url)
    drafted = invoicing.draft(engine, catalog, MONTH)
    invoicing.finalize(engine, catalog, MONTH)
    counts = export(engine, MONTH, tmp_path / "csv")
    with open(tmp_path / "csv" / "invoices.csv", newline="") as f:
        invoices = list(csv.DictReader(f))
    with open(tmp_path / "csv" / "invoice_lines.csv", newline="") as f:
        reader = csv.DictReader(f)
        lines = list(reader)
    # the design's columns first, in its order; then what a document needs
    assert list(invoices[0]) == [
        "invoice_number",
        "account_id",
        "period",
        "status",
        "currency",
        "subtotal",
        "total",
        "document_type",
        "corrects",
        "issued_at",
        "due_date",
    ]
    assert tuple(reader.fieldnames) == LINE_COLUMNS
    assert LINE_COLUMNS[:11] == (
        "invoice_number",
        "account_id",
        "period",
        "line_type",
        "model",
        "speed_tier",
        "token_kind",
        "quantity",
        "unit_price",
        "amount",
        "currency",
    )
    assert len(invoices) == counts["invoices"] == drafted.invoices and len(lines) == drafted.lines
    assert sum(Decimal(r["total"]) for r in invoices) == drafted.total
    assert sum(Decimal(r["amount"]) for r in lines) == drafted.total
    assert {r["document_type"] for r in invoices} == {"invoice"} and not any(r["corrects"] for r in invoices)
    issued = dt.datetime.fromisoformat(invoices[0]["issued_at"].replace("Z", "+00:00"))
    due = dt.date.fromisoformat(invoices[0]["due_date"])
    assert due - issued.date() == dt.timedelta(days=catalog.payment_terms_days)
    pages = sorted(p.name for p in (tmp_path / "csv" / "html").iterdir())
    assert pages == sorted([f"{r['invoice_number']}.html" for r in invoices] + ["index.html"])
    assert (
        counts["html"] == drafted.invoices and counts["pdf"] == 0 and not (tmp_path / "csv" / "pdf").exists()
    )
    page = (tmp_path / "csv" / "html" / f"{invoices[0]['invoice_number']}.html").read_text()
    assert invoices[0]["invoice_number"] in page and "Total due" in page and catalog.seller.name in page
    export(engine, MONTH, tmp_path / "pq", "parquet")
    table = pq.read_table(tmp_path / "pq" / "invoice_lines.parquet")
    assert tuple(table.column_names) == LINE_COLUMNS and table.num_rows == drafted.lines
    assert not (tmp_path / "pq" / "html").exists()


def test_cli_invoice_commands_run_and_report_mistakes_in_one_line(db, capsys, tmp_path):
    from pipelines.cli import main

    base = ["--database-url", db.database_url, "--config", db.config]
    assert main([*base, "invoices", "draft", "--month", MONTH]) == 0
    assert main([*base, "invoices", "finalize", "--month", MONTH]) == 0
    assert "INV-202603-000001" in capsys.readouterr().out
    assert main([*base, "invoices", "export", "--month", MONTH, "--out", str(tmp_path / "x")]) == 0
    assert main([*base, "invoices", "draft", "--month", "2026-13"]) == 2
    assert main([*base, "invoices", "void", "--number", "INV-000000-000000", "--reason", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: --month must look like 2026-03, got '2026-13'",
        "error: no invoice numbered INV-000000-000000",
    ]
