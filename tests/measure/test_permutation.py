"""Permutation equivariance, measured per back end: exact up to rounding without a mask, broken by a causal one."""

import pytest
import torch

from selfattn import Point
from selfattn.measure.permutation import permutation_max_abs_diff


@pytest.mark.parametrize("backend", ["naive", "sdpa", "chunked"])
def test_without_a_mask_permuting_tokens_permutes_outputs(backend):
    point = Point(backend=backend, seq_len=4096, heads=2, head_dim=32, device="cpu")  # checked on 128 tokens
    assert permutation_max_abs_diff(point, torch.float32, "cpu") < 1e-5


@pytest.mark.parametrize("backend", ["naive", "sdpa"])
def test_a_causal_mask_breaks_it(backend):
    point = Point(backend=backend, seq_len=256, heads=2, head_dim=32, causal=True, device="cpu")
    assert permutation_max_abs_diff(point, torch.float32, "cpu") > 0.1
