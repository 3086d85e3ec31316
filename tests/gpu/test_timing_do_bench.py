"""The harness's CUDA time agrees with `triton.testing.do_bench` on the same torch ops within 5%.

The reference times the bare torch calls (no selfattn code in the loop), so harness overhead
or a timing mistake (warm-up counted, no synchronisation, wrong units) shows up as a gap.
Calls are a few milliseconds, far above launch overhead. GPU clocks can drift between two
runs, so each side is measured twice and the closest pair is compared.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from selfattn.inputs import make_qkv
from selfattn.measure import Budget, measure_point
from selfattn.point import Point

pytestmark = pytest.mark.gpu

CASES = {
    # back end, precision, batch, heads, seq_len, head_dim
    "sdpa-bf16-B4-H16-L8192-D128": ("sdpa", "bf16", 4, 16, 8192, 128),
    "naive-fp32-B1-H8-L8192-D64": ("naive", "fp32", 1, 8, 8192, 64),
}


def _bare_call(backend: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    scale = q.shape[-1] ** -0.5
    if backend == "sdpa":
        return lambda: F.scaled_dot_product_attention(q, k, v, scale=scale)
    return lambda: torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1) @ v


@pytest.mark.parametrize("case", list(CASES))
def test_time_ms_agrees_with_do_bench_within_5_percent(case: str) -> None:
    do_bench = pytest.importorskip("triton.testing").do_bench
    backend, precision, b, h, n, d = CASES[case]
    point = Point(backend=backend, precision=precision, device="cuda", batch=b, heads=h, seq_len=n, head_dim=d)
    budget = Budget(timing_s=0.3, accuracy_rows=16, measure_device_peak=False)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    q, k, v = make_qkv(b, h, n, n, d, dtype=dtype, device="cuda", seed=point.seed)
    bare = _bare_call(backend, q, k, v)

    harness_ms, bench_ms = [], []
    with torch.no_grad():
        for _ in range(2):
            row = measure_point(point, budget)
            assert row.status == "ok", row.error
            harness_ms.append(row.time_ms)
            bench_ms.append(float(do_bench(bare, warmup=75, rep=300, return_mode="median")))
    gap = min(abs(a - r) / r for a in harness_ms for r in bench_ms)
    assert gap <= 0.05, f"harness {harness_ms} ms vs do_bench {bench_ms} ms"
    assert bench_ms[0] > 0.5, "the case must take well over launch overhead to be a fair comparison"


def test_rows_say_their_timer_and_a_slow_point_stays_within_max_point_s() -> None:
    # Fast calls: do_bench (triton is on every CUDA image we run). A slow point, guarded on its
    # measured warm-up: everything it runs (memory call, the timer's own calls, 3 timed calls)
    # must fit max_point_s; with do_bench's 1 + 5 estimate calls it took about twice as long.
    pytest.importorskip("triton.testing")
    fast = measure_point(Point(backend="sdpa", precision="bf16", device="cuda", heads=8, seq_len=2048),
                         Budget(timing_s=0.1, accuracy_rows=16, measure_device_peak=False))
    assert fast.status == "ok" and fast.timer == "do_bench" and fast.time_samples >= 10
    point = Point(backend="naive", precision="fp32", device="cuda", batch=4, heads=16, seq_len=8192, head_dim=64)
    probe = measure_point(point, Budget(timing_s=0.001, accuracy_rows=16, measure_device_peak=False))
    assert probe.status == "ok", probe.error
    call_s = probe.time_ms / 1e3
    budget = Budget(timing_s=0.001, accuracy_rows=16, measure_device_peak=False, max_point_s=8 * call_s)
    row = measure_point(point, budget)
    assert row.status == "ok", row.error
    assert row.timer == "cuda_events" and row.time_samples >= 3
    assert row.measure_s <= budget.max_point_s
