"""The kernel column says which SDPA kernel `auto` really ran, so two devices' rows compare like for like."""

from __future__ import annotations

import pytest
import torch

import selfattn
from selfattn.backends import sdpa
from selfattn.masks import Masks
from selfattn.measure import Budget, measure_point
from selfattn.point import Point

BUDGET = Budget(timing_s=0.02, accuracy_rows=8, measure_device_peak=False)


def test_auto_rows_name_the_kernel_torch_chose():
    row = measure_point(Point(backend="sdpa", device="cpu", seq_len=128, heads=2), BUDGET)
    q, k, v = selfattn.make_qkv(1, 2, 128, 128, 64)
    chosen = torch._fused_sdp_choice(q, k, v)
    assert row.status == "ok" and row.kernel == f"auto:{sdpa._CHOICES[int(chosen)]}"


def test_forced_and_other_back_ends_keep_their_label():
    forced = measure_point(Point(backend="sdpa", backend_options={"kernel": "math"}, device="cpu", seq_len=64, heads=2),
                           BUDGET)
    naive = measure_point(Point(backend="naive", device="cpu", seq_len=64, heads=2), BUDGET)
    assert (forced.kernel, naive.kernel) == ("math", "materialized")


@pytest.mark.parametrize("masks", [Masks(), Masks(causal=True), Masks(window=8), Masks(causal=True, window=8)],
                         ids=["none", "causal", "window", "causal-window"])
def test_kernel_ran_is_torchs_dispatch_choice_for_the_same_arguments(masks):
    q, k, v = selfattn.make_qkv(1, 4, 24, 40, 16, kv_heads=2)
    name = sdpa.kernel_ran(q, k, v, masks=masks, scale=0.25)
    mask, is_causal, _ = sdpa._mask_arguments(q, k, masks)
    if mask is not None and not isinstance(mask, torch.Tensor):  # CausalBias: materialized on a CPU
        mask = masks.keep(24, 40)[:, None]
    expected = torch._fused_sdp_choice(q, k, v, attn_mask=mask, is_causal=is_causal, scale=0.25, enable_gqa=True)
    assert name == sdpa._CHOICES[int(expected)] and name in ("math", "flash", "efficient", "cudnn")
