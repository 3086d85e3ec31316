"""chunked's score transforms inside its blocks: soft-cap and ALiBi on each block's scaled scores.

The order is FlashAttention's, as in the float64 reference (selfattn/score_mods.py): scale, soft-cap
c * tanh(s / c), then ALiBi's -slope_h * |p - j|, then the mask. A block applies them to its scores
before its running max sees them, so the online softmax works on the transformed scores as it does
on plain ones. The sink is not here: chunked folds it in after the blocks from each row's log-sum-exp
(chunked._with_sink_), which serves the block loop, the band runs and FP8 alike.

A block's rows are virtual rows (chunked._Plan: query i of the group's head g is row g * q_len + i of
its K/V head's matrix X), so ALiBi's slope belongs to a (flattened head, virtual row) pair: with grouped
heads one K/V head's block holds rows of several query heads, each with its own slope. `BlockMods`
keeps those slopes as one (X, rows, 1) column, sliced along X with the heads (chunked_pool.over_heads),
and each block multiplies it into its (rows x keys) distances |p - j| with one in-place addcmul.

The backward recomputes each block's transformed scores the same way and multiplies dS by the
soft-cap's derivative 1 - tanh(s / c)^2, which needs the block's tanh kept (one block more); ALiBi's
bias is a constant, so it adds no factor.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from selfattn.masks import Masks
from selfattn.score_mods import alibi_slopes_tensor, query_positions

# What a block step receives: (softcap or None, -slopes (X, m, 1) or None, |p - j| (1, m, n) or None)
BlockMod = tuple[float | None, torch.Tensor | None, torch.Tensor | None]


@dataclass(frozen=True)
class BlockMods:
    """The score transforms of one call, in the form chunked's blocks apply them."""

    softcap: float | None
    neg_slopes_XR1: torch.Tensor | None  # ALiBi: -slope of each (flattened head, virtual row); None without
    positions_R: torch.Tensor | None  # ALiBi: p of each virtual row, in the accumulator dtype

    def heads(self, x: slice) -> BlockMods:
        """The same transforms for a share of the flattened heads (chunked_pool.over_heads' slice)."""
        return self if self.neg_slopes_XR1 is None else replace(self, neg_slopes_XR1=self.neg_slopes_XR1[x])

    def block(self, m0: int, m1: int, n0: int, n1: int) -> BlockMod:
        """What the block of virtual rows m0 .. m1 - 1 and keys n0 .. n1 - 1 needs (transform_'s arguments)."""
        if self.neg_slopes_XR1 is None or self.positions_R is None:  # both or neither
            return self.softcap, None, None
        keys_n = torch.arange(n0, n1, device=self.positions_R.device, dtype=self.positions_R.dtype)
        distance_1mn = (self.positions_R[m0:m1, None] - keys_n[None, :]).abs_()[None]
        return self.softcap, self.neg_slopes_XR1[:, m0:m1], distance_1mn

    def band_distances(self, m0: int, m1: int, n0: int, block: int, span: int) -> torch.Tensor | None:
        """|p - j| of a band run (chunked_band.py), (blocks, block, span): block b's rows m0 + b * block ..
        see the keys n0 + b * block .. n0 + b * block + span - 1. None without ALiBi."""
        if self.neg_slopes_XR1 is None or self.positions_R is None:  # both or neither
            return None
        blocks = (m1 - m0) // block
        p = self.positions_R
        first_keys_b = n0 + block * torch.arange(blocks, device=p.device, dtype=p.dtype)
        keys_bS = first_keys_b[:, None] + torch.arange(span, device=p.device, dtype=p.dtype)[None, :]
        return (p[m0:m1].view(blocks, block, 1) - keys_bS[:, None, :]).abs_()


def build(masks: Masks, batch: int, heads: int, kv_heads: int, q_len: int, seq_len: int,
          device: torch.device | str, dtype: torch.dtype) -> BlockMods | None:
    """The call's BlockMods in `dtype` (the accumulator dtype), or None when it has no soft-cap or ALiBi."""
    if masks.softcap is None and not masks.alibi:
        return None
    neg_slopes_XR1 = positions_R = None
    if masks.alibi:
        group = heads // kv_heads
        # query head h = kv_head * group + g owns virtual rows g * q_len .. (g + 1) * q_len - 1 of X = (b, kv_head)
        slopes_KG = alibi_slopes_tensor(heads, device, dtype).view(kv_heads, group)
        rows_KR = slopes_KG.repeat_interleave(q_len, dim=1)
        neg_slopes_XR1 = (-rows_KR).repeat(batch, 1).unsqueeze(-1)
        positions_R = query_positions(q_len, seq_len, device).to(dtype).repeat(group)
    return BlockMods(masks.softcap, neg_slopes_XR1, positions_R)


# The soft-cap's tanh through the sigmoid, tanh(x) = 2 sigmoid(2x) - 1: torch's CPU tanh_ measured 5x
# sigmoid_'s time (fp32 (4, 256, 512), one thread: the cap's passes took 1.40 ms through tanh, 0.26 ms
# through sigmoid); at n = 2048 the cap cost 1.3x the plain call through tanh, 1.13x through sigmoid
# (measured under load). The price is rounding: 2 sigmoid - 1 cancels near 0, so a capped logit is off
# by ~2.5e-7 of the cap in fp32 (7.6e-6 at c = 30, against tanh's 2.5e-6), ~1e-16 of it in fp64.


def transform_(s_Xmn: torch.Tensor, softcap: float | None, neg_slopes_Xm1: torch.Tensor | None,
               distance_1mn: torch.Tensor | None, keep_tanh: bool = False) -> torch.Tensor | None:
    """Soft-cap then ALiBi on a block's scaled scores, in place. With `keep_tanh` (the backward) the
    soft-cap's tanh(s / c) is returned as a new block, for its derivative; otherwise None."""
    tanh_Xmn = None
    if softcap is not None:  # c tanh(s / c) = 2c sigmoid(2s / c) - c (see above)
        if keep_tanh:
            tanh_Xmn = torch.sigmoid(s_Xmn.mul_(2.0 / softcap)).mul_(2.0).sub_(1.0)
            torch.mul(tanh_Xmn, softcap, out=s_Xmn)
        else:
            s_Xmn.mul_(2.0 / softcap).sigmoid_().mul_(2.0 * softcap).sub_(softcap)
    if neg_slopes_Xm1 is not None and distance_1mn is not None:  # both or neither
        s_Xmn.addcmul_(neg_slopes_Xm1, distance_1mn)
    return tanh_Xmn


def softcap_grad_(ds_Xmn: torch.Tensor, tanh_Xmn: torch.Tensor | None) -> torch.Tensor:
    """dS with respect to the scores before the soft-cap: times 1 - tanh^2 (tanh_Xmn is overwritten)."""
    if tanh_Xmn is not None:
        ds_Xmn.mul_(tanh_Xmn.square_().neg_().add_(1.0))
    return ds_Xmn
