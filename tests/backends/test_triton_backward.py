"""The triton back end's backward kernels (selfattn/backends/triton_bwd.py): dQ, dK and dV against float64,
on a CPU through triton's interpreter (the `kernel` fixture of test_triton.py), and `mode=fwd_bwd` as a
measured row, through the harness and through the real command line.

A covering design, as for the forward: n in {1, 64, 70, 100, 130, 257, 300}, q_len != seq_len both ways,
head_dim 32/48/64, 4 heads over 4, 2 or 1 K/V heads (GQA: dK and dV are sums over a group), every mask, rows
that see no key, ragged blocks, and each variant (window pairs, soft-cap, ALiBi, sink) with the shapes of
test_triton_variants.py. fp32 must be within 1e-5 of float64; fp16 and bf16 follow the FlashAttention rule
against naive's gradients (2x naive's error + eps). The interpreter's tl.dot multiplies bf16's raw bits, so
under the interpreter the kernels cast bf16 and fp16 tiles to fp32 before each product (DOT_IN_FP32, as the
forward does); the GPU path multiplies them on the tensor cores.
"""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

import selfattn
from selfattn.inputs import make_qkv

from test_triton import (ABS_TOL_FP32, DTYPE_NAMES, FA_EPS, kernel, mask_arguments)  # noqa: F401 (kernel: a fixture)
from test_triton_variants import CASES as VARIANT_CASES, SMALL, _arguments, case_id as variant_id

pytest.importorskip("triton")

# (batch, heads, kv_heads, q_len, seq_len, head_dim, dtype, masks[, options]); masks as test_triton.py's cases
CASES = [
    (1, 4, 4, 1, 1, 32, torch.float32, "full"),  # one query, one key
    (2, 4, 2, 64, 64, 32, torch.float32, "full"),  # exactly one block
    (2, 4, 2, 70, 70, 32, torch.float32, "causal"),
    (2, 4, 2, 70, 100, 64, torch.float32, "causal-pad"),  # q_len < seq_len, padded keys get zero gradients
    (2, 4, 1, 100, 100, 32, torch.float32, "window-docs"),
    (2, 4, 2, 64, 257, 64, torch.float32, "window-pad"),  # rows past padding + window see no key
    (1, 4, 4, 300, 257, 32, torch.float32, "window"),  # q_len > seq_len: most rows see none
    (2, 4, 2, 130, 130, 48, torch.float32, "causal-docs-pad"),  # head_dim not a power of two
    (1, 4, 2, 70, 70, 32, torch.float16, "causal"),
    (2, 4, 1, 1, 300, 64, torch.float16, "causal-pad"),  # a decode step: one query per sequence
    (1, 4, 2, 70, 70, 32, torch.bfloat16, "causal"),
    (2, 4, 2, 70, 70, 32, torch.float32, "causal-window-pad", {"block_m": 16, "block_n": 32}),
    (1, 4, 1, 100, 100, 64, torch.float32, "causal-docs", {"block_m": 32, "block_n": 16}),
]


def case_id(case) -> str:
    b, h, kv, m, n, d, dtype, masks, *options = case
    tiles = "".join(f"-m{o['block_m']}n{o['block_n']}" for o in options)
    return f"B{b}-H{h}-K{kv}-M{m}-N{n}-D{d}-{DTYPE_NAMES[dtype]}-{masks}{tiles}"


