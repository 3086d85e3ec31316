"""chunked: exact attention block by block with an online softmax, in O(n) memory.

Rabe & Staats (2021) and FlashAttention: walk over key blocks keeping, per query row, the
running max m, the running sum l of exp(score - m) and the running output acc; when a new
block raises the max, rescale l and acc by exp(m_old - m_new). Never more than
q_chunk x kv_chunk scores exist per (batch, head) at once.

Masks (selfattn/masks.py): key blocks that every query of a block is blind to are never computed,
the others are trimmed to the keys the block's queries see (a causal block stops at its last query),
and only blocks on a boundary are masked. The block sizes are options; left at null (auto) they are
sized to the mask and the device (chunk_sizes: on a CPU the measured 512 x 512, 256 x 512 causal; on CUDA
the largest query blocks whose scores fit a share of the free memory, against 1024 keys, cuda_chunk_sizes;
a window gets blocks of about half its width; packed documents get blocks that end at document starts),
and the plan is decided once per masks (Masks.decision).
A window's interior blocks all see one pattern of keys shifted by the block size; the forward
computes runs of them as a few batched products over strided views of K and V (band runs,
selfattn/backends/chunked_band.py) instead of block by block.

Variants (selfattn/variants.py, all four: VARIANTS). A window pair is key intervals like any mask, so
the blocks outside it are skipped and the band runs take its interior; a pair's auto block size comes
from its width max(left, right) + 1 (window_width). Soft-cap and ALiBi transform each block's scaled
scores before its running max (selfattn/backends/chunked_mods.py); the lazy step keeps ALiBi (a bias
added to its shifted scores) but not a soft-cap (tanh of scores that arrive already shifted). The sink
is folded in after the blocks from each row's log-sum-exp (_with_sink_: out times sigmoid(lse - sink)).

The backward pass is a custom autograd.Function that keeps only the output and the
log-sum-exp per row and recomputes each block's probabilities, as FlashAttention does, so
fwd_bwd memory stays O(n) too. It recomputes the transformed scores and multiplies dS by the
soft-cap's derivative; the sink's log-sum-exp term makes P exact as it is.

Speed on CPU comes from: batch*heads flattened into one bmm per block, the scale folded
into Q once, in-place exp/sub and baddbmm_ into the accumulator, measured chunk sizes
(DEFAULT_CHUNKS), lazy rescaling after a query block's first key block (RESCALE_LIMIT's comment),
masks that avoid torch's slow paths (EXP_FLOOR's comment), and head groups run in worker threads
with single-threaded ops instead of one OpenMP barrier per op (selfattn/backends/chunked_pool.py;
its HEAD_THREADS = 1 keeps every op on the calling thread, as a TorchDispatchMode needs).
fp16/bf16 inputs (option `compute`): the scores, running max and sum and the output
accumulator are always fp32; the block matmuls run either on fp32 copies (`fp32`, the CPU
default: CPUs without fp16/bf16 matmul units are faster so and round less) or in the input
dtype accumulating in fp32 (`input`, the CUDA default: the tensor-core scheme FlashAttention
and the fused SDPA kernels use, so a GPU compares like for like). The output is cast back to
the input dtype; the row's kernel label says which scheme ran (-mm_input).

`compile=True` runs each block's work (`_forward_block`, `_backward_block`: the block matmuls,
mask, max, exp, rescale) through `torch.compile`, so the compiler may fuse the online softmax's
memory-bound passes; the loop over blocks and the plan stay in Python (compiling them would
unroll one graph per block, hundreds at n = 4096). Block shapes vary within one call (the ragged
last block), so the block functions compile with dynamic shapes: one graph serves every size,
and a sweep compiles them once. Compiled blocks run on the calling thread (inductor's kernels
have their own threads).

precision=fp8_*: one hook, selfattn/fp8.py's: Q, K, V enter dequantized, and each block's P is cast
to fp8 (with p_scale) before its P.V product (`p_cast` of _forward_block). With fp8_matmul=scaled_mm
the block products read the fp8 tensors through torch._scaled_mm instead (selfattn/fp8_mm.py; the
fp8 tensors and their row scales ride along with Q, K, V as `_Fp8Blocks`), when every key block of
the plan and head_dim are multiples of 16 (kernel_ran says when they are not).
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from selfattn import fp8 as fp8_path
from selfattn import fp8_mm
from selfattn.backends import chunked_band, chunked_mods, chunked_pool
from selfattn.backends.contract import backend
from selfattn.backends.options.chunked import Options as Options
from selfattn.compile import compiled
from selfattn.masks import Masks, blocks, bounds, keep_from_intervals
from selfattn.point import FP32_BYTES, Point
from selfattn.score_mods import sink_rescale
from selfattn.variants import window_extents

# Block matmuls plus memory-bound online-softmax passes: the time guard's optimistic share of
# the matmul peak.
EFFICIENCY = 0.6


# (q_chunk, kv_chunk), chosen from measured sweeps (benchmarks/chunk_sizes.py; its figures are in the
# history of docs/performance.md): CPU fp32, B1 H8 D64, 2 threads. Before lazy rescaling 256x512 was at the bottom everywhere
# (every pair from 128x256 to 1024x1024 within 1.24-1.34x of sdpa). The lazy step makes every key
# block after a query block's first one cheaper, so the exact first step weighs more, and taller
# query blocks take fewer of them: without a mask, 512x512 took 0.93x (quartiles 0.91-0.97, 21
# interleaved rounds) of 256x512's time at n=4096 and 0.94x at 8192. A causal plan trims its key
# blocks at each query block's last row, and there the finer query blocks skip more than the exact
# steps cost: 512x512 took 1.14x (n=2048) and 1.04x (n=4096) of 256x512's time, 15 rounds each.
# fp16/bf16 compute in fp32 on a CPU, so they share them. They are the only measured values, so every
# device and dtype uses them; a table per (device, dtype) comes with a second one.
DEFAULT_CHUNKS: tuple[int, int] = (512, 512)
CAUSAL_CHUNKS: tuple[int, int] = (256, 512)
# A window no wider than this gets square blocks of about its own width (chunk_sizes).
WINDOW_CHUNK_MAX = 512


def chunk_sizes(masks: Masks, q_chunk: int | None, kv_chunk: int | None,
                auto: tuple[int, int] | None = None) -> tuple[int, int]:
    """The (q_chunk, kv_chunk) a call runs: a size given is used as is; one left at None (auto) is
    chosen from the mask's flags alone (and on CUDA the device's memory budget, `auto`), so the memory
    model knows it before any call.

    No window: `auto` when given (auto_sizes: CUDA's budget), else the CPU's DEFAULT_CHUNKS, or
    CAUSAL_CHUNKS for a causal mask. A window w <= WINDOW_CHUNK_MAX:
    blocks of about w/2 (at least 64) on both axes (WINDOW_CHUNK_SHARE): a query block [m0, m1)
    sees keys m0 - w + 1 .. m1 - 1, so with key blocks trimmed to that range (masks.blocks) it
    computes (w/2) x 1.5 w scores for a band of (w/2) x w, instead of the 256 x 1024 that 256 x 512
    blocks would touch for w = 256.
    A pair (left, right) sizes blocks by its width max(left, right) + 1 (window_width), so that
    w, [w - 1, w - 1] and, with causal, [w - 1, 0] get the same blocks; a side left unbounded keeps
    the default sizes.
    Packed documents keep the default sizes; their blocks end at document starts instead
    (`_block_plans`), so that blocks do not straddle documents.
    """
    q_auto, kv_auto = auto or (CAUSAL_CHUNKS if masks.causal else DEFAULT_CHUNKS)
    width = window_width(masks)
    if width is not None and width <= WINDOW_CHUNK_MAX:
        q_auto = kv_auto = max(WINDOW_CHUNK_MIN, round(width * WINDOW_CHUNK_SHARE))
    return (q_auto if q_chunk is None else q_chunk), (kv_auto if kv_chunk is None else kv_chunk)


def window_width(masks: Masks) -> int | None:
    """The window's width as chunk_sizes reads it: w for one width, max(left, right) + 1 for a pair (the
    one width with the same blocks when left == right, or right == 0), None when a side is unbounded."""
    left, right = masks.extents
    if masks.window is None or left is None or right is None:
        return None
    return max(left, right) + 1


WINDOW_CHUNK_SHARE = 0.5  # a window's block side, as a share of its width (chunk_sizes)
WINDOW_CHUNK_MIN = 64  # smaller blocks cost more in per-op overhead than they save in masked work

# CUDA's automatic sizes (cuda_chunk_sizes). A GPU has no cache for a block to fit in; what it pays per block is
# the dozen kernel launches from Python, so a call should run few, large blocks: the key blocks are
# CUDA_KV_CHUNK long, and a block has as many queries as its scores fit CUDA_SCORE_SHARE of the device's free
# memory, counting CUDA_SCORE_BYTES per score (the forward's fp32 scores and bias, P in the input dtype; the
# backward's fp32 P, dP and dS), a power of two between CUDA_Q_CHUNK_MIN and the cap (CUDA_Q_CHUNK_MAX, or
# CUDA_CAUSAL_Q_CHUNK_MAX causal: a causal query block computes its diagonal key blocks whole, so a taller one
# wastes more). At n = 16384, B1 H8, that is 4 x 16 blocks (causal: 8 query blocks of about 9), against 32 x 32
# of the CPU's sizes. The sizes do not depend on n: memory stays O(n) (a block's scores are at most
# q_chunk x kv_chunk per flattened head, the rest is O(n d)).
# What that buys, counted on a CPU (tests/backends/test_dispatch_counts.py, meta tensors under the CUDA plan): a
# forward call dispatches at most CUDA_OPS_PER_BLOCK operations that launch a kernel per (query block, key block)
# plus CUDA_OPS_FIXED (measured 12.6 and ~14 a block: 805 at n = 16384, 1033 causal; fwd_bwd 1431 and 1807).
CUDA_OPS_PER_BLOCK = {"fwd": 16, "fwd_bwd": 32}
CUDA_OPS_FIXED = {"fwd": 64, "fwd_bwd": 128}
CUDA_KV_CHUNK = 1024
CUDA_SCORE_SHARE = 1 / 8
CUDA_SCORE_BYTES = 16
CUDA_Q_CHUNK_MAX = 4096
CUDA_CAUSAL_Q_CHUNK_MAX = 2048
CUDA_Q_CHUNK_MIN = 128


def cuda_chunk_sizes(causal: bool, x_heads: int, free_bytes: int) -> tuple[int, int]:
    """(q_chunk, kv_chunk) for a call over `x_heads` flattened heads (batch x K/V heads) on a GPU with
    `free_bytes` free: kv_chunk = CUDA_KV_CHUNK, q_chunk the largest power of two whose block of scores,
    x_heads x q_chunk x kv_chunk x CUDA_SCORE_BYTES, fits CUDA_SCORE_SHARE of free_bytes, kept within
    [CUDA_Q_CHUNK_MIN, CUDA_Q_CHUNK_MAX] (CUDA_CAUSAL_Q_CHUNK_MAX when causal)."""
    fit = int(CUDA_SCORE_SHARE * free_bytes) // (max(1, x_heads) * CUDA_KV_CHUNK * CUDA_SCORE_BYTES)
    cap = CUDA_CAUSAL_Q_CHUNK_MAX if causal else CUDA_Q_CHUNK_MAX
    q_chunk = 1 << (fit.bit_length() - 1) if fit >= 1 else 0
    return max(CUDA_Q_CHUNK_MIN, min(cap, q_chunk)), CUDA_KV_CHUNK


@functools.lru_cache(maxsize=64)
def _cuda_auto(device_index: int, causal: bool, x_heads: int) -> tuple[int, int]:
    """cuda_chunk_sizes with the device's free memory when the first call (or prediction) of these flags and heads
    planned on it, then kept: the same sizes for the memory model, every call and the label, and no driver call
    inside a timed call."""
    free_bytes, _total = torch.cuda.mem_get_info(device_index)
    return cuda_chunk_sizes(causal, x_heads, free_bytes)


def auto_sizes(masks: Masks, device: torch.device | str, x_heads: int) -> tuple[int, int] | None:
    """The automatic (q_chunk, kv_chunk) of a mask without a window on `device`: CUDA's from its memory budget
    (cuda_chunk_sizes); None elsewhere, i.e. the CPU's measured DEFAULT_CHUNKS and CAUSAL_CHUNKS (so does a CUDA
    prediction on a machine without CUDA: it has no free memory to read)."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _cuda_auto(index, masks.causal, x_heads)


