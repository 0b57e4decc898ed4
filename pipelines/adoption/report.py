"""The retirement report as ``build`` finds it (``RetirementReport``, one ``ModelReport`` per model)
and its published form, report.json (``to_json``), which the Markdown and HTML pages render."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from pipelines.adoption.detect import METHOD_VERSION, Decision
from pipelines.adoption.preview import PreviewResult


@dataclass
class ModelReport:
    model: str
    decision: Decision
    previous: Decision | None
    flagged: bool
    weeks: list[str]
    accounts: list[int]
    share: list[float]
    usable: list[bool]
    facts: dict = field(default_factory=dict)
    preview: PreviewResult | str | None = None  # None: not flagged; text: why there is no preview
    contacts: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class RetirementReport:
    """What ``build`` finds as of a date; ``to_json`` is its published form (report.json)."""

    as_of: dt.date
    weeks: list[dt.date]  # the detector's window of complete weeks
    dq_failed_weeks: list[dt.date]  # weeks of the window the data-quality gate failed
    thresholds: dict[str, Any]
    rule: str
    definitions: dict[str, str]
    currency: str
    models: list[ModelReport]
    lifecycle: dict[str, Any]


def to_json(report: RetirementReport) -> dict[str, Any]:
    def model(m: ModelReport) -> dict:
        d = m.decision
        return {
            "model": m.model,
            "flagged": m.flagged,
            "detected": d.detected,
            "detected_previous_week": bool(m.previous and m.previous.detected),
            "reason": d.reason,
            "weeks_used": d.weeks_used,
            "weekly_active_accounts": dict(zip(m.weeks, m.accounts, strict=True)),
            "token_share": dict(zip(m.weeks, m.share, strict=True)),
            "trends": {
                k: {
                    "p": t.p_value,
                    "q": d.q_values[k],
                    "weekly_change": t.weekly_change,
                    "interval_90": list(t.weekly_change_interval),
                }
                for k, t in d.trends.items()
            },
            **({"candidate": m.facts} if m.flagged else {}),
        }

    return {
        "as_of": report.as_of.isoformat(),
        "method_version": METHOD_VERSION,
        "weeks": [w.isoformat() for w in report.weeks],
        "dq_failed_weeks": [w.isoformat() for w in report.dq_failed_weeks],
        "thresholds": report.thresholds,
        "rule": report.rule,
        "definitions": report.definitions,
        "currency": report.currency,
        "lifecycle": report.lifecycle,
        "models": [model(m) for m in report.models],
    }
