"""Token kinds: the one registry of the token counts an event reports and how billing reads them.

Every stage derives from ``KINDS``: the event and lake schemas (one int64 field per kind), ingest's
checks (>= 0; a part never exceeds the field it is part of), aggregation's sums, the warehouse's usage
columns, the split of a partly covered event, the catalog's price columns, effectiveness cost,
customer documents (label, order) and exports. Adding a kind is an entry here, its price in every
``[[prices]]`` row and one migration that adds its usage columns (``migrations/sql/token_columns.py``);
no stage changes.

An event's fields may nest: ``cached_input_tokens`` is a part of ``input_tokens``. Billing counts
disjoint kinds, so every token is priced exactly once: a kind's billed tokens are its field minus the
fields that are part of it (``input`` is the uncached part). Allowances count the billed tokens of the
kinds marked ``allowance``; with the three kinds below that is ``input_tokens + output_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class TokenKind:
    id: str  # the kind billing prices: a ``[[prices]]`` column and an invoice line's token_kind
    field: str  # the event field (int64 tokens) that reports it
    part_of: str | None  # the event field this one is a part of (its tokens are counted inside it)
    label: str  # what customer documents and reports print
    unit: str = "tokens"
    allowance: bool = True  # whether quota allowances count its tokens
    required: bool = True  # producers must send it; a kind added later is optional (absent = 0)
    timed: bool = False  # the kind a request's duration times: tokens per second = field / duration


KINDS: tuple[TokenKind, ...] = (
    TokenKind("input", "input_tokens", None, "Input tokens"),
    TokenKind("cached_input", "cached_input_tokens", "input_tokens", "Cached input tokens"),
    TokenKind("output", "output_tokens", None, "Output tokens", timed=True),
)


def ids() -> tuple[str, ...]:
    """Kind ids in registry order (document order, and the order ties go to in a pro-rata split)."""
    return tuple(k.id for k in KINDS)


def fields() -> tuple[str, ...]:
    """The event fields, in registry order."""
    return tuple(k.field for k in KINDS)


def kind(kind_id: str) -> TokenKind:
    for k in KINDS:
        if k.id == kind_id:
            return k
    raise KeyError(kind_id)


def label(kind_id: str) -> str:
    """What a document prints for a kind (an unknown id prints as itself)."""
    return next((k.label for k in KINDS if k.id == kind_id), kind_id)


def rank(kind_id: str) -> int:
    return next((i for i, k in enumerate(KINDS) if k.id == kind_id), len(KINDS))


def timed_field() -> str:
    """The event field a request's duration times (a model's speed is these tokens per second)."""
    return next(k.field for k in KINDS if k.timed)


def parts(field: str) -> tuple[str, ...]:
    """The fields that are a part of ``field``."""
    return tuple(k.field for k in KINDS if k.part_of == field)


def exceeds_checks() -> list[tuple[str, str, tuple[str, ...]]]:
    """(quarantine reason, field, its parts) for every field that has parts: a row whose parts add up
    to more than the field is quarantined. One part: ``cached_exceeds_input``; several:
    ``parts_exceed_input``."""
    out = []
    for k in KINDS:
        inside = parts(k.field)
        if inside:
            first = next(p for p in KINDS if p.field == inside[0]).id.split("_")[0]
            reason = f"{first}_exceeds_{k.id}" if len(inside) == 1 else f"parts_exceed_{k.id}"
            out.append((reason, k.field, inside))
    return out


def field_rule(k: TokenKind) -> str:
    """The rule a kind's event field documents in the schema."""
    inside = parts(k.field)
    rule = ">= 0"
    if k.part_of:
        rule += f"; <= {k.part_of}"
    if inside:
        rule += "; includes " + ", ".join(inside)
    if not k.required:
        rule += "; optional, absent = 0"
    return rule


def allowance_weights() -> dict[str, int]:
    """Per event field, how often the allowance counts it: the billed tokens of counted kinds, with
    each kind's billed tokens its field minus its parts. Default: input 1, cached 0, output 1."""
    weights = {k.field: 0 for k in KINDS}
    for k in KINDS:
        if k.allowance:
            weights[k.field] += 1
            for p in parts(k.field):
                weights[p] -= 1
    return weights


def allowance_sql(prefix: str = "") -> str:
    """The allowance's tokens as a SQL expression over a table with the event fields as columns
    (usage_daily, model_daily): ``input_tokens + output_tokens`` by default."""
    terms = []
    for field, w in allowance_weights().items():
        if w:
            sign = "-" if w < 0 else "+"
            terms.append(f"{sign} {abs(w)} * {prefix}{field}" if abs(w) != 1 else f"{sign} {prefix}{field}")
    return " ".join(terms).removeprefix("+ ") or "0"


def allowance_tokens(table: pa.Table) -> pa.ChunkedArray | pa.Array:
    """Tokens that draw on a quota pool, per row of a table with the event fields as columns."""
    total: pa.ChunkedArray | pa.Array | None = None
    for field, w in allowance_weights().items():
        if not w:
            continue
        term = table[field] if w == 1 else pc.multiply(table[field], w)
        total = term if total is None else pc.add(total, term)
    return total if total is not None else pa.repeat(pa.scalar(0, pa.int64()), table.num_rows)


def billed(table: pa.Table) -> pa.Table:
    """One int64 column per kind id: each kind's billed tokens (its field minus its parts)."""
    cols = {}
    for k in KINDS:
        col = table[k.field]
        for p in parts(k.field):
            col = pc.subtract(col, table[p])
        cols[k.id] = col
    return pa.table(cols)


def billed_matrix(table: pa.Table) -> np.ndarray:
    """``billed`` as an n x kinds int64 array, columns in registry order."""
    kinds = billed(table)
    if not kinds.num_rows:
        return np.zeros((0, len(KINDS)), np.int64)
    return np.stack([kinds[k.id].to_numpy() for k in KINDS], axis=1).astype(np.int64)


def sums(prefix: str = "") -> list[tuple[str, str]]:
    """Arrow group-by aggregations summing every event field."""
    return [(f"{prefix}{f}", "sum") for f in fields()]
