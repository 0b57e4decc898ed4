"""Revision 0005: the finance views, and on PostgreSQL the read-only role ``finance_reader``.

Finance reads these views, never raw tables: no events, no user ids. On PostgreSQL the role can
SELECT the views and nothing else (a view runs with its owner's rights, so no table grant is
needed); on SQLite there are no roles. The role is cluster-wide, so it is created when missing and
left in place on downgrade (other databases of the cluster may grant to it); only its grants go.
"""

from __future__ import annotations

from sqlalchemy import Connection

from schemas import lines as line_types
from schemas.tokens import allowance_sql

ROLE = "finance_reader"
VIEWS = (
    "finance_invoice_summary",
    "finance_invoice_lines",
    "finance_revenue_by_model_tier",
    "finance_pool_utilization",
    "finance_reconciliation",
)


# The line types (schemas.lines) as the views name them: every view is generated from the registry.
CHARGE = "coalesce(l.adjusted_type, l.line_type)"  # what a line charges for (an adjustment: its type)
USAGE = line_types.sql_in(line_types.usage_ids())  # lines whose quantity is metered tokens
FEE, INCLUDED, OVERAGE = line_types.PLAN_FEE.id, line_types.INCLUDED.id, line_types.OVERAGE.id
ALLOWANCE = allowance_sql()  # usage_daily's tokens that the allowances count (schemas.tokens)

# Tokens on non-void documents per local month.
INVOICED = f"""
  SELECT i.period AS month, sum(l.quantity) AS tokens
  FROM invoice_lines l JOIN invoices i ON i.invoice_id = l.invoice_id
  WHERE i.status <> 'void' AND {{charge}} IN {USAGE}
  GROUP BY i.period
"""
# Billable tokens per local day first: the rows are stored in local-day order, so this sum needs no
# sort, and the month of a few hundred days is cheap (3x faster on SQLite than per row).
BILLABLE_BY_DAY = (
    "SELECT local_day, sum(included_tokens) AS included, sum(overage_tokens) AS overage "
    "FROM billable_usage GROUP BY local_day"
)


def _month(column: str, dialect: str) -> str:
    return f"to_char({column}, 'YYYY-MM')" if dialect == "postgresql" else f"substr({column}, 1, 7)"


def _money(expression: str, dialect: str) -> str:
    """PostgreSQL sums NUMERIC exactly; SQLite stores NUMERIC as REAL, so its sums are rounded to cents."""
    return expression if dialect == "postgresql" else f"round({expression}, 2)"


def _cents(expression: str, dialect: str) -> str:
    """Money shown with exactly two decimals (PostgreSQL); SQLite rounds its floating point to cents."""
    return f"CAST({expression} AS NUMERIC(20, 2))" if dialect == "postgresql" else f"round({expression}, 2)"


def _days_in_month(period: str, dialect: str) -> str:
    """Days in the month ``period`` ('YYYY-MM'): the unit size of a plan-fee line."""
    if dialect == "postgresql":
        return (
            f"CAST(extract(day FROM (to_date({period}, 'YYYY-MM') + interval '1 month' - interval '1 day'))"
            " AS INTEGER)"
        )
    return f"CAST(strftime('%d', {period} || '-01', '+1 month', '-1 day') AS INTEGER)"


def _line_sums(dialect: str) -> str:
    """Per document: an amount column per line type with one, a tokens column per token-unit type."""
    amounts = [
        _money(f"sum(CASE WHEN {CHARGE} = {_q(t.id)} THEN l.amount ELSE 0 END)", dialect) + f" AS {t.column}"
        for t in line_types.LINES
        if t.column
    ]
    return ",\n         ".join([*amounts, _token_sums()])


def _line_columns(cents: str) -> str:
    """The summary's columns of ``_line_sums`` (zero where a document has no such line)."""
    amounts = [
        cents.format(f"coalesce(l.{t.column}, 0)") + f" AS {t.column}" for t in line_types.LINES if t.column
    ]
    counts = [
        f"coalesce(l.{t.tokens_column}, 0) AS {t.tokens_column}" for t in line_types.LINES if t.tokens_column
    ]
    return ",\n       ".join([*amounts, *counts])


