"""selfattn.attention: one entry point, any back end, the same contract (docs/api.md)."""

from __future__ import annotations

from typing import Any

import torch

from selfattn.backends.capability import ask_of_call
from selfattn.backends.registry import Backend
from selfattn.backends.resolved import Resolved, resolve
from selfattn.errors import Unsupported
from selfattn.masks import Masks
from selfattn.validate import check_masks, check_qkv, resolve_scale

# The precision a call on tensors of each dtype asks for (an FP8 call: float32 storage and its `fp8` option)
PRECISION_OF = {torch.float64: "fp64", torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    backend: str | Backend | Resolved = "naive",
    causal: bool = False,
    window: int | tuple[int, int] | None = None,
    key_lengths: torch.Tensor | None = None,
    document_ids: torch.Tensor | None = None,
    scale: float | None = None,
    softcap: float | None = None,
    alibi: bool = False,
    sink: float | None = None,
    mask_mod: Any = None,
    score_mod: Any = None,
    **options: Any,
) -> torch.Tensor:
    """Scaled dot-product attention softmax(scale * Q K^T + mask) V with back end `backend`.

    q: (batch, heads, q_len, head_dim); k, v: (batch, kv_heads, seq_len, head_dim), heads % kv_heads
    == 0. `backend`: a name (built in, entry point, path module:function), a `Backend` looked up, or a
    `Resolved` (selfattn.backends.resolved: a point's back end resolved once, its options with it). Returns
    q's shape and dtype. The full contract (masks, positions, scale, GQA, errors, each back end's options) is
    docs/api.md; the masks' geometry is selfattn/masks.py. window=(left, right), softcap, alibi and sink are the
    variants of selfattn/variants.py; what a back end does not declare
    (a variant, a dtype, a mask, a backward...) raises selfattn.Unsupported naming it, before it is called.
    mask_mod(b, h, q_idx, kv_idx) -> bool and score_mod(score, b, h, q_idx, kv_idx) are functions in the field's
    convention (flex_attention's), q_idx the query's bottom-right aligned position (selfattn/mods/contract.py).
    """
    check_qkv(q, k, v)
    masks = check_masks(causal, window, key_lengths, document_ids, batch=q.shape[0], q_len=q.shape[2],
                        seq_len=k.shape[2], device=q.device, softcap=softcap, alibi=alibi, sink=sink,
                        mask_mod=mask_mod, score_mod=score_mod)
    resolved = resolve_for_call(backend, q, k, masks, options)
    return resolved.run(q, k, v, masks=masks, scale=resolve_scale(scale, q.shape[3]))


def resolve_for_call(backend: str | Backend | Resolved, q: torch.Tensor, k: torch.Tensor, masks: Masks,
                     options: dict[str, Any]) -> Resolved:
    """`backend` resolved for a call on q and k with these masks, through the one resolver (resolved.resolve);
    Unsupported with the reason when its declaration says it cannot run the call. A `Resolved` (a point's, from
    resolve_point) is used as it is: it was resolved and asked once, for the point, and takes no other options."""
    if isinstance(backend, Resolved):
        if options:
            raise ValueError(f"options: a resolved back end carries its own options, got {sorted(options)} beside it")
        resolved = backend
    else:
        precision = PRECISION_OF.get(q.dtype, str(q.dtype))
        resolved = resolve(backend, options, ask_of_call(q, k, masks, precision, {}, False), q.dtype, device=q.device)
    if resolved.why_not:
        raise Unsupported(resolved.why_not)
    return resolved
