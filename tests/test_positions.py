"""Positional encodings (selfattn/positions.py) against independent float64 computations (numpy), the
layer's encodings against a plain layer fed X + PE, and the relative-position property with its
negative control."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from selfattn import positions
from selfattn.layer import MultiHeadSelfAttention
from selfattn.point import Point
from selfattn.reference import attention_reference


def numpy_sinusoidal(length: int, d_model: int) -> np.ndarray:
    """The paper's formula, element by element."""
    table = np.zeros((length, d_model))
    for pos in range(length):
        for col in range(d_model):
            i = col // 2
            angle = pos / 10000 ** (2 * i / d_model)
            table[pos, col] = math.sin(angle) if col % 2 == 0 else math.cos(angle)
    return table


def numpy_rope(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Each pair (2i, 2i+1) as a complex number times e^{i·pos·10000^(-2i/d)}; x (..., L, D)."""
    d = x.shape[-1]
    theta = 10000.0 ** (-np.arange(0, d, 2) / d)
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * pos[:, None] * theta)
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = z.real, z.imag
    return out


@pytest.mark.parametrize("length, d_model", [(7, 8), (50, 33), (1, 2)], ids=["L7-D8", "L50-D33-odd", "L1-D2"])
def test_the_sinusoidal_table_is_the_paper_s_formula(length, d_model):
    table = positions.sinusoidal_table(length, d_model)
    np.testing.assert_allclose(table.numpy(), numpy_sinusoidal(length, d_model), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-12), (torch.float32, 2e-6), (torch.float16, 1e-2),
                                         (torch.bfloat16, 6e-2)], ids=["fp64", "fp32", "fp16", "bf16"])
def test_rotation_is_the_complex_product_in_every_dtype(dtype, atol):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 40, 16, generator=generator, dtype=torch.float64)
    pos = torch.arange(40) * 37  # large angles too
    got = positions.rope(x.to(dtype), pos).double().numpy()
    np.testing.assert_allclose(got, numpy_rope(x.numpy(), pos.numpy().astype(float)), rtol=0, atol=atol)


def test_rotation_of_a_transposed_view_equals_that_of_its_copy():
    x = torch.randn(2, 10, 3, 8, dtype=torch.float64).transpose(1, 2)  # the layer's split_heads layout
    assert torch.equal(positions.rope(x, torch.arange(10)), positions.rope(x.contiguous(), torch.arange(10)))


def test_queries_are_placed_bottom_right_as_the_masks_place_them():
    assert positions.query_positions(3, 10).tolist() == [7, 8, 9]


@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-10), (torch.float32, 1e-5), (torch.bfloat16, 1e-1)],
                         ids=["fp64", "fp32", "bf16"])
def test_a_rope_logit_depends_on_the_relative_position_only(dtype, tolerance):
    assert positions.rope_shift_max_abs_diff(64, 4096, dtype=dtype, device="cpu", seed=0) <= tolerance


def test_the_relative_position_check_catches_an_absolute_encoding(monkeypatch):
    """Negative control: a rotation whose angle also grows with the absolute position squared is not relative."""
    original = positions.rope_tables

    def absolute(pos, head_dim, *, dtype, device):
        return original(pos.double() ** 2 / 100, head_dim, dtype=dtype, device=device)

    monkeypatch.setattr(positions, "rope_tables", absolute)
    assert positions.rope_shift_max_abs_diff(64, 512, dtype=torch.float64, device="cpu", seed=0) > 0.1


def test_tables_are_exact_in_the_dtype_the_layer_is_cast_to():
    layer = MultiHeadSelfAttention(16, 2, pos_enc="sinusoidal", max_len=8).half().double()
    np.testing.assert_allclose(layer.pos_table.numpy(), numpy_sinusoidal(8, 16), rtol=0, atol=1e-12)
    rope = MultiHeadSelfAttention(16, 2, pos_enc="rope", max_len=8).half()
    assert rope.rope_cos.dtype == torch.float16


def test_learned_tables_are_seeded_and_leave_the_projections_as_they_were():
    a = MultiHeadSelfAttention(16, 2, pos_enc="learned", max_len=8)
    b = MultiHeadSelfAttention(16, 2, pos_enc="learned", max_len=8)
    plain = MultiHeadSelfAttention(16, 2)
    assert torch.equal(a.pos_table, b.pos_table) and torch.equal(a.w_q.weight, plain.w_q.weight)
    a.reset_parameters(seed=3)
    assert not torch.equal(a.pos_table, b.pos_table)
    assert abs(float(b.pos_table.detach().std()) - positions.LEARNED_STD) < 0.15
    assert "pos_table" in dict(a.named_parameters())  # learned: it trains (and gets a gradient in fwd_bwd)


@pytest.mark.parametrize("pos_enc", ["sinusoidal", "learned"])
def test_an_added_encoding_is_a_plain_layer_fed_x_plus_pe(pos_enc):
    x = torch.randn(2, 12, 16, dtype=torch.float64)
    layer = MultiHeadSelfAttention(16, 4, pos_enc=pos_enc, max_len=12, causal=True).double()
    plain = MultiHeadSelfAttention(16, 4, causal=True).double()
    table = numpy_sinusoidal(12, 16) if pos_enc == "sinusoidal" else layer.pos_table.detach().numpy()
    with torch.no_grad():
        expected = plain(x + torch.from_numpy(table))
        torch.testing.assert_close(layer(x), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("backend", ["naive", "sdpa", "chunked"])
def test_a_rope_layer_is_the_float64_attention_of_rotated_projections(backend):
    x = torch.randn(1, 20, 32, dtype=torch.float64)
    layer = MultiHeadSelfAttention(32, 4, pos_enc="rope", max_len=20, backend=backend).double()
    with torch.no_grad():
        q, k, v = layer.project_qkv(x)
        pos = np.arange(20, dtype=float)
        q_r, k_r = (torch.from_numpy(numpy_rope(t.numpy(), pos)) for t in (q, k))
        expected = layer.w_o(layer.merge_heads(attention_reference(q_r, k_r, v)))
        torch.testing.assert_close(layer(x), expected, rtol=0, atol=1e-10)


def test_the_layer_refuses_what_it_cannot_encode():
    with pytest.raises(ValueError, match="^pos_enc: expected one of none, sinusoidal, learned, rope, got 'abs'$"):
        MultiHeadSelfAttention(16, 2, pos_enc="abs", max_len=4)
    with pytest.raises(ValueError, match="^max_len: pos_enc=rope needs"):
        MultiHeadSelfAttention(16, 2, pos_enc="rope")
    with pytest.raises(ValueError, match="^pos_enc: rope rotates pairs of features, so head_dim must be even"):
        MultiHeadSelfAttention(15, 5, pos_enc="rope", max_len=4)
    with pytest.raises(ValueError, match="^x: pos_enc=sinusoidal holds max_len=4 positions, got 5 tokens$"):
        MultiHeadSelfAttention(16, 2, pos_enc="sinusoidal", max_len=4)(torch.randn(1, 5, 16))


@pytest.mark.parametrize("fields, message", [
    (dict(pos_enc="sinusoidal"), "pos_enc: sinusoidal is added to the layer's input X, so it needs scope=layer, got scope=core"),
    (dict(pos_enc="learned", scope="generate", causal=True), "pos_enc: learned is added to the layer's input X"),
    (dict(pos_enc="rope", scope="generate", causal=True), "pos_enc: rope rotates q and k of one attention call"),
    (dict(pos_enc="rope", head_dim=15), "pos_enc: rope rotates pairs of features, so head_dim must be even, got 15"),
    (dict(pos_enc="rop"), "pos_enc: expected one of none, sinusoidal, learned, rope, got 'rop'; did you mean rope?"),
], ids=["sinusoidal-core", "learned-generate", "rope-generate", "rope-odd-d_k", "typo"])
def test_a_point_with_an_encoding_it_cannot_have_says_why(fields, message):
    with pytest.raises(ValueError) as err:
        Point(**fields).validate()
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_an_encoding_joins_the_point_id_only_when_used():
    assert Point(pos_enc="none").point_id() == Point().point_id()
    assert Point(pos_enc="rope").point_id() != Point().point_id()
