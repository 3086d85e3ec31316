"""The analytic model the budget guard relies on: how predictions scale, without allocating."""

import sys
import types

import pytest

from selfattn import Point
from selfattn.measure import predict_mem_bytes
from selfattn.measure.predict import after_warmup_s, input_bytes, predict_call_s, predict_point_s


def _ratio(backend: str, **fields) -> float:
    small = predict_mem_bytes(Point(backend=backend, device="cpu", seq_len=8192, **fields))
    large = predict_mem_bytes(Point(backend=backend, device="cpu", seq_len=16384, **fields))
    return large / small


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
def test_naive_grows_quadratically_chunked_and_sdpa_linearly(mode):
    assert _ratio("naive", mode=mode) == pytest.approx(4, rel=0.02)
    assert _ratio("sdpa", mode=mode, backend_options={"kernel": "math"}) == pytest.approx(4, rel=0.02)
    assert 1.5 < _ratio("chunked", mode=mode) <= 2.0  # O(n d) plus fixed-size score blocks
    assert _ratio("sdpa", mode=mode) < 2.2  # CPU flash kernel: O(n) plus per-thread scratch


def test_causal_mask_costs_naive_one_more_matrix_not_per_head():
    full = predict_mem_bytes(Point(backend="naive", seq_len=4096, heads=8))
    causal = predict_mem_bytes(Point(backend="naive", seq_len=4096, heads=8, causal=True))
    assert 0 < causal - full <= 4096 * 4096 * 5  # bool keep mask + an fp32 additive mask, shared by heads


def test_precision_halves_naive_memory():
    fp32 = predict_mem_bytes(Point(backend="naive", seq_len=4096, precision="fp32"))
    fp16 = predict_mem_bytes(Point(backend="naive", seq_len=4096, precision="fp16"))
    assert fp16 == pytest.approx(fp32 / 2, rel=0.01)


def test_layer_scope_adds_projections():
    core = predict_mem_bytes(Point(backend="chunked", seq_len=4096))
    layer = predict_mem_bytes(Point(backend="chunked", seq_len=4096, scope="layer"))
    assert layer > core


def test_inputs_and_time_predictions():
    point = Point(batch=2, heads=4, seq_len=100, head_dim=8, mode="fwd_bwd")
    assert input_bytes(point) == (2 * 4 * 300 * 8 + 2 * 4 * 100 * 8) * 4  # q, k, v + upstream
    assert predict_call_s(point, 2.0) == pytest.approx(predict_call_s(point, 1.0) / 2)
    # the warm-up and 2 memory calls + the CPU timer's estimate block + the timing budget (or
    # MIN_SAMPLES calls, if longer) + the accuracy pass on 32 of the 100 rows, about two calls' worth
    call_s = predict_call_s(point, 1e-4)
    assert 0.01 < 3 * call_s < 1.0  # timing_s outlasts 3 calls; the calls still count
    timed = int(1.0 / call_s)
    assert predict_point_s(point, 1e-4, timing_s=1.0, rows=32) == pytest.approx(
        (3 + 1 + timed) * call_s + 2 * call_s * 0.32)
    slow_s = predict_call_s(point, 1e-6)  # a peak so low that 3 calls outlast timing_s
    assert 3 * slow_s > 1.0
    assert predict_point_s(point, 1e-6, timing_s=1.0, rows=500) == pytest.approx((3 + 1 + 3 + 2) * slow_s)


@pytest.fixture
def with_do_bench(monkeypatch):
    """A process where triton's do_bench imports and has not failed (the CUDA timer is do_bench)."""
    import selfattn.measure.timing as timing

    monkeypatch.setattr(timing, "_do_bench_broken", "")
    monkeypatch.setitem(sys.modules, "triton", types.SimpleNamespace())
    monkeypatch.setitem(sys.modules, "triton.testing", types.SimpleNamespace(do_bench=lambda *a, **k: None))


def test_cuda_time_counts_do_bench_estimate_and_warm_up_calls(with_do_bench):
    # 20 ms calls, timing_s = 1 s: do_bench times them, after 1 + 5 estimate calls and 1 warm-up call.
    assert after_warmup_s("cuda", 0.02, 1.0) == pytest.approx((1 + 6 + 1 + 50) * 0.02)
    point = Point(device="cuda", batch=2, heads=4, seq_len=100, head_dim=8)
    call_s = predict_call_s(point, 1e-4)
    timed = int(1.0 / call_s)
    assert 10 <= timed < 1000  # do_bench's regime
    assert predict_point_s(point, 1e-4, timing_s=1.0, rows=500) == pytest.approx((2 + 6 + 1 + timed + 2) * call_s)


