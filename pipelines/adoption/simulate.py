"""Weekly adoption series with known truth, for evaluating the retirement detector (not tuning it).

Each scenario gives a model's weekly active accounts and its share of platform tokens over
``weeks`` + 1 weeks (the detector also looks at the week before, as the previous run), with
Poisson noise on counts. ``declining`` is the truth: the model really loses adoption.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipelines.adoption.detect import decide

SCENARIOS = (
    "decline_3pct",
    "decline_5pct",
    "decline_8pct",
    "stable",
    "growing",
    "weekly_seasonality",
    "holiday_dip",
    "partial_week",
    "platform_dip",
)


@dataclass(frozen=True)
class Simulated:
    scenario: str
    declining: bool
    accounts: np.ndarray
    share: np.ndarray
    dq_failed: np.ndarray  # weeks the data-quality gate would fail


def simulate(scenario: str, rng: np.random.Generator, weeks: int = 13, base: float = 400.0) -> Simulated:
    t = np.arange(weeks, dtype=float)
    level = np.full(weeks, base)
    platform = np.ones(weeks)  # platform-wide activity factor (1 = normal)
    failed = np.zeros(weeks, bool)
    declining = False
    if scenario.startswith("decline_"):
        rate = int(scenario.split("_")[1].removesuffix("pct")) / 100
        level = base * (1 - rate) ** t
        declining = True
    elif scenario == "growing":
        level = base * 1.04**t
    elif scenario == "weekly_seasonality":
        level = base * (1 + 0.15 * np.sin(2 * np.pi * t / 4))  # a monthly cycle seen in weekly data
    elif scenario == "holiday_dip":
        dip = int(rng.integers(4, weeks - 2))
        platform[dip] = 0.55  # one holiday week: everyone uses less
        platform[dip + 1] = 0.85
    elif scenario == "partial_week":
        week = int(rng.integers(weeks - 4, weeks))
        level[week] *= 0.4  # three of seven days missing: the volume check fails that week
        failed[week] = True
    elif scenario == "platform_dip":
        start = int(rng.integers(5, weeks - 3))
        platform[start : start + 3] = 0.6  # everyone uses less for three weeks
    accounts = rng.poisson(level * platform).astype(float)
    # Tokens: each active account's weekly tokens vary with a coefficient of variation of 1, so a sum
    # over k accounts is Gamma(k, mean); the rest of the platform is 5,000 such accounts.
    own_tokens = rng.gamma(np.maximum(accounts, 1), 5e4) * (accounts > 0)
    other_tokens = rng.gamma(5000 * platform, 5e4)
    share = own_tokens / (own_tokens + other_tokens)
    return Simulated(scenario, declining, accounts, share, failed)


def run_detector(models: dict[str, Simulated], cfg) -> dict[str, bool]:
    """Flag models as the weekly report does: detected on the last ``cfg.weeks`` weeks and on the
    window one week earlier (the previous run), failed weeks left out. Returns model -> flagged."""

    def window(sim: Simulated, end: int) -> dict:
        idx = np.arange(end - cfg.weeks, end)
        keep = idx[~sim.dq_failed[idx]]
        rel = keep - (end - cfg.weeks)
        return {"active_accounts": (rel, sim.accounts[keep]), "token_share": (rel, sim.share[keep])}

    n = len(next(iter(models.values())).accounts)
    now = decide({m: window(s, n) for m, s in models.items()}, cfg)
    before = decide({m: window(s, n - 1) for m, s in models.items()}, cfg)
    return {m: now[m].detected and before[m].detected for m in models}


def evaluate(runs: int, cfg, seed: int = 0) -> dict[str, dict[str, float]]:
    """``runs`` simulated platforms, each with one model per scenario tested together.
    Returns per scenario the flag rate, and overall recall per decline rate and false discovery rate."""
    rng = np.random.default_rng(seed)
    flags = {s: 0 for s in SCENARIOS}
    false_flags = true_flags = 0
    for _ in range(runs):
        models = {
            s: simulate(s, rng, weeks=cfg.weeks + 1, base=float(rng.choice([60, 400, 2000])))
            for s in SCENARIOS
        }
        result = run_detector(models, cfg)
        for s, flagged in result.items():
            flags[s] += flagged
            if flagged:
                true_flags += models[s].declining
                false_flags += not models[s].declining
    rates = {s: flags[s] / runs for s in SCENARIOS}
    total = true_flags + false_flags
    return {"flag_rate": rates, "fdr": {"all": false_flags / total if total else 0.0}}