def _gradients(q, k, v, upstream, backend: str, args: dict, options: dict) -> list[torch.Tensor]:
    """dq, dk, dv (float64 copies) of sum(out * upstream) through `backend` ("reference": float64)."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    if backend == "reference":
        leaves = [t.detach().double().requires_grad_() for t in leaves]
        out = selfattn.attention_reference(*leaves, **args)
        upstream = upstream.double()
    else:
        out = selfattn.attention(*leaves, backend=backend, **args, **options)
        assert out.dtype == q.dtype
    return [g.double() for g in torch.autograd.grad(out, leaves, upstream)]


def check_gradients(b, h, kv, m, n, d, dtype, args: dict, options: dict) -> None:
    q, k, v = make_qkv(b, h, m, n, d, dtype=dtype, seed=m + n + d, kv_heads=kv)
    upstream = torch.randn(b, h, m, d, generator=torch.Generator().manual_seed(n), dtype=torch.float32).to(dtype)
    triton = _gradients(q, k, v, upstream, "triton", args, options)
    reference = _gradients(q, k, v, upstream, "reference", args, {})
    for name, got, ref, shape in zip(("dq", "dk", "dv"), triton, reference, (q.shape, k.shape, v.shape)):
        assert got.shape == shape and torch.isfinite(got).all(), name
        err = (got - ref).abs().max().item()
        if dtype == torch.float32:
            assert err <= ABS_TOL_FP32, f"{name}: max abs error {err:.3g}"
    if dtype != torch.float32:  # the FlashAttention rule: against naive's gradients on the same inputs
        naive = _gradients(q, k, v, upstream, "naive", args, {})
        for name, got, plain, ref in zip(("dq", "dk", "dv"), triton, naive, reference):
            err, naive_err = (got - ref).abs().max().item(), (plain - ref).abs().max().item()
            assert err <= 2 * naive_err + FA_EPS[dtype], f"{name}: {err:.3g} vs naive {naive_err:.3g}"


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_gradients_match_float64(kernel, case):
    b, h, kv, m, n, d, dtype, masks, *options = case
    check_gradients(b, h, kv, m, n, d, dtype, mask_arguments(masks, b, n), options[0] if options else {})


@pytest.mark.parametrize("case", VARIANT_CASES, ids=[variant_id(c) for c in VARIANT_CASES])
def test_gradients_of_the_variants_match_float64(kernel, case):
    b, h, kv, m, n, d, dtype, _masks, _variants = case
    check_gradients(b, h, kv, m, n, d, dtype, _arguments(case), SMALL)


def test_a_wrong_gradient_is_caught(kernel):
    """Negative control: the causal gradients are far from the unmasked reference's."""
    q, k, v = make_qkv(1, 4, 64, 64, 32, seed=3)
    upstream = torch.randn(1, 4, 64, 32, generator=torch.Generator().manual_seed(0))
    causal = _gradients(q, k, v, upstream, "triton", {"causal": True}, {})
    full = _gradients(q, k, v, upstream, "reference", {}, {})
    assert all((a - b).abs().max().item() > 1e-2 for a, b in zip(causal, full))


def test_a_call_autograd_does_not_record_runs_the_forward_kernel_alone(kernel, monkeypatch):
    """No grad wanted: no backward module work, no saved tensors (the forward call's time is the kernel's)."""
    q, k, v = make_qkv(1, 2, 32, 32, 16, requires_grad=True)
    with torch.no_grad():
        out = selfattn.attention(q, k, v, backend="triton", causal=True)
    assert out.grad_fn is None
    out = selfattn.attention(q, k, v, backend="triton", causal=True)
    assert type(out.grad_fn).__name__ == "FlashAttentionBackward"
    assert "selfattn.backends.triton_bwd" in sys.modules


