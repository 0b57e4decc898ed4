"""Synthetic tasks and their outcomes for the demo scenario, vectorized (deterministic by seed).

What the data shows:
- most requests belong to a task (``task_id``): consecutive requests of one account and model on one
  day, a few requests each, a think time apart; a few tasks mix speed tiers;
- each task has a class; the fast model's work leans to completion and single-file edits;
- per model and class, first-pass and rework rates near the published figures: the fast coding
  model close to the flagship on completion and extraction, far below it on multi-file and
  tool-chain work (about 58% against 77% of tasks accepted without rework overall);
- rework takes a person minutes, much longer on the fast model's failed multi-file work, so its cost
  per accepted task, rework included, is above the flagship's there while its end-to-end time
  without rework looks better;
- some outcomes name a task no request carries (orphans), some tasks never report (open), some
  outcomes are resent.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.outcomes import OUTCOME_SCHEMA

DAY_US = 86_400_000_000
TASK_SHARE = 0.85  # requests that belong to a task
BREAK = 0.35  # chance that a request starts a new task within an (account, model, day) stream
MIXED_SHARE = 0.06  # requests of a task that keep a tier of their own
OPEN_SHARE = 0.03  # tasks that never report an outcome
ORPHAN_SHARE = 0.01  # outcomes for a task no request carries
RESEND_SHARE = 0.003
CLASSES = ("completion", "single_file_edit", "extraction", "multi_file", "tool_chain")
# Task class mix per kind of model (the fast model's work leans to quick edits).
MIX = {
    "fast": (0.30, 0.25, 0.15, 0.18, 0.12),
    "flagship": (0.15, 0.20, 0.10, 0.30, 0.25),
    "mini": (0.25, 0.25, 0.20, 0.18, 0.12),
}
# (one-pass, rework) per kind and class; the rest is abandoned.
RATES = {
    "fast": ((0.78, 0.12), (0.70, 0.16), (0.78, 0.11), (0.36, 0.38), (0.30, 0.36)),
    "flagship": ((0.85, 0.09), (0.80, 0.12), (0.84, 0.09), (0.72, 0.20), (0.68, 0.22)),
    "mini": ((0.80, 0.11), (0.70, 0.16), (0.78, 0.11), (0.45, 0.30), (0.40, 0.30)),
}
# Median minutes of a person's rework per kind and class.
REWORK_MIN = {
    "fast": (1.0, 3.0, 1.5, 30.0, 25.0),
    "flagship": (1.0, 2.5, 1.0, 8.0, 7.0),
    "mini": (1.0, 3.0, 1.5, 16.0, 14.0),
}
# Median seconds a person takes between a response and the next request of the task: a fast model's
# users iterate in quick turns.
THINK_S = {"fast": 6.0, "flagship": 20.0, "mini": 14.0}
WAIT_S = (4.0, 15.0, 8.0, 40.0, 60.0)  # median seconds between the last response and the verdict


def model_kind(model_id: str) -> str:
    if "spark" in model_id:
        return "fast"
    return "mini" if "mini" in model_id else "flagship"


def group_tasks(
    rng: np.random.Generator,
    acc: np.ndarray,
    model: np.ndarray,
    tier: np.ndarray,
    day: np.ndarray,
    times: np.ndarray,
    duration: np.ndarray,
    think_s: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(task number per request, -1 for none; times; tiers): requests grouped into tasks, the later
    requests of a task moved to a think time after the one before (on the same UTC day), and a
    task's requests served at its first request's tier (but a few)."""
    n = len(acc)
    task = np.full(n, -1, np.int64)
    if n == 0:
        return task, times, tier
    rows = np.flatnonzero(rng.random(n) < TASK_SHARE)
    order = rows[np.lexsort((times[rows], day[rows], model[rows], acc[rows]))]
    key_change = np.ones(len(order), bool)
    key_change[1:] = (acc[order][1:] != acc[order][:-1]) | (model[order][1:] != model[order][:-1])
    key_change[1:] |= day[order][1:] != day[order][:-1]
    starts = key_change | (rng.random(len(order)) < BREAK)
    number = np.cumsum(starts) - 1
    task[order] = number
    # Times: the first request keeps its time; each later one follows the previous by its duration
    # plus a think time (median 20 s), capped at the end of its UTC day.
    think = (np.full(int(model.max()) + 1, 20.0) if think_s is None else think_s)[model[order]]
    gap = (duration[order] * 1000 + rng.lognormal(np.log(think * 1e6), 0.8)).astype(np.int64)
    gap = np.where(starts, 0, np.roll(gap, 1))
    run = np.cumsum(gap)
    base = np.maximum.accumulate(np.where(starts, run, 0))
    first = np.maximum.accumulate(np.where(starts, np.arange(len(order)), 0))  # each row's task start
    first_time = times[order][first]
    day_end = (times[order] // DAY_US + 1) * DAY_US - 1
    times = times.copy()
    moved = first_time + run - base
    # a request that would move past its UTC day keeps its own time (no two requests share one)
    times[order] = np.where(moved <= day_end, moved, times[order])
    first_tier = first
    tier = tier.copy()
    keep_own = rng.random(len(order)) < MIXED_SHARE
    tier[order] = np.where(keep_own, tier[order], tier[order][first_tier])
    return task, times, tier


def outcomes(
    rng: np.random.Generator,
    events: pa.Table,
    task: np.ndarray,
    model_ids: list[str],
    n_days: int,
    start_us: int,
    seed: int,
    account_ids: pa.Array,
) -> tuple[pa.Table, np.ndarray]:
    """(outcome rows in OUTCOME_SCHEMA, their landing day index) for the tasks of ``events`` (in the
    order of ``task``), plus orphans and resends."""
    has = task >= 0
    idx = np.flatnonzero(has)
    if len(idx) == 0:
        return OUTCOME_SCHEMA.empty_table(), np.zeros(0, np.int64)
    t = task[idx]
    order = idx[np.argsort(t, kind="stable")]
    t_sorted = task[order]
    first = np.flatnonzero(np.concatenate(([True], t_sorted[1:] != t_sorted[:-1])))
    last = np.append(first[1:], len(order)) - 1
    times = pc.cast(events["event_time"], pa.int64()).to_numpy()
    durations = pc.fill_null(events["duration_ms"], 0).to_numpy()
    model_col = pc.index_in(events["model"], value_set=pa.array(model_ids)).to_numpy()
    k = len(first)
    kinds = np.array([model_kind(m) for m in model_ids])[model_col[order[first]]]
    cls = np.zeros(k, np.int64)
    one_pass = np.zeros(k, bool)
    reworked = np.zeros(k, bool)
    rework_ms = np.zeros(k, np.int64)
    u = rng.random(k)
    v = rng.random(k)
    for kind in MIX:
        rows = np.flatnonzero(kinds == kind)
        if not len(rows):
            continue
        cum = np.cumsum(MIX[kind])
        c = np.searchsorted(cum / cum[-1], u[rows], side="right").clip(0, len(CLASSES) - 1)
        cls[rows] = c
        p_one = np.array([r[0] for r in RATES[kind]])[c]
        p_rework = np.array([r[1] for r in RATES[kind]])[c]
        one_pass[rows] = v[rows] < p_one
        reworked[rows] = (v[rows] >= p_one) & (v[rows] < p_one + p_rework)
        minutes = np.array(REWORK_MIN[kind])[c]
        rework_ms[rows] = np.where(
            reworked[rows], (rng.lognormal(np.log(minutes * 60_000), 0.6)).astype(np.int64), 0
        )
    abandoned = ~one_pass & ~reworked
    started = times[order[first]] - rng.integers(3_000_000, 40_000_000, k)
    model_end = times[order[last]] + durations[order[last]] * 1000
    wait = rng.lognormal(np.log(np.array(WAIT_S)[cls] * 1e6), 0.7).astype(np.int64)
    completed = model_end + wait + rework_ms * 1000
    task_no = t_sorted[first]
    reports = rng.random(k) >= OPEN_SHARE
    landing = (completed - start_us) // DAY_US
    reports &= landing < n_days  # completed after the generated range: still open
    keep = np.flatnonzero(reports)
    acc = events["account_id"].combine_chunks().take(pa.array(order[first][keep]))
    table = _table(
        pc.binary_join_element_wise("t-", str(seed), "-", pa.array(task_no[keep]).cast(pa.string()), ""),
        acc,
        cls[keep],
        rng.random(len(keep)) < 0.03,
        started[keep],
        completed[keep],
        abandoned[keep],
        reworked[keep],
        rework_ms[keep],
    )
    landing = landing[keep]
    # Orphans: outcomes whose task no request carries.
    m = max(1, int(len(keep) * ORPHAN_SHARE))
    o_done = start_us + rng.integers(0, n_days * DAY_US, m)
    o_start = o_done - rng.integers(60_000_000, 600_000_000, m)
    o_rework = rng.random(m) < 0.2
    orphans = _table(
        pc.binary_join_element_wise(
            "t-orphan-", str(seed), "-", pa.array(np.arange(m)).cast(pa.string()), ""
        ),
        account_ids.take(pa.array(rng.integers(0, len(account_ids), m))),
        rng.integers(0, len(CLASSES), m),
        np.zeros(m, bool),
        o_start,
        o_done,
        np.zeros(m, bool),
        o_rework,
        np.where(o_rework, 30_000, 0),
    )
    table = pa.concat_tables([table, orphans])
    landing = np.concatenate([landing, (o_done - start_us) // DAY_US])
    resend = np.flatnonzero(rng.random(table.num_rows) < RESEND_SHARE)
    table = pa.concat_tables([table, table.take(pa.array(resend))])
    landing = np.concatenate([landing, np.minimum(landing[resend] + 1, n_days - 1)])
    return table, landing


def _table(
    task_id, account, cls, unclassified, started, completed, abandoned, reworked, rework_ms
) -> pa.Table:
    n = len(started)
    names = pa.array(CLASSES).take(pa.array(cls, pa.int64()))
    return pa.table(
        {
            "task_id": task_id,
            "account_id": account,
            "task_class": pc.if_else(pa.array(unclassified), pa.nulls(n, pa.string()), names),
            "started_at": pa.array(started, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "completed_at": pa.array(completed, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "outcome": pa.array(["accepted", "abandoned"]).take(pa.array(abandoned.astype(np.int8))),
            "rework": pa.array(reworked),
            "rework_ms": pa.array(rework_ms, pa.int64()),
        },
        schema=OUTCOME_SCHEMA,
    )
