"""The chapter's claims about attention, as tests that would fail if they were false."""

from __future__ import annotations

import math

import pytest
import torch

import selfattn
from selfattn.inputs import make_qkv
from selfattn.masks import Masks
from selfattn.measure.stability import stability
from selfattn.validate import resolve_scale

BACKENDS = ["naive", "sdpa", "chunked"]
CHUNKS = {"q_chunk": 16, "kv_chunk": 24}


def opts(backend: str) -> dict:
    return CHUNKS if backend == "chunked" else {}


@pytest.mark.parametrize("backend", BACKENDS)
def test_worked_example_through_attention(backend):
    """One query whose unscaled scores against three keys are (2.0, 1.0, 0.5): the output is
    the 0.63/0.23/0.14 mix of the values (one-hot values expose the weights)."""
    q = torch.tensor([[[[1.0, 0.0]]]], dtype=torch.float64)
    k = torch.tensor([[[[2.0, 0.0], [1.0, 0.0], [0.5, 0.0]]]], dtype=torch.float64)
    v = torch.tensor([[[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]]], dtype=torch.float64)
    out = selfattn.attention(q, k, v, backend=backend, scale=1.0, **opts(backend))
    torch.testing.assert_close(out[0, 0, 0], torch.tensor([0.63, 0.23], dtype=torch.float64), atol=0.005, rtol=0)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_rows_sum_to_one(causal):
    """With v = ones, every output entry is the sum of its row of weights."""
    q, k, _ = make_qkv(2, 3, 37, 53, 16, dtype=torch.float64, seed=1)
    v = torch.ones_like(k)
    for backend in BACKENDS:
        out = selfattn.attention(q, k, v, backend=backend, causal=causal, **opts(backend))
        torch.testing.assert_close(out, torch.ones_like(out), atol=1e-12, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_permuting_tokens_permutes_outputs(backend):
    """No sense of position: attention over a permuted sequence is the permuted attention."""
    q, k, v = make_qkv(1, 2, 41, 41, 16, dtype=torch.float64, seed=2)
    perm = torch.randperm(41, generator=torch.Generator().manual_seed(0))
    out = selfattn.attention(q, k, v, backend=backend, **opts(backend))
    out_perm = selfattn.attention(q[:, :, perm], k[:, :, perm], v[:, :, perm], backend=backend, **opts(backend))
    torch.testing.assert_close(out_perm, out[:, :, perm])
    assert not torch.allclose(out_perm, out)  # the outputs really moved


@pytest.mark.parametrize("backend", BACKENDS)
def test_causal_output_ignores_future_tokens(backend):
    """Under a causal mask, changing tokens after position i leaves outputs 0..i unchanged."""
    q, k, v = make_qkv(1, 2, 50, 50, 16, dtype=torch.float64, seed=4)
    i = 29
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    for t in (q2, k2, v2):
        t[:, :, i + 1 :] = torch.randn(t[:, :, i + 1 :].shape, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    out = selfattn.attention(q, k, v, backend=backend, causal=True, **opts(backend))
    out2 = selfattn.attention(q2, k2, v2, backend=backend, causal=True, **opts(backend))
    torch.testing.assert_close(out2[:, :, : i + 1], out[:, :, : i + 1])
    assert not torch.allclose(out2[:, :, i + 1 :], out[:, :, i + 1 :])
    # and without the mask the past does see the future
    full = selfattn.attention(q, k, v, backend=backend, **opts(backend))
    full2 = selfattn.attention(q2, k2, v2, backend=backend, **opts(backend))
    assert not torch.allclose(full2[:, :, : i + 1], full[:, :, : i + 1])


@pytest.mark.parametrize("head_dim", [64, 512])
def test_logit_std_grows_like_sqrt_dk_and_scaling_fixes_it(head_dim):
    """Unit-variance q, k: q.k has std sqrt(d_k) (about 22.6 at 512); at the default scale
    1/sqrt(d_k) it is about 1. Measured by the stability metrics the sweep records."""
    q, k, v = make_qkv(1, 4, 256, 256, head_dim, dtype=torch.float64, seed=7)
    rows = torch.arange(256)

    def logit_std(scale: float) -> float:
        return stability(q, k, v, rows, q_len=256, masks=Masks(), scale=scale, upstream_BHrD=torch.ones_like(q)).logit_std

    expected = math.sqrt(head_dim)
    assert abs(logit_std(1.0) - expected) < 0.05 * expected
    assert abs(logit_std(resolve_scale(None, head_dim)) - 1.0) < 0.05


@pytest.mark.parametrize("backend", BACKENDS)
def test_unscaled_logits_saturate_the_softmax(backend):
    """Without the scale the softmax at d_k = 512 is close to one-hot; with the default scale
    it is not. Values that are one-hot per key make each output row its row of weights."""
    seq_len, head_dim = 64, 512
    q, k, _ = make_qkv(1, 2, seq_len, seq_len, head_dim, dtype=torch.float64, seed=8)
    v = torch.zeros_like(k)
    v[:, :, torch.arange(seq_len), torch.arange(seq_len)] = 1.0  # key j -> unit vector e_j

    def mean_max_weight(**scale) -> float:
        weights = selfattn.attention(q, k, v, backend=backend, **scale, **opts(backend))[..., :seq_len]
        torch.testing.assert_close(weights.sum(-1), torch.ones(1, 2, seq_len, dtype=torch.float64))
        return weights.amax(-1).mean().item()

    assert mean_max_weight(scale=1.0) > 0.9
    assert mean_max_weight() < 0.3  # scale=None: 1/sqrt(d_k)


def test_fp16_unscaled_logits_overflow_in_naive():
    """fp16 tops out at 65504: large unscaled logits turn into inf and the output into NaN.

    With std 64 the logits' std is 64^2 * sqrt(512), about 92,700: most pass 65504."""
    q, k, v = make_qkv(1, 1, 8, 8, 512, dtype=torch.float16, std=64.0, seed=0)
    out = selfattn.attention(q, k, v, backend="naive", scale=1.0)
    assert not torch.isfinite(out).all()
    assert torch.isfinite(selfattn.attention(q.float(), k.float(), v.float(), backend="naive", scale=1.0)).all()


def test_decode_step_sees_every_key():
    """q_len == 1 under a causal mask is a decode step: same output as no mask."""
    q, k, v = make_qkv(2, 2, 1, 33, 16, dtype=torch.float64)
    for backend in BACKENDS:
        torch.testing.assert_close(
            selfattn.attention(q, k, v, backend=backend, causal=True, **opts(backend)),
            selfattn.attention(q, k, v, backend=backend, causal=False, **opts(backend)),
        )


def test_causal_computes_about_half_the_blocks():
    """A causal mask needs n(n+1)/2 of n^2 scores: chunked skips the hidden key blocks."""
    from selfattn.masks import Masks, blocks

    n, chunk = 1024, 64

    def plan(causal):
        return list(blocks(*Masks(causal=causal).intervals(n, n), n, n, chunk, chunk))

    full = sum((m1 - m0) * sum(n1 - n0 for n0, n1, _ in kv) for m0, m1, kv in plan(False))
    causal = sum((m1 - m0) * sum(n1 - n0 for n0, n1, _ in kv) for m0, m1, kv in plan(True))
    assert full == n * n
    assert causal / full == pytest.approx((n * (n + 1) / 2 + n * chunk / 2) / (n * n), rel=0.01)
    masked = sum(needs for _, _, kv in plan(True) for *_, needs in kv)
    assert masked == n // chunk  # one mask per diagonal block only
