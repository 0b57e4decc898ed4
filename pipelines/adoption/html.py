"""The retirement report as one self-contained HTML page (inline SVG charts, no scripts) and Markdown."""

from __future__ import annotations

import html
from decimal import Decimal
from typing import Any

from pipelines.adoption.charts import (
    DORMANT,
    accounts_chart,
    lifecycle_chart,
    migration_chart,
)

e = html.escape


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def _num(x: object) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.2%}" if x < 1 else f"{x:,.0f}"
    return f"{x:,}" if isinstance(x, int) else str(x)


POINTS = (
    ("last_week", "last complete week"),
    ("peak_week_by_accounts", "peak week by active accounts"),
    ("eight_weeks_before", "8 weeks before the last"),
)
POINT_COLUMNS = (
    ("active_accounts", "active accounts"),
    ("heavy_accounts", "heavy accounts"),
    ("requests", "requests that week"),
    ("tokens", "tokens that week"),
    ("token_share", "share of platform tokens that week"),
)


def money(currency: str, value: object, sign: bool = False) -> str:
    """An amount with its currency, two decimals, never wrapped (``value``: Decimal or its text)."""
    if value is None or value == "":
        return "-"
    v = Decimal(str(value))
    return f"{currency}\u00a0{v:+,.2f}" if sign else f"{currency}\u00a0{v:,.2f}"


def _point_table(c: dict) -> str:
    head = "".join(f"<th>{label}</th>" for _, label in POINT_COLUMNS)
    body = ""
    for key, label in POINTS:
        p = c[key]
        body += (
            f"<tr><th>{label} (week of {e(str(p.get('week_start', '-')))})</th>"
            + "".join(f"<td class=n>{_num(p.get(k))}</td>" for k, _ in POINT_COLUMNS)
            + "</tr>"
        )
    return f"<table class='points'><tr><th>week</th>{head}</tr>{body}</table>"


def _hours(h: float) -> str:
    return f"{h:,.1f} h" if h >= 1 else f"{h * 60:,.0f} min"


def tier_name(c: dict, tier: str) -> str:
    """A tier as pages print it: the catalog's label carried in the facts (its id without one)."""
    return (c.get("tier_labels") or {}).get(tier, tier)


def preview_lines(c: dict) -> list[str]:
    """One sentence per successor tier: what moving the preview month's use there does to the bills."""
    p, cur = c["preview"], c["currency"]
    if p.get("error"):
        return [f"no preview for {p['month']}: {p['error']}"]
    return [
        f"on {p['successor']} {tier_name(c, tier)}: {s['accounts_paying_more']:,} of {s['accounts']:,} affected accounts pay "
        f"more, median change {money(cur, s['median_delta'], True)}, total change {money(cur, s['delta'], True)}"
        for tier, s in p["tiers"].items()
    ]


def _observed(seen: dict, tie: dict | None) -> str:
    """Where most accounts that left went, or the near tie when the lead is too small to call."""
    if tie is not None:
        return (
            f"no clear destination: {seen['to_model']} ({seen['accounts']:,} accounts) and "
            f"{tie['to_model']} ({tie['accounts']:,}) are a near tie"
        )
    return f"most went to {seen['to_model']} ({seen['accounts']:,} accounts)"


def successor_note(c: dict) -> str:
    """The catalog's successor beside where the accounts that left went (distinct accounts over the
    report's weeks); a disagreement or a near tie said so."""
    named, seen, tie = c.get("catalog_successor"), c.get("observed_successor"), c.get("near_tie")
    if named is None:
        return (
            f"The catalog names no successor; of the accounts that left, {_observed(seen, tie)}."
            if seen
            else ("The catalog names no successor, and no account that left moved to another model.")
        )
    if seen is None:
        return f"Catalog successor: {named}; no account that left moved to another model in these weeks."
    text = (
        f"Catalog successor: {named} ({c['catalog_successor_accounts']:,} distinct accounts that left went "
        f"there); observed: {_observed(seen, tie)}."
    )
    if not c["agrees"]:
        text += (
            f" They disagree: the preview prices the catalog's successor, {named}; check whether "
            f"{seen['to_model']} should be the successor."
        )
    return text


