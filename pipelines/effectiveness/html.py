"""The effectiveness report as Markdown and as one self-contained HTML page (inline SVG, no scripts)."""

from __future__ import annotations

import datetime as dt
import html
from typing import TYPE_CHECKING

from billing import effectiveness as eff
from pipelines.effectiveness.figures import ALL_TIERS, sentence
from pipelines.effectiveness.figures import duration as _duration
from pipelines.effectiveness.figures import money as _money

if TYPE_CHECKING:  # the report module renders with this one
    from pipelines.effectiveness.report import EffectivenessReport, EffectivenessView

e = html.escape


# -- Markdown -----------------------------------------------------------------------------------


def _rework_note(view: EffectivenessView) -> str:
    if view.costed:
        return f"Rework is costed at {view.currency} {view.per_hour:,.2f} per hour of a person's time."
    return "Rework is not costed: the catalog has no `[effectiveness] rework_cost_per_hour`, so it counts 0."


def _tier_rows(view: EffectivenessView) -> list[dict]:
    return [g for g in view.overall if g["task_class"] == eff.ALL_CLASSES and g["speed_tier"] != ALL_TIERS]


def markdown(report: EffectivenessReport) -> str:
    data, view = report.data, report.view
    cur = view.currency
    weeks = view.weeks
    lines = [
        f"# Effectiveness, {weeks[0]} to {weeks[-1] + dt.timedelta(days=6)}",
        "",
        f"{len(weeks)} complete ISO week(s); {view.tasks:,} tasks; {data['orphan_outcomes']:,} outcomes "
        f"without a request and {data['open_tasks']:,} tasks without an outcome (neither is in a rate).",
        _rework_note(view),
        "",
        "## Per model and speed tier (all task classes)",
        "",
        "| model | tier | tasks | one-pass (95% interval) | rework | abandoned | end to end | model time | rework time | cost / accepted incl. rework | without rework |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for g in _tier_rows(view):
        lines.append(
            f"| {g['model']} | {g.get('tier_label', g['speed_tier'])} | {g['tasks']:,} | {g['one_pass_rate']:.1%} "
            f"({g['one_pass_low']:.1%}-{g['one_pass_high']:.1%}) | {g['rework_share']:.1%} | {g['abandon_share']:.1%} | "
            f"{_duration(g['e2e_ms_mean'])} | {_duration(g['model_ms_mean'])} | {_duration(g['rework_ms_mean'])} | "
            f"{_money(g['cost_per_accepted_task'], cur)} | {_money(g['cost_without_rework'], cur)} |"
        )
    lines += ["", "## Head to head, per task class", ""]
    if not view.head_to_head:
        lines.append("No model and its catalog successor both have tasks in these weeks.")
    for item in view.head_to_head:
        lines.append(f"- {sentence(item, cur)}")
    lines += [
        "",
        "Definitions: one-pass = accepted without rework; end to end = completed_at - started_at, rework "
        "included; cost per accepted task = (rate-card cost of the tokens + rework cost) of all tasks, "
        "abandoned ones included, over the accepted ones. A task belongs to the (model, tier) with the most "
        "output tokens among its requests.",
        "",
    ]
    return "\n".join(lines)


# -- HTML ---------------------------------------------------------------------------------------

ONE_PASS = "#4c78a8"
MODEL_TIME = "#72b7b2"
REWORK_TIME = "#e45756"
OTHER_TIME = "#bab0ac"
WITH_REWORK = "#f58518"
WITHOUT_REWORK = "#54a24b"
CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:8px 0 20px;font-size:13px}td,th{border-bottom:1px solid #ddd;padding:4px 8px;
text-align:right;white-space:nowrap}th{background:#f3f3f3}td.l,th.l{text-align:left}
.note{color:#555}.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}
"""


def _label(g: dict) -> str:
    return f"{g['model']} {g.get('tier_label', g['speed_tier'])}"


def rate_chart(rows: list[dict], width: int = 900) -> str:
    """One-pass rate per model and tier: a bar per row from 0 to 100%, its 95% interval as a whisker."""
    left, right, bar, gap = 230, 30, 18, 10
    w = width - left - right
    height = 30 + len(rows) * (bar + gap)
    parts = [
        f"<svg id='one-pass-chart' width='{width}' height='{height}' role='img' aria-label='one-pass rate per model and tier'>"
    ]
    for k in range(0, 101, 25):
        x = left + w * k / 100
        parts.append(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='10' y2='{height - 18}' stroke='#e5e5e5'/>")
        parts.append(f"<text x='{x:.1f}' y='{height - 4}' font-size='11' text-anchor='middle'>{k}%</text>")
    for i, g in enumerate(rows):
        y = 12 + i * (bar + gap)
        parts.append(
            f"<text x='{left - 8}' y='{y + 13}' font-size='12' text-anchor='end'>{e(_label(g))}</text>"
        )
        parts.append(
            f"<rect class='rate' data-rate='{g['one_pass_rate']:.6f}' x='{left}' y='{y}' "
            f"width='{w * g['one_pass_rate']:.1f}' height='{bar}' fill='{ONE_PASS}'/>"
        )
        lo, hi = left + w * g["one_pass_low"], left + w * g["one_pass_high"]
        mid = y + bar / 2
        parts.append(
            f"<line x1='{lo:.1f}' x2='{hi:.1f}' y1='{mid}' y2='{mid}' stroke='#111' stroke-width='1.5'/>"
        )
        for xx in (lo, hi):
            parts.append(
                f"<line x1='{xx:.1f}' x2='{xx:.1f}' y1='{y + 3}' y2='{y + bar - 3}' stroke='#111' stroke-width='1.5'/>"
            )
        parts.append(
            f"<text x='{left + w * g['one_pass_high'] + 6:.1f}' y='{y + 13}' font-size='11'>{g['one_pass_rate']:.1%}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def time_chart(rows: list[dict], width: int = 900) -> str:
    """Mean end-to-end time per model and tier, stacked: model time, a person's rework, the rest."""
    left, right, bar, gap = 230, 90, 18, 10
    w = width - left - right
    height = 30 + len(rows) * (bar + gap)
    longest = max((g["e2e_ms_mean"] for g in rows), default=1) or 1
    parts = [
        f"<svg id='time-chart' width='{width}' height='{height}' role='img' aria-label='end-to-end time split'>"
    ]
    for i, g in enumerate(rows):
        y = 12 + i * (bar + gap)
        model = min(g["model_ms_mean"], g["e2e_ms_mean"])
        rework = min(g["rework_ms_mean"], g["e2e_ms_mean"] - model)
        other = max(g["e2e_ms_mean"] - model - rework, 0)
        parts.append(
            f"<text x='{left - 8}' y='{y + 13}' font-size='12' text-anchor='end'>{e(_label(g))}</text>"
        )
        x = left
        for part, color, name in (
            (model, MODEL_TIME, "model"),
            (rework, REWORK_TIME, "rework"),
            (other, OTHER_TIME, "other"),
        ):
            width_ = w * part / longest
            parts.append(
                f"<rect class='{name}' x='{x:.1f}' y='{y}' width='{width_:.1f}' height='{bar}' fill='{color}'/>"
            )
            x += width_
        parts.append(
            f"<text x='{x + 6:.1f}' y='{y + 13}' font-size='11'>{_duration(g['e2e_ms_mean'])}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def cost_chart(rows: list[dict], currency: str, width: int = 900) -> str:
    """Cost per accepted task per model and tier: with rework (upper bar) and without (lower bar)."""
    left, right, bar, gap = 230, 110, 10, 12
    w = width - left - right
    height = 30 + len(rows) * (2 * bar + gap)
    values = [float(g["cost_per_accepted_task"]) for g in rows if g["cost_per_accepted_task"] is not None]
    top = max(values, default=1.0) or 1.0
    parts = [
        f"<svg id='cost-chart' width='{width}' height='{height}' role='img' aria-label='cost per accepted task'>"
    ]
    for i, g in enumerate(rows):
        y = 12 + i * (2 * bar + gap)
        parts.append(
            f"<text x='{left - 8}' y='{y + 14}' font-size='12' text-anchor='end'>{e(_label(g))}</text>"
        )
        for j, (value, color, name) in enumerate(
            (
                (g["cost_per_accepted_task"], WITH_REWORK, "with"),
                (g["cost_without_rework"], WITHOUT_REWORK, "without"),
            )
        ):
            if value is None:
                continue
            bw = w * float(value) / top
            yy = y + j * bar
            parts.append(
                f"<rect class='cost-{name}' x='{left}' y='{yy}' width='{bw:.1f}' height='{bar - 1}' fill='{color}'/>"
            )
            parts.append(
                f"<text x='{left + bw + 6:.1f}' y='{yy + 9}' font-size='10'>{e(_money(value, currency))}</text>"
            )
    parts.append("</svg>")
    return "".join(parts)


def _h2h_table(item: dict, currency: str) -> str:
    head = (
        "<tr><th class='l'>model</th><th>tasks</th><th>one-pass (95%)</th><th>rework</th>"
        "<th>end to end</th><th>p90</th><th>model time</th><th>cost / accepted incl. rework</th><th>without rework</th></tr>"
    )
    body = []
    for g in [item["model_row"], *item["successor_rows"]]:
        name = g["model"] + (
            "" if g["speed_tier"] == ALL_TIERS else f" {g.get('tier_label', g['speed_tier'])}"
        )
        body.append(
            f"<tr><td class='l'>{e(name)}</td><td>{g['tasks']:,}</td><td>{g['one_pass_rate']:.1%} "
            f"({g['one_pass_low']:.0%}-{g['one_pass_high']:.0%})</td><td>{g['rework_share']:.1%}</td>"
            f"<td>{_duration(g['e2e_ms_mean'])}</td><td>{_duration(g['e2e_ms_p90'])}</td>"
            f"<td>{_duration(g['model_ms_mean'])}</td><td>{e(_money(g['cost_per_accepted_task'], currency))}</td>"
            f"<td>{e(_money(g['cost_without_rework'], currency))}</td></tr>"
        )
    return f"<table class='h2h'>{head}{''.join(body)}</table>"


def page(report: EffectivenessReport) -> str:
    data, view = report.data, report.view
    cur = view.currency
    weeks = view.weeks
    rows = _tier_rows(view)
    legend_time = "".join(
        f"<span style='background:{c}'></span>{n}"
        for c, n in (
            (MODEL_TIME, "model time"),
            (REWORK_TIME, "rework"),
            (OTHER_TIME, "waiting and the rest"),
        )
    )
    legend_cost = "".join(
        f"<span style='background:{c}'></span>{n}"
        for c, n in ((WITH_REWORK, "including rework"), (WITHOUT_REWORK, "tokens only"))
    )
    h2h = []
    for item in view.head_to_head:
        cls = "all task classes" if item["task_class"] == eff.ALL_CLASSES else item["task_class"]
        h2h.append(f"<h3>{e(item['model'])} against {e(item['successor'])}: {e(cls)}</h3>")
        h2h.append(f"<p class='sentence'>{e(sentence(item, cur))}.</p>")
        h2h.append(_h2h_table(item, cur))
    if not h2h:
        h2h.append("<p>No model and its catalog successor both have tasks in these weeks.</p>")
    end = weeks[-1] + dt.timedelta(days=6)
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>Effectiveness {weeks[0]} to {end}</title><style>{CSS}</style></head><body>"
        f"<h1>Effectiveness, {weeks[0]} to {end}</h1>"
        f"<p>{len(weeks)} complete ISO week(s), {view.tasks:,} tasks. "
        f"{data['orphan_outcomes']:,} outcomes had no request and {data['open_tasks']:,} tasks have no outcome: "
        "neither is in a rate.</p>"
        f"<p class='note'>{e(_rework_note(view))}</p>"
        "<h2>One-pass rate per model and speed tier</h2>"
        "<p class='note'>Accepted without a person's rework, with its 95% Wilson interval.</p>"
        f"{rate_chart(rows)}"
        "<h2>End-to-end time, and where it goes</h2>"
        f"<p class='legend'>{legend_time}</p>{time_chart(rows)}"
        f"<h2>Cost per accepted task ({e(cur)})</h2>"
        f"<p class='legend'>{legend_cost}</p>{cost_chart(rows, cur)}"
        "<h2>Head to head, per task class</h2>"
        f"{''.join(h2h)}"
        "<p class='note'>One-pass = accepted without rework. End to end = completed_at - started_at, rework "
        "included. Cost per accepted task = (the tokens at the rate card + the rework) of every task, abandoned "
        "ones included, over the accepted tasks. A task belongs to the (model, tier) with the most output tokens "
        "among its requests.</p></body></html>"
    )
