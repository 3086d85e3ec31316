"""The budget guard runs before anything whose size grows with the point: a point far too large is refused from
closed forms alone, without its sampled rows (a permutation of q_len, and the required first, last and block-edge
rows: selfattn/measure/boundary.py), its masks' key intervals or its inputs."""

from __future__ import annotations

import pytest

import selfattn.measure.flops as flops_module
from selfattn.measure import boundary, measure_point
from selfattn.measure.budget import Budget
from selfattn.point import Point


@pytest.mark.parametrize("axes", [dict(), dict(window=128), dict(batch=2, documents=4), dict(batch=4, pad_frac=0.5),
                                  dict(backend="chunked")],
                         ids=["plain", "window", "documents", "padding", "chunked-block-edges"])
def test_a_point_of_a_billion_keys_is_refused_before_anything_grows_with_it(monkeypatch, axes):
    monkeypatch.setattr(boundary, "point_rows", lambda *a, **k: pytest.fail("sampled rows before the guard"))
    # chunked tiles the queries: its block edges' rows (n / q_chunk of them) are counted in closed form
    monkeypatch.setattr(boundary, "required_rows", lambda *a, **k: pytest.fail("listed required rows before the guard"))
    monkeypatch.setattr(flops_module, "point_masks", lambda *a, **k: pytest.fail("built masks before the guard"))
    row = measure_point(Point(seq_len=10**9, heads=1, head_dim=1, device="cpu", **axes), Budget())
    assert row.status == "skipped_budget" and row.error.startswith("predicted memory"), row.error
    assert row.predicted_mem_bytes > 0 and row.time_ms is None


def test_a_point_that_fits_still_gets_its_flops_and_mask_density(monkeypatch):
    row = measure_point(Point(seq_len=64, heads=1, head_dim=8, window=16, device="cpu"), Budget(timing_s=0.02), ())
    assert row.status == "ok" and 0 < row.mask_density < 1 and row.flops > 0


def test_the_guard_counts_the_required_rows_as_the_sample_lists_them() -> None:
    for q_len in range(0, 80):
        for block in (None, 0, 1, 2, 3, 7, 16, 64, 79, 80, 100):
            listed = boundary.required_rows(q_len, block)
            assert boundary.required_row_count(q_len, block) == len(listed), (q_len, block)
