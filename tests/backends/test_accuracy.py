"""Every back end against the float64 reference, values and gradients, on awkward shapes.

fp64 and fp32 must match the reference to a tight absolute tolerance. In fp16/bf16 the
FlashAttention test rule applies: a back end's error against the fp64 reference is at most
twice the naive back end's error in the same dtype plus a small epsilon (naive itself gets
a loose absolute bound, so the rule cannot pass by naive being broken).
"""

from __future__ import annotations

import functools

import pytest
import torch

import selfattn
from selfattn.inputs import make_qkv

# (batch, heads, q_len, seq_len, head_dim): lengths from {1, 7, 113, 256, 1000}, head_dim from
# {16, 59, 64, 128}, q_len != seq_len both ways, and none divisible by the chunk sizes below.
SHAPES = [
    (1, 2, 113, 256, 59),
    (2, 1, 1, 1000, 64),  # a decode step: one query sees every key
    (1, 2, 7, 7, 16),
    (1, 1, 256, 1000, 128),
    (1, 1, 1000, 1000, 16),
    (1, 1, 1000, 113, 64),  # more queries than keys: only without a causal mask
]
# Chunk sizes that divide none of the lengths, so every ragged edge is exercised.
VARIANTS = {
    "naive": {},
    "naive-upcast": {"upcast_softmax": True},
    "sdpa": {},
    "sdpa-math": {"kernel": "math"},
    "sdpa-flash": {"kernel": "flash"},
    "chunked": {"q_chunk": 48, "kv_chunk": 80},
}
DTYPES = [torch.float64, torch.float32, torch.bfloat16, torch.float16]
# max |out - ref| allowed outright (fp64/fp32), and naive's own loose bound in low precision
ABS_TOL = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 5e-2, torch.float16: 1e-2}
GRAD_ABS_TOL = {torch.float64: 1e-11, torch.float32: 2e-5, torch.bfloat16: 1e-1, torch.float16: 2e-2}
FA_EPS = {torch.bfloat16: 1e-3, torch.float16: 2e-4}


def precision_name(dtype: torch.dtype) -> str:
    """fp64 | fp32 | bf16 | fp16: the precision names of the sweep, for test ids."""
    return {torch.float64: "fp64", torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


def case_id(shape, dtype, causal) -> str:
    b, h, lq, l, d = shape
    return f"B{b}-H{h}-Lq{lq}-L{l}-D{d}-{precision_name(dtype)}-{'causal' if causal else 'full'}"


def _cases():
    """Every variant x dtype x causal once; shapes rotate so each one meets every axis value."""
    cases, i = [], 0
    for variant in VARIANTS:
        for dtype in DTYPES:
            for causal in (False, True):
                shape = SHAPES[i % len(SHAPES)]
                i += 1
                if causal and shape[2] > shape[3]:
                    shape = SHAPES[i % len(SHAPES)]  # causal needs q_len <= seq_len
                    i += 1
                cases.append(pytest.param(variant, shape, dtype, causal, id=f"{variant}-{case_id(shape, dtype, causal)}"))
    return cases


@functools.lru_cache(maxsize=None)
def _errors(variant: str, shape, dtype, causal):
    """(max abs error of the output, max abs error over dq, dk, dv) against the fp64 reference."""
    q, k, v = make_qkv(*shape, dtype=dtype, seed=sum(shape), requires_grad=True)
    grad_out = torch.randn(q.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    backend = variant.split("-")[0]
    out = selfattn.attention(q, k, v, backend=backend, causal=causal, **VARIANTS[variant])
    assert out.dtype == dtype and out.shape == q.shape
    grads = torch.autograd.grad(out, (q, k, v), grad_out.to(dtype))
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = selfattn.attention_reference(q64, k64, v64, causal=causal)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), grad_out)
    out_err = (out.double() - ref).abs().max().item()
    grad_err = max((g.double() - r).abs().max().item() for g, r in zip(grads, ref_grads))
    assert all(torch.isfinite(g).all() for g in grads)
    return out_err, grad_err


