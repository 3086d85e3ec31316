"""Permutation equivariance, measured per back end: exact up to rounding without a mask, broken by a causal one."""

import pytest
import torch

from selfattn import Point
from selfattn.backends.resolved import resolve_point
from selfattn.measure.permutation import permutation_max_abs_diff


@pytest.mark.parametrize("backend", ["naive", "sdpa", "chunked"])
def test_without_a_mask_permuting_tokens_permutes_outputs(backend):
    point = Point(backend=backend, seq_len=4096, heads=2, head_dim=32, device="cpu")  # checked on 128 tokens
    assert permutation_max_abs_diff(point, torch.float32, "cpu", resolve_point(point, "cpu")) < 1e-5


@pytest.mark.parametrize("backend", ["naive", "sdpa"])
def test_a_causal_mask_breaks_it(backend):
    point = Point(backend=backend, seq_len=256, heads=2, head_dim=32, causal=True, device="cpu")
    assert permutation_max_abs_diff(point, torch.float32, "cpu", resolve_point(point, "cpu")) > 0.1


@pytest.mark.parametrize("at_point_shape", [False, True], ids=["short", "point-shape"])
@pytest.mark.parametrize("backend", ["naive", "sdpa", "chunked"])
@pytest.mark.parametrize("scope, pos_enc", [("core", "rope"), ("layer", "rope"), ("layer", "sinusoidal"),
                                            ("layer", "learned")])
def test_each_positional_encoding_breaks_it(scope, pos_enc, backend, at_point_shape):
    point = Point(backend=backend, scope=scope, pos_enc=pos_enc, seq_len=48, heads=2, head_dim=8, device="cpu")
    assert point.validate() is None
    plain = Point(backend=backend, scope=scope, seq_len=48, heads=2, head_dim=8, device="cpu")
    for checked, broken in ((plain, False), (point, True)):
        diff = permutation_max_abs_diff(checked, torch.float32, "cpu", resolve_point(checked, "cpu"),
                                        at_point_shape=at_point_shape)
        assert diff > 0.1 if broken else diff < 1e-5


# --- compiled back ends: the check runs at the point's own shape, so it reuses the point's compiled code ---

@pytest.mark.parametrize("extra, broken", [
    ({}, False), ({"causal": True}, True),
    ({"window": 8}, False),  # the window is replaced by one that hides nothing: no mask, as for eager back ends
    ({"causal": True, "window": 8}, True),
    ({"pad_frac": 0.25, "batch": 2}, False), ({"documents": 3, "batch": 2}, False),
    ({"kv_heads": 1, "q_len": 7}, False),  # GQA, queries and keys each with their own permutation
    ({"scope": "layer", "mode": "fwd_bwd", "causal": True}, True),
], ids=["none", "causal", "window", "causal-window", "padding", "documents", "gqa-q7", "layer-fwd_bwd-causal"])
def test_at_the_point_s_shape_the_check_means_the_same(extra, broken):
    point = Point(backend="naive", seq_len=40, heads=2, head_dim=8, device="cpu", **extra)
    diff = permutation_max_abs_diff(point, torch.float32, "cpu", resolve_point(point, "cpu"), at_point_shape=True)
    assert diff > 0.1 if broken else diff < 1e-5


FAST = dict(timing_s=0.05, accuracy_rows=8, measure_device_peak=False)


def _graphs_in_the_check(monkeypatch):
    """Patch measure_point's permutation check to record what it was asked and the graphs it compiled."""
    from selfattn import compile as compile_cache
    from selfattn.measure import permutation

    seen = []

    def counted(point, dtype, device, resolved, **kwargs):
        before = compile_cache.graphs_compiled()
        diff = permutation_max_abs_diff(point, dtype, device, resolved, **kwargs)
        assert resolved.name == point.backend  # the point's Resolved, made once by measure_point
        seen.append((kwargs, compile_cache.graphs_compiled() - before))
        return diff

    # the metric imports the check when it runs (selfattn/measure/metric_steps.py): patched where it is defined
    monkeypatch.setattr(permutation, "permutation_max_abs_diff", counted)
    return seen


