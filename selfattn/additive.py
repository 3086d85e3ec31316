"""Additive scores (Bahdanau et al. 2015): score(q, k) = vᵀ tanh(W_q q + W_k k), against the dot product.

The chapter (and Vaswani et al. 2017, 3.2.1) says dot-product attention is "much faster and more
space-efficient in practice" than additive attention of the same complexity. To measure it, this
module computes additive attention the way Bahdanau's formulation reads, on the naive back end's
path: the (batch, heads, q_len, seq_len, d_k) tensor W_q q_i + W_k k_j is materialised, tanh'd,
and reduced against v; then the masks, softmax and A·V as naive does. No scale (the score has none).

It lives outside `selfattn.attention`, whose contract is the scaled dot product: the workload
(selfattn/measure/workload.py) times `additive_call`'s forward for a point with score=additive; naive
declares the score (`scores`), so any other back end, or naive with a dot-product option changed, is an
`unsupported` point (selfattn/backends/capability.py). W_q, W_k (d_k x d_k, shared
by the heads) and v (d_k) are seeded (`weights`), N(0, 1/d_k): W_q q keeps q's scale, and the
score's std stays near 1 at any d_k. `additive_reference` is the float64 reference, written apart
(einsum over the heads repeated per K/V head), which every row's accuracy is computed against.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from selfattn.masks import Masks, keep_from_intervals, no_empty_rows
from selfattn.point import Point

SEED_OFFSET = 6_000_029  # the score's weights: their own stream, the inputs stay as they are
REFERENCE_BLOCK_ELEMENTS = 1 << 24  # the float64 reference's (B, H, rows, N, D) tensor per block of rows: 128 MiB


def weights(head_dim: int, *, seed: int, dtype: torch.dtype,
            device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """W_q (d_k, d_k), W_k (d_k, d_k) and v (d_k,), N(0, 1/d_k), drawn in float64 on the CPU from `seed`."""
    generator = torch.Generator(device="cpu").manual_seed(seed + SEED_OFFSET)
    std = 1.0 / math.sqrt(head_dim)
    drawn = [torch.randn(shape, generator=generator, dtype=torch.float64) * std
             for shape in ((head_dim, head_dim), (head_dim, head_dim), (head_dim,))]
    return tuple(t.to(device=device, dtype=dtype) for t in drawn)  # type: ignore[return-value]


def additive_attention(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, w_q: torch.Tensor,
                       w_k: torch.Tensor, w_v: torch.Tensor, *, masks: Masks) -> torch.Tensor:
    """softmax_j(vᵀ tanh(W_q q_i + W_k k_j) + mask) V, (B, H, M, D) in q's dtype (K/V heads shared as in GQA)."""
    b, h, q_len, d = q_BHMD.shape
    kv_heads, seq_len = k_BKND.shape[1], k_BKND.shape[2]
    group = h // kv_heads
    qp_BKGM1D = (q_BHMD @ w_q.T).view(b, kv_heads, group, q_len, 1, d)
    kp_BK11ND = (k_BKND @ w_k.T).view(b, kv_heads, 1, 1, seq_len, d)
    hidden_BKGMND = qp_BKGM1D + kp_BK11ND  # Bahdanau's tensor: every (query, key) pair's d_k features
    del qp_BKGM1D, kp_BK11ND
    # tanh in place when nothing needs the sum for a backward (the memory model counts one such tensor)
    hidden_BKGMND = torch.tanh(hidden_BKGMND) if hidden_BKGMND.requires_grad else hidden_BKGMND.tanh_()
    scores_BKGMN = hidden_BKGMND @ w_v
    del hidden_BKGMND
    sees_bM1 = None
    if masks.causal or not masks.only_causal:
        lo_bM, hi_bM = masks.intervals(q_len, seq_len, device=q_BHMD.device)
        keep_bMN, sees_bM1 = no_empty_rows(keep_from_intervals(lo_bM, hi_bM, seq_len))
        scores_BKGMN = scores_BKGMN.masked_fill(~keep_bMN[:, None, None], float("-inf"))
    weights_BKRN = torch.softmax(scores_BKGMN, dim=-1).view(b, kv_heads, group * q_len, seq_len)
    out_BHMD = (weights_BKRN @ v_BKND).view(b, h, q_len, d)
    return out_BHMD if sees_bM1 is None else out_BHMD * sees_bM1[:, None]


