"""The timers report per-call times with plausible, ordered quantiles; warm-up is not counted;
the CUDA timers (on a fake clock here) fall back, label their rows and make the calls their plan counts."""

import subprocess
import sys
import time
import types
import warnings

import numpy as np
import pytest
import torch

from selfattn.measure.timing import MIN_SAMPLES, summarize, time_call, time_cpu, wall_call

pytestmark = pytest.mark.exclusive  # times real calls and judges the times: nothing may run beside them


def test_summarize_orders_quantiles():
    timing = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert timing.p20_ms <= timing.median_ms <= timing.p80_ms
    assert timing.median_ms == 3.0 and timing.samples == 5


def test_summarize_rejects_no_samples():
    with pytest.raises(ValueError, match="per_call_ms"):
        summarize([])


def test_fast_call_is_blocked_and_reported_per_call():
    # A ~2 ms sleep: a block holds one call; the reported times must be per call (not per
    # block), ordered, and close to the sleep.
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


# --- the CUDA timers on a CPU: a fake clock stands in for the GPU's, events read it ---------------


class FakeGpu:
    """A clock the timed function advances by its call time, events that read it, and a count of calls."""

    def __init__(self, call_ms: float) -> None:
        self.now_ms, self.call_ms, self.calls = 0.0, call_ms, 0

    def fn(self) -> None:
        self.calls += 1
        self.now_ms += self.call_ms

    def event(self):
        gpu = self

        class Event:
            def record(self) -> None:
                self.at_ms = gpu.now_ms

            def elapsed_time(self, end) -> float:
                return end.at_ms - self.at_ms

        return Event()

    def do_bench(self, fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
        """triton.testing.do_bench's algorithm (triton 3.x): one call, a 5-call estimate, warm-up, timed calls."""
        fn()
        start, end = self.event(), self.event()
        start.record()
        for _ in range(5):
            fn()
        end.record()
        estimate_ms = start.elapsed_time(end) / 5
        for _ in range(max(1, int(warmup / estimate_ms))):
            fn()
        times = []
        for _ in range(max(1, int(rep / estimate_ms))):
            begin, finish = self.event(), self.event()
            begin.record()
            fn()
            finish.record()
            times.append(begin.elapsed_time(finish))
        assert return_mode == "all"
        return times


@pytest.fixture
def fake_cuda(monkeypatch):
    """Route the CUDA timers' primitives to a FakeGpu; triton's do_bench is the fake's unless a test changes it."""
    import selfattn.measure.timing as timing

    def install(call_ms: float, do_bench=None) -> FakeGpu:
        gpu = FakeGpu(call_ms)
        monkeypatch.setattr(timing, "_event", gpu.event)
        monkeypatch.setattr(timing, "_synchronize", lambda: None)
        monkeypatch.setattr(timing, "_flush_buffer", lambda: torch.empty(4))
        monkeypatch.setattr(timing, "_do_bench_broken", "")
        monkeypatch.setattr(timing, "_do_bench_worked", False)
        monkeypatch.setattr(timing, "_warned", False)
        bench = do_bench or gpu.do_bench
        monkeypatch.setitem(sys.modules, "triton", types.SimpleNamespace())
        monkeypatch.setitem(sys.modules, "triton.testing", types.SimpleNamespace(do_bench=bench))
        return gpu

    return install


@pytest.mark.parametrize("error", [
    subprocess.CalledProcessError(1, ["gcc", "cuda_utils.c"]),
    RuntimeError("Failed to find C compiler. Please specify via CC environment variable."),
], ids=["CalledProcessError", "no-C-compiler"])
def test_first_do_bench_failure_switches_the_process_to_cuda_events_once(fake_cuda, error):
    tries = []

    def broken_do_bench(fn, **kwargs):
        tries.append(kwargs)
        raise error  # triton builds its driver on first use, before fn runs

    gpu = fake_cuda(0.1, do_bench=broken_do_bench)
    with pytest.warns(RuntimeWarning, match="do_bench failed on first use.*cuda_events"):
        first = time_call(gpu.fn, "cuda", 0.1, 0.0001)
    assert first.timer == "cuda_events" and first.samples >= MIN_SAMPLES
    assert first.median_ms == pytest.approx(0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: no second warning, no second try
        second = time_call(gpu.fn, "cuda", 0.1, 0.0001)
    assert second.timer == "cuda_events" and len(tries) == 1


def test_do_bench_failure_after_it_worked_is_the_points_own(fake_cuda):
    gpu = fake_cuda(0.1)
    assert time_call(gpu.fn, "cuda", 0.1, 0.0001).timer == "do_bench"
    sys.modules["triton.testing"].do_bench = lambda fn, **kwargs: (_ for _ in ()).throw(RuntimeError("kernel failed"))
    with pytest.raises(RuntimeError, match="kernel failed"):
        time_call(gpu.fn, "cuda", 0.1, 0.0001)


def test_out_of_memory_in_the_first_do_bench_does_not_switch_timers(fake_cuda):
    def oom(fn, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    gpu = fake_cuda(0.1, do_bench=oom)
    with pytest.raises(torch.OutOfMemoryError):
        time_call(gpu.fn, "cuda", 0.1, 0.0001)
    sys.modules["triton.testing"].do_bench = gpu.do_bench
    assert time_call(gpu.fn, "cuda", 0.1, 0.0001).timer == "do_bench"


def test_without_triton_cuda_is_timed_with_events(fake_cuda, monkeypatch):
    gpu = fake_cuda(0.1)
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton raises ImportError
    monkeypatch.setitem(sys.modules, "triton.testing", None)
    with pytest.warns(RuntimeWarning, match="triton is not installed"):
        timing = time_call(gpu.fn, "cuda", 0.1, 0.0001)
    assert timing.timer == "cuda_events" and timing.median_ms == pytest.approx(0.1)


@pytest.mark.parametrize("call_ms, timing_s, timer", [
    (0.05, 0.1, "do_bench"),  # 2000 calls in timing_s: do_bench, whose own calls are cheap
    (20.0, 0.1, "cuda_events"),  # 5 calls in timing_s: do_bench's 7 own calls would cost more than the timing
    (5000.0, 1.0, "cuda_events"),  # slower than timing_s: exactly 1 warm-up + MIN_SAMPLES timed calls
], ids=["fast", "medium", "slow"])
def test_cuda_plan_counts_every_call_the_timer_makes(fake_cuda, call_ms, timing_s, timer):
    from selfattn.measure.timing import plan

    gpu = fake_cuda(call_ms)
    expected = plan("cuda", call_ms / 1e3, timing_s)
    timing = time_call(gpu.fn, "cuda", timing_s, call_ms / 1e3)
    assert timing.timer == expected.timer == timer
    assert timing.samples == expected.timed_calls >= MIN_SAMPLES
    assert gpu.calls == expected.untimed_calls + expected.timed_calls
    if timer == "cuda_events" and call_ms / 1e3 > timing_s:
        assert gpu.calls == 1 + MIN_SAMPLES


def test_slow_cuda_call_slower_than_its_estimate_still_gets_min_samples(fake_cuda):
    # The warm-up said 5 s, the call takes 5.5 s: do_bench's own estimate would give int(15 / 5.5) = 2 samples.
    gpu = fake_cuda(5500.0)
    timing = time_call(gpu.fn, "cuda", 1.0, 5.0)
    assert timing.samples >= MIN_SAMPLES
    assert gpu.calls <= 1 + MIN_SAMPLES  # one warm-up, no estimate calls


def test_cpu_timer_is_labelled_and_its_plan_counts_the_estimate_call():
    from selfattn.measure.timing import plan

    calls = []

    def slow():
        calls.append(None)
        time.sleep(0.03)

    timing = time_cpu(slow, timing_s=0.01, call_s_estimate=0.03)
    expected = plan("cpu", 0.03, 0.01)
    assert timing.timer == "cpu_blocks" == expected.timer
    assert timing.samples >= expected.timed_calls == MIN_SAMPLES
    assert len(calls) == expected.untimed_calls + timing.samples  # blocks of one call: no calibration block


def test_fast_calls_are_blocked_from_the_estimate_and_the_window_is_not_stretched():
    # blocked_autorange estimated its block itself (1 + 10 + 100 + 1000 calls for a 30 us call) and
    # rounded blocks up to 1000 calls: 2.5x the window. Now: one calibration block, then blocks of
    # about CPU_BLOCK_S until the window is covered.
    from selfattn.measure.timing import CPU_BLOCK_S, plan

    calls = []

    def fast():
        calls.append(None)

    call_s = 2e-6  # an estimate the calibration corrects (a list append is faster than this)
    timing = time_cpu(fast, timing_s=0.02, call_s_estimate=call_s)
    expected = plan("cpu", call_s, 0.02)
    assert expected.untimed_calls == round(CPU_BLOCK_S / call_s)  # the calibration block
    assert timing.samples >= 10  # tens of blocks in the window, not three
    per_block = (len(calls) - expected.untimed_calls) / timing.samples
    assert per_block > 1 and per_block == int(per_block)  # every timed block the same size, several calls each
    assert timing.median_ms * 1e3 * per_block < 10 * CPU_BLOCK_S * 1e6  # blocks of about CPU_BLOCK_S, not 1000x it


def test_quantile_is_numpys_linear_quantile_to_the_bit():
    from selfattn.measure.timing import quantile

    rng = np.random.default_rng(0)
    for n in [1, 2, 3, 4, 5, 7, 10, 31, 64]:
        for _ in range(50):
            values = np.sort(rng.lognormal(0, 2, n) * 10 ** rng.uniform(-3, 3))
            for q in (0.0, 0.2, 0.5, 0.8, 1.0):
                assert quantile(values, q) == np.quantile(values, q), (n, q)
    assert quantile(np.array([1.0, 3.0]), 0.5) == 2.0 != quantile(np.array([1.0, 3.0]), 0.8)  # it interpolates
