"""Bulk loads put rows in primary key order with integer ranks instead of a string sort: the order
must be exactly the one Arrow's (and the databases' byte-order) sort gives."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.warehouse import key_order

KEYS = ["day", "name", "n", "at"]
DAY0 = dt.date(2026, 1, 1)
AT0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _table(rows: list[tuple]) -> pa.Table:
    day, name, n, at, value = zip(*rows, strict=True) if rows else ((),) * 5
    return pa.table(
        {
            "day": pa.array([DAY0 + dt.timedelta(days=d) for d in day], pa.date32()),
            "name": pa.array(name, pa.string()),
            "n": pa.array(n, pa.int64()),
            "at": pa.array([AT0 + dt.timedelta(microseconds=a) for a in at], pa.timestamp("us", tz="UTC")),
            "value": pa.array(value, pa.int64()),
        }
    )


names = st.text(alphabet=st.sampled_from(["a", "b", "B", "é", "Z", "1", " ", "😀"]), max_size=4)
rows = st.lists(
    st.tuples(
        st.integers(0, 40),
        names,
        st.integers(-(2**40), 2**40) | st.integers(-3, 3),
        st.integers(0, 10**9),
        st.integers(),
    ).map(lambda r: (*r[:4], r[4] % 1000)),
    min_size=2,
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(rows)
def test_key_order_is_arrows_stable_sort(table_rows):
    table = _table(table_rows)
    for keys in (KEYS, ["name"], ["n", "day"], ["name", "day"]):
        expected = pc.sort_indices(table, [(k, "ascending") for k in keys])
        assert key_order(table, keys).to_pylist() == expected.to_pylist(), keys


def test_wide_ranges_fall_back_to_lexsort_and_nulls_to_arrow():
    table = _table(
        [(0, "b", 2**62, 5, 1), (0, "a", -(2**62), 5, 2), (1, "a", 0, 0, 3), (0, "b", 2**62, 1, 4)]
    )
    assert key_order(table, ["n", "name", "at"]).to_pylist() == [1, 2, 3, 0]  # a span past 2**62: lexsort
    with_null = table.set_column(1, "name", pa.array(["b", None, "a", "b"]))
    expected = pc.sort_indices(with_null, [("name", "ascending"), ("n", "ascending")])
    assert key_order(with_null, ["name", "n"]).to_pylist() == expected.to_pylist()
