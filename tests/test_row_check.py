"""A row from outside (the worker's channel, a row file) against the schema (selfattn/row_check.py)."""

from __future__ import annotations

import math

from selfattn.results import Row
from selfattn.row_check import checked_row, row_problem


def test_a_measured_row_passes_strictly_and_comes_back_whole():
    row = Row(status="ok", backend="sdpa", time_ms=0.5, peak_mem_bytes=1024, causal=True, window="[63, 0]",
              saturated_frac=math.nan).to_dict()
    assert row_problem(row, strict=True) is None
    assert checked_row(row) == Row(**row)


def test_an_impossible_row_is_named_by_its_column():
    base = Row(status="ok").to_dict()
    assert row_problem({**base, "status": "bogus"}).startswith("status 'bogus' is not one of ok, oom")
    assert row_problem({**base, "time_ms": -5}) == "column 'time_ms' is -5: it cannot be negative"
    assert row_problem({**base, "time_ms": math.inf}) == "column 'time_ms' is inf: a time or size is finite"
    assert row_problem({**base, "causal": 3}) == "column 'causal' holds 3, not true or false"
    assert row_problem({**base, "seq_len": [1]}) == "column 'seq_len' holds a list, not a number"
    assert row_problem({**base, "extra": {"a": 1}}) == "column 'extra' holds a dict, not a plain value"
    assert row_problem([1, 2]) == "not a mapping of columns but list"
    # the channel's rows are whole: an unknown or a missing column is refused there, allowed in a file
    assert row_problem({**base, "extra": 1}, strict=True) == "unknown column 'extra'"
    assert row_problem({"status": "ok"}, strict=True).startswith("column ") and row_problem({"status": "ok"}) is None
