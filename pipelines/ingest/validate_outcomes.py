"""Row checks of task outcomes (their own reasons), vectorized like the usage events' (``validate``).

Reasons: ``missing_<field>`` for a required field, ``bad_`` / ``naive_started_at`` and
``completed_at`` (not a time, or no zone), ``empty_task_id`` / ``empty_account_id``, ``value_too_long``
(ids over 200 characters, a task class over 64), ``control_character``,
``non_canonical_account_id`` (a look-alike account id: ``schemas.limits``), ``unsupported_specversion``,
``unknown_outcome``, ``completed_before_started``, ``task_too_long`` (open more than MAX_TASK_DAYS),
``negative_rework_ms``, ``rework_ms_without_rework``, ``rework_on_abandoned``, ``rework_exceeds_task``
(more rework than the task's duration), ``future_outcome`` and ``too_late`` (completed_at outside the
landing date's window, as for events).
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.ingest.datasets import OUTCOMES
from pipelines.ingest.masks import as_mask, nulls
from pipelines.ingest.readers import SPEC_OK, RawChunk
from pipelines.ingest.rules import Rules
from pipelines.ingest.validate import (
    _blank,
    _control_characters,
    _not_in,
    _split,
    _time_window,
    _too_long,
    non_canonical,
    parse_event_time,
)
from schemas import outcomes as oc
from schemas.limits import MAX_ID_LENGTH

_MS_US = 1000


def validate_outcomes(
    chunk: RawChunk, landing_date: dt.date, source_file: str, rules: Rules
) -> tuple[pa.Table, pa.Table]:
    """Task outcomes' row checks (their own reasons), vectorized like the events'."""
    raw = chunk.table
    n = raw.num_rows
    checks: list[tuple[str, np.ndarray]] = []
    for name in oc.REQUIRED_FIELDS:
        checks.append((f"missing_{name}", nulls(raw[name])))
    times: dict[str, pa.Array] = {}
    for name in oc.TIME_FIELDS:
        values, bad, naive = parse_event_time(raw[name])
        times[name] = values
        checks.append((f"bad_{name}", bad))
        checks.append((f"naive_{name}", naive))
    for name in oc.KEY_FIELDS:
        checks.append((f"empty_{name}", _blank(raw[name])))
    too_long = np.zeros(n, bool)
    control = np.zeros(n, bool)
    for name in ("task_id", "account_id", "task_class"):
        too_long |= _too_long(raw[name], oc.MAX_TASK_CLASS_LENGTH if name == "task_class" else MAX_ID_LENGTH)
        control |= _control_characters(raw[name])
    checks.append(("value_too_long", too_long))
    checks.append(("control_character", control))
    blank = dict(checks)["empty_account_id"]  # told as empty, not as a look-alike
    checks.append(("non_canonical_account_id", non_canonical(raw["account_id"]) & ~blank))
    if SPEC_OK in raw.column_names:
        checks.append(("unsupported_specversion", ~as_mask(raw[SPEC_OK])))
    checks.append(("unknown_outcome", _not_in(raw["outcome"], oc.OUTCOMES)))
    started, completed = (pc.cast(times[f], pa.int64()) for f in oc.TIME_FIELDS)
    span_us = pc.subtract(completed, started)
    checks.append(("completed_before_started", as_mask(pc.less(span_us, 0))))
    checks.append(("task_too_long", as_mask(pc.greater(span_us, oc.MAX_TASK_DAYS * 86_400_000_000))))
    rework, rework_ms = raw["rework"], raw["rework_ms"]
    checks.append(("negative_rework_ms", as_mask(pc.less(rework_ms, 0))))
    checks.append(("rework_ms_without_rework", as_mask(pc.and_(pc.invert(rework), pc.greater(rework_ms, 0)))))
    checks.append(
        (
            "rework_on_abandoned",
            as_mask(pc.and_(rework, pc.equal(raw["outcome"].cast(pa.string()), "abandoned"))),
        )
    )
    # rework_ms * 1000 > span, without the product's overflow: rework_ms > floor(span / 1000); a
    # negative span is completed_before_started already
    longer = pc.and_(pc.greater_equal(span_us, 0), pc.greater(rework_ms, pc.divide(span_us, _MS_US)))
    checks.append(("rework_exceeds_task", as_mask(longer)))
    future, late = _time_window(times["completed_at"], landing_date, rules)
    checks.append(("future_outcome", future))
    checks.append(("too_late", late))
    return _split(chunk, checks, times, landing_date, source_file, OUTCOMES)
