"""The retirement report's charts as inline SVG: weekly active accounts on a log scale with decade
ticks and labels that never overlap, lifecycle bars, and where the accounts that left went."""

from __future__ import annotations

import html
import math

e = html.escape


PALETTE = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


CANDIDATE = "#d62728"


LIFECYCLE = {"new_accounts": "#2ca02c", "resurrected_accounts": "#1f77b4", "returning_accounts": "#b0b0b0"}


DORMANT = "#ff7f0e"


def decades(values: list[float]) -> tuple[int, int]:
    """The log axis of positive ``values``: from the decade at or below the smallest to the decade at
    or above the largest (at least one decade), so every tick is a power of ten on its own line."""
    positive = [v for v in values if v > 0] or [1.0]
    lo = math.floor(math.log10(min(positive)))
    hi = math.ceil(math.log10(max(positive)))
    return lo, max(hi, lo + 1)


def spread(wanted: list[float], gap: float, low: float, high: float) -> list[float]:
    """Label positions as near ``wanted`` as they can be, at least ``gap`` apart, within low..high:
    placed top to bottom pushing down, then pulled back up from the bottom edge."""
    order = sorted(range(len(wanted)), key=lambda i: wanted[i])
    placed = [0.0] * len(wanted)
    cursor = low - gap
    for i in order:
        cursor = max(wanted[i], cursor + gap)
        placed[i] = cursor
    ceiling = high + gap
    for i in reversed(order):
        ceiling = min(placed[i], ceiling - gap)
        placed[i] = ceiling
    return placed


def accounts_chart(data: dict, width: int = 860, height: int = 320) -> str:
    """Weekly active accounts per model on a log scale with a tick per decade; candidates in red
    with their trend line; each line's name at its right end, names never overlapping."""
    models = data["models"]
    weeks = data["weeks"]
    left, right, top, bottom = 60, 190, 20, 40
    w, h = width - left - right, height - top - bottom
    lo, hi = decades([v for m in models for v in m["weekly_active_accounts"].values()])

    def x(i: float) -> float:
        return left + w * i / max(len(weeks) - 1, 1)

    def y(v: float) -> float:
        return top + h * (1 - (math.log10(max(v, 10**lo)) - lo) / (hi - lo))

    parts = [
        f"<svg class='chart' id='accounts-chart' width='{width}' height='{height}' role='img' aria-label='weekly active accounts per model'>"
    ]
    for k in range(lo, hi + 1):
        yy = y(10**k)
        parts.append(f"<line x1='{left}' x2='{left + w}' y1='{yy:.1f}' y2='{yy:.1f}' stroke='#e5e5e5'/>")
        parts.append(
            f"<text class='tick' x='{left - 6}' y='{yy + 4:.1f}' text-anchor='end' font-size='11'>{10**k:,}</text>"
        )
    parts.append(
        f"<text x='12' y='{top + h / 2:.1f}' font-size='11' transform='rotate(-90 12 {top + h / 2:.1f})' "
        "text-anchor='middle'>active accounts a week (log scale)</text>"
    )
    for i, week in enumerate(weeks):
        if i % 2 == 0:
            parts.append(
                f"<text x='{x(i):.1f}' y='{top + h + 16}' text-anchor='middle' font-size='10'>{e(week[5:])}</text>"
            )
    ends = [y(list(m["weekly_active_accounts"].values())[-1]) for m in models]
    labels = spread(ends, 13, top + 4, top + h + 4)
    for n, m in enumerate(models):
        color = CANDIDATE if m["flagged"] else PALETTE[n % len(PALETTE)]
        series = list(m["weekly_active_accounts"].values())
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(series))
        width_ = 3 if m["flagged"] else 1.5
        parts.append(f"<polyline fill='none' stroke='{color}' stroke-width='{width_}' points='{points}'/>")
        if abs(labels[n] - ends[n]) > 1:  # moved off its line's end: a leader line shows whose it is
            parts.append(
                f"<line x1='{left + w}' y1='{ends[n]:.1f}' x2='{left + w + 8}' y2='{labels[n]:.1f}' stroke='{color}'/>"
            )
        parts.append(
            f"<text class='series-label' x='{left + w + 10}' y='{labels[n] + 4:.1f}' font-size='11' fill='{color}'>"
            f"{e(m['model'])} ({series[-1]:,})</text>"
        )
        trend = (m.get("candidate") or {}).get("trend")
        if trend:
            a, b = trend["intercept"], trend["slope"]
            ends_ = [(0, math.exp(a)), (len(weeks) - 1, math.exp(a + b * (len(weeks) - 1)))]
            parts.append(
                f"<line class='trend' x1='{x(ends_[0][0]):.1f}' y1='{y(ends_[0][1]):.1f}' x2='{x(ends_[1][0]):.1f}' "
                f"y2='{y(ends_[1][1]):.1f}' stroke='{CANDIDATE}' stroke-width='2' stroke-dasharray='6 4'/>"
            )
    parts.append("</svg>")
    return "".join(parts)


