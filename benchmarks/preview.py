"""The migration preview against what it stands in for: metering the month and drafting its invoices.

    .venv/bin/python -m benchmarks.preview [--events 10000000] [--users 10000]

Writes a lake of generator events for March 2026 (about ``--events`` in the month, plus the week
before it that March's weekly pools reach), with enough accounts that about ``--users`` of them use
the fast model that month. Then, as separate processes and in one run, on the same lake and a SQLite
warehouse:
- the references: `usage-billing quota meter --month 2026-03` plus `invoices draft --month 2026-03`
  (``--open-month``: nothing was ingested through the landing area, the work is the same), once on
  the whole lake and once on a lake holding only the events of the fast model's users (meter and
  draft "for those accounts");
- `usage-billing retirement preview --model gpt-5.3-codex-spark --month 2026-03` on every priced tier
  of its successor (two here), which meters the affected accounts' events once as they are and once per
  tier as rewritten, and builds the month's invoices for each.
The preview's current totals are checked to equal the drafts, account by account.
Target (issue 27): the preview in at most 2x the time of meter plus draft.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sqlite3
from decimal import Decimal
from pathlib import Path

import pyarrow.compute as pc

from benchmarks.common import ROOT, cli, command_line, machine, run_measured, write_event_lake, write_section

MONTH, START, DAYS = "2026-03", dt.date(2026, 2, 23), 37  # Feb 23 (the week of Mar 1) .. Mar 31
FAST = "gpt-5.3-codex-spark"


def _generate(root: Path, events: int, accounts: int) -> dict:
    from pipelines.jobs.generate import GeneratorConfig, generate
    from schemas.catalog import load_catalog

    catalog = load_catalog(ROOT / "config" / "catalog.toml")
    cfg = GeneratorConfig(
        start=START,
        days=DAYS,
        accounts=accounts,
        events_per_day=events // 31,
        seed=9,
        duplicate_rate=0,
        late_rate=0,
    )
    gen = generate(catalog, cfg)
    table = gen.events.drop_columns(["landing_date"])
    march = pc.equal(pc.strftime(table["event_time"], "%Y-%m"), MONTH)
    fast = table.filter(pc.and_(march, pc.equal(table["model"], FAST)))
    users = pc.unique(fast["account_id"])
    of_users = table.filter(pc.is_in(table["account_id"], value_set=users))
    write_event_lake(root / "all", table, gen.accounts)
    # the second reference: the same steps on a lake holding only the fast model's users
    write_event_lake(
        root / "users", of_users, [a for a in gen.accounts if a["account_id"] in set(users.to_pylist())]
    )
    return {
        "events": table.num_rows,
        "march": int(pc.sum(pc.cast(march, "int64")).as_py()),
        "accounts": len(gen.accounts),
        "users": len(users),
        "users_events": of_users.num_rows,
    }


def _meter_and_draft(root: Path) -> tuple[float, float, float, float]:
    """(meter s, meter MB, draft s, draft MB) of a fresh warehouse on ``root``'s lake."""
    base = cli(root / "w.db", root / "lake")
    run_measured([*base, "db", "upgrade"])
    run_measured([*base, "accounts", "load", str(root / "accounts.csv")])
    meter_s, meter_rss, _ = run_measured([*base, "quota", "meter", "--month", MONTH])
    draft_s, draft_rss, _ = run_measured([*base, "invoices", "draft", "--month", MONTH, "--open-month"])
    return meter_s, meter_rss, draft_s, draft_rss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000_000, help="events in the month")
    parser.add_argument("--users", type=int, default=10_000, help="accounts on the fast model")
    parser.add_argument("--workdir", default="/tmp/ub-bench-preview")
    args = parser.parse_args()
    root = Path(args.workdir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    # The generator gives the fast model to a bit under one account in five.
    data = _generate(root, args.events, accounts=int(args.users * 5.7))
    print(data, flush=True)
    meter_s, meter_rss, draft_s, draft_rss = _meter_and_draft(root / "all")
    u_meter_s, u_meter_rss, u_draft_s, u_draft_rss = _meter_and_draft(root / "users")
    out = root / "preview"
    base = cli(root / "all" / "w.db", root / "all" / "lake")
    preview_s, preview_rss, said = run_measured(
        [*base, "retirement", "preview", "--model", FAST, "--month", MONTH, "--out", str(out)]
    )
    print(said, flush=True)
    payload = json.loads((out / "preview.json").read_text())
    with sqlite3.connect(root / "all" / "w.db") as conn:
        drafts = dict(conn.execute("SELECT account_id, total FROM invoices WHERE period = ?", (MONTH,)))
    rows = payload["accounts"]
    assert rows and all(Decimal(r["current_total"]) == Decimal(str(drafts[r["account_id"]])) for r in rows)
    tiers = ", ".join(payload["tiers"])
    affected = payload["tiers"][next(iter(payload["tiers"]))]["accounts"]
    reference = meter_s + draft_s
    users_reference = u_meter_s + u_draft_s
    body = f"""
Command: `{command_line("benchmarks.preview")}`
Machine: {machine()}
Data: generator events of {START} .. 2026-03-31, {data["events"]:,} in all, {data["march"]:,} of them
(UTC) in {MONTH}; {data["accounts"]:,} accounts, {data["users"]:,} of them on {FAST} in the month
({affected:,} affected accounts in their local months; their events: {data["users_events"]:,}). SQLite
warehouse, local lake; each command a separate process, in one run.

| step | wall | peak RSS | x all accounts | x those accounts |
|---|---:|---:|---:|---:|
| `quota meter --month {MONTH}`, all accounts | {meter_s:.1f} s | {meter_rss:,.0f} MB | | |
| `invoices draft --month {MONTH}`, all accounts | {draft_s:.1f} s | {draft_rss:,.0f} MB | | |
| reference 1: meter + draft, all accounts | {reference:.1f} s | | 1.00 | |
| `quota meter --month {MONTH}`, a lake of only the {data["users"]:,} users' events | {u_meter_s:.1f} s | {u_meter_rss:,.0f} MB | | |
| `invoices draft --month {MONTH}`, the same | {u_draft_s:.1f} s | {u_draft_rss:,.0f} MB | | |
| reference 2: meter + draft, those accounts | {users_reference:.1f} s | | | 1.00 |
| `retirement preview --model {FAST} --month {MONTH}` ({tiers}) | {preview_s:.1f} s | {preview_rss:,.0f} MB | {preview_s / reference:.2f} | {preview_s / users_reference:.2f} |

The preview reads the full lake (all accounts) and meters the affected accounts' events once as they
are and once per tier as rewritten. Its current totals equal the drafts' totals for all
{len(rows) // max(len(payload["tiers"]), 1):,} affected accounts (checked in the run). Target
(issue 27): at most 2x meter plus draft for those accounts (reference 2).
"""
    write_section("Migration preview (issue 27)", body)


if __name__ == "__main__":
    main()
