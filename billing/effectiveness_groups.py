"""Effectiveness figures per group (DESIGN's effectiveness contract): per (week_start, model,
speed_tier, task_class), and per (week_start, model, speed_tier) over every class (``*``), from the
task rows ``billing.effectiveness.tasks`` builds. Rates are shares of the group's tasks; times are
exact means and nearest-rank percentiles; money is exact until it is rounded half-up to cents."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa

from billing.effectiveness import ALL_CLASSES, GROUP_KEYS, MS_PER_HOUR, _codes, _days, _plain


def half_up(value: Fraction) -> int:
    """A non-negative fraction rounded half-up to a whole number."""
    return int((value * 2 + 1) // 2)


def cents(value: Fraction) -> Decimal:
    """A non-negative exact amount, half-up to cents."""
    return Decimal(half_up(value * 100)) / 100


def nearest_rank(sorted_values: np.ndarray, q_num: int, q_den: int) -> int:
    """The ceil(q x n)-th smallest of ``sorted_values`` (q = q_num / q_den)."""
    n = len(sorted_values)
    rank = -(-q_num * n // q_den)
    return int(sorted_values[max(rank, 1) - 1])


def group_metrics(task_rows: pa.Table, rework_cost_per_hour: Decimal) -> list[dict[str, Any]]:
    """Per (week_start, model, speed_tier, task_class), and per (week_start, model, speed_tier) with
    task_class ``*``: the figures of DESIGN's effectiveness contract, sorted by the group keys."""
    if task_rows.num_rows == 0:
        return []
    groups = _groups(task_rows)
    cum, cost_sums = _group_sums(task_rows, groups)
    per_hour = Fraction(rework_cost_per_hour)
    return [_figures(groups, cum, cost_sums[g], g, per_hour) for g in range(len(groups.starts))]


@dataclass(frozen=True)
class _Groups:
    """Each task twice, under its class and under "*", ordered by the group keys and, inside each
    group, by end-to-end time: ``order`` indexes the doubled rows, a group is ``starts[g]:ends[g]``."""

    order: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    names: list[list[Any]]  # per GROUP_KEYS, each group's value
    e2e: np.ndarray  # end-to-end microseconds, in ``order``


def _groups(task_rows: pa.Table) -> _Groups:
    # Integer codes that sort as the keys do (the distinct values sorted); one lexsort orders the
    # groups and, inside each, the end-to-end times.
    n_rows = task_rows.num_rows
    week = _days(task_rows["week_start"])
    models, model_names = _codes(task_rows["model"])
    tiers, tier_names = _codes(task_rows["speed_tier"])
    classes, class_names = _codes(
        pa.concat_arrays([_plain(task_rows["task_class"]), pa.array([ALL_CLASSES])])
    )
    star = class_names.index(ALL_CLASSES)
    keys = [np.tile(week, 2), np.tile(models, 2), np.tile(tiers, 2)]
    keys.append(np.concatenate([classes[:n_rows], np.full(n_rows, star, classes.dtype)]))
    e2e = np.tile(task_rows["e2e_us"].to_numpy(), 2)
    order = np.lexsort((e2e, *reversed(keys)))
    keys = [k[order] for k in keys]
    change = np.zeros(len(order), bool)
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    change[0] = True
    starts = np.flatnonzero(change)
    names = [
        [dt.date(1970, 1, 1) + dt.timedelta(days=int(d)) for d in keys[0][starts]],
        [model_names[i] for i in keys[1][starts]],
        [tier_names[i] for i in keys[2][starts]],
        [class_names[i] for i in keys[3][starts]],
    ]
    return _Groups(order, starts, np.append(starts[1:], len(order)), names, e2e[order])


def _group_sums(task_rows: pa.Table, groups: _Groups) -> tuple[dict[str, np.ndarray], list[Any]]:
    """Cumulative sums of the counted columns in group order (a group's total is ``cum[e] - cum[s]``),
    and each group's exact token cost (micro-dollars)."""
    order = groups.order
    ints = {c: np.tile(task_rows[c].to_numpy(), 2)[order] for c in ("model_ms", "rework_ms")}
    flags = {
        c: np.tile(task_rows[c].to_numpy(zero_copy_only=False).astype(np.int64), 2)[order]
        for c in ("one_pass", "reworked", "abandoned", "mixed")
    }
    columns = {**flags, **ints, "e2e_us": groups.e2e}
    cum = {c: np.concatenate(([0], np.cumsum(v))) for c, v in columns.items()}
    group = np.repeat(np.arange(len(groups.starts)), groups.ends - groups.starts)
    costs = task_rows["token_cost"].combine_chunks()
    cost_sums = (
        pa.table({"g": group, "c": pa.concat_arrays([costs, costs]).take(pa.array(order))})
        .group_by("g")
        .aggregate([("c", "sum")])
        .sort_by("g")["c_sum"]
        .to_pylist()
    )
    return cum, cost_sums


def _figures(
    groups: _Groups, cum: dict[str, np.ndarray], cost: Any, g: int, per_hour: Fraction
) -> dict[str, Any]:
    """One group's row of the effectiveness contract."""
    s, e = groups.starts[g], groups.ends[g]
    n = int(e - s)
    total = {c: int(cum[c][e] - cum[c][s]) for c in cum}
    accepted = total["one_pass"] + total["reworked"]
    token_exact = Fraction(cost) / 1_000_000
    rework_exact = Fraction(total["rework_ms"]) * per_hour / MS_PER_HOUR
    values = np.asarray(groups.e2e[s:e])  # sorted within the group
    return {
        **{k: groups.names[i][g] for i, k in enumerate(GROUP_KEYS)},
        "tasks": n,
        "one_pass": total["one_pass"],
        "reworked": total["reworked"],
        "abandoned": total["abandoned"],
        "mixed": total["mixed"],
        "one_pass_rate": total["one_pass"] / n,
        "rework_share": total["reworked"] / n,
        "abandon_share": total["abandoned"] / n,
        "e2e_ms_mean": half_up(Fraction(total["e2e_us"], 1000 * n)),
        "e2e_ms_p50": Decimal(nearest_rank(values, 1, 2)) / 1000,  # exact: three decimals at most
        "e2e_ms_p90": Decimal(nearest_rank(values, 9, 10)) / 1000,
        "model_ms_mean": half_up(Fraction(total["model_ms"], n)),
        "rework_ms_total": total["rework_ms"],
        "token_cost": cents(token_exact),
        "rework_cost": cents(rework_exact),
        "cost_per_accepted_task": cents((token_exact + rework_exact) / accepted) if accepted else None,
    }


def wilson(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion (0, 0 for n = 0)."""
    if n == 0:
        return (0.0, 0.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / denom
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (low, high)
