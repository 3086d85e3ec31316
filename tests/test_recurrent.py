"""The recurrent baselines (selfattn/recurrent.py): the module against a hand-written float64 recurrence,
its FLOP count against torch's counter on that recurrence, its seeded weights, and the axes it refuses."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from selfattn import Point
from selfattn.measure import Budget, measure_point, point_flops
from tests.predicted import predicted_mem_bytes
from selfattn.measure.traffic import bytes_moved
from selfattn.recurrent import Recurrent


def cell_loop(kind: str, x_BLD: torch.Tensor, w_ih, w_hh, b_ih, b_hh) -> torch.Tensor:
    """The recurrence written out step by step (PyTorch's documented equations), every step's h."""
    b, length, d = x_BLD.shape
    h = x_BLD.new_zeros(b, d)
    c = x_BLD.new_zeros(b, d)
    out = []
    for t in range(length):
        gi, gh = F.linear(x_BLD[:, t], w_ih, b_ih), F.linear(h, w_hh, b_hh)
        if kind == "lstm":  # gates i, f, g, o
            i, f, g, o = (gi + gh).chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        else:  # gates r, z, n; the reset gate multiplies W_hn h + b_hn
            ir, iz, in_ = gi.chunk(3, dim=-1)
            hr, hz, hn = gh.chunk(3, dim=-1)
            r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
            h = (1 - z) * torch.tanh(in_ + r * hn) + z * h
        out.append(h)
    return torch.stack(out, dim=1)


def params(rnn: Recurrent):
    m = rnn.rnn
    return m.weight_ih_l0, m.weight_hh_l0, m.bias_ih_l0, m.bias_hh_l0


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_the_module_is_the_written_out_recurrence_in_float64(kind):
    rnn = Recurrent(kind, 12, seed=3).double()
    x = torch.randn(2, 9, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(rnn(x), cell_loop(kind, x, *params(rnn)), atol=1e-12, rtol=0)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_seeded_weights_are_torchs_distribution_and_repeat(kind):
    a, b, c = Recurrent(kind, 32, seed=1), Recurrent(kind, 32, seed=1), Recurrent(kind, 32, seed=2)
    for pa, pb, pc in zip(a.parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb) and not torch.equal(pa, pc)
        assert pa.abs().max() <= 32 ** -0.5 and pa.std() > 0.5 * 32 ** -0.5 / 3 ** 0.5


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("batch, n, d_model", [(1, 5, 8), (3, 7, 16)])
def test_flops_are_torchs_count_of_the_written_out_recurrence(kind, batch, n, d_model):
    rnn = Recurrent(kind, d_model).double()
    x = torch.randn(batch, n, d_model, dtype=torch.float64, requires_grad=True)
    point = Point(scope=kind, batch=batch, seq_len=n, heads=1, head_dim=d_model)
    with FlopCounterMode(display=False) as forward:
        out = cell_loop(kind, x, *params(rnn))
    assert forward.get_total_flops() == point_flops(point)
    with FlopCounterMode(display=False) as backward:
        torch.autograd.grad(out, [x, *rnn.parameters()], torch.ones_like(out))
    fwd_bwd = Point(scope=kind, batch=batch, seq_len=n, heads=1, head_dim=d_model, mode="fwd_bwd")
    assert forward.get_total_flops() + backward.get_total_flops() == point_flops(fwd_bwd)


def test_weights_and_bytes_follow_the_gates():
    lstm, gru = Point(scope="lstm", heads=2, head_dim=8), Point(scope="gru", heads=2, head_dim=8)
    assert lstm.recurrent_weights == sum(p.numel() for p in Recurrent("lstm", 16).parameters())
    assert gru.recurrent_weights == sum(p.numel() for p in Recurrent("gru", 16).parameters())
    x = lstm.seq_len * 16 * 4
    assert bytes_moved(lstm) == 2 * x + lstm.recurrent_weights * 4


@pytest.mark.parametrize("axis, value", [("kv_heads", 2), ("causal", True), ("window", 8), ("pad_frac", 0.5),
                                         ("documents", 2), ("scale", "none"), ("backend", "sdpa"), ("q_len", 4)])
def test_attention_only_axes_are_refused_naming_the_key(axis, value):
    point = Point(scope="lstm", heads=4, head_dim=8, seq_len=16, **{axis: value})
    with pytest.raises(ValueError, match=rf"^{axis}: scope=lstm is torch.nn.LSTM with no attention"):
        point.validate()
    Point(scope="gru", heads=4, head_dim=8, seq_len=16, kv_heads=4, q_len=16).validate()  # their plain values


def test_a_recurrent_point_with_back_end_options_is_an_invalid_row():
    row = measure_point(Point(scope="lstm", seq_len=8, heads=1, head_dim=8, backend_options={"compile": True}),
                        Budget(timing_s=0.01, measure_device_peak=False))
    assert row.status == "invalid" and row.error.startswith("ValueError: backend.compile: scope=lstm"), row.error


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
def test_a_recurrent_row_is_measured_like_any_row(kind, mode):
    point = Point(scope=kind, seq_len=64, heads=2, head_dim=16, mode=mode, batch=2)
    row = measure_point(point, Budget(timing_s=0.05, accuracy_rows=8, measure_device_peak=False))
    assert row.status == "ok", row.error
    assert row.kernel == f"torch.nn.{kind.upper()}" and row.time_ms > 0 and row.flops == point_flops(point)
    assert row.rel_rms_err < 1e-5 and (mode == "fwd" or row.grad_rel_rms_err < 1e-5)
    assert row.perm_max_abs_diff is None and row.logit_std is None  # attention's metrics: not for an RNN
    assert row.grad_far_near_ratio < 1e-6 and row.grad_by_distance.startswith("[[0, ")


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
def test_the_memory_model_is_near_the_allocators_peak(kind, mode):
    from selfattn.measure.memory import alloc_peak_bytes

    for batch, n, d_model in ((1, 256, 128), (2, 1024, 64)):
        point = Point(scope=kind, mode=mode, batch=batch, seq_len=n, heads=1, head_dim=d_model)
        rnn = Recurrent(kind, d_model)
        x = torch.randn(batch, n, d_model, requires_grad=mode == "fwd_bwd")
        if mode == "fwd":
            with torch.no_grad():
                measured = alloc_peak_bytes(lambda: rnn(x))
        else:
            up = torch.randn(batch, n, d_model)
            measured = alloc_peak_bytes(lambda: torch.autograd.grad(rnn(x), [x, *rnn.parameters()], up))
        if measured is None:
            pytest.skip("this torch's profiler reports no memory events")
        assert 0.6 <= predicted_mem_bytes(point) / measured <= 1.6, (point, predicted_mem_bytes(point), measured)
