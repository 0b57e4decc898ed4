"""`usage-billing demo` refuses what it did not create; the full demo, as a new user runs it, is in
``test_first_contact.py`` (outputs, invariants)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

from tests.conftest import CATALOG_PATH, ROOT


def _demo(tmp_path, url: str, landing) -> subprocess.CompletedProcess:  # type: ignore[no-untyped-def]
    cmd = [
        sys.executable,
        "-m",
        "pipelines.cli",
        "--config",
        str(CATALOG_PATH),
        "--database-url",
        url,
        "--lake",
        str(tmp_path / "lake"),
        "--landing",
        str(landing),
        "demo",
        "--days",
        "7",
    ]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)


def test_the_demo_refuses_folders_it_did_not_create(tmp_path):
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "data.txt").write_text("keep me")
    proc = _demo(tmp_path, f"sqlite:///{tmp_path / 'warehouse.db'}", tmp_path / "precious")
    assert proc.returncode == 2 and "holds data the demo did not create" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert (tmp_path / "precious" / "data.txt").read_text() == "keep me"
    assert not (tmp_path / "warehouse.db").exists() and not (tmp_path / "lake").exists()


def test_the_demo_refuses_a_warehouse_it_did_not_create(tmp_path):
    path = tmp_path / "warehouse.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE mine (x)")
    proc = _demo(tmp_path, f"sqlite:///{path}", tmp_path / "landing")
    assert proc.returncode == 2 and "holds data the demo did not create" in proc.stderr
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("mine",)]


def test_readme_starts_with_the_two_commands():
    lines = [line.strip() for line in (ROOT / "README.md").read_text().splitlines()]
    commands = [line for line in lines if line.startswith("make ")]
    assert commands[:2] == ["make demo", "make test"]
