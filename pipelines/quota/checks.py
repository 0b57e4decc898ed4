"""The meter's own checks: every shard's allocation and the staged totals are verified before anything is
loaded (conservation, no pool drawn beyond its allowance, balances that carry over); a failure is a
DataQualityError naming what disagrees, and nothing is loaded."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from billing.quota import Allocation
from billing.tokens import kind_matrix
from pipelines.errors import DataQualityError


def check_allocation(events: pa.Table, result: Allocation, state: pa.Table | None) -> None:
    """Raise DataQualityError unless the allocation adds up: each event's included + overage tokens
    are its tokens (none negative) and its included tokens are what its pools covered; each balance's
    used tokens are what the state it started from said plus what its events drew, within
    0 .. allowance. Vectorized: a few sums and one join per shard."""
    n = events.num_rows
    kinds = kind_matrix(events)
    if n and min(result.included.min(), result.overage.min()) < 0:
        raise _broken("an event got negative included or overage tokens")
    if not np.array_equal(result.included + result.overage, kinds):
        raise _broken("an event's included and overage tokens do not add up to its tokens")
    draws = result.draws
    # per event (float64 sums are exact here: an event has at most 3 x 2^31 tokens)
    drawn = np.bincount(draws["event_index"].to_numpy(), draws["tokens"].to_numpy(), minlength=n)
    if not np.array_equal(drawn, result.included.sum(axis=1)):
        raise _broken("an event's included tokens differ from what its pools covered")
    keys = ["account_id", "plan", "pool", "period_start"]
    per_key = (
        pa.table(
            {
                "account_id": events["account_id"].take(draws["event_index"]).cast(pa.string()),
                "plan": draws["plan"],
                "pool": draws["pool"],
                "period_start": draws["period_start"].cast(pa.date32()),
                "tokens": draws["tokens"],
            }
        )
        .group_by(keys, use_threads=False)
        .aggregate([("tokens", "sum")])
    )
    pools = result.pools.select([*keys, "used", "allowance"]).cast(
        pa.schema(
            [
                ("account_id", pa.string()),
                ("plan", pa.string()),
                ("pool", pa.string()),
                ("period_start", pa.date32()),
                ("used", pa.int64()),
                ("allowance", pa.int64()),
            ]
        )
    )
    used, allowance = pools["used"].to_numpy(), pools["allowance"].to_numpy()
    if ((used < 0) | (used > allowance)).any():
        raise _broken("a pool balance is below zero or above its allowance")
    joined = pools.join(per_key, keys, join_type="full outer")
    if state is not None and state.num_rows:
        given = state.select([*keys, "used"]).rename_columns([*keys, "given"])
        given = given.cast(pa.schema([*(pools.schema.field(k) for k in keys), ("given", pa.int64())]))
        joined = joined.join(given, keys, join_type="left outer")
    else:
        joined = joined.append_column("given", pa.nulls(joined.num_rows, pa.int64()))
    balance = pc.fill_null(joined["used"], -1).to_numpy()
    expected = pc.add(pc.fill_null(joined["given"], 0), pc.fill_null(joined["tokens_sum"], 0)).to_numpy()
    if not np.array_equal(balance, expected):
        raise _broken("a pool period's used tokens differ from the included tokens drawn from it")


# Kinds staged beside the shards' tables: the events read (counted per read unit, summed) and the events
# allocated (counted per shard). The grouping by account shard between them carries only references.
EVENTS_READ, EVENTS_ALLOCATED = "events_read", "events_allocated"


def check_events_conserved(read: pa.Table | None, allocated: pa.Table | None) -> None:
    """Every event the run read reached an allocation, once: what the read side counted against what
    the shards allocated, so that a runner losing or repeating an element between them stops the run."""
    n_read = 0 if read is None else int(pc.sum(read["events"]).as_py() or 0)  # None: nothing to read
    n_allocated = 0 if allocated is None else int(pc.sum(allocated["events"]).as_py() or 0)
    if allocated is not None and len(pc.unique(allocated["shard"])) != allocated.num_rows:
        # its accounts' events in two parts, each allocated from the start of the period
        raise _broken("a shard's events were allocated in more than one part")
    if n_read != n_allocated:
        raise _broken(f"{n_read:,} events were read but {n_allocated:,} allocated")


def check_totals(billable: pa.Table | None, days: pa.Table | None) -> None:
    """The staged billable rows and the local x UTC day bridge hold the same tokens."""

    def total(t: pa.Table | None, column: str) -> int:
        return 0 if t is None else int(pc.sum(t[column]).as_py() or 0)

    for column in ("included_tokens", "overage_tokens"):
        if total(billable, column) != total(days, column):
            raise _broken(f"billable_usage and metered_days disagree about {column}")


def _broken(what: str) -> DataQualityError:
    return DataQualityError(f"metering check failed: {what}; nothing was loaded (this is a bug: report it)")
