"""Each back end's variants (window pairs, softcap, ALiBi, sink) against the float64 reference, forward and
gradients, over a covering design with causal, GQA, padding, documents, q_len != seq_len and rows that see
no key; what a back end does not declare is selfattn.Unsupported naming the variant. (The reference itself
is checked against the definitions in tests/test_variants.py.) ~10 s on a loaded two-core CPU.
"""

from __future__ import annotations

import pytest
import torch

import selfattn
from selfattn.backends import get_backend, sdpa
from selfattn.errors import Unsupported
from selfattn.masks import Masks
from selfattn.measure import Budget, measure_point
from selfattn.point import Point
from selfattn.reference import attention_reference

BATCH, SEQ_LEN, DIM = 2, 53, 16
LENGTHS = torch.tensor([20, 53])  # sequence 0 padded: with a narrow window its last rows see no key


def _documents() -> torch.Tensor:
    ids = torch.zeros(BATCH, SEQ_LEN, dtype=torch.long)
    ids[0, 17:], ids[0, 40:], ids[1, 5:] = 1, 2, 1
    return ids


CASES = {  # name -> (heads, kv_heads, q_len, arguments)
    "pair": (4, 4, 53, dict(window=(5, 2))),
    "pair-causal-gqa": (4, 2, 53, dict(window=(5, 2), causal=True)),
    "pair-left-unbounded-Mlt": (4, 2, 37, dict(window=(-1, 0))),
    "pair-right-unbounded-padding": (4, 4, 53, dict(window=(0, -1), key_lengths=LENGTHS)),
    "softcap": (4, 4, 53, dict(softcap=2.0)),
    "softcap-causal-gqa-Mlt": (4, 2, 37, dict(softcap=0.5, causal=True)),
    "alibi": (4, 4, 53, dict(alibi=True)),
    "alibi-H6-gqa-causal": (6, 3, 53, dict(alibi=True, causal=True)),
    "alibi-documents": (4, 4, 53, dict(alibi=True, document_ids="docs")),
    "alibi-causal-Mlt-gqa": (4, 2, 37, dict(alibi=True, causal=True)),
    "sink": (4, 4, 53, dict(sink=1.5)),
    "sink-negative-padding-gqa": (4, 1, 53, dict(sink=-2.0, key_lengths=LENGTHS)),
    "sink-causal-Mlt": (4, 4, 1, dict(sink=0.5, causal=True)),
    "alibi-sink-pair-padding": (4, 2, 53, dict(alibi=True, sink=0.5, window=(7, 3), key_lengths=LENGTHS)),
    "alibi-sink-empty-rows": (4, 4, 53, dict(alibi=True, sink=-1.0, window=(2, 1), key_lengths=LENGTHS)),
    "all-empty-rows": (4, 2, 53, dict(softcap=3.0, alibi=True, sink=0.5, window=(0, 0), key_lengths=LENGTHS)),
    "all-documents-causal": (4, 2, 53, dict(softcap=1.0, alibi=True, sink=0.0, causal=True, document_ids="docs")),
}
SUPPORTS = {name: get_backend(name).variants for name in ("naive", "sdpa")}


def _inputs(heads: int, kv_heads: int, q_len: int, dtype: torch.dtype):
    q, k, v = selfattn.make_qkv(BATCH, heads, q_len, SEQ_LEN, DIM, dtype=dtype, seed=3, kv_heads=kv_heads,
                                requires_grad=True)
    return q, k, v


def _arguments(arguments: dict) -> dict:
    return {key: _documents() if value == "docs" else value for key, value in arguments.items()}


