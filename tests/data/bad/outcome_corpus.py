"""The bad task-outcome corpus: each case is one landing file of task outcomes (its name starts with
``outcomes``) and what ingest must make of it. Every JSON case also carries one good row.

``python -m tests.data.bad.outcome_corpus`` rewrites the example files ``outcomes-*`` in this folder.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.data.bad.corpus import DAY, HERE, Case

_DROP = object()


def outcome(task: str, **over: object) -> dict:
    base = {
        "task_id": task,
        "account_id": "acct-bad-outcomes",
        "task_class": "multi_file",
        "started_at": f"{DAY}T09:58:00Z",
        "completed_at": f"{DAY}T10:05:00Z",
        "outcome": "accepted",
        "rework": True,
        "rework_ms": 120_000,
    }
    base.update(over)
    return {k: v for k, v in base.items() if v is not _DROP}


def line(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


def _case(name: str, kind: str, bad: list[bytes], reasons: dict[str, int], clean: int = 1, **kw) -> Case:  # type: ignore[no-untyped-def]
    tag = name.removeprefix("outcomes-").split(".")[0]
    good = line(outcome(f"{tag}-good"))
    return Case(name, kind, b"\n".join([good, *bad]) + b"\n", reasons, clean=clean, **kw)


def _parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _ce(task: str, spec: str = "1.0") -> dict:
    data = {k: v for k, v in outcome(task).items() if k not in ("task_id", "completed_at")}
    return {"specversion": spec, "type": "com.example.task", "source": "/review", "id": task,
            "time": f"{DAY}T10:05:00Z", "data": data}


def cases() -> list[Case]:
    good = pa.Table.from_pylist([outcome("parquet-good-1"), outcome("parquet-good-2", rework=False, rework_ms=0)])
    good = good.set_column(3, "started_at", pa.array([f"{DAY}T09:58:00+00:00"] * 2))
    wrong = pa.Table.from_pylist([outcome("wrong-1")]).set_column(6, "rework", pa.array([1]))
    return [
        _case("outcomes-missing_task.jsonl", "an outcome without task_id", [line(outcome("x", task_id=_DROP))],
              {"missing_task_id": 1}),
        _case("outcomes-empty_task.jsonl", "a task_id of spaces only", [line(outcome("   "))], {"empty_task_id": 1}),
        _case("outcomes-missing_account.jsonl", "an outcome without account_id",
              [line(outcome("ma", account_id=_DROP))], {"missing_account_id": 1}),
        _case("outcomes-bad_started.jsonl", "a start time in words", [line(outcome("bs", started_at="this morning"))],
              {"bad_started_at": 1}),
        _case("outcomes-naive_completed.jsonl", "a completion time without a zone",
              [line(outcome("nc", completed_at=f"{DAY}T10:05:00"))], {"naive_completed_at": 1}),
        _case("outcomes-before_start.jsonl", "completed before it started",
              [line(outcome("bf", started_at=f"{DAY}T11:00:00Z"))], {"completed_before_started": 1}),
        _case("outcomes-unknown_outcome.jsonl", "an outcome that is neither accepted nor abandoned",
              [line(outcome("uo", outcome="merged"))], {"unknown_outcome": 1}),
        _case("outcomes-rework_as_text.jsonl", "rework sent as the string yes",
              [line(outcome("rt", rework="yes"))], {"wrong_type": 1}),
        _case("outcomes-missing_rework.jsonl", "no rework flag", [line(outcome("mr", rework=_DROP))],
              {"missing_rework": 1}),
        _case("outcomes-negative_rework.jsonl", "negative rework time", [line(outcome("nr", rework_ms=-5))],
              {"negative_rework_ms": 1}),
        _case("outcomes-rework_time_without_rework.jsonl", "rework time on a task that was not reworked",
              [line(outcome("rw", rework=False, rework_ms=5000))], {"rework_ms_without_rework": 1}),
        _case("outcomes-rework_on_abandoned.jsonl", "an abandoned task marked as reworked",
              [line(outcome("ra", outcome="abandoned"))], {"rework_on_abandoned": 1}),
        _case("outcomes-rework_longer_than_task.jsonl", "more rework than the task lasted",
              [line(outcome("rl", rework_ms=3_600_000))], {"rework_exceeds_task": 1}),
        _case("outcomes-long_class.jsonl", "a task class of 65 characters",
              [line(outcome("lc", task_class="c" * 65))], {"value_too_long": 1}),
        _case("outcomes-control_in_task.jsonl", "an escape character in task_id",
              [line(outcome("ct\u001b[2J"))], {"control_character": 1}),
        _case("outcomes-future.jsonl", "an outcome completed next year",
              [line(outcome("fu", started_at="2027-03-02T09:00:00Z", completed_at="2027-03-02T10:00:00Z"))],
              {"future_outcome": 1}),
        _case("outcomes-ancient.jsonl", "an outcome older than the lateness window",
              [line(outcome("an", started_at="2025-01-01T09:00:00Z", completed_at="2025-01-01T10:00:00Z"))],
              {"too_late": 1}),
        _case("outcomes-task_too_long.jsonl", "a task open for 100 days",
              [line(outcome("tl", started_at="2025-11-22T10:00:00Z"))], {"task_too_long": 1}),
        _case("outcomes-resend.jsonl", "an identical resend of an outcome", [line(outcome("resend-good"))], {},
              duplicates=1),
        _case("outcomes-conflict.jsonl", "the same task of the same account with another verdict",
              [line(outcome("conflict-good", outcome="abandoned", rework=False, rework_ms=0))],
              {"conflicting_duplicate": 1}),
        _case("outcomes-same_task_other_account.jsonl", "the same task_id under another account (another task)",
              [line(outcome("same_task_other_account-good", account_id="acct-other"))], {}, clean=2),
        _case("outcomes-no_class.jsonl", "no task_class (unclassified, accepted)",
              [line(outcome("nc2", task_class=_DROP))], {}, clean=2),
        Case("outcomes-cloudevents.jsonl", "task outcomes as CloudEvents, one of specversion 0.3",
             line(_ce("ce-good")) + b"\n" + line(_ce("ce-old", "0.3")) + b"\n",
             {"unsupported_specversion": 1}, clean=1),
        Case("outcomes-wrong_schema.parquet", "a Parquet file whose rework flag is an integer",
             _parquet(wrong), {"wrong_schema": 1}),
        Case("outcomes-good.parquet", "a valid Parquet file of outcomes (times as text)", _parquet(good), {}, clean=2),
    ]


def write(folder: Path) -> list[Case]:
    folder.mkdir(parents=True, exist_ok=True)
    for case in cases():
        (folder / case.name).write_bytes(case.content)
    return cases()


if __name__ == "__main__":
    for old in HERE.glob("outcomes*"):
        old.unlink()
    print(f"wrote {len(write(HERE))} example files to {HERE}")
