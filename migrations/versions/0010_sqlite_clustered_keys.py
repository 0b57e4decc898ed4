"""the bulk-loaded tables stored in their primary key on SQLite (WITHOUT ROWID)

billable_usage, usage_daily, usage_daily_errors and pool_usage have natural composite primary keys
and millions of rows loaded at once. As rowid tables SQLite stored every row twice: in the table and
again, whole, in the primary key's index. Stored in the key itself (WITHOUT ROWID), a table takes
half the space (the demo's four tables: 793 MB -> 424 MB), a load writes one B-tree instead of
two, and a range of days is read in key order. PostgreSQL has no such option: nothing changes there.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30 15:10:00
"""

from __future__ import annotations

from alembic import op

from migrations.sql import finance

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

TABLES = ("billable_usage", "usage_daily", "usage_daily_errors", "pool_usage")


def _rebuild(with_rowid: bool) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    finance.drop(bind)  # the views read these tables, which are rebuilt below
    for table in TABLES:
        with op.batch_alter_table(table, recreate="always", table_kwargs={"sqlite_with_rowid": with_rowid}):
            pass
    finance.create(bind)


def upgrade() -> None:
    _rebuild(with_rowid=False)


def downgrade() -> None:
    _rebuild(with_rowid=True)
