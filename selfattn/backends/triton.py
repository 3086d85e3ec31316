"""triton: the FlashAttention-2 forward pass as one Triton kernel written in this project.

The kernel and its launcher are selfattn/backends/triton_fwd.py (docs/triton.md reads it beside
chunked.py); this module is the back end around it. triton is an optional extra (`pip install
.[triton]`): without it the back end is listed and every point gives an `unsupported` row saying so.

Devices: on CUDA the compiled kernel runs. A CPU runs it only in triton's interpreter, which must be
switched on (TRITON_INTERPRET=1 in the environment) before the kernel module is imported: it executes
every tile in numpy, ~1000x slower than SDPA, so CPU rows prove correctness, never speed.

Every variant of selfattn/variants.py runs inside the kernel: window pairs as loop bounds and
a mask, the soft-cap, ALiBi and the sink on the tiles, each behind its own constexpr flag.

Backward (mode=fwd_bwd, scope=train): selfattn/backends/triton_bwd.py, FlashAttention-2's backward
kernels (dK and dV per key block, dQ per query block, P recomputed from the forward's log-sum-exp) with
the same masks, variants and GQA, wrapped with the forward in one autograd function. A call autograd
does not record runs the forward kernel alone.

What it cannot do is declared (at the end), so such a point is an `unsupported` row before anything is
made: fp64 and FP8 inputs (fp32, fp16, bf16 only) and a head_dim above 256.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import time
from typing import Any, Mapping

import torch

from selfattn.backends.contract import backend
from selfattn.backends.options.triton import BLOCK_SIZES as BLOCK_SIZES, Options as Options
from selfattn.errors import Unsupported
from selfattn.fields import defaults
from selfattn.masks import Masks
from selfattn.point import FP32_BYTES, Point


def _triton_missing() -> str | None:
    """Why triton cannot be imported, or None. tritonbench's model (a guarded import decides whether the
    back end is enabled), but looked up without importing it: triton's import costs most of a second,
    and every sweep job loads every back end's Options."""
    try:
        found = importlib.util.find_spec("triton")  # absolute: the installed package, not this module
    except (ImportError, ValueError) as err:
        found, why = None, str(err)
    else:
        why = "no module named 'triton'"
    return None if found is not None else f"triton is not installed (pip install .[triton]): {why}"


TRITON_MISSING: str | None = _triton_missing()

# A hand-written kernel without autotuning: the time guard's optimistic share of the matmul peak.
EFFICIENCY = 0.5
MAX_HEAD_DIM = 256  # one (block_m x head_dim) query tile and its fp32 accumulator stay in registers
KERNEL_MODULE = "selfattn.backends.triton_fwd"
BACKWARD_MODULE = "selfattn.backends.triton_bwd"  # the backward kernels and the autograd function of both passes
CPU_NEEDS_INTERPRETER = "triton runs on CUDA; on a CPU set TRITON_INTERPRET=1 (correctness only, ~1000x slower)"


def _interpreter_on() -> bool:
    """Whether the kernel runs (or, once imported, will run) in triton's interpreter."""
    loaded = sys.modules.get(KERNEL_MODULE)
    if loaded is not None:
        return bool(loaded.INTERPRETED)  # decided when its kernel was decorated
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on")


def missing(device: torch.device | str) -> str | None:
    """Why the kernel cannot run on `device` at all, or None."""
    if TRITON_MISSING:
        return TRITON_MISSING
    kind = torch.device(device).type
    if kind == "cpu" and not _interpreter_on():
        return CPU_NEEDS_INTERPRETER
    if kind not in ("cpu", "cuda"):
        return f"triton runs on CUDA (or a CPU through its interpreter), not on {kind}"
    return None


def resolve_options(options: Mapping[str, Any], device: torch.device | str, dtype: torch.dtype) -> dict[str, Any]:
    resolved = {**defaults(Options), **options}
    if resolved["dot_precision"] == "auto":
        # read where the harness resolves options: inside precision_context, which sets the flag per precision
        resolved["dot_precision"] = "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"
    if dtype != torch.float32:
        resolved["dot_precision"] = "native"  # fp16/bf16 products are exact on the tensor cores; no choice
    return resolved


def kernel_label(options: Mapping[str, Any]) -> str:
    """fa2-m64-n64, plus the dot's precision for fp32 inputs: fa2-m64-n64-ieee or -tf32."""
    label = f"fa2-m{options['block_m']}-n{options['block_n']}"
    precision = options.get("dot_precision", "auto")
    return label if precision == "native" else f"{label}-{precision}"


def kernel_ran(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, *, masks: Masks, scale: float,
               **options: Any) -> str | None:
    """"interpreter" when the kernel runs in triton's interpreter (on a CPU; on CUDA too if TRITON_INTERPRET=1 was
    set there): its time is numpy's, not a compiled kernel's."""
    return "interpreter" if _interpreter_on() else None