def resolve_options(options: Mapping[str, Any], device: torch.device | str, dtype: torch.dtype) -> dict[str, Any]:
    device_type = torch.device(device).type
    compute = options.get("compute") or "auto"
    if dtype not in _LOW:
        compute = "fp32"  # fp32/fp64 inputs: one scheme (named fp32 even for fp64, where nothing is cast)
    elif compute == "auto":
        # Like for like with the fused kernels on a GPU: tensor-core matmuls in the input dtype with fp32
        # accumulation. CPUs without fp16/bf16 matmul units run fp32 copies faster (and round less).
        compute = "input" if device_type == "cuda" else "fp32"
    return {
        "q_chunk": options.get("q_chunk"),  # None: auto, decided per call from the masks (chunk_sizes)
        "kv_chunk": options.get("kv_chunk"),
        "compute": compute,
        "compile": bool(options.get("compile", False)),
        **fp8_path.resolve(options, dtype, device),
    }


def kernel_label(options: Mapping[str, Any]) -> str:
    """q512-kv512 (sizes set), auto (both sized to the mask: kernel_ran says which ran) or q64-kvauto,
    with -mm_input when fp16/bf16 matmuls run in the input dtype (the compute scheme), -compiled."""
    q_chunk, kv_chunk = options.get("q_chunk"), options.get("kv_chunk")
    label = "auto" if q_chunk is None and kv_chunk is None else f"q{q_chunk or 'auto'}-kv{kv_chunk or 'auto'}"
    label += "-mm_input" if options.get("compute") == "input" else ""
    return label + ("-compiled" if options.get("compile", False) else "") + fp8_path.label(options)


def kernel_ran(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, *, masks: Masks, scale: float,
               q_chunk: int | None = None, kv_chunk: int | None = None, compute: str = "fp32",
               compile: bool = False, **fp8_options: Any) -> str | None:
    """The block sizes an auto option picked for these masks ("q128-kv128"; with documents
    "q512-kv512-cut": blocks end at document starts; "-band" when band runs computed some of the
    blocks, chunked_band.py), and with FP8 scaled_mm "dequant-shapes" (or per product) when the plan's
    key blocks or head_dim send a product back; None when the label says it all."""
    parts = []
    if q_chunk is None or kv_chunk is None:
        auto = _auto_of(masks, q_BHMD, k_BKND)
        q_run, kv_run = chunk_sizes(masks, q_chunk, kv_chunk, auto)
        label = f"q{q_run}-kv{kv_run}" + ("-cut" if masks.document_ids is not None else "")
        if band_applies(q_BHMD.device, q_BHMD.dtype, compute, compile, fp8_path.active(fp8_options)):
            group = q_BHMD.shape[1] // k_BKND.shape[1]
            forward_plans = _block_plans(masks, group, q_BHMD.shape[2], k_BKND.shape[2], q_chunk, kv_chunk, auto)[3]
            if any(isinstance(kv, chunked_band.BandRun) for plan in forward_plans for _, _, kv in plan):
                label += "-band"
        parts.append(label)
    if fp8_path.active(fp8_options):
        fp8_ran = fp8_mm.ran_label(fp8_options, _fp8_products(q_BHMD, k_BKND, masks, q_chunk, kv_chunk, fp8_options))
        parts += [fp8_ran] if fp8_ran else []
    return "-".join(parts) or None


