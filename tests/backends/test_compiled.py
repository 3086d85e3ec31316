"""Compiled back ends against the float64 reference: flex, and naive and chunked with compile=True.

Compiling is slow (seconds per graph on a CPU), so CI runs every mask combination and kv_heads
of tests/backends/test_masks.py for flex (forward: inductor's CPU flex has no backward) and a
smaller set, forward and backward, for the compile option. `pytest --compile-matrix` adds the
whole matrix: every mask case for the compile option, and test_accuracy's awkward shapes in
every dtype for all three (README: "Slow tests").
"""

from __future__ import annotations

import pytest
import torch

import selfattn
from selfattn.compile import graphs_compiled
from test_accuracy import ABS_TOL, FA_EPS, SHAPES, case_id
from test_masks import CASES, _id, _inputs
from selfattn.backends.capability import Ask
from selfattn.backends.resolved import resolve


def _resolved(name, options=None, device="cpu", dtype=torch.float32):
    """The back end `name` with `options`, resolved for a call on `device` in `dtype` (the one resolver)."""
    return resolve(name, options, Ask(torch.device(device).type, "fp32"), dtype, device=device)


COMPILED = {  # variant -> (back end, options)
    "flex": ("flex", {}),
    "naive-compile": ("naive", {"compile": True}),
    # 32 x 16 blocks: 53 keys still make 2 x 4 blocks with ragged edges, and windows and documents still cross
    # block borders, but the unrolled graph inductor compiles has 8 blocks instead of 28 (16 x 8), which made
    # these the suite's slowest tests; the uncompiled 16 x 8 blocks stay in test_masks.py.
    "chunked-compile": ("chunked", {"compile": True, "q_chunk": 32, "kv_chunk": 16}),
}
# What CI runs for the compile option: the square shape with every kind of mask, each with and
# without GQA (the full CASES are under --compile-matrix).
CI_CASES = [case for case in CASES if case[:2] == (53, 53) and (case[3] in (None, 5)) and not (case[4] and case[5])]
FP32_ATOL = 1e-5


def _masks(case, dtype):
    q_len, seq_len, causal, window, pad, documents, kv_heads = case
    q, k, v, key_lengths, document_ids = _inputs(2, 4, kv_heads, q_len, seq_len, 16, dtype, pad, documents)
    return (q, k, v), dict(causal=causal, window=window, key_lengths=key_lengths, document_ids=document_ids)


def _check_forward(variant, case, dtype=torch.float32, atol=FP32_ATOL):
    backend, options = COMPILED[variant]
    (q, k, v), masks = _masks(case, dtype)
    with torch.no_grad():
        out = selfattn.attention(q, k, v, backend=backend, **masks, **options)
    ref = selfattn.attention_reference(q.double(), k.double(), v.double(), **masks)
    assert out.shape == q.shape and out.dtype == dtype and torch.isfinite(out).all()
    assert (out.double() - ref).abs().max().item() <= atol


