"""Run by ``test_fourth_token_kind.py`` in a process of its own: the token-kind registry gains a fourth
kind (cache writes, a part of the input) before any other module is imported, then the month runs from
landing files to exported documents with nothing else changed. Prints what each stage holds as JSON.

Usage: python -m tests.schemas.fourth_kind_driver FOLDER
"""

from __future__ import annotations

import sys

from schemas import tokens

# The registry entry, exactly as a provider would add it: a part of the input, optional for producers.
CACHE_WRITE = tokens.TokenKind(
    "cache_write", "cache_write_tokens", "input_tokens", "Cache write tokens", required=False
)
tokens.KINDS = (*tokens.KINDS[:2], CACHE_WRITE, *tokens.KINDS[2:])

import datetime as dt  # noqa: E402  (after the registry: every schema derives from it at import)
import json  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
from decimal import Decimal  # noqa: E402
from pathlib import Path  # noqa: E402

import pyarrow as pa  # noqa: E402
from sqlalchemy import func, select, text  # noqa: E402

from billing.effectiveness import request_costs  # noqa: E402
from pipelines.cli import main  # noqa: E402
from pipelines.settings import Settings  # noqa: E402
from schemas.catalog import load_catalog  # noqa: E402
from schemas.warehouse import BillableUsage, InvoiceLine, UsageDaily  # noqa: E402
from tests.conftest import CATALOG_PATH, cli_args, close_month  # noqa: E402

MONTH = "2026-03"
DAYS = (dt.date(2026, 3, 2), dt.date(2026, 3, 3))
ACCOUNTS = (("acct-pro", "pro"), ("acct-free", "free"), ("acct-payg", ""))


def catalog_with_prices(folder: Path) -> Path:
    """The default catalog with a ``cache_write`` price on every row (1.25x the input price)."""
    text_ = CATALOG_PATH.read_text(encoding="utf-8")

    def add(match: re.Match) -> str:
        price = Decimal(match.group(2)) * Decimal("1.25")
        return f'{match.group(0)}\ncache_write = "{price}"'

    path = folder / "catalog.toml"
    path.write_text(re.sub(r'(?m)^(input = "([0-9.]+)")$', add, text_), encoding="utf-8")
    return path