def _fp8_products(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, masks: Masks, q_chunk: int | None,
                  kv_chunk: int | None, options: Mapping[str, Any]) -> tuple[str, str]:
    """How the call's two products run: the device's choice, unless a key block of the plan (or head_dim)
    breaks _scaled_mm's multiples of 16. (FP8 never takes band runs: its plan is the block loop's.)"""
    if fp8_mm.SCALED_MM not in options.get("fp8_products", ()):
        return fp8_mm.DEQUANT, fp8_mm.DEQUANT
    group = q_BHMD.shape[1] // k_BKND.shape[1]
    plans = _block_plans(masks, group, q_BHMD.shape[2], k_BKND.shape[2], q_chunk, kv_chunk,
                         _auto_of(masks, q_BHMD, k_BKND))[0]
    key_bounds = {bound for plan in plans for _, _, kv in plan for n0, n1, _ in kv for bound in (n0, n1)}
    return fp8_mm.call_products(options, q_BHMD.shape[-1], key_bounds)


def _auto_of(masks: Masks, q_BHMD: torch.Tensor, k_BKND: torch.Tensor) -> tuple[int, int] | None:
    """auto_sizes for a call on these tensors (its flattened heads: batch x K/V heads)."""
    return auto_sizes(masks, q_BHMD.device, k_BKND.shape[0] * k_BKND.shape[1])


def compiles(options: Mapping[str, Any]) -> bool:
    """Whether a call with these (resolved) options runs compiled code."""
    return bool(options.get("compile", False))


def _with_functions(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, masks: Masks, scale: float,
                    q_chunk: int | None, kv_chunk: int | None, compile: bool, fp8_options: Mapping[str, Any]) -> torch.Tensor:
    """Block by block over the mask's block map (selfattn/mods/blocks.py): hidden blocks skipped, partial ones
    masked with tiles kept from the warm-up call."""
    from selfattn.errors import Unsupported
    from selfattn.mods import blocks as mod_blocks

    for name, given in (("an fp8 precision", fp8_path.active(fp8_options)), ("compile=true", compile)):
        if given:
            raise Unsupported(f"chunked with a mask or score function: {name} is not built for it")
    return mod_blocks.attention(q_BHMD, k_BKND, v_BKND, masks=masks, scale=scale, q_chunk=q_chunk, kv_chunk=kv_chunk)


def attention(
    q_BHMD: torch.Tensor,
    k_BKND: torch.Tensor,
    v_BKND: torch.Tensor,
    *,
    masks: Masks,
    scale: float,
    q_chunk: int | None = None,
    kv_chunk: int | None = None,
    compute: str = "fp32",
    compile: bool = False,
    **fp8_options: Any,
) -> torch.Tensor:
    if masks.functions:  # a mask or score function (selfattn/mods/): the blocks its block map keeps
        return _with_functions(q_BHMD, k_BKND, v_BKND, masks, scale, q_chunk, kv_chunk, compile, fp8_options)
    if fp8_path.active(fp8_options):  # the FP8 hook: dequantized inputs, P cast before each P.V
        fp8_path.check_call(q_BHMD, k_BKND, v_BKND, fp8_options)
        products = _fp8_products(q_BHMD, k_BKND, masks, q_chunk, kv_chunk, fp8_options)
        ops = fp8_path.operands(q_BHMD, k_BKND, v_BKND, fp8_options)
        q8, k8, v8 = (x8.float() * s for x8, s in ops)
        fp8_blocks = _Fp8Blocks(products, ops, fp8_options, scale) if fp8_mm.SCALED_MM in products else None
        out_BHMD, _ = _forward(q8, k8, v8, masks, scale, q_chunk, kv_chunk, "fp32", compile,
                               p_cast=fp8_path.p_cast(fp8_options), fp8_blocks=fp8_blocks)
        return out_BHMD.to(q_BHMD.dtype)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q_BHMD, k_BKND, v_BKND)):
        return _ChunkedAttention.apply(q_BHMD, k_BKND, v_BKND, masks, scale, q_chunk, kv_chunk, compute, compile)
    out_BHMD, _ = _forward(q_BHMD, k_BKND, v_BKND, masks, scale, q_chunk, kv_chunk, compute, compile, need_lse=False)
    return out_BHMD.to(q_BHMD.dtype)


_LOW = (torch.float16, torch.bfloat16)


def _matmul_dtype(dtype: torch.dtype, compute: str) -> torch.dtype:
    """The dtype Q, K, V (and dO) enter the block matmuls in."""
    return torch.float32 if dtype in _LOW and compute == "fp32" else dtype


