"""The analytic model the budget guard relies on: how predictions scale, without allocating."""

import sys
import types

import pytest

from selfattn import Point
from tests.predicted import predicted_call_s, predicted_mem_bytes, predicted_point_s
from selfattn.measure.predict import (
    HOST_DRAW_VALUES_PER_S,
    accuracy_bytes,
    after_warmup_s,
    input_bytes,
    input_draw_bytes,
    input_draw_s,
)


def _ratio(backend: str, **fields) -> float:
    small = predicted_mem_bytes(Point(backend=backend, device="cpu", seq_len=8192, **fields))
    large = predicted_mem_bytes(Point(backend=backend, device="cpu", seq_len=16384, **fields))
    return large / small


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
def test_naive_grows_quadratically_chunked_and_sdpa_linearly(mode):
    assert _ratio("naive", mode=mode) == pytest.approx(4, rel=0.02)
    assert _ratio("sdpa", mode=mode, backend_options={"kernel": "math"}) == pytest.approx(4, rel=0.02)
    assert 1.5 < _ratio("chunked", mode=mode) <= 2.0  # O(n d) plus fixed-size score blocks
    assert _ratio("sdpa", mode=mode) < 2.2  # CPU flash kernel: O(n) plus per-thread scratch


def test_causal_mask_costs_naive_no_matrix_per_call():
    full = predicted_mem_bytes(Point(backend="naive", seq_len=4096, heads=8))
    causal = predicted_mem_bytes(Point(backend="naive", seq_len=4096, heads=8, causal=True))
    assert causal == full  # the mask is made once per point, before the calls (naive.additive_mask), and added


def test_precision_halves_naive_memory():
    fp32 = predicted_mem_bytes(Point(backend="naive", seq_len=4096, precision="fp32"))
    fp16 = predicted_mem_bytes(Point(backend="naive", seq_len=4096, precision="fp16"))
    assert fp16 == pytest.approx(fp32 / 2, rel=0.01)


def test_layer_scope_adds_projections():
    core = predicted_mem_bytes(Point(backend="chunked", seq_len=4096))
    layer = predicted_mem_bytes(Point(backend="chunked", seq_len=4096, scope="layer"))
    assert layer > core


def test_inputs_and_time_predictions():
    point = Point(batch=2, heads=4, seq_len=100, head_dim=8, mode="fwd_bwd")
    assert input_bytes(point) == (2 * 4 * 300 * 8 + 2 * 4 * 100 * 8) * 4  # q, k, v + upstream
    assert predicted_call_s(point, 2.0) == pytest.approx(predicted_call_s(point, 1.0) / 2)
    # the warm-up and 2 memory calls + the timing budget (or MIN_SAMPLES calls, if longer; calls this
    # slow are blocks of one, with no calibration block) + the accuracy pass on 32 of the 100 rows,
    # about two calls' worth
    call_s = predicted_call_s(point, 1e-4)
    assert 0.01 < 3 * call_s < 1.0  # timing_s outlasts 3 calls; the calls still count
    timed = int(1.0 / call_s)
    draw_s = input_draw_s(point, 32)  # q, k, v, the upstream and the stability upstream, on one host thread
    assert draw_s == pytest.approx((2 * 4 * 300 * 8 + 2 * 4 * 100 * 8 + 2 * 4 * 32 * 8) / HOST_DRAW_VALUES_PER_S)
    assert predicted_point_s(point, 1e-4, timing_s=1.0, rows=32) == pytest.approx(
        draw_s + (3 + timed) * call_s + 2 * call_s * 0.32)
    slow_s = predicted_call_s(point, 1e-6)  # a peak so low that 3 calls outlast timing_s
    assert 3 * slow_s > 1.0
    assert predicted_point_s(point, 1e-6, timing_s=1.0, rows=500) == pytest.approx(
        input_draw_s(point, 500) + (3 + 3 + 2) * slow_s)


def test_drawing_the_inputs_is_guarded_on_the_device_that_draws_them():
    # The old decode grid's largest point: B8, 32 heads, a 256K cache. On a CPU, one host thread
    # drawing float64 takes minutes, and a float64 tensor stands beside the inputs; a GPU point
    # draws on its device in float32: well under a second, 4 bytes per value of the largest tensor.
    big = dict(batch=8, heads=32, seq_len=262144, q_len=4, head_dim=64, precision="bf16")
    k_values = 8 * 32 * 262144 * 64
    host, device = Point(device="cpu", **big), Point(device="cuda", **big)
    assert input_draw_s(host) > 60 and input_draw_s(device) < 1
    assert input_draw_bytes(host) == 8 * k_values and input_draw_bytes(device) == 4 * k_values
    assert input_draw_bytes(Point(device="cuda", **dict(big, precision="fp32"))) == 0  # drawn in place
    assert predicted_point_s(host, 1.0, timing_s=0.2, rows=8) > input_draw_s(host)  # the guard sees it
    # the memory guard: the draw's float64 tensor counts when it is the harness's largest pass
    assert accuracy_bytes(host, 8) >= input_draw_bytes(host)


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
    call_s = predicted_call_s(point, 1e-4)
    timed = int(1.0 / call_s)
    assert 10 <= timed < 1000  # do_bench's regime
    assert predicted_point_s(point, 1e-4, timing_s=1.0, rows=500) == pytest.approx((2 + 6 + 1 + timed + 2) * call_s)


