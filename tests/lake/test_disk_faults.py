"""Issue 9, point 5: a read-only or full disk ends a run with one clear line and leaves earlier
partitions as they were; once the disk is back, the rerun completes.

The disks are real: a small tmpfs mounted for the test, remounted read-only or filled up. Mounting
needs root (CI runs as root and sets REQUIRE_FAULT_MOUNTS=1, which turns a failed mount into a
failure instead of a skip).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.settings import Settings
from pipelines.warehouse.engine import make_engine, upgrade
from tests.conftest import CATALOG_PATH, close_month
from tests.runtime.test_faults import DAY1, DAY2, cli, lake_state, ok

pytestmark = pytest.mark.slow


def _sh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60)


class Disk:
    def __init__(self, path: Path) -> None:
        self.path = path

    def read_only(self, on: bool = True) -> None:
        done = _sh("mount", "-o", f"remount,{'ro' if on else 'rw'}", str(self.path))
        assert done.returncode == 0, done.stderr

    def fill(self, leave_kib: int = 32) -> None:
        st = os.statvfs(self.path)
        free = st.f_bavail * st.f_frsize // 1024
        with open(self.path / "filler", "wb") as handle:
            handle.write(b"\0" * max(0, free - leave_kib) * 1024)

    def unfill(self) -> None:
        (self.path / "filler").unlink()


@pytest.fixture
def disk(tmp_path) -> Iterator[Disk]:  # type: ignore[misc]
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = _sh("mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mnt))
    if done.returncode != 0:
        message = f"cannot mount a tmpfs here ({done.stderr.strip()}): needs root"
        if os.environ.get("REQUIRE_FAULT_MOUNTS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield Disk(mnt)
    finally:
        _sh("umount", "-l", str(mnt))


def _settings(tmp_path: Path, lake: Path, landing: str, db: Path | None = None) -> Settings:
    url = f"sqlite:///{db or tmp_path / 'warehouse.db'}"
    upgrade(make_engine(url))
    return Settings(config=str(CATALOG_PATH), database_url=url, lake=str(lake), landing=landing)


def _files(root: Path) -> dict[str, str]:
    """Content hash of every committed file (staging excluded): what readers of the lake see."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file() and "_staging" not in p.parts
    }


def _one_line(done: subprocess.CompletedProcess, *needles: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: cannot "), done.stderr
    assert "while running" not in lines[0], lines[0]  # Beam's step name is not the user's business
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_a_read_only_lake_or_export_folder_fails_clearly_and_keeps_earlier_partitions(
    disk, tmp_path, small_landing
):
    s = _settings(tmp_path, disk.path / "lake", str(small_landing))
    ok(s, "accounts", "load", str(Path(small_landing) / "accounts.csv"))
    ok(s, "run-day", "--date", DAY1.isoformat())
    close_month(s, "2026-03", tmp_path)
    ok(s, "invoices", "draft", "--month", "2026-03")
    ok(s, "invoices", "finalize", "--month", "2026-03")
    (disk.path / "exports").mkdir()
    before = _files(disk.path / "lake")
    disk.read_only()
    _one_line(cli(s, "run-day", "--date", DAY2.isoformat()), "Read-only file system")
    exported = cli(s, "invoices", "export", "--month", "2026-03", "--out", str(disk.path / "exports"))
    _one_line(exported, "Read-only file system", str(disk.path / "exports"))
    _one_line(cli(s, "quota", "meter", "--date", DAY1.isoformat()), "Read-only file system")
    assert _files(disk.path / "lake") == before
    disk.read_only(False)
    ok(s, "run-day", "--date", DAY2.isoformat())

    reference = _settings(tmp_path / "ref", tmp_path / "ref" / "lake", str(small_landing))
    ok(reference, "accounts", "load", str(Path(small_landing) / "accounts.csv"))
    ok(reference, "run-day", "--date", DAY1.isoformat())
    close_month(reference, "2026-03", tmp_path / "ref")  # as above: the same steps, uninterrupted
    ok(reference, "run-day", "--date", DAY2.isoformat())
    assert lake_state(s.lake) == lake_state(reference.lake)


def test_a_full_disk_fails_clearly_discards_the_run_and_the_rerun_completes(disk, tmp_path, small_landing):
    s = _settings(tmp_path, disk.path / "lake", str(small_landing))
    ok(s, "events", "ingest", "--date", DAY1.isoformat())
    before = _files(disk.path / "lake")
    disk.fill()
    _one_line(cli(s, "events", "ingest", "--date", DAY2.isoformat()), "No space left on device")
    assert _files(disk.path / "lake") == before
    disk.unfill()
    assert not list((disk.path / "lake" / "_staging").iterdir())  # the failed run took its spill files away
    ok(s, "events", "ingest", "--date", DAY2.isoformat())
    reference = _settings(tmp_path / "ref", tmp_path / "ref" / "lake", str(small_landing))
    for day in (DAY1, DAY2):
        ok(reference, "events", "ingest", "--date", day.isoformat())
    assert lake_state(s.lake) == lake_state(reference.lake)


def test_a_full_warehouse_disk_rolls_back_the_step_and_the_rerun_completes(disk, tmp_path, small_landing):
    s = _settings(tmp_path, tmp_path / "lake", str(small_landing), db=disk.path / "warehouse.db")
    ok(s, "accounts", "load", str(Path(small_landing) / "accounts.csv"))
    ok(s, "run-day", "--date", DAY1.isoformat())
    close_month(s, "2026-03", tmp_path)
    ok(s, "invoices", "draft", "--month", "2026-03")
    disk.fill(leave_kib=4)
    failed = cli(s, "run-day", "--date", DAY2.isoformat())
    lines = failed.stderr.strip().splitlines()
    assert failed.returncode == 2 and len(lines) == 1 and "disk is full" in lines[0], failed.stderr
    disk.unfill()
    ok(s, "run-day", "--date", DAY2.isoformat())
