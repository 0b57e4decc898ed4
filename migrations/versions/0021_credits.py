"""prepaid credits and commitments: credit grants, their voids, and the grant on a credit line

- ``credit_grants``: one row per grant (``credits load`` / ``credits grant``): account, amount,
  kind (``paid`` | ``promotional``), effective_from, expires (exclusive), priority, models, reason.
  The database refuses to change or delete a grant: a grant ends by a void, a new fact.
- ``credit_voids``: a grant's void (the UTC date it takes effect and why); append-only too.
- ``invoice_lines.grant_id``: the grant a ``credit`` line (or its correction) applied.
- ``invoice_plans.minimum_monthly``: the plan's commitment each plan period was drafted with.
- the finance views again, from the registries (new amount columns ``minimum_true_up_amount`` and
  ``credit_amount``, ``grant_id`` on ``finance_invoice_lines``) and ``finance_credit_grants``.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-05 05:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.sql import finance

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

APPEND_ONLY = ("credit_grants", "credit_voids")
MESSAGE = "credit grants never change: end a grant with `usage-billing credits void`"


def _append_only(bind) -> None:
    if bind.dialect.name == "postgresql":
        bind.exec_driver_sql(
            "CREATE OR REPLACE FUNCTION credit_grants_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN RAISE EXCEPTION '{MESSAGE}' USING ERRCODE = 'integrity_constraint_violation'; END $$"
        )
        for table in APPEND_ONLY:
            bind.exec_driver_sql(
                f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION credit_grants_append_only()"
            )
        return
    for table in APPEND_ONLY:
        for action in ("UPDATE", "DELETE"):
            bind.exec_driver_sql(
                f"CREATE TRIGGER {table}_no_{action.lower()} BEFORE {action} ON {table} "
                f"BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"
            )


def upgrade() -> None:
    bind = op.get_bind()
    finance.drop(bind)
    op.create_table(
        "credit_grants",
        sa.Column("grant_id", sa.String(length=200), nullable=False),
        sa.Column("account_id", sa.String(length=200), nullable=False),
        sa.Column(
            "amount",
            sa.Numeric(precision=20, scale=2),
            nullable=False,
            comment="in the catalog currency, > 0",
        ),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False, comment="paid | promotional"),
        sa.Column("effective_from", sa.Date(), nullable=False, comment="account-local date"),
        sa.Column("expires", sa.Date(), nullable=True, comment="account-local date, exclusive; null = never"),
        sa.Column(
            "priority",
            sa.Integer(),
            nullable=False,
            comment="lower is applied first (after expiry and kind)",
        ),
        sa.Column(
            "models",
            sa.String(length=1000),
            nullable=True,
            comment="model ids separated by ';' whose usage it covers; null = every charge",
        ),
        sa.Column("reason", sa.String(length=1000), nullable=False),
        sa.Column("loaded_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.Column(
            "source", sa.String(length=1000), nullable=False, comment="the file loaded, or 'credits grant'"
        ),
        sa.PrimaryKeyConstraint("grant_id", name=op.f("pk_credit_grants")),
    )
    op.create_index(op.f("ix_credit_grants_account_id"), "credit_grants", ["account_id"])
    op.create_table(
        "credit_voids",
        sa.Column("grant_id", sa.String(length=200), nullable=False),
        sa.Column("void_date", sa.Date(), nullable=False, comment="UTC date the void takes effect"),
        sa.Column("reason", sa.String(length=1000), nullable=False),
        sa.Column("voided_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["grant_id"],
            ["credit_grants.grant_id"],
            name=op.f("fk_credit_voids_grant_id_credit_grants"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("grant_id", name=op.f("pk_credit_voids")),
    )
    _append_only(bind)
    # SQLite adds a column in place (no rebuild), so the lines keep their immutability triggers.
    op.add_column(
        "invoice_lines",
        sa.Column(
            "grant_id",
            sa.String(length=200),
            nullable=True,
            comment="credit lines (and their corrections): the grant applied",
        ),
    )
    # what each grant gave is summed at every draft and finalize: the few credit lines, by index
    op.create_index(op.f("ix_invoice_lines_grant_id"), "invoice_lines", ["grant_id"])
    op.add_column(
        "invoice_plans",
        sa.Column(
            "minimum_monthly",
            sa.Numeric(precision=20, scale=6),
            nullable=True,
            comment="the plan's monthly minimum (commitment) as drafted; null = none",
        ),
    )
    _line_types_comment(bind, OLD_TYPES + NEW_TYPES)
    finance.create(bind, gaps=True, documents=True, unknown=True, credits=True)


OLD_TYPES = "plan_fee | included_usage | overage_usage | adjustment"
NEW_TYPES = " | minimum_true_up | credit"


def _line_types_comment(bind, comment: str) -> None:
    """The column comment lists the line types (SQLite keeps no comments)."""
    if bind.dialect.name == "postgresql":
        op.alter_column(
            "invoice_lines", "line_type", existing_type=sa.String(length=16), existing_nullable=False,
            comment=comment,
        )  # fmt: skip


def downgrade() -> None:
    bind = op.get_bind()
    finance.drop(bind)
    _line_types_comment(bind, OLD_TYPES)
    op.drop_index(op.f("ix_invoice_lines_grant_id"), table_name="invoice_lines")
    if bind.dialect.name == "sqlite":
        # dropping a column rebuilds the table on SQLite: its triggers go with it and come back
        from migrations.sql import immutability

        immutability.drop(bind)
        with op.batch_alter_table("invoice_lines") as batch:
            batch.drop_column("grant_id")
        with op.batch_alter_table("invoice_plans") as batch:
            batch.drop_column("minimum_monthly")
        immutability.create(bind, documents=True)
    else:
        op.drop_column("invoice_lines", "grant_id")
        op.drop_column("invoice_plans", "minimum_monthly")
    op.drop_table("credit_voids")
    op.drop_index(op.f("ix_credit_grants_account_id"), table_name="credit_grants")
    op.drop_table("credit_grants")
    if bind.dialect.name == "postgresql":
        bind.exec_driver_sql("DROP FUNCTION IF EXISTS credit_grants_append_only()")
    finance.create(bind, gaps=True, documents=True, unknown=True)
