"""The effectiveness report: ``effectiveness.json``, ``.md`` and ``.html`` over the complete ISO weeks
of a range.

    usage-billing effectiveness report --from 2026-08-03 --to 2026-08-30 --out reports/eff

- ``effectiveness.json``: the weekly groups of ``task_effectiveness`` as stored, with the range's
  orphan outcomes and open tasks (the contract's shape; money as decimal strings).
- The page and the Markdown judge models over the whole range, from the weeks' task rows
  (``lake/tasks/``): per model and tier, the one-pass rate with its 95% Wilson interval, the
  end-to-end time split into model time, rework and the rest, and the cost per accepted task with
  and without rework; then, per task class, each model with a successor in the catalog against it
  (the head-to-head) with the sentence a product team reads.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Engine, select

from billing import effectiveness as eff
from billing.effectiveness_groups import cents, group_metrics, half_up, wilson
from pipelines import lake
from pipelines.effectiveness.figures import ALL_TIERS, head_to_head, sentence
from pipelines.effectiveness.html import markdown, page
from pipelines.effectiveness.weeks import TASKS, Held, held_partitions, partition_files, week_dates
from pipelines.errors import UsageBillingError
from pipelines.runtime.outputs import write_text
from schemas.catalog import Catalog
from schemas.events import LAKE_SCHEMA
from schemas.outcomes import OUTCOME_LAKE_SCHEMA
from schemas.warehouse import EffectivenessWeek, TaskEffectiveness

GROUP_FIELDS = (
    "week_start",
    "model",
    "speed_tier",
    "task_class",
    "tasks",
    "one_pass",
    "reworked",
    "abandoned",
    "mixed",
    "one_pass_rate",
    "rework_share",
    "abandon_share",
    "e2e_ms_mean",
    "e2e_ms_p50",
    "e2e_ms_p90",
    "model_ms_mean",
    "rework_ms_total",
    "token_cost",
    "rework_cost",
    "cost_per_accepted_task",
)


MONEY_FIELDS = ("token_cost", "rework_cost", "cost_per_accepted_task")


def _json_value(name: str, value: object) -> object:
    """A group's value as effectiveness.json has it: money as a decimal string, times as numbers."""
    if isinstance(value, Decimal):
        if name in MONEY_FIELDS:
            return f"{value:.2f}"
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def weekly_groups(engine: Engine, weeks: list[dt.date]) -> list[dict]:
    t = TaskEffectiveness.__table__.c
    with engine.connect() as conn:
        rows = conn.execute(
            select(*(t[c] for c in GROUP_FIELDS))
            .where(t.week_start.in_(weeks))
            .order_by(t.week_start, t.model, t.speed_tier, t.task_class)
        ).all()
    return [{c: _json_value(c, v) for c, v in zip(GROUP_FIELDS, r, strict=True)} for r in rows]


def computed_weeks(engine: Engine, weeks: list[dt.date]) -> dict[dt.date, dict]:
    w = EffectivenessWeek.__table__.c
    with engine.connect() as conn:
        rows = conn.execute(
            select(w.week_start, w.outcomes, w.tasks, w.orphan_outcomes).where(w.week_start.in_(weeks))
        )
        return {r.week_start: r._asdict() for r in rows}


def uncomputed(
    engine: Engine, lake_root: str, weeks: list[dt.date], done: dict | None = None
) -> list[dt.date]:
    """The weeks with outcomes in the lake that ``task_effectiveness`` has no computation of."""
    done = computed_weeks(engine, weeks) if done is None else done
    with_outcomes = set(lake.partition_dates(lake_root, lake.OUTCOMES))
    return [w for w in weeks if w not in done and any(d in with_outcomes for d in week_dates(w))]


def open_tasks(lake_root: str, weeks: list[dt.date], held: Held = frozenset()) -> int:
    """(account, task_id) pairs with a request on the weeks' UTC dates and no outcome in the lake (but
    for the partitions the data-quality gate holds back)."""
    events = partition_files(lake_root, lake.EVENTS, [d for w in weeks for d in week_dates(w)], held)
    keys = ["account_id", "task_id"]
    requested = lake.scan(events, keys, pc.field("task_id").is_valid(), LAKE_SCHEMA)
    if requested.num_rows == 0:
        return 0
    requested = requested.group_by(keys).aggregate([])
    outcome_files = lake.dataset_files(lake_root, lake.OUTCOMES)
    known = lake.scan(outcome_files, keys, pc.scalar(True), OUTCOME_LAKE_SCHEMA)
    if known.num_rows == 0:
        return requested.num_rows
    return requested.join(known.group_by(keys).aggregate([]), keys, join_type="left anti").num_rows


def range_tasks(lake_root: str, weeks: list[dt.date]) -> pa.Table:
    files = [f for w in weeks for f in lake.list_files(lake.partition(lake_root, TASKS, w))]
    tables = [lake.read_parquet(f) for f in files]
    return pa.concat_tables(tables).cast(eff.TASK_SCHEMA) if tables else eff.TASK_SCHEMA.empty_table()


def range_groups(tasks: pa.Table, per_hour: Decimal, first_week: dt.date) -> list[dict]:
    """The groups over the whole range: per (model, tier, class) and per (model, every tier ``*``,
    class), each with task_class ``*`` too; ``week_start`` is the range's first Monday."""
    if tasks.num_rows == 0:
        return []
    n = tasks.num_rows
    weekless = tasks.set_column(
        tasks.schema.get_field_index("week_start"), "week_start", pa.array([first_week] * n, pa.date32())
    )
    every_tier = weekless.set_column(
        weekless.schema.get_field_index("speed_tier"), "speed_tier", pa.array([ALL_TIERS] * n, pa.string())
    )
    return group_metrics(pa.concat_tables([weekless, every_tier]), per_hour)


