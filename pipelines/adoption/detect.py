"""Declining adoption, detected with statistics that hold up when many models are tested at once.

For each model, over the last N complete ISO weeks (default 12, at least 8; weeks whose data-quality
gate failed are left out), two series: weekly active accounts and share of platform tokens, both on
a log scale. Each gets
- a one-sided exact Mann-Kendall test for a downward trend (Kendall's tau of value against week,
  ``scipy.stats.kendalltau(alternative="less", method="exact")``);
- the Theil-Sen slope with its 90% interval (``scipy.stats.theilslopes``), i.e. the weekly rate
  ``exp(slope) - 1`` with an interval.
The p-values of all models and both metrics are adjusted together (Benjamini-Hochberg). Which
conditions make a model *detected*, and *flagged* (a retirement candidate), is ``CRITERIA``: ``decide``
applies them and ``rule_text`` states them from the same thresholds (the catalog's ``[adoption]``
table), so the report, its JSON and the docs print the rule the code applies. Every result carries
``METHOD_VERSION``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from schemas.catalog_sections import AdoptionConfig

METHOD_VERSION = "mk-exact+theil-sen90+bh/1"
METRICS = ("active_accounts", "token_share")


@dataclass(frozen=True)
class Trend:
    n: int
    p_value: float
    slope: float  # per week, on the log scale
    low: float  # 90% interval of the slope
    high: float
    intercept: float
    first_median: float
    last_median: float

    @property
    def weekly_change(self) -> float:
        """Relative change per week, e.g. -0.08 for 8% fewer a week."""
        return math.expm1(self.slope)

    @property
    def weekly_change_interval(self) -> tuple[float, float]:
        return math.expm1(self.low), math.expm1(self.high)

    @property
    def median_drop(self) -> float:
        """How far the last 4 weeks' median is below the first 4 weeks' (0.25 = 25% lower)."""
        return 1 - self.last_median / self.first_median if self.first_median > 0 else 0.0


def trend(weeks: np.ndarray, values: np.ndarray) -> Trend:
    """Mann-Kendall (one-sided, exact) and Theil-Sen on log(values); weeks are integers (gaps allowed)."""
    weeks = np.asarray(weeks, dtype=float)
    values = np.asarray(values, dtype=float)
    positive = values[values > 0]
    floor = positive.min() / 2 if len(positive) else 1.0  # a week with none: finite, below every other
    y = np.log(np.where(values > 0, values, floor))
    method = "exact" if len(np.unique(y)) == len(y) else "auto"  # exact needs no ties
    p = float(stats.kendalltau(weeks, y, alternative="less", method=method).pvalue)
    slope, intercept, low, high = stats.theilslopes(y, weeks, alpha=0.90)
    k = min(4, len(values) // 2)
    return Trend(
        n=len(values),
        p_value=1.0 if math.isnan(p) else p,
        slope=float(slope),
        low=float(low),
        high=float(high),
        intercept=float(intercept),
        first_median=float(np.median(values[:k])),
        last_median=float(np.median(values[-k:])),
    )


@dataclass(frozen=True)
class Decision:
    model: str
    weeks_used: int
    trends: dict[str, Trend]
    q_values: dict[str, float]
    detected: bool
    reason: str


@dataclass(frozen=True)
class Criterion:
    """One condition of the rule: what it says (``text``, filled from the thresholds), whether a
    model meets it and what the model's own figure was (``outcome``)."""

    text: str
    met: Callable[[dict[str, Trend], dict[str, float], AdoptionConfig], bool]
    outcome: Callable[[dict[str, Trend], dict[str, float]], str]


