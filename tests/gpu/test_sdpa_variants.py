"""sdpa's ALiBi and sink on a real GPU: the float bias keeps flash out, the kernel the row names is the one
torch ran, the memory model's choice of kernel (efficient, or math with GQA) is torch's, the peak is
predicted, and the result is exact against float64 within the dtype's rounding.
"""

from __future__ import annotations

import pytest
import torch

from selfattn.backends import sdpa
from selfattn.inputs import make_qkv
from selfattn.masks import Masks
from selfattn.measure import Budget, measure_point
from selfattn.point import Point
from selfattn.reference import attention_reference

pytestmark = pytest.mark.gpu

OPS = {  # aten op -> kernel, as tests/gpu/test_sdpa_dispatch.py reads them
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_flash_attention_forward": "flash",
    "aten::_efficient_attention_forward": "efficient",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_attention_math": "math",
}
BUDGET = Budget(timing_s=0.02, accuracy_rows=16, measure_device_peak=False)
VARIANTS = {"alibi": dict(alibi=True), "sink": dict(sink=0.5), "alibi-sink-causal": dict(alibi=True, sink=-1.0, causal=True)}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("kv_heads", [8, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_the_bias_runs_the_kernel_kernel_ran_names_and_is_exact(variant, kv_heads, dtype):
    q, k, v = make_qkv(2, 8, 1000, 1000, 64, dtype=dtype, device="cuda", seed=1, kv_heads=kv_heads)
    masks = Masks(**VARIANTS[variant])
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof, torch.no_grad():
        out = sdpa.attention(q, k, v, masks=masks, scale=0.125)
        torch.cuda.synchronize()
    ran = {OPS[e.name] for e in prof.events() if e.name in OPS}
    named = sdpa.kernel_ran(q, k, v, masks=masks, scale=0.125)
    assert ran == {named} and named != "flash", (named, sorted(ran))
    ref = attention_reference(q, k, v, scale=0.125, **VARIANTS[variant])
    tolerance = 2e-2 if dtype == torch.bfloat16 else 2e-5
    assert (out.double() - ref).abs().max() < tolerance


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
@pytest.mark.parametrize("kv_heads", [8, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize("variant", ["alibi", "sink"])
def test_the_bias_rows_kernel_is_the_models_and_its_peak_is_predicted(variant, kv_heads, mode):
    point = Point(backend="sdpa", device="cuda", precision="bf16", batch=1, heads=8, kv_heads=kv_heads,
                  seq_len=4096, head_dim=64, mode=mode, **VARIANTS[variant])
    row = measure_point(point, BUDGET)
    assert row.status == "ok", row.error
    assert (row.kernel == "auto:math") == sdpa.auto_runs_math(point, "cuda"), row.kernel
    assert 0.7 * row.predicted_mem_bytes <= row.peak_mem_bytes <= 1.15 * row.predicted_mem_bytes, (
        row.peak_mem_bytes, row.predicted_mem_bytes)