def test_slow_cuda_point_is_guarded_on_what_really_runs(with_do_bench):
    # A 10 s call with max_point_s = 60: the warm-up, the memory call, the events timer's warm-up
    # and 3 timed calls are 60 s. do_bench would have added 1 + 5 estimate calls (120 s in all).
    assert 10.0 + after_warmup_s("cuda", 10.0, 1.0) == pytest.approx(60.0)
    # tf32 adds its TF32-off call; a CPU its allocator-profile call (cpu_blocks: no calibration block
    # for blocks of one call)
    assert 10.0 + after_warmup_s("cuda", 10.0, 1.0, "tf32") == pytest.approx(70.0)
    assert 10.0 + after_warmup_s("cpu", 10.0, 1.0) == pytest.approx(60.0)


def test_bad_precision_is_one_line_value_error():
    with pytest.raises(ValueError, match="precision"):
        predicted_mem_bytes(Point(precision="fp8"))


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


@pytest.mark.parametrize("kv_heads", [None, 1], ids=["mha", "gqa"])
@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
@pytest.mark.parametrize("causal, q_len", [(False, None), (True, None), (False, 256)], ids=["full", "causal", "q256"])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_sdpa_math_kernel_memory_model_matches_its_allocations(precision, causal, q_len, mode, kv_heads):
    # The math kernel is the same ATen code on a CPU and a GPU, so its allocations measured here
    # are what a forced-math point allocates on a GPU: the budget guard must not be 2x low there.
    import torch

    from selfattn import attention
    from selfattn.inputs import make_qkv
    from selfattn.precision import DTYPES

    point = Point(backend="sdpa", backend_options={"kernel": "math"}, precision=precision, device="cpu",
                  batch=1, heads=2, kv_heads=kv_heads, seq_len=1024, q_len=q_len, head_dim=64, causal=causal, mode=mode)
    grad = mode == "fwd_bwd"
    q, k, v = make_qkv(1, 2, point.q_len_resolved, 1024, 64, dtype=DTYPES[precision], device="cpu", seed=0,
                       requires_grad=grad, kv_heads=kv_heads)
    upstream = torch.randn(q.shape).to(q.dtype)

    def call():
        with torch.set_grad_enabled(grad):
            out = attention(q, k, v, backend="sdpa", causal=causal, kernel="math")
            return torch.autograd.grad(out, (q, k, v), upstream) if grad else out

    call()  # warm-up: lazily built kernels' buffers are not the call's
    measured = _allocated_peak(call)
    predicted = predicted_mem_bytes(point)
    # bytes per score: fp32 fwd 9, fp16/bf16 fwd 9 (+ fp32 copies of q, k, v, out), fwd_bwd 12;
    # with GQA K and V repeated to every head (and, for fwd_bwd, dK and dV at every head)
    assert measured / point.score_elements > (8.9 if mode == "fwd" else 11.9)
    assert predicted == pytest.approx(measured, rel=0.03), f"measured {measured} B, predicted {predicted} B"


def _sdpa_cuda_bytes(seq_len: int, **fields) -> int:
    # A CUDA point's model needs no GPU: predictions are made before anything is allocated.
    return predicted_mem_bytes(Point(backend="sdpa", device="cuda", batch=1, heads=8, seq_len=seq_len, head_dim=64,
                                   causal=True, **fields))


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_sdpa_auto_with_gqa_in_fp32_on_cuda_is_modelled_as_the_math_kernel(precision, mode):
    gqa = dict(kv_heads=2, precision=precision, mode=mode)
    forced = _sdpa_cuda_bytes(4096, backend_options={"kernel": "math"}, **gqa)
    assert _sdpa_cuda_bytes(4096, **gqa) == forced  # B*H*n^2 scores and K/V repeated, as the math kernel does
    assert _sdpa_cuda_bytes(8192, **gqa) / _sdpa_cuda_bytes(4096, **gqa) == pytest.approx(4, rel=0.02)
    # the negative controls: without GQA (efficient takes fp32) and in bf16 (flash takes GQA) it stays fused
    for other in (dict(gqa, kv_heads=None), dict(gqa, precision="bf16")):
        assert _sdpa_cuda_bytes(8192, **other) / _sdpa_cuda_bytes(4096, **other) < 2.2
        assert _sdpa_cuda_bytes(4096, **other) < forced / 10


def test_sdpa_auto_runs_math_only_where_no_fused_cuda_kernel_takes_the_point():
    from selfattn.backends.sdpa import auto_runs_math

    def runs_math(device="cuda", **fields):
        return auto_runs_math(Point(backend="sdpa", heads=8, **fields), device)

    assert runs_math(precision="fp64") and runs_math(precision="fp32", kv_heads=1) and runs_math(precision="tf32", kv_heads=4)
    assert not runs_math(precision="fp32") and not runs_math(precision="bf16", kv_heads=1)
    assert not runs_math(precision="fp16", kv_heads=2) and not runs_math(device="cpu", precision="fp32", kv_heads=1)


