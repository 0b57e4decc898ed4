"""What a run left behind, as a comparable digest: every warehouse table and every lake dataset.

    .venv/bin/python -m benchmarks.snapshot take --database data/warehouse.db --lake data/lake --out before.json
    .venv/bin/python -m benchmarks.snapshot diff before.json after.json

``--drop-column TABLE.COLUMN`` leaves out a column the change added on purpose.

Used to show that a change which should not change behaviour (a restructuring) does not: run
``usage-billing demo`` on the commit before and after, take a snapshot of each, and diff them.

Each table's rows are read whole, sorted and hashed; so is each lake dataset (all its Parquet files
under ``DATASET/date=D/``, per partition). Columns that hold wall-clock times or run ids differ
between any two runs, so they are left out of the digest (listed in ``VOLATILE``; their row counts
are still compared). ``diff`` names each table or partition whose digest or row count differs and
exits 1 if any does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa

# Wall-clock times and run identities: different on every run of the same code.
VOLATILE = {
    "ingested_at",
    "queued_at",
    "started_at",
    "finished_at",
    "created_at",
    "updated_at",
    "loaded_at",
    "metered_at",
    "computed_at",
    "accepted_at",
    "checked_at",
    "recorded_at",
    "finalized_at",
    "voided_at",
    "issued_at",
    "bound_at",
    "run_id",
    "invoice_id",  # a uuid per document (numbers and contents are compared)
    "lake_id",  # a uuid per lake
    "lake_path",  # where the checkout ran
    "ingest_run",
    "seconds",
    "duration_s",
}


def _digest(table: pa.Table, drop: set[str] = frozenset()) -> tuple[str, list[str]]:
    keep = sorted(c for c in table.column_names if c not in VOLATILE and c not in drop)
    table = table.select(keep)
    rows = sorted(json.dumps(row, default=str, sort_keys=True) for row in table.to_pylist())
    h = hashlib.sha256()
    for row in rows:
        h.update(row.encode())
        h.update(b"\n")
    return h.hexdigest(), keep


def take(database: str, lake: str, drop: list[str] = ()) -> dict:
    """``drop``: ``table.column`` names a change added on purpose (left out of the digest)."""
    engine = sa.create_engine(f"sqlite:///{database}")
    out: dict = {"warehouse": {}, "lake": {}}
    with engine.connect() as conn:
        for name in sorted(sa.inspect(conn).get_table_names()):
            if name == "alembic_version":
                continue
            result = conn.execute(sa.text(f'SELECT * FROM "{name}"'))
            columns = list(result.keys())
            rows = [dict(zip(columns, r, strict=True)) for r in result]
            # a lake's path in a value (a lock's name) is where the run was, not what it did
            values = [{k: str(v).replace(lake, "<lake>") for k, v in r.items()} for r in rows]
            table = pa.Table.from_pylist(values) if rows else None
            gone = {d.split(".", 1)[1] for d in drop if d.split(".", 1)[0] == name}
            digest, keep = _digest(table, gone) if table is not None else ("", columns)
            out["warehouse"][name] = {"rows": len(rows), "digest": digest, "columns": keep}
    root = Path(lake)
    for dataset in sorted(p for p in root.iterdir() if p.is_dir()):
        for part in sorted(p for p in dataset.iterdir() if p.is_dir()):
            files = sorted(part.rglob("*.parquet"))
            if not files:
                continue
            table = pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")
            digest, keep = _digest(table)
            out["lake"][f"{dataset.name}/{part.name}"] = {"rows": table.num_rows, "digest": digest}
    return out


def diff(before: dict, after: dict) -> list[str]:
    problems = []
    for area in ("warehouse", "lake"):
        for key in sorted(set(before[area]) | set(after[area])):
            b, a = before[area].get(key), after[area].get(key)
            if b is None or a is None:
                problems.append(f"{area} {key}: only {'after' if b is None else 'before'}")
            elif b != a:
                problems.append(
                    f"{area} {key}: before {b['rows']} rows {b['digest'][:12]}, after {a['rows']} rows {a['digest'][:12]}"
                )
    return problems


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("take")
    t.add_argument("--database", default="data/warehouse.db")
    t.add_argument("--lake", default="data/lake")
    t.add_argument("--out", required=True)
    t.add_argument("--drop-column", action="append", default=[], help="TABLE.COLUMN to leave out")
    d = sub.add_parser("diff")
    d.add_argument("before")
    d.add_argument("after")
    args = parser.parse_args()
    if args.command == "take":
        snap = take(args.database, args.lake, args.drop_column)
        Path(args.out).write_text(json.dumps(snap, indent=1, sort_keys=True))
        print(f"{len(snap['warehouse'])} tables, {len(snap['lake'])} lake partitions -> {args.out}")
        return
    before, after = (json.loads(Path(p).read_text()) for p in (args.before, args.after))
    problems = diff(before, after)
    for p in problems:
        print(p)
    print(
        f"{len(before['warehouse'])} tables and {len(before['lake'])} lake partitions compared: "
        f"{len(problems)} differ"
    )
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
