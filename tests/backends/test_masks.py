"""Masks beyond causal and grouped-query attention: every back end against the float64 reference.

Awkward shapes on purpose: odd lengths, q_len != seq_len, lengths no chunk size divides,
windows of 1 and longer than the sequence, padding that leaves rows seeing no key.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import selfattn
from selfattn.masks import Masks, blocks, key_intervals, seen_pairs

BACKENDS = ["naive", "sdpa", "chunked"]
OPTIONS = {"chunked": {"q_chunk": 16, "kv_chunk": 8}}  # several blocks even at these small sizes


def _inputs(batch, heads, kv_heads, q_len, seq_len, head_dim, dtype, pad, documents, seed=1):
    q, k, v = selfattn.make_qkv(batch, heads, q_len, seq_len, head_dim, dtype=dtype, seed=seed)
    k, v = k[:, :kv_heads].contiguous(), v[:, :kv_heads].contiguous()
    key_lengths = torch.tensor([max(1, seq_len - 3 * b - 2) for b in range(batch)]) if pad else None
    document_ids = None
    if documents:
        generator = torch.Generator().manual_seed(seed)
        starts = torch.rand(batch, seq_len, generator=generator) < 0.15
        document_ids = torch.cumsum(starts.long(), dim=1)
    return q, k, v, key_lengths, document_ids


CASES = [
    (q_len, seq_len, causal, window, pad, documents, kv_heads)
    for (q_len, seq_len), causal, window, pad, documents, kv_heads in itertools.product(
        [(37, 53), (53, 53), (1, 29)], [False, True], [None, 1, 5, 100], [False, True], [False, True], [4, 1])
    if not (documents and q_len != seq_len)
]


def _id(case):
    q_len, seq_len, causal, window, pad, documents, kv_heads = case
    parts = [f"M{q_len}-N{seq_len}", f"KV{kv_heads}", "causal" if causal else "full"]
    parts += [f"w{window}"] if window else []
    parts += ["pad"] if pad else []
    parts += ["docs"] if documents else []
    return "-".join(parts)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_every_mask_and_kv_heads_matches_float64_forward_and_backward(backend, case):
    q_len, seq_len, causal, window, pad, documents, kv_heads = case
    q, k, v, key_lengths, document_ids = _inputs(2, 4, kv_heads, q_len, seq_len, 16, torch.float64, pad, documents)
    masks = dict(causal=causal, window=window, key_lengths=key_lengths, document_ids=document_ids)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = selfattn.attention(*leaves, backend=backend, **masks, **OPTIONS.get(backend, {}))
    ref_leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    ref = selfattn.attention_reference(*ref_leaves, **masks)
    assert out.shape == (2, 4, q_len, 16) and torch.isfinite(out).all()
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    upstream = torch.randn_like(ref)
    grads = torch.autograd.grad(out, leaves, upstream)
    ref_grads = torch.autograd.grad(ref, ref_leaves, upstream)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_that_see_no_key_are_zero_with_zero_gradient(backend):
    # window 1 + causal: query p sees only key p; padding hides keys >= 20, so rows 20.. see nothing
    q, k, v, _, _ = _inputs(1, 2, 2, 32, 32, 8, torch.float32, False, False)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = selfattn.attention(*leaves, backend=backend, causal=True, window=1, key_lengths=torch.tensor([20]),
                             **OPTIONS.get(backend, {}))
    assert torch.equal(out[:, :, 20:], torch.zeros_like(out[:, :, 20:]))
    assert torch.isfinite(out).all() and out[:, :, :20].abs().sum() > 0
    dq, _, _ = torch.autograd.grad(out.sum(), leaves)
    assert torch.equal(dq[:, :, 20:], torch.zeros_like(dq[:, :, 20:])) and torch.isfinite(dq).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_low_precision_masks_and_gqa_stay_close(backend, dtype):
    q, k, v, key_lengths, document_ids = _inputs(2, 8, 2, 96, 96, 32, dtype, True, True)
    masks = dict(causal=True, window=24, key_lengths=key_lengths, document_ids=document_ids)
    out = selfattn.attention(q, k, v, backend=backend, **masks)
    ref = selfattn.attention_reference(q, k, v, **masks)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    assert (out.double() - ref).abs().max() < tolerance


def test_intervals_describe_each_mask():
    lo, hi = key_intervals(4, 6, causal=True, window=2)  # positions 2..5 (bottom-right aligned)
    assert lo.tolist() == [[1, 2, 3, 4]] and hi.tolist() == [[2, 3, 4, 5]]
    lo, hi = key_intervals(3, 3, window=2)  # not causal: both sides
    assert lo.tolist() == [[0, 0, 1]] and hi.tolist() == [[1, 2, 2]]
    lo, hi = key_intervals(5, 5, key_lengths=torch.tensor([2, 5]))
    assert hi.tolist() == [[1, 1, 1, 1, 1], [4, 4, 4, 4, 4]] and lo.tolist() == [[0] * 5] * 2
    lo, hi = key_intervals(5, 5, causal=True, document_ids=torch.tensor([[0, 0, 1, 1, 1]]))
    assert lo.tolist() == [[0, 0, 2, 2, 2]] and hi.tolist() == [[0, 1, 2, 3, 4]]
    assert seen_pairs(lo, hi, batch=3) == 3 * (1 + 2 + 1 + 2 + 3)


def test_mask_decisions_are_made_once_and_follow_in_place_changes():
    # causal, window 4, padding at 7 in sequence 1: its queries p >= 10 see only hidden keys
    lengths = torch.tensor([32, 7])
    masks = Masks(causal=True, window=4, key_lengths=lengths)
    asked = []

    def decide(device):
        asked.append(str(device))
        lo, hi = masks.intervals(32, 32, device)
        return bool((lo > hi).any())

    assert masks.decision(("rows", 32), decide) and masks.decision(("rows", 32), decide) and asked == ["cpu"]
    assert masks.empty_rows(32, 32) and not masks.empty_rows(4, 4)  # keyed on its arguments
    lengths.fill_(32)  # an in-place change: a fresh decision, not the stale one
    assert not masks.decision(("rows", 32), decide) and len(asked) == 2 and not masks.empty_rows(32, 32)
    # masks of flags alone share their decisions across Masks objects (selfattn.attention makes one a call)
    shared = []
    key = ("test_shared", id(shared))
    assert Masks(causal=True).decision(key, lambda device: shared.append(device) or 7) == 7
    assert Masks(causal=True).decision(key, lambda device: shared.append(device) or 8) == 7 and shared == ["cpu"]
    assert Masks(causal=False).decision(key, lambda device: 9) == 9  # other flags: another decision
    assert not Masks(causal=True, window=1).empty_rows(5, 5) and Masks(window=2).empty_rows(9, 3)  # q_len > seq_len


@pytest.mark.parametrize("masks, density", [
    (Masks(causal=True, window=128), 128 / 1024),
    (Masks(key_lengths=torch.tensor([512])), 0.5),
    (Masks(document_ids=torch.arange(1024)[None] // 128), 1 / 8),
], ids=["window128", "pad-half", "8-documents"])
def test_chunked_plan_computes_the_visible_blocks_only(masks, density):
    n, chunk = 1024, 64
    lo, hi = masks.intervals(n, n)
    computed = sum((m1 - m0) * (n1 - n0) for m0, m1, kv in blocks(lo, hi, n, n, chunk, chunk) for n0, n1, _ in kv)
    assert computed >= seen_pairs(lo, hi, 1)  # every visible pair is computed...
    assert computed / (n * n) <= density + 2 * chunk / n  # ...and little more: only blocks on a boundary


@pytest.mark.parametrize("kwargs, message", [
    (dict(window=0), r"^window: expected None, an integer >= 1, or a pair \[left, right\] of integers >= -1 \(-1: unbounded\), got 0$"),
    (dict(window=True), r"^window: expected None, an integer >= 1"),
    (dict(key_lengths=torch.tensor([3.0, 4.0])), r"^key_lengths: expected an integer tensor of shape \(2,\)"),
    (dict(key_lengths=torch.tensor([3])), r"^key_lengths: expected shape \(2,\), got \(1,\)$"),
    (dict(key_lengths=torch.tensor([0, 4])), r"^key_lengths: expected values in 1..16, got min 0 max 4$"),
    (dict(document_ids=torch.zeros(2, 15, dtype=torch.long)), r"^document_ids: expected shape \(2, 16\)"),
    (dict(document_ids=torch.tensor([[1] * 8 + [0] * 8] * 2)), r"^document_ids: must not decrease"),
], ids=["window0", "window-bool", "lengths-float", "lengths-shape", "lengths-range", "docs-shape", "docs-decreasing"])
def test_bad_mask_arguments_are_one_line_value_errors(kwargs, message):
    q, k, v = selfattn.make_qkv(2, 4, 16, 16, 8)
    with pytest.raises(ValueError, match=message):
        selfattn.attention(q, k, v, **kwargs)


def test_bad_head_counts_and_documents_with_q_len_are_refused():
    q, k, v = selfattn.make_qkv(1, 6, 8, 8, 4)
    with pytest.raises(ValueError, match=r"^k: its heads \(4\) must divide q's heads \(6\)"):
        selfattn.attention(q, k[:, :4], v[:, :4])
    with pytest.raises(ValueError, match=r"^v: heads must match k's \(2\), got 3$"):
        selfattn.attention(q, k[:, :2], v[:, :3])
    q4 = q[:, :, :4]
    with pytest.raises(ValueError, match=r"^document_ids: needs q_len == seq_len"):
        selfattn.attention(q4, k, v, document_ids=torch.zeros(1, 8, dtype=torch.long))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fewer_heads_than_threads_split_the_query_blocks_exactly(monkeypatch, causal):
    """Batch 1 with one K/V head is one flattened head: the threads share its query blocks instead."""
    from selfattn.backends import chunked_pool

    monkeypatch.setattr(chunked_pool, "HEAD_THREADS", 3)
    q, k, v, key_lengths, _ = _inputs(1, 4, 1, 101, 117, 16, torch.float64, True, False)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = selfattn.attention(*leaves, backend="chunked", causal=causal, key_lengths=key_lengths, q_chunk=16, kv_chunk=8)
    ref_leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    ref = selfattn.attention_reference(*ref_leaves, causal=causal, key_lengths=key_lengths)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    upstream = torch.randn_like(ref)
    for got, want in zip(torch.autograd.grad(out, leaves, upstream), torch.autograd.grad(ref, ref_leaves, upstream)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    lo, hi = Masks(causal=causal).intervals(4 * 101, 117)  # the virtual rows of 4 query heads
    plan = list(blocks(lo, hi, 4 * 101, 117, 16, 8))
    pieces = chunked_pool.split_plan(plan, 3)
    assert len(pieces) == 3 and [b for piece in pieces for b in piece] == plan
