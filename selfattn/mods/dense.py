"""Mask and score functions on a materialized score matrix: naive's path for them, sdpa's boolean mask.

The dense mask (B or 1, H or 1, q_len, seq_len) is evaluated from the mask_mod once per masks and shape and
kept (selfattn/mods/geometry.py `kept`): the first call, a warm-up, builds it; the timed calls reuse it, as a
model reuses one mask across its layers. The score_mod runs inside every call, on the scores it changes.
"""

from __future__ import annotations

from typing import Any

import torch

from selfattn.masks import Masks, no_empty_rows
from selfattn.mods.geometry import keep, kept
from selfattn.score_mods import softmax_with_sink, transform_scores


def dense_keep(masks: Masks, batch: int, heads: int, q_len: int, seq_len: int,
               device: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(keep, sees): the call's mask with rows that see no key opened (no_empty_rows), and which rows see a
    key (None when every row does); bool, (B or 1, H or 1, q_len, seq_len) and (..., q_len, 1)."""
    def make():
        full = keep(masks, batch, heads, q_len, seq_len, device)
        opened, sees = no_empty_rows(full)
        return opened.contiguous(), (None if bool(sees.all()) else sees)

    return kept(masks, ("dense", batch, heads, q_len, seq_len, str(device)), make)


def attention(q_BHMD: torch.Tensor, k_BKND: torch.Tensor, v_BKND: torch.Tensor, *, masks: Masks, scale: float,
              upcast_softmax: bool = False) -> torch.Tensor:
    """softmax(score_mod(scale * Q K^T) + mask) V, materialized: naive's steps with a mask or score function.
    GQA without copies (the query heads sharing a K/V head are one taller matrix, as naive does)."""
    b, h, q_len, d = q_BHMD.shape
    kv_heads, seq_len = k_BKND.shape[1], k_BKND.shape[2]
    q_BKRD = q_BHMD.reshape(b, kv_heads, h // kv_heads * q_len, d)
    scores_BHMN = ((q_BKRD @ k_BKND.transpose(-1, -2)) * scale).view(b, h, q_len, seq_len)
    if not masks.plain_scores:
        scores_BHMN = transform_scores(scores_BHMN, masks, q_len, seq_len)
    keep_bhMN, sees_bhM1 = dense_keep(masks, b, h, q_len, seq_len, q_BHMD.device)
    scores_BHMN = scores_BHMN.masked_fill(~keep_bhMN, float("-inf"))
    if upcast_softmax and scores_BHMN.dtype in (torch.float16, torch.bfloat16):
        weights_BHMN = softmax_with_sink(scores_BHMN.float(), masks.sink).to(q_BHMD.dtype)
    else:
        weights_BHMN = softmax_with_sink(scores_BHMN, masks.sink)
    out_BHMD = (weights_BHMN.reshape(b, kv_heads, -1, seq_len) @ v_BKND).view(b, h, q_len, d)
    return out_BHMD if sees_bhM1 is None else out_BHMD * sees_bhM1