def _unit_case(dialect: str) -> tuple[str, str]:
    """(unit, unit_size) of a line from its charge type (schemas.lines)."""
    sizes = {line_types.FEE_UNIT: _days_in_month("i.period", dialect), line_types.TOKEN_UNIT: "1000000"}
    charged = [t for t in line_types.LINES if not t.corrects]
    unit = " ".join(f"WHEN {_q(t.id)} THEN {_q(t.unit)}" for t in charged)
    size = " ".join(f"WHEN {_q(t.id)} THEN {sizes.get(t.unit, '1')}" for t in charged)
    return f"CASE {CHARGE} {unit} END", f"CASE {CHARGE} {size} END"


def _q(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _document_views(dialect: str, credits: bool = False) -> dict[str, str]:
    """Revision 0018 on: documents as customers receive them (issue and due dates, what an adjustment
    corrects, units that make quantity x unit price / unit size = amount) and one row per plan
    period instead of a joined string; money with two decimals. ``credits`` (revision 0021 on): the
    lines carry the grant a credit line applied."""
    charge = CHARGE
    grant = ", l.grant_id" if credits else ""
    minimum = f", {_cents('p.minimum_monthly', dialect)} AS minimum_monthly" if credits else ""
    unit, unit_size = _unit_case(dialect)
    return {
        "finance_invoice_summary": f"""
SELECT i.invoice_id, i.invoice_number, i.account_id, i.period, i.kind AS document, i.sequence,
       i.status, i.corrects, i.currency, {_cents("i.subtotal", dialect)} AS subtotal,
       {_cents("i.total", dialect)} AS total,
       {_line_columns(_cents("{}", dialect))},
       coalesce(p.plan_periods, 0) AS plan_periods,
       i.created_at, i.finalized_at AS issued_at, i.due_date, i.finalized_at, i.voided_at, i.void_reason,
       i.open_month
FROM invoices i
LEFT JOIN (
  SELECT l.invoice_id,
         {_line_sums(dialect)}
  FROM invoice_lines l GROUP BY l.invoice_id
) l ON l.invoice_id = i.invoice_id
LEFT JOIN (
  SELECT invoice_id, count(*) AS plan_periods FROM invoice_plans GROUP BY invoice_id
) p ON p.invoice_id = i.invoice_id""",
        "finance_invoice_lines": f"""
SELECT i.invoice_id, i.invoice_number, i.account_id, i.period, i.kind AS document, i.status,
       i.corrects, i.finalized_at AS issued_at, i.due_date,
       l.line_no, l.line_type, l.adjusted_type, {charge} AS charge_type, l.model, l.speed_tier,
       l.token_kind, l.description, l.quantity,
       {unit} AS unit,
       {unit_size} AS unit_size,
       l.unit_price, {_cents("l.amount", dialect)} AS amount, i.currency{grant}
FROM invoice_lines l JOIN invoices i ON i.invoice_id = l.invoice_id""",
        PLANS_VIEW: f"""
SELECT i.invoice_id, i.invoice_number, i.account_id, i.period, i.kind AS document, i.status,
       coalesce(p.plan, 'pay_as_you_go') AS plan, p.active_from, p.active_until, p.days,
       {_days_in_month("i.period", dialect)} AS days_in_month,
       {_cents("coalesce(p.monthly_fee, 0)", dialect)} AS monthly_fee, i.currency{minimum}
FROM invoice_plans p JOIN invoices i ON i.invoice_id = p.invoice_id""",
    }


def _token_sums() -> str:
    """Per group: a tokens column per token-unit line type."""
    return ",\n       ".join(
        f"sum(CASE WHEN {CHARGE} = {_q(t.id)} THEN l.quantity ELSE 0 END) AS {t.tokens_column}"
        for t in line_types.LINES
        if t.tokens_column
    )


def _views(dialect: str, open_month: bool = False) -> dict[str, str]:
    """The views' SQL; ``open_month``: the invoices table has that column (revision 0011 on)."""
    marked = "i.open_month" if open_month else "false"
    charge = CHARGE
    return {
        "finance_invoice_summary": f"""
SELECT i.invoice_id, i.invoice_number, i.account_id, i.period, i.kind AS document, i.sequence,
       i.status, i.corrects, i.plan, i.currency, i.subtotal, i.total,
       {_line_columns("{}")},
       i.created_at, i.finalized_at, i.voided_at, i.void_reason, {marked} AS open_month
FROM invoices i
LEFT JOIN (
  SELECT l.invoice_id,
         {_line_sums(dialect)}
  FROM invoice_lines l GROUP BY l.invoice_id
) l ON l.invoice_id = i.invoice_id""",
        "finance_invoice_lines": f"""
SELECT i.invoice_id, i.invoice_number, i.account_id, i.period, i.kind AS document, i.status,
       l.line_no, l.line_type, l.adjusted_type, {charge} AS charge_type, l.model, l.speed_tier,
       l.token_kind, l.description, l.quantity, l.unit_price, l.amount, i.currency
FROM invoice_lines l JOIN invoices i ON i.invoice_id = l.invoice_id""",
        "finance_revenue_by_model_tier": f"""
SELECT i.period AS month, l.model, l.speed_tier, l.token_kind, i.currency,
       sum(CASE WHEN {charge} IN {USAGE} THEN l.quantity ELSE 0 END) AS tokens,
       {_token_sums()},
       {_money("sum(l.amount)", dialect)} AS revenue
FROM invoice_lines l JOIN invoices i ON i.invoice_id = l.invoice_id
WHERE i.status = 'finalized' AND l.model IS NOT NULL
GROUP BY i.period, l.model, l.speed_tier, l.token_kind, i.currency""",
        "finance_pool_utilization": f"""
SELECT account_id, plan, pool, period_start, period_end, {_month("period_start", dialect)} AS month,
       allowance, used, remaining,
       CAST(used AS NUMERIC(20, 6)) / allowance AS utilization,
       CASE WHEN exhausted_at IS NULL THEN 0 ELSE 1 END AS exhausted, exhausted_at
FROM pool_usage""",
        "finance_reconciliation": f"""
WITH usage AS (
  SELECT {_month("day", dialect)} AS month, sum(tokens) AS tokens
  FROM (SELECT day, sum({ALLOWANCE}) AS tokens FROM usage_daily GROUP BY day) d
  GROUP BY 1
), metered_utc AS (
  SELECT {_month("utc_day", dialect)} AS month, sum(included_tokens + overage_tokens) AS tokens
  FROM metered_days GROUP BY 1
), billable AS (
  SELECT {_month("local_day", dialect)} AS month, sum(included + overage) AS tokens,
         sum(included) AS included, sum(overage) AS overage
  FROM ({BILLABLE_BY_DAY}) d GROUP BY 1
), invoiced AS ({INVOICED.format(charge=charge)}), months AS (
  SELECT month FROM usage UNION SELECT month FROM metered_utc
  UNION SELECT month FROM billable UNION SELECT month FROM invoiced
)
SELECT m.month,
       coalesce(u.tokens, 0) AS usage_daily_tokens,
       coalesce(mu.tokens, 0) AS metered_tokens,
       coalesce(b.included, 0) AS included_tokens,
       coalesce(b.overage, 0) AS overage_tokens,
       coalesce(b.tokens, 0) AS billable_tokens,
       coalesce(iv.tokens, 0) AS invoiced_tokens,
       coalesce(u.tokens, 0) - coalesce(mu.tokens, 0) AS unmetered_tokens,
       coalesce(b.tokens, 0) - coalesce(iv.tokens, 0) AS uninvoiced_tokens
FROM months m
LEFT JOIN usage u ON u.month = m.month
LEFT JOIN metered_utc mu ON mu.month = m.month
LEFT JOIN billable b ON b.month = m.month
LEFT JOIN invoiced iv ON iv.month = m.month""",
    }


def _shift(column: str, days: int, dialect: str) -> str:
    if dialect == "postgresql":
        return f"({column} + {days})"
    return f"date({column}, '{days:+d} day')"


def _gaps(dialect: str) -> str:
    """``finance_reconciliation_gaps``: every token the reconciliation cannot match yet, by the
    account-local month it belongs to and the step that would close it (revision 0016 on).

    A UTC day's events fall on the local days from the day before to the day after it. Tokens of a UTC
    day that metering did not account for belong to the earliest of those local days that was never
    metered (step ``meter``); when all three were metered, the day changed after its metering (step
    ``meter again``). Metered tokens of a UTC day with no usage_daily rows wait for ``aggregate``.
    Billable tokens of a local month that no non-void document holds wait for ``invoice``."""
    month = _month("coalesce(g.unmetered_day, g.day)", dialect)
    charge = CHARGE
    return f"""
WITH used AS (
  SELECT day, sum({ALLOWANCE}) AS tokens FROM usage_daily GROUP BY day
), metered AS (
  SELECT utc_day AS day, sum(included_tokens + overage_tokens) AS tokens FROM metered_days GROUP BY utc_day
), days AS (
  SELECT day FROM used UNION SELECT day FROM metered
), utc_gaps AS (
  SELECT d.day,
         coalesce(u.tokens, 0) - coalesce(m.tokens, 0) AS tokens,
         u.tokens IS NULL AS unaggregated,
         CASE WHEN p.local_day IS NULL THEN {_shift("d.day", -1, dialect)}
              WHEN s.local_day IS NULL THEN d.day
              WHEN n.local_day IS NULL THEN {_shift("d.day", 1, dialect)} END AS unmetered_day
  FROM days d
  LEFT JOIN used u ON u.day = d.day
  LEFT JOIN metered m ON m.day = d.day
  LEFT JOIN metered_dates p ON p.local_day = {_shift("d.day", -1, dialect)}
  LEFT JOIN metered_dates s ON s.local_day = d.day
  LEFT JOIN metered_dates n ON n.local_day = {_shift("d.day", 1, dialect)}
), steps AS (
  SELECT {month} AS month,
         CASE WHEN g.unaggregated THEN 'aggregate' WHEN g.unmetered_day IS NULL THEN 'meter again'
              ELSE 'meter' END AS step,
         g.tokens, g.day
  FROM utc_gaps g WHERE g.tokens <> 0
), billable AS (
  SELECT {_month("local_day", dialect)} AS month, sum(included + overage) AS tokens
  FROM ({BILLABLE_BY_DAY}) d GROUP BY 1
), invoiced AS ({INVOICED.format(charge=charge)})
SELECT month, step, sum(CASE step WHEN 'aggregate' THEN -tokens ELSE tokens END) AS tokens,
       min(day) AS first_utc_day, max(day) AS last_utc_day,
       CASE step WHEN 'aggregate'
                 THEN 'usage-billing usage aggregate --from ' || min(day) || ' --to ' || max(day)
                 ELSE 'usage-billing quota meter --month ' || month END AS close_with
FROM steps GROUP BY month, step
UNION ALL
SELECT b.month, 'invoice' AS step, b.tokens - coalesce(iv.tokens, 0) AS tokens,
       NULL AS first_utc_day, NULL AS last_utc_day,
       'usage-billing invoices draft --month ' || b.month || ', then finalize' AS close_with
FROM billable b LEFT JOIN invoiced iv ON iv.month = b.month
WHERE b.tokens <> coalesce(iv.tokens, 0)"""


def _unknown(dialect: str) -> str:
    """``finance_unknown_accounts`` (revision 0019 on): each document of an account the accounts table
    has never held (or held only after its month was accepted), its usage tokens and total, and the
    recorded acceptance that let it be numbered (none: ``finalize`` refuses its month)."""
    charge = CHARGE
    return f"""
SELECT i.period AS month, i.account_id, i.invoice_id, i.invoice_number, i.kind AS document, i.status,
       coalesce(t.tokens, 0) AS tokens, {_cents("i.total", dialect)} AS total, i.currency,
       CASE WHEN a.account_id IS NULL THEN 'not accepted' ELSE 'accepted' END AS acceptance,
       a.accepted_at, a.accepted_by, a.reason
FROM invoices i
LEFT JOIN (
  SELECT l.invoice_id, sum(l.quantity) AS tokens FROM invoice_lines l
  WHERE {charge} IN {USAGE} GROUP BY l.invoice_id
) t ON t.invoice_id = i.invoice_id
LEFT JOIN unknown_account_acceptances a ON a.period = i.period AND a.account_id = i.account_id
WHERE a.account_id IS NOT NULL OR i.account_id NOT IN (SELECT account_id FROM accounts)"""


def _money_views(dialect: str) -> dict[str, str]:
    """Revision 0019 on: revenue with plan fees, the backup tank and the pool reconciliation."""
    charge = CHARGE
    month = _month("d.local_day", dialect)
    return {
        "finance_revenue": f"""
SELECT i.period AS month, {charge} AS charge_type, l.model, l.speed_tier, i.currency,
       count(DISTINCT i.account_id) AS accounts, sum(l.quantity) AS quantity,
       {_money("sum(l.amount)", dialect)} AS amount
FROM invoice_lines l JOIN invoices i ON i.invoice_id = l.invoice_id
WHERE i.status = 'finalized'
GROUP BY i.period, {charge}, l.model, l.speed_tier, i.currency""",
        "finance_pool_draws": f"""
SELECT {month} AS month, d.plan, d.pool, d.model, count(DISTINCT d.account_id) AS accounts,
       sum(d.tokens) AS tokens
FROM pool_draws d
GROUP BY {month}, d.plan, d.pool, d.model""",
        "finance_pool_reconciliation": f"""
WITH drawn AS (
  SELECT {month} AS month, sum(d.tokens) AS tokens FROM pool_draws d GROUP BY {month}
), by_period AS (
  SELECT {_month("period_start", dialect)} AS month, sum(used) AS tokens FROM pool_usage GROUP BY 1
), included AS (
  SELECT {_month("local_day", dialect)} AS month, sum(included_tokens) AS tokens
  FROM billable_usage GROUP BY 1
), invoiced AS (
  SELECT i.period AS month, sum(l.quantity) AS tokens
  FROM invoice_lines l JOIN invoices i ON i.invoice_id = l.invoice_id
  WHERE i.status <> 'void' AND {charge} = '{INCLUDED}'
  GROUP BY i.period
), months AS (
  SELECT month FROM drawn UNION SELECT month FROM by_period UNION SELECT month FROM included
  UNION SELECT month FROM invoiced
)
SELECT m.month,
       coalesce(p.tokens, 0) AS pool_usage_by_period_start,
       coalesce(d.tokens, 0) AS drawn_on_local_days,
       coalesce(n.tokens, 0) AS included_metered,
       coalesce(v.tokens, 0) AS included_invoiced,
       coalesce(p.tokens, 0) - coalesce(d.tokens, 0) AS periods_crossing_months,
       coalesce(n.tokens, 0) - coalesce(d.tokens, 0) AS metered_before_pool_draws,
       coalesce(n.tokens, 0) - coalesce(v.tokens, 0) AS not_yet_invoiced
FROM months m
LEFT JOIN by_period p ON p.month = m.month
LEFT JOIN drawn d ON d.month = m.month
LEFT JOIN included n ON n.month = m.month
LEFT JOIN invoiced v ON v.month = m.month""",
    }


def _credit_grants(dialect: str) -> str:
    """``finance_credit_grants`` (revision 0021 on): one row per grant with what finalized documents
    took of it (net of corrections), what drafts would take, what remains and whether it is void."""
    credit = line_types.CREDIT.id
    return f"""
WITH taken AS (
  SELECT l.grant_id,
         -sum(CASE WHEN i.status = 'finalized' THEN l.amount ELSE 0 END) AS applied,
         -sum(CASE WHEN i.status = 'draft' THEN l.amount ELSE 0 END) AS in_drafts
  FROM invoice_lines l JOIN invoices i ON i.invoice_id = l.invoice_id
  WHERE {CHARGE} = '{credit}' AND l.grant_id IS NOT NULL
  GROUP BY l.grant_id
)
SELECT g.grant_id, g.account_id, g.kind, {_cents("g.amount", dialect)} AS amount, g.currency,
       g.effective_from, g.expires, g.priority, g.models, g.reason,
       {_cents("coalesce(t.applied, 0)", dialect)} AS applied,
       {_cents("g.amount - coalesce(t.applied, 0)", dialect)} AS remaining,
       {_cents("coalesce(t.in_drafts, 0)", dialect)} AS in_drafts,
       CASE WHEN v.grant_id IS NULL THEN 0 ELSE 1 END AS void, v.void_date, v.reason AS void_reason,
       g.loaded_at
FROM credit_grants g
LEFT JOIN taken t ON t.grant_id = g.grant_id
LEFT JOIN credit_voids v ON v.grant_id = g.grant_id"""


GAPS_VIEW = "finance_reconciliation_gaps"
CREDITS_VIEW = "finance_credit_grants"
PLANS_VIEW = "finance_invoice_plans"
UNKNOWN_VIEW = "finance_unknown_accounts"
MONEY_VIEWS = ("finance_revenue", "finance_pool_draws", "finance_pool_reconciliation")
# made by later revisions: dropped only where they exist
LATER_VIEWS = (GAPS_VIEW, PLANS_VIEW, UNKNOWN_VIEW, *MONEY_VIEWS, CREDITS_VIEW)


def create(
    conn: Connection,
    gaps: bool = False,
    documents: bool = False,
    unknown: bool = False,
    credits: bool = False,
) -> None:
    """Create the views; ``gaps``: with ``finance_reconciliation_gaps`` (revision 0016 on);
    ``documents``: the document views of revision 0018; ``unknown``: ``finance_unknown_accounts``,
    ``finance_revenue``, ``finance_pool_draws`` and ``finance_pool_reconciliation`` (revision 0019;
    every later migration passes all three); ``credits``: ``finance_credit_grants`` and the lines'
    ``grant_id`` (revision 0021 on)."""
    from sqlalchemy import inspect

    dialect = conn.dialect.name
    columns = {c["name"] for c in inspect(conn).get_columns("invoices")}
    views = _views(dialect, "open_month" in columns)
    if gaps:
        views[GAPS_VIEW] = _gaps(dialect)
    if documents:
        views.update(_document_views(dialect, credits))
    if credits:
        views[CREDITS_VIEW] = _credit_grants(dialect)
    if unknown:
        views[UNKNOWN_VIEW] = _unknown(dialect)
        views.update(_money_views(dialect))
    for name, body in views.items():
        conn.exec_driver_sql(f"CREATE VIEW {name} AS {body}")
    if dialect != "postgresql":
        return
    # The role is cluster-wide: two databases of one cluster migrated at once may both find it missing;
    # the one that loses the race takes the other's role.
    conn.exec_driver_sql(
        f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}') "
        f"THEN CREATE ROLE {ROLE} LOGIN; END IF; "
        "EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
    )
    conn.exec_driver_sql(f"GRANT USAGE ON SCHEMA public TO {ROLE}")
    conn.exec_driver_sql(f"GRANT SELECT ON {', '.join(views)} TO {ROLE}")


def drop(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"REVOKE ALL ON {', '.join(VIEWS)} FROM {ROLE}")
        for view in LATER_VIEWS:
            conn.exec_driver_sql(
                f"DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_views WHERE viewname = '{view}') "
                f"THEN REVOKE ALL ON {view} FROM {ROLE}; END IF; END $$"
            )
        conn.exec_driver_sql(f"REVOKE USAGE ON SCHEMA public FROM {ROLE}")
    for name in (*reversed(LATER_VIEWS), *reversed(VIEWS)):
        conn.exec_driver_sql(f"DROP VIEW IF EXISTS {name}")
