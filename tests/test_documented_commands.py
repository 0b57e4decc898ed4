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


# Other tools the deployment recipe runs: (program, how many words name the subcommand).
TOOLS = {"dask": 1, "pip": 1, "psql": 0}


@pytest.mark.parametrize("program", sorted(TOOLS))
def test_every_other_tool_command_in_the_docs_has_the_options_it_uses(program):
    """``dask scheduler ...``, ``pip wheel ...``, ``psql ...``: each option against ``--help``."""
    import shutil

    commands = list(_commands(program))
    if program == "pip":
        commands += [(w, c.split("/", 2)[-1]) for w, c in _commands(".venv/bin/pip")]
    commands = [(w, c) for w, c in commands if len(c.split()) > 1]
    assert commands, f"the docs show no {program} command"
    venv = Path(sys.executable).with_name(program)
    binary = str(venv) if venv.exists() else shutil.which(program)
    assert binary, f"{program} is not installed"
    helps: dict[tuple[str, ...], str] = {}
    problems = []
    for where, command in commands:
        words = shlex.split(command.replace("$(", "").replace(")", ""))[1:]
        sub = tuple(w for w in words if not w.startswith("-"))[: TOOLS[program]]
        if sub not in helps:
            proc = subprocess.run([binary, *sub, "--help"], capture_output=True, text=True, timeout=60)
            helps[sub] = proc.stdout if proc.returncode == 0 else ""
        if not helps[sub]:
            problems.append(f"{where}: `{command}`: {program} has no `{' '.join(sub)}`")
            continue
        for option in re.findall(r"(?:^|\s)(--?[a-zA-Z][a-zA-Z-]*)", command):
            if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", helps[sub]):
                problems.append(f"{where}: `{command}`: `{program} {' '.join(sub)}` has no {option}")
    assert problems == []


def test_every_beam_flag_after_the_double_dash_in_the_docs_is_one_beam_knows():
    """The flags after ``--`` in ``usage-billing`` commands (and in ``USAGE_BILLING_BEAM_ARGS``) parse
    as Beam pipeline options, the DaskRunner's included: a misspelt flag would be dropped by Beam with
    a warning, and the run would go elsewhere than the docs say."""
    import argparse

    import apache_beam.runners.dask.dask_runner  # noqa: F401  # registers the DaskRunner's options
    from apache_beam.options.pipeline_options import PipelineOptions

    def groups(cls):  # type: ignore[no-untyped-def]
        for sub in cls.__subclasses__():
            yield sub
            yield from groups(sub)

    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for group in {*groups(PipelineOptions)}:
        try:
            group._add_argparse_args(parser)
        except argparse.ArgumentError:
            continue  # a group that repeats another's flag
    flags = []
    for where, command in _commands("usage-billing"):
        words = command.split()
        if "--" in words:
            flags += [(where, w) for w in words[words.index("--") + 1 :] if w.startswith("--")]
    for path in DOCS:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "USAGE_BILLING_BEAM_ARGS=" in line and '"' in line:
                value = line.split("USAGE_BILLING_BEAM_ARGS=", 1)[1].split('"')[1]
                flags += [(f"{path.name}:{number}", w) for w in value.split()]
    assert len(flags) > 10
    known = {o for action in parser._actions for o in action.option_strings}
    problems = [f"{w}: {f}" for w, f in flags if f.split("=")[0] not in known]
    assert problems == []
