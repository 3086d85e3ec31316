"""measure_point with compiled back ends: compile time apart from time_ms, reuse, the guard, limits."""

from __future__ import annotations

import pytest

from selfattn import compile as compile_cache
from selfattn.measure import Budget, measure_point
from selfattn.point import Point

FAST = Budget(timing_s=0.05, accuracy_rows=8, measure_device_peak=False)
# A shape no other test compiles, so the first point here really compiles.
SHAPE = dict(seq_len=72, heads=3, head_dim=40)


def test_first_call_is_compile_s_and_the_same_shape_reuses_it():
    first = measure_point(Point(backend="flex", causal=True, window=16, **SHAPE), FAST)
    assert first.status == "ok", first.error
    assert first.recompiled is True and first.kernel == "compiled"
    assert first.compile_s > first.time_ms * 1e-3  # the compilation is in compile_s, never in time_ms
    assert first.block_mask_s is not None and first.block_mask_s > 0
    assert first.max_abs_err < 1e-5
    again = measure_point(Point(backend="flex", causal=True, window=16, seed=1, **SHAPE), FAST)
    assert again.status == "ok" and again.recompiled is False
    assert again.compile_s < first.compile_s
    eager = measure_point(Point(backend="sdpa", causal=True, **SHAPE), FAST)
    assert eager.compile_s is None and eager.recompiled is None and eager.block_mask_s is None


def test_compile_option_rows_and_labels():
    row = measure_point(Point(backend="naive", backend_options={"compile": True}, mode="fwd_bwd", **SHAPE), FAST)
    assert row.status == "ok", row.error
    assert row.kernel == "materialized-compiled" and row.compile_s is not None and row.recompiled is not None
    assert row.grad_max_abs_err < 1e-4


def test_what_a_compiled_back_end_cannot_run_is_an_unsupported_row():
    row = measure_point(Point(backend="flex", mode="fwd_bwd", **SHAPE), FAST)
    assert row.status == "unsupported" and "no backward" in row.error
    row = measure_point(Point(backend="flex", precision="fp64", **SHAPE), FAST)
    assert row.status == "unsupported" and "precision fp64 on cpu (declared: fp32, fp16, bf16)" in row.error
    row = measure_point(Point(backend="naive", backend_options={"compile": True}, scope="generate", causal=True,
                              seq_len=16, heads=2, head_dim=8, new_tokens=2), FAST)
    assert row.status == "unsupported" and "new shape to compile" in row.error


@pytest.fixture
def nothing_compiled_yet(monkeypatch):
    """This process has measured no compilation and compiled no key: the guard sees only the guess."""
    monkeypatch.setattr(compile_cache, "_compile_s", {})
    monkeypatch.setattr(compile_cache, "_compiled_keys", set())


@pytest.mark.parametrize("max_point_s", [60.0, 30.0])  # the default, and causal_mask's and gqa's
def test_a_cold_compile_with_cuda_s_guess_is_guarded_apart_and_runs(monkeypatch, nothing_compiled_yet, max_point_s):
    # The CUDA guess (60 s) on this CPU: added to the point's time it skipped every compiled point on CUDA.
    monkeypatch.setitem(compile_cache.COMPILE_S_GUESS, "cpu", compile_cache.COMPILE_S_GUESS["cuda"])
    budget = Budget(timing_s=0.05, accuracy_rows=8, measure_device_peak=False, max_point_s=max_point_s)
    assert compile_cache.COMPILE_S_GUESS["cuda"] <= budget.max_compile_s  # the default lets a cold compile through
    point = Point(backend="naive", backend_options={"compile": True}, seq_len=40, heads=5, head_dim=8)
    assert compile_cache.predict_compile_s("naive", "cpu", "a key not compiled") == compile_cache.COMPILE_S_GUESS["cuda"]
    row = measure_point(point, budget)
    assert row.status == "ok", row.error
    assert row.compile_s is not None and row.recompiled is not None


def test_a_compile_predicted_beyond_max_compile_s_is_skipped_naming_the_key(monkeypatch, nothing_compiled_yet):
    monkeypatch.setitem(compile_cache.COMPILE_S_GUESS, "cpu", 1e4)
    row = measure_point(Point(backend="naive", backend_options={"compile": True}, seq_len=40, heads=5, head_dim=8),
                        Budget(timing_s=0.05, accuracy_rows=8, measure_device_peak=False))
    assert row.status == "skipped_budget"
    assert "predicted compile time 10000.0 s exceeds budget.max_compile_s=120 s" in row.error
    assert row.compile_s is None  # nothing was compiled
    compile_cache.record_compile_s("naive", "cpu", "k", 2.0, True)
    assert compile_cache.predict_compile_s("naive", "cpu", "other") == 2.0  # measured beats the guess
    assert compile_cache.predict_compile_s("naive", "cpu", "k") == 0.0  # compiled already: reused


def test_the_guard_keeps_compile_time_and_call_time_apart():
    from selfattn.measure.guard import over_budget

    point, budget = Point(backend="flex"), Budget()
    assert over_budget(point, budget, 0, None, point_s=59.0, compile_s=119.0) is None  # each within its own limit
    assert "max_point_s=60" in over_budget(point, budget, 0, None, point_s=61.0, compile_s=0.0)
    assert "budget.max_compile_s=120" in over_budget(point, budget, 0, None, point_s=1.0, compile_s=121.0)
    assert over_budget(point, Budget(max_compile_s=500.0), 0, None, point_s=1.0, compile_s=121.0) is None


@pytest.mark.gpu
def test_a_cold_flex_compile_on_cuda_is_measured_not_skipped(nothing_compiled_yet):
    """On CUDA with the default budget, the 60 s guess must not skip the point: the compile is measured."""
    row = measure_point(Point(backend="flex", device="cuda", precision="bf16", causal=True, seq_len=1024, heads=4,
                              head_dim=64), Budget(timing_s=0.1, accuracy_rows=8))
    assert row.status == "ok", row.error
    assert row.compile_s is not None and row.recompiled is not None


def test_a_process_full_of_graphs_drops_them_between_points_and_goes_on(monkeypatch):
    import torch._dynamo.config as dynamo_config

    flex = Point(backend="flex", causal=True, **SHAPE)
    measure_point(flex, FAST)  # compiled (or reused) before the limit drops
    assert dynamo_config.fail_on_recompile_limit_hit  # a hit limit raises, never runs eagerly in silence
    monkeypatch.setattr(compile_cache, "RESET_AFTER_GRAPHS", 0)
    row = measure_point(flex, FAST)
    assert row.status == "ok" and "dropped this process's compiled code" in row.note
    assert row.recompiled is True  # the same shape compiles again after the drop
