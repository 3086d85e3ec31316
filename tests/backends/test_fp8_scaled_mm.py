"""fp8_matmul=scaled_mm (selfattn/fp8_mm.py): the products on the fp8 tensors through torch._scaled_mm,
against the float64 quantize-dequantize emulation of tests/backends/test_fp8.py (same scales, same
rounding). fp8 x fp8 products are exact in fp32, so the products differ from the emulation by summation
order only; what is left is a P entry whose fp32 value sat on an fp8 rounding midpoint (one fp8 step),
which keeps the tolerance a small share of the FP8 error rather than fp32's 1e-7.

On a CPU, scaled_mm is forced (torch's CPU _scaled_mm); the CUDA rules (shapes, formats, rowwise fp32
output) are checked on every device for shapes and with a stand-in device for the rest. On a GPU,
tests/backends/test_fp8.py's CUDA test runs `auto` (scaled_mm on capability >= 8.9) and `dequant`.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

import selfattn
from selfattn import fp8, fp8_mm
from selfattn.backends import chunked, get_backend, naive
from selfattn.inputs import make_qkv
from selfattn.masks import Masks
from selfattn.measure import Budget, measure_point
from selfattn.point import Point
from tests.backends.test_fp8 import attention64, rel_rms
from selfattn.backends.capability import Ask
from selfattn.backends.resolved import resolve


def _resolved(name, options=None, device="cpu", dtype=torch.float32):
    """The back end `name` with `options`, resolved for a call on `device` in `dtype` (the one resolver)."""
    return resolve(name, options, Ask(torch.device(device).type, "fp32"), dtype, device=device)


TIGHT = 5e-3  # |scaled_mm - emulation| as a share of |emulation - exact|: summation order and a rare P midpoint


@pytest.fixture
def scaled_mm_calls(monkeypatch):
    """How many times torch._scaled_mm ran (so a test knows the fp8 products really ran on fp8 tensors)."""
    calls = []
    real = torch._scaled_mm

    def counted(*args, **kwargs):
        calls.append(args[0].dtype)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "_scaled_mm", counted)
    return calls


CASES = [  # fmt, scaling, block, p_scale, hadamard, causal, (batch, heads, kv_heads, q_len, seq_len, d)
    ("e4m3", "tensor", 64, 256.0, False, False, (1, 2, 2, 113, 208, 64)),
    ("e4m3", "block", 32, 256.0, True, True, (2, 4, 2, 64, 128, 32)),  # GQA, causal (bottom-right: key blocks end at 16k)
    ("e4m3", "block", 16, 1.0, False, False, (1, 2, 1, 50, 96, 16)),  # MQA
    ("e5m2", "block", 32, 256.0, False, True, (1, 4, 2, 48, 96, 32)),
    ("e5m2", "tensor", 64, 256.0, True, True, (1, 1, 1, 1, 80, 128)),  # decode: one query
    ("e5m2", "block", 16, 256.0, True, False, (1, 2, 2, 40, 64, 64)),
    ("e4m3", "none", 64, 1.0, True, False, (1, 2, 2, 40, 48, 64)),
]


@pytest.mark.parametrize("backend", ["naive", "chunked"])
@pytest.mark.parametrize("fmt,scaling,block,p_scale,hadamard,causal,shape", CASES,
                         ids=[f"{c[0]}-{c[1]}{c[2]}-p{c[3]:g}-{'had' if c[4] else 'plain'}-{'causal' if c[5] else 'full'}"
                              f"-H{c[6][1]}K{c[6][2]}" for c in CASES])
def test_scaled_mm_matches_the_float64_emulation(backend, fmt, scaling, block, p_scale, hadamard, causal, shape,
                                                 scaled_mm_calls):
    b, h, kv, m, n, d = shape
    q, k, v = make_qkv(b, h, m, n, d, kv_heads=kv, seed=5, outliers=0.001, outlier_std=10.0)
    options = dict(fp8_scaling=scaling, fp8_block=block, p_scale=p_scale, hadamard=hadamard, fp8_matmul="scaled_mm")
    if backend == "chunked":
        options.update(q_chunk=48, kv_chunk=1024)  # one key block: the emulation's P is the block's
    assert get_backend(backend).kernel_ran(q, k, v, masks=Masks(causal=causal), scale=1 / math.sqrt(d),
                                           **_resolved(backend, {**options, "fp8": fmt}).options) is None
    out = selfattn.attention(q, k, v, backend=backend, causal=causal, fp8=fmt, **options)
    assert out.dtype == torch.float32 and out.shape == q.shape
    assert scaled_mm_calls and set(scaled_mm_calls) == {fp8.DTYPES[fmt]}  # both products ran on fp8 tensors
    want = attention64(q, k, v, fmt=fmt, scaling=scaling, block=block, p_scale=p_scale, hadamard=hadamard,
                       scale=1 / math.sqrt(d), causal=causal, normalize_first=backend == "naive")
    exact = selfattn.attention_reference(q.double(), k.double(), v.double(), causal=causal)
    off, fp8_error = rel_rms(out, want), rel_rms(want, exact)
    assert fp8_error > 5e-3  # the emulation really quantized something
    assert off < TIGHT * fp8_error, (off, fp8_error)


@pytest.mark.parametrize("scaling", ["tensor", "block"])
def test_chunked_key_blocks_across_v_scale_blocks_give_the_dequant_numbers(scaling, scaled_mm_calls):
    """Key blocks of 48 against V scale blocks of 32: P.V splits each key block at V's block edges
    (32, 64, ...), and the running max moves between key blocks; scaled_mm and dequant see the same
    numbers, so they agree far inside the FP8 error."""
    q, k, v = make_qkv(1, 4, 96, 192, 32, kv_heads=2, seed=8, outliers=0.001, outlier_std=10.0)
    options = dict(fp8="e4m3", fp8_scaling=scaling, fp8_block=32, q_chunk=32, kv_chunk=48)
    scaled = selfattn.attention(q, k, v, backend="chunked", causal=True, fp8_matmul="scaled_mm", **options)
    assert scaled_mm_calls
    dequant = selfattn.attention(q, k, v, backend="chunked", causal=True, fp8_matmul="dequant", **options)
    exact = selfattn.attention_reference(q.double(), k.double(), v.double(), causal=True)
    assert rel_rms(scaled, dequant) < TIGHT * rel_rms(dequant, exact)


def test_naive_scale_at_query_folds_the_scale_into_q_scale():
    q, k, v = make_qkv(1, 2, 64, 64, 32, seed=3)
    options = dict(fp8="e4m3", fp8_scaling="block", fp8_block=16, fp8_matmul="scaled_mm")
    by_logits = selfattn.attention(q, k, v, backend="naive", **options)
    by_query = selfattn.attention(q, k, v, backend="naive", scale_at="query", **options)
    exact = selfattn.attention_reference(q.double(), k.double(), v.double())
    assert rel_rms(by_query, by_logits) < TIGHT * rel_rms(by_logits, exact)


@pytest.mark.parametrize("backend", ["naive", "chunked"])
@pytest.mark.parametrize("shape,options,ran", [
    ((100, 100, 24), {}, "dequant-shapes"),  # head_dim 24: not a multiple of 16
    ((100, 100, 32), {}, "dequant-shapes"),  # seq_len 100 (naive) / the key blocks of 100 (chunked)
    ((96, 96, 32), {"fp8_scaling": "block", "fp8_block": 8}, "qkscaledmm-pvdequant-shapes"),  # V's pieces of 8 keys
])
def test_shapes_that_break_the_cuda_rules_run_dequantized_and_say_so(backend, shape, options, ran, scaled_mm_calls):
    m, n, d = shape
    q, k, v = make_qkv(1, 2, m, n, d, seed=4)
    options = dict(fp8="e4m3", **options)
    if backend == "chunked":
        options.update(q_chunk=32, kv_chunk=n)  # the key blocks are the whole sequence
    resolved = _resolved(backend, {**options, "fp8_matmul": "scaled_mm"}).options
    assert get_backend(backend).kernel_ran(q, k, v, masks=Masks(), scale=1 / math.sqrt(d), **resolved) == ran
    forced = selfattn.attention(q, k, v, backend=backend, fp8_matmul="scaled_mm", **options)
    if ran == "dequant-shapes":
        assert not scaled_mm_calls
    else:
        assert {c for c in scaled_mm_calls} == {torch.float8_e4m3fn}  # QK^T still did
    dequant = selfattn.attention(q, k, v, backend=backend, fp8_matmul="dequant", **options)
    exact = selfattn.attention_reference(q.double(), k.double(), v.double())
    assert rel_rms(forced, dequant) < TIGHT * rel_rms(dequant, exact)
    if ran == "dequant-shapes":
        assert torch.equal(forced, dequant)  # the same code ran


def test_a_row_whose_shapes_fall_back_says_so_in_its_kernel_column():
    budget = Budget(timing_s=0.02, accuracy_rows=16, max_point_s=600.0)
    point = Point(heads=2, seq_len=100, head_dim=32, precision="fp8_e4m3",
                  backend_options={"fp8_matmul": "scaled_mm"})
    row = measure_point(point, budget)
    assert row.status == "ok", row.error
    assert row.kernel == "materialized-fp8e4m3-tensor-p256-scaledmm:dequant-shapes"
    row = measure_point(Point(heads=2, seq_len=96, head_dim=32, precision="fp8_e4m3",
                              backend_options={"fp8_matmul": "scaled_mm"}), budget)
    assert row.status == "ok" and row.kernel == "materialized-fp8e4m3-tensor-p256-scaledmm"


def test_the_cpu_default_stays_dequant():
    options = _resolved("naive", {"fp8": "e4m3"}, "cpu").options
    assert options["fp8_matmul"] == "dequant" and options["fp8_products"] == ("dequant", "dequant")
    assert _resolved("naive", {"fp8": "e4m3"}).label == "materialized-fp8e4m3-tensor-p256-dequant"
    assert _resolved("chunked", {"fp8": "e5m2", "fp8_matmul": "scaled_mm", "q_chunk": 64,
                                             "kv_chunk": 64}).label == "q64-kv64-fp8e5m2-tensor-p256-scaledmm"


def test_products_label():
    assert fp8.products_label(("dequant", "dequant")) == "dequant"
    assert fp8.products_label(("scaled_mm", "scaled_mm")) == "scaledmm"
    assert fp8.products_label(("dequant", "scaled_mm")) == "qkdequant-pvscaledmm"


# --- the CUDA rules, with a stand-in device (no GPU here) ---

@pytest.fixture
def fake_cuda(monkeypatch):
    """Make torch report a CUDA device of a given capability and toolkit, for the rules alone."""

    def use(capability: tuple[int, int], cuda_version: str = "12.9"):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.version, "cuda", cuda_version)

    return use


@pytest.mark.parametrize("capability,cuda_version,fmt,scaling,products", [
    ((9, 0), "12.9", "e4m3", "tensor", ("scaled_mm", "scaled_mm")),
    ((9, 0), "12.9", "e4m3", "block", ("scaled_mm", "scaled_mm")),  # H100/H200: cuBLAS rowwise, fp32 out
    ((9, 0), "12.8", "e4m3", "block", ("dequant", "scaled_mm")),  # rowwise fp32 needs cuBLAS 12.9
    ((8, 9), "12.9", "e4m3", "block", ("dequant", "scaled_mm")),  # Ada: CUTLASS rowwise writes bf16 only
    ((10, 0), "12.9", "e4m3", "block", ("dequant", "scaled_mm")),  # Blackwell: CUTLASS rowwise too
    ((8, 9), "12.9", "e4m3", "none", ("scaled_mm", "scaled_mm")),
    ((9, 0), "12.9", "e5m2", "tensor", ("dequant", "dequant")),  # no e5m2 x e5m2 kernel
])
def test_cuda_rules_decide_each_product_up_front(fake_cuda, capability, cuda_version, fmt, scaling, products):
    fake_cuda(capability, cuda_version)
    resolved = fp8.resolve({"fp8_scaling": scaling}, fp8.DTYPES[fmt], "cuda")
    assert resolved["fp8_matmul"] == "scaled_mm" and resolved["fp8_products"] == products  # auto on >= 8.9
    label = fp8.label(resolved)
    assert label.endswith("-" + fp8.products_label(products))


def test_auto_below_8_9_is_dequant_and_forcing_scaled_mm_there_is_unsupported(fake_cuda):
    fake_cuda((8, 0))
    assert fp8.resolve({}, torch.float8_e4m3fn, "cuda")["fp8_matmul"] == "dequant"
    # a forced scaled_mm resolves as asked; the point is refused before anything runs (capability.why_not asks this)
    assert fp8.resolve({"fp8_matmul": "scaled_mm"}, torch.float8_e4m3fn, "cuda")["fp8_matmul"] == "scaled_mm"
    assert re.match(r"^backend\.fp8_matmul=scaled_mm: .*capability >= 8\.9.* 8\.0$", fp8.matmul_reason("scaled_mm", "cuda"))
    assert fp8.matmul_reason("dequant", "cuda") is None


def test_call_products_checks_every_key_bound():
    options = {"fp8": "e4m3", "fp8_scaling": "tensor", "fp8_block": 64, "fp8_products": ("scaled_mm", "scaled_mm")}
    assert fp8_mm.call_products(options, 64, (0, 256, 512)) == ("scaled_mm", "scaled_mm")
    assert fp8_mm.call_products(options, 64, (0, 250, 512)) == ("dequant", "dequant")
    assert fp8_mm.call_products({**options, "fp8_scaling": "block", "fp8_block": 24}, 64, (0, 512)) == \
        ("scaled_mm", "dequant")
    assert fp8_mm._pieces(48, 96, 32) == [(0, 16), (16, 48)]
    assert fp8_mm._pieces(0, 64, 64) == [(0, 64)]


def test_chunked_plan_with_a_window_falls_back_where_its_blocks_break_the_rule():
    q, k, v = make_qkv(1, 2, 128, 128, 32, seed=1)
    resolved = _resolved("chunked", {"fp8": "e4m3", "fp8_matmul": "scaled_mm",
                                                             "q_chunk": 32, "kv_chunk": 32}).options
    assert chunked.kernel_ran(q, k, v, masks=Masks(causal=True), scale=1.0, **resolved) is None
    # a window of 40 trims key blocks to start 39 keys before a block's first query: not multiples of 16
    assert chunked.kernel_ran(q, k, v, masks=Masks(causal=True, window=40), scale=1.0, **resolved) == "dequant-shapes"
    assert naive.kernel_ran(q, k, v, masks=Masks(), scale=1.0, **resolved) is None


# --- bad input: one line naming the key ---

@pytest.mark.parametrize("backend", ["naive", "chunked"])
@pytest.mark.parametrize("options,match", [
    ({"fp8": "e4m3", "fp8_matmul": "cublas"}, r"^fp8_matmul: .*auto.*dequant.*scaled_mm"),
    ({"fp8_matmul": "scaled_mm"}, r"^backend\.fp8_matmul: only fp8 precisions"),
])
def test_bad_fp8_matmul_names_the_key(backend, options, match):
    q, k, v = make_qkv(1, 1, 16, 16, 16, seed=0)
    with pytest.raises(ValueError, match=match) as info:
        selfattn.attention(q, k, v, backend=backend, **options)
    assert "\n" not in str(info.value)


@pytest.mark.gpu
@pytest.mark.parametrize("rowwise", [False, True], ids=["tensor", "rowwise"])
def test_cuda_scaled_mm_writes_fp32_scores_not_bf16_ones(rowwise):
    """What scaled_mm's fp32 output holds on this GPU, against float64 of the same fp8 values: the FP8 tensor
    cores' accumulation (about 1e-4 relative RMS on an H200, per-tensor and rowwise scales alike), never bf16's
    rounding (1.7e-3), which would move the scores as much as a bf16 product does."""
    if torch.cuda.get_device_capability() < fp8.SCALED_MM_CAPABILITY:
        pytest.skip("_scaled_mm needs CUDA capability >= 8.9")
    if rowwise and not fp8_mm.rowwise_fp32(torch.device("cuda")):
        pytest.skip("rowwise scales with an fp32 output need capability 9.x and CUDA >= 12.9")
    g = torch.Generator(device="cuda").manual_seed(0)
    a8, b8 = ((torch.randn(256, 1024, device="cuda", generator=g) * 4).to(torch.float8_e4m3fn) for _ in range(2))
    scales = ((torch.ones(256, 1, device="cuda"), torch.ones(1, 256, device="cuda")) if rowwise
              else (torch.ones((), device="cuda"),) * 2)
    out = torch._scaled_mm(a8, b8.T, scale_a=scales[0], scale_b=scales[1], out_dtype=torch.float32)
    want = a8.double() @ b8.double().T
    err = ((out.double() - want).pow(2).mean().sqrt() / want.pow(2).mean().sqrt()).item()
    assert err < 5e-4, f"relative RMS {err:.2e}: the fp32 output was rounded to less than 11 bits"