# The rule, once: ``decide`` applies these, ``rule_text`` states them, the report and docs print that.
CRITERIA = (
    Criterion(
        "the model was used in the window",
        lambda t, q, cfg: t["active_accounts"].first_median > 0 or t["active_accounts"].last_median > 0,
        lambda t, q: "used in the window",
    ),
    Criterion(
        "its weekly active accounts fall significantly: a one-sided Mann-Kendall test, with the "
        "p-values of every model and both series adjusted together (Benjamini-Hochberg), gives "
        "q <= {fdr_q:g}",
        lambda t, q, cfg: q["active_accounts"] <= cfg.fdr_q,
        lambda t, q: f"accounts trend q={q['active_accounts']:.3f}",
    ),
    Criterion(
        "its share of platform tokens falls too: a negative Theil-Sen slope (its q is reported, not "
        "required, since a few heavy users can hold a fading model's share up; when the whole "
        "platform shrinks, shares hold and nothing is flagged)",
        lambda t, q, cfg: t["token_share"].slope < 0,
        lambda t, q: f"token share {t['token_share'].weekly_change:+.1%}/week (q={q['token_share']:.3f})",
    ),
    Criterion(
        "its active accounts fall by at least {min_weekly_decline:.0%} a week (Theil-Sen slope)",
        lambda t, q, cfg: t["active_accounts"].weekly_change <= -cfg.min_weekly_decline,
        lambda t, q: f"accounts {t['active_accounts'].weekly_change:+.1%}/week",
    ),
    Criterion(
        "the median of its active accounts over the last 4 weeks is at least {min_median_drop:.0%} "
        "below the median over the first 4",
        lambda t, q, cfg: t["active_accounts"].median_drop >= cfg.min_median_drop,
        lambda t, q: f"last-4 median {t['active_accounts'].median_drop:.0%} below first-4",
    ),
)


def rule_text(cfg: AdoptionConfig) -> str:
    """The detector's rule in words, from the same thresholds and criteria ``decide`` applies."""
    values = cfg.model_dump()
    conditions = "; ".join(f"({i}) {c.text.format(**values)}" for i, c in enumerate(CRITERIA, 1))
    return (
        f"A model is detected when, over the last {cfg.weeks} complete ISO weeks (weeks that failed "
        f"data quality left out; at least {cfg.min_weeks} usable weeks), all of these hold: "
        f"{conditions}. It is flagged as a retirement candidate when it is detected in this week's run "
        "and in the run of the week before."
    )


def decide(
    series: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]], cfg: AdoptionConfig
) -> dict[str, Decision]:
    """series: model -> metric -> (week numbers, values), already restricted to usable weeks."""
    trends: dict[tuple[str, str], Trend] = {}
    too_short: dict[str, int] = {}
    for model, metrics in series.items():
        n = len(metrics["active_accounts"][0])
        if n < cfg.min_weeks:
            too_short[model] = n
            continue
        for metric in METRICS:
            weeks, values = metrics[metric]
            trends[(model, metric)] = trend(weeks, values)
    keys = sorted(trends)
    q = (
        stats.false_discovery_control([trends[k].p_value for k in keys], method="bh")
        if keys
        else np.array([])
    )
    q_of = dict(zip(keys, (float(v) for v in q), strict=True))
    out: dict[str, Decision] = {}
    for model in series:
        if model in too_short:
            out[model] = Decision(
                model, too_short[model], {}, {}, False, f"only {too_short[model]} usable weeks"
            )
            continue
        t = {m: trends[(model, m)] for m in METRICS}
        qs = {m: q_of[(model, m)] for m in METRICS}
        results = [(c.met(t, qs, cfg), c.outcome(t, qs)) for c in CRITERIA]
        failed = [text for ok, text in results if not ok]
        detected = not failed
        reason = "; ".join(text for _, text in results) if detected else "not met: " + "; ".join(failed)
        out[model] = Decision(model, t["active_accounts"].n, t, qs, detected, reason)
    return out


def projected_crossing(
    t: Trend, last_week: int, current: float, floor: float, window: int
) -> tuple[float, float] | None:
    """Weeks from ``last_week`` until the fitted accounts fall to ``floor``: (earliest, latest), using the
    slope interval. None when the interval includes zero (no reliable decline) or the floor is already
    reached; the latest is capped at twice the observed window."""
    if t.high >= 0 or t.low >= 0:
        return None
    level = math.log(max(current, 0.5))
    target = math.log(max(floor, 0.5))
    if level <= target:
        return None
    earliest = (target - level) / t.low  # steepest decline first
    latest = (target - level) / t.high
    cap = 2 * window
    if earliest > cap:
        return None
    return earliest, min(latest, cap)
