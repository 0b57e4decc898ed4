"""The finance_reader role and the questions in docs/finance.md, on PostgreSQL with psql.

Every query in the doc runs as finance_reader through ``psql``; its answer is checked against the
invoices as computed here from the raw tables (read as the owner). The role reads the views only.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
import shutil
import subprocess
from collections import defaultdict
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import make_url

from pipelines.invoicing import credits
from pipelines.invoicing import documents as invoicing
from pipelines.invoicing.export import export
from pipelines.settings import Settings
from pipelines.warehouse.accounts import load_accounts
from pipelines.warehouse.engine import make_engine, upgrade
from schemas.warehouse import Invoice, InvoiceLine, InvoicePlan, PoolUsage
from tests.conftest import CATALOG_PATH, ROOT, close_month, run_day, small_dates

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
MONTH = "2026-03"
UNKNOWN = "acct-never-loaded"
ACCEPTED = "a partner's test traffic, billed at the rate card"


@pytest.fixture(scope="module")
def finance_db(postgres_url, tmp_path_factory, small_landing, catalog) -> str:  # type: ignore[no-untyped-def]
    """March invoiced and finalized, late usage adjusted and finalized, one invoice voided and rebilled."""
    engine = make_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    upgrade(engine)
    root = tmp_path_factory.mktemp("finance")
    landing = root / "landing"
    shutil.copytree(small_landing, landing)
    settings = Settings(
        config=str(CATALOG_PATH), database_url=postgres_url, lake=str(root / "lake"), landing=str(landing)
    )
    load_accounts(engine, landing / "accounts.csv", catalog)
    run_day(settings, small_dates())
    close_month(settings, MONTH, root)
    _grant_credits(engine, catalog, landing, root)
    invoicing.draft(engine, catalog, MONTH)
    invoicing.finalize(engine, catalog, MONTH)
    late_day = small_dates()[-1] + dt.timedelta(days=1)
    late = ds.dataset(f"{settings.lake}/events", format="parquet").to_table().slice(100, 4)
    late = late.drop_columns(["_landing_date", "_source_file"])
    late = late.set_column(0, "event_id", pa.array([f"late-{i}" for i in range(4)]))
    # two of them from an account the accounts table never held: numbered only once accepted
    account = late.schema.get_field_index("account_id")
    unknown = pa.array(
        [*late["account_id"].to_pylist()[:2], UNKNOWN, UNKNOWN], late.schema.field(account).type
    )
    late = late.set_column(account, late.schema.field(account), unknown)
    (landing / late_day.isoformat()).mkdir()
    pq.write_table(late, landing / late_day.isoformat() / "late.parquet")
    run_day(settings, [late_day])
    invoicing.draft(engine, catalog, MONTH)
    invoicing.finalize(engine, catalog, MONTH, accept_unknown=ACCEPTED)
    with engine.connect() as conn:
        number = conn.execute(
            text("SELECT min(invoice_number) FROM invoices WHERE kind = 'invoice' AND status = 'finalized'")
        ).scalar()
    invoicing.void(engine, number, "customer merged into another account")
    invoicing.draft(engine, catalog, MONTH)
    invoicing.finalize(engine, catalog, MONTH)
    invoicing.draft(engine, catalog, "2026-04", open_month=True)  # drafts of an open month beside it
    engine.dispose()
    return postgres_url


def _grant_credits(engine, catalog, landing, root) -> None:  # type: ignore[no-untyped-def]
    """Credits for three accounts with usage: a prepaid block, a promotional credit for one model that
    expires with March, one that starts after March (not applied yet) and one voided at once."""
    with engine.connect() as conn:
        first, second, third = conn.execute(
            text("SELECT DISTINCT account_id FROM billable_usage ORDER BY account_id LIMIT 3")
        ).scalars()
        model = conn.execute(
            text("SELECT model FROM billable_usage WHERE account_id = :a AND overage_tokens > 0 LIMIT 1"),
            {"a": second},
        ).scalar()
    path = root / "credits.csv"
    path.write_text(
        "grant_id,account_id,amount,kind,effective_from,expires,priority,models,reason\n"
        f"prepaid-1,{first},25.00,paid,2026-01-15,,0,,prepaid block\n"
        f"promo-1,{second},0.50,promotional,2026-03-01,2026-04-01,0,{model or ''},launch offer\n"
        f"promo-2,{third},40.00,promotional,2026-04-01,,0,,next quarter\n"
        f"promo-3,{third},40.00,promotional,2026-03-01,,0,,given by mistake\n"
    )
    credits.load(engine, path, catalog)
    credits.void(engine, "promo-3", "given by mistake", dt.date(2026, 3, 1))


def _psql(url: str, sql: str, user: str = "finance_reader") -> subprocess.CompletedProcess:
    u = make_url(url)
    return subprocess.run(
        [
            "psql",
            "-X",
            "--csv",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            u.host or "127.0.0.1",
            "-p",
            str(u.port or 5432),
            "-U",
            user,
            "-d",
            u.database,
            "-c",
            sql,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _value(cell: object) -> object:
    if cell is None or cell == "":
        return None
    if isinstance(cell, (int, Decimal)):
        return Decimal(cell)
    try:
        return Decimal(str(cell))
    except InvalidOperation:
        return cell


def _answer(url: str, sql: str) -> list[tuple]:
    done = _psql(url, sql)
    assert done.returncode == 0, done.stderr
    rows = list(csv.reader(io.StringIO(done.stdout)))
    return [tuple(_value(c) for c in r) for r in rows[1:]]


def _rows(expected: list[tuple]) -> list[tuple]:
    return [tuple(_value(c) for c in r) for r in expected]


# -- the raw truth, read as the owner -------------------------------------------------------------


def _raw(url: str) -> dict:
    engine = make_engine(url)
    with engine.connect() as conn:
        docs = [dict(r._mapping) for r in conn.execute(select(Invoice.__table__))]
        lines = [dict(r._mapping) for r in conn.execute(select(InvoiceLine.__table__))]
        pools = [dict(r._mapping) for r in conn.execute(select(PoolUsage.__table__))]
        plans = [dict(r._mapping) for r in conn.execute(select(InvoicePlan.__table__))]
        recon = conn.execute(text("SELECT * FROM finance_reconciliation ORDER BY month")).all()
        draws = [dict(r._mapping) for r in conn.execute(text("SELECT * FROM pool_draws"))]
        billable = [
            dict(r._mapping)
            for r in conn.execute(text("SELECT local_day, account_id, included_tokens FROM billable_usage"))
        ]
        known = {r[0] for r in conn.execute(text("SELECT DISTINCT account_id FROM accounts"))}
        accepted = [dict(r._mapping) for r in conn.execute(text("SELECT * FROM unknown_account_acceptances"))]
        grants = [dict(r._mapping) for r in conn.execute(text("SELECT * FROM credit_grants"))]
        voided = {r[0] for r in conn.execute(text("SELECT grant_id FROM credit_voids"))}
    engine.dispose()
    by_id = {d["invoice_id"]: d for d in docs}
    for line in lines:
        doc = by_id[line["invoice_id"]]
        line.update(
            period=doc["period"], status=doc["status"], charge=line["adjusted_type"] or line["line_type"]
        )
    return {
        "docs": docs,
        "lines": lines,
        "pools": pools,
        "recon": recon,
        "plans": plans,
        "draws": draws,
        "billable": billable,
        "known": known,
        "accepted": accepted,
        "grants": grants,
        "voided": voided,
    }


def _q(value: Decimal, places: str) -> Decimal:
    return value.quantize(Decimal(places), rounding=ROUND_HALF_UP)


def _final_usage(raw: dict) -> list[dict]:
    return [r for r in raw["lines"] if r["status"] == "finalized" and r["model"] is not None]


def _sum_by(rows: list[dict], key, value) -> dict:  # type: ignore[no-untyped-def]
    out: dict = defaultdict(lambda: Decimal(0))
    for r in rows:
        out[key(r)] += Decimal(value(r))
    return out


def _expect_1(raw: dict) -> list[tuple]:
    rev = _sum_by(_final_usage(raw), lambda r: (r["period"], r["speed_tier"]), lambda r: r["amount"])
    return [(*k, v) for k, v in sorted(rev.items())]


def _expect_2(raw: dict) -> list[tuple]:
    total = _sum_by(_final_usage(raw), lambda r: r["period"], lambda r: r["amount"])
    fast = _sum_by(
        [r for r in _final_usage(raw) if r["speed_tier"] == "ultrafast"],
        lambda r: r["period"],
        lambda r: r["amount"],
    )
    return [
        (m, _q(100 * fast.get(m, Decimal(0)) / t, "0.01") if t else None) for m, t in sorted(total.items())
    ]


def _expect_3(raw: dict) -> list[tuple]:
    latest = max(d["period"] for d in raw["docs"] if d["status"] == "finalized")
    billed = _sum_by(
        [d for d in raw["docs"] if d["status"] == "finalized" and d["period"] == latest],
        lambda d: d["account_id"],
        lambda d: d["total"],
    )
    return sorted(billed.items(), key=lambda kv: (-kv[1], kv[0]))[:10]


def _expect_4(raw: dict) -> list[tuple]:
    final = [r for r in raw["lines"] if r["status"] == "finalized"]
    fees = _sum_by(
        [r for r in final if r["charge"] == "plan_fee"], lambda r: r["period"], lambda r: r["amount"]
    )
    over = _sum_by(
        [r for r in final if r["charge"] == "overage_usage"], lambda r: r["period"], lambda r: r["amount"]
    )
    billed = _sum_by(
        [d for d in raw["docs"] if d["status"] == "finalized"], lambda d: d["period"], lambda d: d["total"]
    )
    return [(m, fees.get(m, 0), over.get(m, 0), b) for m, b in sorted(billed.items())]


def _expect_5(raw: dict) -> list[tuple]:
    return [
        (
            r.month,
            r.usage_daily_tokens,
            r.metered_tokens,
            r.billable_tokens,
            r.invoiced_tokens,
            r.unmetered_tokens,
            r.uninvoiced_tokens,
        )
        for r in raw["recon"]
        if r.unmetered_tokens or r.uninvoiced_tokens
    ]


def _expect_6(raw: dict) -> list[tuple]:
    by_number = {d["invoice_number"]: d for d in raw["docs"] if d["invoice_number"]}
    adj = _sum_by(
        [d for d in raw["docs"] if d["kind"] == "adjustment" and d["status"] == "finalized"],
        lambda d: d["corrects"],
        lambda d: d["total"],
    )
    out = []
    for number, total in sorted(adj.items()):
        original = by_number[number]
        out.append((number, original["account_id"], original["total"], total, original["total"] + total))
    return out


def _expect_7(raw: dict) -> list[tuple]:
    usage = _final_usage(raw)
    over = _sum_by(
        [r for r in usage if r["charge"] == "overage_usage"],
        lambda r: (r["period"], r["model"]),
        lambda r: r["quantity"],
    )
    rev = _sum_by(usage, lambda r: (r["period"], r["model"]), lambda r: r["amount"])
    rows = [(m, model, over.get((m, model), 0), v) for (m, model), v in rev.items()]
    return sorted(rows, key=lambda r: (r[0], -r[3], r[1]))


def _expect_8(raw: dict) -> list[tuple]:
    usage = _final_usage(raw)
    key = lambda r: (r["period"], r["model"], r["speed_tier"])  # noqa: E731
    over = _sum_by([r for r in usage if r["charge"] == "overage_usage"], key, lambda r: r["quantity"])
    rev = _sum_by(usage, key, lambda r: r["amount"])
    return [(*k, _q(rev[k] * 1_000_000 / q, "0.0001")) for k, q in sorted(over.items()) if q > 0]


def _expect_9(raw: dict) -> list[tuple]:
    usage = _final_usage(raw)
    inc = _sum_by(
        [r for r in usage if r["charge"] == "included_usage"], lambda r: r["period"], lambda r: r["quantity"]
    )
    over = _sum_by(
        [r for r in usage if r["charge"] == "overage_usage"], lambda r: r["period"], lambda r: r["quantity"]
    )
    months = sorted(set(inc) | set(over))
    return [
        (m, inc.get(m, 0), over.get(m, 0), _q(100 * inc.get(m, 0) / (inc.get(m, 0) + over.get(m, 0)), "0.01"))
        for m in months
    ]


def _expect_10(raw: dict) -> list[tuple]:
    groups: dict = defaultdict(list)
    for p in raw["pools"]:
        groups[(p["period_start"].strftime("%Y-%m"), p["plan"], p["pool"])].append(p)
    out = []
    for k, ps in sorted(groups.items()):
        util = sum(Decimal(p["used"]) / Decimal(p["allowance"]) for p in ps) / len(ps)
        out.append((*k, len(ps), sum(p["exhausted_at"] is not None for p in ps), _q(util, "0.0001")))
    return out


def _expect_11(raw: dict) -> list[tuple]:
    voided = [d for d in raw["docs"] if d["status"] == "void"]
    return [
        (d["invoice_number"], d["account_id"], d["total"], d["void_reason"])
        for d in sorted(voided, key=lambda d: d["invoice_number"])
    ]


def _expect_12(raw: dict) -> list[tuple]:
    by_period: dict = defaultdict(list)
    for d in raw["docs"]:
        if d["invoice_number"]:
            by_period[d["period"]].append(d["invoice_number"])
    return [(p, len(ns), min(ns), max(ns)) for p, ns in sorted(by_period.items())]


def _expect_13(raw: dict) -> list[tuple]:
    docs = {d["invoice_id"]: d for d in raw["docs"]}
    periods: dict = defaultdict(list)
    for p in raw["plans"]:
        periods[p["invoice_id"]].append(p)
    out = []
    for invoice_id, ps in periods.items():
        doc = docs[invoice_id]
        if len(ps) > 1 and doc["status"] == "finalized":
            for p in ps:
                fee = _q(Decimal(p["monthly_fee"] or 0), "0.01")
                plan = p["plan"] or "pay_as_you_go"
                out.append(
                    (
                        doc["invoice_number"],
                        doc["account_id"],
                        plan,
                        p["active_from"],
                        p["active_until"],
                        p["days"],
                        fee,
                    )
                )
    return [
        tuple(str(c) if isinstance(c, dt.date) else c for c in r)
        for r in sorted(out, key=lambda r: (r[0], r[3]))
    ]


def _expect_14(raw: dict) -> list[tuple]:
    final = [r for r in raw["lines"] if r["status"] == "finalized"]
    rev = _sum_by(final, lambda r: (r["period"], r["charge"]), lambda r: r["amount"])
    return [(*k, v) for k, v in sorted(rev.items())]


def _month_of(day) -> str:  # type: ignore[no-untyped-def]
    return day.strftime("%Y-%m") if isinstance(day, dt.date) else str(day)[:7]


def _expect_15(raw: dict) -> list[tuple]:
    drawn = _sum_by(
        raw["draws"], lambda r: (_month_of(r["local_day"]), r["model"], r["pool"]), lambda r: r["tokens"]
    )
    return [(*k, v) for k, v in sorted(drawn.items())]


def _expect_16(raw: dict) -> list[tuple]:
    by_period = _sum_by(raw["pools"], lambda r: _month_of(r["period_start"]), lambda r: r["used"])
    drawn = _sum_by(raw["draws"], lambda r: _month_of(r["local_day"]), lambda r: r["tokens"])
    metered = _sum_by(raw["billable"], lambda r: _month_of(r["local_day"]), lambda r: r["included_tokens"])
    invoiced = _sum_by(
        [r for r in raw["lines"] if r["status"] != "void" and r["charge"] == "included_usage"],
        lambda r: r["period"],
        lambda r: r["quantity"],
    )
    months = sorted(set(by_period) | set(drawn) | set(metered) | set(invoiced))
    out = []
    for m in months:
        p, d, n, v = (x.get(m, Decimal(0)) for x in (by_period, drawn, metered, invoiced))
        out.append((m, p, d, n, v, p - d, n - d, n - v))
    return out


def _expect_17(raw: dict) -> list[tuple]:
    accepted = {(a["period"], a["account_id"]): a for a in raw["accepted"]}
    tokens = _sum_by(
        [r for r in raw["lines"] if r["charge"] in ("included_usage", "overage_usage")],
        lambda r: r["invoice_id"],
        lambda r: r["quantity"],
    )
    out = []
    for d in raw["docs"]:
        key = (d["period"], d["account_id"])
        if d["invoice_number"] and (key in accepted or d["account_id"] not in raw["known"]):
            a = accepted.get(key)
            out.append(
                (
                    d["period"],
                    d["account_id"],
                    d["kind"],
                    d["status"],
                    tokens.get(d["invoice_id"], 0),
                    _q(Decimal(d["total"]), "0.01"),
                    "accepted" if a else "not accepted",
                    a["reason"] if a else None,
                    d["invoice_number"],
                )
            )
    return [r[:-1] for r in sorted(out, key=lambda r: (r[0], r[1], r[-1]))]


def _expect_18(raw: dict) -> list[tuple]:
    kinds = {g["grant_id"]: g["kind"] for g in raw["grants"]}
    credit = [r for r in raw["lines"] if r["status"] == "finalized" and r["charge"] == "credit"]
    amounts = _sum_by(credit, lambda r: (r["period"], kinds[r["grant_id"]]), lambda r: -r["amount"])
    docs = {d["invoice_id"]: d["account_id"] for d in raw["docs"]}
    accounts: dict = defaultdict(set)
    for r in credit:
        accounts[(r["period"], kinds[r["grant_id"]])].add(docs[r["invoice_id"]])
    assert amounts, "the scenario applies credits"
    return [(*k, len(accounts[k]), v) for k, v in sorted(amounts.items())]


def _expect_19(raw: dict) -> list[tuple]:
    credit = [r for r in raw["lines"] if r["status"] == "finalized" and r["charge"] == "credit"]
    applied = _sum_by(credit, lambda r: r["grant_id"], lambda r: -r["amount"])
    out = []
    for g in raw["grants"]:
        left = Decimal(g["amount"]) - applied.get(g["grant_id"], Decimal(0))
        if g["grant_id"] not in raw["voided"] and left > 0:
            used = applied.get(g["grant_id"], Decimal(0))
            expires = g["expires"].isoformat() if g["expires"] else None
            out.append((g["account_id"], g["grant_id"], g["kind"], g["amount"], used, left, expires))
    # PostgreSQL sorts an empty expiry (never) last
    return sorted(out, key=lambda r: (r[6] is None, r[6] or "", r[0], r[1]))


EXPECTED = [
    _expect_1,
    _expect_2,
    _expect_3,
    _expect_4,
    _expect_5,
    _expect_6,
    _expect_7,
    _expect_8,
    _expect_9,
    _expect_10,
    _expect_11,
    _expect_12,
    _expect_13,
    _expect_14,
    _expect_15,
    _expect_16,
    _expect_17,
    _expect_18,
    _expect_19,
]
# The questions whose answers the exports hold (the reconciliation, the pools and the plan periods are
# in the warehouse only): each is also checked against invoices.csv and invoice_lines.csv.
FROM_EXPORTS = [0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 13]


def doc_queries() -> list[tuple[str, str]]:
    text_ = (ROOT / "docs" / "finance.md").read_text()
    return re.findall(r"^### ([^\n]+)\n\n```sql\n(.*?)```", text_, flags=re.S | re.M)


def test_the_doc_has_at_least_ten_questions_each_with_a_check():
    queries = doc_queries()
    assert len(queries) >= 10 and len(queries) == len(EXPECTED)


@pytest.mark.parametrize("index", range(len(EXPECTED)), ids=[f"q{i + 1}" for i in range(len(EXPECTED))])
def test_each_documented_question_answers_what_the_invoices_say(finance_db, index):
    title, sql = doc_queries()[index]
    expected = _rows(EXPECTED[index](_raw(finance_db)))
    assert _answer(finance_db, sql) == expected, title


def _from_exports(url: str, folder) -> dict:  # type: ignore[no-untyped-def]
    """What the CSV exports of the month say, in the shape of ``_raw`` (the pools, reconciliation and
    void reasons, which the exports do not carry, from the tables)."""
    raw = _raw(url)
    engine = make_engine(url)
    export(engine, MONTH, folder, "csv")
    engine.dispose()
    reasons = {d["invoice_number"]: d["void_reason"] for d in raw["docs"]}
    with open(folder / "invoices.csv", newline="") as f:
        docs = [
            d
            | {
                "kind": d["document_type"],
                "total": Decimal(d["total"]),
                "void_reason": reasons[d["invoice_number"]],
            }
            for d in csv.DictReader(f)
        ]
    status = {d["invoice_number"]: d["status"] for d in docs}
    with open(folder / "invoice_lines.csv", newline="") as f:
        lines = [
            r
            | {
                "model": r["model"] or None,
                "status": status[r["invoice_number"]],
                "charge": r["adjusted_type"] or r["line_type"],
                "quantity": int(r["quantity"]),
                "amount": Decimal(r["amount"]),
            }
            for r in csv.DictReader(f)
        ]
    return raw | {"docs": docs, "lines": lines}


@pytest.mark.parametrize("index", FROM_EXPORTS, ids=[f"q{i + 1}" for i in FROM_EXPORTS])
def test_each_documented_question_answers_what_the_exports_say(finance_db, index, tmp_path):
    title, sql = doc_queries()[index]
    expected = _rows(EXPECTED[index](_from_exports(finance_db, tmp_path / "exports")))
    assert expected, title  # the scenario gives each question something to answer
    assert _answer(finance_db, sql) == expected, title


def test_money_in_the_views_has_two_decimals(finance_db):
    done = _psql(
        finance_db,
        "SELECT subtotal, total, plan_fee_amount, overage_amount FROM finance_invoice_summary "
        "UNION ALL SELECT amount, amount, amount, amount FROM finance_invoice_lines "
        "UNION ALL SELECT monthly_fee, monthly_fee, monthly_fee, monthly_fee FROM finance_invoice_plans",
    )
    assert done.returncode == 0, done.stderr
    cells = [c for row in list(csv.reader(io.StringIO(done.stdout)))[1:] for c in row]
    assert cells and all(re.fullmatch(r"-?\d+\.\d\d", c) for c in cells), {
        c for c in cells if not re.fullmatch(r"-?\d+\.\d\d", c)
    }
    assert "0.00" in cells


def test_the_scenario_has_what_the_questions_are_about(finance_db):
    raw = _raw(finance_db)
    statuses = {(d["kind"], d["status"]) for d in raw["docs"]}
    assert {("invoice", "finalized"), ("adjustment", "finalized"), ("invoice", "void")} <= statuses
    numbers = sorted(int(d["invoice_number"][-6:]) for d in raw["docs"] if d["invoice_number"])
    assert numbers == list(range(1, len(numbers) + 1))  # gapless across all finalize runs
    assert all(r.unmetered_tokens == 0 and r.uninvoiced_tokens == 0 for r in raw["recon"])
    assert _expect_13(raw)  # months with more than one plan period (accounts that start mid-month)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM usage_daily LIMIT 1",
        "SELECT * FROM accounts LIMIT 1",
        "SELECT * FROM billable_usage LIMIT 1",
        "SELECT * FROM invoices LIMIT 1",
        "SELECT * FROM invoice_lines LIMIT 1",
        "SELECT * FROM ingest_runs LIMIT 1",
        "SELECT * FROM alembic_version",
        "INSERT INTO invoice_counters VALUES ('2099-01', 0)",
        "UPDATE finance_pool_utilization SET used = 0",
        "DELETE FROM finance_pool_utilization",
        "CREATE TABLE finance_scratch (x int)",
    ],
)
def test_finance_reader_cannot_read_raw_tables_or_write(finance_db, sql):
    done = _psql(finance_db, sql)
    assert done.returncode != 0
    assert "permission denied" in done.stderr


def test_no_finance_view_exposes_user_ids_or_events(finance_db):
    done = _psql(
        finance_db,
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'",
    )
    assert done.returncode == 0, done.stderr
    visible = {tuple(r) for r in csv.reader(io.StringIO(done.stdout))}
    tables = {t for t, _ in visible} - {"table_name"}
    assert tables and all(t.startswith("finance_") for t in tables)
    assert not any("user" in c or c == "event_id" for _, c in visible)


def test_finance_reader_sees_no_gap_where_the_reconciliation_matches(finance_db):
    done = _psql(finance_db, "SELECT count(*) FROM finance_reconciliation_gaps")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "0"
