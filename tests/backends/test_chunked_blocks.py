"""chunked's blocks sized to the mask (auto q_chunk / kv_chunk) and its lazy rescaling, against float64.

The auto sizes must stay exact on shapes where they differ from a plain grid: windows (square blocks
of about half the window), packed documents (blocks ending at document starts), grouped heads
(blocks ending at each head's first virtual row); the lazy step must fall back to the exact one when
a later key block's scores outgrow the row's reference max. Each claim has its negative control.
"""

from __future__ import annotations

import pytest
import torch

import selfattn
from selfattn.backends import chunked, chunked_pool
from selfattn.inputs import make_document_ids
from selfattn.masks import Masks, blocks, bounds, seen_pairs


def _check_exact(q, k, v, atol=1e-12, **masks):
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = selfattn.attention(*leaves, backend="chunked", **masks)
    ref_leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    ref = selfattn.attention_reference(*ref_leaves, **masks)
    torch.testing.assert_close(out, ref, rtol=0, atol=atol)
    upstream = torch.randn_like(ref)
    for got, want in zip(torch.autograd.grad(out, leaves, upstream), torch.autograd.grad(ref, ref_leaves, upstream)):
        torch.testing.assert_close(got, want, rtol=0, atol=10 * atol)


@pytest.mark.parametrize("masks", [
    dict(causal=True, window=100), dict(window=37), dict(causal=True), dict(),
    dict(causal=True, documents=6), dict(documents=9),
], ids=["causal-w100", "w37", "causal", "full", "causal-docs", "docs"])
def test_auto_blocks_match_float64_with_grouped_heads_and_a_batch(masks):
    n = 700  # several auto blocks of every kind; no chunk size divides it
    q, k, v = selfattn.make_qkv(2, 4, n, n, 16, dtype=torch.float64, seed=3, kv_heads=2)
    documents = masks.pop("documents", None)
    if documents:
        masks["document_ids"] = make_document_ids(2, n, documents, seed=3)
    _check_exact(q, k, v, **masks)


def test_auto_sizes_follow_the_window_and_explicit_sizes_are_honoured():
    assert chunked.chunk_sizes(Masks(causal=True), None, None) == chunked.CAUSAL_CHUNKS
    assert chunked.chunk_sizes(Masks(), None, None) == chunked.DEFAULT_CHUNKS != chunked.CAUSAL_CHUNKS
    assert chunked.chunk_sizes(Masks(causal=True, window=10_000), None, None) == chunked.CAUSAL_CHUNKS
    assert chunked.chunk_sizes(Masks(causal=True, window=256), None, None) == (128, 128)
    assert chunked.chunk_sizes(Masks(window=40), None, None) == (chunked.WINDOW_CHUNK_MIN,) * 2
    assert chunked.chunk_sizes(Masks(window=10_000), None, None) == chunked.DEFAULT_CHUNKS  # wider than the cap
    assert chunked.chunk_sizes(Masks(window=256), 32, None) == (32, 128)  # a size set is a size used
    q = torch.zeros(1, 1, 8, 4)
    assert chunked.kernel_ran(q, q, q, masks=Masks(window=256), scale=1.0) == "q128-kv128"
    assert chunked.kernel_ran(q, q, q, masks=Masks(window=256), scale=1.0, q_chunk=8, kv_chunk=8) is None
    # explicit sizes: a plain grid, even with documents (no block ends at a document start)
    ids = torch.tensor([[0] * 5 + [1] * 27])
    plans, _, kv_bounds, _ = chunked._block_plans(Masks(document_ids=ids), 1, 32, 32, 16, 16)
    assert [m0 for m0, _, _ in plans[0]] == [0, 16] and kv_bounds[0] == [0, 16, 32]


def test_bounds_end_blocks_at_cuts_but_straddle_tiny_documents():
    assert bounds(1000, 256) == [0, 256, 512, 768, 1000]
    assert bounds(1000, 256, [300, 310, 900]) == [0, 256, 300, 556, 812, 900, 1000]  # 310: 10 rows in, straddled
    assert bounds(10, 4, [0, 10, 20]) == [0, 4, 8, 10]  # cuts at or past the ends change nothing
    for cuts in ([], [1, 2, 3], list(range(0, 1000, 7))):
        b = bounds(1000, 64, cuts)
        assert b[0] == 0 and b[-1] == 1000 and all(0 < hi - lo <= 64 for lo, hi in zip(b, b[1:]))


