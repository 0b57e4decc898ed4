"""The detector's statistics and its behaviour on simulated adoption with known truth."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.adoption.detect import decide, projected_crossing, trend
from pipelines.adoption.simulate import SCENARIOS, evaluate, run_detector, simulate
from schemas.catalog import AdoptionConfig

CFG = AdoptionConfig()


def test_trend_measures_a_known_decline_and_its_interval():
    weeks = np.arange(12)
    t = trend(weeks, 1000 * 0.9**weeks)
    assert t.weekly_change == pytest.approx(-0.10, abs=1e-9)
    assert t.p_value < 1e-4 and t.median_drop > 0.5
    flat = trend(weeks, np.full(12, 100.0) + (weeks % 2))
    assert flat.p_value > 0.3


def test_weeks_with_no_use_stay_finite_and_count_as_the_lowest():
    t = trend(np.arange(8), np.array([0.2, 0.1, 0.05, 0.03, 0.02, 0.01, 0.0, 0.0]))
    assert np.isfinite(t.slope) and t.slope < 0


def test_too_few_usable_weeks_are_not_tested():
    series = {
        "m": {
            "active_accounts": (np.arange(7), np.arange(7.0, 0, -1)),
            "token_share": (np.arange(7), np.ones(7)),
        }
    }
    assert decide(series, CFG)["m"].detected is False
    assert "only 7 usable weeks" in decide(series, CFG)["m"].reason


def test_projection_uses_the_interval_and_never_goes_beyond_twice_the_window():
    weeks = np.arange(12)
    fast = trend(weeks, 400 * 0.85**weeks)
    earliest, latest = projected_crossing(fast, 11, 400 * 0.85**11, 25, 12)
    assert 0 < earliest <= latest <= 24
    flat = trend(weeks, np.array([100, 98, 103, 99, 101, 97, 102, 100, 99, 101, 98, 100.0]))
    assert projected_crossing(flat, 11, 100, 25, 12) is None


@pytest.mark.parametrize("scenario", ["holiday_dip", "partial_week", "platform_dip", "stable", "growing"])
def test_no_flag_for_dips_partial_data_or_healthy_models(scenario):
    rng = np.random.default_rng(42)
    for _ in range(20):
        models = {s: simulate(s, rng, weeks=13) for s in SCENARIOS}
        assert run_detector(models, CFG)[scenario] is False


def test_recall_and_false_discovery_rate_on_simulated_truth():
    result = evaluate(60, CFG, seed=7)
    assert result["flag_rate"]["decline_8pct"] >= 0.9
    assert result["fdr"]["all"] <= 0.05
    assert result["flag_rate"]["holiday_dip"] == 0 and result["flag_rate"]["partial_week"] == 0
