"""Numerical stability of softmax attention on the sampled query rows, in the point's own dtype.

These are what the scaling-stability figures plot against d_k, with and without 1/sqrt(d_k):
unscaled logits have std ~ sqrt(d_k) * input_std^2, softmax saturates to one-hot (max weight
-> 1, entropy -> 0) and the gradient through softmax vanishes; in fp16 the logits overflow.

What is computed, and how: the textbook steps, in the point's dtype, on the sampled rows only
(logits = (q_rows K^T) * scale, the bottom-right causal mask, softmax, P V), so the cost is
O(rows x seq_len) at any n. They are a property of the math at that precision, not of a
back end's kernel: fused back ends never expose their weights. Gradients are those of the fixed
loss sum(out_rows * upstream_rows) (seeded random upstream) w.r.t. q_rows and K, by autograd.
A back end's own numerics (overflow in its output) show in `nonfinite_frac` instead.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from selfattn.reference import causal_keep_mask

SATURATED_WEIGHT = 0.99  # a row whose largest weight exceeds this is one-hot for practical purposes


@dataclass(frozen=True)
class Stability:
    logit_std: float | None
    softmax_entropy: float | None  # mean over rows of entropy / log(keys seen); rows seeing 1 key skipped
    max_weight: float | None  # mean over rows of the largest weight
    saturated_frac: float | None  # rows whose largest weight exceeds SATURATED_WEIGHT
    grad_norm_q: float | None
    grad_norm_k: float | None
    grad_nonfinite_frac: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def stability(
    q_rows_BHrD: torch.Tensor,
    k_BHLD: torch.Tensor,
    v_BHLD: torch.Tensor,
    rows: torch.Tensor,
    *,
    q_len: int,
    causal: bool,
    scale: float,
    upstream_BHrD: torch.Tensor,
) -> Stability:
    """Stability metrics for the query rows `rows` (indices into the full q_len) of one point."""
    seq_len = k_BHLD.shape[2]
    q = q_rows_BHrD.detach().clone().requires_grad_(True)
    k = k_BHLD.detach().clone().requires_grad_(True)
    v = v_BHLD.detach()
    with torch.enable_grad():
        logits_BHrL = (q @ k.transpose(-1, -2)) * scale
        keys_seen_r = torch.full((len(rows),), seq_len, dtype=torch.long)
        if causal:
            keep_rL = causal_keep_mask(q_len, seq_len, device=q.device, rows=rows.to(q.device))
            logits_BHrL = logits_BHrL.masked_fill(~keep_rL, float("-inf"))
            keys_seen_r = keep_rL.sum(dim=-1).cpu()
        weights_BHrL = torch.softmax(logits_BHrL, dim=-1)
        out_BHrD = weights_BHrL @ v
        loss = (out_BHrD * upstream_BHrD).sum()
        grad_q, grad_k = torch.autograd.grad(loss, (q, k))

    with torch.no_grad():
        logits = logits_BHrL.detach().to(torch.float64)
        visible = torch.isfinite(logits) if not causal else keep_rL.expand_as(logits) & torch.isfinite(logits)
        # std of the logits softmax actually sees: masked entries excluded, overflowed ones too
        # (their share shows in nonfinite_frac of the output)
        logit_std = logits[visible].std().item() if int(visible.sum()) > 1 else math.nan

        w = weights_BHrL.detach().to(torch.float64)
        row_ok = torch.isfinite(w).all(dim=-1)  # rows where softmax produced NaN are left out
        plogp = torch.where(w > 0, w * w.clamp_min(1e-300).log(), torch.zeros_like(w))
        entropy = -plogp.sum(dim=-1)
        seen = keys_seen_r.to(torch.float64).to(w.device).expand_as(entropy)
        normalizable = row_ok & (seen > 1)
        norm_entropy = (entropy[normalizable] / seen[normalizable].log()).mean().item() if bool(normalizable.any()) else math.nan
        max_w = w.amax(dim=-1)[row_ok]
        max_weight = max_w.mean().item() if max_w.numel() else math.nan
        saturated = (max_w > SATURATED_WEIGHT).double().mean().item() if max_w.numel() else math.nan

        grads = torch.cat([grad_q.reshape(-1), grad_k.reshape(-1)]).to(torch.float64)
        finite = torch.isfinite(grads)
        grad_nonfinite = 1.0 - finite.double().mean().item()
        gq = grad_q.to(torch.float64)
        gk = grad_k.to(torch.float64)
        norm_q = gq[torch.isfinite(gq)].norm().item() if grad_nonfinite < 1 else math.nan
        norm_k = gk[torch.isfinite(gk)].norm().item() if grad_nonfinite < 1 else math.nan
    return Stability(
        logit_std=_finite_or_none(logit_std),
        softmax_entropy=_finite_or_none(norm_entropy),
        max_weight=_finite_or_none(max_weight),
        saturated_frac=_finite_or_none(saturated),
        grad_norm_q=_finite_or_none(norm_q),
        grad_norm_k=_finite_or_none(norm_k),
        grad_nonfinite_frac=grad_nonfinite,
    )
