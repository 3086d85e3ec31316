"""selfattn.attention: one entry point, any back end, the same contract (docs/architecture.md)."""

from __future__ import annotations

from typing import Any

import torch

from selfattn.backends import get_backend, resolve_options
from selfattn.validate import check_causal, check_qkv, resolve_scale


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    backend: str = "naive",
    causal: bool = False,
    scale: float | None = None,
    **options: Any,
) -> torch.Tensor:
    """Scaled dot-product attention softmax(scale * Q K^T + mask) V.

    q: (batch, heads, q_len, head_dim); k, v: (batch, heads, seq_len, head_dim), all of one
    dtype and device. Returns (batch, heads, q_len, head_dim) in q's dtype.
    scale=None means 1/sqrt(head_dim); 1.0 is the unscaled ablation.
    causal=True masks bottom-right aligned: query i sees keys j <= i + seq_len - q_len.
    options are the back end's own (naive: upcast_softmax; sdpa: kernel; chunked: q_chunk,
    kv_chunk). Bad input raises ValueError; a valid request this device cannot run raises
    selfattn.Unsupported.
    """
    module = get_backend(backend)
    check_qkv(q, k, v)
    check_causal(causal, q.shape[2], k.shape[2])
    scale_value = resolve_scale(scale, q.shape[3])
    resolved = resolve_options(backend, options, q.device, q.dtype)
    return module.attention(q, k, v, causal=causal, scale=scale_value, **resolved)
