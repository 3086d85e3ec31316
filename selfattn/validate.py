"""Argument checks shared by every back end, so bad input fails early with one readable line.

Each check raises `ValueError("<argument>: <what is allowed>, got <what came>")` instead of
letting a shape error surface from deep inside torch.
"""

from __future__ import annotations

import math
from typing import Any

import torch

FLOAT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """q (B, H, Lq, D), k and v (B, H, L, D): same dtype, device, batch, heads and head_dim."""
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
        if t.shape[:2] != q.shape[:2]:
            raise ValueError(
                f"{name}: batch and heads must match q's {tuple(q.shape[:2])}, got {tuple(t.shape[:2])}"
            )
        if t.shape[3] != q.shape[3]:
            raise ValueError(f"{name}: head_dim must match q's ({q.shape[3]}), got {t.shape[3]}")
    if v.shape[2] != k.shape[2]:
        raise ValueError(f"v: length must match k's ({k.shape[2]}), got {v.shape[2]}")


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
