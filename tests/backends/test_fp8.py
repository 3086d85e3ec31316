"""FP8 attention (selfattn/fp8.py) against an independent float64 emulation: the same scales and the
same rounding, written here from the formats' definitions (round to nearest even on a grid of
MANTISSA_BITS bits, subnormals below the smallest normal exponent, e4m3 saturating at 448, e5m2
overflowing to inf past 61440), not from torch's float8 casts.

Double rounding through float64 is innocuous for one +, -, *, / of fp32 numbers (53 >= 2*24 + 2),
so "divide in float64, round to fp32, round to fp8" is exactly what the fp32 code computes: the
quantizers must agree bit for bit. The attention itself sums in another order than the emulation,
so it must be far closer to the emulation than either is to the exact float64 attention.
"""

from __future__ import annotations

import math

import pytest
import scipy.linalg
import torch

import selfattn
import selfattn.backends
from selfattn import fp8
from selfattn.fp8_formats import FORMAT_MAX, MANTISSA_BITS, MIN_NORMAL_EXPONENT
from selfattn.inputs import add_outliers, make_qkv
from selfattn.backends.capability import Ask
from selfattn.backends.resolved import resolve


def _resolved(name, options=None, device="cpu", dtype=torch.float32):
    """The back end `name` with `options`, resolved for a call on `device` in `dtype` (the one resolver)."""
    return resolve(name, options, Ask(torch.device(device).type, "fp32"), dtype, device=device)


FORMATS = ("e4m3", "e5m2")


def round_fp8(x64: torch.Tensor, fmt: str) -> torch.Tensor:
    """x (float64) rounded to the fp8 format `fmt`, round to nearest even, in float64."""
    a = x64.abs()
    exponent = torch.floor(torch.log2(a.clamp_min(1e-300))).clamp_min(MIN_NORMAL_EXPONENT[fmt])
    ulp = torch.exp2(exponent - MANTISSA_BITS[fmt])
    r = torch.round(a / ulp) * ulp  # torch.round: half to even; a / ulp is exact (a power of two)
    top = FORMAT_MAX[fmt]
    r = r.clamp_max(top) if fmt == "e4m3" else torch.where(r > top, torch.full_like(r, math.inf), r)
    return torch.where(x64.isnan(), x64, torch.copysign(r, x64))


def fp32(x64: torch.Tensor) -> torch.Tensor:
    return x64.to(torch.float32).to(torch.float64)


def scales64(x64: torch.Tensor, fmt: str, scaling: str, block: int) -> torch.Tensor:
    """The scale of every row (..., L, 1), by a plain loop over blocks."""
    if scaling == "none":
        return torch.ones(*x64.shape[:-1], 1, dtype=torch.float64)
    if scaling == "tensor":
        amax = x64.abs().max().expand(*x64.shape[:-1], 1)
    else:
        amax = torch.empty(*x64.shape[:-1], 1, dtype=torch.float64)
        for start in range(0, x64.shape[-2], block):
            rows = slice(start, start + block)
            amax[..., rows, :] = x64[..., rows, :].abs().amax(dim=(-1, -2), keepdim=True)
    scale = fp32(amax / FORMAT_MAX[fmt])
    return torch.where(scale > 0, scale, torch.ones_like(scale))


def quant_dequant64(x64: torch.Tensor, fmt: str, scaling: str, block: int) -> torch.Tensor:
    scale = scales64(x64, fmt, scaling, block)
    return fp32(round_fp8(fp32(x64 / scale), fmt) * scale)


def hadamard64(d: int) -> torch.Tensor:
    """diag(signs) H_d / sqrt(d) from scipy's Hadamard matrix."""
    return fp8.signs(d)[:, None] * torch.from_numpy(scipy.linalg.hadamard(d)).to(torch.float64) / math.sqrt(d)


