"""Warehouse tables. Alembic owns their creation (``migrations/``); these models are the contract.

Token counts are 64-bit integers, money is ``Numeric`` (``Decimal``), timestamps carry a zone.
Each table states its grain in its docstring; the primary key is that grain, so a reload of the
same grain replaces rows instead of adding twins. Callers use ``from schemas.warehouse import ...``;
the tables live in ``operations`` (accounts, runs, locks, data quality), ``usage`` (usage and
adoption), ``billing`` (metering and invoices) and ``effectiveness`` (task outcomes), on ``base.Base``.
"""

from schemas.warehouse.base import (  # noqa: F401
    CLUSTERED,
    NAMING_CONVENTION,
    Base,
)
from schemas.warehouse.billing import (  # noqa: F401
    BillableUsage,
    BilledCatalogRow,
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
from schemas.warehouse.effectiveness import (  # noqa: F401
    EffectivenessQueue,
    EffectivenessWeek,
    TaskEffectiveness,
)
from schemas.warehouse.operations import (  # noqa: F401
    Account,
    DqAcceptance,
    DqResult,
    IngestRun,
    LakeBinding,
    LockFence,
    PipelineLock,
    RecomputeQueue,
)
from schemas.warehouse.usage import (  # noqa: F401
    ModelDaily,
    ModelMigration,
    ModelWeekly,
    RetirementCandidate,
    UsageDaily,
    UsageDailyError,
)
