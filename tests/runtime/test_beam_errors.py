"""A user error raised inside a DoFn ends the same way on one thread and on worker threads: the same
exception class, its own message (without Beam's step name), and no traceback printed."""

from __future__ import annotations

import apache_beam as beam
import pytest

from pipelines.errors import DataQualityError, UsageBillingError, user_error_in, without_step
from pipelines.runtime.options import pipeline_options, run_pipeline
from pipelines.warehouse.locks import LockBusy

MODES = {
    "one thread": ["--direct_num_workers=1"],
    "two threads": ["--direct_running_mode=multi_threading", "--direct_num_workers=2"],
}


class _Fail:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def __call__(self, value: int) -> list[int]:
        if value == 3:
            raise self.error
        return [value]


def _run(flags: list[str], error: Exception) -> None:
    with run_pipeline(pipeline_options(flags)) as p:
        _ = p | beam.Create(range(5)) | "Check" >> beam.FlatMap(_Fail(error))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("error", [UsageBillingError, DataQualityError, LockBusy])
def test_a_user_error_in_a_dofn_comes_back_as_itself_without_a_traceback(mode, error, capfd):
    with pytest.raises(error) as raised:
        _run(MODES[mode], error("cannot write /lake/x.parquet: No space left on device"))
    assert type(raised.value) is error
    assert str(raised.value) == "cannot write /lake/x.parquet: No space left on device"
    printed = capfd.readouterr()
    assert "Traceback" not in printed.err + printed.out, printed.err


@pytest.mark.parametrize("mode", MODES)
def test_an_os_error_in_a_dofn_is_one_line_too(mode, capfd):
    with pytest.raises(UsageBillingError) as raised:  # Beam cannot rebuild it: a RuntimeError
        _run(MODES[mode], FileNotFoundError(2, "No such file or directory"))
    assert str(raised.value) == "cannot use: [Errno 2] No such file or directory"
    printed = capfd.readouterr()
    assert "Traceback" not in printed.err + printed.out, printed.err


@pytest.mark.parametrize("mode", MODES)
def test_a_bug_in_a_dofn_is_not_mistaken_for_a_user_error(mode):
    with pytest.raises((ZeroDivisionError, RuntimeError), match=r"division by zero"):
        _run(MODES[mode], ZeroDivisionError("division by zero"))


def test_user_error_in_reads_only_the_last_line_of_a_traceback():
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "pipelines.errors.UsageBillingError: first [while running 'A']\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "pipelines.errors.DataQualityError: rows read 10 != 9 [while running 'B'] [while running 'C']\n"
    )
    found = user_error_in(traceback)
    assert type(found) is DataQualityError and str(found) == "rows read 10 != 9"
    assert user_error_in(traceback + "KeyError: 'x'\n") is None
    assert type(user_error_in("pipelines.warehouse.locks.LockBusy: busy")) is LockBusy
    assert user_error_in("pipelines.errors.Nonexistent: x") is None
    assert user_error_in("pipelines.not_a_module.UsageBillingError: x") is None
    assert user_error_in("pipelines.errors.re: x") is None  # a module global that is no error class
    assert user_error_in("") is None
    assert str(user_error_in("PermissionError: [Errno 13] denied [while running 'R']")) == (
        "cannot use: [Errno 13] denied"
    )
    assert user_error_in("ValueError: not an OS error") is None
    assert without_step("keep [this] [while running 'S']") == "keep [this]"