def lifecycle_chart(rows: list[dict], width: int = 860, height: int = 220) -> str:
    """Per week: new, resurrected and returning accounts up; dormant accounts down."""
    left, top, bottom = 60, 10, 30
    w, h = width - left - 20, height - top - bottom
    up = [sum(r[k] for k in LIFECYCLE) for r in rows] or [1]
    down = [r["dormant_accounts"] for r in rows] or [0]
    scale = h / max(max(up) + max(down), 1)
    zero = top + max(up) * scale
    bar = w / max(len(rows), 1)
    parts = [
        f"<svg class='chart lifecycle' width='{width}' height='{height}' role='img' aria-label='lifecycle'>"
    ]
    for i, r in enumerate(rows):
        x0 = left + i * bar + 2
        y0 = zero
        for key, color in LIFECYCLE.items():
            hh = r[key] * scale
            y0 -= hh
            parts.append(
                f"<rect x='{x0:.1f}' y='{y0:.1f}' width='{bar - 4:.1f}' height='{hh:.1f}' fill='{color}'/>"
            )
        parts.append(
            f"<rect x='{x0:.1f}' y='{zero:.1f}' width='{bar - 4:.1f}' height='{r['dormant_accounts'] * scale:.1f}' fill='{DORMANT}'/>"
        )
        if i % 2 == 0:
            parts.append(
                f"<text x='{x0 + bar / 2:.1f}' y='{height - 8}' text-anchor='middle' font-size='10'>{e(r['week_start'][5:])}</text>"
            )
    parts.append(f"<line x1='{left}' x2='{left + w}' y1='{zero:.1f}' y2='{zero:.1f}' stroke='#333'/>")
    parts.append("</svg>")
    return "".join(parts)


def migration_chart(matrix: list[dict], source: str, width: int = 860) -> str:
    """Where the accounts that went dormant on the model took their tokens: one bar per destination."""
    rows = matrix[:8]
    height = 30 + 26 * len(rows)
    most = max((r["accounts"] for r in rows), default=1) or 1
    parts = [
        f"<svg class='chart migration' width='{width}' height='{height}' role='img' aria-label='migration'>"
    ]
    parts.append(f"<text x='10' y='16' font-size='12'>from {e(source)} to:</text>")
    for i, r in enumerate(rows):
        yy = 26 + i * 26
        bw = 400 * r["accounts"] / most
        color = "#cccccc" if r["to_model"] == "(none)" else PALETTE[i % len(PALETTE)]
        parts.append(
            f"<text x='200' y='{yy + 14}' text-anchor='end' font-size='12'>{e(r['to_model'])}</text>"
        )
        parts.append(f"<rect x='210' y='{yy}' width='{bw:.1f}' height='18' fill='{color}'/>")
        parts.append(
            f"<text x='{216 + bw:.1f}' y='{yy + 14}' font-size='11'>{r['accounts']:,} accounts, {r['tokens']:,} tokens</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
