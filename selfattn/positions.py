"""Positional encodings: what gives self-attention, a bag of words by itself, a notion of order.

- sinusoidal (Vaswani et al. 2017, 3.5): PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),
  PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)), added to X before the projections.
- learned: a seeded (max_len, d_model) table, a parameter of the layer, added to X the same way.
- rope (Su et al. 2021, RoFormer): each pair of features (2i, 2i+1) of q and k, per head, rotated
  by the angle pos * 10000^(-2i/d_k). q_m . k_n then depends on m - n only: the rotation of q by
  m·θ and of k by n·θ leave (n - m)·θ between them.

sinusoidal and learned exist for scope=layer (they are added to X, which only a layer has);
rope rotates the q and k any back end is given (scope=core and layer), so every back end gets
it. Tables are computed in float64 and cast to the point's dtype, outside the timed call (as a
model caches them); the rotation itself is inside it (it is RoPE's cost per call).
"""

from __future__ import annotations

import math

import torch

BASE = 10000.0  # the wavelength base of the sinusoids and of RoPE's angles
# The learned table's init: the sinusoidal table's rms (1/√2), so both encodings are of one size beside X.
LEARNED_STD = 1.0 / math.sqrt(2.0)
LEARNED_SEED_OFFSET = 4_000_037  # its own stream: the layer's W_Q..W_O stay as they were
ROPE_SHIFT_SEED_OFFSET = 5_000_011  # the relative-position check's own inputs
ROPE_SHIFT_PAIRS = 64  # (m, n, s) triples the relative-position check compares
ADDED = ("sinusoidal", "learned")  # encodings added to X (scope=layer only)


