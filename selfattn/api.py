"""selfattn.attention: one entry point, any back end, the same contract (docs/api.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from selfattn.backends import get_backend
from selfattn.backends.capability import ask_of_call, why_not
from selfattn.backends.registry import Backend
from selfattn.errors import Unsupported
from selfattn.fields import check_fields
from selfattn.masks import Masks
from selfattn.validate import check_masks, check_qkv, resolve_scale

# The precision a call on tensors of each dtype asks for (an FP8 call: float32 storage and its `fp8` option)
PRECISION_OF = {torch.float64: "fp64", torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    backend: str | Backend = "naive",
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
    == 0. `backend`: a name (built in, entry point, path module:function) or a `Backend` looked up. Returns q's shape and dtype. The full contract (masks, positions, scale, GQA, errors, each
    back end's options) is docs/api.md; the masks' geometry is selfattn/masks.py. window=(left, right),
    softcap, alibi and sink are the variants of selfattn/variants.py; what a back end does not declare
    (a variant, a dtype, a mask, a backward...) raises selfattn.Unsupported naming it, before it is called.
    mask_mod(b, h, q_idx, kv_idx) -> bool and score_mod(score, b, h, q_idx, kv_idx) are functions in the field's
    convention (flex_attention's), q_idx the query's bottom-right aligned position (selfattn/mods/contract.py).
    """
    check_qkv(q, k, v)
    masks = check_masks(causal, window, key_lengths, document_ids, batch=q.shape[0], q_len=q.shape[2],
                        seq_len=k.shape[2], device=q.device, softcap=softcap, alibi=alibi, sink=sink,
                        mask_mod=mask_mod, score_mod=score_mod)
    return resolve_call(backend, q, k, masks, resolve_scale(scale, q.shape[3]), options).run(q, k, v, masks)


@dataclass(frozen=True)
class ResolvedCall:
    """A back end's call with its options resolved and its capability asked: run it on tensors like those it was
    resolved for (the same device, dtype, grad state, heads and head_dim)."""

    backend: Backend
    options: dict[str, Any]
    scale: float

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, masks: Masks) -> torch.Tensor:
        return self.backend.attention(q, k, v, masks=masks, scale=self.scale, **self.options)


def resolve_call(backend: str | Backend, q: torch.Tensor, k: torch.Tensor, masks: Masks, scale: float,
                 options: dict[str, Any]) -> ResolvedCall:
    """Back end `backend` (a name, or a registry.Backend already looked up) resolved for a call on q and k with
    these masks: its options checked and filled in for their device and dtype, and its declaration asked whether
    it can run the call (capability.why_not: Unsupported with the reason when not)."""
    entry = get_backend(backend) if isinstance(backend, str) else backend
    given = {key: value for key, value in check_fields(entry.options_type, options, fill_defaults=False).items()
             if value is not None}
    resolved = entry.resolve_options(given, q.device, q.dtype)
    fmt = resolved.get("fp8", "none")
    precision = f"fp8_{fmt}" if fmt not in (None, "none") else PRECISION_OF.get(q.dtype, str(q.dtype))
    why = why_not(entry, ask_of_call(q, k, masks, precision, resolved, entry.compiles(resolved)))
    if why:
        raise Unsupported(why)
    return ResolvedCall(entry, resolved, scale)
