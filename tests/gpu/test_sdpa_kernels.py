"""Each SDPA kernel forced on a real GPU: it runs, it is the kernel asked for, it is accurate.

The profiler names the aten op torch dispatched to, so a silent fallback (say flash asked,
math run) fails here instead of mislabelling every sdpa row of a sweep.
"""

from __future__ import annotations

import pytest
import torch

from selfattn import attention
from selfattn.inputs import make_qkv
from selfattn.measure import Budget, measure_point
from selfattn.point import Point
from selfattn.reference import attention_reference

pytestmark = pytest.mark.gpu

# The aten op each forced kernel must dispatch to.
KERNEL_OPS = {
    "flash": "aten::_scaled_dot_product_flash_attention",
    "efficient": "aten::_scaled_dot_product_efficient_attention",
    "math": "aten::_scaled_dot_product_attention_math",
    "cudnn": "aten::_scaled_dot_product_cudnn_attention",
}
BUDGET = Budget(timing_s=0.02, accuracy_rows=32, measure_device_peak=False)


def _capability() -> tuple[int, int]:
    return torch.cuda.get_device_capability()


def _require_cudnn_where_expected(kernel: str) -> None:
    # cuDNN attention is what torch prefers on Hopper (9.0) and newer; older GPUs may lack it.
    if kernel == "cudnn" and _capability() < (9, 0):
        pytest.skip(f"cudnn attention is only required on capability >= 9.0, this GPU is {_capability()}")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("kernel", list(KERNEL_OPS))
def test_forced_kernel_runs_is_dispatched_and_matches_reference(kernel: str, causal: bool) -> None:
    _require_cudnn_where_expected(kernel)
    q, k, v = make_qkv(2, 4, 1024, 1024, 64, dtype=torch.bfloat16, device="cuda", seed=3)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = attention(q, k, v, backend="sdpa", causal=causal, kernel=kernel)
        torch.cuda.synchronize()
    ops = {event.name for event in prof.events()}
    assert KERNEL_OPS[kernel] in ops, f"kernel={kernel} dispatched to {sorted(o for o in ops if 'scaled_dot' in o)}"
    others = {name for other, name in KERNEL_OPS.items() if other != kernel}
    assert not (ops & others), f"kernel={kernel} also ran {sorted(ops & others)}"

    ref = attention_reference(q, k, v, causal=causal)
    rel_rms = ((out.double() - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()
    assert out.dtype == torch.bfloat16 and out.shape == q.shape
    assert rel_rms < 2e-2, f"kernel={kernel}: relative RMS error {rel_rms:.2e} vs float64"  # bf16: ~4e-3; a wrong kernel: > 0.1


@pytest.mark.parametrize("kernel", list(KERNEL_OPS))
def test_forced_kernel_row_is_ok_and_labelled(kernel: str) -> None:
    _require_cudnn_where_expected(kernel)
    point = Point(backend="sdpa", backend_options={"kernel": kernel}, precision="bf16", device="cuda",
                  heads=4, seq_len=2048, head_dim=64, mode="fwd_bwd")
    row = measure_point(point, BUDGET)
    assert row.status == "ok", row.error
    assert row.kernel == kernel
    assert row.time_ms > 0 and row.peak_mem_bytes > 0
    assert row.rel_rms_err < 2e-2 and row.grad_rel_rms_err < 1e-1


def test_flash_in_fp32_is_an_unsupported_row_not_a_silent_fallback() -> None:
    point = Point(backend="sdpa", backend_options={"kernel": "flash"}, precision="fp32", device="cuda",
                  heads=2, seq_len=512, head_dim=64)
    row = measure_point(point, BUDGET)
    assert row.status == "unsupported", (row.status, row.error)
    assert "flash" in row.error and row.time_ms is None
