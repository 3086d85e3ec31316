"""The float64 reference every back end is tested and measured against.

Deliberately the plainest possible code: materialize the scores in float64, mask, softmax,
multiply. `rows` computes only some query rows, so accuracy at large n stays cheap.
"""

from __future__ import annotations

import torch

from selfattn.validate import check_causal, check_qkv, resolve_scale


def causal_keep_mask(
    q_len: int,
    seq_len: int,
    *,
    device: torch.device | str | None = None,
    rows: torch.Tensor | None = None,
    keys: tuple[int, int] | None = None,
) -> torch.Tensor:
    """Bool (q_len or len(rows), seq_len or the `keys` range): True where query i may see key j.

    Bottom-right aligned: query i sees keys j <= i + seq_len - q_len, so the last query
    always sees every key (q_len == 1 is a decode step) and q_len == seq_len is the usual
    lower triangle. `rows` and `keys` = (first, end) cut out a block (the chunked back end's).
    """
    if rows is None:
        query_idx = torch.arange(q_len, device=device)
    else:
        query_idx = rows.to(device=device, dtype=torch.long)
    key_idx = torch.arange(*(keys or (0, seq_len)), device=device)
    return key_idx[None, :] <= query_idx[:, None] + (seq_len - q_len)


def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(scale * Q K^T + mask) V in float64, shape (B, H, Lq or len(rows), D), dtype float64.

    Differentiable: pass float64 leaves to get reference gradients (wrap in torch.no_grad()
    when only the values are needed).
    """
    check_qkv(q, k, v)
    q_len, seq_len, head_dim = q.shape[2], k.shape[2], q.shape[3]
    check_causal(causal, q_len, seq_len)
    scale_value = resolve_scale(scale, head_dim)
    q_BHLD = q.to(torch.float64)
    if rows is not None:
        rows = torch.as_tensor(rows, dtype=torch.long, device=q.device).reshape(-1)
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= q_len):
            raise ValueError(f"rows: expected query indices in [0, {q_len}), got min {int(rows.min())} max {int(rows.max())}")
        q_BHLD = q_BHLD[:, :, rows]
    k_BHLD = k.to(torch.float64)
    v_BHLD = v.to(torch.float64)
    scores_BHLL = (q_BHLD @ k_BHLD.transpose(-1, -2)) * scale_value
    if causal:
        keep = causal_keep_mask(q_len, seq_len, device=q.device, rows=rows)
        scores_BHLL = scores_BHLL.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores_BHLL, dim=-1) @ v_BHLD
