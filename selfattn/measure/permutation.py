"""Permutation equivariance, measured: attention has no notion of position, so permuting the
tokens permutes the outputs, attn(PQ, PK, PV) = P attn(Q, K, V), up to rounding. A causal mask
ties each query's visible keys to its position, so there the identity breaks.

The check runs the point's back end, options, precision, heads, head_dim and mask on a short
self-attention sequence (at most PERM_TOKENS tokens: the property does not depend on n, and a
full-size pair of calls would double the point's cost), with unit-std inputs so an fp16 point
that overflows by design still checks the structure rather than its overflow.
"""

from __future__ import annotations

import torch

from selfattn.api import attention
from selfattn.inputs import make_qkv
from selfattn.point import Point, parse_scale

PERM_TOKENS = 128
PERM_SEED_OFFSET = 3_000_017  # its own stream: the point's inputs and upstreams stay as they are


def permutation_max_abs_diff(point: Point, dtype: torch.dtype, device: torch.device | str) -> float:
    """max |attn(PQ, PK, PV) - P attn(Q, K, V)| for one seeded random permutation P of the tokens."""
    n = min(point.seq_len, PERM_TOKENS)
    seed = point.seed + PERM_SEED_OFFSET
    q, k, v = make_qkv(1, point.heads, n, n, point.head_dim, dtype=dtype, device=device, seed=seed)
    perm = torch.randperm(n, generator=torch.Generator(device="cpu").manual_seed(seed)).to(q.device)
    options = dict(point.backend_options)
    scale = parse_scale(point.scale)

    def run(q_: torch.Tensor, k_: torch.Tensor, v_: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return attention(q_, k_, v_, backend=point.backend, causal=point.causal, scale=scale, **options)

    permuted = run(q[:, :, perm], k[:, :, perm], v[:, :, perm])
    expected = run(q, k, v)[:, :, perm]
    return float((permuted.double() - expected.double()).abs().max())
