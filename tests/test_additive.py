"""Additive scores (selfattn/additive.py) against an independent float64 computation (numpy loops), their
exact FLOPs and memory model, and the rows a back end that cannot run them gets."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from selfattn import additive
from selfattn.inputs import make_qkv, point_masks
from selfattn.masks import Masks
from selfattn.measure import measure_point
from selfattn.measure.budget import Budget
from selfattn.measure.flops import additive_flops, point_pairs
from selfattn.measure.memory import alloc_peak_bytes
from selfattn.point import Point

TINY = Budget(timing_s=0.01, accuracy_rows=8, measure_device_peak=False)


def numpy_additive(q, k, v, w_q, w_k, w_v, keep):
    """Bahdanau's score for every (b, h, i, j), one at a time; keep (B or 1, M, N) bool; K/V heads shared."""
    b, h, m, d = q.shape
    group = h // k.shape[1]
    out = np.zeros((b, h, m, d))
    for bi in range(b):
        for hi in range(h):
            kk, vv = k[bi, hi // group], v[bi, hi // group]
            mask = keep[min(bi, keep.shape[0] - 1)]
            for i in range(m):
                scores = np.array([w_v @ np.tanh(w_q @ q[bi, hi, i] + w_k @ kk[j]) for j in range(kk.shape[0])])
                seen = mask[i]
                if not seen.any():
                    continue  # a row that sees no key: zeros
                e = np.where(seen, np.exp(scores - scores[seen].max()), 0.0)
                out[bi, hi, i] = (e / e.sum()) @ vv
    return out


CASES = {
    "B2-H4-L9-D6": dict(batch=2, heads=4, seq_len=9, head_dim=6),
    "B1-H4-K2-L11-D8-causal": dict(batch=1, heads=4, kv_heads=2, seq_len=11, head_dim=8, causal=True),
    "B2-H2-M3-L10-D4-causal": dict(batch=2, heads=2, q_len=3, seq_len=10, head_dim=4, causal=True),
    "B2-H2-L12-D4-padding": dict(batch=2, heads=2, seq_len=12, head_dim=4, pad_frac=0.4),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-12), (torch.float32, 1e-5)], ids=["fp64", "fp32"])
def test_additive_attention_is_bahdanau_s_score_computed_by_hand(case, dtype, atol):
    point = Point(score="additive", **case)
    q, k, v = make_qkv(point.batch, point.heads, point.q_len_resolved, point.seq_len, point.head_dim, dtype=dtype,
                       seed=1, kv_heads=point.kv_heads_resolved)
    w_q, w_k, w_v = additive.weights(point.head_dim, seed=0, dtype=dtype, device="cpu")
    masks = point_masks(point, "cpu")
    keep = masks.keep(point.q_len_resolved, point.seq_len).numpy()
    expected = numpy_additive(*(t.double().numpy() for t in (q, k, v, w_q, w_k, w_v)), keep)
    with torch.no_grad():
        got = additive.additive_attention(q, k, v, w_q, w_k, w_v, masks=masks)
        ref = additive.additive_reference(q, k, v, w_q, w_k, w_v, masks=masks)
    assert got.dtype == dtype and ref.dtype == torch.float64
    np.testing.assert_allclose(got.double().numpy(), expected, rtol=0, atol=atol)
    np.testing.assert_allclose(ref.numpy(), expected, rtol=0, atol=1e-12)


def test_the_reference_in_blocks_of_rows_is_the_reference_at_once(monkeypatch):
    q, k, v = make_qkv(1, 2, 16, 16, 4, dtype=torch.float64, seed=2)
    w = additive.weights(4, seed=0, dtype=torch.float64, device="cpu")
    rows = torch.tensor([0, 3, 7, 15])
    whole = additive.additive_reference(q, k, v, *w, masks=Masks(causal=True), rows=rows)
    monkeypatch.setattr(additive, "REFERENCE_BLOCK_ELEMENTS", 1)  # one row per block
    torch.testing.assert_close(additive.additive_reference(q, k, v, *w, masks=Masks(causal=True), rows=rows), whole,
                               rtol=0, atol=1e-15)  # einsum's summation order may differ with the block's shape


