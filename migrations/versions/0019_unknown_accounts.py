"""usage of unknown accounts is never billed silently; landing entries not read are recorded

- ``unknown_account_acceptances``: per month and account, who accepted numbering the documents of an
  account the accounts table never held, when and why (``invoices finalize
  --accept-unknown-accounts REASON``), with the tokens and amount it was accepted for.
- ``finance_unknown_accounts``: every document of such an account (or of one accepted since), with
  its tokens, total and the acceptance, if any.
- ``ingest_runs.not_read``: the landing entries a run did not read and why (name -> why).
- ``lock_fences``: per step lock, a token raised each time it is taken; a run's commit checks it is
  still its own, so a run that lost its lock never commits.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03 19:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.sql import finance

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    finance.drop(bind)
    op.create_table(
        "unknown_account_acceptances",
        sa.Column("period", sa.String(length=7), nullable=False, comment="account-local month YYYY-MM"),
        sa.Column("account_id", sa.String(length=200), nullable=False),
        sa.Column("accepted_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("accepted_by", sa.String(length=100), nullable=False),
        sa.Column("reason", sa.String(length=1000), nullable=False),
        sa.Column(
            "tokens", sa.BigInteger(), nullable=False, comment="usage tokens on its drafts when accepted"
        ),
        sa.Column(
            "amount",
            sa.Numeric(precision=20, scale=2),
            nullable=False,
            comment="the drafts' total when accepted",
        ),
        sa.PrimaryKeyConstraint("period", "account_id", name=op.f("pk_unknown_account_acceptances")),
    )
    op.add_column(
        "ingest_runs",
        sa.Column(
            "not_read",
            sa.JSON(),
            nullable=True,
            comment="landing entries not read (name -> why), e.g. a producer's temporary .file",
        ),
    )
    op.create_table(
        "lock_fences",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column(
            "token", sa.BigInteger(), nullable=False, comment="raised by one each time the lock is taken"
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_lock_fences")),
    )
    finance.create(bind, gaps=True, documents=True, unknown=True)


def downgrade() -> None:
    bind = op.get_bind()
    finance.drop(bind)
    op.drop_table("lock_fences")
    with op.batch_alter_table("ingest_runs") as batch:
        batch.drop_column("not_read")
    op.drop_table("unknown_account_acceptances")
    finance.create(bind, gaps=True, documents=True)
