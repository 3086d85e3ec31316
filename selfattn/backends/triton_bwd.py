"""The FlashAttention-2 backward pass as two Triton kernels, and the autograd function around both passes.

Read it after selfattn/backends/triton_fwd.py (docs/triton.md walks through both). The forward pass saved
only the output O and each query row's log-sum-exp L (natural units, sink included); the backward pass
recomputes every tile of probabilities from them, P = exp(scale·q·k − L), instead of storing the
q_len × seq_len matrix. With D_i = rowsum(dO_i ∘ O_i), the gradients
of one tile are

    dV += Pᵀ dO        dP = dO Vᵀ        dS = P ∘ (dP − D)        dK += dSᵀ Q · scale        dQ += dS K · scale

(dS is the gradient of the natural-scale logit; a soft-cap c·tanh(s·scale/c) multiplies it by 1 − tanh²);
D comes from a small kernel of its own (`_attention_bwd_delta`), fp32 without an fp32 copy of dO or O.
The sink has no value and no gradient: it sits in L, so P and D already account for it.

Two kernels after it, so that nothing is added with atomics:
- `_attention_bwd_dkdv`: one program per (key block, batch·kv_head) keeps its K and V tile and two fp32
  accumulators, and walks every query head of its group (GQA: dK and dV of a shared head are the sums over
  the heads that read it) and the query blocks that can see its keys: causal starts the walk at the block's
  first key, a window ends it at the last key + left (and starts it at the first key − right), padding skips a
  key block past the sequence's length whole. Tiles are computed transposed (keys × queries), so no
  accumulator is transposed.
- `_attention_bwd_dq`: one program per (query block, batch·head) walks the key blocks the forward walked.

The masks and score transforms are the forward's, applied in the same order (scale, soft-cap, ALiBi, mask);
the rows and keys out of range are masked, so a tile of a ragged block contributes nothing.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from selfattn.backends import triton_fwd as fwd
from selfattn.backends.triton_fwd import FP32_MAX, LOG2E, _sum

INV_LOG2E = 0.6931471805599453  # ln 2: base-2 units back to natural ones


@triton.jit
def _attention_bwd_delta(
    Out, DO, Delta, stride_ob, stride_oh, stride_om, stride_od, stride_gb, stride_gh, stride_gm, stride_gd,
    heads, q_len, head_dim, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # D_i = rowsum(dO_i * O_i) in fp32 for one block of rows: the softmax's backward without the probabilities
    block_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // heads
    h = bh % heads
    offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_m < q_len)[:, None] & (offs_d < head_dim)[None, :]
    o = tl.load(Out + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
                mask=mask, other=0.0).to(tl.float32)
    do = tl.load(DO + b * stride_gb + h * stride_gh + offs_m[:, None] * stride_gm + offs_d[None, :] * stride_gd,
                 mask=mask, other=0.0).to(tl.float32)
    tl.store(Delta + bh * q_len + offs_m, tl.reduce(o * do, 1, _sum), mask=offs_m < q_len)


@triton.jit
def _attention_bwd_dkdv(
    Q, K, V, DO, Lse, Delta, DK, DV, KeyLengths, DocumentIds, AlibiSlopes,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_dkb, stride_dkh, stride_dkn, stride_dkd,
    stride_db, stride_dn,
    heads, kv_heads, group, q_len, seq_len, head_dim, left, right, qk_scale, scale, softcap_in, softcap_out,
    CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, HAS_LENGTHS: tl.constexpr,
    HAS_DOCUMENTS: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr, DOT_IN_FP32: tl.constexpr,
):
    # --- which tile this program owns: key block `block_n` of K/V head `kv_h` of sequence `b`
    block_n = tl.program_id(0)
    bk = tl.program_id(1)
    b = bk // kv_heads
    kv_h = bk % kv_heads
    start_n = block_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < head_dim
    key_ok = offs_n < seq_len
    offset = seq_len - q_len  # query i sits at position i + offset

    # --- the query rows that may see a key of this block: [lo_m, hi_m); the rest are never loaded
    last_key = tl.minimum(start_n + BLOCK_N, seq_len) - 1
    lo_m = 0
    hi_m = q_len
    if CAUSAL:  # some position p >= start_n
        lo_m = tl.maximum(lo_m, start_n - offset)
    if HAS_RIGHT:  # p + right >= start_n
        lo_m = tl.maximum(lo_m, start_n - right - offset)
    if HAS_LEFT:  # p - left <= last_key
        hi_m = tl.minimum(hi_m, last_key + left - offset + 1)
    if HAS_LENGTHS:  # a key block wholly in the padding is seen by nobody
        key_length = tl.load(KeyLengths + b).to(tl.int32)
        key_ok = key_ok & (offs_n < key_length)
        hi_m = tl.where(start_n < key_length, hi_m, 0)
    lo_m = (lo_m // BLOCK_M) * BLOCK_M
    if HAS_DOCUMENTS:
        doc_k = tl.load(DocumentIds + b * stride_db + offs_n * stride_dn, mask=key_ok, other=-2)

    kv_mask = key_ok[:, None] & d_ok[None, :]
    k = tl.load(K + b * stride_kb + kv_h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                mask=kv_mask, other=0.0)  # (BLOCK_N, BLOCK_D), kept for the whole walk
    v = tl.load(V + b * stride_vb + kv_h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                mask=kv_mask, other=0.0)
    if DOT_IN_FP32:  # the interpreter multiplies bf16's raw bits in tl.dot: fp32 operands there
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    dk = tl.full([BLOCK_N, BLOCK_D], 0.0, dtype=tl.float32)
    dv = tl.full([BLOCK_N, BLOCK_D], 0.0, dtype=tl.float32)

    for g in range(group):  # GQA: every query head reading this K/V head adds to its gradients
        h = kv_h * group + g
        bh = b * heads + h
        if ALIBI:
            slope = tl.load(AlibiSlopes + h)
        for start_m in range(lo_m, hi_m, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            row_ok = offs_m < q_len
            pos = offs_m + offset
            q_mask = row_ok[:, None] & d_ok[None, :]
            q = tl.load(Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                        mask=q_mask, other=0.0)  # (BLOCK_M, BLOCK_D)
            do = tl.load(DO + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
                         mask=q_mask, other=0.0)
            if DOT_IN_FP32:
                q = q.to(tl.float32)
                do = do.to(tl.float32)
            lse = tl.load(Lse + bh * q_len + offs_m, mask=row_ok, other=0.0)
            lse = tl.where(lse == float("-inf"), 0.0, lse) * 1.4426950408889634  # base 2; a row seeing nothing: 0
            delta = tl.load(Delta + bh * q_len + offs_m, mask=row_ok, other=0.0)

            sT = tl.dot(k, tl.trans(q), input_precision=DOT_PRECISION)  # (BLOCK_N, BLOCK_M): keys x queries
            if SOFTCAP:  # as the forward: c·tanh(scale·s / c) in base-2 units; keep tanh for its derivative
                t = sT * softcap_in
                e = tl.math.exp2(-tl.abs(t))
                th = tl.where(t < 0, -1.0, 1.0) * (1.0 - e) / (1.0 + e)
                sT = th * softcap_out
            else:
                sT = sT * qk_scale
            if ALIBI:
                sT = sT - slope * tl.abs(pos[None, :] - offs_n[:, None]).to(tl.float32)
            keep = key_ok[:, None] & row_ok[None, :]
            if CAUSAL:
                keep = keep & (offs_n[:, None] <= pos[None, :])
            if HAS_LEFT:
                keep = keep & (offs_n[:, None] >= pos[None, :] - left)
            if HAS_RIGHT:
                keep = keep & (offs_n[:, None] <= pos[None, :] + right)
            if HAS_DOCUMENTS:
                doc_q = tl.load(DocumentIds + b * stride_db + offs_m * stride_dn, mask=row_ok, other=-1)
                keep = keep & (doc_k[:, None] == doc_q[None, :])
            pT = tl.where(keep, tl.math.exp2(sT - lse[None, :]), 0.0)  # P recomputed from the saved log-sum-exp

            if DOT_IN_FP32:
                dv += tl.dot(pT, do, input_precision=DOT_PRECISION)
            else:
                dv += tl.dot(pT.to(do.dtype), do, input_precision=DOT_PRECISION)
            dpT = tl.dot(v, tl.trans(do), input_precision=DOT_PRECISION)  # (BLOCK_N, BLOCK_M)
            dsT = pT * (dpT - delta[None, :])  # the gradient of the natural-scale logit
            if SOFTCAP:
                dsT = dsT * (1.0 - th * th)
            if DOT_IN_FP32:
                dk += tl.dot(dsT, q, input_precision=DOT_PRECISION)
            else:
                dk += tl.dot(dsT.to(q.dtype), q, input_precision=DOT_PRECISION)

    dk = dk * scale
    dk_ptrs = DK + b * stride_dkb + kv_h * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :] * stride_dkd
    dv_ptrs = DV + b * stride_dkb + kv_h * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :] * stride_dkd
    out_mask = (offs_n < seq_len)[:, None] & d_ok[None, :]  # padded keys get their zeros written too
    tl.store(dk_ptrs, dk.to(DK.dtype.element_ty), mask=out_mask)
    tl.store(dv_ptrs, dv.to(DV.dtype.element_ty), mask=out_mask)


@triton.jit
def _attention_bwd_dq(
    Q, K, V, DO, Lse, Delta, DQ, KeyLengths, DocumentIds, AlibiSlopes,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_dqb, stride_dqh, stride_dqm, stride_dqd,
    stride_db, stride_dn,
    heads, group, q_len, seq_len, head_dim, left, right, qk_scale, scale, softcap_in, softcap_out,
    CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, HAS_LENGTHS: tl.constexpr,
    HAS_DOCUMENTS: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr, DOT_IN_FP32: tl.constexpr,
):
    # --- which tile this program owns: query block `block_m` of head `h` of sequence `b` (as the forward)
    block_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // heads
    h = bh % heads
    kv_h = h // group
    offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < q_len
    d_ok = offs_d < head_dim
    pos = offs_m + (seq_len - q_len)

    # --- the keys any row of this block may see: the forward's [lo, hi)
    first_pos = block_m * BLOCK_M + (seq_len - q_len)
    last_pos = tl.minimum(block_m * BLOCK_M + BLOCK_M, q_len) - 1 + (seq_len - q_len)
    lo = 0
    hi = seq_len
    if CAUSAL:
        hi = tl.minimum(hi, last_pos + 1)
    if HAS_LEFT:
        lo = tl.maximum(first_pos - left, 0)
    if HAS_RIGHT:
        hi = tl.minimum(hi, last_pos + right + 1)
    if HAS_LENGTHS:
        hi = tl.minimum(hi, tl.load(KeyLengths + b).to(tl.int32))
    lo = (lo // BLOCK_N) * BLOCK_N
    if HAS_DOCUMENTS:
        doc_q = tl.load(DocumentIds + b * stride_db + offs_m * stride_dn, mask=row_ok, other=-1)
    if ALIBI:
        slope = tl.load(AlibiSlopes + h)

    q_mask = row_ok[:, None] & d_ok[None, :]
    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=q_mask, other=0.0)  # (BLOCK_M, BLOCK_D), loaded once
    do = tl.load(DO + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
                 mask=q_mask, other=0.0)
    if DOT_IN_FP32:
        q = q.to(tl.float32)
        do = do.to(tl.float32)
    lse = tl.load(Lse + bh * q_len + offs_m, mask=row_ok, other=0.0)
    lse = tl.where(lse == float("-inf"), 0.0, lse) * 1.4426950408889634
    delta = tl.load(Delta + bh * q_len + offs_m, mask=row_ok, other=0.0)
    k_base = K + b * stride_kb + kv_h * stride_kh
    v_base = V + b * stride_vb + kv_h * stride_vh

    dq = tl.full([BLOCK_M, BLOCK_D], 0.0, dtype=tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        offs_k = start_n + tl.arange(0, BLOCK_N)
        key_ok = offs_k < hi
        k = tl.load(k_base + offs_k[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                    mask=key_ok[:, None] & d_ok[None, :], other=0.0)  # (BLOCK_N, BLOCK_D)
        vT = tl.load(v_base + offs_k[None, :] * stride_vn + offs_d[:, None] * stride_vd,
                     mask=key_ok[None, :] & d_ok[:, None], other=0.0)  # (BLOCK_D, BLOCK_N): V transposed
        if DOT_IN_FP32:
            k = k.to(tl.float32)
            vT = vT.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        if SOFTCAP:
            t = s * softcap_in
            e = tl.math.exp2(-tl.abs(t))
            th = tl.where(t < 0, -1.0, 1.0) * (1.0 - e) / (1.0 + e)
            s = th * softcap_out
        else:
            s = s * qk_scale
        if ALIBI:
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
        p = tl.where(keep, tl.math.exp2(s - lse[:, None]), 0.0)
        dp = tl.dot(do, vT, input_precision=DOT_PRECISION)
        ds = p * (dp - delta[:, None])
        if SOFTCAP:
            ds = ds * (1.0 - th * th)
        if DOT_IN_FP32:
            dq += tl.dot(ds, k, input_precision=DOT_PRECISION)
        else:
            dq += tl.dot(ds.to(k.dtype), k, input_precision=DOT_PRECISION)

    dq = dq * scale
    tl.store(DQ + b * stride_dqb + h * stride_dqh + offs_m[:, None] * stride_dqm + offs_d[None, :] * stride_dqd,
             dq.to(DQ.dtype.element_ty), mask=q_mask)


# True when this module was imported with TRITON_INTERPRET=1 (it must agree with the forward's module)
INTERPRETED: bool = isinstance(_attention_bwd_dq, InterpretedFunction)


def attention_bwd(
    dout_BHMD: torch.Tensor, q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor,
    out_BHMD: torch.Tensor, lse_BHM: torch.Tensor, *, scale: float, causal: bool = False,
    extents: tuple[int | None, int | None] = (None, None), key_lengths: torch.Tensor | None = None,
    document_ids: torch.Tensor | None = None, softcap: float | None = None,
    alibi_slopes_log2: torch.Tensor | None = None, block_m: int = 64, block_n: int = 64,
    dot_precision: str = "ieee", num_warps: int | None = None, num_stages: int = 2,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) like q, k, v: two launches, dK and dV per key block, then dQ per query block.

    The arguments are the forward's (triton_fwd.attention_fwd) plus the upstream gradient dout, the forward's
    output and its log-sum-exp (sink included). The sink itself needs nothing more: it is inside lse.
    num_warps None: 4, or 8 from head_dim 128 on, where a dK/dV program's four (block_n x head_dim) fp32 and
    input tiles (K, V and their two accumulators) would not fit four warps' registers."""
    batch, heads, q_len, head_dim = q_BHMD.shape
    kv_heads, seq_len = k_BKND.shape[1], k_BKND.shape[2]
    left, right = extents
    if causal:
        right = None
    if num_warps is None:
        num_warps = 8 if fwd.block_d(head_dim) >= 128 else 4
    delta_BHM = torch.empty((batch, heads, q_len), device=q_BHMD.device, dtype=torch.float32)
    _attention_bwd_delta[(triton.cdiv(q_len, block_m), batch * heads)](
        out_BHMD, dout_BHMD, delta_BHM, *out_BHMD.stride(), *dout_BHMD.stride(), heads, q_len, head_dim,
        BLOCK_M=block_m, BLOCK_D=fwd.block_d(head_dim), num_warps=num_warps)
    dq = torch.empty_like(q_BHMD)
    dk = torch.empty_like(k_BKND, memory_format=torch.contiguous_format)
    dv = torch.empty_like(v_BKND, memory_format=torch.contiguous_format)
    lengths = key_lengths.to(device=q_BHMD.device) if key_lengths is not None else dq
    docs = document_ids.to(device=q_BHMD.device) if document_ids is not None else dq
    doc_strides = (docs.stride(0), docs.stride(1)) if document_ids is not None else (0, 0)
    slopes = alibi_slopes_log2 if alibi_slopes_log2 is not None else dq
    lse = lse_BHM.contiguous()
    scalars = (left if left is not None else 0, right if right is not None else 0, scale * LOG2E, scale,
               min(2.0 * scale * LOG2E / softcap, FP32_MAX) if softcap is not None else 0.0,
               softcap * LOG2E if softcap is not None else 0.0)
    flags = dict(CAUSAL=causal, HAS_LEFT=left is not None, HAS_RIGHT=right is not None,
                 HAS_LENGTHS=key_lengths is not None, HAS_DOCUMENTS=document_ids is not None,
                 SOFTCAP=softcap is not None, ALIBI=alibi_slopes_log2 is not None,
                 BLOCK_D=fwd.block_d(head_dim),
                 DOT_PRECISION=dot_precision if q_BHMD.dtype == torch.float32 else "tf32",
                 DOT_IN_FP32=INTERPRETED and q_BHMD.dtype != torch.float32,
                 num_warps=num_warps, num_stages=num_stages)
    strides = (*q_BHMD.stride(), *k_BKND.stride(), *v_BKND.stride(), *dout_BHMD.stride())
    _attention_bwd_dkdv[(triton.cdiv(seq_len, block_n), batch * kv_heads)](
        q_BHMD, k_BKND, v_BKND, dout_BHMD, lse, delta_BHM, dk, dv, lengths, docs, slopes,
        *strides, *dk.stride(), *doc_strides,
        heads, kv_heads, heads // kv_heads, q_len, seq_len, head_dim, *scalars,
        BLOCK_M=block_m, BLOCK_N=block_n, **flags)
    _attention_bwd_dq[(triton.cdiv(q_len, block_m), batch * heads)](
        q_BHMD, k_BKND, v_BKND, dout_BHMD, lse, delta_BHM, dq, lengths, docs, slopes,
        *strides, *dq.stride(), *doc_strides,
        heads, heads // kv_heads, q_len, seq_len, head_dim, *scalars,
        BLOCK_M=block_m, BLOCK_N=block_n, **flags)
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """Both passes as one differentiable call: the forward kernel saves O and the log-sum-exp, the backward
    kernels recompute P from them. `call` holds every keyword argument of the forward (masks, variants,
    blocks); the mask tensors get no gradient."""

    @staticmethod
    def forward(ctx, q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, call: dict) -> torch.Tensor:
        out, lse = fwd.attention_fwd(q_BHMD, k_BKND, v_BKND, **call)
        ctx.save_for_backward(q_BHMD, k_BKND, v_BKND, out, lse)
        ctx.call = call
        return out

    @staticmethod
    def backward(ctx, dout_BHMD: torch.Tensor):
        q, k, v, out, lse = ctx.saved_tensors
        call = {name: value for name, value in ctx.call.items() if name != "sink"}  # inside lse already
        dq, dk, dv = attention_bwd(dout_BHMD, q, k, v, out, lse, **call)
        return dq, dk, dv, None


def attention(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, **call) -> torch.Tensor:
    """The forward kernel, differentiable through the backward kernels (the arguments are attention_fwd's)."""
    if INTERPRETED != fwd.INTERPRETED:
        raise RuntimeError("triton_fwd and triton_bwd were imported under different TRITON_INTERPRET settings")
    return FlashAttention.apply(q_BHMD, k_BKND, v_BKND, call)
