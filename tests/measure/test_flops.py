"""The FLOP convention: checked by brute force and against torch's own FLOP counter."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from selfattn import Point
from selfattn.api import attention
from selfattn.inputs import make_qkv, make_x
from selfattn.layer import MultiHeadSelfAttention
from selfattn.measure import point_flops, unmasked_pairs


@pytest.mark.parametrize("q_len", [1, 2, 5, 8])
@pytest.mark.parametrize("seq_len", [1, 3, 8, 13])
def test_causal_pairs_match_brute_force(q_len, seq_len):
    brute = sum(1 for i in range(q_len) for j in range(seq_len) if j <= i + seq_len - q_len)
    assert unmasked_pairs(q_len, seq_len, causal=True) == brute
    assert unmasked_pairs(q_len, seq_len, causal=False) == q_len * seq_len


@pytest.mark.parametrize("n", [1, 2, 7, 1024, 65536])
def test_causal_square_is_n_times_n_plus_one_over_two(n):
    # Row i of a square causal mask sees keys 0..i, i.e. i + 1 of them: 1 + 2 + ... + n.
    assert unmasked_pairs(n, n, causal=True) == n * (n + 1) // 2


def test_decode_step_sees_every_key():
    assert unmasked_pairs(1, 4096, causal=True) == 4096


def _counted(fn) -> int:
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize("q_len,seq_len", [(64, 64), (17, 96)], ids=["square", "rect"])
def test_forward_formula_matches_flop_counter(q_len, seq_len):
    q, k, v = make_qkv(2, 3, q_len, seq_len, 16, dtype=torch.float32)
    counted = _counted(lambda: attention(q, k, v, backend="naive"))
    point = Point(backend="naive", batch=2, heads=3, q_len=q_len, seq_len=seq_len, head_dim=16)
    assert point_flops(point) == counted == 4 * 2 * 3 * 16 * q_len * seq_len


def test_backward_counter_is_3x_forward_and_convention_is_3_5x():
    # torch counts the four backward matmuls (dV, dP, dQ, dK): 2x forward, 3x in total. The
    # FlashAttention convention we report adds the recomputation of S: 3.5x forward.
    q, k, v = make_qkv(1, 2, 32, 32, 8, dtype=torch.float32, requires_grad=True)
    upstream = torch.randn(1, 2, 32, 8)

    def fwd_bwd():
        torch.autograd.grad(attention(q, k, v, backend="naive"), (q, k, v), upstream)

    forward = _counted(lambda: attention(q, k, v, backend="naive"))
    assert forward == point_flops(Point(batch=1, heads=2, seq_len=32, head_dim=8)) == 4 * 2 * 8 * 32 * 32
    assert _counted(fwd_bwd) == 3 * forward
    assert point_flops(Point(batch=1, heads=2, seq_len=32, head_dim=8, mode="fwd_bwd")) == 3.5 * forward


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_layer_adds_four_projections(kv_heads):
    layer = MultiHeadSelfAttention(32, 4, kv_heads=kv_heads, backend="naive")
    x = make_x(2, 24, 32)
    with torch.no_grad():
        counted = _counted(lambda: layer(x))
    point = Point(backend="naive", batch=2, heads=4, kv_heads=kv_heads, seq_len=24, head_dim=8, scope="layer")
    # W_Q and W_O are 32 x 32; W_K and W_V 32 x kv_heads*8 (GQA shrinks them, not the core's work)
    projections = 2 * 2 * 24 * (2 * 32 * 32 + 2 * 32 * kv_heads * 8)
    assert point_flops(point) == counted == 4 * 2 * 4 * 8 * 24 * 24 + projections


def test_causal_flops_count_only_unmasked_pairs():
    full = point_flops(Point(seq_len=1000, causal=False))
    causal = point_flops(Point(seq_len=1000, causal=True))
    assert causal == full * (1000 * 1001 / 2) / 1000**2


@pytest.mark.parametrize("window, causal, q_len", [
    ((63, 0), False, None), ((10, 5), False, None), ((10, 5), True, None), ((-1, 3), False, None),
    ((4, -1), False, None), ((0, 0), False, None), ((7, 2), False, 5), ((7, 2), True, 1)])
def test_a_window_pair_counts_only_the_pairs_it_keeps(window, causal, q_len):
    # query p (bottom-right aligned) sees p - left <= j <= p + right, -1 unbounded; causal caps right at 0
    seq_len, heads, head_dim = 50, 2, 8
    q = seq_len if q_len is None else q_len
    left = seq_len if window[0] == -1 else window[0]
    right = seq_len if window[1] == -1 else window[1]
    right = min(right, 0) if causal else right
    brute = sum(1 for i in range(q) for j in range(seq_len)
                if (p := i + seq_len - q) - left <= j <= p + right)
    point = Point(seq_len=seq_len, q_len=q_len, heads=heads, head_dim=head_dim, window=window, causal=causal)
    assert point_flops(point) == 4 * heads * head_dim * brute
    # the one-width form keeps its meaning: w is [w - 1, w - 1], or [w - 1, 0] with causal
    assert point_flops(Point(seq_len=seq_len, window=8, causal=True)) == point_flops(
        Point(seq_len=seq_len, window=(7, 0)))
