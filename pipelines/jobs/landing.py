"""The generated scenario as a landing area: one folder per landing date with its events as JSON lines
(some gzipped), Parquet and CloudEvents files, and the accounts CSV beside them."""

from __future__ import annotations

import csv
import gzip
import itertools
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.jobs.generate import Generated, GeneratorConfig


def to_json_lines(table: pa.Table) -> bytes:
    """Encode a table of EVENT_SCHEMA as JSON lines, column by column (no per-row Python)."""
    pieces: list[pa.Array] = []
    for i, f in enumerate(table.schema):
        col = table.column(i).combine_chunks()
        if pa.types.is_timestamp(f.type):
            text = pc.binary_join_element_wise('"', pc.strftime(col, "%Y-%m-%dT%H:%M:%SZ"), '"', "")
        elif pa.types.is_string(f.type):
            escaped = pc.replace_substring(pc.replace_substring(col, "\\", "\\\\"), '"', '\\"')
            text = pc.binary_join_element_wise('"', escaped, '"', "")
        else:
            text = col.cast(pa.string())
        pieces.append(pa.scalar(("," if i else "{") + f'"{f.name}":'))
        pieces.append(pc.fill_null(text, "null"))
    lines = pc.binary_join_element_wise(*pieces, "}\n", "")
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    if len(lines) == 0:
        return b""
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)[lines.offset : lines.offset + len(lines) + 1]
    return lines.buffers()[2].to_pybytes()[offsets[0] : offsets[-1]]


def _write_parts(table: pa.Table, folder: str, stem: str, suffix: str, rows_per_file: int) -> list[str]:
    """Write ``table`` as one file, or several of at most ``rows_per_file`` rows (``stem-NN``)."""
    if table.num_rows == 0:
        return []
    parts = max(1, -(-table.num_rows // rows_per_file))
    paths = []
    for i in range(parts):
        chunk = table.slice(i * rows_per_file, rows_per_file)
        path = os.path.join(folder, f"{stem}{f'-{i:02d}' if parts > 1 else ''}{suffix}")
        if suffix == ".parquet":
            pq.write_table(chunk, path, row_group_size=256 * 1024, compression="zstd")
        else:
            with gzip.open(path, "wb", compresslevel=1) as handle:
                handle.write(to_json_lines(chunk))
        paths.append(path)
    return paths


def _write_outcomes(outcomes: pa.Table, cfg: GeneratorConfig, landing_root: str, rng) -> list[str]:  # type: ignore[no-untyped-def]
    """Task outcomes beside the events: ``outcomes-D.parquet`` and/or ``outcomes-D.jsonl.gz``."""
    landing = outcomes["landing_date"].to_numpy().astype("datetime64[D]")
    order = np.argsort(landing, kind="stable")
    table = outcomes.drop_columns(["landing_date"]).take(pa.array(order))
    landing = landing[order]
    to_jsonl = {
        "mixed": rng.random(table.num_rows) < 0.5,
        "parquet": np.zeros(table.num_rows, bool),
        "jsonl": np.ones(table.num_rows, bool),
    }[cfg.fmt]
    written: list[str] = []
    bounds = np.append(np.searchsorted(landing, np.unique(landing)), len(landing))
    for b0, b1 in itertools.pairwise(bounds):
        day = str(landing[b0])
        folder = os.path.join(landing_root, day)
        os.makedirs(folder, exist_ok=True)
        part = table.slice(b0, b1 - b0)
        mask = pa.array(to_jsonl[b0:b1])
        written += _write_parts(
            part.filter(pc.invert(mask)), folder, f"outcomes-{day}", ".parquet", cfg.rows_per_file
        )
        written += _write_parts(part.filter(mask), folder, f"outcomes-{day}", ".jsonl.gz", cfg.rows_per_file)
    return written


def write_landing(gen: Generated, cfg: GeneratorConfig, landing_root: str) -> list[str]:
    """One folder per landing day: ``gateway-D.parquet`` and/or ``batch-D.jsonl.gz``, the day's task outcomes
    (``outcomes-D.*``); plus accounts.csv."""
    rng = np.random.default_rng(cfg.seed + 1)
    landing = gen.events["landing_date"].to_numpy().astype("datetime64[D]")
    order = np.argsort(landing, kind="stable")
    table = gen.events.drop_columns(["landing_date"]).take(pa.array(order))
    landing = landing[order]
    to_jsonl = {
        "mixed": rng.random(table.num_rows) < 0.3,
        "parquet": np.zeros(table.num_rows, bool),
        "jsonl": np.ones(table.num_rows, bool),
    }[cfg.fmt]
    written: list[str] = []
    bounds = np.searchsorted(landing, np.unique(landing))
    bounds = np.append(bounds, len(landing))
    for b0, b1 in itertools.pairwise(bounds):
        day = str(landing[b0])
        folder = os.path.join(landing_root, day)
        os.makedirs(folder, exist_ok=True)
        part = table.slice(b0, b1 - b0)
        mask = pa.array(to_jsonl[b0:b1])
        pq_part, js_part = part.filter(pc.invert(mask)), part.filter(mask)
        written += _write_parts(pq_part, folder, f"gateway-{day}", ".parquet", cfg.rows_per_file)
        written += _write_parts(js_part, folder, f"batch-{day}", ".jsonl.gz", cfg.rows_per_file)
    if gen.outcomes is not None and gen.outcomes.num_rows:
        written += _write_outcomes(gen.outcomes, cfg, landing_root, rng)
    os.makedirs(landing_root, exist_ok=True)
    with open(os.path.join(landing_root, "accounts.csv"), "w", newline="") as handle:
        writer = csv.DictWriter(
            handle, fieldnames=["account_id", "plan", "timezone", "active_from", "active_until"]
        )
        writer.writeheader()
        writer.writerows(gen.accounts)
    return written
