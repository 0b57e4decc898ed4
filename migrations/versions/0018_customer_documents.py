"""customer documents: who a document is from and to, when it is due, its plan periods

- ``accounts`` gains the optional ``name``, ``email`` and ``billing_address`` of the accounts file.
- ``invoices`` gains the account's ``timezone`` (the period's days are its local days), the
  ``due_date`` and the customer and seller as they were when the document was finalized.
- ``invoice_plans``: one row per plan period of a document's month (pay as you go included), frozen
  with the document like its lines.
- The finance views show issue and due dates, units, one row per plan period
  (``finance_invoice_plans``) and money with two decimals.

Plain ADD COLUMNs on both databases (a batch rebuild would drop the documents' triggers on SQLite);
the triggers are made again to freeze the new columns.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03 07:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.sql import finance, immutability

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

ACCOUNT_COLUMNS = (
    ("name", 200, "customer name on documents"),
    ("email", 254, "where documents are sent"),
    ("billing_address", 1000, "postal address, lines"),
)
ZONE = "the account's zone: the period's first and last day are its local days"
DUE = "issue date (finalized_at, UTC) + the catalog's payment_terms_days; set when finalized"
INVOICE_COLUMNS = (
    (
        "timezone",
        sa.String(length=64),
        "the account's zone: the period's first and last day are its local days",
    ),
    (
        "due_date",
        sa.Date(),
        "issue date (finalized_at, UTC) + the catalog's payment_terms_days; set when finalized",
    ),
    ("customer_name", sa.String(length=200), "as finalized (accounts.name)"),
    ("customer_email", sa.String(length=254), "as finalized"),
    ("customer_address", sa.String(length=1000), "as finalized"),
    ("seller_name", sa.String(length=200), "the catalog's [seller] when finalized"),
    ("seller_address", sa.String(length=1000), None),
    ("seller_tax_id", sa.String(length=64), None),
)


# Comments that now say what the columns mean (PostgreSQL keeps comments; SQLite has none).
COMMENTS = (
    (
        "plan",
        sa.String(length=200),
        "plans in force in the month, comma separated",
        "plans in force in the month, comma separated (invoice_plans has one row each)",
    ),
    ("subtotal", sa.Numeric(20, 2), "sum of the usage and fee lines", "sum of the document's lines"),
    (
        "total",
        sa.Numeric(20, 2),
        "sum of all lines",
        "what the document asks to pay: the subtotal (no tax is computed)",
    ),
)


def _comment(new: bool) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for column, type_, old_text, new_text in COMMENTS:
        op.alter_column(
            "invoices",
            column,
            existing_type=type_,
            comment=new_text if new else old_text,
            existing_comment=old_text if new else new_text,
        )


def upgrade() -> None:
    bind = op.get_bind()
    _comment(new=True)
    finance.drop(bind)
    immutability.drop(bind)
    for name, size, comment in ACCOUNT_COLUMNS:
        op.add_column("accounts", sa.Column(name, sa.String(length=size), nullable=True, comment=comment))
    for name, type_, note in INVOICE_COLUMNS:
        op.add_column("invoices", sa.Column(name, type_, nullable=True, comment=note))
    op.create_table(
        "invoice_plans",
        sa.Column("invoice_id", sa.String(length=36), nullable=False),
        sa.Column("active_from", sa.Date(), nullable=False, comment="first local day in the month"),
        sa.Column("active_until", sa.Date(), nullable=False, comment="last local day in the month"),
        sa.Column("plan", sa.String(length=64), nullable=True, comment="null = pay as you go"),
        sa.Column("days", sa.Integer(), nullable=False, comment="active days in the month"),
        sa.Column(
            "monthly_fee",
            sa.Numeric(precision=20, scale=6),
            nullable=True,
            comment="the plan's fee per month",
        ),
        sa.ForeignKeyConstraint(
            ["invoice_id"],
            ["invoices.invoice_id"],
            name=op.f("fk_invoice_plans_invoice_id_invoices"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("invoice_id", "active_from", name=op.f("pk_invoice_plans")),
    )
    immutability.create(bind, documents=True)
    finance.create(bind, gaps=True, documents=True)


def downgrade() -> None:
    bind = op.get_bind()
    _comment(new=False)
    finance.drop(bind)
    immutability.drop(bind)
    op.drop_table("invoice_plans")
    for name, _, _ in reversed(INVOICE_COLUMNS):
        op.drop_column("invoices", name)
    for name, _, _ in reversed(ACCOUNT_COLUMNS):
        op.drop_column("accounts", name)
    immutability.create(bind)
    finance.create(bind, gaps=True)
