"""Mask and score functions on query/key blocks with an online softmax: chunked's path for them.

The block map (selfattn/mods/geometry.py `block_map`) says, once per mask and shape, which key blocks each
query block sees at all, and which of those are partial. A block no pair of which is seen is never computed
(the work a block-sparse kernel saves, the reason to run a sparse mask at all); a whole block needs no mask;
a partial block's boolean tile is evaluated from the mask_mod once, with the map, and kept. The first call
(a warm-up) makes both; the timed calls only read them. The score_mod runs inside each block.

Accumulates in float32 at least (float64 stays float64); plain tensor operations, so autograd gives the
backward.
"""

from __future__ import annotations

import torch

from selfattn.masks import Masks
from selfattn.mods.geometry import block_map, keep, kept
from selfattn.score_mods import transform_scores

DEFAULT_BLOCK = 128  # rows and keys per block when chunked's options leave them to the mask (auto)


def tiles(masks: Masks, batch: int, heads: int, q_len: int, seq_len: int, q_block: int, kv_block: int,
          device: torch.device) -> dict[tuple[int, int], torch.Tensor]:
    """(m0, n0) -> bool tile (B or 1, H or 1, m, n) of every partial block, on `device`, kept per masks."""
    def make():
        out = {}
        for m0, m1, kv in block_map(masks, batch, heads, q_len, seq_len, q_block, kv_block):
            rows = torch.arange(m0, m1, device=device)
            for n0, n1, partial in kv:
                if partial:
                    out[(m0, n0)] = keep(masks, batch, heads, q_len, seq_len, device, rows=rows, keys=(n0, n1)).contiguous()
        return out

    return kept(masks, ("tiles", batch, heads, q_len, seq_len, q_block, kv_block, str(device)), make)


def _grouped(t_bhmn: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """(b, H or 1, m, n) -> (b, K or 1, G or 1, m, n): a head axis split as the queries' (head = kv * G + g)."""
    b, h, m, n = t_bhmn.shape
    return t_bhmn[:, :, None] if h == 1 else t_bhmn.view(b, kv_heads, h // kv_heads, m, n)


def attention(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, *, masks: Masks, scale: float,
              q_chunk: int | None = None, kv_chunk: int | None = None) -> torch.Tensor:
    """softmax(score_mod(scale * Q K^T) + mask) V over the blocks the map keeps; q's shape and dtype."""
    b, h, q_len, d = q_BHMD.shape
    kv_heads, seq_len = k_BKND.shape[1], k_BKND.shape[2]
    group = h // kv_heads
    q_block, kv_block = q_chunk or DEFAULT_BLOCK, kv_chunk or DEFAULT_BLOCK
    plan = block_map(masks, b, h, q_len, seq_len, q_block, kv_block)
    partial_tiles = tiles(masks, b, h, q_len, seq_len, q_block, kv_block, q_BHMD.device)
    acc = torch.promote_types(q_BHMD.dtype, torch.float32)
    q_BKGMD = q_BHMD.to(acc).view(b, kv_heads, group, q_len, d)
    k_BK1ND, v_BK1ND = k_BKND.to(acc)[:, :, None], v_BKND.to(acc)[:, :, None]
    outs = []
    for m0, m1, kv in plan:
        m = m1 - m0
        rows = torch.arange(m0, m1, device=q_BHMD.device)
        q_blk = q_BKGMD[:, :, :, m0:m1]
        top = q_blk.new_full((b, kv_heads, group, m, 1), float("-inf"))
        total = q_blk.new_zeros((b, kv_heads, group, m, 1))
        out = q_blk.new_zeros((b, kv_heads, group, m, d))
        for n0, n1, partial in kv:
            s = (q_blk @ k_BK1ND[..., n0:n1, :].transpose(-1, -2)) * scale  # (b, K, G, m, n)
            if not masks.plain_scores:
                s = transform_scores(s.reshape(b, h, m, n1 - n0), masks, q_len, seq_len, rows=rows,
                                     keys=(n0, n1)).view(b, kv_heads, group, m, n1 - n0)
            if partial:
                s = s.masked_fill(~_grouped(partial_tiles[(m0, n0)], kv_heads), float("-inf"))
            new_top = torch.maximum(top, s.amax(-1, keepdim=True))
            safe = torch.where(torch.isinf(new_top), torch.zeros_like(new_top), new_top)  # rows seeing nothing yet
            p = torch.exp(s - safe)
            decay = torch.exp(top - safe)
            total = total * decay + p.sum(-1, keepdim=True)
            out = out * decay + p @ v_BK1ND[..., n0:n1, :]
            top = new_top
        if masks.sink is not None:  # one more logit in the denominator, no value
            safe = torch.where(torch.isinf(top), torch.zeros_like(top), top)
            total = total + torch.exp(masks.sink - safe)
        outs.append(torch.where(total > 0, out / total.clamp_min(torch.finfo(acc).tiny), torch.zeros_like(out)))
    out_BKGMD = torch.cat(outs, dim=3) if outs else q_BKGMD.new_zeros((b, kv_heads, group, q_len, d))
    return out_BKGMD.reshape(b, h, q_len, d).to(q_BHMD.dtype)