def test_slow_cuda_point_is_guarded_on_what_really_runs(with_do_bench):
    # A 10 s call with max_point_s = 60: the warm-up, the memory call, the events timer's warm-up
    # and 3 timed calls are 60 s. do_bench would have added 1 + 5 estimate calls (120 s in all).
    assert 10.0 + after_warmup_s("cuda", 10.0, 1.0) == pytest.approx(60.0)
    # tf32 adds its TF32-off call; a CPU its allocator-profile call (torch_timer: 1 estimate block)
    assert 10.0 + after_warmup_s("cuda", 10.0, 1.0, "tf32") == pytest.approx(70.0)
    assert 10.0 + after_warmup_s("cpu", 10.0, 1.0) == pytest.approx(70.0)


def test_bad_precision_is_one_line_value_error():
    with pytest.raises(ValueError, match="precision"):
        predict_mem_bytes(Point(precision="fp8"))


def _allocated_peak(fn) -> int:
    """Peak of the running sum of torch's CPU allocations and frees while `fn` runs (profiler memory events)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
        del result
    live = peak = 0
    for _, nbytes in sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                            if e.name() == "[memory]"):
        live += nbytes
        peak = max(peak, live)
    return peak


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
@pytest.mark.parametrize("causal, q_len", [(False, None), (True, None), (False, 256)], ids=["full", "causal", "q256"])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_sdpa_math_kernel_memory_model_matches_its_allocations(precision, causal, q_len, mode):
    # The math kernel is the same ATen code on a CPU and a GPU, so its allocations measured here
    # are what a forced-math point allocates on a GPU: the budget guard must not be 2x low there.
    import torch

    from selfattn import attention
    from selfattn.inputs import make_qkv
    from selfattn.precision import DTYPES

    point = Point(backend="sdpa", backend_options={"kernel": "math"}, precision=precision, device="cpu",
                  batch=1, heads=2, seq_len=1024, q_len=q_len, head_dim=64, causal=causal, mode=mode)
    grad = mode == "fwd_bwd"
    q, k, v = make_qkv(1, 2, point.q_len_resolved, 1024, 64, dtype=DTYPES[precision], device="cpu", seed=0,
                       requires_grad=grad)
    upstream = torch.randn(q.shape).to(q.dtype)

    def call():
        with torch.set_grad_enabled(grad):
            out = attention(q, k, v, backend="sdpa", causal=causal, kernel="math")
            return torch.autograd.grad(out, (q, k, v), upstream) if grad else out

    call()  # warm-up: lazily built kernels' buffers are not the call's
    measured = _allocated_peak(call)
    predicted = predict_mem_bytes(point)
    # bytes per score: fp32 fwd 9, fp16/bf16 fwd 9 (+ fp32 copies of q, k, v, out), fwd_bwd 12
    assert measured / point.score_elements > (8.9 if mode == "fwd" else 11.9)
    assert predicted == pytest.approx(measured, rel=0.03), f"measured {measured} B, predicted {predicted} B"


@pytest.mark.parametrize("heads, seq_len, causal, documents", [(4, 1024, True, None), (8, 1024, False, None),
                                                                (2, 512, True, 4)],
                         ids=["causal", "full", "docs"])
def test_flex_memory_model_matches_its_allocations(heads, seq_len, causal, documents):
    """flex on a CPU: the call's peak (O(n) per head) and create_block_mask's (O(n^2), in prepare)."""
    from selfattn.backends import flex
    from selfattn.inputs import make_qkv
    from selfattn.inputs import point_masks
    from selfattn.measure.memory import alloc_peak_bytes

    point = Point(backend="flex", device="cpu", batch=2, heads=heads, seq_len=seq_len, causal=causal,
                  documents=documents)
    q, k, v = make_qkv(2, heads, seq_len, seq_len, 64, seed=0)
    masks = point_masks(point)
    build = alloc_peak_bytes(lambda: flex._block_mask(masks, 2, seq_len, seq_len, q.device, rebuild=True))

    def call():
        return flex.attention(q, k, v, masks=masks, scale=0.125)

    call()  # compiles; the block mask is cached from the build above
    measured = max(alloc_peak_bytes(call), build)
    assert predict_mem_bytes(point) == pytest.approx(measured, rel=0.1), f"measured {measured} B"
    if causal:  # the build's n^2 bytes, not the call, set the prediction
        assert build > alloc_peak_bytes(call)
