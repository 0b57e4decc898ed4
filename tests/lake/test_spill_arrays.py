"""The id-hash index files between ingest stages: written and read back exactly, without the
``ast.literal_eval`` that ``np.load`` parses headers with (CPython 3.11 fails it when Beam's worker
threads call it at once: a CI run lost an ingest to ``SystemError: AST constructor recursion depth
mismatch``)."""

from __future__ import annotations

import ast
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from pipelines import lake
from pipelines.errors import UsageBillingError


@pytest.fixture()
def no_literal_eval(monkeypatch):  # type: ignore[no-untyped-def]
    def refuse(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("read_npy must not parse the header with ast.literal_eval")

    monkeypatch.setattr(ast, "literal_eval", refuse)


@pytest.mark.parametrize(
    "array",
    [
        np.array([], dtype=np.uint64),
        np.array([1, 2, 2**64 - 1], dtype=np.uint64),
        np.arange(12, dtype=np.int32).reshape(3, 4),
        np.array([0.5, -1.25], dtype=">f8"),
    ],
    ids=["empty", "uint64", "2-d", "big-endian"],
)
def test_round_trip_without_ast(tmp_path: Path, array: np.ndarray, no_literal_eval) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "index.npy")
    lake.write_npy(path, array)
    for mmap in (False, True):
        back = lake.read_npy(path, mmap=mmap)
        assert back.dtype == array.dtype and back.shape == array.shape
        assert np.array_equal(back, array)


def test_many_threads_read_the_same_index(tmp_path: Path) -> None:
    path = str(tmp_path / "index.npy")
    array = np.sort(np.random.default_rng(7).integers(0, 2**63, 50_000, dtype=np.uint64))
    lake.write_npy(path, array)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: lake.read_npy(path), range(400)))
    assert all(np.array_equal(r, array) for r in results)


def test_damaged_file_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "index.npy"
    lake.write_npy(str(path), np.arange(100, dtype=np.uint64))
    whole = path.read_bytes()
    path.write_bytes(whole[:-8])
    with pytest.raises(UsageBillingError, match="truncated array file"):
        lake.read_npy(str(path))
    path.write_bytes(b"not numpy at all")
    with pytest.raises(UsageBillingError, match="not a NumPy array file"):
        lake.read_npy(str(path))
    fortran = tmp_path / "f.npy"
    np.save(fortran, np.asfortranarray(np.arange(6).reshape(2, 3)))
    with pytest.raises(UsageBillingError, match="unexpected NumPy header"):
        lake.read_npy(str(fortran))
