"""The one attention layer (selfattn/layer.py): grouped-query K/V heads, checked against float64."""

import pytest
import torch

from selfattn.inputs import make_x
from selfattn.layer import MultiHeadSelfAttention
from selfattn.measure import Budget, measure_point
from selfattn.point import Point
from selfattn.reference import attention_reference

QUICK = Budget(timing_s=0.05, accuracy_rows=16, measure_device_peak=False)


def _reference(layer: MultiHeadSelfAttention, x_BLD: torch.Tensor, causal: bool) -> torch.Tensor:
    """The layer's math written out in float64 from its weights: per-head Q, shared K/V heads, W_O."""
    w_q, w_k, w_v, w_o = (w.weight.detach().double() for w in (layer.w_q, layer.w_k, layer.w_v, layer.w_o))
    x = x_BLD.double()
    b, length, _ = x.shape

    def heads(t: torch.Tensor, n: int) -> torch.Tensor:
        return t.reshape(b, length, n, layer.head_dim).transpose(1, 2)

    q, k, v = heads(x @ w_q.T, layer.heads), heads(x @ w_k.T, layer.kv_heads), heads(x @ w_v.T, layer.kv_heads)
    out = attention_reference(q, k, v, causal=causal)  # query head h reads K/V head h // (heads / kv_heads)
    return out.transpose(1, 2).reshape(b, length, layer.d_model) @ w_o.T


@pytest.mark.parametrize("backend", ["naive", "sdpa", "chunked"])
@pytest.mark.parametrize("kv_heads", [4, 2, 1], ids=["mha", "gqa2", "mqa"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_layer_with_fewer_kv_heads_matches_the_float64_reference(backend, kv_heads, causal):
    layer = MultiHeadSelfAttention(64, 4, kv_heads=kv_heads, backend=backend, causal=causal)
    layer.reset_parameters(seed=2)
    assert layer.w_k.weight.shape == layer.w_v.weight.shape == (kv_heads * 16, 64)
    x = make_x(2, 37, 64, seed=1)
    with torch.no_grad():
        out = layer(x)
    torch.testing.assert_close(out.double(), _reference(layer, x, causal), rtol=0, atol=2e-5)


def test_kv_heads_must_divide_heads():
    with pytest.raises(ValueError, match="^kv_heads: must divide heads=4, got 3"):
        MultiHeadSelfAttention(64, 4, kv_heads=3)
    with pytest.raises(ValueError, match="^kv_heads: expected an integer >= 1"):
        MultiHeadSelfAttention(64, 4, kv_heads=0)


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
def test_layer_points_with_fewer_kv_heads_match_the_float64_reference(mode):
    """scope=layer accepts kv_heads < heads; in float64 the measured layer and the sampled-row
    reference do the same math, outputs and gradients."""
    point = Point(scope="layer", heads=4, kv_heads=2, head_dim=8, seq_len=40, batch=2, causal=True, mode=mode,
                  precision="fp64", seed=3)
    point.validate()
    row = measure_point(point, QUICK)
    assert row.status == "ok", row.error
    assert row.kv_heads == 2 and row.rel_rms_err < 1e-12
    if mode == "fwd_bwd":
        assert row.grad_rel_rms_err < 1e-12
    fp32 = measure_point(Point(scope="layer", heads=4, kv_heads=1, head_dim=8, seq_len=40, backend="sdpa"), QUICK)
    assert fp32.status == "ok", fp32.error
    assert fp32.rel_rms_err < 1e-5 and 0 < fp32.softmax_entropy <= 1


def test_layer_points_still_refuse_masks_beyond_causal():
    with pytest.raises(ValueError, match="^window: scope=layer supports the causal mask only"):
        Point(scope="layer", window=8).validate()
