"""Warehouse tables. Alembic owns their creation (``migrations/``); these models are the contract.

Token counts are 64-bit integers, money is ``Numeric`` (``Decimal``), timestamps carry a zone.
Each table states its grain in its docstring; the primary key is that grain, so a reload of the
same grain replaces rows instead of adding twins. Callers use ``from schemas.warehouse import ...``;
the tables live in ``operations`` (accounts, runs, locks, data quality), ``usage`` (usage and
adoption), ``billing`` (metering and invoices) and ``effectiveness`` (task outcomes), on ``base.Base``.
"""

from schemas.warehouse.base import (
    CLUSTERED,
    NAMING_CONVENTION,
    Base,
)
from schemas.warehouse.billing import (
    BillableUsage,
    BilledCatalogRow,
    CreditGrant,
    CreditVoid,
    Invoice,
    InvoiceCounter,
    InvoiceLine,
    InvoicePlan,
    MeteredDate,
    MeteredDay,
    MeterQueue,
    PoolDraw,
    PoolUsage,
    UnknownAccountAcceptance,
)
from schemas.warehouse.effectiveness import (
    EffectivenessQueue,
    EffectivenessWeek,
    TaskEffectiveness,
)
from schemas.warehouse.notifications import Notification
from schemas.warehouse.operations import (
    Account,
    DqAcceptance,
    DqResult,
    IngestRun,
    LakeBinding,
    LockFence,
    PipelineLock,
    RecomputeQueue,
)
from schemas.warehouse.usage import (
    ModelDaily,
    ModelMigration,
    ModelWeekly,
    RetirementCandidate,
    UsageDaily,
    UsageDailyError,
)

__all__ = [
    "CLUSTERED",
    "NAMING_CONVENTION",
    "Account",
    "Base",
    "BillableUsage",
    "BilledCatalogRow",
    "CreditGrant",
    "CreditVoid",
    "DqAcceptance",
    "DqResult",
    "EffectivenessQueue",
    "EffectivenessWeek",
    "IngestRun",
    "Invoice",
    "InvoiceCounter",
    "InvoiceLine",
    "InvoicePlan",
    "LakeBinding",
    "LockFence",
    "MeterQueue",
    "MeteredDate",
    "MeteredDay",
    "ModelDaily",
    "ModelMigration",
    "ModelWeekly",
    "Notification",
    "PipelineLock",
    "PoolDraw",
    "PoolUsage",
    "RecomputeQueue",
    "RetirementCandidate",
    "TaskEffectiveness",
    "UnknownAccountAcceptance",
    "UsageDaily",
    "UsageDailyError",
    "# noqa: F401",
]