def test_document_blocks_do_not_straddle_documents_and_compute_less():
    n = 4096
    ids = make_document_ids(1, n, 8, seed=0)
    masks = Masks(document_ids=ids)
    plans, _, _, _ = chunked._block_plans(masks, 1, n, n, None, None)
    starts = set((torch.nonzero(ids[0, 1:] != ids[0, :-1]).flatten() + 1).tolist())
    straddled = [c for m0, m1, _ in plans[0] for c in starts if m0 < c < m1]
    assert not straddled, straddled
    lo, hi = masks.intervals(n, n)
    fitted = sum((m1 - m0) * (n1 - n0) for m0, m1, kv in plans[0] for n0, n1, _ in kv)
    grid = sum((m1 - m0) * (n1 - n0) for m0, m1, kv in blocks(lo, hi, n, n, 256, 512) for n0, n1, _ in kv)
    assert seen_pairs(lo, hi, 1) <= fitted < 0.9 * grid  # the negative control: the plain grid computes more


def test_trimmed_key_blocks_stop_at_the_last_query_and_masks_are_shared():
    n = 4096  # 256-row query blocks against 512-key blocks: every other one ends mid key block
    plans, _, _, _ = chunked._block_plans(Masks(causal=True), 1, n, n, 256, 512)
    computed = sum((m1 - m0) * (n1 - n0) for m0, m1, kv in plans[0] for n0, n1, _ in kv)
    untrimmed = sum(256 * 512 * -(-(m0 + 256) // 512) for m0 in range(0, n, 256))  # whole 512-key blocks
    assert computed / n ** 2 == pytest.approx(0.5 + 256 / (2 * n), abs=0.01) and computed < 0.95 * untrimmed
    mask_ids = [mask_id for _, _, kv in plans[0] for *_, mask_id in kv if mask_id is not None]
    assert len(mask_ids) == 16 and len(set(mask_ids)) == 2  # 16 diagonal blocks, two shapes of mask


def test_lazy_step_falls_back_when_a_later_block_outgrows_the_reference_max(monkeypatch):
    # Scores that grow along the keys: each key block's max passes the first block's by far more
    # than the lazy step allows (RESCALE_LIMIT), so every such block must be redone exactly.
    n, d = 1024, 16
    q, k, v = selfattn.make_qkv(1, 2, n, n, d, dtype=torch.float64, seed=4)
    k = k + torch.linspace(0, 6, n, dtype=torch.float64)[None, None, :, None]
    q = q.abs() + 1.0
    monkeypatch.setattr(chunked_pool, "HEAD_THREADS", 1)  # one thread walks every query block: counts are exact
    exact_steps = []
    original = chunked._forward_block
    monkeypatch.setattr(chunked, "_forward_block", lambda *a: exact_steps.append(1) or original(*a))
    with torch.no_grad():
        out = selfattn.attention(q, k, v, backend="chunked", scale=1.0, q_chunk=128, kv_chunk=128)
    ref = selfattn.attention_reference(q, k, v, scale=1.0)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    query_blocks, key_blocks = n // 128, n // 128
    assert len(exact_steps) > 2 * query_blocks  # fell back, beyond the one exact step per query block
    # the negative control: ordinary scores take the lazy step after each query block's first key block
    exact_steps.clear()
    q, k, v = selfattn.make_qkv(1, 2, n, n, d, dtype=torch.float64, seed=4)
    with torch.no_grad():
        selfattn.attention(q, k, v, backend="chunked", q_chunk=128, kv_chunk=128)
    assert len(exact_steps) == query_blocks < query_blocks * key_blocks


def test_scores_far_below_the_max_and_hidden_keys_stay_exact_in_fp32():
    # An unscaled wide head: logits spread over hundreds, so many visible scores sit more than
    # EXP_FLOOR below their row's max, in masked blocks as well as unmasked ones. fp32 rounds such
    # logits by ~1e-4 whatever the algorithm: the yardstick is naive's materialized softmax.
    q, k, v = selfattn.make_qkv(1, 2, 600, 600, 256, dtype=torch.float32, seed=5, std=2.0)
    for masks in (dict(causal=True), dict(causal=True, window=150), dict(document_ids=make_document_ids(1, 600, 5))):
        ref = selfattn.attention_reference(q.double(), k.double(), v.double(), scale=1.0, **masks)
        out = selfattn.attention(q, k, v, backend="chunked", scale=1.0, **masks)
        naive = selfattn.attention(q, k, v, backend="naive", scale=1.0, **masks)
        assert torch.isfinite(out).all()
        assert (out.double() - ref).abs().max() <= 2 * (naive.double() - ref).abs().max() + 1e-6


def test_lazy_step_runs_on_a_cpu_only_and_with_enough_key_blocks():
    # it reads each block's sums on the host: on a GPU that would wait for the queue every block
    plan = [(0, 4, [(0, 4, None)] * 3)]
    assert chunked._lazy_rescale(torch.zeros(1, 4, 2), plan)
    assert not chunked._lazy_rescale(torch.zeros(1, 4, 2, device="meta"), plan)
    assert not chunked._lazy_rescale(torch.zeros(1, 4, 2, dtype=torch.float16), plan)
    assert not chunked._lazy_rescale(torch.zeros(1, 4, 2), [(0, 4, [(0, 4, None)] * 2)])  # too few key blocks