def _accumulator_dtype(dtype: torch.dtype) -> torch.dtype:
    """Scores, running max and sum, and the output accumulator: fp32 for fp16/bf16 in every scheme."""
    return torch.float32 if dtype in _LOW else dtype


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Batched a @ b with a result in the accumulator dtype: for fp16/bf16 operands the product is
    accumulated in fp32 and returned in fp32 (CUDA's bmm with out_dtype, as FlashAttention keeps S);
    a CPU has no such bmm, so there the fp16/bf16 product is rounded once before the upcast."""
    if a.dtype not in _LOW:
        return torch.bmm(a, b)
    if a.is_cuda:
        return torch.bmm(a, b, out_dtype=torch.float32)
    return torch.bmm(a, b).float()


def _mm_add(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """acc += a @ b, with a (P or dS, in fp32) cast to b's dtype first when b is fp16/bf16."""
    if b.dtype not in _LOW:
        acc.baddbmm_(a, b)
    else:
        acc.add_(_mm(a.to(b.dtype), b))


@dataclass(frozen=True)
class _Plan:
    """The blocks to compute, per group of sequences that see the same keys.

    Grouped-query attention without copying K/V: the `group` query heads that share a K/V head
    are one taller matrix of "virtual rows" r = g * q_len + i (query i of head g), so X (the
    flattened batch x kv heads) indexes K/V directly and each block product reads K/V once.
    """

    x_slices: list[slice]  # the rows of X each plan applies to (one slice unless masks differ per sequence)
    lo: list[torch.Tensor]  # per slice: (1, R) first key each virtual row sees
    hi: list[torch.Tensor]
    blocks: list[list]  # per slice: (m0, m1, [(n0, n1, mask_id or None), ...]) per query block
    forward_blocks: list[list]  # per slice: the same with band runs, (m0, m1, BandRun) (chunked_band.py)
    empty_rows: list[bool]  # per slice: whether some row sees no key
    kv_bounds: list[list[int]]  # per slice: the key blocks' boundaries (a trimmed block lies inside one)


def _plan(masks: Masks, batch: int, kv_heads: int, group: int, q_len: int, seq_len: int,
          q_chunk: int | None, kv_chunk: int | None, device: torch.device) -> _Plan:
    auto = auto_sizes(masks, device, batch * kv_heads) if q_chunk is None or kv_chunk is None else None
    lo, hi = masks.intervals(q_len, seq_len, device)  # (B or 1, q_len)
    lo, hi = lo.repeat(1, group), hi.repeat(1, group)  # virtual rows: every group sees the same keys
    if lo.shape[0] == 1:  # one plan for the whole batch
        pieces = [(slice(0, batch * kv_heads), lo, hi)]
    else:  # padding or documents: each sequence skips its own blocks
        pieces = [(slice(b * kv_heads, (b + 1) * kv_heads), lo[b:b + 1], hi[b:b + 1]) for b in range(batch)]
    kv_plans, empty_rows, kv_bounds, forward_plans = _block_plans(masks, group, q_len, seq_len, q_chunk, kv_chunk,
                                                                  auto)
    return _Plan(x_slices=[p[0] for p in pieces], lo=[p[1] for p in pieces], hi=[p[2] for p in pieces],
                 blocks=kv_plans, forward_blocks=forward_plans, empty_rows=empty_rows, kv_bounds=kv_bounds)


def _block_plans(masks: Masks, group: int, q_len: int, seq_len: int, q_chunk: int | None, kv_chunk: int | None,
                 auto: tuple[int, int] | None = None) -> tuple[list[list], list[bool], list[list[int]], list[list]]:
    """Per piece of _plan (the batch, or each sequence): its query blocks with their key blocks, whether
    some row sees no key, the key blocks' boundaries, and the forward's plan with band runs
    (chunked_band.forward_plan: only auto sizes get them, so set sizes time the block loop itself). Python values read from the intervals, so
    decided once per masks (Masks.decision): made inside every call they would wait on the GPU queue
    each time.

    Auto sizes (None) are chunk_sizes'; on an auto axis blocks also end at the cuts a block should
    not straddle: each head's first virtual row, and each document's first token (`masks.bounds`).
    Masked key blocks get an id per distinct hidden pattern, so that a call builds each mask once
    and reuses it (a causal or window mask repeats the same few patterns along the diagonal).
    """

    def decide(device: torch.device | str) -> tuple[list[list], list[bool], list[list[int]], list[list]]:
        q_size, kv_size = chunk_sizes(masks, q_chunk, kv_chunk, auto)
        lo, hi = masks.intervals(q_len, seq_len, device)
        lo, hi = lo.repeat(1, group), hi.repeat(1, group)
        rows = group * q_len
        plans, empties, all_kv_bounds, forward_plans = [], [], [], []
        for b in range(lo.shape[0]):
            p_lo, p_hi = lo[b:b + 1], hi[b:b + 1]
            doc_starts = _document_starts(masks, b)
            q_cuts = [g * q_len + c for g in range(group) for c in [0, *doc_starts]]
            q_bounds = bounds(rows, q_size, q_cuts if q_chunk is None else ())
            kv_bounds = bounds(seq_len, kv_size, doc_starts if kv_chunk is None else ())
            plan = list(blocks(p_lo, p_hi, rows, seq_len, q_size, kv_size, q_bounds=q_bounds, kv_bounds=kv_bounds))
            plans.append(_with_mask_ids(plan, p_lo, p_hi))
            empties.append(bool((p_lo > p_hi).any()))
            all_kv_bounds.append(kv_bounds)
            both_auto = q_chunk is None and kv_chunk is None
            forward_plans.append(chunked_band.forward_plan(plans[-1], p_lo, p_hi) if both_auto else plans[-1])
        return plans, empties, all_kv_bounds, forward_plans

    return masks.decision(("chunked_blocks", group, q_len, seq_len, q_chunk, kv_chunk, auto), decide)


def _document_starts(masks: Masks, b: int) -> list[int]:
    """The first token of each of sequence b's documents after its first one (none without documents)."""
    if masks.document_ids is None:
        return []
    ids = masks.document_ids[min(b, masks.document_ids.shape[0] - 1)]
    return (torch.nonzero(ids[1:] != ids[:-1]).flatten() + 1).tolist()


def _with_mask_ids(plan: list, lo: torch.Tensor, hi: torch.Tensor) -> list:
    """masks.blocks' plan with each needs_mask flag replaced by None (no mask) or the id of its hidden
    pattern: two blocks whose rows see the same keys relative to the block's corner share one id."""
    ids: dict[tuple, int] = {}
    out = []
    for m0, m1, kv in plan:
        kv_ids = []
        for n0, n1, needs_mask in kv:
            mask_id = None
            if needs_mask:  # key j of the block is hidden from a row when j < lo - n0 or j > hi - n0
                first = (lo[:, m0:m1] - n0).clamp(0, n1 - n0)
                last = (hi[:, m0:m1] - n0).clamp(-1, n1 - n0 - 1)
                pattern = (m1 - m0, n1 - n0, torch.cat([first, last]).cpu().numpy().tobytes())
                mask_id = ids.setdefault(pattern, len(ids))
            kv_ids.append((n0, n1, mask_id))
        out.append((m0, m1, kv_ids))
    return out


def prepare(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, *, masks: Masks, scale: float,
            q_chunk: int | None = None, kv_chunk: int | None = None, compute: str = "fp32",
            compile: bool = False, **fp8_options: Any) -> dict[str, float]:
    """Decide the block plan of these inputs' masks before the timed calls (no row column: it is quick)."""
    group = q_BHMD.shape[1] // k_BKND.shape[1]
    auto = _auto_of(masks, q_BHMD, k_BKND) if q_chunk is None or kv_chunk is None else None
    _block_plans(masks, group, q_BHMD.shape[2], k_BKND.shape[2], q_chunk, kv_chunk, auto)
    return {}


def _hidden(lo: torch.Tensor, hi: torch.Tensor, seq_len: int, m0: int, m1: int, n0: int, n1: int,
            dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """A block's mask as (bias, keep), each (1, m1-m0, n1-n0) in `dtype`: bias is -inf where the key is
    hidden from the virtual row and 0 elsewhere (added to scores whose max is taken); keep is 0 and 1."""
    keep = keep_from_intervals(lo, hi, seq_len, rows=torch.arange(m0, m1, device=lo.device), keys=(n0, n1))
    bias = torch.zeros(keep.shape, dtype=dtype, device=lo.device).masked_fill_(~keep, float("-inf"))
    return bias, keep.to(dtype)


# Masked blocks, and why they take two float masks. On a CPU, two obvious ways of masking cost
# more than the block's matmuls: masked_fill_ with a boolean mask broadcast over the heads (5 ns a
# score, against 0.16 ns for an add_ of a float bias), and exp() of a hidden score (-inf), or of
# any score more than ~87 below the row's reference: torch's vectorized exp leaves its fast path
# for inputs whose result is not a normal float (-inf: 6 ns a score, -88 to -200: 25 to 60 ns,
# against 0.24 ns; flushing denormals does not help). So a masked block adds the -inf bias where
# a max must skip the hidden keys, then clamps the shifted scores at EXP_FLOOR before exp() and
# multiplies by `keep` after it: the hidden probabilities are exactly 0, the visible ones exact but
# for those below e^EXP_FLOOR (1.6e-38 of the row's largest term), which are raised to it.
EXP_FLOOR = -87.0


def _masked_exp_(s_Xmn: torch.Tensor, mask) -> torch.Tensor:
    """exp() in place of shifted scores (-inf where the mask hides a key), with hidden ones exactly 0."""
    if mask is None:
        return s_Xmn.exp_()
    return s_Xmn.clamp_min_(EXP_FLOOR).exp_().mul_(mask[1])


class _HiddenMasks:
    """The masks (_hidden) of one call's blocks, each distinct pattern built once (the plan's mask ids).

    At most KEEP of them stay alive (the most recent), so the memory stays a few blocks whatever the
    plan: a causal or window plan reuses one or two patterns, a documents plan's are mostly its own."""

    KEEP = 4

    def __init__(self, lo: torch.Tensor, hi: torch.Tensor, seq_len: int, dtype: torch.dtype) -> None:
        self.lo, self.hi, self.seq_len, self.dtype = lo, hi, seq_len, dtype
        self.built: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def get(self, mask_id: int | None, m0: int, m1: int, n0: int, n1: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        if mask_id is None:
            return None
        hidden = self.built.pop(mask_id, None)
        if hidden is None:
            hidden = _hidden(self.lo, self.hi, self.seq_len, m0, m1, n0, n1, self.dtype)
            if len(self.built) >= self.KEEP:
                self.built.pop(next(iter(self.built)))
        self.built[mask_id] = hidden  # the most recent last
        return hidden


def band_applies(device: torch.device | str, dtype: torch.dtype, compute: str, compile: bool = False,
                 fp8: bool = False) -> bool:
    """Whether a forward runs its plan's band runs (chunked_band.py): eager, no FP8 cast of P, on a CPU
    (where it was measured), with scores in the matmuls' own dtype (fp32/fp64, or fp16/bf16 on fp32 copies)."""
    return (torch.device(device).type == "cpu" and not compile and not fp8
            and _matmul_dtype(dtype, compute) == _accumulator_dtype(dtype))


def _forward(q_BHMD, k_BKND, v_BKND, masks: Masks, scale: float, q_chunk: int | None, kv_chunk: int | None, compute: str,
             compile: bool = False, p_cast=None, need_lse: bool = True, fp8_blocks: _Fp8Blocks | None = None):
    """Returns out (B, H, M, D) and logsumexp (X, R), both in the accumulator dtype (+inf: a row that sees no key;
    with need_lse=False the band runs' rows of it are left unset). fp8_blocks: the fp8 tensors the block
    products read instead (fp8_matmul=scaled_mm)."""
    b, h, q_len, d = q_BHMD.shape
    kv_heads, seq_len = k_BKND.shape[1], k_BKND.shape[2]
    cdtype = _matmul_dtype(q_BHMD.dtype, compute)
    plan = _plan(masks, b, kv_heads, h // kv_heads, q_len, seq_len, q_chunk, kv_chunk, q_BHMD.device)
    band = band_applies(q_BHMD.device, q_BHMD.dtype, compute, compile, p_cast is not None)
    kv_plans = plan.forward_blocks if band else plan.blocks
    q_XRD = q_BHMD.reshape(b * kv_heads, (h // kv_heads) * q_len, d).to(cdtype)
    mods = chunked_mods.build(masks, b, h, kv_heads, q_len, seq_len, q_BHMD.device, _accumulator_dtype(q_BHMD.dtype))
    need_lse = need_lse or masks.sink is not None  # the sink is folded in from each row's log-sum-exp
    # The scale folded into Q once (a pass over Q), unless band runs take it as their product's alpha: then
    # the loop's few blocks scale their own rows, which gives the same values
    q_scale = scale if any(isinstance(kv, chunked_band.BandRun) for p in kv_plans for _, _, kv in p) else 1.0
    if q_scale == 1.0:
        q_XRD = q_XRD * scale
    k_XND, v_XND = _flat(k_BKND, cdtype), _flat(v_BKND, cdtype)
    block = compiled(_forward_block, dynamic=True) if compile else None  # None: eager, lazy rescaling where it applies
    if p_cast is not None:  # fp8: P cast before each P.V, in the exact step only (the lazy step's P can pass 1)
        block = functools.partial(block or _forward_block, p_cast=p_cast)
    flat: Callable[..., Any] = _forward_flat
    tensors: tuple[torch.Tensor, ...] = (q_XRD, k_XND, v_XND)
    if fp8_blocks is not None:  # the fp8 tensors and their row scales, split over heads alongside Q, K, V
        flat, tensors = _forward_flat_fp8, tensors + fp8_blocks.tensors_X
    outs, lses = [], []
    for x, lo, hi, kv_plan, empty in zip(plan.x_slices, plan.lo, plan.hi, kv_plans, plan.empty_rows):
        out_XRD, lse_XR = chunked_pool.over_heads(flat, "forward", tuple(t[x] for t in tensors), lo, hi,
                                                  kv_plan, (empty, block, need_lse, q_scale, fp8_blocks, masks.sink),
                                                  single=compile, mods=None if mods is None else mods.heads(x))
        outs.append(out_XRD)
        lses.append(lse_XR)
    out_XRD, lse_XR = (outs[0], lses[0]) if len(outs) == 1 else (torch.cat(outs), torch.cat(lses))
    return out_XRD.view(b, h, q_len, d), lse_XR


def _with_sink_(out_XmD: torch.Tensor, lse_Xm: torch.Tensor, sink: float) -> None:
    """Fold the sink logit into finished rows, in place: each row's output times sigmoid(lse - sink)
    (score_mods.sink_rescale: its softmax's denominator gains exp(sink)), and the row's log-sum-exp with
    the sink's term, for the backward's P = exp(S - lse). A row that sees no key keeps its zeros and
    lse = +inf (sigmoid(+inf) = 1). One O(rows d) pass after the blocks, whichever computed them (block
    loop, band runs, FP8, compiled blocks), run by each worker on its own rows (top-level ops would each
    wait on an OpenMP barrier: measured 10% of a causal n = 2048 call under load). The sink has no value
    and no gradient of its own, so the backward's delta = dO . O holds as it is."""
    out_XmD.mul_(sink_rescale(lse_Xm, sink).unsqueeze(-1))
    torch.logaddexp(lse_Xm, lse_Xm.new_tensor(sink), out=lse_Xm)


def _flat(t_BKLD: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    b, heads, length, d = t_BKLD.shape
    return t_BKLD.reshape(b * heads, length, d).to(dtype)


def _forward_flat_fp8(q_XRD, k_XND, v_XND, q8_XRD, sq_XR1, k8_XND, sk_XN1, v8T_XDN, sv_XN1, lo, hi, kv_plan,
                      empty_rows: bool, block, need_lse: bool, q_scale: float, fp8_blocks: _Fp8Blocks,
                      sink: float | None = None, mods=None):
    """_forward_flat with the fp8 tensors of these heads (over_heads splits them along X like Q, K, V)."""
    return _forward_flat(q_XRD, k_XND, v_XND, lo, hi, kv_plan, empty_rows, block, need_lse, q_scale,
                         fp8_blocks.with_tensors(q8_XRD, sq_XR1, k8_XND, sk_XN1, v8T_XDN, sv_XN1), sink, mods)


def _forward_flat(q_XRD, k_XND, v_XND, lo, hi, kv_plan, empty_rows: bool, block=None, need_lse: bool = True,
                  q_scale: float = 1.0, fp8_blocks=None, sink: float | None = None,
                  mods: chunked_mods.BlockMods | None = None):
    """The online softmax over key blocks for every block of virtual rows, on flattened heads X (a band
    run's rows: chunked_band.forward_run). q_XRD is scaled already, or to be scaled by `q_scale`.
    fp8_blocks: the fp8 tensors of FP8 scaled_mm (_Fp8Blocks), whose products each block then runs.
    mods: soft-cap and ALiBi (chunked_mods.py), applied to each block's scores before its max; sink: folded
    into the plan's rows at the end (_with_sink_)."""
    x, rows, d = q_XRD.shape
    seq_len = k_XND.shape[1]
    kT_XDN = k_XND.transpose(1, 2)
    adtype = _accumulator_dtype(q_XRD.dtype)
    out_XRD = torch.empty(x, rows, d, dtype=adtype, device=q_XRD.device)
    lse_XR = torch.empty(x, rows, dtype=adtype, device=q_XRD.device)
    # Its Q copy needs the scaled Q. Its scores arrive already shifted by the max: ALiBi's bias is still
    # added after the shift (s - m + bias), a soft-cap's tanh of s cannot be
    lazy = (block is None and q_scale == 1.0 and (mods is None or mods.softcap is None)
            and _lazy_rescale(q_XRD, kv_plan))
    block = block or _forward_block
    hidden_masks = _HiddenMasks(lo, hi, seq_len, adtype)
    band_biases: dict[int, torch.Tensor] = {}  # one per band pattern and call
    band_sizes = [(m1 - m0) * kv.span for m0, m1, kv in kv_plan if isinstance(kv, chunked_band.BandRun)]
    # empty where no band run reads it
    band_workspace = torch.empty(2 * max(band_sizes, default=0), dtype=adtype, device=q_XRD.device)
    if lazy:  # Q and K with one feature more: the row's shift (-running max) against a key feature of 1
        q_ext_XRD = torch.cat([q_XRD, q_XRD.new_zeros(x, rows, 1)], dim=2)
        # K's rows with a 1 appended, used through a transposed view: the product reads either layout as
        # fast, and the row copy costs a quarter of the transposing one (0.9 against 3.7 ms at n=4096, 8 heads)
        kT_ext_XDN = torch.cat([k_XND, k_XND.new_ones(x, seq_len, 1)], dim=2).transpose(1, 2)
    for m0, m1, kv_blocks in kv_plan:
        if isinstance(kv_blocks, chunked_band.BandRun):
            if kv_blocks.pattern not in band_biases:
                band_biases[kv_blocks.pattern] = chunked_band.bias(lo, hi, seq_len, m0, kv_blocks, adtype)
            chunked_band.forward_run(q_XRD, k_XND, v_XND, out_XRD, lse_XR, m0, m1, kv_blocks,
                                     band_biases[kv_blocks.pattern], need_lse, band_workspace, q_scale, mods)
            continue
        if not kv_blocks:  # no query of the block sees any key: zeros, and P = exp(S - inf) = 0 in backward
            out_XRD[:, m0:m1] = 0
            lse_XR[:, m0:m1] = float("inf")
            continue
        q_XmD = q_XRD[:, m0:m1] if q_scale == 1.0 else q_XRD[:, m0:m1] * q_scale
        # the running state before any key: empty output and sum, max -inf (every block looks alike,
        # so a compiled block needs one graph, not a second one for the first key block)
        acc_XmD = torch.zeros(x, m1 - m0, d, dtype=adtype, device=q_XRD.device)
        row_max_Xm1 = torch.full((x, m1 - m0, 1), float("-inf"), dtype=adtype, device=q_XRD.device)
        row_sum_Xm1 = torch.zeros(x, m1 - m0, 1, dtype=adtype, device=q_XRD.device)
        shift_stale = True  # whether q_ext's shift column lags the running max
        for n0, n1, mask_id in kv_blocks:
            mask_1mn = hidden_masks.get(mask_id, m0, m1, n0, n1)
            score_mod = None if mods is None else mods.block(m0, m1, n0, n1)
            if lazy and not shift_stale and _lazy_block(q_ext_XRD[:, m0:m1], kT_ext_XDN[:, :, n0:n1], v_XND[:, n0:n1],
                                                        mask_1mn, acc_XmD, row_sum_Xm1, score_mod):
                continue
            extra = {} if fp8_blocks is None else {"fp8_block": fp8_blocks.block(m0, m1, n0, n1)}
            if score_mod is not None:
                extra["score_mod"] = score_mod
            acc_XmD, row_max_Xm1, row_sum_Xm1 = block(q_XmD, kT_XDN[:, :, n0:n1], v_XND[:, n0:n1], mask_1mn,
                                                      acc_XmD, row_max_Xm1, row_sum_Xm1, **extra)
            if lazy:
                torch.neg(row_max_Xm1, out=q_ext_XRD[:, m0:m1, d:])
                shift_stale = False
        torch.div(acc_XmD, row_sum_Xm1, out=out_XRD[:, m0:m1])
        lse_XR[:, m0:m1] = (row_max_Xm1 + row_sum_Xm1.log()).squeeze(-1)
        if empty_rows:  # rows of this block that saw no key: 0/0 above; zeros and lse = +inf instead
            none_Xm1 = row_sum_Xm1 == 0
            out_XRD[:, m0:m1].masked_fill_(none_Xm1, 0.0)
            lse_XR[:, m0:m1].masked_fill_(none_Xm1.squeeze(-1), float("inf"))
    if sink is not None and kv_plan:  # this plan's rows: a contiguous run of them (chunked_pool.split_plan)
        rows_done = slice(kv_plan[0][0], kv_plan[-1][1])
        _with_sink_(out_XRD[:, rows_done], lse_XR[:, rows_done], sink)
    return out_XRD, lse_XR


# Lazy rescaling (the "conditional rescale" of FlashAttention-4, here on a CPU). The online softmax
# needs a reference m per row only so that exp(s - m) cannot overflow; it need not be the running
# max. After a query block's first key block (the exact step, _forward_block) fixes m, each later
# block takes exp(s - m) with that m: its max is not computed, nothing is rescaled, and the shift
# itself is folded into the score matmul as one more feature (q's is -m, k's is 1), so the block's
# scores arrive shifted. That saves three of the five passes over each block of scores (amax, sub,
# and the correction of the sum and the output). The result is the same softmax: any m gives it,
# because out = acc / sum and lse = m + log(sum) use the same m. The block's own sum says whether
# m was still safe: when some row's sum passes RESCALE_LIMIT (a score more than ~27 above m; or
# inf or NaN), the block is dropped and redone by the exact step, which moves m to the true max.
# One host read per block: CPU only (on a GPU it would wait for the queue every block).
RESCALE_LIMIT = 2.0 ** 40  # far below fp32's overflow even summed over every key block and scaled by V


LAZY_MIN_BLOCKS = 3  # key blocks per query block, on average, for the lazy step to pay for its copies


def _lazy_rescale(q_XRD: torch.Tensor, kv_plan: list) -> bool:
    """Whether blocks after a query block's first one take the lazy step: eager code on a CPU, in fp32/fp64,
    with enough key blocks per query block that the lazy ones repay the O(n d) copies of Q and K it makes
    (a window's or documents' plan has one to three, mostly masked: there it measured 10% slower)."""
    loop = [kv for _, _, kv in kv_plan if not isinstance(kv, chunked_band.BandRun)]  # band runs take no lazy step
    blocks_per_query_block = sum(len(kv) for kv in loop) / max(1, len(loop))
    return (q_XRD.device.type == "cpu" and q_XRD.dtype in (torch.float32, torch.float64)
            and blocks_per_query_block >= LAZY_MIN_BLOCKS)


def _lazy_block(q_ext_XmD, kT_ext_XDn, v_XnD, mask_1mn, acc_XmD, row_sum_Xm1, score_mod=None) -> bool:
    """One key block with the reference max kept (see RESCALE_LIMIT): acc and the sum updated in place
    and True, or False (nothing updated) when the block must take the exact step instead. score_mod:
    ALiBi's (no soft-cap: _forward_flat keeps those off this step), its bias added to the shifted scores."""
    p_Xmn = torch.bmm(q_ext_XmD, kT_ext_XDn)  # the scores minus the row's reference max
    if score_mod is not None:
        chunked_mods.transform_(p_Xmn, *score_mod)
    # No max to take, so no -inf bias either: keep zeroes the hidden keys' exp() (one that overflowed
    # gives inf * 0 = NaN, and the check below sends the block to the exact step)
    _masked_exp_(p_Xmn, mask_1mn)
    block_sum_Xm1 = p_Xmn.sum(dim=-1, keepdim=True)
    if not bool(block_sum_Xm1.max() <= RESCALE_LIMIT):  # also catches inf and NaN
        return False
    row_sum_Xm1.add_(block_sum_Xm1)
    acc_XmD.baddbmm_(p_Xmn, v_XnD)
    return True


def _forward_block(q_XmD, kT_XDn, v_XnD, mask_1mn, acc_XmD, row_max_Xm1, row_sum_Xm1, p_cast=None, fp8_block=None,
                   score_mod=None):
    """One key block of the online softmax: (acc, running max, running sum) after it; acc and the
    sum are updated in place. Before the first block they are zeros and the max is -inf, so the
    first correction is exp(-inf) = 0. `mask_1mn`: None or _hidden's (bias, keep). fp8_block: this
    block's fp8 tensors (_Fp8Blocks.block), whose products replace the dequantized ones where it says.
    score_mod: soft-cap and ALiBi for this block (chunked_mods.BlockMods.block), before the mask and the max."""
    s_Xmn = _mm(q_XmD, kT_XDn) if fp8_block is None or not fp8_block.qk else fp8_block.scores()
    if score_mod is not None:
        chunked_mods.transform_(s_Xmn, *score_mod)
    if mask_1mn is not None:
        s_Xmn.add_(mask_1mn[0])  # -inf where hidden
    new_max_Xm1 = torch.maximum(row_max_Xm1, s_Xmn.amax(dim=-1, keepdim=True))
    if mask_1mn is not None:  # a row may see no key of this block yet: keep exp() away from -inf - -inf
        new_max_Xm1 = new_max_Xm1.masked_fill(new_max_Xm1 == float("-inf"), 0.0)
    p_Xmn = _masked_exp_(s_Xmn.sub_(new_max_Xm1), mask_1mn)
    correction_Xm1 = torch.exp(row_max_Xm1 - new_max_Xm1)
    row_sum_Xm1.mul_(correction_Xm1).add_(p_Xmn.sum(dim=-1, keepdim=True))
    acc_XmD.mul_(correction_Xm1)
    if fp8_block is not None and fp8_block.pv:  # fp8 scaled_mm: P cast and multiplied with V8 (fp8_mm.pv)
        acc_XmD.add_(fp8_block.out(p_Xmn))
    else:
        _mm_add(acc_XmD, p_Xmn if p_cast is None else p_cast(p_Xmn), v_XnD)  # fp8: P's cast
    return acc_XmD, new_max_Xm1, row_sum_Xm1


class _Fp8Blocks:
    """The fp8 tensors of an FP8 call with fp8_matmul=scaled_mm, flattened as Q, K, V are ((X, rows, D),
    V8 transposed per head so that its pieces are column-major), with their scales as rows (X, rows, 1):
    Q's carry the softmax scale, folded in once as the dequant path folds it into Q."""

    def __init__(self, products: tuple[str, str], ops, options: Mapping[str, Any], scale: float,
                 tensors_X: tuple | None = None) -> None:
        self.qk, self.pv = (way == fp8_mm.SCALED_MM for way in products)
        self.products, self.ops, self.options, self.scale = products, ops, options, scale
        self.per_tensor = options["fp8_scaling"] != "block"
        if tensors_X is None:
            (q8, sq), (k8, sk), (v8, sv) = ops
            b, h, q_len, d = q8.shape
            kv_heads, seq_len = k8.shape[1], k8.shape[2]
            x, rows = b * kv_heads, (h // kv_heads) * q_len
            tensors_X = (q8.reshape(x, rows, d), fp8_mm.scale_rows(sq, (x, rows, 1)) * scale,
                         k8.reshape(x, seq_len, d), fp8_mm.scale_rows(sk, (x, seq_len, 1)),
                         v8.reshape(x, seq_len, d).transpose(1, 2).contiguous(), fp8_mm.scale_rows(sv, (x, seq_len, 1)))
        self.tensors_X = tensors_X

    def with_tensors(self, *tensors_X: torch.Tensor) -> _Fp8Blocks:
        """The same call on a share of the heads (chunked_pool.over_heads' slice)."""
        return _Fp8Blocks(self.products, self.ops, self.options, self.scale, tensors_X)

    def block(self, m0: int, m1: int, n0: int, n1: int) -> _Fp8Block:
        return _Fp8Block(self, m0, m1, n0, n1)


class _Fp8Block:
    """One (query block, key block) of _Fp8Blocks: its two products on the fp8 tensors."""

    def __init__(self, blocks: _Fp8Blocks, m0: int, m1: int, n0: int, n1: int) -> None:
        self.blocks, self.qk, self.pv = blocks, blocks.qk, blocks.pv
        self.rows, self.keys, self.n0 = slice(m0, m1), slice(n0, n1), n0

    def scores(self) -> torch.Tensor:
        q8, sq, k8, sk, _, _ = self.blocks.tensors_X
        return fp8_mm.qk(q8[:, self.rows], sq[:, self.rows], k8[:, self.keys], sk[:, self.keys], self.blocks.per_tensor)

    def out(self, p_Xmn: torch.Tensor) -> torch.Tensor:
        _, _, _, _, v8T, sv = self.blocks.tensors_X
        return fp8_mm.pv(p_Xmn, self.blocks.options, v8T[:, :, self.keys], sv[:, self.keys], self.blocks.per_tensor,
                         self.n0)


def _backward(grad_BHMD, q_BHMD, k_BKND, v_BKND, out_BHMD, lse_XR, masks: Masks, scale, q_chunk, kv_chunk, compute,
              compile: bool = False):
    """dq, dk, dv by recomputing each block's probabilities P = exp(S - lse)."""
    b, h, q_len, d = q_BHMD.shape
    kv_heads, seq_len = k_BKND.shape[1], k_BKND.shape[2]
    cdtype = _matmul_dtype(q_BHMD.dtype, compute)
    flat_rows = (b * kv_heads, (h // kv_heads) * q_len, d)
    q_XRD = q_BHMD.reshape(flat_rows).to(cdtype) * scale
    do_XRD, out_XRD = grad_BHMD.reshape(flat_rows).to(cdtype), out_BHMD.reshape(flat_rows)
    k_XND, v_XND = _flat(k_BKND, cdtype), _flat(v_BKND, cdtype)
    plan = _plan(masks, b, kv_heads, h // kv_heads, q_len, seq_len, q_chunk, kv_chunk, q_BHMD.device)
    block = compiled(_backward_block, dynamic=True) if compile else _backward_block
    mods = chunked_mods.build(masks, b, h, kv_heads, q_len, seq_len, q_BHMD.device, out_XRD.dtype)
    grads = []
    for x, lo, hi, kv_plan, kv_bounds in zip(plan.x_slices, plan.lo, plan.hi, plan.blocks, plan.kv_bounds):
        grads.append(chunked_pool.over_heads(_backward_flat, "backward",
                                             (q_XRD[x], k_XND[x], v_XND[x], do_XRD[x], out_XRD[x], lse_XR[x]), lo, hi,
                                             kv_plan, (kv_bounds, block), single=compile,
                                             mods=None if mods is None else mods.heads(x)))
    dq_XRD, dk_XND, dv_XND = grads[0] if len(grads) == 1 else (torch.cat(g) for g in zip(*grads))
    dq_XRD.mul_(scale)  # d/dq = d/d(scaled q) * scale
    dtype = q_BHMD.dtype
    return (
        dq_XRD.view(b, h, q_len, d).to(dtype),
        dk_XND.view(b, kv_heads, seq_len, d).to(dtype),
        dv_XND.view(b, kv_heads, seq_len, d).to(dtype),
    )


def _backward_flat(q_XRD, k_XND, v_XND, do_XRD, out_XRD, lse_XR, lo, hi, kv_plan, kv_bounds: list[int], block=None,
                   mods: chunked_mods.BlockMods | None = None):
    """Gradients w.r.t. the scaled q, k and v, on flattened heads X (mods: the forward's score transforms)."""
    seq_len = k_XND.shape[1]
    # delta_i = sum_j P_ij dP_ij = dO_i . O_i (FlashAttention-2's D_i), in the accumulator dtype
    delta_XR1 = (do_XRD.to(out_XRD.dtype) * out_XRD).sum(dim=-1, keepdim=True)
    adtype = out_XRD.dtype
    lse_XR1 = lse_XR.unsqueeze(-1)
    # Accumulators are contiguous per block (baddbmm_ into a strided slice falls back to a
    # per-matrix loop); they are concatenated once at the end, an O(n d) copy.
    spans = list(zip(kv_bounds[:-1], kv_bounds[1:]))
    dk_parts = [torch.zeros_like(k_XND[:, b0:b1], dtype=adtype) for b0, b1 in spans]
    dv_parts = [torch.zeros_like(v_XND[:, b0:b1], dtype=adtype) for b0, b1 in spans]
    block = block or _backward_block
    hidden_masks = _HiddenMasks(lo, hi, seq_len, adtype)
    dq_parts = []
    for m0, m1, kv_blocks in kv_plan:
        q_XmD, do_XmD = q_XRD[:, m0:m1], do_XRD[:, m0:m1]
        dq_XmD = torch.zeros_like(q_XmD, dtype=adtype)
        for n0, n1, mask_id in kv_blocks:
            mask_1mn = hidden_masks.get(mask_id, m0, m1, n0, n1)
            part = bisect.bisect_right(kv_bounds, n0) - 1  # the key block this (trimmed) one lies in
            b0 = kv_bounds[part]
            score_mod = {} if mods is None else {"score_mod": mods.block(m0, m1, n0, n1)}
            block(q_XmD, k_XND[:, n0:n1], v_XND[:, n0:n1], do_XmD, lse_XR1[:, m0:m1], delta_XR1[:, m0:m1], mask_1mn,
                  dq_XmD, dk_parts[part][:, n0 - b0 : n1 - b0], dv_parts[part][:, n0 - b0 : n1 - b0], **score_mod)
        dq_parts.append(dq_XmD)
    return torch.cat(dq_parts, dim=1), torch.cat(dk_parts, dim=1), torch.cat(dv_parts, dim=1)


def _backward_block(q_XmD, k_XnD, v_XnD, do_XmD, lse_Xm1, delta_Xm1, mask_1mn, dq_XmD, dk_XnD, dv_XnD,
                    score_mod: chunked_mods.BlockMod | None = None) -> None:
    """One block's share of the gradients, added in place to dq, dk and dv (probabilities recomputed;
    score_mod: the forward's soft-cap and ALiBi, whose tanh the soft-cap's derivative needs)."""
    s_Xmn = _mm(q_XmD, k_XnD.transpose(1, 2))
    tanh_Xmn = None if score_mod is None else chunked_mods.transform_(s_Xmn, *score_mod, keep_tanh=True)
    if mask_1mn is not None:
        s_Xmn.add_(mask_1mn[0])  # -inf where hidden (so that a hidden score cannot overflow exp)
    p_Xmn = _masked_exp_(s_Xmn.sub_(lse_Xm1), mask_1mn)
    _mm_add(dv_XnD, p_Xmn.transpose(1, 2), do_XmD)
    dp_Xmn = _mm(do_XmD, v_XnD.transpose(1, 2))
    ds_Xmn = chunked_mods.softcap_grad_(dp_Xmn.sub_(delta_Xm1).mul_(p_Xmn), tanh_Xmn)
    _mm_add(dq_XmD, ds_Xmn, k_XnD)
    _mm_add(dk_XnD, ds_Xmn.transpose(1, 2), q_XmD)


class _ChunkedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, masks, scale, q_chunk, kv_chunk, compute, compile):
        out_BHMD, lse_XR = _forward(q, k, v, masks, scale, q_chunk, kv_chunk, compute, compile)
        ctx.save_for_backward(q, k, v, out_BHMD, lse_XR)  # O(n d) and O(n): no score block survives
        ctx.config = (masks, scale, q_chunk, kv_chunk, compute, compile)
        return out_BHMD.to(q.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out_BHMD, lse_XR = ctx.saved_tensors
        dq, dk, dv = _backward(grad_out, q, k, v, out_BHMD, lse_XR, *ctx.config)
        return dq, dk, dv, None, None, None, None, None, None


def _band_bytes(point: Point, options: Mapping[str, Any], device: str, q_chunk: int, a: int) -> int:
    """A forward's band runs (chunked_band.py): per worker thread, one run's scores and their softmax
    (and with ALiBi the run's distances |p - j|, chunked_mods.BlockMods.band_distances).
    An upper bound: it assumes a window's blocks form runs whenever band_applies allows them."""
    auto = options.get("q_chunk") is None and options.get("kv_chunk") is None
    low = point.element_bytes < FP32_BYTES
    left, right = window_extents(point.window, point.causal)
    if (left is None or right is None or point.masks_per_sequence or not auto
            or str(point.precision).startswith("fp8")
            or not band_applies(device, torch.float16 if low else torch.float32, options.get("compute", "fp32"),
                                bool(options.get("compile", False)))):
        return 0
    block = chunked_band.band_block(q_chunk)
    span = block + left + right  # a row sees left + right + 1 keys; a block of them, block - 1 more
    rows = min(max(1, chunked_band.BAND_ROWS // block) * block, point.q_len_resolved)
    workers = min(torch.get_num_threads(), point.batch * point.kv_heads_resolved) if device == "cpu" else 1
    return workers * (3 if point.alibi else 2) * rows * span * a


def _variant_bytes(point: Point, block: int, q_chunk: int, kv_chunk: int, rows_c: int, a: int) -> tuple[int, int]:
    """(forward, backward) bytes the score transforms add (chunked_mods.py, _with_sink_): ALiBi's slope per
    (head, query row) and one block's distances |p - j|; the soft-cap's tanh, kept for its derivative, one
    block more in the backward (the forward caps in place); the sink's rescale factor and its new log-sum-exp,
    a value per query row each. `block`: one block of scores over every flattened head."""
    fwd = bwd = 0
    if point.alibi:
        fwd = bwd = rows_c + q_chunk * kv_chunk * a
    if point.softcap is not None:
        bwd += block
    if point.sink is not None:
        fwd += 2 * rows_c
    return fwd, bwd


def _functions_mem_bytes(point: Point, options: Mapping[str, Any]) -> int:
    """A mask or score function's path: its block map's blocks (selfattn/mods/memory.py)."""
    from selfattn.mods.blocks import DEFAULT_BLOCK
    from selfattn.mods.memory import block_call_bytes

    return block_call_bytes(point, options.get("q_chunk") or DEFAULT_BLOCK, options.get("kv_chunk") or DEFAULT_BLOCK)


def _model_chunk_sizes(point: Point, options: Mapping[str, Any], device: str) -> tuple[int, int]:
    """The block sizes the point's calls use: the options', else the device's automatic ones (on CUDA from its
    memory budget, the calls' own sizes)."""
    point_masks = Masks(causal=point.causal, window=point.window)
    auto = None
    if device == "cuda" and (options.get("q_chunk") is None or options.get("kv_chunk") is None):
        auto = auto_sizes(point_masks, "cuda", point.batch * point.kv_heads_resolved)
    return chunk_sizes(point_masks, options.get("q_chunk"), options.get("kv_chunk"), auto)


def predict_mem_bytes(point: Point, options: Mapping[str, Any], device: str) -> int:
    """O(n d) copies plus a few q_chunk x kv_chunk blocks per (batch, head); never O(n^2)."""
    if point.functions:  # a mask or score function: its block map's path (selfattn/mods/memory.py)
        return _functions_mem_bytes(point, options)
    s = point.element_bytes
    out, grads = point.out_bytes, point.grad_bytes
    low = s < FP32_BYTES  # fp16/bf16: scores and accumulators in fp32, results cast back
    casts = low and options.get("compute", "fp32") == "fp32"  # the fp32 scheme also makes fp32 copies of Q, K, V, dO
    c = FP32_BYTES if casts else s  # what Q, K, V enter the block matmuls as
    a = FP32_BYTES if low else s  # scores, running stats, accumulators
    bh, d = point.batch * point.heads, point.head_dim
    q_len, seq_len = point.q_len_resolved, point.seq_len
    group = point.heads // point.kv_heads_resolved
    q_size, kv_size = _model_chunk_sizes(point, options, device)
    q_chunk = min(q_size, group * q_len)  # blocks of virtual rows (cuts only make blocks smaller)
    kv_chunk = min(kv_size, seq_len)
    bkv = point.batch * point.kv_heads_resolved  # K and V are per K/V head (GQA shares them)
    per_sequence = point.masks_per_sequence
    x = point.kv_heads_resolved if per_sequence else bkv  # flattened heads one plan runs over at once
    block = x * q_chunk * kv_chunk * a  # one block of scores for each of them
    # the masks kept (in the accumulator dtype), and one being built with its boolean; none without a mask
    hidden = ((_HiddenMasks.KEEP + 1) * q_chunk * kv_chunk * a + 2 * q_chunk * kv_chunk) if point.masked else 0
    q_c, kv_c, rows_c = bh * q_len * d * c, bkv * seq_len * d * c, bh * q_len * a
    out_acc = bh * q_len * d * a  # the output in the accumulator dtype
    if per_sequence:  # each sequence runs its own plan; their outputs are concatenated once
        out += out_acc + rows_c
    # forward: the scaled q (and its fp32 cast), fp32 k/v casts, output, log-sum-exp,
    # two score blocks alive across an iteration, the block's accumulator, the output cast back
    fwd = q_c * (2 if casts else 1) + (2 * kv_c if casts else 0) + out_acc + rows_c + 2 * block + x * q_chunk * d * a
    variant_fwd, variant_bwd = _variant_bytes(point, block, q_chunk, kv_chunk, rows_c, a)
    fwd += hidden + _band_bytes(point, options, device, q_chunk, a) + variant_fwd
    if device == "cpu" and not low:  # lazy rescaling's Q and K with one feature more (an upper bound:
        fwd += (bh * q_len + bkv * seq_len) * (d + 1) * a  # plans with few key blocks per query block skip it)
    fwd += (out if low else 0) + fp8_path.mem_bytes(point, options)  # fp8: the quantized and dequantized Q, K, V
    if point.mode == "fwd":
        return fwd
    # backward: saved output + lse, scaled q, fp32 casts of k, v and dO, delta; then either the
    # dq/dk/dv accumulators (kept per block) with three blocks (P, dP/dS, one in flight), or, at
    # the end, those accumulators and their concatenation; the gradients cast back
    saved = out_acc + rows_c + (out if low else 0)
    acc = (bh * q_len + 2 * bkv * seq_len) * d * a
    bwd = saved + q_c + ((2 * kv_c + q_c) if casts else 0) + rows_c + max(acc + 3 * block, 2 * acc) + hidden
    bwd += variant_bwd
    bwd += grads if low else 0
    return max(fwd, bwd)


backend(attention, takes_masks=True, options=Options, efficiency=EFFICIENCY,
        dtypes=("fp64", "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"),
        # selfattn/variants.py: every one. A window pair is key intervals (blocks outside it are skipped, band runs
        # included); soft-cap and ALiBi transform each block's scores (chunked_mods.py); the sink joins each row's
        # log-sum-exp at the end (_with_sink_). FP8 and compiled blocks run them too.
        variants=("asymmetric_window", "softcap", "alibi", "sink"),
        masks=("causal", "window", "key_lengths", "document_ids", "mask_mod", "score_mod"),  # selfattn/mods/blocks.py
        mem_model=predict_mem_bytes, kernel_label=kernel_label, resolve_options=resolve_options, compiles=compiles,
        prepare=prepare, kernel_ran=kernel_ran)