def test_the_weights_are_seeded_and_keep_the_score_near_unit_scale():
    a, b = additive.weights(64, seed=0, dtype=torch.float64, device="cpu"), additive.weights(64, seed=0,
                                                                                            dtype=torch.float64, device="cpu")
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    q, k, _ = make_qkv(1, 1, 64, 64, 64, dtype=torch.float64)
    scores = torch.tanh(q[0, 0] @ a[0].T[None] + (k[0, 0] @ a[1].T)[:, None]) @ a[2]
    assert 0.2 < float(scores.std()) < 2.0


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
def test_a_measured_additive_row_matches_its_float64_reference(mode):
    row = measure_point(Point(score="additive", seq_len=32, heads=2, head_dim=8, causal=True, mode=mode), TINY)
    assert row.status == "ok", row.error
    assert row.rel_rms_err < 1e-5 and (mode == "fwd" or row.grad_rel_rms_err < 1e-5)
    assert row.perm_max_abs_diff is None and row.logit_std is None  # dot-product measurements, left out
    assert row.backend == "naive" and row.kernel == "selfattn.additive"  # the row says what ran: not naive's code
    assert row.score == "additive" and row.flops == additive_flops(Point(score="additive", seq_len=32, heads=2,
                                                                       head_dim=8, causal=True, mode=mode))


def test_flops_count_every_operation_per_unmasked_pair():
    p = Point(score="additive", batch=2, heads=4, kv_heads=2, seq_len=10, q_len=6, head_dim=8, causal=True)
    pairs = sum(max(0, min(10, i + 4 + 1)) for i in range(6)) * 2  # bottom-right causal, by enumeration
    assert point_pairs(p) == pairs
    projections = 2 * 2 * 8 * 8 * (4 * 6 + 2 * 10)  # W_q per query head and query, W_k per K/V head and key
    assert additive_flops(p) == 6 * 4 * 8 * pairs + projections
    bwd = Point(score="additive", batch=2, heads=4, kv_heads=2, seq_len=10, q_len=6, head_dim=8, causal=True,
                mode="fwd_bwd")
    assert additive_flops(bwd) == 18 * 4 * 8 * pairs + 3 * projections


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
@pytest.mark.parametrize("causal", [False, True], ids=["none", "causal"])
def test_the_memory_model_follows_the_allocator(mode, causal):
    point = Point(score="additive", batch=1, heads=4, seq_len=128, head_dim=32, mode=mode, causal=causal)
    grad = mode == "fwd_bwd"
    q, k, v = make_qkv(1, 4, 128, 128, 32, seed=0, requires_grad=grad)
    w = additive.weights(32, seed=0, dtype=torch.float32, device="cpu")
    masks = Masks(causal=causal)
    upstream = torch.randn(1, 4, 128, 32)

    def call():
        if grad:
            out = additive.additive_attention(q, k, v, *w, masks=masks)
            return out, torch.autograd.grad(out, (q, k, v), upstream)
        with torch.no_grad():
            return additive.additive_attention(q, k, v, *w, masks=masks)

    call()
    measured, predicted = alloc_peak_bytes(call), additive.predict_mem_bytes(point)
    assert 0.9 * measured <= predicted <= 1.35 * measured, (measured, predicted)


@pytest.mark.parametrize("backend, options, says", [
    ("sdpa", {}, "backend sdpa does not support score=additive (declared: dot): additive scores are selfattn/additive"),
    ("flex", {}, "backend flex does not support score=additive (declared: dot)"),
    ("chunked", {}, "backend chunked does not support score=additive (declared: dot)"),
    ("naive", {"compile": True}, "score=additive: naive's option compile applies to its dot-product path"),
])
def test_a_back_end_that_cannot_run_additive_scores_gets_an_unsupported_row(backend, options, says):
    row = measure_point(Point(score="additive", backend=backend, backend_options=options, seq_len=16, heads=1,
                              head_dim=4), TINY)
    assert row.status == "unsupported" and says in row.error and "\n" not in row.error


@pytest.mark.parametrize("fields, message", [
    (dict(scope="layer"), "score: additive scores are measured on the attention core, so they need scope=core"),
    (dict(scale="none"), "scale: additive scores v^T tanh(W_q q + W_k k) are not scaled"),
    (dict(pos_enc="rope"), "pos_enc: RoPE rotates q and k for a dot product"),
    (dict(score="additve"), "score: expected one of dot, additive, got 'additve'; did you mean additive?"),
])
def test_an_additive_point_it_cannot_be_says_why(fields, message):
    with pytest.raises(ValueError) as err:
        Point(**{"score": "additive", **fields}).validate()
    assert str(err.value).startswith(message)
