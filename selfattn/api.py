"""selfattn.attention: one entry point, any back end, the same contract (docs/architecture.md)."""

from __future__ import annotations

from typing import Any

import torch

from selfattn.backends import get_backend, resolve_options
from selfattn.validate import check_masks, check_qkv, resolve_scale


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    backend: str = "naive",
    causal: bool = False,
    window: int | None = None,
    key_lengths: torch.Tensor | None = None,
    document_ids: torch.Tensor | None = None,
    scale: float | None = None,
    **options: Any,
) -> torch.Tensor:
    """Scaled dot-product attention softmax(scale * Q K^T + mask) V.

    q: (batch, heads, q_len, head_dim); k, v: (batch, kv_heads, seq_len, head_dim) with
    heads % kv_heads == 0 (grouped-query attention: query head h uses K/V head
    h // (heads / kv_heads)); all of one dtype and device. Returns (batch, heads, q_len,
    head_dim) in q's dtype. scale=None means 1/sqrt(head_dim); 1.0 is the unscaled ablation.
    Masks (selfattn/masks.py), positions aligned bottom-right (query i sits at
    p = i + seq_len - q_len), combined by intersection:
      causal=True        query i sees keys j <= p;
      window=w           p - j < w, and (unless causal) j - p < w;
      key_lengths (B,)   keys j >= key_lengths[b] are padding, seen by no query of sequence b;
      document_ids (B, seq_len), non-decreasing, q_len == seq_len: attention stays inside
                         each packed document (causal within it when causal=True).
    A query row that sees no key returns zeros (and zero gradients).
    options are the back end's own (naive: upcast_softmax, scale_at, compile; sdpa: kernel,
    bool_mask; chunked: q_chunk, kv_chunk, compute, compile; flex: none, it is always compiled).
    Bad input raises ValueError; a valid request this device cannot run raises selfattn.Unsupported.
    """
    module = get_backend(backend)
    check_qkv(q, k, v)
    masks = check_masks(causal, window, key_lengths, document_ids, batch=q.shape[0], q_len=q.shape[2],
                        seq_len=k.shape[2], device=q.device)
    scale_value = resolve_scale(scale, q.shape[3])
    resolved = resolve_options(backend, options, q.device, q.dtype)
    return module.attention(q, k, v, masks=masks, scale=scale_value, **resolved)
