"""The data-quality pages: ``<lake>/dq/date=D/index.html`` per partition and ``<lake>/dq/index.html``
across every checked date, newest first.

A partition's page says for each check what it expected (the volume check's range in rows and what it
came from), what it observed and whether it passed, and who accepted a failed gate, when and why. Both
are rendered from what ``dq_results`` and ``dq_acceptances`` hold, so a page never says something the
warehouse does not.
"""

from __future__ import annotations

import datetime as dt
import html
import os
from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import Engine, select

from pipelines import lake
from schemas.quality import SUITE_NAME, VOLUME_CHECK
from schemas.warehouse import DqAcceptance, DqResult

STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
tr.error td{background:#fdd} tr.warn td{background:#ffe9b3}
.badge{font-weight:bold;font-size:1.1em} .num{text-align:right;white-space:nowrap}
.nowrap{white-space:nowrap} td.expected{min-width:22em}
.accepted{background:#e8f0fe;border:1px solid #9ab;padding:.6em 1em;margin:1em 0}
.FAILED{color:#b00020} .passed{color:#1b5e20} .accepted-status{color:#1a4d8f}"""


@dataclass(frozen=True)
class Row:
    """One check's stored outcome, as a page shows it."""

    name: str
    level: str
    success: bool
    observed: str
    details: dict


def html_path(lake_root: str, day: dt.date) -> str:
    return lake.join(lake_root, "dq", f"date={day}", "index.html")


def index_path(lake_root: str) -> str:
    return lake.join(lake_root, "dq", "index.html")


def expected(row: Row) -> str:
    """What the check expected, in words; the volume check with its range in rows."""
    text = row.details.get("expected") or ""
    if row.name == VOLUME_CHECK:
        bounds, median = row.details.get("bounds"), row.details.get("median")
        past = row.details.get("history") or []
        if not bounds:
            return f"{text}: not judged, {len(past)} such partition(s) before (2 needed)"
        return (
            f"between {bounds[0]:,.0f} and {bounds[1]:,.0f} rows: the median {median:,.0f} of the "
            f"{len(past)} previous partitions of the same weekday ({', '.join(f'{n:,}' for n in past)}), "
            f"divided and multiplied by {bounds[1] / median:g}"
        )
    return text


def status(rows: list[Row], acceptances: list[dict]) -> str:
    failed = {r.name for r in rows if r.level == "error" and not r.success}
    if not failed:
        return "passed"
    covered = {c for a in acceptances for c in a["checks"]}
    return "accepted" if failed <= covered else "FAILED"


def _write(path: str, page: str) -> None:
    if lake.is_local(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(page)
        os.replace(tmp, path)  # a reader sees the old page or the new one
    else:
        with lake.create_object(path) as handle:
            handle.write(page.encode())


def _acceptance_html(acceptances: list[dict]) -> str:
    if not acceptances:
        return ""
    items = "".join(
        f"<li><b>{html.escape(str(a['by']))}</b> accepted {html.escape(', '.join(a['checks']))} on "
        f"{_when(a['at'])}: &ldquo;{html.escape(str(a['reason']))}&rdquo;</li>"
        for a in acceptances
    )
    return f"<div class='accepted'><b>Accepted</b><ul>{items}</ul></div>"


def _when(at: dt.datetime) -> str:
    at = at if at.tzinfo else at.replace(tzinfo=dt.UTC)
    return f"{at.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC"


def page(day: dt.date, rows: list[Row], acceptances: list[dict], total: int | None) -> str:
    state = status(rows, acceptances)
    body = "\n".join(
        f"<tr class='{'ok' if r.success else r.level}'><td class='nowrap'>{html.escape(r.name)}</td>"
        f"<td>{r.level}</td><td>{'pass' if r.success else 'FAIL'}</td><td>{html.escape(r.observed)}</td>"
        f"<td class='expected'>{html.escape(expected(r))}</td></tr>"
        for r in rows
    )
    count = f"{total:,} rows &middot; " if total is not None else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Data quality {day}</title>
<style>{STYLE}</style></head>
<body><p><a href="../index.html">&larr; all dates</a></p>
<h1>Data quality of events, {day}</h1>
<p class="badge">Gate: <span class="{state if state != "accepted" else "accepted-status"}">{state}</span>
&middot; {count}suite {SUITE_NAME}</p>
{_acceptance_html(acceptances)}
<table><tr><th>check</th><th>level</th><th>result</th><th>observed</th><th>expected</th></tr>
{body}
</table>
<p>A failed error-level check stops this date's aggregation and metering until it is accepted:
<code>usage-billing dq accept --date {day} --reason "..."</code>. Warnings are reported only.</p>
</body></html>
"""


def _rows_of(report) -> list[Row]:
    return [Row(o.check.name, o.check.level, o.success, o.observed or "", o.details) for o in report.outcomes]


def write_page(lake_root: str, report) -> None:
    """The page of one ``PartitionReport`` (with its acceptances)."""
    _write(
        html_path(lake_root, report.day), page(report.day, _rows_of(report), report.acceptances, report.rows)
    )


# Per date: its checks' rows, its acceptances, when it was checked.
Stored = tuple[dict[dt.date, list[Row]], dict[dt.date, list[dict]], dict[dt.date, dt.datetime]]


def _stored(engine: Engine) -> Stored:
    r, a = DqResult.__table__, DqAcceptance.__table__
    rows: dict[dt.date, list[Row]] = defaultdict(list)
    checked: dict[dt.date, dt.datetime] = {}
    accepted: dict[dt.date, list[dict]] = defaultdict(list)
    with engine.connect() as conn:
        for x in conn.execute(select(r).order_by(r.c.day, r.c.check_name)):
            rows[x.day].append(Row(x.check_name, x.level, x.success, x.observed or "", x.details or {}))
            checked[x.day] = x.checked_at
        for x in conn.execute(select(a).order_by(a.c.accepted_at)):
            accepted[x.day].append(
                {
                    "by": x.accepted_by,
                    "at": x.accepted_at,
                    "reason": x.reason,
                    "checks": x.failed_checks.get("checks", []),
                }
            )
    return rows, accepted, checked


def _rows_total(rows: list[Row]) -> int | None:
    for r in rows:
        if r.name == VOLUME_CHECK and isinstance(r.details.get("rows"), int):
            return r.details["rows"]
    return None


def render_stored(engine: Engine, lake_root: str, day: dt.date) -> None:
    """Rewrite ``day``'s page and the index from the warehouse (after an acceptance)."""
    stored = _stored(engine)
    rows, accepted, _ = stored
    if rows.get(day):
        _write(html_path(lake_root, day), page(day, rows[day], accepted.get(day, []), _rows_total(rows[day])))
    write_index(engine, lake_root, stored)


def write_index(engine: Engine, lake_root: str, stored: Stored | None = None) -> None:
    """``<lake>/dq/index.html``: every checked date, newest first, its status, rows, failures, link
    (``stored``: what the warehouse holds, when the caller read it already)."""
    rows, accepted, checked = stored or _stored(engine)
    counts: defaultdict[str, int] = defaultdict(int)
    lines = []
    for day in sorted(rows, reverse=True):
        state = status(rows[day], accepted.get(day, []))
        counts[state] += 1
        failed = [r.name for r in rows[day] if r.level == "error" and not r.success]
        warned = [r.name for r in rows[day] if r.level == "warn" and not r.success]
        who = "; ".join(f"{a['by']}: {a['reason']}" for a in accepted.get(day, []))
        total = _rows_total(rows[day])
        lines.append(
            f"<tr class='{ {'FAILED': 'error', 'accepted': 'warn'}.get(state, 'ok') }'>"
            f"<td class='nowrap'><a href='date={day}/index.html'>{day}</a></td><td>{state}</td>"
            f"<td class='num'>{'' if total is None else f'{total:,}'}</td>"
            f"<td>{html.escape(', '.join(failed))}</td><td>{html.escape(', '.join(warned))}</td>"
            f"<td>{html.escape(who)}</td><td class='nowrap'>{_when(checked[day])}</td></tr>"
        )
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    index = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Data quality: every date</title>
<style>{STYLE}</style></head>
<body><h1>Data quality of usage events and task outcomes: every date</h1>
<p class="badge">{len(rows)} dates checked: {summary or "none yet"}</p>
<table><tr><th>date</th><th>gate</th><th>rows</th><th>failed checks</th><th>warnings</th>
<th>accepted (who: why)</th><th>checked</th></tr>
{chr(10).join(lines)}
</table></body></html>
"""
    _write(index_path(lake_root), index)
