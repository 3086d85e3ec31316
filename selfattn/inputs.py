"""Seeded inputs: the same seed gives the same values in every dtype of a device family.

CPU points draw in float64 on the host from a private torch.Generator, then cast, so an fp16
point and an fp64 point of the same seed see the same numbers up to rounding and accuracy
comparisons between precisions are fair.

GPU points draw on the device itself, from a seeded generator of that device, in float32, then
cast. The choice, for cross-device comparability: a GPU point sees the same distribution as the
CPU point of its seed, NOT the same values (torch's CUDA generator is another algorithm). What
compares across devices (time, memory, error statistics over thousands of values) compares like
for like; a comparison that needs identical inputs on two devices draws on the CPU
(`make_qkv(..., device="cpu")`) and moves them. Drawing on the host would make a GPU point wait
on one host thread (tens of millions of values a second, minutes for a long decode cache) and
need a float64 copy of each tensor in host memory; on the device it takes milliseconds and
needs at most one float32 tensor beside the inputs (`selfattn.measure.predict` counts both:
`input_draw_s`, `input_draw_bytes`). Within one GPU every precision of a seed still sees the
same values up to rounding (all drawn in float32). Nothing touches the global RNG.
"""

from __future__ import annotations

import math

import torch

from selfattn.masks import Masks
from selfattn.point import Point
from selfattn.validate import check_positive_int, check_seed


# The dtype values are drawn in: float64 on the host (bit-identical to every earlier CPU sweep),
# float32 on a device (fp16/bf16/fp32/fp64 points of a seed then share values up to rounding).
HOST_DRAW_DTYPE = torch.float64
DEVICE_DRAW_DTYPE = torch.float32


def draws_on_host(device: torch.device | str) -> bool:
    """Whether inputs for `device` are drawn on the host (the CPU) rather than on the device."""
    return torch.device(device).type == "cpu"


def generator_for(device: torch.device | str, seed: int) -> torch.Generator:
    """A private generator for drawing `device`'s inputs: the host's for a CPU, the device's otherwise."""
    where = torch.device("cpu") if draws_on_host(device) else torch.device(device)
    return torch.Generator(device=where).manual_seed(check_seed(seed))


def randn(shape: tuple[int, ...], *, dtype, device, std: float = 1.0, seed: int = 0,
          generator: torch.Generator | None = None) -> torch.Tensor:
    """N(0, std^2) values of `shape` in `dtype` on `device`, from `seed` (or `generator`, which
    continues where its last draw stopped): drawn where the module docstring says."""
    if isinstance(std, bool) or not isinstance(std, (int, float)) or not math.isfinite(std) or std <= 0:
        raise ValueError(f"std: expected a positive finite number, got {std!r}")
    if generator is None:
        generator = generator_for(device, seed)
    if draws_on_host(device):
        values = torch.randn(shape, generator=generator, dtype=HOST_DRAW_DTYPE) * std
        return values.to(device=device, dtype=dtype)
    values = torch.randn(shape, generator=generator, dtype=DEVICE_DRAW_DTYPE, device=generator.device)
    return values.mul_(std).to(dtype=dtype)  # in place: one float32 tensor at most beside the result



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
    kv_heads: int | None = None,
    outliers: float = 0.0,
    outlier_std: float = 10.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q (batch, heads, q_len, head_dim) and k, v (batch, kv_heads, seq_len, head_dim), N(0, std^2).

    kv_heads=None means heads; fewer K/V heads (grouped-query attention) must divide heads.
    """
    kv_heads = heads if kv_heads is None else kv_heads
    for name, value in (("batch", batch), ("heads", heads), ("q_len", q_len), ("seq_len", seq_len),
                        ("head_dim", head_dim), ("kv_heads", kv_heads)):
        check_positive_int(name, value)
    if heads % kv_heads:
        raise ValueError(f"kv_heads: must divide heads={heads}, got {kv_heads}")
    generator = generator_for(device, seed)  # one stream for q, then k, then v
    q = randn((batch, heads, q_len, head_dim), dtype=dtype, device=device, std=std, seed=seed, generator=generator)
    k = randn((batch, kv_heads, seq_len, head_dim), dtype=dtype, device=device, std=std, seed=seed, generator=generator)
    v = randn((batch, kv_heads, seq_len, head_dim), dtype=dtype, device=device, std=std, seed=seed, generator=generator)
    if outliers:  # drawn after q, k, v from their own stream: the Gaussian part stays bit-identical
        q, k, v = add_outliers((q, k, v), outliers, outlier_std, seed=seed)
    return tuple(t.requires_grad_(requires_grad) for t in (q, k, v))  # type: ignore[return-value]


OUTLIER_SEED_OFFSET = 4_000_037


def add_outliers(tensors: tuple[torch.Tensor, ...], prob: float, std: float, *, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Each entry plus, with probability `prob`, an extra N(0, std^2) term: the large-magnitude
    entries FlashAttention-3 validated its FP8 path with ("0.1% of entries"). Seeded (seed +
    OUTLIER_SEED_OFFSET), drawn where the inputs are, as `randn` draws."""
    if isinstance(prob, bool) or not 0 <= prob <= 1:
        raise ValueError(f"input_outliers: expected a probability in [0, 1], got {prob!r}")
    if not prob:
        return tensors
    generator = generator_for(tensors[0].device, seed + OUTLIER_SEED_OFFSET)
    out = []
    for t in tensors:
        hit = randn(tuple(t.shape), dtype=torch.float64 if draws_on_host(t.device) else torch.float32, device=t.device,
                    generator=generator)
        where = hit.abs() > _normal_quantile(prob)  # P(|z| > c) = prob: one draw decides which entries
        extra = randn(tuple(t.shape), dtype=t.dtype, device=t.device, std=std, generator=generator)
        out.append(t + extra * where.to(t.dtype))
    return tuple(out)


