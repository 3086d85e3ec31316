"""chunked's compute scheme for fp16/bf16: fp32 copies (the CPU default) or input-dtype matmuls
accumulating in fp32 (the CUDA default, like for like with the fused kernels)."""

from __future__ import annotations

import pytest
import torch

import selfattn
from selfattn.backends.chunked import DEFAULT_CHUNKS, predict_mem_bytes
from selfattn.measure import Budget, measure_point
from selfattn.point import Point
from selfattn.backends.capability import Ask
from selfattn.backends.resolved import resolve


def _resolved(name, options=None, device="cpu", dtype=torch.float32):
    """The back end `name` with `options`, resolved for a call on `device` in `dtype` (the one resolver)."""
    return resolve(name, options, Ask(torch.device(device).type, "fp32"), dtype, device=device)


# fp16/bf16 against float64, forward and backward, on a masked GQA problem (FlashAttention-style bounds)
TOLERANCE = {torch.float16: (3e-3, 1e-2), torch.bfloat16: (3e-2, 6e-2)}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("compute", ["fp32", "input"])
def test_both_schemes_match_float64(dtype, compute):
    q, k, v = selfattn.make_qkv(2, 4, 77, 93, 32, dtype=dtype, kv_heads=2)
    masks = dict(causal=True, window=40, key_lengths=torch.tensor([93, 50]))
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = selfattn.attention(*leaves, backend="chunked", compute=compute, q_chunk=16, kv_chunk=32, **masks)
    ref_leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    ref = selfattn.attention_reference(*ref_leaves, **masks)
    upstream = torch.randn_like(ref)
    grads = torch.autograd.grad(out, leaves, upstream.to(dtype))
    ref_grads = torch.autograd.grad(ref, ref_leaves, upstream)
    out_tol, grad_tol = TOLERANCE[dtype]
    assert out.dtype == dtype and (out.double() - ref).abs().max() < out_tol
    assert max((g.double() - r).abs().max() for g, r in zip(grads, ref_grads)) < grad_tol


def test_auto_is_input_on_cuda_and_fp32_on_cpu_and_the_label_says_so():
    assert _resolved("chunked", {}, "cpu", torch.bfloat16).options["compute"] == "fp32"
    assert _resolved("chunked", {}, "cuda", torch.bfloat16).options["compute"] == "input"
    assert _resolved("chunked", {"compute": "input"}, "cuda", torch.float32).options["compute"] == "fp32"  # one scheme
    assert _resolved("chunked", {}, device="cuda", dtype=torch.float16).label == "auto-mm_input"
    assert _resolved("chunked", {}, device="cpu", dtype=torch.float16).label == "auto"


def test_input_scheme_skips_the_fp32_copies_in_model_and_measurement():
    point = Point(backend="chunked", backend_options={"compute": "input"}, precision="bf16", device="cpu",
                  seq_len=1024, heads=4)
    copies = predict_mem_bytes(point, {"compute": "fp32"}, "cpu")
    no_copies = predict_mem_bytes(point, {"compute": "input"}, "cpu")
    assert no_copies < copies
    budget = Budget(timing_s=0.02, accuracy_rows=8, measure_device_peak=False)
    row = measure_point(point, budget)
    fp32_row = measure_point(Point(**{**point.__dict__, "backend_options": {"compute": "fp32"}}), budget)
    assert row.status == fp32_row.status == "ok" and row.kernel == "auto-mm_input:q{}-kv{}".format(*DEFAULT_CHUNKS)
    assert row.peak_alloc_bytes < fp32_row.peak_alloc_bytes  # no fp32 copies of Q, K, V


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_cuda_default_runs_tensor_core_matmuls_within_the_tolerance(dtype):
    q, k, v = selfattn.make_qkv(1, 8, 2048, 2048, 64, dtype=dtype, device="cuda")
    out = selfattn.attention(q, k, v, backend="chunked", causal=True)
    ref = selfattn.attention_reference(q, k, v, causal=True)
    assert (out.double() - ref).abs().max() < TOLERANCE[dtype][0]
