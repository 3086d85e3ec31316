"""grad_norm_logits: the gradient at softmax's input, median row; it is what vanishes when softmax saturates."""

import math

import pytest
import torch

from selfattn.masks import Masks
from selfattn.measure.stability import stability

SEQ_LEN, ROWS, HEADS = 256, 128, 2


def _inputs(head_dim: int, seed: int = 0, dtype: torch.dtype = torch.float32):
    generator = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype)

    rows = torch.arange(SEQ_LEN - ROWS, SEQ_LEN)  # the last rows: every key visible even when causal
    k, v = randn(1, HEADS, SEQ_LEN, head_dim), randn(1, HEADS, SEQ_LEN, head_dim)
    return randn(1, HEADS, ROWS, head_dim), k, v, rows, randn(1, HEADS, ROWS, head_dim)


def _measure(head_dim: int, scale: str, causal: bool = False, dtype: torch.dtype = torch.float32):
    q, k, v, rows, upstream = _inputs(head_dim, dtype=dtype)
    factor = 1.0 / math.sqrt(head_dim) if scale == "auto" else 1.0
    return stability(q, k, v, rows, q_len=SEQ_LEN, masks=Masks(causal=causal), scale=factor, upstream_BHrD=upstream)


def test_matches_the_softmax_jacobian_row_by_row():
    # dL/dlogits = w * (g - <w, g>) with g = dL/dw = upstream @ V^T: the closed form, in float64.
    q, k, v, rows, upstream = (t.to(torch.float64) if t.is_floating_point() else t for t in _inputs(64))
    w = torch.softmax(q @ k.transpose(-1, -2) / 8.0, dim=-1)
    g = upstream @ v.transpose(-1, -2)
    expected = (w * (g - (w * g).sum(-1, keepdim=True))).norm(dim=-1).flatten().quantile(0.5)
    measured = stability(q, k, v, rows, q_len=SEQ_LEN, masks=Masks(), scale=1 / 8.0, upstream_BHrD=upstream)
    assert measured.grad_norm_logits == pytest.approx(expected.item(), rel=1e-9)


@pytest.mark.parametrize("causal", [False, True])
def test_unscaled_row_gradient_vanishes_at_large_dk_only(causal):
    big_scaled, big_unscaled = _measure(1024, "auto", causal), _measure(1024, "none", causal)
    small_scaled, small_unscaled = _measure(16, "auto", causal), _measure(16, "none", causal)
    # Saturated unscaled rows (max weight ~1) pass almost no gradient back to their logits...
    assert big_unscaled.grad_norm_logits < 0.1 * big_scaled.grad_norm_logits
    # ...while at d_k=16 unscaled logits (std 4) are not saturated, and their gradient is not smaller.
    assert small_unscaled.grad_norm_logits >= small_scaled.grad_norm_logits
    # The Frobenius norm w.r.t. Q cannot show this: it carries sqrt(d_k) unscaled and is
    # dominated by the few rows that did not saturate, so it grows instead.
    assert big_unscaled.grad_norm_q > big_scaled.grad_norm_q


def test_fp16_overflowed_rows_are_left_out_and_all_nonfinite_is_none():
    q, k, v, rows, upstream = _inputs(64, dtype=torch.float16)
    # Head 0 only: logit std 1e4 * 8, many logits pass 65504, softmax gives NaN rows, their
    # gradients too. Head 1 stays finite, and the medians must be head 1's alone.
    big_q = q.clone()
    big_q[:, 0] *= 10_000
    mixed = stability(big_q, k, v, rows, q_len=SEQ_LEN, masks=Masks(), scale=1.0, upstream_BHrD=upstream)
    head1 = stability(q[:, 1:], k[:, 1:], v[:, 1:], rows, q_len=SEQ_LEN, masks=Masks(), scale=1.0,
                      upstream_BHrD=upstream[:, 1:])
    assert head1.grad_nonfinite_frac == 0.0 and head1.grad_norm_logits is not None
    assert mixed.grad_nonfinite_frac == 0.5  # head 0's dq and dk, half of all gradient entries
    assert mixed.grad_norm_logits == pytest.approx(head1.grad_norm_logits, rel=1e-12)
    assert mixed.max_weight == pytest.approx(head1.max_weight, rel=1e-12)
    # Every row overflowed: no median to report, and every gradient entry is non-finite
    overflowed = stability(q * 100, k * 100, v, rows, q_len=SEQ_LEN, masks=Masks(), scale=1.0, upstream_BHrD=upstream)
    assert overflowed.grad_norm_logits is None and overflowed.grad_nonfinite_frac == 1.0
    nan_q = torch.full_like(q, float("nan"))
    broken = stability(nan_q, k, v, rows, q_len=SEQ_LEN, masks=Masks(), scale=0.125, upstream_BHrD=upstream)
    assert broken.grad_norm_logits is None
