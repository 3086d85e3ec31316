"""The triton back end's kernel against the float64 reference, on a CPU through triton's interpreter.

The interpreter runs the very kernel the GPU compiles (tile by tile, in numpy), so these cases prove
its indexing, masks, block skipping and online softmax exact; only speed needs a GPU. It is switched
on by TRITON_INTERPRET=1 when the kernel is decorated, i.e. when selfattn.backends.triton_fwd is
imported: the `kernel` fixture sets the variable, imports the module afresh, and on teardown puts the
environment and sys.modules back as they were, so no other test file sees the interpreter (whatever
order pytest imports or runs them in).

The cases are a covering design, not the cartesian product (the interpreter is ~1000x slower than
SDPA): every n in {1, 64, 257, 1000}, q_len != seq_len, head_dim 32/64/128, 4 heads with 4/2/1 K/V
heads, each mask and fp32/fp16/bf16 appear, and the combinations that can go wrong together do:
causal with q_len != seq_len, GQA under every mask, rows that see no key, blocks that are not full.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

import selfattn
from selfattn.inputs import make_qkv
from selfattn.backends.capability import Ask
from selfattn.backends.resolved import resolve


def _resolved(name, options=None, device="cpu", dtype=torch.float32):
    """The back end `name` with `options`, resolved for a call on `device` in `dtype` (the one resolver)."""
    return resolve(name, options, Ask(torch.device(device).type, "fp32"), dtype, device=device)


pytest.importorskip("triton")
pytest.importorskip("numpy")  # the interpreter executes tiles in numpy

KERNEL_MODULE = "selfattn.backends.triton_fwd"
KERNEL_MODULES = (KERNEL_MODULE, "selfattn.backends.triton_bwd")  # both decided at import: imported afresh together
ABS_TOL_FP32 = 1e-5  # as tests/backends/test_accuracy.py for fp32
FA_EPS = {torch.bfloat16: 1e-3, torch.float16: 2e-4}  # and its FlashAttention rule for fp16/bf16
DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
WINDOW = 37  # not a multiple of any block size: windows start and end inside blocks


@contextlib.contextmanager
def blas_threads(count: int):
    """numpy's OpenBLAS limited to `count` threads, restored after. The interpreter's tl.dot is a small
    np.matmul per tile; on a loaded CPU OpenBLAS's threads spin against torch's and each 64 x 128 x 64
    product took 20-40 ms instead of 0.02 ms (measured here under load), most of this file's time."""
    calls, maps = [], Path("/proc/self/maps")
    for path in sorted({line.split()[-1] for line in maps.read_text().splitlines() if "openblas" in line.lower()}
                       if maps.exists() else ()):
        if not path.startswith("/"):
            continue
        lib = ctypes.CDLL(path)
        for prefix in ("scipy_openblas_", "openblas_"):
            for suffix in ("64_", ""):
                if hasattr(lib, f"{prefix}set_num_threads{suffix}") and hasattr(lib, f"{prefix}get_num_threads{suffix}"):
                    calls.append((getattr(lib, f"{prefix}set_num_threads{suffix}"),
                                  getattr(lib, f"{prefix}get_num_threads{suffix}")()))
    for set_threads, _ in calls:
        set_threads(count)
    try:
        yield
    finally:
        for set_threads, before in calls:
            set_threads(before)


@pytest.fixture(scope="module")
def kernel():
    """The kernel module imported with the interpreter on; environment and sys.modules restored after."""
    saved_env = os.environ.get("TRITON_INTERPRET")
    saved_modules = {name: sys.modules.pop(name, None) for name in KERNEL_MODULES}
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        module = importlib.import_module(KERNEL_MODULE)
        assert module.INTERPRETED, "the kernel was decorated without the interpreter"
        with blas_threads(1):
            yield module
    finally:
        _restore(saved_modules)
        if saved_env is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved_env


def _restore(saved_modules: dict) -> None:
    """sys.modules' kernel modules as they were before a fixture imported them afresh."""
    for name, saved in saved_modules.items():
        sys.modules.pop(name, None)
        if saved is not None:
            sys.modules[name] = saved


