"""What a migration preview reads: the events of the affected accounts that metering a month reads
(two passes over the lake's files of the month's window), their plans and their timezones."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from billing.calendar import local_dates
from billing.invoices import PLAN_SCHEMA, month_bounds
from billing.plan import AccountIndex, attach_accounts
from pipelines import lake
from pipelines.quota.store import read_window
from pipelines.quota.transforms import COLUMNS, FEW_VALUES
from schemas.catalog import Catalog


def _files(lake_root: str, first: dt.date, last: dt.date, held: frozenset[dt.date]) -> list[str]:
    """The event files of UTC days ``first .. last`` but the partitions the data-quality gate holds."""
    days = [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]
    return [
        f for d in days if d not in held for f in lake.list_files(lake.partition(lake_root, lake.EVENTS, d))
    ]


def _is(values: pa.ChunkedArray | pa.Array, wanted: pa.Array) -> pa.Array:
    """``values`` (text or dictionary) is in ``wanted``: looked up once per distinct value."""
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if pa.types.is_dictionary(values.type):
        found = pc.is_in(values.dictionary, value_set=wanted)
        return pc.fill_null(found.take(values.indices), False)
    return pc.is_in(values, value_set=wanted)


def read_events(
    lake_root: str,
    catalog: Catalog,
    index: AccountIndex,
    month: str,
    model: str,
    held: frozenset[dt.date] = frozenset(),
) -> tuple[pa.Table | None, pa.Array]:
    """(events of the affected accounts that metering the month reads, with plan and local day;
    the affected accounts, sorted). Two passes over the window's files: the model's events find
    the affected accounts, then only their events are kept."""
    first, last = month_bounds(month)
    lo, hi = read_window([first, last], catalog)
    files = _files(lake_root, lo, hi, held)
    wanted = pa.array([model], pa.string())
    found: list[pa.Table] = []
    for path in files:
        part = lake.open_parquet(path, read_dictionary=["account_id", "model"]).read(
            columns=["account_id", "model", "event_time"]
        )
        part = part.filter(_is(part["model"], wanted))
        if part.num_rows:
            found.append(
                part.select(["account_id", "event_time"]).cast(
                    pa.schema(
                        [("account_id", pa.string()), ("event_time", part.schema.field("event_time").type)]
                    )
                )
            )
    if found:
        mine = attach_accounts(pa.concat_tables(found), index)
        day = mine["local_day"]
        in_month = pc.and_(
            pc.greater_equal(day, pa.scalar(first, pa.date32())),
            pc.less_equal(day, pa.scalar(last, pa.date32())),
        )
        affected = pc.unique(mine["account_id"].filter(in_month).combine_chunks())
        affected = affected.take(pc.sort_indices(affected))
    else:
        affected = pa.array([], pa.string())
    parts = []
    if len(affected):
        for path in files:
            part = lake.open_parquet(path, read_dictionary=FEW_VALUES).read(columns=COLUMNS)
            part = part.filter(_is(part["account_id"], affected))
            if part.num_rows:
                parts.append(part.cast(pa.schema([pa.field(f.name, _plain(f.type)) for f in part.schema])))
    if not parts:
        return None, affected
    events = attach_accounts(pa.concat_tables(parts).combine_chunks(), index)
    return events.filter(pc.less_equal(events["local_day"], pa.scalar(last, pa.date32()))), affected


def _plain(typ: pa.DataType) -> pa.DataType:
    return typ.value_type if pa.types.is_dictionary(typ) else typ


class AccountZones:
    def __init__(self, accounts: pa.Table) -> None:
        zones = accounts.group_by("account_id").aggregate([("timezone", "min")])
        self.ids, self.zones = zones["account_id"], zones["timezone_min"]

    def local_days(self, account: pa.Array | pa.ChunkedArray, at: pa.Array | pa.ChunkedArray) -> np.ndarray:
        if len(account) == 0:
            return np.array([], "datetime64[D]")
        code = pc.index_in(account, value_set=self.ids)
        zone = pc.fill_null(self.zones.take(code), "UTC")
        return local_dates(at, zone)


def plan_rows(accounts: pa.Table, affected: pa.Array, first: dt.date, last: dt.date) -> pa.Table:
    """The accounts' plan rows in force in the month (what drafting reads for plan fees)."""
    a = accounts.filter(pc.is_in(accounts["account_id"], value_set=affected))
    starts = pc.less_equal(a["active_from"], pa.scalar(last, pa.date32()))
    ends = pc.or_kleene(
        pc.is_null(a["active_until"]), pc.greater_equal(a["active_until"], pa.scalar(first, pa.date32()))
    )
    return a.filter(pc.and_(starts, ends)).select(PLAN_SCHEMA.names).cast(PLAN_SCHEMA)
