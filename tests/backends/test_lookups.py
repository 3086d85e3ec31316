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


@pytest.fixture
def resolutions(monkeypatch):
    """Counts the resolutions of a back end's options (every one goes through Backend.resolve_options)."""
    seen: list[str] = []
    original = registry.Backend.resolve_options

    def counted(self, options, device, dtype):
        seen.append(self.name)
        return original(self, options, device, dtype)

    monkeypatch.setattr(registry.Backend, "resolve_options", counted)
    return seen


@pytest.mark.parametrize("axes", list(CASES.values()), ids=list(CASES))
def test_one_point_resolves_its_options_once(axes, resolutions):
    """The layer, the permutation and path-length checks and the train loop run the point's Resolved: none of
    them resolves the options again (a recurrent scope runs no back end, so resolves none)."""
    row = measure_point(Point(**{**SMALL, **axes}), BUDGET)
    assert row.status in ("ok", "unsupported"), row.error
    assert len(resolutions) == (0 if axes.get("scope") == "lstm" else 1), resolutions


def test_a_direct_call_resolves_once_per_call_and_a_resolved_one_never(resolutions):
    """Negative control and the public side: selfattn.attention resolves through the same resolver each call;
    given a point's Resolved it runs it as it is (options beside it are refused)."""
    import torch

    import selfattn
    from selfattn.backends.resolved import resolve_point

    q, k, v = selfattn.make_qkv(1, 2, 8, 8, 16)
    selfattn.attention(q, k, v, backend="chunked", causal=True)
    selfattn.attention(q, k, v, backend="chunked", causal=True)
    assert resolutions == ["chunked", "chunked"]
    resolved = resolve_point(Point(backend="chunked", causal=True, **SMALL), "cpu")
    assert len(resolutions) == 3
    out = selfattn.attention(q, k, v, backend=resolved, causal=True)
    assert len(resolutions) == 3
    torch.testing.assert_close(out, selfattn.attention(q, k, v, backend="chunked", causal=True))
    with pytest.raises(ValueError, match="^options: a resolved back end carries its own options"):
        selfattn.attention(q, k, v, backend=resolved, q_chunk=4)
    with pytest.raises(ValueError, match="^backend_options: a resolved back end carries its own options"):
        selfattn.MultiHeadSelfAttention(32, 2, backend=resolved, q_chunk=4)


def test_a_resolved_back_end_that_cannot_run_is_refused_when_run():
    import selfattn
    from selfattn.backends.resolved import resolve_point

    resolved = resolve_point(Point(backend="sdpa", precision="fp8_e4m3", **SMALL), "cpu")
    assert resolved.why_not
    q, k, v = selfattn.make_qkv(1, 2, 8, 8, 16)
    with pytest.raises(selfattn.Unsupported, match="fp8"):
        selfattn.attention(q, k, v, backend=resolved)
