"""The demo's credits: a few accounts with prepaid blocks and promotional credits from the start, and
the fast model's remaining users offered transition credits from its migration preview (what would
make the move to the successor free for those who would pay more), loaded before the months they
cover are invoiced, as a product team would do when it announces the retirement."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from sqlalchemy import Engine, text

from pipelines.adoption.candidate import last_complete_month
from pipelines.adoption.preview import preview
from pipelines.adoption.preview_files import TRANSITION_MONTHS, months_later, write_credits
from pipelines.errors import UsageBillingError
from pipelines.invoicing import grants
from schemas.catalog import Catalog

HEADER = ",".join(grants.COLUMNS) + "\n"


@dataclass
class DemoCredits:
    starting: int = 0  # grants loaded before the first month
    transition_month: str | None = None  # the month the transition credits start
    transition: int = 0  # accounts offered transition credits
    transition_total: Decimal = Decimal(0)
    why_none: str = ""  # why no transition credits were offered


def starting_grants(engine: Engine, catalog: Catalog, start: dt.date, folder: Path) -> int:
    """Prepaid blocks for the two accounts with the most overage and promotional welcome credits
    (three months) for the next two: a credits CSV under ``folder``, loaded."""
    with engine.connect() as conn:
        top = list(
            conn.execute(
                text(
                    "SELECT account_id FROM billable_usage GROUP BY account_id "
                    "ORDER BY sum(overage_tokens) DESC, account_id LIMIT 4"
                )
            ).scalars()
        )
    if not top:
        return 0
    ends = months_later(start, 3)
    rows = [
        f"demo-prepaid-{account},{account},250.00,paid,{start},,0,,prepaid block"
        if n < 2
        else f"demo-welcome-{account},{account},40.00,promotional,{start},{ends},0,,welcome credit"
        for n, account in enumerate(top)
    ]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "starting-credits.csv"
    path.write_text(HEADER + "\n".join(rows) + "\n", encoding="utf-8")
    return grants.load(engine, path, catalog).loaded


def transition_grants(
    engine: Engine, catalog: Catalog, lake: str, model: str, as_of: dt.date, folder: Path, result: DemoCredits
) -> None:
    """The fast model's migration preview of the last complete month before ``as_of``: a promotional
    grant on the successor for every account that would pay more, loaded (``result`` says what)."""
    month = last_complete_month(as_of)
    try:
        previewed = preview(engine, catalog, lake, model, month)
    except UsageBillingError as exc:
        result.why_none = str(exc)
        return
    path = folder / "transition-credits.csv"
    result.transition, result.transition_total = write_credits(previewed, path, TRANSITION_MONTHS)
    result.transition_month = month_after(as_of)
    grants.load(engine, path, catalog)


def month_after(as_of: dt.date) -> str:
    """The first month the transition credits of a report as of ``as_of`` cover."""
    first = dt.date.fromisoformat(last_complete_month(as_of) + "-01")
    return f"{first + dt.timedelta(days=31):%Y-%m}"