@pytest.mark.parametrize("kw", [
    {"kv_heads": 1, "causal": True},
    {"precision": "fp16", "window": 9, "pad_frac": 0.3, "batch": 2},
    {"precision": "bf16", "q_len": 20, "causal": True, "alibi": True, "sink": 0.5},
], ids=["gqa-causal-fp32", "window-pad-fp16", "decode-variants-bf16"])
def test_a_fwd_bwd_point_is_a_measured_ok_row(kernel, kw):
    from selfattn.measure import Budget, measure_point
    from selfattn.point import Point

    point = Point(backend="triton", mode="fwd_bwd", seq_len=48, head_dim=32, heads=4, **kw)
    row = measure_point(point, Budget(timing_s=0.2, measure_device_peak=False))
    assert row.status == "ok", row.error
    assert row.time_ms > 0 and row.grad_norm_q is not None and row.kernel.endswith(":interpreter")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fwd_bwd_rows_through_the_command_line(tmp_path):
    """`backend=triton mode=fwd_bwd` through `python -m runners.sweep` in the interpreter: every point an ok row
    whose gradients passed the harness's own verdict, at several shapes, masks, GQA and fp32/fp16/bf16."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import pandas as pd

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "TRITON_INTERPRET": "1", "HYDRA_FULL_ERROR": "0", "PYTHONPATH": str(root)}
    runs = {"grid": ["precision=fp32,fp16", "causal=true,false", "seq_len=40,72", "kv_heads=2"],
            "masks": ["precision=bf16,fp32", "window=9", "pad_frac=0.3", "batch=2", "seq_len=56", "kv_heads=1"]}
    rows = []
    for name, axes in runs.items():
        folder = tmp_path / name
        done = subprocess.run([sys.executable, "-m", "runners.sweep", "-m", "backend=triton", "mode=fwd_bwd", "heads=4",
                               "head_dim=32", *axes, f"hydra.sweep.dir={folder}"], cwd=root, env=env,
                              capture_output=True, text=True, timeout=800)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        rows.append(pd.read_csv(folder / "results.csv"))
    table = pd.concat(rows)
    assert len(table) == 8 + 2 and (table["status"] == "ok").all(), table[["status", "error"]].to_string()
    assert (table["mode"] == "fwd_bwd").all() and table["kernel"].str.endswith(":interpreter").all()
    assert table["grad_norm_q"].notna().all() and (table["time_ms"] > 0).all()


@pytest.mark.parametrize("flags_on", [True, False], ids=["every-flag", "plain"])
@pytest.mark.parametrize("head_dim, warps", [(64, 4), (128, 8), (256, 8)])
def test_the_backward_kernels_compile_for_a_hopper_gpu_without_one(kernel, flags_on, head_dim, warps):
    """The three kernels lowered by triton's real compiler to a cubin for sm_90, every flag on and none, at the
    warps the launcher picks: a GPU-only error fails here, and their shared memory fits a Hopper SM (227 KiB)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    backward = importlib.import_module("selfattn.backends.triton_bwd")  # under the fixture's interpreter
    pointers = dict.fromkeys(("Q", "K", "V", "DO", "DK", "DV", "DQ", "Out"), "*bf16")
    pointers.update({"Lse": "*fp32", "Delta": "*fp32", "KeyLengths": "*i64", "DocumentIds": "*i64",
                     "AlibiSlopes": "*fp32", "qk_scale": "fp32", "scale": "fp32", "softcap_in": "fp32",
                     "softcap_out": "fp32"})
    flags = ("CAUSAL", "HAS_LEFT", "HAS_RIGHT", "HAS_LENGTHS", "HAS_DOCUMENTS", "SOFTCAP", "ALIBI")
    for interpreted in (backward._attention_bwd_delta, backward._attention_bwd_dkdv, backward._attention_bwd_dq):
        fn = triton.JITFunction(interpreted.fn)
        const = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_D": head_dim}
        if interpreted is not backward._attention_bwd_delta:
            const.update(dict.fromkeys(flags, flags_on), DOT_PRECISION="tf32", DOT_IN_FP32=False)
        else:
            del const["BLOCK_N"]
        assert set(const) == {p.name for p in fn.params if p.is_constexpr}, "a constexpr of the kernel is not set here"
        signature = {n: "constexpr" if n in const else pointers.get(n, "i32") for n in fn.arg_names}
        source = ASTSource(fn=fn, signature=signature,
                           constexprs={(fn.arg_names.index(n),): v for n, v in const.items()})
        compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "enable_fp_fusion": True})
        assert "cubin" in compiled.asm and compiled.metadata.shared <= 227 * 1024, compiled.metadata.shared
