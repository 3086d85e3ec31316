"""Path length, measured: how strongly the last position's output depends on a token at distance k.

An RNN passes a token's information through every step between it and the output (a path of
length k), and at initialisation each step shrinks the gradient, so the sensitivity
||d y_{n-1} / d x_{n-1-k}|| decays with k; attention reaches every token in one step, so it does
not depend on k (beyond k = 0: the token itself also enters through its own query, which makes its
gradient larger for a reason that has nothing to do with path length; it is drawn, never compared).

Measured in float64 (an LSTM's far gradient is ~1e-14 at n = 64 and underflows float32 soon after)
at the point's n and d_model with its seeded weights: its scope's draws of X (Scope.path_draws; N(0, input_std^2)), each
with its own random unit direction u of the output, batched into one forward and one backward of
u . y_{n-1}; the norm over d_model of the gradient at each distance, averaged over the draws.
scope=layer computes only the output it needs, the last query's (`last_query_output`), on the layer's
own weights. Attention's sensitivity to one token follows that token's random softmax weight (logits
of std ~1 at init), so its average takes many draws (scopes/layer.py; cheap: O(n d_model heads) each);
a recurrence's decay is many orders of magnitude and its draws cost a whole recurrence (scopes/_recurrent.py).
"""

from __future__ import annotations

import json
import math
from typing import Any

import torch

from selfattn.backends.resolved import Resolved
from selfattn.inputs import randn
from selfattn.layer import MultiHeadSelfAttention
from selfattn.point import Point
from selfattn.scopes import SCOPES, declared

PATH_SEED_OFFSET = 4_000_037  # its own stream: the point's inputs and upstreams stay as they are
PATH_SCOPES = tuple(name for name, scope in SCOPES.items() if scope.path_length)  # their declarations (selfattn/scopes/)


def path_draws(scope: str) -> int:
    """Draws of X the metric averages over: its scope's declaration (Scope.path_draws)."""
    return SCOPES[scope].path_draws


def path_distances(n: int) -> list[int]:
    """0, 1, 2, 4, 8, ... (powers of two below n - 1), then n - 1: the distances measured."""
    distances, k = [0], 1
    while k < n - 1:
        distances.append(k)
        k *= 2
    if n > 1:
        distances.append(n - 1)
    return distances


def input_sensitivity(point: Point, device: torch.device | str, resolved: Resolved) -> list[tuple[int, float]]:
    """[(distance k, mean over draws of ||d (u . y_{n-1}) / d x_{n-1-k}||)] for k in path_distances(n).
    `resolved`: the point's back end as measure_point resolved it, for its layer."""
    if not declared(point).path_length:
        raise ValueError(f"scope: the path-length measurement needs one of {', '.join(PATH_SCOPES)}, got {point.scope!r}")
    n, d_model, draws = point.seq_len, point.d_model, path_draws(point.scope)
    seed = point.seed + PATH_SEED_OFFSET
    x = randn((draws, n, d_model), dtype=torch.float64, device=device, std=point.input_std, seed=seed)
    u = randn((draws, d_model), dtype=torch.float64, device=device, seed=seed + 1)
    u = u / u.norm(dim=-1, keepdim=True)
    x.requires_grad_(True)
    with torch.enable_grad():
        last = _last_output(point, x, device, resolved)  # (draws, d_model)
        (grad_x,) = torch.autograd.grad((last * u).sum(), x)
    distances = path_distances(n)
    positions = torch.tensor([n - 1 - k for k in distances], device=grad_x.device)
    norms = scaled_norm(grad_x.index_select(1, positions)).mean(dim=0)  # (distances,)
    return list(zip(distances, (float(v) for v in norms.cpu())))


def scaled_norm(t: torch.Tensor) -> torch.Tensor:
    """The 2-norm over the last dimension, computed as max|t| * ||t / max|t|||: squaring a far gradient of
    1e-200 directly underflows float64 to 0, though the gradient itself is well inside its range."""
    top = t.abs().amax(dim=-1, keepdim=True)
    safe = torch.where(top > 0, top, torch.ones_like(top))
    return (top * (t / safe).norm(dim=-1, keepdim=True)).squeeze(-1)


def _last_output(point: Point, x: torch.Tensor, device: torch.device | str, resolved: Resolved) -> torch.Tensor:
    """y_{n-1} of the point's module in float64, (draws, d_model), as its scope computes it (Scope.last_output: the
    layer's products reassociated, so its back end's own call never runs; a recurrence's last step)."""
    last_output = declared(point).last_output
    if last_output is None:
        raise ValueError(f"scope: the path-length measurement needs one of {', '.join(PATH_SCOPES)}, got {point.scope!r}")
    return last_output(point, x, device, resolved)


def last_query_output(layer: MultiHeadSelfAttention, x_BLD: torch.Tensor, scale: float | None) -> torch.Tensor:
    """The layer's output at the last position, (B, d_model), with the products reassociated so nothing
    of size n x d_model^2 is formed: head h's logits are X (W_K,h^T q_h) and its value sum W_V,h (a_h^T X),
    O(n d_model heads) instead of projecting every key and value. The same function (tests compare it with
    the layer's forward), so autograd's gradient is the layer's. The last query, bottom-right aligned, sees
    every key with the causal mask or without it."""
    b, _, d_model = x_BLD.shape
    heads, kv_heads, dim = layer.heads, layer.kv_heads, layer.head_dim
    group = heads // kv_heads  # query head h reads K/V head h // group
    w_k_HKM = layer.w_k.weight.view(kv_heads, dim, d_model).repeat_interleave(group, dim=0)
    w_v_HKM = layer.w_v.weight.view(kv_heads, dim, d_model).repeat_interleave(group, dim=0)
    q_BHK = layer.w_q(x_BLD[:, -1]).view(b, heads, dim)
    key_dir_BHM = torch.einsum("bhk,hkm->bhm", q_BHK, w_k_HKM) * (1.0 / math.sqrt(dim) if scale is None else scale)
    weights_BHL = torch.softmax(torch.einsum("blm,bhm->bhl", x_BLD, key_dir_BHM), dim=-1)
    mixed_BHM = torch.einsum("bhl,blm->bhm", weights_BHL, x_BLD)
    out_BHK = torch.einsum("hkm,bhm->bhk", w_v_HKM, mixed_BHM)
    return layer.w_o(out_BHK.reshape(b, heads * dim))


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