def decision_summary(m: dict) -> list[tuple[str, str]]:
    """(label, text) rows that open a candidate's section: what a product team decides on."""
    c = m["candidate"]
    cur = c["currency"]
    lo, hi = c["decline_interval_90"]
    weeks = m["weekly_active_accounts"]
    last = c["last_week"]
    rows = [
        (
            "decline",
            f"active accounts {_pct(c['decline_per_week'])} a week (90% interval {_pct(lo)} to {_pct(hi)}) "
            f"over the weeks of {next(iter(weeks))} to {c['last_week']['week_start']}",
        ),
        (
            "accounts left",
            f"{last['active_accounts']:,} active accounts in the last complete week (week of {last['week_start']}), "
            f"{last['heavy_accounts']:,} of them heavy accounts; peak {c['peak_week_by_accounts']['active_accounts']:,} "
            f"(week of {c['peak_week_by_accounts']['week_start']})",
        ),
    ]
    tokens = c.get("tokens")
    if tokens:
        rows.append(
            (
                "token volume",
                f"{tokens['direction']}: {tokens['last_week']['tokens'] or 0:,} tokens in the week of "
                f"{tokens['last_week']['week_start']}, {tokens['first_week']['tokens'] or 0:,} in the week of "
                f"{tokens['first_week']['week_start']}"
                + (" (fewer accounts, each using more)" if tokens["direction"] == "rising" else ""),
            )
        )
    if c.get("retires"):
        rows.append(("retirement date", f"the catalog already retires the model on {c['retires']}"))
    p = c["preview"]
    if not p.get("error"):
        rows.append(
            (
                f"revenue at stake ({p['month']})",
                f"{money(cur, p['revenue_at_stake'])} of the model's usage on the invoices of its "
                f"{p['affected_accounts']:,} affected accounts",
            )
        )
    moving = "; ".join(preview_lines(c))
    unpriced = p.get("unpriced_tiers") or []
    if unpriced:
        moving += "; not previewed: " + ", ".join(f"{tier_name(c, u['tier'])} ({u['why']})" for u in unpriced)
    rows.append((f"moving to {p['successor']} ({p['month']})", moving))
    transition = p.get("transition")
    if transition:
        rows.append(
            (
                "transition credits",
                f"{money(cur, transition['total'])} in promotional credits on {p['successor']} would make the move "
                f"free for {transition['months']} months for the {transition['accounts']:,} accounts that would "
                "pay more (`usage-billing retirement preview --credits-out FILE` writes them)"
                if transition["accounts"]
                else "none needed: no affected account would pay more on the successor",
            )
        )
    backup = c.get("backup_tank")
    if backup:
        per_week = ", ".join(f"{w['exhausted_accounts']:,}" for w in backup["weeks"])
        rows.append(
            (
                "backup tank",
                f"{backup['token_share']:.0%} of its tokens in the last {len(backup['weeks'])} weeks came after the "
                f"account's main pool ran out; accounts whose main pool ran out, per week: {per_week or '-'}",
            )
        )
    serving = c["serving_time"]
    rows.append(
        (
            "model time it frees",
            f"{_hours(serving['mean_hours_last_4_weeks'])} of output a week (mean of the last 4 complete weeks; "
            f"{_hours(serving['last_week_hours'])} in the last)",
        )
    )
    rows.append(("successor", successor_note(c)))
    eff = c.get("effectiveness")
    if eff:
        multi = next((k for k in eff["classes"] if k["task_class"] == "multi_file"), eff["classes"][0])
        rows.append((f"effectiveness against {eff['successor']}", multi["sentence"]))
    return rows


def _contacts(c: dict, tiers: list[str]) -> str:
    info = c["contacts"]
    cur = c["currency"]
    head = "".join(f"<th>change on {e(tier_name(c, t))}</th>" for t in tiers)
    body = "".join(
        f"<tr><td>{e(r['account_id'])}</td><td class=n>{'yes' if r['heavy_last_week'] else ''}</td>"
        f"<td class=n>{r['heavy_weeks']}</td><td class=n>{r['active_days']}</td><td class=n>{r['tokens']:,}</td>"
        f"<td class=n>{e(r['last_active_day'] or '-')}</td><td class=n>{money(cur, r['current_total'])}</td>"
        + "".join(f"<td class=n>{money(cur, r.get(f'delta_{t}'), True)}</td>" for t in tiers)
        + "</tr>"
        for r in info["top"]
    )
    return (
        f"<h3>Accounts to contact</h3><p>{info['accounts']:,} accounts to contact (active on the model in the weeks "
        f"of {e(info['weeks'][0])} to {e(info['weeks'][1])}, or affected in the preview month); "
        f"{info['heavy_last_week']:,} were heavy accounts in the last complete week. All of them, with their "
        f"usage and change per tier: <a href='{e(info['file'])}'>{e(info['file'])}</a>. The first "
        f"{min(len(info['top']), info['accounts'])}:</p>"
        "<table class='contacts'><tr><th>account</th><th>heavy last week</th><th>heavy weeks (of 4)</th>"
        f"<th>active days (4 weeks)</th><th>tokens (4 weeks)</th><th>last active</th><th>bill now (preview month)</th>{head}</tr>"
        f"{body}</table>"
    )


