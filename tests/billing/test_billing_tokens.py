from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from billing.tokens import metered_tokens, token_kinds


def test_kinds_are_disjoint_and_add_up_to_metered_tokens():
    events = pa.table(
        {"input_tokens": [100, 7, 0], "cached_input_tokens": [40, 7, 0], "output_tokens": [5, 0, 3]}
    )
    kinds = token_kinds(events)
    assert kinds.column_names == ["input", "cached_input", "output"]
    assert kinds.to_pylist() == [
        {"input": 60, "cached_input": 40, "output": 5},
        {"input": 0, "cached_input": 7, "output": 0},
        {"input": 0, "cached_input": 0, "output": 3},
    ]
    total = pc.add(pc.add(kinds["input"], kinds["cached_input"]), kinds["output"])
    assert total.equals(metered_tokens(events))
