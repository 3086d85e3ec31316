"""naive: the chapter's steps literally, materializing the (q_len x seq_len) matrix per head.

scores = Q K^T, multiply by the scale, add the -inf causal mask, softmax, A V, all in the
input dtype (so fp16 logits can overflow exactly as the chapter warns). `upcast_softmax=True`
runs the softmax of fp16/bf16 scores in float32 (a no-op for fp32/fp64), the usual fix, so
an ablation can show both. (torch's CPU softmax already accumulates bf16/fp16 in float32
internally, so on a CPU the two differ only by the final rounding.)
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from selfattn.reference import causal_keep_mask
from selfattn.validate import check_bool

NAME = "naive"
OPTIONS: dict[str, Any] = {"upcast_softmax": False}


def available(device: torch.device | str) -> bool:
    return True  # plain matmul and softmax run everywhere


def resolve_options(options: Mapping[str, Any], device: torch.device | str, dtype: torch.dtype) -> dict[str, Any]:
    resolved = {**OPTIONS, **options}
    check_bool("upcast_softmax", resolved["upcast_softmax"])
    return resolved


def kernel_label(options: Mapping[str, Any]) -> str:
    return "materialized-upcast" if options.get("upcast_softmax", False) else "materialized"


def attention(
    q_BHMD: torch.Tensor,
    k_BHND: torch.Tensor,
    v_BHND: torch.Tensor,
    *,
    causal: bool,
    scale: float,
    upcast_softmax: bool = False,
) -> torch.Tensor:
    q_len, seq_len = q_BHMD.shape[2], k_BHND.shape[2]
    scores_BHMN = q_BHMD @ k_BHND.transpose(-1, -2)  # step 1: Q K^T, (q_len x seq_len) per head
    scores_BHMN = scores_BHMN * scale  # step 2: scale
    if causal:  # step 3: add -inf where the key lies in the query's future
        keep_MN = causal_keep_mask(q_len, seq_len, device=q_BHMD.device)
        mask_MN = torch.zeros(q_len, seq_len, dtype=scores_BHMN.dtype, device=q_BHMD.device)
        scores_BHMN = scores_BHMN + mask_MN.masked_fill_(~keep_MN, float("-inf"))
    if upcast_softmax and scores_BHMN.dtype in (torch.float16, torch.bfloat16):  # step 4: softmax over keys
        weights_BHMN = torch.softmax(scores_BHMN.float(), dim=-1).to(q_BHMD.dtype)
    else:
        weights_BHMN = torch.softmax(scores_BHMN, dim=-1)
    return weights_BHMN @ v_BHND  # step 5: A V