def _candidate(m: dict, lifecycle: list[dict]) -> str:
    c = m["candidate"]
    proj = c["projection"]
    projection = (
        f"active accounts projected to fall below {proj['floor_accounts']} between {proj['earliest']} and {proj['latest']}"
        if proj
        else "no projection (the decline's interval includes zero, or the floor is beyond twice the window)"
    )
    summary = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in decision_summary(m))
    timeline = "".join(f"<li><b>{e(s['date'])}</b>: {e(s['step'])}</li>" for s in c["timeline"])
    tiers = list(c["preview"]["tiers"])
    return f"""
<section class='candidate'>
<h2>{e(m["model"])}: retirement candidate</h2>
<table class='decision'>{summary}</table>
<h3>Detail</h3>
<p>Weekly active accounts: q = {c["accounts_q"]:.3g}; token share q = {c["share_q"]:.3g}. Detected this week and last week. {e(projection)}.</p>
{_point_table(c)}
<h3>Successor and where users went</h3>
<p>{e(successor_note(c))}</p>
{migration_chart(c["migration"], m["model"])}
<h3>Lifecycle per week</h3>
<p class='legend'><span style='color:#2ca02c'>■ new</span> <span style='color:#1f77b4'>■ resurrected</span> <span style='color:#b0b0b0'>■ returning</span> <span style='color:{DORMANT}'>■ went dormant</span></p>
{lifecycle_chart(lifecycle)}
{_effectiveness(c.get("effectiveness"), m["model"])}
{_contacts(c, tiers)}
<h3>Suggested notice timeline</h3><ol>{timeline}</ol>
</section>"""


def _effectiveness(eff: dict | None, model: str) -> str:
    """The candidate against its successor per task class (the effectiveness head-to-head)."""
    if not eff:
        return (
            f"<h3>Effectiveness</h3><p>No task outcomes of {e(model)} and its successor in these weeks.</p>"
        )
    cur = eff["currency"]

    def money(v: Any) -> str:  # a number of the report, or None
        return "-" if v is None else f"{cur} {float(v):,.2f}"

    def minutes(ms: int) -> str:
        return f"{ms / 1000:.0f} s" if ms < 120_000 else f"{ms / 60000:.1f} min"

    rows = []
    for c in eff["classes"]:
        for i, g in enumerate(c["rows"]):
            name = g["model"] + ("" if g["speed_tier"] == "*" else f" {g.get('tier_label', g['speed_tier'])}")
            rows.append(
                f"<tr><td>{e(c['task_class']) if i == 0 else ''}</td><td>{e(name)}</td><td class=n>{g['tasks']:,}</td>"
                f"<td class=n>{g['one_pass_rate']:.0%} ({g['one_pass_low']:.0%}-{g['one_pass_high']:.0%})</td>"
                f"<td class=n>{minutes(g['e2e_ms_mean'])}</td><td class=n>{minutes(g['e2e_ms_mean'] - g['rework_ms_mean'])}</td>"
                f"<td class=n>{money(g['cost_per_accepted_task'])}</td><td class=n>{money(g['cost_without_rework'])}</td></tr>"
            )
    multi = next((c for c in eff["classes"] if c["task_class"] == "multi_file"), eff["classes"][0])
    note = "" if eff["rework_costed"] else " Rework is not costed (no rework_cost_per_hour in the catalog)."
    return (
        f"<h3>Effectiveness against {e(eff['successor'])} ({e(eff['weeks'][0])} to {e(eff['weeks'][1])} weeks)</h3>"
        f"<p>{e(multi['sentence'])}.{e(note)}</p>"
        "<table><tr><th>task class</th><th>model</th><th>tasks</th><th>one-pass (95%)</th><th>end to end</th>"
        "<th>without rework</th><th>cost / accepted incl. rework</th><th>tokens only</th></tr>"
        f"{''.join(rows)}</table>"
    )