def attention64(q, k, v, *, fmt, scaling, block, p_scale, hadamard, scale, causal=False, normalize_first=True):
    """The FP8 attention in float64 from the emulated pieces. normalize_first: P is the softmax (naive);
    otherwise P = exp(S - rowmax), cast, and the row sum of the uncast P divides after (chunked, one key block)."""
    q, k, v = (t.double() for t in (q, k, v))
    if hadamard:
        r = hadamard64(q.shape[-1])
        q, k = fp32(q @ r), fp32(k @ r)
    qd, kd, vd = (quant_dequant64(t, fmt, scaling, block) for t in (q, k, v))  # K, V per K/V head
    group = q.shape[1] // k.shape[1]
    kd, vd = kd.repeat_interleave(group, 1), vd.repeat_interleave(group, 1)
    s = (qd @ kd.transpose(-1, -2)) * scale
    if causal:
        m, n = s.shape[-2:]
        hidden = torch.ones(m, n, dtype=torch.bool).triu(n - m + 1)
        s = s.masked_fill(hidden, -math.inf)
    if normalize_first:
        p = torch.softmax(s, dim=-1)
        return (round_fp8(fp32(p * p_scale), fmt) / p_scale) @ vd
    p = torch.exp(s - s.amax(dim=-1, keepdim=True))
    return (round_fp8(fp32(p * p_scale), fmt) / p_scale) @ vd / p.sum(dim=-1, keepdim=True)


