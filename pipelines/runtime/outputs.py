"""Files people and their tools open (exports, reports, previews): written whole or not at all, never
into the lake or the landing area, and safe to open in a spreadsheet.

- ``output_folder``: ``--out`` as a folder: not empty, not inside the lake or the landing area (files
  there would be read back as data), created if missing.
- ``atomic`` / ``write_text``: a file is written under a temporary name beside its target and renamed
  over it once complete, so a full disk or a kill leaves the old file or none, never a cut one.
- ``neutralize``: a CSV cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return
  is a formula to Excel, LibreOffice and Google Sheets (``=HYPERLINK(...)``, ``+cmd|...``); such a
  text cell gets a leading ``'``, which spreadsheets show as text. Numbers are not touched (a
  negative amount, typed or written as text like ``-1.50``, stays a number), and Parquet files keep
  the raw values for machines.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.errors import UsageBillingError
from pipelines.runtime.files import local_atomic

FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")
_FORMULA = r"^[=+\-@\t\r]"
_NUMBER = r"^[+-]?[0-9]+(\.[0-9]+)?$"  # a signed number written as text (an amount): not a formula


def _inside(path: Path, root: str) -> bool:
    if not root or "://" in root:  # an object-store lake: a local folder is never inside it
        return False
    base = Path(root).expanduser().resolve()
    return path == base or base in path.parents


def output_folder(
    out: str | Path, lake: str = "", landing: str = "", what: str = "--out", create: bool = True
) -> Path:
    """``out`` as a folder outputs may be written to (created unless ``create`` is false: a command
    checks it before its work and its writer creates it, so a failed command leaves no folder); a
    one-line error when it cannot be."""
    text = str(out)
    if not text.strip():
        raise UsageBillingError(f"{what} is empty: give the folder to write to")
    path = Path(text).expanduser().resolve()
    for root, name in ((lake, "lake"), (landing, "landing area")):
        if _inside(path, root):
            raise UsageBillingError(
                f"{what} {text} is inside the {name} ({root}): its files would be read back as data; "
                "write outputs somewhere else"
            )
    try:
        if create:
            path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageBillingError(f"cannot write to {text}: {exc.strerror or exc}") from None
    return path


@contextlib.contextmanager
def atomic(target: Path) -> Iterator[Path]:
    """A temporary path beside ``target`` to write; renamed over ``target`` when the block ends well,
    removed when it does not (``runtime.files.local_atomic``, as the lake's own local files)."""
    with local_atomic(str(target)) as tmp:
        yield Path(tmp)


def write_text(target: Path, text: str) -> None:
    with atomic(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def neutralize_value(value: object) -> object:
    """One cell as ``neutralize`` writes it."""
    if isinstance(value, str) and value.startswith(FORMULA_LEADS) and not re.match(_NUMBER, value):
        return "'" + value
    return value


def neutralize(table: pa.Table) -> pa.Table:
    """``table`` with every text cell a spreadsheet would run as a formula shown as text instead."""
    for i, field in enumerate(table.schema):
        typ = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
        if not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
            continue
        col = table.column(i).cast(typ)
        risky = pc.and_(
            pc.fill_null(pc.match_substring_regex(col, _FORMULA), False),
            pc.invert(pc.fill_null(pc.match_substring_regex(col, _NUMBER), False)),
        )
        if pc.any(risky).as_py():
            col = pc.if_else(risky, pc.binary_join_element_wise("'", col, ""), col)
        table = table.set_column(i, field.with_type(typ), col)
    return table
