"""The retirement report reads correctly: the rule it prints is the rule the detector applies (and the
one ``docs/retirement.md`` states), its terms are defined once, and its accounts chart has decade
ticks that never collide and line labels that never overlap, in the SVG and as Chromium draws it."""

from __future__ import annotations

import html
import itertools
import re
from pathlib import Path

import numpy as np
import pytest

from pipelines.adoption.charts import accounts_chart, decades, spread
from pipelines.adoption.detect import CRITERIA, decide, rule_text
from pipelines.adoption.terms import definitions
from schemas.catalog import AdoptionConfig
from tests.browser import measure
from tests.conftest import CATALOG_PATH

ROOT = Path(CATALOG_PATH).parents[1]
WEEKS = [f"2026-{6 + i // 4:02d}-{1 + 7 * (i % 4):02d}" for i in range(12)]


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_rule_is_rendered_from_the_thresholds_the_detector_uses():
    cfg = AdoptionConfig(fdr_q=0.2, min_weekly_decline=0.07, min_median_drop=0.3, weeks=10, min_weeks=9)
    text = rule_text(cfg)
    for needle in ("q <= 0.2", "at least 7% a week", "at least 30% below", "last 10 complete", "at least 9"):
        assert needle in text, needle
    assert text.count("(") >= len(CRITERIA)
    # the detector applies exactly these criteria: a series that meets all but the decline rate is not
    # detected, and its reason names that criterion's outcome
    weeks = np.arange(10)
    accounts = 400 * 0.94**weeks  # -6% a week: below 7%, above 5%
    share = 0.1 * 0.97**weeks
    flat = np.full(10, 300.0)
    series = {
        "fading": {"active_accounts": (weeks, accounts), "token_share": (weeks, share)},
        "steady": {"active_accounts": (weeks, flat + weeks), "token_share": (weeks, flat / 3000)},
    }
    strict = decide(series, cfg)["fading"]
    assert not strict.detected and strict.reason == "not met: accounts -6.0%/week"
    assert decide(series, AdoptionConfig(weeks=10, min_weeks=9))["fading"].detected


def test_docs_state_the_shipped_rule_and_every_definition_word_for_word(catalog):
    docs = _flat((ROOT / "docs" / "retirement.md").read_text(encoding="utf-8"))
    assert _flat(rule_text(catalog.adoption)) in docs
    for term, meaning in definitions(catalog.adoption).items():
        assert f"**{term}**: {_flat(meaning)}" in docs, term


def _chart_data(ends: dict[str, list[int]], flagged: str | None = None) -> dict:
    return {
        "weeks": WEEKS,
        "models": [
            {"model": m, "flagged": m == flagged, "weekly_active_accounts": dict(zip(WEEKS, v, strict=True))}
            for m, v in ends.items()
        ],
    }


SERIES = {  # the demo's shape: two large models ending close together, a fast model fading towards 10
    "gpt-5.6-sol": [600 + 15 * i for i in range(12)],
    "gpt-5.5-mini": [520 + 17 * i for i in range(12)],
    "gpt-5.2-mini": [480 + 18 * i for i in range(12)],
    "gpt-5.3-codex-spark": [40 - 3 * i for i in range(12)],  # 40 .. 7
    "tiny": [12, 11, 11, 10, 10, 9, 9, 9, 8, 8, 8, 8],
}


def _texts(svg: str, cls: str) -> list[tuple[float, float, str]]:
    return [
        (float(x), float(y), html.unescape(t))
        for x, y, t in re.findall(rf"<text class='{cls}' x='([\d.]+)' y='([\d.]+)'[^>]*>([^<]*)</text>", svg)
    ]


def test_decade_ticks_are_powers_of_ten_a_decade_apart():
    assert decades([7, 73, 712]) == (0, 3)
    assert decades([10, 100]) == (1, 2)
    assert decades([0, 0]) == (0, 1)
    svg = accounts_chart(_chart_data(SERIES, "gpt-5.3-codex-spark"))
    ticks = _texts(svg, "tick")
    assert [t for _, _, t in ticks] == ["1", "10", "100", "1,000"]
    ys = [y for _, y, _ in ticks]
    gaps = np.diff(ys)
    assert np.all(gaps < -20) and np.allclose(gaps, gaps[0], atol=0.2)  # upwards, equal, far apart
    # a model at 8 accounts is drawn between the 1 and 10 ticks, near 10 (log10(8) = 0.9)
    tiny_end = float(re.findall(r"points='([^']*)'", svg)[4].split()[-1].split(",")[1])
    y1, y10 = ys[0] - 4, ys[1] - 4  # the label sits 4 px below its line
    assert y10 < tiny_end < y1 and (tiny_end - y10) / (y1 - y10) == pytest.approx(1 - np.log10(8), abs=0.01)


def test_line_labels_never_overlap_and_stay_in_the_chart():
    crowded = {f"m{i}": [700 + i] * 12 for i in range(6)} | {"low": [9] * 12, "lower": [8] * 12}
    for data in (_chart_data(SERIES, "gpt-5.3-codex-spark"), _chart_data(crowded)):
        svg = accounts_chart(data)
        labels = _texts(svg, "series-label")
        assert len(labels) == len(data["models"])
        ys = sorted(y for _, y, _ in labels)
        assert all(b - a >= 13 - 1e-6 for a, b in itertools.pairwise(ys)), ys
        height = float(re.search(r"height='(\d+)'", svg).group(1))
        assert ys[0] > 0 and ys[-1] < height
    placed = spread([50, 50, 51, 200], 13, 20, 240)
    assert placed[3] == 200 and sorted(placed[:3]) == [50, 63, 76]


def _rendered_boxes(page: Path, tmp: Path) -> list[dict]:
    """Every text box of the accounts chart as headless Chromium lays it out."""
    return measure(  # type: ignore[return-value]
        page,
        tmp,
        "[...document.querySelectorAll('#accounts-chart text')].map(t=>{"
        "const r=t.getBoundingClientRect();return {text:t.textContent,cls:t.getAttribute('class'),"
        "left:r.left,top:r.top,right:r.right,bottom:r.bottom}})",
    )


def assert_no_text_overlaps(boxes: list[dict]) -> None:
    labelled = [b for b in boxes if b["cls"] in ("tick", "series-label")]
    assert labelled and all(b["bottom"] > b["top"] and b["right"] > b["left"] for b in labelled)
    for a, b in itertools.combinations(labelled, 2):
        apart = (
            a["right"] <= b["left"]
            or b["right"] <= a["left"]
            or a["bottom"] <= b["top"]
            or b["bottom"] <= a["top"]
        )
        assert apart, (a, b)


@pytest.mark.slow
def test_chromium_draws_the_crowded_chart_without_overlapping_text(tmp_path):
    crowded = {f"model-{i}": [700 + 3 * i] * 12 for i in range(6)} | {"near-ten": [11] * 11 + [9]}
    page = tmp_path / "chart.html"
    page.write_text(f"<!doctype html><html><body>{accounts_chart(_chart_data(crowded))}</body></html>")
    boxes = _rendered_boxes(page, tmp_path)
    assert {b["text"] for b in boxes if b["cls"] == "tick"} == {"1", "10", "100", "1,000"}
    assert_no_text_overlaps(boxes)