def _with_intervals(groups: list[dict]) -> list[dict]:
    for g in groups:
        lo, hi = wilson(g["one_pass"], g["tasks"])
        g["one_pass_low"], g["one_pass_high"] = lo, hi
        accepted = g["one_pass"] + g["reworked"]
        g["cost_without_rework"] = cents(Fraction(g["token_cost"]) / accepted) if accepted else None
        g["rework_ms_mean"] = half_up(Fraction(g["rework_ms_total"], g["tasks"]))
    return groups


def versus(lake_root: str, catalog: Catalog, model: str, successor: str, weeks: list[dt.date]) -> list[dict]:
    """The head-to-head of ``model`` against ``successor`` per task class over ``weeks`` (from the
    weeks' task rows; empty when either has no task there). For the retirement report."""
    tasks = range_tasks(lake_root, weeks)
    if tasks.num_rows == 0:
        return []
    keep = pc.is_in(tasks["model"], value_set=pa.array([model, successor]))
    groups = _with_intervals(range_groups(tasks.filter(keep), catalog.effectiveness.per_hour, weeks[0]))
    return head_to_head(catalog, labelled(groups, catalog), [(model, successor)])


def labelled(groups: list[dict], catalog: Catalog) -> list[dict]:
    """Each group with ``tier_label``: what pages print for its tier (the catalog's label; ``*`` as is)."""
    return [{**g, "tier_label": catalog.tier_label(g["speed_tier"])} for g in groups]


def against_successor(
    lake_root, catalog: Catalog, model: str, successor, window: list[dt.date]
) -> dict | None:
    """The candidate against its successor per task class over the report's weeks: one-pass rate,
    end-to-end time and cost per accepted task, rework included (None without a lake or tasks)."""
    if lake_root is None or successor is None:
        return None
    items = versus(lake_root, catalog, model, successor, window)
    if not items:
        return None
    return {
        "successor": successor,
        "weeks": [window[0].isoformat(), window[-1].isoformat()],
        "currency": catalog.currency,
        "rework_costed": catalog.effectiveness.costed,
        "classes": [
            {
                "task_class": i["task_class"],
                "rows": [{k: g[k] for k in _EFFECT_FIELDS} for g in [i["model_row"], *i["successor_rows"]]],
                "sentence": sentence(i, catalog.currency),
            }
            for i in items
        ],
    }


_EFFECT_FIELDS = (
    "model",
    "speed_tier",
    "tasks",
    "one_pass_rate",
    "one_pass_low",
    "one_pass_high",
    "rework_share",
    "e2e_ms_mean",
    "rework_ms_mean",
    "model_ms_mean",
    "cost_per_accepted_task",
    "cost_without_rework",
)


# -- the report ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class EffectivenessView:
    """What the pages show beside effectiveness.json: the figures over the whole range."""

    weeks: list[dt.date]
    currency: str
    costed: bool  # whether rework has a cost per hour in the catalog
    per_hour: Decimal
    overall: list[dict[str, Any]]  # the range's groups, labelled, with intervals
    head_to_head: list[dict[str, Any]]  # each model beside its successor's tiers
    tasks: int


@dataclass(frozen=True)
class EffectivenessReport:
    data: dict[str, Any]  # effectiveness.json
    view: EffectivenessView


def build(
    engine: Engine, lake_root: str, catalog: Catalog, first: dt.date, last: dt.date
) -> EffectivenessReport:
    weeks = eff.complete_weeks(first, last)
    if not weeks:
        raise UsageBillingError(
            f"no complete ISO week (Monday to Sunday) lies within {first} .. {last}: "
            "the report covers complete weeks"
        )
    done = computed_weeks(engine, weeks)
    missing = uncomputed(engine, lake_root, weeks, done)
    if missing:
        raise UsageBillingError(
            f"effectiveness is not computed for the week(s) of {', '.join(str(w) for w in missing)}: "
            f"run `usage-billing effectiveness compute --from {missing[0]} "
            f"--to {missing[-1] + dt.timedelta(days=6)}`"
        )
    data = {
        "from": first.isoformat(),
        "to": last.isoformat(),
        "groups": weekly_groups(engine, weeks),
        "orphan_outcomes": sum(int(done[w]["orphan_outcomes"]) for w in weeks if w in done),
        "open_tasks": open_tasks(lake_root, weeks, held_partitions(engine)),
    }
    groups = range_groups(range_tasks(lake_root, weeks), catalog.effectiveness.per_hour, weeks[0])
    overall = labelled(_with_intervals(groups), catalog)
    view = EffectivenessView(
        weeks=weeks,
        currency=catalog.currency,
        costed=catalog.effectiveness.costed,
        per_hour=catalog.effectiveness.per_hour,
        overall=overall,
        head_to_head=head_to_head(catalog, overall),
        tasks=sum(int(done[w]["tasks"]) for w in weeks if w in done),
    )
    return EffectivenessReport(data, view)


def write(out_dir: Path, report: EffectivenessReport) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text(out_dir / "effectiveness.json", json.dumps(report.data, indent=2) + "\n")
    write_text(out_dir / "effectiveness.md", markdown(report))
    write_text(out_dir / "effectiveness.html", page(report))


def run(
    engine: Engine, lake_root: str, catalog: Catalog, first: dt.date, last: dt.date, out_dir: Path
) -> EffectivenessReport:
    report = build(engine, lake_root, catalog, first, last)
    write(out_dir, report)
    return report