def _check_forward_backward(variant, case, dtype=torch.float64, atol=1e-12):
    backend, options = COMPILED[variant]
    (q, k, v), masks = _masks(case, dtype)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = selfattn.attention(*leaves, backend=backend, **masks, **options)
    ref_leaves = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    ref = selfattn.attention_reference(*ref_leaves, **masks)
    assert torch.isfinite(out).all() and (out.double() - ref).abs().max().item() <= atol
    upstream = torch.randn(ref.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    grads = torch.autograd.grad(out, leaves, upstream.to(dtype))
    ref_grads = torch.autograd.grad(ref, ref_leaves, upstream)
    for got, want in zip(grads, ref_grads):
        assert torch.isfinite(got).all() and (got.double() - want).abs().max().item() <= atol


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_flex_matches_float64_for_every_mask_and_kv_heads(case):
    _check_forward("flex", case)


@pytest.mark.parametrize("variant", ["naive-compile", "chunked-compile"])
@pytest.mark.parametrize("case", CI_CASES, ids=_id)
def test_compile_option_matches_float64_forward_and_backward(variant, case):
    _check_forward_backward(variant, case)


@pytest.mark.compile_matrix
@pytest.mark.parametrize("variant", ["naive-compile", "chunked-compile"])
@pytest.mark.parametrize("case", [c for c in CASES if c not in CI_CASES], ids=_id)
def test_compile_option_every_mask_case(variant, case):
    _check_forward_backward(variant, case)


def _shape_cases():
    for variant in COMPILED:
        for shape in SHAPES:
            for dtype in (torch.float64, torch.float32, torch.bfloat16, torch.float16):
                for causal in (False, True):
                    if causal and shape[2] > shape[3]:
                        continue
                    yield pytest.param(variant, shape, dtype, causal, id=f"{variant}-{case_id(shape, dtype, causal)}")


@pytest.mark.compile_matrix
@pytest.mark.parametrize("variant, shape, dtype, causal", list(_shape_cases()))
def test_compiled_awkward_shapes_every_dtype(variant, shape, dtype, causal):
    """test_accuracy's shapes and tolerances (the FlashAttention rule in fp16/bf16, against naive)."""
    backend, options = COMPILED[variant]
    if backend == "flex" and dtype == torch.float64:
        pytest.skip("flex on a CPU: no fp64")
    b, h, q_len, seq_len, d = shape
    q, k, v = selfattn.make_qkv(b, h, q_len, seq_len, d, dtype=dtype, seed=sum(shape))
    with torch.no_grad():
        out = selfattn.attention(q, k, v, backend=backend, causal=causal, **options)
        naive = selfattn.attention(q, k, v, backend="naive", causal=causal)
    ref = selfattn.attention_reference(q.double(), k.double(), v.double(), causal=causal)
    err = (out.double() - ref).abs().max().item()
    if dtype in (torch.float64, torch.float32):
        assert err <= max(ABS_TOL[dtype], FP32_ATOL if backend == "flex" else 0)
    else:
        naive_err = (naive.double() - ref).abs().max().item()
        assert err <= 2 * naive_err + FA_EPS[dtype], f"{err:.3g} vs naive {naive_err:.3g}"


def test_same_shape_reuses_compiled_code_and_new_masks_do_not_recompile():
    """A second call of one shape, with new tensors and new mask values, compiles nothing."""
    case = (53, 53, True, 5, True, False, 1)
    _check_forward("flex", case)
    before = graphs_compiled()
    (q, k, v), masks = _masks(case, torch.float32)
    masks["key_lengths"] = masks["key_lengths"] - 1  # other padding: another block mask, same shapes
    with torch.no_grad():
        selfattn.attention(q * 2, k, v, backend="flex", **masks)
    assert graphs_compiled() == before


def test_more_shapes_than_dynamos_default_limit_all_compile():
    """dynamo stops compiling a function after 8 graphs and then runs it eagerly, silently; a sweep over
    ten sizes must get ten compiled graphs instead (selfattn/compile.py raises the limit)."""
    before = graphs_compiled()
    for n in range(21, 31):
        q, k, v = selfattn.make_qkv(1, 1, n, n, 8, seed=n)
        with torch.no_grad():
            out = selfattn.attention(q, k, v, backend="naive", compile=True)
        torch.testing.assert_close(out.double(), selfattn.attention_reference(q, k, v), atol=1e-5, rtol=0)
    assert graphs_compiled() - before == 10


def test_flex_refuses_what_its_cpu_kernel_cannot_run():
    q, k, v = selfattn.make_qkv(1, 2, 16, 16, 8, dtype=torch.float64)
    with pytest.raises(selfattn.Unsupported, match=r"precision fp64 on cpu \(declared: fp32, fp16, bf16\)"):
        selfattn.attention(q, k, v, backend="flex")
    q, k, v = (t.float().requires_grad_(True) for t in (q, k, v))
    with pytest.raises(selfattn.Unsupported, match="no backward"):
        selfattn.attention(q, k, v, backend="flex")


def test_flex_without_a_cpp_compiler_is_unsupported_not_an_error(monkeypatch):
    from selfattn.backends import available_backends, flex

    monkeypatch.setattr(flex, "_cpp_compiler", lambda: None)
    assert "flex" not in available_backends("cpu")
    q, k, v = selfattn.make_qkv(1, 2, 16, 16, 8)
    with pytest.raises(selfattn.Unsupported, match="no C\\+\\+ compiler"):
        selfattn.attention(q, k, v, backend="flex")


def test_compile_is_an_option_and_a_kernel_label():
    assert _resolved("naive", {"compile": True}).label == "materialized-compiled"
    assert _resolved("chunked", {"compile": True}).label.endswith("-compiled")
    assert _resolved("flex").label == "compiled"
    assert _resolved("flex").backend.compiles({}) and not _resolved("naive").backend.compiles({"compile": False})
    with pytest.raises(ValueError, match="compile: expected true or false"):
        selfattn.attention(*selfattn.make_qkv(1, 1, 4, 4, 4), backend="naive", compile="yes")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("backend,options", [("flex", {}), ("naive", {"compile": True}), ("chunked", {"compile": True})],
                         ids=["flex", "naive-compiled", "chunked-compiled"])
def test_cuda_compiled_back_ends_match_reference_forward_and_backward(backend, options, dtype):
    """On CUDA (triton): flex with its backward, and the compile option, within the FlashAttention rule
    against naive in the same dtype; padding, a window and GQA together. One compiled back end per test: three
    compiles (forward and backward each) in one test outran its time limit beside five other compiling workers."""
    q, k, v = selfattn.make_qkv(2, 8, 200, 200, 64, dtype=dtype, device="cuda", seed=4, kv_heads=2)
    masks = dict(causal=True, window=64, key_lengths=torch.tensor([200, 150], device="cuda"))
    upstream = torch.randn(q.shape, generator=torch.Generator().manual_seed(5)).to("cuda", dtype)
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    ref = selfattn.attention_reference(q64, k64, v64, **masks)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), upstream.double())

    def errors(backend, **options):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        out = selfattn.attention(*leaves, backend=backend, **masks, **options)
        grads = torch.autograd.grad(out, leaves, upstream)
        return ((out.double() - ref).abs().max().item(),
                max((g.double() - r).abs().max().item() for g, r in zip(grads, ref_grads)))

    naive_out, naive_grad = errors("naive")
    eps = {torch.float32: 1e-4, torch.bfloat16: 1e-3, torch.float16: 2e-4}[dtype]
    out_err, grad_err = errors(backend, **options)
    assert out_err <= 2 * naive_out + eps, f"{backend} {options}: {out_err:.3g} vs naive {naive_out:.3g}"
    assert grad_err <= 2 * naive_grad + eps, f"{backend} {options} grads: {grad_err:.3g} vs naive {naive_grad:.3g}"
