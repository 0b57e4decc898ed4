"""Outputs are written whole or not at all, and CSV cells never run as spreadsheet formulas."""

from __future__ import annotations

import csv
import errno
from decimal import Decimal

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from pipelines.errors import UsageBillingError
from pipelines.runtime.outputs import atomic, neutralize, neutralize_value, output_folder

HOSTILE = ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "-2+3", "@SUM(1+1)", "\tx", "\rx"]


def test_formula_cells_are_shown_as_text_and_numbers_stay_numbers(tmp_path):
    table = pa.table(
        {
            "account_id": pa.array([*HOSTILE, "acct-1", None]),
            "model": pa.array(["m"] * 8).dictionary_encode(),
            "amount": pa.array([Decimal("-1.50")] * 8, pa.decimal128(20, 2)),
        }
    )
    path = tmp_path / "t.csv"
    pcsv.write_csv(neutralize(table), path)
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [r["account_id"] for r in rows[:6]] == ["'" + h for h in HOSTILE]
    assert rows[6]["account_id"] == "acct-1" and rows[7]["account_id"] == ""
    assert {r["amount"] for r in rows} == {"-1.50"}  # a negative amount is a number, not a formula
    assert [neutralize_value(h) for h in HOSTILE] == ["'" + h for h in HOSTILE]
    assert neutralize_value(Decimal("-1")) == Decimal("-1")
    assert neutralize_value("-1.50") == "-1.50" and neutralize_value("+3") == "+3"  # numbers as text
    assert neutralize(pa.table({"delta": ["-1.50", "-1.5e3", "-x"]}))["delta"].to_pylist() == [
        "-1.50",
        "'-1.5e3",
        "'-x",
    ]
    pq.write_table(table, tmp_path / "t.parquet")  # machines read the raw values
    assert pq.read_table(tmp_path / "t.parquet")["account_id"].to_pylist()[:6] == HOSTILE


def test_a_write_that_fails_leaves_the_old_file_whole(tmp_path):
    target = tmp_path / "invoice_lines.csv"
    target.write_text("the export before\n")
    with pytest.raises(OSError), atomic(target) as tmp:
        tmp.write_text("half a ro")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert target.read_text() == "the export before\n"
    assert [p.name for p in tmp_path.iterdir()] == ["invoice_lines.csv"]  # no temporary left behind


def test_an_output_folder_is_never_empty_nor_inside_the_lake_or_landing(tmp_path):
    lake, landing = tmp_path / "lake", tmp_path / "landing"
    for bad in ("", "  ", str(lake), str(lake / "events" / "date=2026-03-02"), str(landing / "2026-03-02")):
        with pytest.raises(UsageBillingError):
            output_folder(bad, str(lake), str(landing))
    assert output_folder(tmp_path / "exports", str(lake), str(landing)).is_dir()
    assert output_folder(
        tmp_path / "x", "s3://bucket/lake", ""
    ).is_dir()  # a remote lake holds no folder here
