"""Path length, measured: how strongly the last position's output depends on a token at distance k.

An RNN passes a token's information through every step between it and the output (a path of
length k), and at initialisation each step shrinks the gradient, so the sensitivity
||d y_{n-1} / d x_{n-1-k}|| decays with k; attention reaches every token in one step, so it does
not depend on k (beyond k = 0: the token itself also enters through its own query, which makes its
gradient larger for a reason that has nothing to do with path length; it is drawn, never compared).

Measured in float64 (an LSTM's far gradient is ~1e-14 at n = 64 and underflows float32 soon after)
at the point's n and d_model with its seeded weights: PATH_DRAWS draws of X (N(0, input_std^2)), each
with its own random unit direction u of the output, batched into one forward and one backward of
u . y_{n-1}; the norm over d_model of the gradient at each distance, averaged over the draws.
scope=layer runs its one needed query (the last; bottom-right aligned, it sees every key, causal or
not) through the float64 reference attention (selfattn/reference.py) on the layer's own weights.
"""

from __future__ import annotations

import json
import math

import torch

from selfattn.inputs import randn
from selfattn.layer import MultiHeadSelfAttention
from selfattn.point import RNN_GATES, Point, parse_scale
from selfattn.recurrent import Recurrent
from selfattn.reference import attention_reference

PATH_DRAWS = 8  # measured: attention's ratio over 12 seeds at n 64-1024 lies in 0.3-3.7 with 8 draws (0.3-4.6 with 4)
PATH_SEED_OFFSET = 4_000_037  # its own stream: the point's inputs and upstreams stay as they are
PATH_SCOPES = ("layer", *RNN_GATES)


def path_distances(n: int) -> list[int]:
    """0, 1, 2, 4, 8, ... (powers of two below n - 1), then n - 1: the distances measured."""
    distances, k = [0], 1
    while k < n - 1:
        distances.append(k)
        k *= 2
    if n > 1:
        distances.append(n - 1)
    return distances


def input_sensitivity(point: Point, device: torch.device | str) -> list[tuple[int, float]]:
    """[(distance k, mean over draws of ||d (u . y_{n-1}) / d x_{n-1-k}||)] for k in path_distances(n)."""
    if point.scope not in PATH_SCOPES:
        raise ValueError(f"scope: the path-length measurement needs one of {', '.join(PATH_SCOPES)}, got {point.scope!r}")
    n, d_model = point.seq_len, point.d_model
    seed = point.seed + PATH_SEED_OFFSET
    x = randn((PATH_DRAWS, n, d_model), dtype=torch.float64, device=device, std=point.input_std, seed=seed)
    u = randn((PATH_DRAWS, d_model), dtype=torch.float64, device=device, seed=seed + 1)
    u = u / u.norm(dim=-1, keepdim=True)
    x.requires_grad_(True)
    with torch.enable_grad():
        last = _last_output(point, x, device)  # (draws, d_model)
        (grad_x,) = torch.autograd.grad((last * u).sum(), x)
    distances = path_distances(n)
    positions = torch.tensor([n - 1 - k for k in distances], device=grad_x.device)
    norms = grad_x.index_select(1, positions).norm(dim=-1).mean(dim=0)  # (distances,)
    return list(zip(distances, (float(v) for v in norms.cpu())))


def _last_output(point: Point, x: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """y_{n-1} of the point's module in float64, (draws, d_model)."""
    if point.scope in RNN_GATES:
        rnn = Recurrent(point.scope, point.d_model, seed=point.seed).to(device=device, dtype=torch.float64)
        return rnn(x)[:, -1]
    layer = MultiHeadSelfAttention(point.d_model, point.heads, kv_heads=point.kv_heads_resolved)
    if point.seed != 0:
        layer.reset_parameters(seed=point.seed)
    layer = layer.to(device=device, dtype=torch.float64)
    split = layer.split_heads
    q, k, v = split(layer.w_q(x[:, -1:])), split(layer.w_k(x)), split(layer.w_v(x))
    out = attention_reference(q, k, v, causal=point.causal, scale=parse_scale(point.scale))  # one query: the last
    return layer.w_o(layer.merge_heads(out))[:, 0]


def far_near_ratio(sensitivity: list[tuple[int, float]]) -> float | None:
    """Sensitivity at the farthest distance (n - 1) over that at distance 1; None below n = 3
    (distance 1 is then the farthest) or when distance 1's is 0."""
    by_distance = dict(sensitivity)
    far = max(by_distance)
    if far < 2 or not by_distance.get(1):
        return None
    return by_distance[far] / by_distance[1]


def sensitivity_json(sensitivity: list[tuple[int, float]]) -> str:
    """The `grad_by_distance` column: a JSON list of [distance, norm] pairs."""
    return json.dumps([[k, v if math.isfinite(v) else None] for k, v in sensitivity])
