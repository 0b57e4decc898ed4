"""Bulk loads put rows in primary key order with integer ranks instead of a string sort: the order
must be exactly the one Arrow's (and the databases' byte-order) sort gives. On SQLite they insert
several rows per statement: the rows stored must be the ones SQLAlchemy's own insert stores."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import (
    BigInteger,
    Column,
    Date,
    DateTime,
    MetaData,
    Numeric,
    String,
    Table,
    create_engine,
    insert,
    select,
)

from pipelines.warehouse.engine import SQLITE_ROWS_PER_INSERT, insert_arrow
from pipelines.warehouse.keys import key_order

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
    # Text as dictionary arrays, each chunk with a dictionary of its own (files read back as such).
    half = len(table_rows) // 2
    chunks = [table.slice(0, half), table.slice(half)]
    encoded = pa.concat_tables(
        [c.set_column(1, "name", pc.dictionary_encode(c["name"]).combine_chunks()) for c in chunks]
    )
    assert pa.types.is_dictionary(encoded.schema.field("name").type)
    for keys in (KEYS, ["name"], ["n", "day"], ["name", "day"]):
        expected = pc.sort_indices(table, [(k, "ascending") for k in keys])
        assert key_order(table, keys).to_pylist() == expected.to_pylist(), keys
        assert key_order(encoded, keys).to_pylist() == expected.to_pylist(), keys
        # unified first, as a bulk load does: the chunks share one dictionary, looked up as it is
        assert key_order(encoded.unify_dictionaries(), keys).to_pylist() == expected.to_pylist(), keys


def test_wide_ranges_fall_back_to_lexsort_and_nulls_to_arrow():
    table = _table(
        [(0, "b", 2**62, 5, 1), (0, "a", -(2**62), 5, 2), (1, "a", 0, 0, 3), (0, "b", 2**62, 1, 4)]
    )
    assert key_order(table, ["n", "name", "at"]).to_pylist() == [1, 2, 3, 0]  # a span past 2**62: lexsort
    with_null = table.set_column(1, "name", pa.array(["b", None, "a", "b"]))
    expected = pc.sort_indices(with_null, [("name", "ascending"), ("n", "ascending")])
    assert key_order(with_null, ["name", "n"]).to_pylist() == expected.to_pylist()


def _sa_table(name: str, md: MetaData, extra: list[str]) -> Table:
    return Table(
        name,
        md,
        Column("id", BigInteger, primary_key=True),
        Column("kind", String, nullable=True),  # few values and nulls: the shared-string path
        Column("uid", String),  # all distinct: to_pylist
        Column("day", Date),  # all but distinct
        Column("due", Date, nullable=True),  # few values and nulls
        Column("at", DateTime),
        Column("amount", Numeric(12, 4)),
        *[Column(x, BigInteger) for x in extra],
    )


def test_sqlite_bulk_insert_stores_what_sqlalchemy_would_for_every_size_and_width():
    """The fast SQLite path (several rows per INSERT, shared strings) against SQLAlchemy's own insert
    of the same rows: the same values come back, for row counts around the statement size and for a
    table wide enough to put fewer rows in a statement."""
    rng = np.random.default_rng(5)
    engine = create_engine("sqlite://")
    for width in (7, 30):  # 30 columns: 33 rows per statement
        extra = [f"x{i}" for i in range(width - 7)]
        for n in (1, SQLITE_ROWS_PER_INSERT - 1, SQLITE_ROWS_PER_INSERT, SQLITE_ROWS_PER_INSERT + 1, 2345):
            md = MetaData()
            fast, slow = _sa_table("fast", md, extra), _sa_table("slow", md, extra)
            coded = _sa_table("coded", md, extra)  # the text as dictionary arrays, a dictionary per chunk
            md.create_all(engine)
            rows = pa.table(
                {
                    "id": pa.array(rng.permutation(n) * 7 - 3, pa.int64()),
                    "kind": pa.array(
                        [None if k == 3 else ["a", "é", "😀"][k] for k in rng.integers(0, 4, n)], pa.string()
                    ),
                    "uid": pa.array([f"u-{i}-{rng.integers(10**9)}" for i in range(n)], pa.string()),
                    "day": pa.array(rng.integers(0, 40_000, n).astype("datetime64[D]")),
                    "due": pa.array(
                        [None if d == 0 else DAY0 + dt.timedelta(days=int(d)) for d in rng.integers(0, 4, n)],
                        pa.date32(),
                    ),
                    "at": pa.array(rng.integers(0, 2**50, n).astype("datetime64[us]")).cast(
                        pa.timestamp("us", tz="UTC")
                    ),
                    "amount": pa.array(
                        [Decimal(int(v)) / 10_000 for v in rng.integers(-(10**9), 10**9, n)]
                    ).cast(pa.decimal128(12, 4)),
                    **{x: pa.array(rng.integers(-(2**62), 2**62, n), pa.int64()) for x in extra},
                }
            )
            as_dictionaries = pa.concat_tables(
                [
                    part.set_column(i, name, pc.dictionary_encode(part[name]).combine_chunks())
                    for part in (rows.slice(0, n // 2), rows.slice(n // 2))
                    for i, name in [(1, "kind")]
                ]
            ).set_column(2, "uid", pc.dictionary_encode(rows["uid"]))
            with engine.begin() as conn:
                assert insert_arrow(conn, fast, rows) == n
                assert insert_arrow(conn, coded, as_dictionaries) == n
                conn.execute(insert(slow), rows.to_pylist())
            with engine.connect() as conn:
                got = conn.execute(select(fast).order_by(fast.c.id)).all()
                want = conn.execute(select(slow).order_by(slow.c.id)).all()
                decoded = conn.execute(select(coded).order_by(coded.c.id)).all()
            assert len(got) == n and got == want == decoded, (width, n)
            md.drop_all(engine)
