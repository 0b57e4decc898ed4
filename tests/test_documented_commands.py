"""Every command the README and docs/ show exists as written: each ``usage-billing`` command's
subcommands and options are checked against the installed command line, and each ``airflow`` command
against the installed Airflow's ``--help``."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# a command in a code span or on a line of a code block, up to the span's end or the line's end
SPAN = re.compile(r"`([^`\n]*)`")


def _commands(program: str) -> list[tuple[str, str]]:
    """(where, command text) of every ``program ...`` command in the docs."""
    found = []
    for path in DOCS:
        text = path.read_text()
        in_block = False
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip().startswith("```"):
                in_block = not in_block
                continue
            pieces = [line] if in_block else SPAN.findall(line)
            for piece in pieces:
                for match in re.finditer(rf"(?:^|[\s/(])({re.escape(program)}(?:\s[^`#]*)?)", piece):
                    found.append((f"{path.name}:{number}", match.group(1).strip()))
    return found


def _tokens(command: str) -> list[str]:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    out = []
    for w in words[1:]:
        if w == "--":  # Beam's flags follow
            break
        out += [t for t in re.split(r"[\[\]|]", w) if t and t != "..."]
    return out


def test_every_usage_billing_command_in_the_docs_exists():
    import typer.main

    from pipelines.cli import app

    root = typer.main.get_command(app)
    commands = [(w, c) for w, c in _commands("usage-billing") if c not in NOT_COMMANDS]
    assert len(commands) > 40  # the docs show many; a broken extraction would find none
    problems = []
    for where, command in commands:
        group, path, value_next = root, [], False
        for token in _tokens(command):
            options = {o: p for p in group.params for o in [*p.opts, *p.secondary_opts]}
            if value_next:
                value_next = False
                continue
            if token.startswith("--"):
                name = token.split("=")[0]
                param = options.get(name)
                if param is None and name != "--help":
                    at = " ".join(path) or "usage-billing"
                    problems.append(f"{where}: `{command}`: {at} has no {name}")
                value_next = param is not None and not getattr(param, "is_flag", False) and "=" not in token
                continue
            subcommands = getattr(group, "commands", None)
            if subcommands is None:
                continue  # an argument (a file) or a placeholder
            if token in subcommands:
                group = subcommands[token]
                path.append(token)
            elif re.fullmatch(r"[a-z][a-z-]*", token):
                problems.append(f"{where}: `{command}`: no command {' '.join([*path, token])}")
                break
    assert problems == []


# Mentions of the program's name that are not commands to run.
NOT_COMMANDS = {"usage-billing lock <step>"}  # the application name of a lock's PostgreSQL connection


@pytest.mark.slow
def test_every_airflow_command_in_the_docs_is_one_the_installed_airflow_has(tmp_path):
    commands = _commands("airflow")
    subcommands = set()
    for where, command in commands:
        words = [w for w in _tokens(command) if not w.startswith("-")]
        if len(words) >= 2 and words[0] in {"backfill", "dags", "pools", "db", "tasks", "variables"}:
            subcommands.add((where, command, words[0], words[1]))
    assert any(group == "backfill" for _, _, group, _ in subcommands)  # docs/airflow.md backfills a month
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    airflow = str(Path(sys.executable).with_name("airflow"))
    helps: dict[tuple[str, str], str] = {}
    problems = []
    for where, command, group, name in sorted(subcommands):
        if (group, name) not in helps:
            proc = subprocess.run(
                [airflow, group, name, "--help"], env=env, capture_output=True, text=True, timeout=120
            )
            helps[(group, name)] = proc.stdout if proc.returncode == 0 else ""
        text = helps[(group, name)]
        if not text:
            problems.append(f"{where}: `{command}`: airflow has no `{group} {name}`")
            continue
        for option in re.findall(r"(--[a-z][a-z-]*)", command):
            if option not in text:
                problems.append(f"{where}: `{command}`: `airflow {group} {name}` has no {option}")
    assert problems == []
