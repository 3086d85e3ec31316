"""bytes_moved and the kv_cache_bytes column (Point.kv_bytes): the least traffic of a call, GQA dividing K/V."""

import pytest

from selfattn.measure.traffic import bytes_moved
from selfattn.point import Point


def test_decode_step_reads_the_cache_once_per_kv_head():
    mha = Point(batch=2, heads=8, q_len=1, seq_len=1000, head_dim=64, precision="fp16")
    gqa = Point(batch=2, heads=8, kv_heads=2, q_len=1, seq_len=1000, head_dim=64, precision="fp16")
    assert mha.kv_bytes == 2 * 2 * 8 * 1000 * 64 * 2
    assert mha.kv_bytes == 4 * gqa.kv_bytes
    q_and_out = 2 * 2 * 8 * 1 * 64 * 2
    assert bytes_moved(mha) == mha.kv_bytes + q_and_out
    assert bytes_moved(gqa) == gqa.kv_bytes + q_and_out


def test_backward_adds_the_upstream_and_every_gradient():
    fwd = Point(batch=1, heads=4, seq_len=256, head_dim=32)
    bwd = Point(batch=1, heads=4, seq_len=256, head_dim=32, mode="fwd_bwd")
    tensor = 1 * 4 * 256 * 32 * 4  # one of Q, K, V, O in fp32
    assert bytes_moved(fwd) == 4 * tensor
    assert bytes_moved(bwd) == 4 * tensor + 4 * tensor  # dO read; dQ, dK, dV written


@pytest.mark.parametrize("kv_heads", [2, 1])
def test_layer_counts_activations_and_weights(kv_heads):
    point = Point(scope="layer", batch=1, heads=2, kv_heads=kv_heads, head_dim=8, seq_len=10, causal=True)
    d, kv_width = 16, kv_heads * 8  # W_Q, W_O: d x d; W_K, W_V: d x kv_heads*D
    assert bytes_moved(point) == (2 * 10 * d + 2 * d * d + 2 * d * kv_width) * 4
