"""Seeded inputs: the same seed gives the same values in every dtype and on every device.

Values are drawn in float64 on the CPU from a private torch.Generator, then cast and moved,
so an fp16 point and an fp64 point of the same seed see the same numbers up to rounding and
accuracy comparisons between precisions are fair. Nothing touches the global RNG.
"""

from __future__ import annotations

import math

import torch

from selfattn.validate import check_positive_int, check_seed


def _draw(shape: tuple[int, ...], *, dtype, device, std: float, seed: int, generator: torch.Generator | None = None):
    if isinstance(std, bool) or not isinstance(std, (int, float)) or not math.isfinite(std) or std <= 0:
        raise ValueError(f"std: expected a positive finite number, got {std!r}")
    if generator is None:
        generator = torch.Generator(device="cpu").manual_seed(check_seed(seed))
    values = torch.randn(shape, generator=generator, dtype=torch.float64) * std
    return values.to(device=device, dtype=dtype)


def make_qkv(
    batch: int,
    heads: int,
    q_len: int,
    seq_len: int,
    head_dim: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    std: float = 1.0,
    seed: int = 0,
    requires_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q (batch, heads, q_len, head_dim) and k, v (batch, heads, seq_len, head_dim), N(0, std^2)."""
    for name, value in (("batch", batch), ("heads", heads), ("q_len", q_len), ("seq_len", seq_len), ("head_dim", head_dim)):
        check_positive_int(name, value)
    generator = torch.Generator(device="cpu").manual_seed(check_seed(seed))
    q = _draw((batch, heads, q_len, head_dim), dtype=dtype, device=device, std=std, seed=seed, generator=generator)
    k = _draw((batch, heads, seq_len, head_dim), dtype=dtype, device=device, std=std, seed=seed, generator=generator)
    v = _draw((batch, heads, seq_len, head_dim), dtype=dtype, device=device, std=std, seed=seed, generator=generator)
    return tuple(t.requires_grad_(requires_grad) for t in (q, k, v))  # type: ignore[return-value]


def make_x(
    batch: int,
    seq_len: int,
    d_model: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    std: float = 1.0,
    seed: int = 0,
    requires_grad: bool = False,
) -> torch.Tensor:
    """The layer's input X (batch, seq_len, d_model), N(0, std^2)."""
    for name, value in (("batch", batch), ("seq_len", seq_len), ("d_model", d_model)):
        check_positive_int(name, value)
    x = _draw((batch, seq_len, d_model), dtype=dtype, device=device, std=std, seed=seed)
    return x.requires_grad_(requires_grad)