@pytest.mark.parametrize("variant, shape, dtype, causal", _cases())
def test_matches_float64_reference(variant, shape, dtype, causal):
    out_err, grad_err = _errors(variant, shape, dtype, causal)
    if dtype in (torch.float64, torch.float32) or variant.startswith("naive"):
        assert out_err <= ABS_TOL[dtype], f"output max abs error {out_err:.3g}"
        assert grad_err <= GRAD_ABS_TOL[dtype], f"gradient max abs error {grad_err:.3g}"
    else:  # the FlashAttention rule, against naive on the same inputs
        naive_out_err, naive_grad_err = _errors("naive", shape, dtype, causal)
        assert out_err <= 2 * naive_out_err + FA_EPS[dtype], f"{out_err:.3g} vs naive {naive_out_err:.3g}"
        assert grad_err <= 2 * naive_grad_err + FA_EPS[dtype], f"grad {grad_err:.3g} vs naive {naive_grad_err:.3g}"


@pytest.mark.parametrize("backend", ["naive", "sdpa", "chunked"])
@pytest.mark.parametrize("q_len, seq_len", [(1, 7), (113, 256), (7, 7)])
def test_causal_mask_is_bottom_right_aligned(backend, q_len, seq_len):
    """Query i sees keys j <= i + seq_len - q_len: the last query sees all keys, even when q_len < seq_len."""
    q, k, v = make_qkv(1, 1, q_len, seq_len, 16, dtype=torch.float64, seed=3)
    opts = {"q_chunk": 5, "kv_chunk": 9} if backend == "chunked" else {}
    out = selfattn.attention(q, k, v, backend=backend, causal=True, **opts)
    full = selfattn.attention(q, k, v, backend=backend, causal=False, **opts)
    torch.testing.assert_close(out[:, :, -1], full[:, :, -1])  # last query: nothing hidden
    if q_len > 1:  # the first query sees only keys 0..seq_len-q_len: its output is their mix
        visible = seq_len - q_len + 1
        first = selfattn.attention(q[:, :, :1], k[:, :, :visible], v[:, :, :visible], backend="naive")
        torch.testing.assert_close(out[:, :, :1], first)


def test_layer_matches_reference_composition():
    """The layer is W_O(concat heads(attention(X W_Q, X W_K, X W_V)))."""
    layer = selfattn.MultiHeadSelfAttention(48, 4, backend="chunked", causal=True, q_chunk=16, kv_chunk=24).double()
    x = selfattn.make_x(2, 37, 48, dtype=torch.float64, seed=5)
    q, k, v = layer.project_qkv(x)
    assert q.shape == (2, 4, 37, 12)
    ref = selfattn.attention_reference(q, k, v, causal=True).transpose(1, 2).reshape(2, 37, 48)
    torch.testing.assert_close(layer(x), layer.w_o(ref))


def test_chunked_rows_hidden_in_a_diagonal_block_stay_finite():
    """Chunk sizes that leave some query rows of a diagonal block with no visible key in it."""
    q, k, v = make_qkv(1, 2, 10, 23, 8, dtype=torch.float32, seed=6)
    for q_chunk, kv_chunk in ((4, 3), (3, 16), (1, 1), (10, 23)):
        out = selfattn.attention(q, k, v, backend="chunked", causal=True, q_chunk=q_chunk, kv_chunk=kv_chunk)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out.double(), selfattn.attention_reference(q, k, v, causal=True), atol=1e-5, rtol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=precision_name)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_cuda_backends_match_reference(dtype, causal):
    """On CUDA: every back end (and every sdpa kernel that runs) within the FlashAttention rule."""
    q, k, v = make_qkv(2, 4, 113, 256, 64, dtype=dtype, device="cuda", seed=1)
    ref = selfattn.attention_reference(q, k, v, causal=causal)
    naive_err = (selfattn.attention(q, k, v, backend="naive", causal=causal).double() - ref).abs().max().item()
    eps = {torch.float32: 1e-4, torch.bfloat16: 1e-3, torch.float16: 2e-4}[dtype]
    variants = [("chunked", {"q_chunk": 48, "kv_chunk": 80}), ("sdpa", {})]
    variants += [("sdpa", {"kernel": kernel}) for kernel in ("flash", "efficient", "math", "cudnn")]
    for backend, options in variants:
        try:
            out = selfattn.attention(q, k, v, backend=backend, causal=causal, **options)
        except selfattn.Unsupported:
            continue  # a forced kernel this GPU/dtype cannot run: refused, never a silent fallback
        err = (out.double() - ref).abs().max().item()
        assert err <= 2 * naive_err + eps, f"{backend} {options}: {err:.3g} vs naive {naive_err:.3g}"