def additive_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor,
                       w_v: torch.Tensor, *, masks: Masks, rows: torch.Tensor | None = None,
                       dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The same attention in float64 (or `dtype`, the verdict's plain reference), on the query `rows` (all by
    default): einsum over K/V repeated per head."""
    q_len, seq_len = q.shape[2], k.shape[2]
    group = q.shape[1] // k.shape[1]
    q64, w_q64, w_k64, w_v64 = (t.to(dtype) for t in (q, w_q, w_k, w_v))
    k64, v64 = (t.to(dtype).repeat_interleave(group, dim=1) for t in (k, v))
    rows = torch.arange(q_len, device=q.device) if rows is None else rows
    # rows in blocks: the float64 (B, H, rows, N, D) tensor of all sampled rows would be gigabytes at large n
    block = max(1, REFERENCE_BLOCK_ELEMENTS // max(1, q64.shape[0] * q64.shape[1] * seq_len * q64.shape[3]))
    kp = torch.einsum("de,bhne->bhnd", w_k64, k64)[:, :, None]
    outs = []
    for part in rows.split(block):
        hidden = torch.tanh(torch.einsum("de,bhme->bhmd", w_q64, q64[:, :, part])[:, :, :, None] + kp)
        scores = torch.einsum("bhmnd,d->bhmn", hidden, w_v64)
        keep, sees = no_empty_rows(masks.keep(q_len, seq_len, rows=part, device=q.device)[:, None])
        weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)
        outs.append(torch.einsum("bhmn,bhnd->bhmd", weights, v64) * sees)
    return torch.cat(outs, dim=2)


def predict_mem_bytes(point: Point) -> int:
    """Bytes beyond the inputs, following `additive_attention`: forward, the (B, H, M, N, D) tensor E
    (tanh'd in place) beside the projections and the scores, then scores and weights; fwd_bwd keeps E
    (tanh's output) for the backward, which adds E's gradient and tanh's input gradient (3 E at once),
    with the saved weights and the scores' gradients, and dq, dk, dv."""
    s = point.element_bytes
    scores = point.score_elements
    hidden = scores * point.head_dim
    projections = point.out_bytes + point.kv_bytes // 2  # W_q q and W_k k
    masks_per = point.batch if point.masks_per_sequence else 1
    mask = 3 * masks_per * point.q_len_resolved * point.seq_len if point.masked else 0  # keep, ~keep, opened rows
    if point.mode == "fwd":
        return max(hidden + scores, 2 * scores) * s + projections + mask + point.out_bytes
    return (3 * hidden + 3 * scores) * s + 2 * projections + mask + point.out_bytes + point.grad_bytes


def additive_call(point: Point, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  masks: Masks) -> tuple[Callable[[], torch.Tensor], Callable[..., torch.Tensor]]:
    """For the workload (selfattn/measure/workload.py): the point's timed forward on q, k, v, and its float64
    reference `(q64, k64, v64, rows) -> out rows`, both with the point's seeded weights and masks."""
    w_q, w_k, w_v = weights(point.head_dim, seed=point.seed, dtype=q.dtype, device=q.device)
    masks.prepare(q.shape[2], k.shape[2])

    def forward() -> torch.Tensor:
        return additive_attention(q, k, v, w_q, w_k, w_v, masks=masks)

    def reference(q64: torch.Tensor, k64: torch.Tensor, v64: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return additive_reference(q64, k64, v64, w_q, w_k, w_v, masks=masks, rows=rows, dtype=q64.dtype)

    return forward, reference
