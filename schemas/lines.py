"""Invoice line types and document types: the one registry that billing, documents, exports and the
finance views derive from.

A line's ``line_type`` is one of ``LINES``; an adjustment line also carries ``adjusted_type``, the
type it corrects, so reports count it where the corrected charge counts ("charge type"). The finance
views (``migrations/sql/finance.py``) are generated from this registry: each type with a ``column``
gets an amount column in ``finance_invoice_summary``, each token-unit type a tokens column, and the
unit and unit size of ``finance_invoice_lines`` come from ``unit``. The next line type (a credit, a
minimum true-up, as ``credit`` and ``minimum_true_up`` were) is one entry here, plus the code that makes
its lines.
"""

from __future__ import annotations

from dataclasses import dataclass

TOKEN_UNIT, TOKEN_UNIT_SIZE = "1M tokens", 1_000_000
FEE_UNIT = "month"  # a plan fee's quantity is days, its unit size the days in the month
CREDIT_UNIT = "credit"  # a credit line: quantity 1, unit price = amount = minus what its grant covered
MONEY_UNIT = ""  # a line of money only (quantity 1, unit price = amount)


@dataclass(frozen=True)
class LineType:
    id: str
    order: int  # position on a document: lower first
    sign: int  # +1: amounts are >= 0 (charges); -1: <= 0 (credits); 0: either (corrections)
    unit: str  # TOKEN_UNIT, FEE_UNIT, or "" (a line of money only)
    label: str  # what documents and reports print
    column: str | None = None  # finance_invoice_summary's amount column for this charge
    tokens_column: str | None = None  # finance_invoice_summary's tokens column (token-unit types)
    corrects: bool = False  # its lines correct another type's (adjusted_type says which)

    @property
    def usage(self) -> bool:
        """Lines of metered tokens (their quantity is tokens)."""
        return self.unit == TOKEN_UNIT


PLAN_FEE = LineType("plan_fee", 0, 1, FEE_UNIT, "Plan fee", column="plan_fee_amount")
# What a plan's monthly minimum (``minimum_monthly``) bills when the month's charges fall short of it.
MINIMUM_TRUE_UP = LineType(
    "minimum_true_up", 1, 1, MONEY_UNIT, "Minimum commitment true-up", column="minimum_true_up_amount"
)
OVERAGE = LineType(
    "overage_usage",
    2,
    1,
    TOKEN_UNIT,
    "Usage beyond the allowances",
    column="overage_amount",
    tokens_column="overage_tokens",
)
INCLUDED = LineType("included_usage", 3, 1, TOKEN_UNIT, "Included usage", tokens_column="included_tokens")
# One per grant that covered something on the document (its ``grant_id`` on the line).
CREDIT = LineType("credit", 8, -1, CREDIT_UNIT, "Credits applied", column="credit_amount")
ADJUSTMENT = LineType("adjustment", 9, 0, MONEY_UNIT, "Correction", corrects=True)

# Registry order is the finance views' column order; ``order`` is the order on a document.
LINES: tuple[LineType, ...] = (PLAN_FEE, INCLUDED, OVERAGE, ADJUSTMENT, MINIMUM_TRUE_UP, CREDIT)
# Charges that grants cover (billing.credits): every charge line type; a grant with a model list
# covers only the usage lines of those models.
CHARGES: tuple[LineType, ...] = (PLAN_FEE, MINIMUM_TRUE_UP, OVERAGE)

# Document types: an invoice, or an adjustment document that corrects a finalized one.
INVOICE_DOCUMENT = "invoice"
ADJUSTMENT_DOCUMENT = ADJUSTMENT.id


def line(line_id: str) -> LineType:
    for t in LINES:
        if t.id == line_id:
            return t
    raise KeyError(line_id)


def order() -> dict[str, int]:
    """Charge type -> document position (the lines a document sorts; corrections sort as their type)."""
    return {t.id: t.order for t in sorted(LINES, key=lambda t: t.order) if not t.corrects}


def usage_ids() -> tuple[str, ...]:
    """Types whose quantity is metered tokens."""
    return tuple(t.id for t in LINES if t.usage)


def sql_in(ids: tuple[str, ...]) -> str:
    """``('a', 'b')`` for a SQL ``IN``."""
    return "(" + ", ".join(f"'{i}'" for i in ids) + ")"
