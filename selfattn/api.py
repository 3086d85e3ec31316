"""selfattn.attention: one entry point, any back end, the same contract (docs/api.md)."""

from __future__ import annotations

from typing import Any

import torch

from selfattn.backends import get_backend, resolve_options
from selfattn.backends.registry import check_variants
from selfattn.validate import check_masks, check_qkv, resolve_scale


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    backend: str = "naive",
    causal: bool = False,
    window: int | tuple[int, int] | None = None,
    key_lengths: torch.Tensor | None = None,
    document_ids: torch.Tensor | None = None,
    scale: float | None = None,
    softcap: float | None = None,
    alibi: bool = False,
    sink: float | None = None,
    **options: Any,
) -> torch.Tensor:
    """Scaled dot-product attention softmax(scale * Q K^T + mask) V with back end `backend`.

    q: (batch, heads, q_len, head_dim); k, v: (batch, kv_heads, seq_len, head_dim), heads % kv_heads
    == 0. Returns q's shape and dtype. The full contract (masks, positions, scale, GQA, errors, each
    back end's options) is docs/api.md; the masks' geometry is selfattn/masks.py. window=(left, right),
    softcap, alibi and sink are the variants of selfattn/variants.py; a back end that does not declare
    one it is given raises selfattn.Unsupported naming it.
    """
    module = get_backend(backend)
    check_qkv(q, k, v)
    masks = check_masks(causal, window, key_lengths, document_ids, batch=q.shape[0], q_len=q.shape[2],
                        seq_len=k.shape[2], device=q.device, softcap=softcap, alibi=alibi, sink=sink)
    check_variants(module, masks)
    scale_value = resolve_scale(scale, q.shape[3])
    resolved = resolve_options(backend, options, q.device, q.dtype)
    return module.attention(q, k, v, masks=masks, scale=scale_value, **resolved)