def _normal_quantile(prob: float) -> float:
    """c with P(|z| > c) = prob for a standard normal z."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(1 - prob / 2) if prob < 1 else 0.0


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
    x = randn((batch, seq_len, d_model), dtype=dtype, device=device, std=std, seed=seed)
    return x.requires_grad_(requires_grad)


def make_key_lengths(batch: int, seq_len: int, pad_frac: float, *, seed: int = 0) -> torch.Tensor | None:
    """Unequal sequence lengths (batch,) whose padding averages `pad_frac` of seq_len; None when 0.

    The padding fractions are spread evenly over [max(0, 2 pad_frac - 1), min(1, 2 pad_frac)]
    (mean pad_frac, so a batch of one is padded by exactly pad_frac), and the seed decides which
    sequence gets which: reproducible, unequal, never empty.
    """
    if pad_frac == 0:
        return None
    low, high = max(0.0, 2 * pad_frac - 1), min(1.0, 2 * pad_frac)
    fractions = torch.tensor([low + (high - low) * (b + 0.5) / batch for b in range(batch)], dtype=torch.float64)
    order = torch.randperm(batch, generator=torch.Generator().manual_seed(check_seed(seed)))
    lengths = torch.round(seq_len * (1 - fractions[order])).long()
    return lengths.clamp(1, seq_len)


def make_document_ids(batch: int, seq_len: int, documents: int | None, *, seed: int = 0) -> torch.Tensor | None:
    """(batch, seq_len) document ids 0..documents-1, non-decreasing: `documents` packed documents
    of seeded, unequal lengths per sequence (cut points drawn without replacement); None for one."""
    if documents is None:
        return None
    if documents > seq_len:
        raise ValueError(f"documents: at most seq_len={seq_len} documents fit, got {documents}")
    generator = torch.Generator().manual_seed(check_seed(seed))
    ids = torch.zeros(batch, seq_len, dtype=torch.long)
    for b in range(batch):
        cuts = torch.randperm(seq_len - 1, generator=generator)[: documents - 1] + 1  # document starts 1..seq_len-1
        starts = torch.zeros(seq_len, dtype=torch.long)
        starts[cuts] = 1
        ids[b] = torch.cumsum(starts, dim=0)
    return ids


def point_masks(point: Point, device: torch.device | str = "cpu") -> Masks:
    """The masks of a sweep point: its causal flag and window, and padding lengths and document
    ids drawn from its seed (above), on `device`. selfattn/masks.py is the geometry they feed."""
    key_lengths = make_key_lengths(point.batch, point.seq_len, point.pad_frac, seed=point.seed)
    document_ids = make_document_ids(point.batch, point.seq_len, point.documents, seed=point.seed)
    from selfattn.mods.discovery import bind  # mask and score functions (selfattn/mods/), with their parameters

    return Masks(
        causal=point.causal, window=point.window, softcap=point.softcap, alibi=point.alibi, sink=point.sink,
        mask_mod=bind("mask", point.mask, point.mask_options),
        score_mod=bind("score_mod", point.score_mod, point.score_mod_options),
        key_lengths=None if key_lengths is None else key_lengths.to(device),
        document_ids=None if document_ids is None else document_ids.to(device),
    )
