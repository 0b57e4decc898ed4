"""The lake's datasets besides events and quarantine (``schemas.events``): the meter's allocation records
and stored pool balances, the invoice exports, and how the lake's Parquet files are encoded.

Contracts only: the pipelines that write these datasets and the readers (DuckDB, pyarrow, finance's
tools) rely on the names and types here.
"""

from __future__ import annotations

import pyarrow as pa

from schemas.events import TIMESTAMP

PRICE = pa.decimal128(20, 6)  # per 1M tokens (the monthly fee for a plan-fee line), as in the warehouse
AMOUNT = pa.decimal128(20, 2)  # money: exact cents

# Columns with few distinct values, written with dictionary pages (dictionary-encoding the others, ids
# of every row, only costs time); the events' read side keeps ``schemas.events.LOW_CARDINALITY``.
DICTIONARY_COLUMNS = (
    "account_id",
    "model",
    "speed_tier",
    "status",
    "error_code",
    "_source_file",
    "_landing_date",
    "landing_date",
    "source_file",
    "reason",
)

# lake/allocations/date=D/: per event and pool, the tokens the pool covered (``quota explain`` reads it).
ALLOCATION_SCHEMA = pa.schema(
    [
        ("event_id", pa.string()),
        ("event_time", TIMESTAMP),
        ("account_id", pa.string()),
        ("local_day", pa.date32()),
        ("plan", pa.string()),
        ("pool", pa.string()),
        ("period_start", pa.date32()),
        ("tokens", pa.int64()),
    ]
)

# A pool threshold crossed (``billing.crossings``) by an event of the metered dates, staged by the meter
# and recorded in the warehouse's ``notifications`` outbox in the metering's own transaction.
CROSSING_SCHEMA = pa.schema(
    [
        ("account_id", pa.string()),
        ("plan", pa.string()),
        ("pool", pa.string()),
        ("period_start", pa.date32()),
        ("threshold", pa.string()),
        ("used", pa.int64()),
        ("allowance", pa.int64()),
        ("event_id", pa.string()),
        ("event_time", TIMESTAMP),
        ("local_day", pa.date32()),
    ]
)

# lake/pool_state/date=D/: a balance key's state at the end of a local day, what a later run starts from.
BALANCE_SCHEMA = pa.schema(
    [
        ("account_id", pa.string()),
        ("plan", pa.string()),
        ("pool", pa.string()),
        ("period_start", pa.date32()),
        ("period_end", pa.date32()),
        ("local_day", pa.date32()),
        ("used", pa.int64()),  # tokens the pool covered through the end of local_day
        ("exhausted_at", TIMESTAMP),  # null: not exhausted by then
    ]
)

# exports/<month>/invoices.parquet and invoice_lines.parquet (``invoices export``), and the same columns
# in the CSV files. A document is an ``invoice`` or an ``adjustment``; ``corrects`` names the document an
# adjustment corrects; ``issued_at`` is when it was finalized (numbered), ``due_date`` that date (UTC)
# plus the catalog's payment terms. ``unit``/``unit_size``: quantity x unit_price / unit_size = amount.
DOCUMENT_COLUMNS = [
    ("document_type", pa.string()),
    ("corrects", pa.string()),
    ("issued_at", pa.timestamp("us", tz="UTC")),
    ("due_date", pa.date32()),
]
EXPORT_INVOICE_SCHEMA = pa.schema(
    [
        ("invoice_number", pa.string()),
        ("account_id", pa.string()),
        ("period", pa.string()),
        ("status", pa.string()),
        ("currency", pa.string()),
        ("subtotal", AMOUNT),
        ("total", AMOUNT),
        *DOCUMENT_COLUMNS,
    ]
)
EXPORT_LINE_SCHEMA = pa.schema(
    [
        ("invoice_number", pa.string()),
        ("account_id", pa.string()),
        ("period", pa.string()),
        ("line_type", pa.string()),
        ("model", pa.string()),
        ("speed_tier", pa.string()),
        ("token_kind", pa.string()),
        ("quantity", pa.int64()),
        ("unit_price", PRICE),
        ("amount", AMOUNT),
        ("currency", pa.string()),
        ("unit", pa.string()),  # "1M tokens" | "month" (a plan fee: quantity in days)
        ("unit_size", pa.int64()),  # 1,000,000 | the days in the month
        *DOCUMENT_COLUMNS,
        ("line_no", pa.int32()),
        ("adjusted_type", pa.string()),  # an adjustment line: the line type it bills again or reverses
        ("description", pa.string()),
        ("grant_id", pa.string()),  # a credit line (or its correction): the credit grant it applied
    ]
)