def rel_rms(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).pow(2).mean().sqrt() / b.double().pow(2).mean().sqrt())


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("scaling,block", [("tensor", 64), ("block", 64), ("block", 7), ("block", 1), ("none", 64)])
@pytest.mark.parametrize("std", [1.0, 300.0, 3e4])
def test_quantize_dequantize_is_bit_exact(fmt, scaling, block, std):
    x = torch.randn(2, 3, 100, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * std
    (x,) = add_outliers((x,), 0.01, 10 * std, seed=3)
    x32 = x.float()
    got, x8 = fp8.quant_dequant(x32, fmt, scaling, block)
    want = quant_dequant64(x32.double(), fmt, scaling, block)
    same = (got.double() == want) | (got.isnan() & want.isnan())
    assert bool(same.all()), f"{int((~same).sum())} of {same.numel()} values differ"
    assert x8.dtype == fp8.DTYPES[fmt]
    if scaling != "none":  # scaled to the format: every value finite, each block's largest exactly at the max
        assert bool(x8.float().isfinite().all()) and float(x8.float().abs().max()) == FORMAT_MAX[fmt]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("p_scale", [1.0, 256.0])
def test_p_cast_is_bit_exact(fmt, p_scale):
    p = torch.softmax(torch.randn(4, 200, generator=torch.Generator().manual_seed(2)) * 3, dim=-1)
    got = fp8.p_cast({"fp8": fmt, "p_scale": p_scale})(p)
    assert torch.equal(got.double(), round_fp8(fp32(p.double() * p_scale), fmt) / p_scale)


@pytest.mark.parametrize("d", [1, 2, 16, 64, 128])
def test_rotation_is_the_randomized_hadamard_matrix_and_orthogonal(d):
    r = fp8.rotation(d, dtype=torch.float64)
    assert torch.allclose(r, hadamard64(d), atol=0, rtol=0)
    assert torch.allclose(r @ r.T, torch.eye(d, dtype=torch.float64), atol=1e-12)
    q, k = torch.randn(5, d, dtype=torch.float64), torch.randn(7, d, dtype=torch.float64)
    assert torch.allclose((q @ r) @ (k @ r).T, q @ k.T, atol=1e-10)  # QH(KH)^T = QK^T


CASES = [  # fmt, scaling, block, p_scale, hadamard, causal, (batch, heads, kv_heads, q_len, seq_len, d)
    ("e4m3", "tensor", 64, 256.0, False, False, (1, 2, 2, 113, 200, 64)),
    ("e4m3", "block", 32, 256.0, True, True, (2, 4, 2, 70, 130, 32)),
    ("e5m2", "block", 7, 1.0, False, False, (1, 2, 1, 50, 90, 16)),
    ("e5m2", "tensor", 64, 256.0, True, True, (1, 1, 1, 1, 77, 128)),
    ("e4m3", "none", 64, 1.0, True, False, (1, 2, 2, 40, 40, 64)),
]


@pytest.mark.parametrize("backend", ["naive", "chunked"])
@pytest.mark.parametrize("fmt,scaling,block,p_scale,hadamard,causal,shape", CASES,
                         ids=[f"{c[0]}-{c[1]}{c[2]}-p{c[3]:g}-{'had' if c[4] else 'plain'}-{'causal' if c[5] else 'full'}"
                              for c in CASES])
def test_fp8_attention_matches_the_float64_emulation(backend, fmt, scaling, block, p_scale, hadamard, causal, shape):
    b, h, kv, m, n, d = shape
    q, k, v = make_qkv(b, h, m, n, d, kv_heads=kv, seed=5, outliers=0.001, outlier_std=10.0)
    options = dict(fp8_scaling=scaling, fp8_block=block, p_scale=p_scale, hadamard=hadamard)
    if backend == "chunked":
        options.update(q_chunk=48, kv_chunk=1024)  # one key block: the emulation's P is the block's
    out = selfattn.attention(q, k, v, backend=backend, causal=causal, fp8=fmt, **options)
    assert out.dtype == torch.float32 and out.shape == q.shape
    want = attention64(q, k, v, fmt=fmt, scaling=scaling, block=block, p_scale=p_scale, hadamard=hadamard,
                       scale=1 / math.sqrt(d), causal=causal, normalize_first=backend == "naive")
    exact = selfattn.attention_reference(q.double(), k.double(), v.double(), causal=causal)
    off, fp8_error = rel_rms(out, want), rel_rms(want, exact)
    assert fp8_error > 5e-3  # the emulation really quantized something
    assert off < 0.02 * fp8_error, (off, fp8_error)


def test_chunked_with_many_key_blocks_stays_an_fp8_attention():
    """Several key blocks: P is cast against a running max, so no exact emulation; the error must be
    the FP8 error's size, not more."""
    q, k, v = make_qkv(1, 2, 130, 300, 64, seed=7)
    exact = selfattn.attention_reference(q.double(), k.double(), v.double(), causal=True)
    naive = selfattn.attention(q, k, v, backend="naive", causal=True, fp8="e4m3")
    chunked = selfattn.attention(q, k, v, backend="chunked", causal=True, fp8="e4m3", q_chunk=32, kv_chunk=48)
    assert rel_rms(chunked, exact) < 1.5 * rel_rms(naive, exact)


def test_kernel_label_says_fp8_and_dequantized_products():
    label = _resolved("naive", {"fp8": "e5m2", "fp8_scaling": "block", "fp8_block": 32, "hadamard": True}).label
    assert label == "materialized-fp8e5m2-block32-had-p256-dequant"
    assert _resolved("chunked", {"q_chunk": 64, "kv_chunk": 64, "fp8": "e4m3"}).label == \
        "q64-kv64-fp8e4m3-tensor-p256-dequant"
    assert _resolved("naive", {}).label == "materialized"


def test_precision_fp8_resolves_the_format_from_the_dtype():
    options = _resolved("naive", {}, "cpu", torch.float8_e5m2).options
    assert options["fp8"] == "e5m2"


# --- bad input: one line naming the key ---

Q, K, V = make_qkv(1, 1, 8, 8, 48, seed=0)


@pytest.mark.parametrize("options,match", [
    ({"fp8": "e4m3", "fp8_scaling": "row"}, r"^fp8_scaling: .*tensor.*block"),
    ({"fp8": "e4m3", "fp8_scaling": "block", "fp8_block": 0}, r"^fp8_block: "),
    ({"fp8": "e4m3", "hadamard": True}, r"^backend\.hadamard: .*power of two, got 48$"),
    ({"fp8": "e3m4"}, r"^fp8: "),
    ({"fp8_scaling": "block"}, r"^backend\.fp8_scaling: only fp8 precisions"),
    ({"p_scale": 1.0}, r"^backend\.p_scale: only fp8 precisions"),
])
@pytest.mark.parametrize("backend", ["naive", "chunked"])
def test_bad_fp8_options_name_the_key(backend, options, match):
    with pytest.raises(ValueError, match=match) as info:
        selfattn.attention(Q, K, V, backend=backend, **options)
    assert "\n" not in str(info.value)


def test_fp8_compiled_is_unsupported():
    with pytest.raises(selfattn.Unsupported, match="compile"):
        selfattn.attention(Q, K, V, backend="chunked", fp8="e4m3", compile=True)


def test_fp8_backward_is_unsupported():
    q = Q.detach().requires_grad_(True)
    with pytest.raises(selfattn.Unsupported, match="forward"):
        selfattn.attention(q, K, V, backend="naive", fp8="e4m3")


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["naive", "chunked"])
def test_fp8_on_cuda_matches_the_float64_emulation(backend, monkeypatch):
    """On a GPU both product paths against the same emulation, inputs moved: `dequant` (the CUDA casts
    round as the CPU's), and `auto`, which on capability >= 8.9 runs torch._scaled_mm (its label says so,
    per product), for block and per-tensor scaling. (One test per back end: gpu_check counts its tests.)"""
    q, k, v = make_qkv(1, 4, 128, 256, 64, kv_heads=2, seed=5, outliers=0.001, outlier_std=10.0)
    x8_cpu = fp8.quant_dequant(q, "e4m3", "block", 32)[0]
    assert torch.equal(fp8.quant_dequant(q.cuda(), "e4m3", "block", 32)[0].cpu(), x8_cpu)
    exact = selfattn.attention_reference(q.double(), k.double(), v.double())
    calls = []
    real = torch._scaled_mm
    monkeypatch.setattr(torch, "_scaled_mm", lambda *a, **kw: calls.append(a[0].dtype) or real(*a, **kw))
    scaled_mm = torch.cuda.get_device_capability() >= fp8.SCALED_MM_CAPABILITY
    for matmul, scaling in (("dequant", "block"), ("auto", "block"), ("auto", "tensor")):
        options = dict(fp8_scaling=scaling, fp8_block=32, p_scale=256.0, hadamard=True, fp8_matmul=matmul)
        if backend == "chunked":
            options.update(q_chunk=64, kv_chunk=1024)
        resolved = _resolved(backend, {**options, "fp8": "e4m3"}, "cuda").options
        products = resolved["fp8_products"]
        assert _resolved(backend, {**options, "fp8": "e4m3"}, device="cuda").label.endswith(
            "-" + fp8.products_label(products))
        if matmul == "auto":  # H100/H200 with CUDA >= 12.9: both products; other >= 8.9 GPUs: P.V at least
            assert products[1] == ("scaled_mm" if scaled_mm else "dequant")
            assert scaling == "block" or products[0] == products[1]
        calls.clear()
        out = selfattn.attention(q.cuda(), k.cuda(), v.cuda(), backend=backend, fp8="e4m3", **options).cpu()
        assert bool(calls) == ("scaled_mm" in products), (matmul, scaling, products)
        want = attention64(q, k, v, fmt="e4m3", scaling=scaling, block=32, p_scale=256.0, hadamard=True, scale=1 / 8,
                           normalize_first=backend == "naive")
        # dequant: the emulation's numbers; scaled_mm: its tensor cores' ~13-bit accumulation flips a few of P's
        # fp8 roundings (0.03-0.06 of FP8's error on an H200; selfattn/fp8_mm.py), still far inside FP8's own error
        share = 0.1 if "scaled_mm" in products else 0.005
        assert rel_rms(out, want) < share * rel_rms(want, exact), (matmul, scaling, products)
