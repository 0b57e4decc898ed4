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

_PG = f"""
CREATE OR REPLACE FUNCTION invoices_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.status = 'draft' THEN
    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
    RETURN NEW;
  END IF;
  IF TG_OP = 'UPDATE' AND OLD.status = 'finalized' AND NEW.status = 'void'
     AND ROW({", ".join("NEW." + c for c in _FROZEN)})
         IS NOT DISTINCT FROM ROW({", ".join("OLD." + c for c in _FROZEN)}) THEN
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
END $$;
-- One check per statement over its transition table (a COPY of a million lines runs it once).
CREATE TRIGGER invoice_lines_immutable_insert AFTER INSERT ON invoice_lines
  REFERENCING NEW TABLE AS changed_lines FOR EACH STATEMENT EXECUTE FUNCTION invoice_lines_immutable();
CREATE TRIGGER invoice_lines_immutable_update AFTER UPDATE ON invoice_lines
  REFERENCING OLD TABLE AS changed_lines FOR EACH STATEMENT EXECUTE FUNCTION invoice_lines_immutable();
CREATE TRIGGER invoice_lines_immutable_update_new AFTER UPDATE ON invoice_lines
  REFERENCING NEW TABLE AS changed_lines FOR EACH STATEMENT EXECUTE FUNCTION invoice_lines_immutable();
CREATE TRIGGER invoice_lines_immutable_delete AFTER DELETE ON invoice_lines
  REFERENCING OLD TABLE AS changed_lines FOR EACH STATEMENT EXECUTE FUNCTION invoice_lines_immutable();
"""

_SQLITE_SAME = " AND ".join(f"NEW.{c} IS OLD.{c}" for c in _FROZEN)
_SQLITE = [
    f"""CREATE TRIGGER invoices_no_delete BEFORE DELETE ON invoices WHEN OLD.status <> 'draft'
BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END""",
    f"""CREATE TRIGGER invoices_no_update BEFORE UPDATE ON invoices
WHEN OLD.status <> 'draft' AND NOT (OLD.status = 'finalized' AND NEW.status = 'void' AND {_SQLITE_SAME})
BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END""",
]
for op, ref in (("INSERT", "NEW"), ("UPDATE", "OLD"), ("DELETE", "OLD")):
    _SQLITE.append(
        f"""CREATE TRIGGER invoice_lines_no_{op.lower()} BEFORE {op} ON invoice_lines
WHEN (SELECT status FROM invoices WHERE invoice_id = {ref}.invoice_id) <> 'draft'
BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"""
    )


def create(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(_PG.replace("%", "%%"))  # psycopg reads % as a placeholder
    elif conn.dialect.name == "sqlite":
        for statement in _SQLITE:
            conn.exec_driver_sql(statement)


def drop(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("DROP TRIGGER IF EXISTS invoices_immutable ON invoices")
        for op in ("insert", "update", "update_new", "delete"):
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS invoice_lines_immutable_{op} ON invoice_lines")
        conn.exec_driver_sql("DROP FUNCTION IF EXISTS invoices_immutable()")
        conn.exec_driver_sql("DROP FUNCTION IF EXISTS invoice_lines_immutable()")
    elif conn.dialect.name == "sqlite":
        for name in (
            "invoices_no_delete",
            "invoices_no_update",
            *(f"invoice_lines_no_{o}" for o in ("insert", "update", "delete")),
        ):
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
