"""The score transforms of selfattn/variants.py on tensors: soft-capping, the ALiBi bias, the sink logit.

Shared by the float64 reference and the back ends that materialize scores (naive; sdpa's bias), so the
definition lives once. Back ends that never hold a score tensor (chunked's blocks, flex's score_mod, the
Triton kernel) apply the same formulas to their blocks and are tested against the reference.
"""

from __future__ import annotations

import torch

from selfattn.masks import Masks
from selfattn.variants import alibi_slopes


def query_positions(q_len: int, seq_len: int, device: torch.device | str, rows: torch.Tensor | None = None) -> torch.Tensor:
    """p of each query row, bottom-right aligned (query i sits at i + seq_len - q_len), int64."""
    pos = torch.arange(q_len, device=device, dtype=torch.long) + (seq_len - q_len)
    return pos if rows is None else pos[rows.to(device=device, dtype=torch.long)]


def alibi_slopes_tensor(heads: int, device: torch.device | str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(heads,): each query head's slope (variants.alibi_slopes)."""
    return torch.tensor(alibi_slopes(heads), device=device, dtype=dtype)


def alibi_bias(heads: int, q_len: int, seq_len: int, *, device: torch.device | str, dtype: torch.dtype,
               rows: torch.Tensor | None = None, keys: tuple[int, int] | None = None) -> torch.Tensor:
    """(heads, rows, keys): -slope_h * |p - j| for query position p and key j."""
    p = query_positions(q_len, seq_len, device, rows)
    j = torch.arange(*(keys or (0, seq_len)), device=device, dtype=torch.long)
    distance = (p[:, None] - j[None, :]).abs().to(dtype)
    return -alibi_slopes_tensor(heads, device, dtype)[:, None, None] * distance[None]


def transform_scores(scores_BHLL: torch.Tensor, masks: Masks, q_len: int, seq_len: int, *,
                     rows: torch.Tensor | None = None, keys: tuple[int, int] | None = None) -> torch.Tensor:
    """Scaled scores (batch, heads, rows, keys) soft-capped, then biased by ALiBi (FlashAttention's order), then
    changed by the score function if any (its q_idx the rows' positions, selfattn/mods/contract.py).

    Returns a new tensor (the input is left as it was); the mask and the sink come after.
    """
    if masks.softcap is not None:
        cap = masks.softcap
        scores_BHLL = torch.tanh(scores_BHLL / cap) * cap
    if masks.alibi:
        bias = alibi_bias(scores_BHLL.shape[1], q_len, seq_len, device=scores_BHLL.device, dtype=scores_BHLL.dtype,
                          rows=rows, keys=keys)
        scores_BHLL = scores_BHLL + bias
    if masks.score_mod is not None:  # a score function (selfattn/mods/): after the built-in transforms
        scores_BHLL = masks.score_mod.apply(scores_BHLL, q_len, seq_len, rows=rows, keys=keys)
    return scores_BHLL


def softmax_with_sink(scores_BHLL: torch.Tensor, sink: float | None) -> torch.Tensor:
    """softmax over the last dimension, with one more logit `sink` in each row's denominator (no value).

    The sink column is appended, the softmax taken, and the column dropped: the plainest exact form
    (it copies the scores once; back ends that cannot afford that fold the sink into their running sums).
    """
    if sink is None:
        return torch.softmax(scores_BHLL, dim=-1)
    column = scores_BHLL.new_full((*scores_BHLL.shape[:-1], 1), sink)
    return torch.softmax(torch.cat([scores_BHLL, column], dim=-1), dim=-1)[..., :-1]


def sink_rescale(lse: torch.Tensor, sink: float) -> torch.Tensor:
    """The factor that turns an output normalized without the sink into one normalized with it:
    exp(lse) / (exp(lse) + exp(sink)) = sigmoid(lse - sink), for a row whose log-sum-exp over its keys is
    `lse` (-inf for a row that sees no key: factor 0, as its output already is)."""
    return torch.sigmoid(lse - sink)