def sinusoidal_table(length: int, d_model: int, *, dtype: torch.dtype = torch.float64,
                     device: torch.device | str = "cpu") -> torch.Tensor:
    """PE (length, d_model): column 2i is sin(pos / 10000^(2i/d_model)), column 2i+1 its cos."""
    pos_L1 = torch.arange(length, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # 2i for every pair (an odd d_model ends on a sin)
    angle_LI = pos_L1 / BASE ** (two_i / d_model)
    table = torch.empty(length, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle_LI)
    table[:, 1::2] = torch.cos(angle_LI[:, : d_model // 2])
    return table.to(device=device, dtype=dtype)


def learned_table(length: int, d_model: int, *, seed: int) -> torch.Tensor:
    """A learned encoding at initialisation: N(0, LEARNED_STD²), float64 on the CPU, from `seed`."""
    generator = torch.Generator(device="cpu").manual_seed(seed + LEARNED_SEED_OFFSET)
    return torch.randn(length, d_model, generator=generator, dtype=torch.float64) * LEARNED_STD


def rope_tables(positions: torch.Tensor, head_dim: int, *, dtype: torch.dtype,
                device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (len(positions), head_dim/2) of the angles pos * 10000^(-2i/head_dim), float64 then cast."""
    if head_dim % 2:
        raise ValueError(f"head_dim: rope rotates pairs of features, so it must be even, got {head_dim}")
    inv_freq_I = BASE ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angle_LI = positions.to(device="cpu", dtype=torch.float64)[:, None] * inv_freq_I
    return (torch.cos(angle_LI).to(device=device, dtype=dtype), torch.sin(angle_LI).to(device=device, dtype=dtype))


def rotate(x_BHLD: torch.Tensor, cos_LI: torch.Tensor, sin_LI: torch.Tensor,
           turn_LI: torch.Tensor | None = None) -> torch.Tensor:
    """Each feature pair (2i, 2i+1) of x at position l rotated by its angle (cos_LI[l, i], sin_LI[l, i]).

    In float32 and float64 the pair is a complex number and the rotation one complex product with
    turn = cos + i·sin (`turn_LI`, or made here from the tables): one kernel, where the real form below
    is seven (four products, a sum, a difference, a stack), each a pass over q or k. fp16 and bf16 have
    no complex type torch multiplies on every device, so they take the real form.
    """
    if x_BHLD.dtype in (torch.float32, torch.float64):
        turn_LI = torch.complex(cos_LI, sin_LI) if turn_LI is None else turn_LI
        pairs = x_BHLD if x_BHLD.stride(-1) == 1 else x_BHLD.contiguous()
        return torch.view_as_real(torch.view_as_complex(pairs.unflatten(-1, (-1, 2))) * turn_LI).flatten(-2)
    pairs = x_BHLD.unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    return torch.stack((even * cos_LI - odd * sin_LI, even * sin_LI + odd * cos_LI), dim=-1).flatten(-2)


def turn_table(cos_LI: torch.Tensor, sin_LI: torch.Tensor) -> torch.Tensor | None:
    """cos + i·sin, the complex form `rotate` multiplies float32 and float64 pairs by (None for other dtypes)."""
    return torch.complex(cos_LI, sin_LI) if cos_LI.dtype in (torch.float32, torch.float64) else None


def rope(x_BHLD: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x rotated at `positions` (one per token of dimension 2), tables in x's dtype (convenience for checks)."""
    cos, sin = rope_tables(positions, x_BHLD.shape[-1], dtype=x_BHLD.dtype, device=x_BHLD.device)
    return rotate(x_BHLD, cos, sin)


def query_positions(q_len: int, seq_len: int) -> torch.Tensor:
    """Bottom-right aligned, as the masks are: query i sits at position i + seq_len - q_len."""
    return torch.arange(q_len) + (seq_len - q_len)


def rope_qk(q_len: int, seq_len: int, head_dim: int, *, dtype: torch.dtype, device: torch.device | str):
    """(q, k) -> (q, k) rotated at their positions (queries bottom-right aligned), tables made once here."""
    cos_q, sin_q = rope_tables(query_positions(q_len, seq_len), head_dim, dtype=dtype, device=device)
    cos_k, sin_k = rope_tables(torch.arange(seq_len), head_dim, dtype=dtype, device=device)
    turn_q, turn_k = turn_table(cos_q, sin_q), turn_table(cos_k, sin_k)

    def rotate_qk(q_BHMD: torch.Tensor, k_BKND: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return rotate(q_BHMD, cos_q, sin_q, turn_q), rotate(k_BKND, cos_k, sin_k, turn_k)
    return rotate_qk


def rope_shift_max_abs_diff(head_dim: int, seq_len: int, *, dtype: torch.dtype, device: torch.device | str,
                            seed: int) -> float:
    """max |q_{m+s} . k_{n+s} - q_m . k_n| / √d_k over ROPE_SHIFT_PAIRS seeded (m, n, s), positions in
    [0, 2·seq_len), q and k unit-std vectors, computed in `dtype` on `device`: a logit of RoPE
    depends on m - n only, up to the dtype's rounding."""
    generator = torch.Generator(device="cpu").manual_seed(seed + ROPE_SHIFT_SEED_OFFSET)
    q_PD = torch.randn(ROPE_SHIFT_PAIRS, head_dim, generator=generator, dtype=torch.float64)
    k_PD = torch.randn(ROPE_SHIFT_PAIRS, head_dim, generator=generator, dtype=torch.float64)
    m, n, s = (torch.randint(0, seq_len, (ROPE_SHIFT_PAIRS,), generator=generator) for _ in range(3))
    q_PD, k_PD = q_PD.to(device=device, dtype=dtype), k_PD.to(device=device, dtype=dtype)

    def logits(shift: torch.Tensor) -> torch.Tensor:
        q = rope(q_PD[None, None], m + shift)[0, 0]  # (1, 1, P, D): each pair's q its own token at its position
        k = rope(k_PD[None, None], n + shift)[0, 0]
        return (q * k).sum(-1) / math.sqrt(head_dim)

    return float((logits(s).double() - logits(torch.zeros_like(s)).double()).abs().max())
