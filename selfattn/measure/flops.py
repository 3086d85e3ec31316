"""How much arithmetic one call of a point does: the FLOP count behind the `tflops` column.

The count is the field's convention (FlashAttention's benchmarks), not what a particular
kernel happens to execute: the two matmuls S = Q K^T and O = P V cost 2*D FLOPs each per
unmasked (query, key) pair, so one forward pass is 4*B*H*D*pairs, with the pairs every mask
lets through counted exactly (selfattn/masks.py). K/V heads do not change it: each query head
still multiplies with its (shared) K and V. Softmax, scaling and
masking are not counted. A back end that computes masked scores anyway (naive does) still
gets credit only for the unmasked ones, so its `tflops` shows the waste. Each scope counts its own call
(its declaration's `flops`, selfattn/scopes/): the layer adds its four projections, a generation sums its
T steps, a recurrence counts its gates' products.
"""

from __future__ import annotations

from selfattn.inputs import point_masks
from selfattn.masks import seen_pairs
from selfattn.point import Point
from selfattn.scopes import declared

# Backward recomputes/uses 2.5x the forward matmuls (dQ, dK, dV, dP and, for fused kernels, the
# recomputed S), so forward + backward counts 1 + 2.5 = 3.5x forward, as FlashAttention counts it.
FWD_BWD_FACTOR = 3.5
# A linear layer's backward does two matmuls of the forward's size (grad input, grad weight).
LINEAR_FWD_BWD_FACTOR = 3.0


def unmasked_pairs(q_len: int, seq_len: int, causal: bool) -> int:
    """The number of (query, key) pairs whose score survives the mask.

    Bottom-right aligned causal mask: query i (0-based) sees keys j <= i + seq_len - q_len.
    Row i therefore sees clamp(i + seq_len - q_len + 1, 0, seq_len) keys. For a square
    problem (q_len == seq_len == n) that is 1 + 2 + ... + n = n(n+1)/2 pairs: the diagonal
    counts, so it is slightly more than half of n^2. Rows that see no key at all (possible
    only when q_len > seq_len) contribute nothing.
    """
    if q_len < 1 or seq_len < 1:
        raise ValueError(f"q_len, seq_len: expected integers >= 1, got {q_len!r}, {seq_len!r}")
    if not causal:
        return q_len * seq_len
    offset = seq_len - q_len  # row i sees offset + i + 1 keys; the last row sees exactly seq_len
    first = max(0, -offset)  # rows before this one see no key (only when q_len > seq_len)
    rows = q_len - first
    # sum_{i=first}^{q_len-1} (offset + i + 1), an arithmetic series
    return rows * (offset + 1) + (first + q_len - 1) * rows // 2


def projection_flops(point: Point) -> float:
    """Forward FLOPs of the layer's projections: W_Q and W_O (d_model x d_model), W_K and W_V
    (d_model x kv_heads*D), 2 FLOPs per weight and token."""
    return 2.0 * point.batch * point.seq_len * point.projection_weights


def point_pairs(point: Point) -> int | float:
    """(query, key) pairs the point's masks let through, over its whole batch (per head; with a mask function
    that reads the head, the mean over heads: selfattn/mods/geometry.py counts every head's)."""
    if point.mask != "none":
        from selfattn.mods.geometry import pairs

        total = pairs(point_masks(point), point.batch, point.heads, point.q_len_resolved, point.seq_len)
        return total // point.heads if total % point.heads == 0 else total / point.heads
    if point.window is None and point.pad_frac == 0 and point.documents is None:  # the closed form
        return point.batch * unmasked_pairs(point.q_len_resolved, point.seq_len, point.causal)
    lo, hi = point_masks(point).intervals(point.q_len_resolved, point.seq_len)
    return seen_pairs(lo, hi, point.batch)


def mask_density(point: Point) -> float:
    """Fraction of the q_len x seq_len (query, key) pairs the point's masks let through."""
    return point_pairs(point) / (point.batch * point.q_len_resolved * point.seq_len)


def point_flops(point: Point) -> float:
    """FLOPs of one timed call of `point` (forward, or forward + backward), as its scope counts them."""
    return declared(point).flops(point)


def attention_flops(point: Point) -> float:
    """The attention core's FLOPs: 4 * H * D per seen pair, FWD_BWD_FACTOR times that with the backward."""
    core = 4.0 * point.heads * point.head_dim * point_pairs(point)
    return core * FWD_BWD_FACTOR if point.mode == "fwd_bwd" else core


# Additive scores (selfattn/additive.py), counted exactly per unmasked (query, key) pair and feature:
# forward: the sum W_q q + W_k k (1), tanh (1, a transcendental counted as one operation), vᵀ· (2) and
# A·V (2): 6 D; backward: dA and dV (4), dtanh = dscore · v (1), dv (2), tanh's 1 - t² and product (3),
# the sum's gradients reduced into W_q q and W_k k (2): 12 D. The projections W_q q (per query head and
# query) and W_k k (per K/V head and key): 2 D² each, forward; backward twice that (input and weight).
ADDITIVE_FWD_PER_PAIR, ADDITIVE_BWD_PER_PAIR = 6, 12


def additive_flops(point: Point) -> float:
    """FLOPs of one call of additive attention (see the constants above)."""
    d = point.head_dim
    per_pair = ADDITIVE_FWD_PER_PAIR + (ADDITIVE_BWD_PER_PAIR if point.mode == "fwd_bwd" else 0)
    projections = 2.0 * point.batch * d * d * (point.heads * point.q_len_resolved + point.kv_heads_resolved * point.seq_len)
    if point.mode == "fwd_bwd":
        projections *= LINEAR_FWD_BWD_FACTOR
    return float(per_pair * point.heads * d * point_pairs(point)) + projections
