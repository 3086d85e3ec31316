"""chunked's band runs (selfattn/backends/chunked_band.py): which blocks they take, that they are exact,
that their working set stays O(n), and where they must not run.

The exactness of the auto plans against float64 (band runs included: a window's interior blocks) is
also test_chunked_blocks.py's; here each test first checks that a band run really ran (the kernel
label, or the plan), so that none can pass by the block loop doing the work.
"""

from __future__ import annotations

import pytest
import torch

import selfattn
from selfattn.backends import chunked, chunked_band, chunked_pool
from selfattn.inputs import make_document_ids
from selfattn.masks import Masks


def _band_entries(masks: Masks, n: int, group: int = 1) -> list[tuple]:
    forward_plan = chunked._block_plans(masks, group, n, n, None, None)[3][0]
    return [(m0, m1, kv) for m0, m1, kv in forward_plan if isinstance(kv, chunked_band.BandRun)]


@pytest.mark.parametrize("causal", [True, False])
def test_a_windows_interior_blocks_become_runs_and_its_ends_stay_in_the_loop(causal):
    n, w = 2000, 100
    runs = _band_entries(Masks(causal=causal, window=w), n)
    block = chunked.chunk_sizes(Masks(window=w), None, None)[0]
    assert runs, "no band run for a window"
    for m0, m1, run in runs:
        assert run.block == chunked_band.band_block(block) and (m1 - m0) % run.block == 0
        assert m1 - m0 <= chunked_band.BAND_ROWS
        assert run.n0 == m0 - (w - 1)  # the window of the run's first query
        assert run.span == run.block + (w - 1) * (1 if causal else 2)
    covered = sum(m1 - m0 for m0, m1, _ in runs)
    # the first ceil((w - 1) / block) blocks see the sequence's start; without causal the last ones its end
    edge_blocks = -(-(w - 1) // block) * (1 if causal else 2) + 1  # + the ragged last block
    assert n - covered <= edge_blocks * block


@pytest.mark.parametrize("masks", [Masks(causal=True), Masks(), Masks(window=300)], ids=["causal", "none", "wide"])
def test_masks_whose_blocks_do_not_repeat_a_shifted_pattern_get_no_run(masks):
    # causal: each block sees more keys; no mask: every block the same keys (no shift); a window of 300
    # at n = 512 has no two interior blocks in a row
    assert _band_entries(masks, 512) == []


def test_documents_get_no_run():
    ids = make_document_ids(1, 1024, 4, seed=0)
    assert _band_entries(Masks(causal=True, document_ids=ids), 1024) == []


def test_grouped_heads_runs_stop_at_each_heads_first_row():
    n, group = 1000, 2
    runs = _band_entries(Masks(causal=True, window=100), n, group=group)
    heads = {m0 // n for m0, _, _ in runs}
    assert heads == {0, 1}
    assert all(m0 // n == (m1 - 1) // n for m0, m1, _ in runs)  # no run straddles two heads' rows


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("causal", [True, False])
def test_band_forward_matches_the_block_loop_and_float64(dtype, causal):
    q, k, v = selfattn.make_qkv(1, 4, 1500, 1500, 32, dtype=dtype, seed=1, kv_heads=2)
    masks = dict(causal=causal, window=200)
    assert chunked.kernel_ran(q, k, v, masks=Masks(**masks), scale=1.0).endswith("-band")
    band = selfattn.attention(q, k, v, backend="chunked", **masks)
    loop = selfattn.attention(q, k, v, backend="chunked", q_chunk=100, kv_chunk=100, **masks)  # sizes set: no run
    ref = selfattn.attention_reference(q.double(), k.double(), v.double(), **masks)
    atol = 1e-12 if dtype == torch.float64 else 2e-6
    torch.testing.assert_close(band.double(), ref, rtol=0, atol=atol)
    torch.testing.assert_close(loop.double(), ref, rtol=0, atol=atol)
    # control: a band whose window were off by one key would differ from the reference by far more
    shifted = selfattn.attention_reference(q.double(), k.double(), v.double(), causal=causal, window=199)
    assert (band.double() - shifted).abs().max() > 100 * atol


def test_the_backward_sees_the_band_forwards_log_sum_exp():
    q, k, v = (t.requires_grad_(True) for t in selfattn.make_qkv(1, 2, 900, 900, 16, dtype=torch.float64, seed=2))
    out = selfattn.attention(q, k, v, backend="chunked", causal=True, window=64)
    ref_leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    ref = selfattn.attention_reference(*ref_leaves, causal=True, window=64)
    upstream = torch.randn_like(ref)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), upstream), torch.autograd.grad(ref, ref_leaves, upstream)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-11)


def test_no_band_where_it_was_not_measured_or_does_not_apply():
    assert chunked.band_applies("cpu", torch.float32, "fp32")
    assert chunked.band_applies("cpu", torch.bfloat16, "fp32")  # fp32 copies: scores in the matmuls' dtype
    assert not chunked.band_applies("cpu", torch.bfloat16, "input")  # bf16 products rounded before fp32
    assert not chunked.band_applies("cuda", torch.float32, "fp32")
    assert not chunked.band_applies("cpu", torch.float32, "fp32", compile=True)
    assert not chunked.band_applies("cpu", torch.float32, "fp32", fp8=True)
    q = torch.zeros(1, 1, 2000, 16)
    fp8 = dict(fp8="e4m3", fp8_scaling="tensor", fp8_block=64, p_scale=256.0, hadamard=False)
    assert not chunked.kernel_ran(q, q, q, masks=Masks(causal=True, window=100), scale=1.0, **fp8).endswith("-band")
    assert chunked.kernel_ran(q, q, q, masks=Masks(causal=True, window=100), scale=1.0).endswith("-band")


def test_band_working_set_grows_like_n(monkeypatch):
    from tests.backends.test_memory import LiveTensorPeak

    monkeypatch.setattr(chunked_pool, "HEAD_THREADS", 1)  # the tracker sees the calling thread only
    peaks = {}
    for n in (2048, 8192):
        q, k, v = selfattn.make_qkv(1, 2, n, n, 16, seed=0)
        assert chunked.kernel_ran(q, k, v, masks=Masks(causal=True, window=128), scale=1.0).endswith("-band")
        with LiveTensorPeak() as tracker, torch.no_grad():
            selfattn.attention(q, k, v, backend="chunked", causal=True, window=128)
        peaks[n] = tracker.peak_bytes
    assert peaks[8192] < 4.5 * peaks[2048], peaks  # linear: 4x; the n x n scores would make it 16x