# (batch, heads, kv_heads, q_len, seq_len, head_dim, dtype, masks[, options]); masks: "-"-joined of full, causal,
# window, pad, docs. The interpreter's cost is per operation, not per element, so the largest cases run
# 128 x 128 tiles (a quarter of the iterations); the default 64 x 64 runs at n = 1000 in the others.
BIG = {"block_m": 128, "block_n": 128}
CASES = [
    (1, 4, 4, 1, 1, 32, torch.float32, "full"),  # n = 1: one key, one query
    (1, 4, 2, 1, 1, 64, torch.bfloat16, "causal"),
    (2, 4, 1, 1, 1000, 128, torch.float16, "causal-pad"),  # a decode step, padded sequences
    (2, 4, 4, 64, 64, 64, torch.float32, "causal"),  # exactly one block
    (2, 4, 1, 64, 64, 128, torch.float16, "window"),
    (2, 4, 2, 64, 64, 32, torch.bfloat16, "docs"),
    (1, 4, 2, 257, 1000, 64, torch.bfloat16, "causal", BIG),  # causal with q_len != seq_len
    (1, 4, 4, 257, 1000, 32, torch.float32, "causal-window"),
    (1, 4, 1, 64, 1000, 64, torch.float32, "full"),
    (2, 4, 2, 257, 257, 32, torch.float16, "pad"),  # ragged last blocks on both axes
    (1, 4, 1, 257, 257, 64, torch.float32, "docs"),
    (2, 4, 2, 257, 257, 64, torch.float16, "causal-docs-pad"),
    (2, 4, 2, 64, 257, 128, torch.bfloat16, "window-pad"),  # rows past padding + window see no key: zeros
    (1, 4, 4, 1000, 257, 32, torch.float32, "window"),  # more queries than keys: most rows see none
    (2, 4, 2, 64, 1000, 128, torch.float32, "causal-pad"),
    (1, 4, 2, 1000, 1000, 64, torch.float16, "causal-docs", BIG),
    (1, 4, 1, 1000, 1000, 32, torch.bfloat16, "causal-window", BIG),
]


def case_id(case) -> str:
    b, h, kv, m, n, d, dtype, masks, *options = case
    tiles = "".join(f"-m{o['block_m']}n{o['block_n']}" for o in options)
    return f"B{b}-H{h}-K{kv}-M{m}-N{n}-D{d}-{DTYPE_NAMES[dtype]}-{masks}{tiles}"


