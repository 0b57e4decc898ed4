"""the view ``finance_reconciliation_gaps``: where each unreconciled token belongs

``finance_reconciliation`` compares months, but its usage and metering columns are UTC months and
its billable and invoice columns account-local months, so a gap there (the events of UTC Feb 1 that
belong to local Jan 31, a month never metered) reads as unbilled usage of the wrong month. The new
view puts every unmatched token in the local month it belongs to, with the step that would close it
(``aggregate``, ``meter``, ``meter again``, ``invoice``) and the command that does.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01 19:00:00
"""

from __future__ import annotations

from alembic import op

from migrations.sql import finance

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    finance.drop(op.get_bind())
    finance.create(op.get_bind(), gaps=True)


def downgrade() -> None:
    finance.drop(op.get_bind())
    finance.create(op.get_bind())
