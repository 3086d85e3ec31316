"""fp32acc: attention whose products and softmax run in float32 whatever the inputs' precision.

The usual fix for fp16/bf16 attention written by hand: upcast Q, K and V, compute scores, softmax and
P·V in float32 (so no logit overflows 65504 and no sum of weights loses bits), round the output to the
inputs' dtype once at the end. It honours every mask argument of the contract and fewer K/V heads, so
its rows compare with the built-ins' on any point; float64 inputs stay float64.
"""

from __future__ import annotations

import torch

from selfattn.backends import backend


@backend(dtypes=("fp64", "fp32", "fp16", "bf16"), kernel_label="fp32-accumulate")
def fp32acc(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    """q (B, H, M, D), k and v (B, K, N, D) with H % K == 0 -> (B, H, M, D) in q's dtype."""
    acc = torch.promote_types(q.dtype, torch.float32)  # float32, or float64 for float64 inputs
    groups = q.shape[1] // k.shape[1]
    q_, k_, v_ = q.to(acc), k.to(acc).repeat_interleave(groups, 1), v.to(acc).repeat_interleave(groups, 1)
    m, n = q.shape[2], k.shape[2]
    # bottom-right aligned positions: query i sits at p = i + n - m, so causal keeps keys j <= p
    p = torch.arange(m, device=q.device)[:, None] + (n - m)
    j = torch.arange(n, device=q.device)[None, :]
    keep = torch.ones(q.shape[0], 1, m, n, dtype=torch.bool, device=q.device)
    if causal:
        keep = keep & (j <= p)
    if window is not None:
        keep = keep & (p - j < window) & ((j - p < window) | causal)
    if key_lengths is not None:  # right padding: key j exists while j < length
        keep = keep & (j < key_lengths.view(-1, 1, 1, 1))
    if document_ids is not None:  # packed documents: a query sees keys of its own document
        docs = document_ids.view(q.shape[0], 1, 1, n)
        keep = keep & (document_ids[:, -m:].view(q.shape[0], 1, m, 1) == docs)
    scores = (q_ @ k_.transpose(-1, -2)) * scale
    weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)
    weights = torch.nan_to_num(weights)  # a row that sees no key: all -inf gave NaN; the contract says zeros
    return (weights @ v_).to(q.dtype)
