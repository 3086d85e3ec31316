"""sdpa's `auto` on a real GPU: the kernel its rows name is the one torch ran, and the memory
model's choice of kernel (fused or math) is torch's.

The profiler names the aten op a call reached; kernel_ran must name the same kernel, including
for a lower-right causal mask (q_len != seq_len), which torch's CausalBias dispatches itself.
"""

from __future__ import annotations

import pytest
import torch

from selfattn.backends import sdpa
from selfattn.inputs import make_qkv
from selfattn.masks import Masks
from selfattn.measure import Budget, measure_point
from selfattn.point import Point

pytestmark = pytest.mark.gpu

OPS = {  # aten op -> kernel
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_flash_attention_forward": "flash",
    "aten::_efficient_attention_forward": "efficient",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_attention_math": "math",
}
BUDGET = Budget(timing_s=0.02, accuracy_rows=8, measure_device_peak=False)


def _ran(q, k, v, masks) -> set[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof, torch.no_grad():
        sdpa.attention(q, k, v, masks=masks, scale=q.shape[-1] ** -0.5)
        torch.cuda.synchronize()
    return {OPS[e.name] for e in prof.events() if e.name in OPS}


@pytest.mark.parametrize("kv_heads", [8, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("q_len", [1, 4, 256], ids=lambda n: f"M{n}")
def test_lower_right_causal_kernel_ran_is_the_kernel_torch_ran(q_len, dtype, kv_heads):
    q, k, v = make_qkv(2, 8, q_len, 2048, 64, dtype=dtype, device="cuda", seed=1, kv_heads=kv_heads)
    masks = Masks(causal=True)
    named, ran = sdpa.kernel_ran(q, k, v, masks=masks, scale=0.125), _ran(q, k, v, masks)
    assert ran == {named}, f"kernel_ran says {named}, the profiler saw {sorted(ran)}"
    if dtype != torch.float32:  # CausalBias calls flash directly, though flash refuses non-square is_causal
        assert named == "flash"


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_gqa_auto_kernel_is_the_memory_models_and_its_peak_is_predicted(precision):
    point = Point(backend="sdpa", device="cuda", precision=precision, batch=1, heads=8, kv_heads=2,
                  seq_len=4096, head_dim=64, causal=True)
    row = measure_point(point, BUDGET)
    assert row.status == "ok", row.error
    math = sdpa.auto_runs_math(point, "cuda")
    assert (row.kernel == "auto:math") == math, (row.kernel, math)  # the model and torch agree
    assert precision == "bf16" or math
    if not math:
        return  # fused kernels' peaks: tests/gpu/test_memory_prediction.py
    # math materializes B*H*n^2 scores and repeats K/V: the model must not be 2x low (or high)
    assert 0.7 * row.predicted_mem_bytes <= row.peak_mem_bytes <= 1.15 * row.predicted_mem_bytes, (
        row.peak_mem_bytes, row.predicted_mem_bytes)
