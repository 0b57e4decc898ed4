"""Revision 0005: the database refuses to change a billing document that is no longer a draft.

A finalized invoice may only become void (status, voided_at and void_reason change, nothing else);
its lines never change. PostgreSQL: PL/pgSQL triggers. SQLite: triggers that RAISE(ABORT), on top of
the code's own check (``billing.invoices`` never issues such a statement).
"""

from __future__ import annotations

from sqlalchemy import Connection

MESSAGE = "billing document is not a draft: finalized invoices never change (void it or issue an adjustment)"
_FROZEN = (
    "invoice_id",
    "account_id",
    "period",
    "sequence",
    "kind",
    "invoice_number",
    "corrects",
    "plan",
    "currency",
    "subtotal",
    "total",
    "created_at",
    "finalized_at",
)

# Revision 0018: the document's own columns (zone, due date, customer and seller as finalized) are
# frozen too, and so are its plan periods (``invoice_plans``) like its lines.
DOCUMENT_COLUMNS = (
    "timezone",
    "due_date",
    "customer_name",
    "customer_email",
    "customer_address",
    "seller_name",
    "seller_address",
    "seller_tax_id",
)
LINE_TABLES = ("invoice_lines",)
DOCUMENT_LINE_TABLES = ("invoice_lines", "invoice_plans")


def _pg(frozen: tuple[str, ...], tables: tuple[str, ...]) -> str:
    parts = [
        f"""
CREATE OR REPLACE FUNCTION invoices_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.status = 'draft' THEN
    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
    RETURN NEW;
  END IF;
  IF TG_OP = 'UPDATE' AND OLD.status = 'finalized' AND NEW.status = 'void'
     AND ROW({", ".join("NEW." + c for c in frozen)})
         IS NOT DISTINCT FROM ROW({", ".join("OLD." + c for c in frozen)}) THEN
    RETURN NEW;
  END IF;
  RAISE EXCEPTION '% %: {MESSAGE}', coalesce(OLD.invoice_number, OLD.invoice_id), OLD.status
    USING ERRCODE = 'integrity_constraint_violation';
END $$;
CREATE TRIGGER invoices_immutable BEFORE UPDATE OR DELETE ON invoices
  FOR EACH ROW EXECUTE FUNCTION invoices_immutable();

CREATE OR REPLACE FUNCTION invoice_lines_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  doc_status text;
BEGIN
  SELECT i.status INTO doc_status
  FROM changed_lines c JOIN invoices i ON i.invoice_id = c.invoice_id
  WHERE i.status <> 'draft' LIMIT 1;
  IF doc_status IS NOT NULL THEN
    RAISE EXCEPTION 'line of a % document: {MESSAGE}', doc_status
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NULL;
END $$;"""
    ]
    # One check per statement over its transition table (a COPY of a million lines runs it once).
    for table in tables:
        for op, name, ref in (
            ("INSERT", "insert", "NEW"),
            ("UPDATE", "update", "OLD"),
            ("UPDATE", "update_new", "NEW"),
            ("DELETE", "delete", "OLD"),
        ):
            parts.append(
                f"CREATE TRIGGER {_pg_trigger(table, name)} AFTER {op} ON {table} "
                f"REFERENCING {ref} TABLE AS changed_lines FOR EACH STATEMENT "
                "EXECUTE FUNCTION invoice_lines_immutable();"
            )
    return "\n".join(parts)


def _pg_trigger(table: str, op: str) -> str:
    return f"invoice_lines_immutable_{op}" if table == "invoice_lines" else f"{table}_immutable_{op}"


def _sqlite_trigger(table: str, op: str) -> str:
    return f"invoice_lines_no_{op}" if table == "invoice_lines" else f"{table}_no_{op}"


def _sqlite(frozen: tuple[str, ...], tables: tuple[str, ...]) -> list[str]:
    same = " AND ".join(f"NEW.{c} IS OLD.{c}" for c in frozen)
    statements = [
        f"""CREATE TRIGGER invoices_no_delete BEFORE DELETE ON invoices WHEN OLD.status <> 'draft'
BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END""",
        f"""CREATE TRIGGER invoices_no_update BEFORE UPDATE ON invoices
WHEN OLD.status <> 'draft' AND NOT (OLD.status = 'finalized' AND NEW.status = 'void' AND {same})
BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END""",
    ]
    for table in tables:
        for op, ref in (("INSERT", "NEW"), ("UPDATE", "OLD"), ("DELETE", "OLD")):
            statements.append(
                f"""CREATE TRIGGER {_sqlite_trigger(table, op.lower())} BEFORE {op} ON {table}
WHEN (SELECT status FROM invoices WHERE invoice_id = {ref}.invoice_id) <> 'draft'
BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"""
            )
    return statements


def create(conn: Connection, documents: bool = False) -> None:
    """The triggers; ``documents``: with revision 0018's columns and ``invoice_plans`` (every later
    migration that makes them again passes it)."""
    frozen = _FROZEN + DOCUMENT_COLUMNS if documents else _FROZEN
    tables = DOCUMENT_LINE_TABLES if documents else LINE_TABLES
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(_pg(frozen, tables).replace("%", "%%"))  # psycopg reads % as a placeholder
    elif conn.dialect.name == "sqlite":
        for statement in _sqlite(frozen, tables):
            conn.exec_driver_sql(statement)


def drop(conn: Connection) -> None:
    """Drop every trigger either version made (the tables of revision 0018 may not exist yet)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("DROP TRIGGER IF EXISTS invoices_immutable ON invoices")
        for table in DOCUMENT_LINE_TABLES:
            exists = conn.exec_driver_sql(f"SELECT to_regclass('{table}')").scalar()
            for op in ("insert", "update", "update_new", "delete"):
                if exists:
                    conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {_pg_trigger(table, op)} ON {table}")
        conn.exec_driver_sql("DROP FUNCTION IF EXISTS invoices_immutable()")
        conn.exec_driver_sql("DROP FUNCTION IF EXISTS invoice_lines_immutable()")
    elif conn.dialect.name == "sqlite":
        names = ["invoices_no_delete", "invoices_no_update"]
        for table in DOCUMENT_LINE_TABLES:
            names += [_sqlite_trigger(table, o) for o in ("insert", "update", "delete")]
        for name in names:
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
