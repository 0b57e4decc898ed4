"""Row checks alone: ``validate`` on the first row groups of a landing Parquet file, best of 5.

    .venv/bin/python -m benchmarks.validate_rows FILE [--row-groups 4]

Run it from two checkouts (``PYTHONPATH=<checkout>``) on the same file to compare commits side by side:
the whole ingest's wall time moves too much on a shared machine to show a few percent.
"""

from __future__ import annotations

import argparse
import datetime as dt
import time

from pipelines.ingest.parquet_files import read_parquet_unit
from pipelines.ingest.validate import Rules, validate
from schemas.catalog import load_catalog


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--row-groups", type=int, default=4)
    parser.add_argument("--day", default="2026-03-02", help="the landing date the rows are checked for")
    args = parser.parse_args()
    catalog = load_catalog("config/catalog.toml")
    day = dt.date.fromisoformat(args.day)
    # Rules.for_catalog (the price check) came with issue 22; an older checkout builds its rules plainly
    for_catalog = getattr(Rules, "for_catalog", None)
    rules = for_catalog(catalog) if for_catalog else Rules(frozenset(catalog.model_ids))
    chunks = [read_parquet_unit(args.file, i, day) for i in range(args.row_groups)]
    rows = sum(c.table.num_rows for c in chunks)
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for chunk in chunks:
            validate(chunk, day, "bench", rules)
        best = min(best, time.perf_counter() - started)
    print(f"{rows:,} rows in {len(chunks)} row groups: validate best of 5 {best * 1000:.1f} ms")


if __name__ == "__main__":
    main()
