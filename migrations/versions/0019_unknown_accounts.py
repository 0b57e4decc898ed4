"""usage of unknown accounts is never billed silently; landing entries not read are recorded

- ``unknown_account_acceptances``: per month and account, who accepted numbering the documents of an
  account the accounts table never held, when and why (``invoices finalize
  --accept-unknown-accounts REASON``), with the tokens and amount it was accepted for.
- ``finance_unknown_accounts``: every document of such an account (or of one accepted since), with
  its tokens, total and the acceptance, if any.
- ``ingest_runs.not_read``: the landing entries a run did not read and why (name -> why).
- ``billed_catalog_rows``: each catalog row (price, plan fee) that priced finalized documents, with
  the values it billed and the days it priced: a later catalog may not change it in place.
- ``pool_draws``: the tokens each pool covered of each model's usage per account-local day (filled by
  metering; days metered before this revision have none until they are metered again).
- the finance views ``finance_revenue`` (every charge, plan fees included), ``finance_pool_draws``
  (the backup tank: a model's own pool against the main one, per month) and
  ``finance_pool_reconciliation`` (pool usage against the included tokens on documents, every gap
  named).
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
        "billed_catalog_rows",
        sa.Column("row_key", sa.String(length=300), nullable=False, comment="kind:subject:tier:since"),
        sa.Column("row_kind", sa.String(length=8), nullable=False, comment="price | plan_fee"),
        sa.Column(
            "subject",
            sa.String(length=100),
            nullable=False,
            comment="the model of a price, the plan of a fee",
        ),
        sa.Column(
            "tier", sa.String(length=32), nullable=False, comment="the speed tier of a price; empty for a fee"
        ),
        sa.Column("effective_from", sa.Date(), nullable=True, comment="null: the plan's monthly_fee"),
        sa.Column(
            "row_values",
            sa.JSON(),
            nullable=False,
            comment="per 1M tokens by kind, or monthly_fee, as billed",
        ),
        sa.Column(
            "first_day",
            sa.Date(),
            nullable=False,
            comment="first day priced (UTC for prices, local for fees)",
        ),
        sa.Column("last_day", sa.Date(), nullable=False, comment="last day priced"),
        sa.Column("first_document", sa.String(length=20), nullable=True, comment="first document it priced"),
        sa.Column("recorded_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("row_key", name=op.f("pk_billed_catalog_rows")),
    )
    op.create_table(
        "pool_draws",
        sa.Column("local_day", sa.Date(), nullable=False, comment="account-local date"),
        sa.Column("account_id", sa.String(length=200), nullable=False),
        sa.Column("plan", sa.String(length=64), nullable=False),
        sa.Column("pool", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=100), nullable=False),
        sa.Column(
            "tokens", sa.BigInteger(), nullable=False, comment="input + output tokens the pool covered"
        ),
        sa.PrimaryKeyConstraint(
            "local_day", "account_id", "plan", "pool", "model", name=op.f("pk_pool_draws")
        ),
        sqlite_with_rowid=False,
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
    op.drop_table("pool_draws")
    op.drop_table("billed_catalog_rows")
    with op.batch_alter_table("ingest_runs") as batch:
        batch.drop_column("not_read")
    op.drop_table("unknown_account_acceptances")
    finance.create(bind, gaps=True, documents=True)
