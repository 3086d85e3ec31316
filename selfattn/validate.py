"""Argument checks shared by every back end, so bad input fails early with one readable line.

Each check raises `ValueError("<argument>: <what is allowed>, got <what came>")` instead of
letting a shape error surface from deep inside torch.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from selfattn.masks import Masks
from selfattn.variants import parse_alibi, parse_sink, parse_softcap, parse_window

FLOAT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """q (B, H, Lq, D), k and v (B, Hkv, L, D): same dtype, device, batch and head_dim; Hkv
    divides H (grouped-query attention; Hkv == H is plain multi-head, Hkv == 1 multi-query)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(
                f"{name}: expected 4 dimensions (batch, heads, length, head_dim), got shape {tuple(t.shape)}"
            )
        if t.dtype not in FLOAT_DTYPES:
            raise ValueError(f"{name}: expected dtype float64, float32, float16 or bfloat16, got {t.dtype}")
        if min(t.shape) < 1:
            raise ValueError(f"{name}: every dimension must be >= 1, got shape {tuple(t.shape)}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise ValueError(f"{name}: dtype must match q's ({q.dtype}), got {t.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name}: device must match q's ({q.device}), got {t.device}")
        if t.shape[0] != q.shape[0]:
            raise ValueError(f"{name}: batch must match q's ({q.shape[0]}), got {t.shape[0]}")
        if t.shape[3] != q.shape[3]:
            raise ValueError(f"{name}: head_dim must match q's ({q.shape[3]}), got {t.shape[3]}")
    if v.shape[2] != k.shape[2]:
        raise ValueError(f"v: length must match k's ({k.shape[2]}), got {v.shape[2]}")
    if v.shape[1] != k.shape[1]:
        raise ValueError(f"v: heads must match k's ({k.shape[1]}), got {v.shape[1]}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"k: its heads ({k.shape[1]}) must divide q's heads ({q.shape[1]}) (grouped-query attention)")


def check_masks(
    causal: Any,
    window: Any,
    key_lengths: Any,
    document_ids: Any,
    *,
    batch: int,
    q_len: int,
    seq_len: int,
    device: torch.device,
    softcap: Any = None,
    alibi: Any = False,
    sink: Any = None,
    mask_mod: Any = None,
    score_mod: Any = None,
) -> Masks:
    """The mask arguments and score transforms, checked, as one `Masks` (see selfattn/masks.py for what
    each mask hides, selfattn/variants.py for the transforms)."""
    check_causal(causal, q_len, seq_len)
    window = parse_window(window)
    softcap, alibi, sink = parse_softcap(softcap), parse_alibi(alibi), parse_sink(sink)
    key_lengths = _checked_key_lengths(key_lengths, batch, seq_len, device)
    document_ids = _checked_document_ids(document_ids, batch, q_len, seq_len, device)
    mask_mod, score_mod = _checked_functions(mask_mod, score_mod, q_len, seq_len)
    return Masks(causal=causal, window=window, key_lengths=key_lengths, document_ids=document_ids,
                 softcap=softcap, alibi=alibi, sink=sink, mask_mod=mask_mod, score_mod=score_mod)


def _checked_key_lengths(key_lengths: Any, batch: int, seq_len: int, device: torch.device) -> torch.Tensor | None:
    """key_lengths (batch,): integers in 1..seq_len, on the device as long."""
    if key_lengths is None:
        return None
    if not isinstance(key_lengths, torch.Tensor) or key_lengths.dtype.is_floating_point or key_lengths.dtype == torch.bool:
        raise ValueError(f"key_lengths: expected an integer tensor of shape ({batch},), got {_describe(key_lengths)}")
    if tuple(key_lengths.shape) != (batch,):
        raise ValueError(f"key_lengths: expected shape ({batch},), got {tuple(key_lengths.shape)}")
    if key_lengths.numel() and (int(key_lengths.min()) < 1 or int(key_lengths.max()) > seq_len):
        raise ValueError(f"key_lengths: expected values in 1..{seq_len}, got min {int(key_lengths.min())} "
                         f"max {int(key_lengths.max())}")
    return key_lengths.to(device=device, dtype=torch.long)


def _checked_document_ids(document_ids: Any, batch: int, q_len: int, seq_len: int,
                          device: torch.device) -> torch.Tensor | None:
    """document_ids (batch, seq_len): non-decreasing integers (each document one run), q_len == seq_len."""
    if document_ids is None:
        return None
    if not isinstance(document_ids, torch.Tensor) or document_ids.dtype.is_floating_point or document_ids.dtype == torch.bool:
        raise ValueError(f"document_ids: expected an integer tensor of shape ({batch}, {seq_len}), got {_describe(document_ids)}")
    if tuple(document_ids.shape) != (batch, seq_len):
        raise ValueError(f"document_ids: expected shape ({batch}, {seq_len}), got {tuple(document_ids.shape)}")
    if q_len != seq_len:
        raise ValueError(f"document_ids: needs q_len == seq_len (packed self-attention), got q_len={q_len}, seq_len={seq_len}")
    if seq_len > 1 and bool((document_ids[:, 1:] < document_ids[:, :-1]).any()):
        raise ValueError("document_ids: must not decrease along the sequence (each document is one contiguous run)")
    return document_ids.to(device=device, dtype=torch.long)


def _checked_functions(mask_mod: Any, score_mod: Any, q_len: int, seq_len: int) -> tuple[Any, Any]:
    """Mask and score functions in the field's convention (selfattn/mods/), bound as the harness calls them."""
    if mask_mod is None and score_mod is None:
        return None, None
    from selfattn.mods.contract import from_callable

    mask_mod = None if mask_mod is None else from_callable(mask_mod, "mask")
    score_mod = None if score_mod is None else from_callable(score_mod, "score_mod")
    if mask_mod is not None and q_len > seq_len:
        raise ValueError(f"mask_mod: positions are bottom-right aligned, so it needs q_len <= seq_len, "
                         f"got q_len={q_len} > seq_len={seq_len}")
    return mask_mod, score_mod


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return repr(value) if not hasattr(value, "__len__") else type(value).__name__


def check_causal(causal: Any, q_len: int, seq_len: int) -> None:
    """causal is a bool; with the bottom-right aligned mask q_len may not exceed seq_len.

    Query i sees keys j <= i + seq_len - q_len, so with q_len > seq_len the first
    q_len - seq_len queries would see no key at all and their softmax would be 0/0.
    """
    if not isinstance(causal, bool):
        raise ValueError(f"causal: expected True or False, got {causal!r}")
    if causal and q_len > seq_len:
        raise ValueError(
            f"causal: needs q_len <= seq_len (bottom-right aligned mask), got q_len={q_len} > seq_len={seq_len}"
        )


def resolve_scale(scale: Any, head_dim: int) -> float:
    """None -> 1/sqrt(head_dim); otherwise a positive finite number (1.0 = unscaled ablation)."""
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ValueError(f"scale: expected None or a positive finite number, got {scale!r}")
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale: expected None or a positive finite number, got {scale!r}")
    return float(scale)


def check_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
    return value


def check_seed(seed: Any) -> int:
    """A seed for torch.Generator: an integer >= 0."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected an integer >= 0, got {seed!r}")
    return seed


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name}: expected True or False, got {value!r}")
    return value
