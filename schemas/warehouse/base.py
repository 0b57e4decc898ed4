"""The declarative base of the warehouse tables (``schemas.warehouse``): the constraint naming convention
and the type map (64-bit integers, exact decimals, zoned timestamps).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Date,
    MetaData,
    Numeric,
    String,
    Table,
)
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.types import TIMESTAMP

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


# On SQLite, a big table with a natural composite key is stored in that key (migration 0010): no
# second copy of every row in a separate primary key index.
CLUSTERED = {"sqlite_with_rowid": False}


class Base(DeclarativeBase):
    __table__: ClassVar[Table]  # every model here maps one table (SQLAlchemy types it as any FromClause)
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012
        int: BigInteger,
        str: String(200),
        Decimal: Numeric(20, 6),
        dt.datetime: TIMESTAMP(timezone=True),
        dt.date: Date,
        dict: JSON,
        dict[str, Any]: JSON,
    }