@pytest.mark.parametrize("heads, seq_len, causal, documents, sink", [(4, 1024, True, None, None),
                                                                      (8, 1024, False, None, None),
                                                                      (2, 512, True, 4, None),
                                                                      (4, 1024, False, None, 0.5)],
                         ids=["causal", "full", "docs", "sink"])
def test_flex_memory_model_matches_its_allocations(heads, seq_len, causal, documents, sink):
    """flex on a CPU: the call's peak (O(n) per head) and create_block_mask's (O(n^2), in prepare);
    a sink copies K and V one key longer (its "key" way on a CPU)."""
    from selfattn.backends import flex
    from selfattn.inputs import make_qkv
    from selfattn.inputs import point_masks
    from selfattn.measure.memory import alloc_peak_bytes

    point = Point(backend="flex", device="cpu", batch=2, heads=heads, seq_len=seq_len, causal=causal,
                  documents=documents, sink=sink)
    q, k, v = make_qkv(2, heads, seq_len, seq_len, 64, seed=0)
    masks = point_masks(point)
    build = alloc_peak_bytes(lambda: flex._block_mask(masks, 2, seq_len, seq_len, q.device, rebuild=True,
                                                      sink_key=sink is not None))

    def call():
        return flex.attention(q, k, v, masks=masks, scale=0.125)

    call()  # compiles; the block mask is cached from the build above
    measured = max(alloc_peak_bytes(call), build)
    assert predicted_mem_bytes(point) == pytest.approx(measured, rel=0.1), f"measured {measured} B"
    if causal:  # the build's n^2 bytes, not the call, set the prediction
        assert build > alloc_peak_bytes(call)


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
@pytest.mark.parametrize("kv_heads", [8, 1], ids=["mha", "mqa"])
def test_accuracy_pass_model_covers_the_reference_and_stability_peaks(kv_heads, mode):
    # The float64 reference repeats K and V to every query head (repeat_interleave copies even at
    # one K/V head per query head), and the stability pass's dK statistics are ~54 B per K element:
    # on a GPU decode point those, not the sampled rows, are the accuracy pass's peak.
    import torch

    from selfattn.measure.accuracy import sample_rows
    from selfattn.measure.predict import _full_size_pass_bytes
    from selfattn.measure.stability import stability
    from selfattn.backends.resolved import resolve_point
    from selfattn.measure.workload import build

    point = Point(backend="sdpa", device="cpu", batch=1, heads=8, kv_heads=kv_heads, seq_len=2048, q_len=4,
                  head_dim=64, causal=True, mode=mode)
    rows = sample_rows(4, 8, 0)
    workload = build(point, torch.float32, torch.device("cpu"), rows, resolved=resolve_point(point, "cpu"))

    def stability_pass():
        q_rows, k, v, sampled = workload.stability_inputs()
        return stability(q_rows, k, v, sampled, q_len=4, masks=workload.masks, scale=point.scale_value,
                         upstream_BHrD=workload.upstream_rows)

    workload.reference(), stability_pass()  # warm-up
    measured = max(_allocated_peak(workload.reference), _allocated_peak(stability_pass))
    predicted = accuracy_bytes(point, len(rows))
    assert measured <= predicted < 1.6 * measured
    # the negative control: without the full-size terms the model is far below what runs
    assert predicted - _full_size_pass_bytes(point, point.seq_len) < 0.5 * measured


@pytest.mark.parametrize("scope, mode, pos_enc", [
    ("core", "fwd", "rope"), ("core", "fwd_bwd", "rope"), ("layer", "fwd", "sinusoidal"), ("layer", "fwd_bwd", "learned"),
    ("layer", "fwd_bwd", "rope"),
])
def test_an_encoding_s_memory_is_covered_by_the_model(scope, mode, pos_enc):
    """The rotated q and k (rope), X + PE (added): measured on naive, whose own model is exact forward."""
    from selfattn.measure import measure_point
    from selfattn.measure.budget import Budget

    budget = Budget(timing_s=0.01, accuracy_rows=8, measure_device_peak=False)
    plain, encoded = (measure_point(Point(backend="naive", scope=scope, mode=mode, pos_enc=p, seq_len=256, heads=4,
                                          head_dim=32), budget) for p in ("none", pos_enc))
    assert encoded.status == "ok", encoded.error
    assert encoded.peak_alloc_bytes <= encoded.predicted_mem_bytes <= 1.7 * encoded.peak_alloc_bytes
    assert encoded.predicted_mem_bytes - plain.predicted_mem_bytes >= encoded.peak_alloc_bytes - plain.peak_alloc_bytes


def test_a_fast_cpu_calls_calibration_block_is_counted():
    from selfattn.measure.predict import point_calls

    call_s = 1e-5  # 1 ms blocks of 100 calls: one calibration block, then 0.05 s of blocks (5000 calls)
    assert after_warmup_s("cpu", call_s, 0.05) == pytest.approx((point_calls("cpu", "fp32") - 1 + 100 + 5000) * call_s)