def events() -> list[dict]:
    rng = random.Random(4)
    out = []
    for day in DAYS:
        for i in range(150):
            account = ACCOUNTS[i % 3][0]
            inp = rng.randint(2_000, 60_000)
            cached = rng.randint(0, inp // 2)
            event = {
                "event_id": f"e-{day}-{i}",
                "event_time": f"{day}T{i % 24:02d}:{i % 60:02d}:00Z",
                "account_id": account,
                "model": "gpt-5.6-sol" if i % 4 else "gpt-5.2-mini",
                "speed_tier": "standard" if i % 5 else "priority",
                "input_tokens": inp,
                "cached_input_tokens": cached,
                "output_tokens": rng.randint(100, 9_000),
                "duration_ms": 4000,
                "status": "ok",
            }
            if i % 10:  # every tenth event is from a producer that does not send the new field yet
                event["cache_write_tokens"] = rng.randint(0, inp - cached)
            out.append(event)
    return out


def run(folder: Path) -> dict:
    catalog_path = catalog_with_prices(folder)
    catalog = load_catalog(catalog_path)
    landing = folder / "landing"
    sent = events()
    bad = dict(sent[0], event_id="e-bad", cached_input_tokens=600, cache_write_tokens=600, input_tokens=1000)
    for day in DAYS:
        (landing / day.isoformat()).mkdir(parents=True)
        rows = [e for e in sent if e["event_time"].startswith(day.isoformat())]
        if day == DAYS[0]:
            rows.append(bad)
        (landing / day.isoformat() / "usage.jsonl").write_text("".join(json.dumps(e) + "\n" for e in rows))
    accounts = folder / "accounts.csv"
    accounts.write_text(
        "account_id,plan,timezone,active_from,active_until\n"
        + "".join(f"{a},{p},UTC,2026-01-01,\n" for a, p in ACCOUNTS)
    )
    settings = Settings(str(catalog_path), f"sqlite:///{folder / 'w.db'}", str(folder / "lake"), str(landing))
    args = cli_args(settings)
    steps = {}
    steps["upgrade"] = main([*args, "db", "upgrade"])
    steps["accounts"] = main([*args, "accounts", "load", str(accounts)])
    steps["run-day"] = max(main([*args, "run-day", "--date", str(day)]) for day in DAYS)
    close_month(settings, MONTH, folder)
    steps["draft"] = main([*args, "invoices", "draft", "--month", MONTH])
    steps["finalize"] = main([*args, "invoices", "finalize", "--month", MONTH])
    exports = folder / "exports"
    steps["export"] = main(
        [*args, "invoices", "export", "--month", MONTH, "--out", str(exports), "--format", "csv,html"]
    )
    from pipelines.warehouse.engine import make_engine

    engine = make_engine(settings.database_url)
    with engine.connect() as conn:
        usage = conn.execute(select(func.sum(UsageDaily.cache_write_tokens))).scalar_one()
        billable = dict(
            conn.execute(
                select(
                    BillableUsage.token_kind,
                    func.sum(BillableUsage.included_tokens + BillableUsage.overage_tokens),
                ).group_by(BillableUsage.token_kind)
            ).all()
        )
        included = dict(
            conn.execute(
                select(BillableUsage.token_kind, func.sum(BillableUsage.included_tokens)).group_by(
                    BillableUsage.token_kind
                )
            ).all()
        )
        lines = conn.execute(
            select(InvoiceLine.line_type, InvoiceLine.model, InvoiceLine.speed_tier, InvoiceLine.token_kind)
            .add_columns(InvoiceLine.quantity, InvoiceLine.unit_price)
            .where(InvoiceLine.token_kind == "cache_write")
        ).all()
        revenue = conn.execute(
            text("SELECT sum(tokens) FROM finance_revenue_by_model_tier WHERE token_kind = 'cache_write'")
        ).scalar_one()
    quarantine_rows = sorted((folder / "lake").rglob("*.parquet"))
    reasons = []
    import pyarrow.parquet as pq

    for path in quarantine_rows:
        if "quarantine" in path.parts:
            reasons += pq.read_table(path, columns=["reason"])["reason"].to_pylist()
    one = pa.table(
        {
            "model": ["gpt-5.6-sol"],
            "speed_tier": ["standard"],
            "day": pa.array([DAYS[0]], pa.date32()),
            "input_tokens": [1_000_000],
            "cached_input_tokens": [200_000],
            "cache_write_tokens": [300_000],
            "output_tokens": [0],
        }
    )
    return {
        "steps": steps,
        "kinds": list(tokens.ids()),
        "sent": {
            "cache_write": sum(e.get("cache_write_tokens", 0) for e in sent),
            "input": sum(
                e["input_tokens"] - e["cached_input_tokens"] - e.get("cache_write_tokens", 0) for e in sent
            ),
            "cached_input": sum(e["cached_input_tokens"] for e in sent),
            "output": sum(e["output_tokens"] for e in sent),
        },
        "usage_daily_cache_write": int(usage or 0),
        "billable": {k: int(v) for k, v in billable.items()},
        "included": {k: int(v) for k, v in included.items()},
        "cache_write_lines": [[*map(str, r)] for r in lines],
        "finance_revenue_cache_write_tokens": int(revenue or 0),
        "reasons": reasons,
        "request_cost": str(request_costs(one, catalog)[0].as_py()),
        "exports": str(exports),
        "cache_write_price": str(
            next(p for p in catalog.prices if p.model == "gpt-5.6-sol" and p.tier == "standard").per_million(
                "cache_write"
            )
        ),
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(run(Path(sys.argv[1]))))