@pytest.mark.parametrize("extra", [
    dict(causal=True), dict(mode="fwd_bwd", window=8),  # grad mode as compiled; a window hiding nothing
    dict(scope="layer", mode="fwd_bwd", causal=True),  # the layer's transposed heads, as compiled
], ids=["fwd-causal", "fwd_bwd-window", "layer-fwd_bwd-causal"])
def test_a_compiled_point_s_check_compiles_nothing_more(monkeypatch, extra):
    from selfattn.measure import Budget, measure_point

    seen = _graphs_in_the_check(monkeypatch)
    point = Point(backend="naive", backend_options={"compile": True}, seq_len=160, heads=3, head_dim=8, **extra)
    row = measure_point(point, Budget(**FAST))
    assert row.status == "ok", row.error
    assert row.compile_s is not None
    assert seen == [({"at_point_shape": True}, 0)]  # a 128-token check compiled a second graph here
    assert "permutation check compiled" not in row.note
    assert (row.perm_max_abs_diff > 0.1) == bool(extra.get("causal"))


@pytest.mark.slow  # flex's first compilation: 8-16 s on a 2-core CPU
def test_a_flex_point_s_check_compiles_nothing_more(monkeypatch):
    from selfattn.measure import Budget, measure_point

    seen = _graphs_in_the_check(monkeypatch)
    row = measure_point(Point(backend="flex", causal=True, window=16, seq_len=60, heads=3, head_dim=8), Budget(**FAST))
    assert row.status == "ok", row.error
    assert seen == [({"at_point_shape": True}, 0)]
    assert row.perm_max_abs_diff > 0.1


def test_a_check_that_compiles_all_the_same_says_so(monkeypatch):
    from torch._dynamo.utils import counters

    from selfattn.measure import Budget, measure_point, permutation

    def compiling_check(point, dtype, device, resolved, **kwargs):
        counters["stats"]["unique_graphs"] += 1  # as a check whose mask picks another compiled variant
        return 0.0

    monkeypatch.setattr(permutation, "permutation_max_abs_diff", compiling_check)
    row = measure_point(Point(backend="naive", backend_options={"compile": True}, seq_len=44, heads=3, head_dim=8),
                        Budget(**FAST))
    assert row.status == "ok" and "the permutation check compiled 1 more graph(s)" in row.note


def test_an_eager_point_s_check_is_the_short_one_as_before(monkeypatch):
    from selfattn.measure import Budget, measure_point

    seen = _graphs_in_the_check(monkeypatch)
    point = Point(backend="naive", seq_len=300, heads=2, head_dim=8, batch=2, window=32)
    row = measure_point(point, Budget(**FAST))
    assert row.status == "ok" and seen == [({}, 0)]
    # 128 tokens, one sequence
    assert row.perm_max_abs_diff == permutation_max_abs_diff(point, torch.float32, "cpu", resolve_point(point, "cpu"))


def test_the_guard_s_bytes_for_the_check_at_the_point_s_shape():
    from selfattn.measure.permutation import point_shape_bytes

    point = Point(backend="flex", batch=2, heads=4, kv_heads=2, seq_len=100, q_len=10, head_dim=8, precision="bf16")
    q, kv = 2 * 4 * 10 * 8 * 2, 2 * 2 * 2 * 100 * 8 * 2  # Q; K and V
    assert point_shape_bytes(point) == 2 * (q + kv) + 2 * q  # the inputs twice (permuted copies), two outputs


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
def test_a_cuda_flex_point_s_check_compiles_nothing_more(monkeypatch, mode):
    from selfattn.measure import Budget, measure_point

    seen = _graphs_in_the_check(monkeypatch)
    point = Point(backend="flex", device="cuda", precision="bf16", mode=mode, causal=True, seq_len=1024, heads=4,
                  head_dim=64)
    row = measure_point(point, Budget(timing_s=0.1, accuracy_rows=8))
    assert row.status == "ok", row.error
    assert seen == [({"at_point_shape": True}, 0)] and row.perm_max_abs_diff > 0.1
