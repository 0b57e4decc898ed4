"""Drafting 100k accounts with credits and commitments beside drafting the same month without them.

    .venv/bin/python -m benchmarks.credits [--accounts 100000] [--postgres postgresql+psycopg://...]

The month of ``benchmarks.invoices`` (every account on a plan, 2 model x tier combinations on 6 days,
3 token kinds) is loaded into two fresh warehouses. One also holds credit grants for every account
(1.5 a account on average: prepaid blocks, promotional credits with expiry, some restricted to one
model, priorities) and a share of its accounts on a plan with a monthly minimum; the other none.
Both drafts run as the CLI does (``usage-billing invoices draft``, process start-up included), in
the same run, alternating. Target: with credits within 1.3x of without.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import text

from benchmarks.common import command_line, machine, write_section
from benchmarks.invoices import MONTH, _cli, _load, synthetic_month
from pipelines.warehouse.engine import make_engine


def grants_csv(accounts: pa.Table, path: Path, seed: int = 11) -> int:
    """Every account gets a grant, every other one a second: kinds, expiry inside and after the month,
    priorities and a model filter on some; written as a credits CSV."""
    rng = np.random.default_rng(seed)
    ids = accounts["account_id"].to_pylist()
    rows = ["grant_id,account_id,amount,kind,effective_from,expires,priority,models,reason"]
    for n, account in enumerate(ids):
        for k in range(1 + (n % 2)):
            kind = "promotional" if rng.random() < 0.5 else "paid"
            expires = rng.choice(["", "2026-10-01", "2026-12-01"])
            models = "gpt-5.6-sol" if rng.random() < 0.3 else ""
            amount = f"{rng.integers(1, 400)}.{rng.integers(0, 100):02d}"
            rows.append(
                f"b-{n}-{k},{account},{amount},{kind},2026-08-01,{expires},{rng.integers(0, 3)},{models},bench"
            )
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return len(rows) - 1


def with_commitments(accounts: pa.Table) -> pa.Table:
    """A quarter of the accounts on the team plan (a monthly minimum)."""
    n = accounts.num_rows
    team = pa.array(np.arange(n) % 4 == 0)
    return accounts.set_column(
        accounts.schema.get_field_index("plan"), "plan", pc.if_else(team, "team", accounts["plan"])
    )


def _drafted(url: str) -> tuple[int, int]:
    engine = make_engine(url)
    with engine.connect() as conn:
        credit = conn.execute(
            text("SELECT count(*) FROM invoice_lines WHERE line_type IN ('credit', 'minimum_true_up')")
        ).scalar_one()
        docs = conn.execute(text("SELECT count(*) FROM invoices")).scalar_one()
    engine.dispose()
    return int(docs), int(credit)


def _database(url: str, name: str) -> str:
    """``url`` with the database ``name``, created on its server if missing."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        if not conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).first():
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--accounts", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--postgres", default=os.environ.get("USAGE_BILLING_TEST_POSTGRES_URL"))
    parser.add_argument("--workdir", default="/tmp/ub-bench-credits")
    args = parser.parse_args()
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    accounts, billable = synthetic_month(args.accounts)
    credited = with_commitments(accounts)
    n_grants = grants_csv(accounts, work / "grants.csv")
    targets = [("SQLite", f"sqlite:///{work / 'plain.db'}", f"sqlite:///{work / 'credits.db'}")]
    if args.postgres:
        targets.append(
            ("PostgreSQL", *(_database(args.postgres, f"ub_bench_{n}") for n in ("plain", "credits")))
        )
    rows = []
    for label, plain_url, credit_url in targets:
        times: dict[str, list[float]] = {"plain": [], "credits": []}
        rss: dict[str, float] = {}
        _load(plain_url, accounts, billable)
        _load(credit_url, credited, billable)
        _, _, out = _cli(credit_url, "credits", "load", str(work / "grants.csv"))
        assert "loaded" in out, out
        for _ in range(args.rounds):  # alternating; a draft replaces the month's drafts of the round before
            for name, url in (("plain", plain_url), ("credits", credit_url)):
                seconds, peak, out = _cli(url, "invoices", "draft", "--month", MONTH)
                times[name].append(seconds)
                rss[name] = max(rss.get(name, 0.0), peak)
        docs, extra = _drafted(credit_url)
        assert docs == args.accounts and extra > args.accounts // 2, (docs, extra)
        plain, credit = min(times["plain"]), min(times["credits"])
        rows.append(
            f"| {label} | {plain:.1f} s | {credit:.1f} s | **{credit / plain:.2f}x** | "
            f"{rss['plain']:,.0f} / {rss['credits']:,.0f} MB | {extra:,} |"
        )
        print(rows[-1], flush=True)
    shutil.rmtree(work, ignore_errors=True)
    body = "\n".join(rows)
    write_section(
        "Credits and commitments at draft",
        f"""
Command: `{command_line("benchmarks.credits")}`
Machine: {machine()}
Data: the month of the invoice benchmark ({args.accounts:,} accounts, {billable.num_rows:,} billable rows); the
credited warehouse also holds {n_grants:,} grants (every account one, every other a second: prepaid and
promotional, expiring or not, 30% restricted to one model, priorities 0-2) and a quarter of the
accounts on a plan with a monthly minimum. Best of {args.rounds} drafts each, alternating, as
`usage-billing invoices draft --month {MONTH}` (process start-up included; each draft replaces the
drafts of the one before, as a redraft does).

| database | draft without credits | draft with credits | ratio | peak RSS (without / with) | credit and true-up lines |
|---|---:|---:|---:|---:|---:|
{body}

Target: drafting with credits within 1.3x of drafting without. What credits add: reading the
month's eligible grants with what earlier months took of each (one indexed query), one pass over the
accounts that have grants (per account and grant, never per line or event), and the extra lines.
""",
    )


if __name__ == "__main__":
    main()
