"""The FlashAttention-2 forward pass as one Triton kernel, and its launcher.

Read it beside selfattn/backends/chunked.py, which runs the same online softmax as torch operations
(docs/triton.md walks through both). One program computes one block of BLOCK_M query rows of one
(sequence, head): it loads its queries once, then walks the key blocks its rows can see, keeping per
row a running maximum m, a running sum l of exp(score - m) and an fp32 accumulator of exp(score - m)·V.
Each new block may raise the maximum, so what was summed is rescaled by exp(m_old - m_new) first.
At the end out = acc / l. Nothing of size q_len × seq_len is ever stored: the scores of one
(BLOCK_M × BLOCK_N) tile live in registers and die with the iteration.

Masks (selfattn/masks.py has the geometry): query i sits at position p = i + seq_len - q_len;
causal keeps keys j <= p, a window's extents (left, right) keep p - left <= j <= p + right (one width
w is (w - 1, w - 1); selfattn.variants.window_extents), key_lengths keeps j < key_lengths[b],
document_ids keeps keys of the query's own document. Causal, the window and key_lengths also bound
the loop: a key block no row of the query block can see is never loaded. Documents are masked inside
the tiles they share with the query block but do not shorten the loop (the document bounds would need
a search the host already made; the loop stays simple).

Score transforms (selfattn/variants.py), each behind its own constexpr flag so that a call without it
compiles the kernel it compiled before: the soft-cap c·tanh(s / c) of the natural-scale logit, then the
ALiBi bias -slope_h·|p - j| (h the query head), both turned into base-2 units like the logits; then the
mask. The sink is one more logit in every row's denominator with no value: the running max starts at
it and the running sum at 1 (its own exp2(sink - sink)), so the online softmax folds it in for free.

This module needs triton and imports it at once; the back end (selfattn/backends/triton.py) loads it
only when triton is importable. `TRITON_INTERPRET=1` in the environment before this module is
imported makes the kernel run in triton's interpreter on CPU tensors (numpy; correctness only).
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from selfattn.variants import alibi_slopes

LOG2E = math.log2(math.e)  # exp(x) = exp2(x · log2 e): the GPU's exp2 is one instruction
# fp32's largest value: a sink's base-2 logit is clamped to +-this (still above or below every key's), and so
# is the soft-cap's input factor 2·scale·log2(e)/c for a tiny cap (an inf there makes a zero logit 0·inf = NaN)
FP32_MAX = 3.4028234663852886e38


# The kernel calls only triton.language's builtins, none of its jit functions (tl.max, tl.sum, tl.zeros):
# those were decorated when triton was imported, and the interpreter can call them only if triton itself
# was imported with TRITON_INTERPRET=1 (torch may have imported it long before). Row maxima and sums are
# tl.reduce with the combine functions tl.max and tl.sum use (the same code on a GPU; the interpreter
# patches tl.reduce whenever it runs and takes its numpy path for these two), zeros are tl.full.
_max = tl.standard._elementwise_max
_sum = tl.standard._sum_combine


@triton.jit
def _attention_fwd(
    Q, K, V, Out, Lse, KeyLengths, DocumentIds, AlibiSlopes,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_db, stride_dn,
    heads, group, q_len, seq_len, head_dim, left, right, qk_scale, softcap_in, softcap_out, sink,
    CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, HAS_LENGTHS: tl.constexpr,
    HAS_DOCUMENTS: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr, SINK: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr, DOT_IN_FP32: tl.constexpr,
):
    # --- which tile this program owns: query block `block_m` of head `h` of sequence `b`
    block_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // heads
    h = bh % heads
    kv_h = h // group  # GQA: `group` query heads share one K/V head, indexed, never copied
    offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)  # head_dim padded to a power of two; the pad is masked
    row_ok = offs_m < q_len
    d_ok = offs_d < head_dim
    pos = offs_m + (seq_len - q_len)  # bottom-right aligned positions of the rows

    # --- the keys any row of this block may see: [lo, hi); whole key blocks outside are skipped
    first_pos = block_m * BLOCK_M + (seq_len - q_len)
    last_pos = tl.minimum(block_m * BLOCK_M + BLOCK_M, q_len) - 1 + (seq_len - q_len)
    lo = 0
    hi = seq_len
    if CAUSAL:  # right = 0 (the host drops a window's right extent under causal: causal caps it at 0)
        hi = tl.minimum(hi, last_pos + 1)
    if HAS_LEFT:
        lo = tl.maximum(first_pos - left, 0)
    if HAS_RIGHT:
        hi = tl.minimum(hi, last_pos + right + 1)
    if HAS_LENGTHS:
        hi = tl.minimum(hi, tl.load(KeyLengths + b).to(tl.int32))  # right padding is never loaded
    lo = (lo // BLOCK_N) * BLOCK_N  # start on a block boundary; the rows' own bounds mask the rest
    if HAS_DOCUMENTS:  # q_len == seq_len here: query i is token i of its sequence
        doc_q = tl.load(DocumentIds + b * stride_db + offs_m * stride_dn, mask=row_ok, other=-1)
    if ALIBI:  # this query head's slope, times log2(e) on the host: the bias in base-2 units like the logits
        slope = tl.load(AlibiSlopes + h)

    q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=row_ok[:, None] & d_ok[None, :], other=0.0)  # (BLOCK_M, BLOCK_D), loaded once
    k_base = K + b * stride_kb + kv_h * stride_kh
    v_base = V + b * stride_vb + kv_h * stride_vh

    # --- the online softmax: running max m, running sum l, unnormalized output acc (all fp32)
    if SINK:  # the sink's logit (base 2, from the host) is the first term: max = sink, sum = exp2(0) = 1, no value
        m_i = tl.full([BLOCK_M], 0.0, dtype=tl.float32) + sink
        l_i = tl.full([BLOCK_M], 1.0, dtype=tl.float32)
    else:
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.full([BLOCK_M], 0.0, dtype=tl.float32)
    acc = tl.full([BLOCK_M, BLOCK_D], 0.0, dtype=tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        offs_k = start_n + offs_n
        key_ok = offs_k < hi
        kT = tl.load(k_base + offs_k[None, :] * stride_kn + offs_d[:, None] * stride_kd,
                     mask=key_ok[None, :] & d_ok[:, None], other=0.0)  # (BLOCK_D, BLOCK_N): K transposed
        v = tl.load(v_base + offs_k[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                    mask=key_ok[:, None] & d_ok[None, :], other=0.0)  # (BLOCK_N, BLOCK_D)
        if DOT_IN_FP32:  # the interpreter multiplies bf16's raw bits in tl.dot: fp32 operands there
            s = tl.dot(q.to(tl.float32), kT.to(tl.float32), input_precision=DOT_PRECISION)
        else:
            s = tl.dot(q, kT, input_precision=DOT_PRECISION)  # fp32 accumulation on the tensor cores
        if SOFTCAP:
            # c·tanh(scale·s / c), times log2(e): tanh(x) = sign(x)·(1 - e)/(1 + e) with e = exp(-2|x|) =
            # exp2(-|t|), t = s · (2·scale·log2(e) / c) (softcap_in); e never overflows, so no inf/inf.
            # softcap_out = c·log2(e) turns the capped natural logit into base-2 units.
            t = s * softcap_in
            e = tl.math.exp2(-tl.abs(t))
            th = (1.0 - e) / (1.0 + e)
            s = tl.where(t < 0, -th, th) * softcap_out
        else:
            s = s * qk_scale  # scale · log2(e) folded into one multiply: s is in base-2 units from here on
        if ALIBI:  # -slope·|p - j|: the distance is exact in fp32 below 2^24
            s = s - slope * tl.abs(pos[:, None] - offs_k[None, :]).to(tl.float32)

        keep = key_ok[None, :] & row_ok[:, None]
        if CAUSAL:
            keep = keep & (offs_k[None, :] <= pos[:, None])
        if HAS_LEFT:
            keep = keep & (offs_k[None, :] >= pos[:, None] - left)
        if HAS_RIGHT:
            keep = keep & (offs_k[None, :] <= pos[:, None] + right)
        if HAS_DOCUMENTS:
            doc_k = tl.load(DocumentIds + b * stride_db + offs_k * stride_dn, mask=key_ok, other=-2)
            keep = keep & (doc_q[:, None] == doc_k[None, :])
        s = tl.where(keep, s, float("-inf"))

        m_new = tl.maximum(m_i, tl.reduce(s, 1, _max))
        # a row that has seen no key yet has m_new = -inf: subtract 0 instead, so exp2(-inf - 0) = 0, not NaN
        # (with a sink m_new >= sink is finite from the start and this changes nothing)
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.math.exp2(m_i - m_use)  # rescales what was summed under the old maximum
        p = tl.math.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.reduce(p, 1, _sum)
        acc = acc * alpha[:, None]
        if DOT_IN_FP32:
            acc += tl.dot(p, v.to(tl.float32), input_precision=DOT_PRECISION)
        else:
            acc += tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    # --- normalize; a row that saw no key has acc = 0 and l = 0 (or 1, the sink's own term): it returns zeros
    seen = l_i > 0
    out = acc / tl.where(seen, l_i, 1.0)[:, None]
    o_ptrs = Out + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
    # log-sum-exp per row in natural units (what a backward pass would reuse); -inf where nothing was seen.
    # With a sink it is the whole denominator's, sink included (the sink alone where no key was seen).
    lse = tl.where(seen, (m_i + tl.math.log2(tl.where(seen, l_i, 1.0))) / 1.4426950408889634, float("-inf"))
    tl.store(Lse + bh * q_len + offs_m, lse, mask=row_ok)


# True when this module was imported with TRITON_INTERPRET=1: the kernel runs in numpy on CPU tensors
INTERPRETED: bool = isinstance(_attention_fwd, InterpretedFunction)


def block_d(head_dim: int) -> int:
    """head_dim padded to a power of two, at least 16 (tl.dot's smallest tile side)."""
    return max(16, triton.next_power_of_2(head_dim))


@functools.lru_cache(maxsize=64)
def alibi_slopes_log2(heads: int, device: torch.device) -> torch.Tensor:
    """(heads,) fp32 on `device`: each query head's ALiBi slope (selfattn.variants.alibi_slopes) times
    log2(e), rounded once from float64. Kept per (heads, device): a timed call neither allocates it nor
    copies it from the host (a copy that would wait for every queued kernel)."""
    slopes = torch.tensor([slope * LOG2E for slope in alibi_slopes(heads)], dtype=torch.float32)
    return slopes.to(device)


def attention_fwd(
    q_BHMD: torch.Tensor,
    k_BKND: torch.Tensor,
    v_BKND: torch.Tensor,
    *,
    scale: float,
    causal: bool = False,
    extents: tuple[int | None, int | None] = (None, None),
    key_lengths: torch.Tensor | None = None,
    document_ids: torch.Tensor | None = None,
    softcap: float | None = None,
    alibi_slopes_log2: torch.Tensor | None = None,
    sink: float | None = None,
    block_m: int = 64,
    block_n: int = 64,
    dot_precision: str = "ieee",
    num_warps: int = 4,
    num_stages: int = 2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (B, H, M, D) in q's dtype, lse (B, H, M) float32): one launch of the kernel above.

    q (B, H, M, D); k, v (B, K, N, D) with H % K == 0; extents (left, right) of the window, None for an
    unbounded side (selfattn.variants.window_extents; causal is its own flag, a right extent beside it is
    ignored); key_lengths (B,) ints; document_ids (B, N) ints (then M == N); softcap c > 0;
    alibi_slopes_log2 (H,) fp32 on q's device, each query head's slope times log2(e) (`alibi_slopes_log2`);
    sink a logit. Inputs are trusted (selfattn.attention validates them); fp32, fp16 or bf16. With a sink,
    lse includes it.
    """
    batch, heads, q_len, head_dim = q_BHMD.shape
    kv_heads, seq_len = k_BKND.shape[1], k_BKND.shape[2]
    left, right = extents
    if causal:  # causal is right = 0; a window's right extent is capped there already (window_extents)
        right = None
    out = torch.empty_like(q_BHMD)
    lse = torch.empty((batch, heads, q_len), device=q_BHMD.device, dtype=torch.float32)
    # unused pointer arguments still need a tensor; `out` stands in (never read: the flags are off)
    lengths = key_lengths.to(device=q_BHMD.device) if key_lengths is not None else out
    docs = document_ids.to(device=q_BHMD.device) if document_ids is not None else out
    doc_strides = (docs.stride(0), docs.stride(1)) if document_ids is not None else (0, 0)
    slopes = alibi_slopes_log2 if alibi_slopes_log2 is not None else out
    grid = (triton.cdiv(q_len, block_m), batch * heads)
    _attention_fwd[grid](
        q_BHMD, k_BKND, v_BKND, out, lse, lengths, docs, slopes,
        *q_BHMD.stride(), *k_BKND.stride(), *v_BKND.stride(), *out.stride(), *doc_strides,
        heads, heads // kv_heads, q_len, seq_len, head_dim,
        left if left is not None else 0, right if right is not None else 0, scale * LOG2E,
        min(2.0 * scale * LOG2E / softcap, FP32_MAX) if softcap is not None else 0.0,  # inf would make 0·inf NaN
        softcap * LOG2E if softcap is not None else 0.0,
        min(max(sink * LOG2E, -FP32_MAX), FP32_MAX) if sink is not None else 0.0,  # +inf: exp2(inf - inf) is NaN
        CAUSAL=causal, HAS_LEFT=left is not None, HAS_RIGHT=right is not None, HAS_LENGTHS=key_lengths is not None,
        HAS_DOCUMENTS=document_ids is not None,
        SOFTCAP=softcap is not None, ALIBI=alibi_slopes_log2 is not None, SINK=sink is not None,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d(head_dim),
        DOT_PRECISION=dot_precision if q_BHMD.dtype == torch.float32 else "tf32",  # the flag is fp32's only
        DOT_IN_FP32=INTERPRETED and q_BHMD.dtype != torch.float32,
        num_warps=num_warps, num_stages=num_stages,
    )
    return out, lse