def attention(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, *, masks: Masks, scale: float,
              block_m: int = 64, block_n: int = 64, dot_precision: str = "ieee") -> torch.Tensor:
    """The forward kernel; where autograd records the call, both passes (the backward kernels recompute P)."""
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q_BHMD, k_BKND, v_BKND))
    try:
        kernel = importlib.import_module(KERNEL_MODULE)
        backward = importlib.import_module(BACKWARD_MODULE) if grad else None
    except ImportError as err:  # found but broken (a missing numpy for the interpreter, a bad install)
        raise Unsupported(f"triton kernel: importing it failed: {err}") from None
    slopes = kernel.alibi_slopes_log2(q_BHMD.shape[1], q_BHMD.device) if masks.alibi else None
    call = dict(scale=scale, causal=masks.causal, extents=masks.extents, key_lengths=masks.key_lengths,
                document_ids=masks.document_ids, softcap=masks.softcap, alibi_slopes_log2=slopes, sink=masks.sink,
                block_m=block_m, block_n=block_n, dot_precision="ieee" if dot_precision == "native" else dot_precision)
    if backward is not None:
        return backward.attention(q_BHMD, k_BKND, v_BKND, **call)
    out, _lse = kernel.attention_fwd(q_BHMD, k_BKND, v_BKND, **call)
    return out


def prepare(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, *, masks: Masks, scale: float,
            **options: Any) -> dict[str, float]:
    """On CUDA, the point's first call of each kernel, timed apart as compile_s: triton compiles a kernel for
    each new dtype, set of mask flags, block sizes and argument specialization (then keeps it in memory and
    on disk), seconds that must not count as a warm-up the time guard reads. The hook is not told the point's
    mode, so it compiles the backward kernels too (once per flags and shapes' specialization; a later process
    loads them from triton's disk cache). A CPU's interpreter compiles nothing."""
    if q_BHMD.device.type != "cuda":
        return {}
    torch.cuda.synchronize(q_BHMD.device)
    started = time.perf_counter()
    q, k, v = (t.detach().requires_grad_() for t in (q_BHMD, k_BKND, v_BKND))
    with torch.enable_grad():
        out = attention(q, k, v, masks=masks, scale=scale, **options)
        torch.autograd.grad(out, (q, k, v), torch.zeros_like(out))
    torch.cuda.synchronize(q_BHMD.device)
    return {"compile_s": time.perf_counter() - started}


def predict_mem_bytes(point: Point, options: Mapping[str, Any], device: str) -> int:
    """O(n): the output and one fp32 log-sum-exp per query row; the tiles live in registers (on a
    CPU, the interpreter's numpy tiles of one program at a time: a few (block_m x block_n) arrays).
    ALiBi adds its fp32 slope per query head (made once per heads and device, then kept); the other
    variants are scalars. fwd_bwd keeps the output and the log-sum-exp for the backward kernels, which
    add one fp32 D = rowsum(dO * O) per query row and write dq, dk, dv (still O(n): P is recomputed)."""
    lse = point.batch * point.heads * point.q_len_resolved * FP32_BYTES
    slopes = point.heads * FP32_BYTES if point.alibi else 0
    backward = lse + point.grad_bytes if point.mode == "fwd_bwd" else 0  # D, then dq, dk and dv
    if device == "cuda":
        return point.out_bytes + lse + slopes + backward
    bm, bn = options.get("block_m", 64), options.get("block_n", 64)
    bd = max(16, 1 << (point.head_dim - 1).bit_length())
    # scores, probabilities, their mask (fp32, fp32, bool), K^T and V tiles, q and the accumulator twice
    tiles = (2 * bm * bn + 2 * bn * bd + 3 * bm * bd) * FP32_BYTES + bm * bn
    # the soft-cap's exp2 and quotient tiles; ALiBi's distance tile (int32, then fp32)
    tiles += (2 * (point.softcap is not None) + 2 * point.alibi) * bm * bn * FP32_BYTES
    if point.mode == "fwd_bwd":  # a backward program also holds dP, dS and the gradients' two accumulators
        tiles += (2 * bm * bn + 2 * bn * bd) * FP32_BYTES
    return point.out_bytes + lse + slopes + backward + tiles


# Why it lacks what it does not declare: said in the point's `unsupported` row (capability.why_not).
GAPS = {"fp64": "tl.dot has no fp64 tensor-core path here", "fp8": "naive and chunked quantize FP8 themselves",
        "head_dim": "one query tile and its fp32 accumulator stay in registers"}
backend(attention, takes_masks=True, options=Options, efficiency=EFFICIENCY, dtypes=("fp32", "fp16", "bf16"),
        max_head_dim=MAX_HEAD_DIM, backward=True, gaps=GAPS,
        variants=("asymmetric_window", "softcap", "alibi", "sink"),  # inside the kernel's tiles (docs/triton.md)
        unavailable=missing, mem_model=predict_mem_bytes, kernel_label=kernel_label, resolve_options=resolve_options,
        prepare=prepare, kernel_ran=kernel_ran)
