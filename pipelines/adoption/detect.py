"""Declining adoption, detected with statistics that hold up when many models are tested at once.

For each model, over the last N complete ISO weeks (default 12, at least 8; weeks whose data-quality
gate failed are left out), two series: weekly active accounts and share of platform tokens, both on
a log scale. Each gets
- a one-sided exact Mann-Kendall test for a downward trend (Kendall's tau of value against week,
  ``scipy.stats.kendalltau(alternative="less", method="exact")``);
- the Theil-Sen slope with its 90% interval (``scipy.stats.theilslopes``), i.e. the weekly rate
  ``exp(slope) - 1`` with an interval.
The p-values of all models and both metrics are adjusted together (Benjamini-Hochberg). A model is
*detected* when its active accounts decline significantly (q <= 0.10) and pass the effect-size gate
(at least 5% fewer accounts a week, the median of the last 4 weeks at least 25% below the median of
the first 4), while its share of platform tokens is falling too (a negative Theil-Sen slope: when the
whole platform shrinks, shares hold and nothing is flagged; the share's own q is reported, since a
few heavy users can keep a fading model's token share up). It is *flagged* (a retirement candidate)
only when the run of the previous week detected it too. Thresholds come from the catalog's
``[adoption]`` table; every result carries ``METHOD_VERSION``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from schemas.catalog import AdoptionConfig

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
        accounts = t["active_accounts"]
        share = t["token_share"]
        checks = [
            (accounts.first_median > 0 or accounts.last_median > 0, "used in the window"),
            (qs["active_accounts"] <= cfg.fdr_q, f"accounts trend q={qs['active_accounts']:.3f}"),
            (share.slope < 0, f"token share {share.weekly_change:+.1%}/week (q={qs['token_share']:.3f})"),
            (
                accounts.weekly_change <= -cfg.min_weekly_decline,
                f"accounts {accounts.weekly_change:+.1%}/week",
            ),
            (
                accounts.median_drop >= cfg.min_median_drop,
                f"last-4 median {accounts.median_drop:.0%} below first-4",
            ),
        ]
        failed = [text for ok, text in checks if not ok]
        detected = not failed
        reason = "; ".join(text for _, text in checks) if detected else "not met: " + "; ".join(failed)
        out[model] = Decision(model, accounts.n, t, qs, detected, reason)
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
