"""Nothing but the registries names a speed tier, a token kind or an invoice line type.

The catalog's tiers (``[[tiers]]``, defaults in ``schemas/catalog.py``), the token kinds
(``schemas/tokens.py``) and the line types (``schemas/lines.py``) are data: every other module derives
them. A string literal in the code that spells one of their names (a tier in a dict, a line type in
SQL, a token field in a column list) is how a new tier ends up billed at the wrong price or a new line
type counted in no column. Docstrings are prose and are not looked at; migrations already applied
(``migrations/versions``) are history and keep the names they were written with.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from schemas import lines, tokens
from schemas.catalog import DEFAULT_TIERS

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("billing", "pipelines", "schemas", "migrations", "airflow_dags")
REGISTRIES = {"schemas/tokens.py", "schemas/lines.py", "schemas/catalog.py"}
HISTORY = "migrations/versions/"

TIERS = {t for t, _ in DEFAULT_TIERS}
NAMES = TIERS | set(tokens.ids()) | set(tokens.fields()) | {t.id for t in lines.LINES}
# A default tier's id that is also the name of a field: a pool's and a credit grant's ``priority`` (the
# order they are drawn or applied in). The bare literal is that field; a tier named in SQL or other
# text ('priority') is still found below.
FIELD_NAMES = {"priority"}
# Names that are distinctive inside longer text (SQL, column lists): found as words there, too.
WORDS = re.compile(r"\b(" + "|".join(sorted((n for n in NAMES if "_" in n), key=len, reverse=True)) + r")\b")
QUOTED = re.compile(r"'(" + "|".join(sorted(NAMES, key=len, reverse=True)) + r")'")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def literals(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every registry name a string literal of ``path`` spells."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in skip:
            continue
        text = node.value
        if text in FIELD_NAMES:
            continue
        names = {text} & NAMES or {m.group(1) for m in WORDS.finditer(text)} | {
            m.group(1) for m in QUOTED.finditer(text)
        }
        found += [(node.lineno, name) for name in sorted(names)]
    return sorted(found)


def test_no_code_outside_the_registries_names_a_tier_a_token_kind_or_a_line_type():
    offenders = []
    for package in SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in REGISTRIES or rel.startswith(HISTORY):
                continue
            offenders += [f"{rel}:{line}: {name!r}" for line, name in literals(path)]
    assert offenders == [], "names that belong to a registry:\n" + "\n".join(offenders)


def test_the_scan_finds_what_it_looks_for(tmp_path):
    """The scan is not blind: each way a name can hide in code is found, prose is not."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Docstring: the standard tier, input_tokens."""\n'
        'A = {"ultrafast": 3.8}\n'
        'B = "SELECT sum(input_tokens + output_tokens) FROM usage_daily"\n'
        "C = f\"WHERE {x} = 'overage_usage'\"\n"
        'D = "an input, an output, a standard way"\n'
        'E = ["cached_input", "x"]\n'
    )
    assert literals(sample) == [
        (2, "ultrafast"),
        (3, "input_tokens"),
        (3, "output_tokens"),
        (4, "overage_usage"),
        (6, "cached_input"),
    ]
