"""Numerical stability of softmax attention on the sampled query rows, in the point's own dtype.

These are what the scaling-stability figures plot against d_k, with and without 1/sqrt(d_k):
unscaled logits have std ~ sqrt(d_k) * input_std^2, softmax saturates to one-hot (max weight
-> 1, entropy -> 0) and the gradient through softmax vanishes; in fp16 the logits overflow.

What is computed, and how: the textbook steps, in the point's dtype, on the sampled rows only
(logits = (q_rows K^T) * scale, the bottom-right causal mask, softmax, P V), so the cost is
O(rows x seq_len) at any n. They are a property of the math at that precision, not of a
back end's kernel: fused back ends never expose their weights. Gradients are those of the fixed
loss sum(out_rows * upstream_rows) (seeded random upstream) w.r.t. q_rows, K and the logits, by
autograd. A back end's own numerics (overflow in its output) show in `nonfinite_frac` instead.

Which gradient witnesses "the gradient vanishes": `grad_norm_logits`, the median over sampled
(batch, head, row) of the row's L2 norm of dloss/dlogits, the gradient at the softmax's input.
For a row, dL/dlogits = w * (g - <w, g>) with g = dL/dw: it goes to 0 as w turns one-hot, and
that is the chapter's mechanism. `grad_norm_q` is a poor witness of it for two reasons:
dL/dQ = dL/dlogits @ K * scale carries the scale, so unscaled it is sqrt(d_k) times larger
before any saturation; and a Frobenius norm over all rows is dominated by the few rows that did
not saturate, while the median per-row norm reports the typical row.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from selfattn.masks import Masks, no_empty_rows

SATURATED_WEIGHT = 0.99  # a row whose largest weight exceeds this is one-hot for practical purposes


@dataclass(frozen=True)
class Stability:
    logit_std: float | None
    softmax_entropy: float | None  # mean over rows of entropy / log(keys seen); rows seeing 1 key skipped
    max_weight: float | None  # mean over rows of the largest weight
    saturated_frac: float | None  # rows whose largest weight exceeds SATURATED_WEIGHT
    grad_norm_q: float | None
    grad_norm_k: float | None
    grad_norm_logits: float | None  # median over (batch, head, row) of ||dloss/dlogits_row||; see module doc
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
    masks: Masks,
    scale: float,
    upstream_BHrD: torch.Tensor,
) -> Stability:
    """Stability metrics for the query rows `rows` (indices into the full q_len) of one point.

    K and V may have fewer heads than the queries (grouped-query attention). Rows that see no
    key (padding, windows) have no softmax to describe: they are left out of every metric.
    """
    seq_len = k_BHLD.shape[2]
    group = q_rows_BHrD.shape[1] // k_BHLD.shape[1]
    q = q_rows_BHrD.detach().requires_grad_(True)  # new leaves sharing storage: no copies
    k = k_BHLD.detach().requires_grad_(True)
    v = v_BHLD.detach()
    masked = masks.causal or not masks.only_causal
    with torch.enable_grad():
        k_heads = k.repeat_interleave(group, dim=1) if group > 1 else k
        v_heads = v.repeat_interleave(group, dim=1) if group > 1 else v
        logits_BHrL = (q @ k_heads.transpose(-1, -2)) * scale
        keys_seen_r = torch.full((1, 1, len(rows)), seq_len, dtype=torch.long)
        sees_r1 = None
        if masked:
            keep_rL, sees_r1 = no_empty_rows(masks.keep_heads(q_len, seq_len, batch=q.shape[0], heads=q.shape[1],
                                                                 rows=rows.to(q.device), device=q.device))
            logits_BHrL = logits_BHrL.masked_fill(~keep_rL, float("-inf"))
            keys_seen_r = (keep_rL & sees_r1).sum(dim=-1).cpu()
        weights_BHrL = torch.softmax(logits_BHrL, dim=-1)
        out_BHrD = weights_BHrL @ v_heads
        if sees_r1 is not None:
            out_BHrD = out_BHrD * sees_r1
        loss = (out_BHrD * upstream_BHrD).sum()
        # logits_BHrL is softmax's input (scaled, masked): its gradient is 0 at masked keys
        grad_q, grad_k, grad_logits = torch.autograd.grad(loss, (q, k, logits_BHrL))

    with torch.no_grad():
        # Statistics in float32 (float64 for fp64 points): exact enough for a mean over many
        # entries, and half the cost of float64 on B*H*rows*seq_len elements.
        stat_dtype = torch.float64 if logits_BHrL.dtype == torch.float64 else torch.float32
        logits = logits_BHrL.detach().to(stat_dtype)
        visible = torch.isfinite(logits)
        if sees_r1 is not None:  # masked
            visible &= keep_rL & sees_r1
        # std of the logits softmax actually sees: masked entries excluded, overflowed ones too
        # (their share shows in nonfinite_frac of the output)
        seen_logits = (logits if bool(visible.all()) else logits[visible]).to(torch.float64)
        logit_std = seen_logits.std().item() if seen_logits.numel() > 1 else math.nan

        w = weights_BHrL.detach().to(stat_dtype)
        row_ok = torch.isfinite(w).all(dim=-1)  # rows where softmax produced NaN are left out
        if sees_r1 is not None:
            row_ok &= sees_r1.squeeze(-1)  # and rows that see no key
        entropy = torch.special.entr(w).sum(dim=-1, dtype=torch.float64)  # -sum w log w, 0 log 0 = 0
        seen = keys_seen_r.to(device=w.device, dtype=torch.float64).expand_as(entropy)
        normalizable = row_ok & (seen > 1)
        norm_entropy = (entropy[normalizable] / seen[normalizable].log()).mean().item() if bool(normalizable.any()) else math.nan
        max_w = w.amax(dim=-1)[row_ok].to(torch.float64)
        max_weight = max_w.mean().item() if max_w.numel() else math.nan
        saturated = (max_w > SATURATED_WEIGHT).double().mean().item() if max_w.numel() else math.nan

        gq, gk = grad_q.to(torch.float64), grad_k.to(torch.float64)
        finite_q, finite_k = torch.isfinite(gq), torch.isfinite(gk)
        grad_nonfinite = 1.0 - (finite_q.sum().item() + finite_k.sum().item()) / (gq.numel() + gk.numel())
        norm_q = gq[finite_q].norm().item() if bool(finite_q.any()) else math.nan
        norm_k = gk[finite_k].norm().item() if bool(finite_k.any()) else math.nan
        # Per-row norms, then the median: the typical row, not the few unsaturated rows that
        # dominate a norm over all rows. Rows with a non-finite entry are left out (overflow
        # shows in nonfinite_frac and grad_nonfinite_frac).
        row_norms = grad_logits.to(torch.float64).norm(dim=-1)
        if sees_r1 is not None:
            row_norms = row_norms[sees_r1.squeeze(-1).expand_as(row_norms)]
        row_norms = row_norms.flatten()
        row_norms = row_norms[torch.isfinite(row_norms)]
        norm_logits = row_norms.quantile(0.5).item() if row_norms.numel() else math.nan
    return Stability(
        logit_std=_finite_or_none(logit_std),
        softmax_entropy=_finite_or_none(norm_entropy),
        max_weight=_finite_or_none(max_weight),
        saturated_frac=_finite_or_none(saturated),
        grad_norm_q=_finite_or_none(norm_q),
        grad_norm_k=_finite_or_none(norm_k),
        grad_norm_logits=_finite_or_none(norm_logits),
        grad_nonfinite_frac=grad_nonfinite,
    )
