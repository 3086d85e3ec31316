"""A point's back end is looked up once: measure_point resolves it (selfattn/backends/resolved.py) and every
later step (the predictors, the inputs, the timed call, the layer, the checks, the permutation and path-length
passes) reads that object. One registry lookup per point, of every scope, is what the design needs; a step
that asks the registry again fails here."""

from __future__ import annotations

import pytest

from selfattn.backends import registry
from selfattn.measure import Budget, measure_point
from selfattn.point import Point

BUDGET = Budget(timing_s=0.01, accuracy_rows=8, measure_device_peak=False)
SMALL = dict(seq_len=32, heads=2, head_dim=16)
CASES = {
    "core": dict(backend="chunked", causal=True),
    "core-fwd_bwd": dict(backend="naive", mode="fwd_bwd", window=8),
    "core-fp8": dict(backend="naive", precision="fp8_e4m3"),
    "core-rope": dict(backend="sdpa", pos_enc="rope"),
    "core-compiled": dict(backend="naive", backend_options={"compile": True}),
    "layer": dict(backend="sdpa", scope="layer", mode="fwd_bwd"),
    "layer-sinusoidal": dict(backend="sdpa", scope="layer", pos_enc="sinusoidal"),
    "generate": dict(backend="naive", scope="generate", causal=True, new_tokens=2),
    "lstm": dict(backend="naive", scope="lstm"),
    "train": dict(backend="naive", scope="train", mode="fwd_bwd", seq_len=9, steps=3),
    "unsupported": dict(backend="sdpa", precision="fp8_e4m3"),
}


@pytest.mark.parametrize("axes", list(CASES.values()), ids=list(CASES))
def test_one_point_asks_the_registry_once(axes):
    point = Point(**{**SMALL, **axes})
    before = registry.lookups()
    row = measure_point(point, BUDGET)
    assert row.status in ("ok", "unsupported"), row.error
    assert (axes.get("precision") == "fp8_e4m3" and axes["backend"] == "sdpa") == (row.status == "unsupported")
    assert registry.lookups() - before == 1


def test_the_count_counts():
    """Negative control: a second lookup is seen (the counter is the registry's own)."""
    before = registry.lookups()
    registry.get_backend("naive"), registry.get_backend("sdpa")
    assert registry.lookups() - before == 2
