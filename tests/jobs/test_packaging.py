"""The package declares everything it imports: its wheel, installed without the constraints file into
a clean virtual environment, imports every module and runs ``usage-billing --help`` and a small
``run-day``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

# Modules that need an optional extra: the DAGs' defaults import Airflow's SDK ([airflow]).
NEEDS_EXTRA = {"pipelines.jobs.dag_defaults"}
# Alembic loads these itself, inside a migration context.
ALEMBIC_ONLY = {"migrations.env"}

IMPORT_ALL = f"""
import importlib, pkgutil, sys
skip = {sorted(NEEDS_EXTRA | ALEMBIC_ONLY)!r}
names = []
for package in ("schemas", "billing", "pipelines", "migrations"):
    module = importlib.import_module(package)
    names.append(package)
    for info in pkgutil.walk_packages(module.__path__, package + "."):
        if info.name not in skip and ".versions." not in info.name:
            importlib.import_module(info.name)
            names.append(info.name)
print(len(names))
"""


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: int = 900) -> str:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(argv)}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr
    return proc.stdout


def test_the_wheel_alone_installs_a_working_command(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_CONSTRAINT", "VIRTUAL_ENV"))}
    env["GX_ANALYTICS_ENABLED"] = "false"
    wheels = tmp_path / "wheels"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)], tmp_path, env
    )
    (wheel,) = wheels.glob("usage_billing-*.whl")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    python, command = venv / "bin" / "python", venv / "bin" / "usage-billing"
    _run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-compile",
            "--disable-pip-version-check",
            str(wheel),
        ],
        tmp_path,
        env,
    )

    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(ROOT / "config", work / "config")  # the catalog a deployment brings
    modules = int(_run([str(python), "-c", IMPORT_ALL], work, env).strip())
    assert modules > 60  # every module of the four packages imported
    assert "run-day" in _run([str(command), "--help"], work, env)
    _run([str(command), "db", "upgrade"], work, env)
    _run(
        [str(command), "events", "generate", "--days", "1", "--accounts", "40", "--events-per-day", "300"],
        work,
        env,
    )
    _run([str(command), "accounts", "load", "data/landing/accounts.csv"], work, env)
    done = _run([str(command), "run-day", "--date", "2026-02-01"], work, env)
    assert "aggregated 1 date(s): 2026-02-01" in done and "metered " in done
