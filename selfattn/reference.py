"""The float64 reference every back end is tested and measured against.

Deliberately the plainest possible code: materialize the scores in float64, mask, softmax,
multiply. `rows` computes only some query rows, so accuracy at large n stays cheap.
"""

from __future__ import annotations

from typing import Callable

import torch

from selfattn.masks import no_empty_rows
from selfattn.score_mods import softmax_with_sink, transform_scores
from selfattn.validate import check_masks, check_qkv, resolve_scale


def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    window: int | tuple[int, int] | None = None,
    key_lengths: torch.Tensor | None = None,
    document_ids: torch.Tensor | None = None,
    scale: float | None = None,
    rows: torch.Tensor | None = None,
    softcap: float | None = None,
    alibi: bool = False,
    sink: float | None = None,
    mask_mod: Callable | None = None,
    score_mod: Callable | None = None,
    dtype: torch.dtype = torch.float64,
    cast_weights: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """softmax(scale * Q K^T + mask) V in float64, shape (B, H, Lq or len(rows), D), dtype float64.

    `dtype` computes the same steps in another dtype, with no upcast (the plain same-dtype reference
    of the correctness verdict, selfattn/measure/verdict.py); `cast_weights` rounds the softmax's
    weights before they multiply V (an FP8 point's P cast).

    The masks are selfattn.attention's (selfattn/masks.py), and so are the score transforms
    (selfattn/variants.py: soft-cap, then ALiBi, then the mask; the sink's logit joins the softmax); a
    mask_mod and a score_mod (selfattn/mods/: the field's convention, positions bottom-right aligned) are
    evaluated themselves on the rows computed, the score_mod after the built-in transforms;
    K and V may have fewer heads than Q (query head h uses K/V head h // (H / Hkv)); a row that sees
    no key is zeros.
    Differentiable: pass float64 leaves to get reference gradients (wrap in torch.no_grad()
    when only the values are needed).
    """
    check_qkv(q, k, v)
    batch, heads, q_len, head_dim = q.shape
    seq_len = k.shape[2]
    masks = check_masks(causal, window, key_lengths, document_ids, batch=batch, q_len=q_len, seq_len=seq_len,
                        device=q.device, softcap=softcap, alibi=alibi, sink=sink, mask_mod=mask_mod,
                        score_mod=score_mod)
    scale_value = resolve_scale(scale, head_dim)
    q_BHLD = q.to(dtype)
    if rows is not None:
        rows = torch.as_tensor(rows, dtype=torch.long, device=q.device).reshape(-1)
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= q_len):
            raise ValueError(f"rows: expected query indices in [0, {q_len}), got min {int(rows.min())} max {int(rows.max())}")
        q_BHLD = q_BHLD[:, :, rows]
    group = heads // k.shape[1]  # GQA: each K/V head serves `group` consecutive query heads
    k_BHLD = k.to(dtype).repeat_interleave(group, dim=1)
    v_BHLD = v.to(dtype).repeat_interleave(group, dim=1)
    scores_BHLL = transform_scores((q_BHLD @ k_BHLD.transpose(-1, -2)) * scale_value, masks, q_len, seq_len, rows=rows)
    keep, sees = no_empty_rows(masks.keep_heads(q_len, seq_len, batch=batch, heads=heads, rows=rows, device=q.device))
    scores_BHLL = scores_BHLL.masked_fill(~keep, float("-inf"))
    weights_BHLL = softmax_with_sink(scores_BHLL, masks.sink)
    if cast_weights is not None:
        weights_BHLL = cast_weights(weights_BHLL)
    return (weights_BHLL @ v_BHLD) * sees
