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


def _iso(col: pa.Array) -> pa.Array:
    """UTC timestamps as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``: what ``strftime`` gives, 5x as fast (a cast
    of whole seconds to text, and the microseconds beside it)."""
    seconds = pc.cast(pc.cast(col, pa.timestamp("s", tz="UTC"), safe=False), pa.timestamp("s"))
    text = pc.replace_substring(pc.cast(seconds, pa.string()), " ", "T")
    micros = pc.fill_null(col.cast(pa.int64()), 0).to_numpy(zero_copy_only=False) % 1_000_000
    return pc.binary_join_element_wise(
        text, ".", pc.utf8_lpad(pa.array(micros).cast(pa.string()), 6, "0"), "Z", ""
    )


def to_json_lines(table: pa.Table) -> bytes:
    """Encode a table of EVENT_SCHEMA as JSON lines, column by column (no per-row Python)."""
    pieces: list[pa.Array] = []
    for i, f in enumerate(table.schema):
        col = table.column(i).combine_chunks()
        if pa.types.is_timestamp(f.type):
            text = pc.binary_join_element_wise('"', _iso(col), '"', "")
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


def _by_landing_day(
    rows: pa.Table,
    cfg: GeneratorConfig,
    landing_root: str,
    to_jsonl: np.ndarray,
    stems: tuple[str, str],
) -> list[str]:
    """``rows`` (with ``landing_date``) into one folder per landing day: ``<parquet stem>-D.parquet``
    and ``<json stem>-D.jsonl.gz``, the rows of ``to_jsonl`` (in ``rows``' order) as JSON lines."""
    landing = rows["landing_date"].to_numpy().astype("datetime64[D]")
    order = np.argsort(landing, kind="stable")
    table = rows.drop_columns(["landing_date"]).take(pa.array(order))
    landing, to_jsonl = landing[order], to_jsonl[order]
    written: list[str] = []
    bounds = np.append(np.searchsorted(landing, np.unique(landing)), len(landing))
    for b0, b1 in itertools.pairwise(bounds):
        day = str(landing[b0])
        folder = os.path.join(landing_root, day)
        os.makedirs(folder, exist_ok=True)
        part = table.slice(b0, b1 - b0)
        mask = pa.array(to_jsonl[b0:b1])
        written += _write_parts(
            part.filter(pc.invert(mask)), folder, f"{stems[0]}-{day}", ".parquet", cfg.rows_per_file
        )
        written += _write_parts(
            part.filter(mask), folder, f"{stems[1]}-{day}", ".jsonl.gz", cfg.rows_per_file
        )
    return written


def _json_share(rng: np.random.Generator, cfg: GeneratorConfig, n: int, share: float) -> np.ndarray:
    """Which rows a landing day sends as JSON lines (the others as Parquet), by ``cfg.fmt``."""
    if cfg.fmt == "parquet":
        return np.zeros(n, bool)
    if cfg.fmt == "jsonl":
        return np.ones(n, bool)
    return rng.random(n) < share


def write_landing(gen: Generated, cfg: GeneratorConfig, landing_root: str) -> list[str]:
    """One folder per landing day: ``gateway-D.parquet`` and/or ``batch-D.jsonl.gz``, the day's task
    outcomes (``outcomes-D.*``); plus accounts.csv."""
    rng = np.random.default_rng(cfg.seed + 1)
    n = gen.events.num_rows
    # drawn in landing order, as before outcomes existed: the same seed writes the same event files
    landing = gen.events["landing_date"].to_numpy().astype("datetime64[D]")
    in_landing_order = np.empty(n, bool)
    in_landing_order[np.argsort(landing, kind="stable")] = _json_share(rng, cfg, n, 0.3)
    written = _by_landing_day(gen.events, cfg, landing_root, in_landing_order, ("gateway", "batch"))
    if gen.outcomes is not None and gen.outcomes.num_rows:
        share = _json_share(rng, cfg, gen.outcomes.num_rows, 0.3)
        written += _by_landing_day(gen.outcomes, cfg, landing_root, share, ("outcomes", "outcomes"))
    os.makedirs(landing_root, exist_ok=True)
    with open(os.path.join(landing_root, "accounts.csv"), "w", newline="") as handle:
        writer = csv.DictWriter(
            handle,
            fieldnames=["account_id", "plan", "timezone", "active_from", "active_until", *CONTACT],
        )
        writer.writeheader()
        writer.writerows(row | contact(row) for row in gen.accounts)
    return written


CONTACT = ("name", "email", "billing_address")


def contact(row: dict) -> dict:
    """Who the customer documents are addressed to, made up from the account id and zone (every
    tenth account has none: its documents name the account instead)."""
    number = row["account_id"].rsplit("-", 1)[-1]
    if number.isdigit() and int(number) % 10 == 0:
        return dict.fromkeys(CONTACT, "")
    city = row["timezone"].rsplit("/", 1)[-1].replace("_", " ")
    return {
        "name": f"Example Customer {number}",
        "email": f"billing+{number}@customer.example",
        "billing_address": f"{int(number) if number.isdigit() else 1} Example Street\n{city}",
    }