def render_html(data: dict) -> str:
    candidates = [m for m in data["models"] if m["flagged"]]
    rows = "".join(
        f"<tr><td>{e(m['model'])}</td><td>{'candidate' if m['flagged'] else ('detected (first week)' if m['detected'] else 'no')}</td>"
        f"<td class=n>{_pct(m['trends'].get('active_accounts', {}).get('weekly_change'))}</td>"
        f"<td class=n>{m['trends'].get('active_accounts', {}).get('q', float('nan')):.3g}</td><td>{e(m['reason'])}</td></tr>"
        for m in data["models"]
    )
    summary = (
        f"{len(candidates)} model(s) flagged: " + ", ".join(e(m["model"]) for m in candidates)
        if candidates
        else "No model is a retirement candidate this week."
    )
    body = "".join(_candidate(m, data["lifecycle"].get(m["model"], [])) for m in candidates)
    failed = ", ".join(data["dq_failed_weeks"]) or "none"
    return f"""<!doctype html><html lang='en'><head><meta charset='utf-8'>
<title>Model retirement report {e(data["as_of"])}</title><style>{CSS}</style></head><body>
<h1>Model adoption and retirement report</h1>
<p class='meta'>As of {e(data["as_of"])} · weeks {e(data["weeks"][0])} to {e(data["weeks"][-1])} · method {e(data["method_version"])} · weeks left out (data quality): {e(failed)}</p>
<p class='lead'>{summary}</p>
<h2>Weekly active accounts per model</h2>
{accounts_chart(data)}
<h2>All models</h2>
<table><tr><th>model</th><th>status</th><th>accounts / week</th><th>q</th><th>why</th></tr>{rows}</table>
{body}
<h2>How to read this</h2>
<p class='rule'>{e(data["rule"])}</p>
<dl class='terms'>{"".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in data["definitions"].items())}</dl>
<p class='meta'>Amounts in {e(data["currency"])}.</p>
</body></html>"""


def render_markdown(data: dict) -> str:
    lines = [
        f"# Model retirement report, {data['as_of']}",
        "",
        f"Weeks {data['weeks'][0]} to {data['weeks'][-1]}; method {data['method_version']}.",
        "",
    ]
    lines += ["| model | status | accounts/week | q | why |", "|---|---|---:|---:|---|"]
    for m in data["models"]:
        t = m["trends"].get("active_accounts", {})
        status = "candidate" if m["flagged"] else ("detected (first week)" if m["detected"] else "no")
        lines.append(
            f"| {m['model']} | {status} | {_pct(t.get('weekly_change'))} | {t.get('q', float('nan')):.3g} | {m['reason']} |"
        )
    for m in data["models"]:
        if not m["flagged"]:
            continue
        c = m["candidate"]
        lines += ["", f"## {m['model']}: retirement candidate", ""]
        lines += [f"- **{k}**: {v}" for k, v in decision_summary(m)]
        lines += ["", "| week | " + " | ".join(label for _, label in POINT_COLUMNS) + " |"]
        lines.append("|---|" + "---:|" * len(POINT_COLUMNS))
        for key, label in POINTS:
            p = c[key]
            lines.append(
                f"| {label} (week of {p.get('week_start')}) | "
                + " | ".join(_num(p.get(k)) for k, _ in POINT_COLUMNS)
                + " |"
            )
        proj = c["projection"]
        lines += [
            "",
            f"- projection: below {proj['floor_accounts']} active accounts between {proj['earliest']} and "
            f"{proj['latest']}"
            if proj
            else "- projection: none",
            "- where the accounts that left went: "
            + ", ".join(f"{r['to_model']} {r['accounts']:,}" for r in c["migration"][:5]),
        ]
        if c.get("effectiveness"):
            eff = c["effectiveness"]
            lines.append(
                f"- effectiveness against {eff['successor']} ({eff['weeks'][0]} to {eff['weeks'][1]} weeks):"
            )
            lines += [f"  - {k['sentence']}" for k in eff["classes"]]
        info = c["contacts"]
        lines.append(
            f"- accounts to contact: {info['accounts']:,} ({info['heavy_last_week']:,} heavy in the last "
            f"complete week), in {info['file']}"
        )
        lines += [f"- {s['date']}: {s['step']}" for s in c["timeline"]]
    lines += ["", "## How to read this", "", data["rule"], ""]
    lines += [f"- **{k}**: {v}" for k, v in data["definitions"].items()]
    lines += ["", f"Amounts in {data['currency']}."]
    return "\n".join(lines) + "\n"


CSS = """
body{font-family:system-ui,sans-serif;max-width:62rem;margin:2rem auto;color:#222;line-height:1.4}
table{border-collapse:collapse;margin:.5rem 0 1rem}th,td{padding:.2rem .5rem;border-bottom:1px solid #ddd;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}.meta{color:#666;font-size:.9rem}.lead{font-size:1.05rem}
section.candidate{border-left:4px solid #d62728;padding-left:1rem;margin:2rem 0}svg.chart{display:block;margin:.5rem 0}
table.decision th{width:14rem;vertical-align:top}td.n{white-space:nowrap}dl.terms dt{font-weight:600;margin-top:.4rem}
dl.terms dd{margin-left:1rem}
"""