def _used(arguments: dict) -> tuple[str, ...]:
    return Masks(window=arguments.get("window"), softcap=arguments.get("softcap"), alibi=arguments.get("alibi", False),
                 sink=arguments.get("sink")).variants


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("backend", list(SUPPORTS))
def test_variants_are_exact_against_float64_forward_and_backward(backend, name):
    heads, kv_heads, q_len, arguments = CASES[name]
    arguments = _arguments(arguments)
    q, k, v = _inputs(heads, kv_heads, q_len, torch.float64)
    missing = [variant for variant in _used(arguments) if variant not in SUPPORTS[backend]]
    if missing:
        with pytest.raises(Unsupported, match=f"backend {backend} does not support variant {missing[0]}"):
            selfattn.attention(q, k, v, backend=backend, **arguments)
        return
    upstream = torch.randn(q.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    out = selfattn.attention(q, k, v, backend=backend, **arguments)
    grads = torch.autograd.grad(out, (q, k, v), upstream)
    ref = attention_reference(q, k, v, **arguments)
    ref_grads = torch.autograd.grad(ref, (q, k, v), upstream)
    assert out.dtype == torch.float64 and torch.isfinite(out).all()
    assert (out - ref).abs().max() < 1e-12
    for got, expected, what in zip(grads, ref_grads, "qkv"):
        assert (got - expected).abs().max() < 1e-11, f"d{what}"
    if "empty" in name:  # sequence 0's rows past its 20 keys and their window: zeros, zero gradient
        assert (out[0, :, 25:] == 0).all() and (grads[0][0, :, 25:] == 0).all()


@pytest.mark.parametrize("backend", list(SUPPORTS))
def test_variants_in_fp32_are_within_float_rounding(backend):
    arguments = dict(alibi=True, sink=0.5, window=(7, 3), key_lengths=LENGTHS, causal=True)
    q, k, v = _inputs(4, 2, 37, torch.float32)
    out = selfattn.attention(q, k, v, backend=backend, **arguments)
    ref = attention_reference(q, k, v, **arguments)
    assert (out.double() - ref).abs().max() < 2e-6


def test_a_dropped_variant_would_be_caught_negative_control():
    """The tolerance above separates a back end that computes a variant from one that ignores it."""
    q, k, v = _inputs(4, 2, 53, torch.float64)
    for arguments in (dict(alibi=True), dict(sink=0.5), dict(window=(5, 2)), dict(softcap=2.0)):
        ignored = attention_reference(q, k, v)
        assert (attention_reference(q, k, v, **arguments) - ignored).abs().max() > 1e-3, arguments


def test_sdpa_refuses_softcap_saying_why_in_a_call_and_a_row():
    q, k, v = _inputs(4, 4, 16, torch.float32)
    with pytest.raises(Unsupported, match="softcap.*cannot apply tanh"):
        selfattn.attention(q, k, v, backend="sdpa", softcap=30.0, alibi=True)
    row = measure_point(Point(backend="sdpa", device="cpu", seq_len=32, heads=2, softcap=30.0),
                        Budget(timing_s=0.02, accuracy_rows=8, measure_device_peak=False))
    assert row.status == "unsupported" and "sdpa does not support variant softcap" in row.error
    assert "cannot apply tanh" in row.error


@pytest.mark.parametrize("masks", [Masks(alibi=True), Masks(sink=0.5), Masks(causal=True, alibi=True, sink=-1.0),
                                   Masks(window=(5, 0), alibi=True)], ids=["alibi", "sink", "causal-alibi-sink",
                                                                           "pair-alibi"])
def test_sdpa_kernel_ran_is_torchs_choice_for_the_bias_and_the_sink_key(masks):
    """The row's `kernel` names the kernel torch dispatches for the float bias and K, V one row longer."""
    q, k, v = selfattn.make_qkv(1, 4, 24, 40, 16, kv_heads=2)
    k2, v2, bias, is_causal, _ = sdpa._arguments(q, k, v, masks)
    assert bias.dtype == q.dtype and not is_causal  # a float attn_mask, never the causal flag beside it
    assert bias.shape == (1, 4 if masks.alibi else 1, 24, 40 + (masks.sink is not None))
    assert k2.shape[2] == v2.shape[2] == 40 + (masks.sink is not None)
    expected = torch._fused_sdp_choice(q, k2, v2, attn_mask=bias, scale=0.25, enable_gqa=True)
    assert sdpa.kernel_ran(q, k, v, masks=masks, scale=0.25) == sdpa._CHOICES[int(expected)]


def test_sdpa_variant_rows_name_the_kernel_and_the_model_covers_the_bias():
    budget = Budget(timing_s=0.02, accuracy_rows=8, measure_device_peak=False)
    row = measure_point(Point(backend="sdpa", device="cpu", seq_len=256, heads=2, alibi=True, sink=0.5,
                              window=[31, 0]), budget)
    assert row.status == "ok", row.error
    assert row.kernel.startswith("auto:") and row.kernel != "auto:unknown"
    assert row.max_abs_err < 1e-5
    plain = measure_point(Point(backend="sdpa", device="cpu", seq_len=256, heads=2), budget)
    bias_bytes = 2 * 256 * 257 * 4  # (heads, q_len, seq_len + 1) fp32
    assert row.predicted_mem_bytes - plain.predicted_mem_bytes >= bias_bytes
