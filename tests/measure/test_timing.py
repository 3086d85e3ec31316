"""The timers report per-call times with plausible, ordered quantiles; warm-up is not counted."""

import time

import pytest
import torch

from selfattn.measure.timing import MIN_SAMPLES, summarize, time_call, time_cpu, wall_call


def test_summarize_orders_quantiles():
    timing = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert timing.p20_ms <= timing.median_ms <= timing.p80_ms
    assert timing.median_ms == 3.0 and timing.samples == 5


def test_summarize_rejects_no_samples():
    with pytest.raises(ValueError, match="per_call_ms"):
        summarize([])


def test_fast_call_is_blocked_and_reported_per_call():
    # A ~2 ms sleep: blocked_autorange puts several calls in a block; the reported times must
    # still be per call (not per block), ordered, and close to the sleep.
    timing = time_cpu(lambda: time.sleep(0.002), timing_s=0.2, call_s_estimate=0.002)
    assert timing.samples >= MIN_SAMPLES
    assert timing.p20_ms <= timing.median_ms <= timing.p80_ms
    assert 1.9 <= timing.median_ms < 20.0


def test_slow_call_still_gets_min_samples():
    timing = time_cpu(lambda: time.sleep(0.05), timing_s=0.01, call_s_estimate=0.05)
    assert timing.samples >= MIN_SAMPLES
    assert 49.0 <= timing.p20_ms <= timing.median_ms <= timing.p80_ms < 500.0


def test_torch_call_times_are_plausible():
    a = torch.randn(256, 256)
    _, call_s = wall_call(lambda: a @ a, "cpu")
    timing = time_call(lambda: a @ a, "cpu", 0.1, call_s)
    # 2*256^3 FLOPs: faster than 1 TFLOP/s is implausible on a CPU, slower than 1 s absurd
    assert 2 * 256**3 / 1e12 * 1e3 < timing.median_ms < 1000.0
    assert timing.p20_ms <= timing.median_ms <= timing.p80_ms


def test_warm_up_is_not_counted():
    calls = []

    def first_call_slow():
        calls.append(None)
        time.sleep(0.3 if len(calls) == 1 else 0.001)

    wall_call(first_call_slow, "cpu")  # the warm-up measure_point runs before timing
    timing = time_cpu(first_call_slow, timing_s=0.05, call_s_estimate=0.001)
    assert timing.p80_ms < 100.0


@pytest.mark.gpu
def test_cuda_timer_quantiles():
    a = torch.randn(2048, 2048, device="cuda")
    timing = time_call(lambda: a @ a, "cuda", 0.1, 0.001)
    assert 0 < timing.p20_ms <= timing.median_ms <= timing.p80_ms < 1000.0
