"""The effectiveness contract, written again one task at a time: the independent reference that
``billing.effectiveness`` and the pipeline are held to.

Nothing here comes from ``billing`` or ``pipelines``: plain dicts, ``datetime``, ``Fraction`` and the
catalog's price list searched by hand. Inputs are lists of dicts: requests with account_id, task_id,
event_time, model, speed_tier, input_tokens, cached_input_tokens, output_tokens, duration_ms; outcomes
with account_id, task_id, task_class, started_at, completed_at, outcome, rework, rework_ms.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from decimal import Decimal
from fractions import Fraction

TIERS = ("standard", "priority", "ultrafast")


def price(catalog, model: str, tier: str, kind: str, day: dt.date) -> Fraction:  # type: ignore[no-untyped-def]
    """The newest price of exactly (model, tier) with effective_from <= day; KeyError if none."""
    found = [p for p in catalog.prices if p.model == model and p.tier == tier and p.effective_from <= day]
    if not found:
        raise KeyError((model, tier, kind, day))
    return Fraction(max(found, key=lambda p: p.effective_from).per_million(kind))


def task_rows(outcomes: list[dict], requests: list[dict], catalog) -> tuple[list[dict], int]:  # type: ignore[no-untyped-def]
    """(one dict per task with at least one request, the number of orphan outcomes)."""
    by_key: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in requests:
        if r["task_id"] is not None:
            by_key[(r["account_id"], r["task_id"])].append(r)
    out, orphans = [], 0
    for o in outcomes:
        first, last = o["started_at"].date(), o["completed_at"].date()
        mine = [r for r in by_key[(o["account_id"], o["task_id"])] if first <= r["event_time"].date() <= last]
        if not mine:
            orphans += 1
            continue
        output: dict[tuple[str, str], int] = defaultdict(int)
        for r in mine:
            output[(r["model"], r["speed_tier"])] += r["output_tokens"]
        model, tier = min(output, key=lambda p: (-output[p], p[0], TIERS.index(p[1])))
        cost = Fraction(0)
        for r in mine:
            day = r["event_time"].date()
            kinds = {
                "input": r["input_tokens"] - r["cached_input_tokens"],
                "cached_input": r["cached_input_tokens"],
                "output": r["output_tokens"],
            }
            for kind, n in kinds.items():
                cost += n * price(catalog, r["model"], r["speed_tier"], kind, day) / 1_000_000
        completed = o["completed_at"]
        span = completed - o["started_at"]
        out.append(
            {
                "week_start": completed.date() - dt.timedelta(days=completed.date().weekday()),
                "model": model,
                "speed_tier": tier,
                "task_class": o["task_class"] or "unclassified",
                "mixed": len(output) > 1,
                "one_pass": o["outcome"] == "accepted" and not o["rework"],
                "reworked": o["outcome"] == "accepted" and o["rework"],
                "abandoned": o["outcome"] == "abandoned",
                "e2e_ms": Fraction(
                    span.days * 86_400_000_000 + span.seconds * 1_000_000 + span.microseconds, 1000
                ),
                "model_ms": sum(r["duration_ms"] or 0 for r in mine),
                "rework_ms": o["rework_ms"],
                "token_cost": cost,
            }
        )
    return out, orphans


def _half_up(x: Fraction) -> int:
    return math.floor(x + Fraction(1, 2))


def _cents(x: Fraction) -> Decimal:
    return Decimal(_half_up(x * 100)) / 100


def groups(tasks: list[dict], per_hour: Decimal) -> dict[tuple, dict]:
    """(week_start, model, speed_tier, task_class) -> the figures; task_class "*" = all classes."""
    members: dict[tuple, list[dict]] = defaultdict(list)
    for t in tasks:
        for cls in (t["task_class"], "*"):
            members[(t["week_start"], t["model"], t["speed_tier"], cls)].append(t)
    out = {}
    for key, ts in members.items():
        n = len(ts)
        e2e = sorted(t["e2e_ms"] for t in ts)
        one = sum(t["one_pass"] for t in ts)
        rew = sum(t["reworked"] for t in ts)
        token = sum((t["token_cost"] for t in ts), Fraction(0))
        rework_ms = sum(t["rework_ms"] for t in ts)
        rework = Fraction(rework_ms) / 3_600_000 * Fraction(per_hour)
        out[key] = {
            "tasks": n,
            "one_pass": one,
            "reworked": rew,
            "abandoned": sum(t["abandoned"] for t in ts),
            "mixed": sum(t["mixed"] for t in ts),
            "one_pass_rate": one / n,
            "rework_share": rew / n,
            "e2e_ms_mean": _half_up(sum(e2e, Fraction(0)) / n),
            "e2e_ms_p50": e2e[math.ceil(0.5 * n) - 1],
            "e2e_ms_p90": e2e[math.ceil(Fraction(9, 10) * n) - 1],
            "model_ms_mean": _half_up(Fraction(sum(t["model_ms"] for t in ts), n)),
            "rework_ms_total": rework_ms,
            "token_cost": _cents(token),
            "rework_cost": _cents(rework),
            "cost_per_accepted_task": _cents((token + rework) / (one + rew)) if one + rew else None,
        }
    return out
