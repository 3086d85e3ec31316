"""Path length (selfattn/measure/path_length.py) against independent float64 Jacobians."""

from __future__ import annotations

import math

import pytest
import torch
from torch.autograd.functional import jacobian

import selfattn.measure.path_length as pl
from selfattn import Point
from selfattn.inputs import randn
from selfattn.layer import MultiHeadSelfAttention
from selfattn.recurrent import Recurrent
from selfattn.backends.resolved import resolve_point


def _sensitivity(point: Point) -> list[tuple[int, float]]:
    """input_sensitivity on the CPU with the point's back end resolved once, as measure_point does."""
    return pl.input_sensitivity(point, "cpu", resolve_point(point, "cpu"))


@pytest.mark.parametrize("n, expected", [(1, [0]), (2, [0, 1]), (3, [0, 1, 2]), (9, [0, 1, 2, 4, 8]),
                                         (10, [0, 1, 2, 4, 8, 9]), (64, [0, 1, 2, 4, 8, 16, 32, 63])])
def test_distances_are_powers_of_two_and_the_farthest(n, expected):
    assert pl.path_distances(n) == expected


@pytest.mark.parametrize("kv_heads, causal", [(4, False), (2, True), (1, False)])
def test_the_last_query_alone_is_the_layers_last_output(kv_heads, causal):
    layer = MultiHeadSelfAttention(32, 4, kv_heads=kv_heads, causal=causal).double()
    x = torch.randn(3, 17, 32, dtype=torch.float64)
    with torch.no_grad():
        assert torch.allclose(pl.last_query_output(layer, x, None), layer(x)[:, -1], atol=1e-13, rtol=0)
        assert torch.allclose(pl.last_query_output(layer, x, 1.0), MultiHeadSelfAttention(
            32, 4, kv_heads=kv_heads, causal=causal, scale=1.0).double()(x)[:, -1], atol=1e-12, rtol=0)


def _jacobian_norms(point: Point, full_output) -> list[tuple[int, float]]:
    """The same draws and directions as the measurement; each draw's whole Jacobian of the full forward."""
    n, d, draws = point.seq_len, point.d_model, pl.path_draws(point.scope)
    seed = point.seed + pl.PATH_SEED_OFFSET
    x = randn((draws, n, d), dtype=torch.float64, device="cpu", std=point.input_std, seed=seed)
    u = randn((draws, d), dtype=torch.float64, device="cpu", seed=seed + 1)
    u = u / u.norm(dim=-1, keepdim=True)
    sums = [0.0] * len(pl.path_distances(n))
    for i in range(draws):
        j = jacobian(lambda x1: full_output(x1[None])[0, -1], x[i])  # (d, n, d): d y_{n-1} / d x
        g = torch.einsum("e,etm->tm", u[i], j)
        for slot, k in enumerate(pl.path_distances(n)):
            sums[slot] += float(g[n - 1 - k].norm()) / draws
    return list(zip(pl.path_distances(n), sums))


@pytest.mark.parametrize("scope", ["layer", "lstm", "gru"])
def test_sensitivity_is_the_jacobians_against_an_independent_float64_computation(scope):
    point = Point(scope=scope, seq_len=12, heads=2, head_dim=4, seed=1, input_std=0.5)
    if scope == "layer":
        layer = MultiHeadSelfAttention(8, 2)
        layer.reset_parameters(seed=1)
        full = layer.double()  # the layer's own forward, every query projected (not last_query_output)
    else:
        full = Recurrent(scope, 8, seed=1).double()
    measured = _sensitivity(point)
    expected = _jacobian_norms(point, full)
    assert [k for k, _ in measured] == [k for k, _ in expected]
    for (k, got), (_, want) in zip(measured, expected):
        assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-300), (k, got, want)


def test_the_ratio_needs_three_tokens_and_reads_far_over_near():
    assert pl.far_near_ratio([(0, 1.0)]) is None and pl.far_near_ratio([(0, 1.0), (1, 0.5)]) is None
    assert pl.far_near_ratio([(0, 1.0), (1, 0.5), (2, 0.25), (3, 0.1)]) == pytest.approx(0.2)
    assert pl.far_near_ratio([(0, 1.0), (1, 0.0), (2, 0.0)]) is None


def test_the_norm_does_not_underflow_where_the_gradient_does_not():
    t = torch.tensor([[3e-200, -4e-200], [0.0, 0.0], [3.0, 4.0]], dtype=torch.float64)
    assert t[0].norm() == 0  # the naive norm squares 1e-200 to below float64's range
    assert torch.allclose(pl.scaled_norm(t), torch.tensor([5e-200, 0.0, 5.0], dtype=torch.float64), rtol=1e-15, atol=0)


def test_the_column_is_json_pairs():
    assert pl.sensitivity_json([(0, 1.5), (1, float("nan"))]) == "[[0, 1.5], [1, null]]"


def test_an_rnns_sensitivity_decays_and_attentions_does_not():
    rnn = _sensitivity(Point(scope="lstm", seq_len=64, heads=2, head_dim=16))
    layer = _sensitivity(Point(scope="layer", seq_len=64, heads=2, head_dim=16))
    assert pl.far_near_ratio(rnn) < 1e-6 < 0.25 < pl.far_near_ratio(layer) < 4


def test_another_scope_is_refused_naming_it():
    with pytest.raises(ValueError, match="^scope: the path-length measurement needs one of layer, lstm, gru"):
        _sensitivity(Point(scope="core"))
