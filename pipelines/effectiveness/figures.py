"""How the effectiveness report words and pairs its figures: money with its currency, durations, the
head-to-head of a model and its catalog successor, and the sentence a product team reads."""

from __future__ import annotations

from decimal import Decimal

from billing import effectiveness as eff
from schemas.catalog import Catalog

ALL_TIERS = "*"  # the group of every speed tier of a model, in the report's range figures


def head_to_head(
    catalog: Catalog, groups: list[dict], pairs: list[tuple[str, str]] | None = None
) -> list[dict]:
    """Per (model, successor) pair (default: each model and its catalog successor), both with tasks in
    the groups: per task class, the model (all its tiers) beside each tier of the successor."""
    if pairs is None:
        pairs = [(m.id, m.successor) for m in catalog.models if m.successor is not None]
    present = {g["model"] for g in groups}
    index = {(g["model"], g["speed_tier"], g["task_class"]): g for g in groups}
    out = []
    for model, successor in pairs:
        if model not in present or successor not in present:
            continue
        classes = sorted({g["task_class"] for g in groups if g["model"] == model})
        for cls in classes:
            mine = index.get((model, ALL_TIERS, cls))
            theirs = [
                g
                for g in groups
                if g["model"] == successor and g["speed_tier"] != ALL_TIERS and g["task_class"] == cls
            ]
            if mine is None or not theirs:
                continue
            out.append(
                {
                    "model": model,
                    "successor": successor,
                    "task_class": cls,
                    "model_row": mine,
                    "successor_rows": theirs,
                }
            )
    return out


def money(value: Decimal | None, currency: str) -> str:
    return "-" if value is None else f"{currency} {value:,.2f}"


def duration(ms: int | float) -> str:
    s = ms / 1000
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def sentence(item: dict, currency: str) -> str:
    mine = item["model_row"]
    best = min(
        item["successor_rows"],
        key=lambda g: (g["cost_per_accepted_task"] is None, g["cost_per_accepted_task"] or 0),
    )
    cls = item["task_class"]
    where = "on all tasks" if cls == eff.ALL_CLASSES else f"on {cls} tasks"
    return (
        f"{where} {item['model']} costs {money(mine['cost_per_accepted_task'], currency)} per accepted task "
        f"including rework ({mine['one_pass_rate']:.0%} one-pass, "
        f"{duration(mine['e2e_ms_mean'])} end to end), "
        f"{item['successor']} {best['speed_tier']} {money(best['cost_per_accepted_task'], currency)} "
        f"({best['one_pass_rate']:.0%} one-pass, {duration(best['e2e_ms_mean'])})"
    )