def mask_arguments(masks: str, batch: int, seq_len: int) -> dict:
    """The mask arguments a case's name asks for: lengths and documents that cut inside blocks."""
    parts = masks.split("-")
    args: dict = {"causal": "causal" in parts}
    if "window" in parts:
        args["window"] = WINDOW
    if "pad" in parts:  # the first sequence whole, the others padded to about a third
        args["key_lengths"] = torch.tensor([seq_len] + [max(1, seq_len // 3 - 5 * i) for i in range(batch - 1)])
    if "docs" in parts:  # documents of 1, 29, 70, ... tokens, shifted per sequence
        cuts = torch.tensor([1, 30, 100, 130, 513])
        ids = [torch.bucketize(torch.arange(seq_len) + 11 * i, cuts, right=True) for i in range(batch)]
        args["document_ids"] = torch.stack(ids)
    return args


def _errors(case) -> tuple[float, float, torch.Tensor, torch.Tensor]:
    """(triton's max abs error, naive's max abs error, triton's output, the float64 reference)."""
    b, h, kv, m, n, d, dtype, masks, *options = case
    backend_options = options[0] if options else {}
    q, k, v = make_qkv(b, h, m, n, d, dtype=dtype, seed=m + n + d, kv_heads=kv)
    args = mask_arguments(masks, b, n)
    out = selfattn.attention(q, k, v, backend="triton", **args, **backend_options)
    assert out.dtype == dtype and out.shape == q.shape
    ref = selfattn.attention_reference(q, k, v, **args)
    naive = selfattn.attention(q, k, v, backend="naive", **args)
    return (out.double() - ref).abs().max().item(), (naive.double() - ref).abs().max().item(), out, ref


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_matches_float64_reference(kernel, case):
    err, naive_err, out, ref = _errors(case)
    dtype = case[6]
    if dtype == torch.float32:
        assert err <= ABS_TOL_FP32, f"max abs error {err:.3g}"
    else:  # the FlashAttention rule, against naive on the same inputs
        assert err <= 2 * naive_err + FA_EPS[dtype], f"{err:.3g} vs naive {naive_err:.3g}"
    empty = (ref == 0).all(dim=-1)
    assert torch.equal(out[empty], torch.zeros_like(out[empty]))  # rows that see no key are zeros
    if case[7] == "window-pad" or case[3] > case[4]:
        assert empty.any(), "this case is meant to have rows that see no key"


def test_block_sizes_are_options_and_any_of_them_is_exact(kernel):
    for options in ({"block_m": 16, "block_n": 128}, {"block_m": 128, "block_n": 32}):
        err, *_ = _errors((2, 4, 2, 70, 70, 64, torch.float32, "causal-window-pad", options))
        assert err <= ABS_TOL_FP32, f"{options}: max abs error {err:.3g}"


def test_a_wrong_mask_is_caught(kernel):
    """Negative control: the kernel's output for a causal call is far from the reference without a mask."""
    q, k, v = make_qkv(1, 4, 64, 64, 32, seed=3)
    out = selfattn.attention(q, k, v, backend="triton", causal=True)
    assert (out.double() - selfattn.attention_reference(q, k, v)).abs().max().item() > 1e-2


def test_causal_and_window_skip_key_blocks(kernel, monkeypatch):
    """The loop bounds: with a window of 37 each query block of 64 loads 2 key blocks of 64 at most, so
    poisoning the keys of block 0 changes nothing for query blocks 4 on (a NaN loaded and masked would
    still poison the tile's products P·V, so this shows the skipped blocks are never loaded)."""
    q, k, v = make_qkv(1, 1, 512, 512, 32, seed=1)
    out = selfattn.attention(q, k, v, backend="triton", causal=True, window=WINDOW, block_m=64, block_n=64)
    far = torch.arange(512)
    # key block 0 is seen by query blocks 0 and 1 only; poison it and look at query block 4 onwards
    k_poisoned, v_poisoned = k.clone(), v.clone()
    k_poisoned[:, :, far < 64] = float("nan")
    v_poisoned[:, :, far < 64] = float("nan")
    poisoned = selfattn.attention(q, k_poisoned, v_poisoned, backend="triton", causal=True, window=WINDOW)
    assert torch.equal(poisoned[:, :, 256:], out[:, :, 256:])
    assert torch.isnan(poisoned[:, :, :64]).any()  # the negative control: a block that is loaded sees the NaN


def test_fp64_head_dim_and_cpu_without_interpreter_are_unsupported(kernel, monkeypatch):
    from selfattn.backends import triton as backend
    from selfattn.errors import Unsupported

    q, k, v = make_qkv(1, 2, 8, 8, 16, dtype=torch.float64)
    with pytest.raises(Unsupported, match=r"precision fp64 \(declared: fp32, fp16, bf16\): tl.dot has no fp64"):
        selfattn.attention(q, k, v, backend="triton")
    q, k, v = make_qkv(1, 2, 8, 8, 264)
    with pytest.raises(Unsupported, match=r"head_dim 264 \(declared: at most 256\)"):
        selfattn.attention(q, k, v, backend="triton")
    q, k, v = make_qkv(1, 2, 8, 8, 16)
    assert backend.missing("cpu") is None  # the kernel module was decorated under the interpreter
    monkeypatch.setitem(sys.modules, KERNEL_MODULE, type(sys)("stand-in"))
    sys.modules[KERNEL_MODULE].INTERPRETED = False  # as if imported without TRITON_INTERPRET
    assert backend.missing("cpu") == backend.CPU_NEEDS_INTERPRETER
    with pytest.raises(Unsupported, match="TRITON_INTERPRET=1"):
        selfattn.attention(q, k, v, backend="triton")


def test_labels_and_memory_model():
    from selfattn import backends
    from selfattn.backends import triton as backend
    from selfattn.point import Point

    assert _resolved("triton", {}, dtype=torch.float32).label == "fa2-m64-n64-ieee"
    assert _resolved("triton", {"dot_precision": "tf32"}, dtype=torch.float32).label == "fa2-m64-n64-tf32"
    assert _resolved("triton", {"block_m": 128, "block_n": 32}, dtype=torch.bfloat16).label == "fa2-m128-n32"
    with pytest.raises(ValueError, match="block_m"):
        _resolved("triton", {"block_m": 48}).options
    # O(n): doubling the sequence doubles the bytes (no n x n term)
    small, large = (backend.predict_mem_bytes(Point(backend="triton", seq_len=n, head_dim=64), {}, "cuda")
                    for n in (4096, 8192))
    assert large == 2 * small
    # and with the backward kernels: the saved output and log-sum-exp, D, dq, dk, dv; nothing n x n
    small_bwd, large_bwd = (backend.predict_mem_bytes(Point(backend="triton", seq_len=n, head_dim=64, mode="fwd_bwd"),
                                                      {}, "cuda") for n in (4096, 8192))
    point = Point(backend="triton", seq_len=4096, head_dim=64, mode="fwd_bwd")
    assert large_bwd == 2 * small_bwd == 2 * (small + point.grad_bytes + 4 * point.batch * point.heads * 4096)
    # the variants add no O(n) buffer: ALiBi's one fp32 slope per head, the others nothing
    plain, varied = (backend.predict_mem_bytes(Point(backend="triton", seq_len=4096, head_dim=64, heads=8, **kw), {}, "cuda")
                     for kw in ({}, {"window": (255, 0), "softcap": 30.0, "alibi": True, "sink": 0.5}))
    assert varied == plain + 8 * 4


@pytest.mark.parametrize("kw, status, reason", [
    ({}, "ok", None),
    ({"mode": "fwd_bwd"}, "ok", None),
    ({"precision": "fp64"}, "unsupported", "precision fp64 (declared: fp32, fp16, bf16)"),
], ids=["fwd-ok", "fwd_bwd-ok", "fp64-unsupported"])
def test_a_sweep_point_gives_its_row(kernel, kw, status, reason):
    from selfattn.measure import Budget, measure_point
    from selfattn.point import Point

    budget = Budget(timing_s=0.2, measure_device_peak=False)  # the interpreter's calls take ~0.1 s each
    row = measure_point(Point(backend="triton", seq_len=32, head_dim=32, heads=2, causal=True, **kw), budget)
    assert row.status == status, row.error
    if reason:
        assert reason in row.error
    else:
        assert row.max_abs_err <= ABS_TOL_FP32 and row.kernel == "fa2-m64-n64-ieee:interpreter"
        forward = 4 * 2 * 32 * 33 // 2 * 32  # the causal pairs only: n(n+1)/2 per head
        assert row.flops == (3.5 * forward if kw.get("mode") == "fwd_bwd" else forward)


def test_a_sweep_point_with_every_variant_gives_an_ok_row(kernel):
    """The variants reach the kernel through a Point (tests/backends/test_triton_variants.py checks their values)."""
    from selfattn.measure import Budget, measure_point
    from selfattn.point import Point

    point = Point(backend="triton", seq_len=32, head_dim=32, heads=2, causal=True, window=(7, 2), softcap=5.0,
                  alibi=True, sink=0.5)
    row = measure_point(point, Budget(timing_s=0.2, measure_device_peak=False))
    assert row.status == "ok", row.error
    assert row.max_abs_err <= ABS_TOL_FP32 and row.kernel == "fa2-m64-n64-ieee:interpreter"
    assert row.flops == 4 * 2 * (36 + 24 * 8) * 32  # causal caps the pair at (7, 0): min(p + 1, 8) keys per row


@pytest.mark.parametrize("flags_on", [True, False], ids=["every-flag", "plain"])
def test_the_kernel_compiles_for_a_hopper_gpu_without_one(kernel, flags_on):
    """The interpreter never compiles: this lowers the kernel's own Python function through triton's real
    compiler down to a cubin for sm_90 (ptxas ships with triton), with every mask and variant flag on and
    with none (a plain call's kernel), so a GPU-only syntax or typing error fails here on a CPU."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = triton.JITFunction(kernel._attention_fwd.fn)  # the interpreted kernel's function, as @triton.jit sees it
    pointers = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "Out": "*bf16", "Lse": "*fp32", "KeyLengths": "*i64",
                "DocumentIds": "*i64", "AlibiSlopes": "*fp32", "qk_scale": "fp32", "softcap_in": "fp32",
                "softcap_out": "fp32", "sink": "fp32"}
    flags = ("CAUSAL", "HAS_LEFT", "HAS_RIGHT", "HAS_LENGTHS", "HAS_DOCUMENTS", "SOFTCAP", "ALIBI", "SINK")
    const = dict(dict.fromkeys(flags, flags_on), BLOCK_M=64, BLOCK_N=64, BLOCK_D=64, DOT_PRECISION="tf32",
                 DOT_IN_FP32=False)
    assert set(const) == {p.name for p in fn.params if p.is_constexpr}, "a constexpr of the kernel is not set here"
    signature = {n: "constexpr" if n in const else pointers.get(n, "i32") for n in fn.arg_names}
    source = ASTSource(fn=fn, signature=signature, constexprs={(fn.arg_names.index(n),): v for n, v in const.items()})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "enable_fp_fusion": True})
    assert "cubin" in compiled.asm and ".entry _attention_fwd" in compiled.asm["ptx"]


@pytest.fixture
def jit_kernel(monkeypatch):
    """The kernel module imported afresh without the interpreter (the module fixture's interpreted one is put
    back after): on CUDA the back end must run the compiled kernel, not the interpreter on copies."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    saved_modules = {name: sys.modules.pop(name, None) for name in KERNEL_MODULES}
    try:
        module = importlib.import_module(KERNEL_MODULE)
        assert not module.INTERPRETED
        yield module
    finally:
        _restore(saved_modules)


# One CUDA test: it compiles the kernel (triton's JIT, seconds per variant), so "compiled" is in its name and
# scripts/gpu_check.sh runs it in its stage of compiled tests (the plan sizes that stage from the tests it collects).
@pytest.mark.gpu
def test_the_compiled_kernel_on_cuda_matches_the_reference_and_times_a_point(jit_kernel):
    from selfattn.backends import triton as backend
    from selfattn.measure import Budget, measure_point
    from selfattn.point import Point

    if backend.missing("cuda"):
        pytest.skip(backend.missing("cuda"))
    # every mask at once, GQA, head_dim 128, bf16: the FlashAttention rule against naive
    b, h, kv, n, d = 2, 8, 2, 1000, 128
    q, k, v = make_qkv(b, h, n, n, d, dtype=torch.bfloat16, device="cuda", seed=0, kv_heads=kv)
    args = {key: val.cuda() if torch.is_tensor(val) else val
            for key, val in mask_arguments("causal-window-docs-pad", b, n).items()}
    out = selfattn.attention(q, k, v, backend="triton", **args)
    ref = selfattn.attention_reference(q, k, v, **args)
    naive = selfattn.attention(q, k, v, backend="naive", **args)
    err, naive_err = (out.double() - ref).abs().max().item(), (naive.double() - ref).abs().max().item()
    assert err <= 2 * naive_err + FA_EPS[torch.bfloat16], f"{err:.3g} vs naive {naive_err:.3g}"
    # a sweep point in fp32: the dot in exact fp32 (precision=fp32 turns torch's TF32 flag off, auto follows it)
    point = Point(backend="triton", seq_len=1024, q_len=257, heads=4, precision="fp32", causal=True, window=100,
                  device="cuda")
    row = measure_point(point, Budget(timing_s=0.2, measure_device_peak=False))
    assert row.status == "ok", row.error
    assert row.kernel == "fa2-m64-n64-ieee" and row.compile_s is not None  # the first call, compiling, timed apart
    assert row.max_abs_err <= ABS_TOL_FP32


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_the_speed_benchmark_says_it_needs_a_gpu(capsys):
    benchmarks = Path(__file__).resolve().parents[2] / "benchmarks"
    sys.path.insert(0, str(benchmarks))  # the script imports its shared _common module
    try:
        spec = importlib.util.spec_from_file_location("benchmark_triton_speed", benchmarks / "triton_speed.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert module.main([]) == 0
    finally:
        sys.path.remove(str(benchmarks))
    assert "needs a CUDA GPU" in capsys.readouterr().out
