"""The analytic model the budget guard relies on: how predictions scale, without allocating."""

import pytest

from selfattn import Point
from selfattn.measure import predict_mem_bytes
from selfattn.measure.predict import UNTIMED_CALLS, input_bytes, predict_call_s, predict_point_s


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
    # untimed calls + the timing budget (or min_samples calls, if longer) + the accuracy pass
    # on 32 of the 100 rows, about two calls' worth of them
    call_s = predict_call_s(point, 1e-4)
    assert 0.01 < 3 * call_s < 1.0  # timing_s outlasts min_samples calls; the calls still count
    assert predict_point_s(point, 1e-4, timing_s=1.0, min_samples=3, rows=32) == pytest.approx(
        UNTIMED_CALLS * call_s + 1.0 + 2 * call_s * 0.32)
    slow_s = predict_call_s(point, 1e-6)  # a peak so low that min_samples calls outlast timing_s
    assert 3 * slow_s > 1.0
    assert predict_point_s(point, 1e-6, timing_s=1.0, min_samples=3, rows=500) == pytest.approx(
        (UNTIMED_CALLS + 3 + 2) * slow_s)


def test_bad_precision_is_one_line_value_error():
    with pytest.raises(ValueError, match="precision"):
        predict_mem_bytes(Point(precision="fp8"))
