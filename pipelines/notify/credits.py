"""Credit thresholds crossed and credits about to expire: recorded in the outbox by each draft, in the
draft's transaction (``pipelines.invoicing.documents.draft``).

A grant crosses a share of its amount in the month whose documents (finalized and drafts, not void,
months in order) first take that share of it in all; a draft decides every grant's crossings again,
so a redraft that gives a credit back retracts the crossing, and one that moves nothing writes
nothing. A grant with a balance left that expires within ``expiry_notice_days`` after the drafted
month's end is ``expiring`` (once per grant and expiry); if a later draft leaves it nothing, that
notice is retracted.

In integer cents and Arrow columns, per grant and month (a draft of 100k accounts sees 150k grants):
a share s of an amount A is reached when applied x 10^4 >= (s x 10^4) x A, exactly (shares have at
most four decimals).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import BigInteger, Connection, cast, func, select, text

from billing.invoices import month_bounds
from pipelines.invoicing.credits import CREDIT_LINES
from pipelines.notify.outbox import COMPUTED_SCHEMA, CREDIT_CROSSED, CREDIT_EXPIRING, record
from pipelines.warehouse.engine import read_arrow
from schemas.catalog import Catalog
from schemas.warehouse import CreditGrant, CreditVoid, Notification

TAKEN = pa.schema([("grant_id", pa.string()), ("period", pa.string()), ("cents", pa.int64())])
GRANTS = pa.schema(
    [
        ("grant_id", pa.string()),
        ("account_id", pa.string()),
        ("amount", pa.int64()),  # cents
        ("expires", pa.date32()),
        ("void_date", pa.date32()),
    ]
)


def record_credits(conn: Connection, catalog: Catalog, month: str, source: str) -> dict[str, int]:
    config = catalog.notifications
    written = {"crossed": 0, "retracted": 0}
    if not config.credit_thresholds and not config.expiry_notice_days:
        return written
    query = (
        f"SELECT c.grant_id, c.period, CAST(round(sum(c.taken) * 100) AS BIGINT) AS cents "
        f"FROM ({CREDIT_LINES}) c GROUP BY c.grant_id, c.period"
    )
    taken = read_arrow(conn, text(query), TAKEN)
    g, v = CreditGrant.__table__.c, CreditVoid.__table__.c
    grants = read_arrow(
        conn,
        select(
            g.grant_id, g.account_id, cast(func.round(g.amount * 100), BigInteger), g.expires, v.void_date
        ).select_from(CreditGrant.__table__.outerjoin(CreditVoid.__table__, v.grant_id == g.grant_id)),
        GRANTS,
    )
    n = Notification.__table__.c
    if config.credit_thresholds:
        computed = _crossed(taken, grants, config.credit_thresholds)
        got = record(conn, CREDIT_CROSSED, computed, n.grant_id.is_not(None), None, source)
        written = {k: written[k] + got[k] for k in written}
    if config.expiry_notice_days:
        last = month_bounds(month)[1]
        horizon = last + dt.timedelta(days=config.expiry_notice_days)
        expiring = _expiring(taken, grants, month, last, horizon)
        within = n.period_start.between(last + dt.timedelta(days=1), horizon)
        got = record(conn, CREDIT_EXPIRING, expiring, within, None, source)
        written = {k: written[k] + got[k] for k in written}
    return written


def _money(cents: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray | pa.Array:
    """Non-negative cents as decimal text ("12.05")."""
    whole = pc.cast(pc.divide(cents, 100), pa.string())
    part = pc.utf8_lpad(
        pc.cast(pc.subtract(cents, pc.multiply(pc.divide(cents, 100), 100)), pa.string()), 2, "0"
    )
    return pc.binary_join_element_wise(whole, ".", part, "")


def _crossed(taken: pa.Table, grants: pa.Table, shares: list[Decimal]) -> pa.Table:
    """Per grant and share: the first month (in order) whose documents bring the grant's applied total
    to the share of its amount, with that total."""
    rows = taken.join(grants.select(["grant_id", "account_id", "amount"]), "grant_id", join_type="inner")
    rows = rows.sort_by([("grant_id", "ascending"), ("period", "ascending")])
    cents, amount = rows["cents"].to_numpy(), rows["amount"].to_numpy()
    ids = rows["grant_id"].combine_chunks()
    starts = np.ones(len(cents), bool)
    if len(cents):
        starts[1:] = pc.not_equal(ids.slice(1), ids.slice(0, len(ids) - 1)).to_numpy(zero_copy_only=False)
    total = np.cumsum(cents)
    applied = total - np.repeat((total - cents)[starts], np.diff(np.r_[np.flatnonzero(starts), len(cents)]))
    before = applied - cents
    parts = []
    for share in shares:
        scaled = int(share * 10_000)
        hit = np.flatnonzero((applied * 10_000 >= scaled * amount) & (before * 10_000 < scaled * amount))
        picked = rows.take(pa.array(hit, pa.int64()))
        figures = pc.binary_join_element_wise(
            '{"amount":"',
            _money(picked["amount"]),
            '","applied":"',
            _money(pa.array(applied[hit], pa.int64())),
            '","month":"',
            picked["period"],
            '"}',
            "",
        )
        parts.append(_computed(picked, figures, threshold=str(share)))
    return pa.concat_tables(parts) if parts else COMPUTED_SCHEMA.empty_table()


def _expiring(taken: pa.Table, grants: pa.Table, month: str, last: dt.date, horizon: dt.date) -> pa.Table:
    """The notices: grants not void that expire after ``last`` and by ``horizon`` with a balance left."""
    expires = grants["expires"]
    soon = pc.and_(
        pc.and_(
            pc.greater(expires, pa.scalar(last, pa.date32())), pc.less_equal(expires, pa.scalar(horizon))
        ),
        pc.is_null(grants["void_date"]),
    )
    soon = grants.filter(pc.fill_null(soon, False))
    used = taken.group_by("grant_id").aggregate([("cents", "sum")])
    soon = soon.join(used, "grant_id", join_type="left outer")
    applied = pc.fill_null(soon["cents_sum"], 0)
    left = pc.subtract(soon["amount"], applied)
    keep = pc.greater(left, 0)
    soon, applied, left = soon.filter(keep), applied.filter(keep), left.filter(keep)
    figures = pc.binary_join_element_wise(
        '{"amount":"',
        _money(soon["amount"]),
        '","applied":"',
        _money(applied),
        '","expires":"',
        pc.cast(soon["expires"], pa.string()),
        f'","month":"{month}","remaining":"',
        _money(left),
        '"}',
        "",
    )
    return _computed(
        soon.append_column("period", pa.repeat(pa.scalar(month), soon.num_rows)),
        figures,
        period_start=soon["expires"],
    )


def _computed(rows: pa.Table, figures, threshold: str | None = None, period_start=None) -> pa.Table:
    """Crossings of grants (``rows``: grant_id, account_id, period) as the outbox computes them."""
    count = rows.num_rows
    days = pc.cast(pc.binary_join_element_wise(rows["period"], "-01", ""), pa.date32())
    return pa.table(
        {
            "account_id": rows["account_id"],
            "plan": pa.nulls(count, pa.string()),
            "pool": pa.nulls(count, pa.string()),
            "grant_id": rows["grant_id"],
            "period_start": period_start if period_start is not None else pa.nulls(count, pa.date32()),
            "threshold": pa.repeat(pa.scalar(threshold, pa.string()), count),
            "local_day": days,
            "event_id": pa.nulls(count, pa.string()),
            "occurred_at": pa.nulls(count, COMPUTED_SCHEMA.field("occurred_at").type),
            "data": figures,
        },
        schema=COMPUTED_SCHEMA,
    )
