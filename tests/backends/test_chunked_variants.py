"""chunked's attention variants (selfattn/variants.py) against float64: window pairs, soft-cap, ALiBi, sink.

Values and gradients on a covering design (each variant and their combinations meet causal, grouped
heads, padding, documents, q_len != seq_len, rows that see no key, auto block sizes with band runs and
small set sizes whose blocks are skipped and trimmed), then the pieces that could pass by accident:
that band runs and the lazy step really ran, that blocks outside a pair's window are never computed
(counted), the memory the transforms add, and FP8 with every variant.
"""

from __future__ import annotations

import pytest
import torch

import selfattn
from selfattn.backends import chunked, chunked_pool
from selfattn.inputs import make_document_ids
from selfattn.masks import Masks, key_intervals
from selfattn.point import Point

SMALL = {"q_chunk": 16, "kv_chunk": 24}  # blocks that straddle heads' rows and are trimmed at the window's edges

# (name, (batch, heads, kv_heads, q_len, seq_len), call arguments, backend options)
CASES = [
    ("softcap-full", (1, 2, 2, 64, 64), dict(softcap=0.5), SMALL),
    ("softcap-causal-gqa-auto", (2, 4, 2, 100, 100), dict(softcap=2.0, causal=True), {}),
    ("alibi-causal-gqa6", (2, 6, 2, 120, 120), dict(alibi=True, causal=True), SMALL),
    ("alibi-full-qlen", (1, 4, 4, 50, 170), dict(alibi=True), SMALL),
    ("sink-causal-pad-gqa", (2, 4, 2, 90, 90), dict(sink=0.5, causal=True, key_lengths=[40, 90]), SMALL),
    ("sink-docs-auto", (2, 4, 2, 200, 200), dict(sink=-2.0, documents=5), {}),
    ("pair-full-auto", (1, 2, 2, 300, 300), dict(window=(30, 7)), {}),
    ("pair-ahead-gqa-qlen", (1, 4, 2, 80, 130), dict(window=(0, 40)), SMALL),
    ("pair-open-left-softcap-pad", (2, 2, 2, 100, 100), dict(window=(50, -1), softcap=1.0, key_lengths=[70, 100]), SMALL),
    ("pair-causal-alibi-sink-gqa", (2, 4, 2, 150, 150), dict(window=(40, 9), causal=True, alibi=True, sink=0.3), {}),
    ("all-docs-gqa", (2, 4, 2, 160, 160), dict(window=(25, 10), softcap=0.8, alibi=True, sink=1.0, documents=4), SMALL),
    ("all-causal-decode", (2, 4, 2, 1, 150), dict(softcap=1.5, alibi=True, sink=0.0, causal=True), SMALL),
    ("all-empty-rows", (2, 4, 2, 120, 120), dict(window=(20, 0), softcap=0.7, alibi=True, sink=0.5,
                                                  key_lengths=[3, 90]), SMALL),
    ("all-more-queries", (1, 2, 2, 150, 60), dict(window=(10, 10), softcap=0.9, alibi=True, sink=-0.5), SMALL),
    ("all-band-gqa", (1, 4, 2, 700, 700), dict(window=(100, 20), softcap=0.6, alibi=True, sink=0.5), {}),
]


def _call_args(shape, arguments: dict) -> dict:
    b, _, _, _, n = shape
    out = dict(arguments)
    if "documents" in out:
        out["document_ids"] = make_document_ids(b, n, out.pop("documents"), seed=2)
    if "key_lengths" in out:
        out["key_lengths"] = torch.tensor(out["key_lengths"])
    return out


def _out_and_grads(fn, q, k, v, upstream=None):
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    out = fn(*leaves)
    upstream = torch.randn_like(out, dtype=torch.float64).to(out.dtype) if upstream is None else upstream
    return out, torch.autograd.grad(out, leaves, upstream), upstream


def _matches_reference(q, k, v, args, options):
    """chunked's output and gradients against float64 (values within 1e-12, gradients within 1e-11);
    returns (out, ref)."""
    ref, ref_grads, upstream = _out_and_grads(lambda *t: selfattn.attention_reference(*t, **args), q, k, v)
    out, grads, _ = _out_and_grads(lambda *t: selfattn.attention(*t, backend="chunked", **args, **options),
                                   q, k, v, upstream)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-11)
    return out, ref


@pytest.mark.parametrize("name,shape,arguments,options", CASES, ids=[c[0] for c in CASES])
def test_values_and_gradients_match_float64(name, shape, arguments, options):
    b, h, kv, m, n = shape
    q, k, v = selfattn.make_qkv(b, h, m, n, 16, dtype=torch.float64, seed=11, kv_heads=kv, std=2.0)
    args = _call_args(shape, arguments)
    out, ref = _matches_reference(q, k, v, args, options)
    with torch.no_grad():  # the forward alone (no log-sum-exp asked for unless the sink needs it)
        torch.testing.assert_close(selfattn.attention(q, k, v, backend="chunked", **args, **options), ref,
                                   rtol=0, atol=1e-12)
    # control: the transforms change the answer by far more than the tolerance
    plain = {key: value for key, value in args.items() if key not in ("softcap", "alibi", "sink")}
    if plain != args:
        assert (out - selfattn.attention_reference(q, k, v, **plain)).abs().max() > 1e-3


@pytest.mark.parametrize("options", [{}, SMALL], ids=["auto", "small"])
def test_query_blocks_split_over_threads_keep_their_own_rows_transforms(options, monkeypatch):
    # One K/V head and one sequence: chunked_pool hands each thread a run of query blocks over every head
    # (split_plan), so each thread folds the sink into its own rows only and reads its rows' slopes
    monkeypatch.setattr(chunked_pool, "HEAD_THREADS", 3)
    q, k, v = selfattn.make_qkv(1, 4, 200, 200, 16, dtype=torch.float64, seed=6, kv_heads=1)
    _matches_reference(q, k, v, dict(causal=True, softcap=1.0, alibi=True, sink=0.5), options)


def test_rows_that_see_no_key_are_zeros_with_zero_gradients_even_with_a_sink():
    q, k, v = selfattn.make_qkv(2, 4, 120, 120, 16, dtype=torch.float64, seed=3, kv_heads=2)
    args = dict(window=(20, 0), softcap=0.7, alibi=True, sink=3.0, key_lengths=torch.tensor([3, 120]))
    empty = key_intervals(120, 120, window=(20, 0), key_lengths=args["key_lengths"])
    empty_rows = (empty[0] > empty[1])[0]
    assert empty_rows.sum() > 50  # sequence 0's queries past key 23 see nothing
    for options in ({}, SMALL):
        out, (dq, _, _), _ = _out_and_grads(lambda *t: selfattn.attention(*t, backend="chunked", **args, **options),
                                            q, k, v)
        assert out[0][:, empty_rows].abs().max() == 0 and dq[0][:, empty_rows].abs().max() == 0
        assert out[0][:, ~empty_rows].abs().min() > 0  # the control: rows that see keys are not zeroed


def test_band_runs_take_the_transforms_and_match_the_block_loop():
    q, k, v = selfattn.make_qkv(1, 4, 800, 800, 16, dtype=torch.float32, seed=1, kv_heads=2)
    args = dict(window=(150, 40), softcap=3.0, alibi=True, sink=0.5)
    assert chunked.kernel_ran(q, k, v, masks=Masks(**args), scale=1.0).endswith("-band")
    band = selfattn.attention(q, k, v, backend="chunked", **args)
    loop = selfattn.attention(q, k, v, backend="chunked", q_chunk=100, kv_chunk=100, **args)  # sizes set: no run
    ref = selfattn.attention_reference(q.double(), k.double(), v.double(), **args)
    torch.testing.assert_close(band.double(), ref, rtol=0, atol=2e-6)
    torch.testing.assert_close(loop.double(), ref, rtol=0, atol=2e-6)
    # control: ALiBi's slopes of another head order (the last query head's slope on every head) are far off
    flipped = selfattn.attention_reference(q.double().flip(1), k.double().flip(1), v.double().flip(1), **args).flip(1)
    assert (band.double() - flipped).abs().max() > 100 * 2e-6


def _exact_steps(monkeypatch) -> list:
    monkeypatch.setattr(chunked_pool, "HEAD_THREADS", 1)  # one thread walks every block: counts are exact
    steps: list = []
    original = chunked._forward_block
    monkeypatch.setattr(chunked, "_forward_block", lambda *a, **kw: steps.append(1) or original(*a, **kw))
    return steps


def test_sink_and_alibi_keep_the_lazy_step_and_a_soft_cap_takes_the_exact_one(monkeypatch):
    n = 400  # 128 x 128 blocks, no mask: 4 query blocks of 4 key blocks each
    q, k, v = selfattn.make_qkv(1, 2, n, n, 16, dtype=torch.float64, seed=4)
    steps = _exact_steps(monkeypatch)
    for args, exact_steps in ((dict(sink=1.0), 4), (dict(alibi=True), 4), (dict(alibi=True, sink=-1.0), 4),
                              (dict(softcap=2.0), 16), (dict(softcap=2.0, alibi=True), 16)):
        steps.clear()
        with torch.no_grad():
            out = selfattn.attention(q, k, v, backend="chunked", q_chunk=128, kv_chunk=128, **args)
        torch.testing.assert_close(out, selfattn.attention_reference(q, k, v, **args), rtol=0, atol=1e-12)
        assert len(steps) == exact_steps, (args, len(steps))


def _grid_blocks_seen(n: int, block: int, left: int, right: int) -> int:
    """(query block, key block) pairs of a plain grid in which some query sees some key, from the window alone."""
    count = 0
    for m0 in range(0, n, block):
        first, last = max(0, m0 - left), min(n - 1, min(n, m0 + block) - 1 + right)
        count += sum(1 for n0 in range(0, n, block) if n0 <= last and n0 + block - 1 >= first)
    return count


@pytest.mark.parametrize("window", [(47, 0), (0, 47), (23, 24), (100, 15)])
def test_blocks_outside_an_asymmetric_window_are_never_computed(window, monkeypatch):
    n, block = 512, 16
    left, right = window
    plan = chunked._block_plans(Masks(window=window), 1, n, n, block, block)[0][0]
    planned = sum(len(kv) for _, _, kv in plan)
    assert planned == _grid_blocks_seen(n, block, left, right)
    # a query block sees block + left + right keys: at most (that - 1) // block + 2 key blocks, not all n / block
    assert planned <= (n // block) * ((block + left + right - 1) // block + 2) < (n // block) ** 2 / 3
    # the plan is what runs: with a soft-cap every key block takes one exact step (no lazy step to hide it)
    steps = _exact_steps(monkeypatch)
    q, k, v = selfattn.make_qkv(1, 2, n, n, 16, dtype=torch.float64, seed=5)
    with torch.no_grad():
        out = selfattn.attention(q, k, v, backend="chunked", window=window, softcap=5.0, q_chunk=block, kv_chunk=block)
    assert len(steps) == planned
    torch.testing.assert_close(out, selfattn.attention_reference(q, k, v, window=window, softcap=5.0), rtol=0, atol=1e-12)


def _computed_scores(masks: Masks, n: int, block: int = 64) -> int:
    plan = chunked._block_plans(masks, 1, n, n, block, block)[0][0]
    return sum((m1 - m0) * (n1 - n0) for m0, m1, kv in plan for n0, n1, _ in kv)


def test_an_asymmetric_windows_cost_grows_like_n_times_its_span():
    for window in [(127, 0), (63, 64), (20, 107)]:  # one span, left + right + 1 = 128
        ratio = _computed_scores(Masks(window=window), 4096) / _computed_scores(Masks(window=window), 2048)
        assert 1.9 < ratio < 2.1, (window, ratio)  # linear in n
        assert _computed_scores(Masks(window=window), 4096) < 3 * 4096 * 128  # a span's scores, block edges included
    # control: without a window the computed scores grow like n^2
    assert _computed_scores(Masks(causal=True), 4096) / _computed_scores(Masks(causal=True), 2048) > 3.8


def test_a_pairs_auto_blocks_follow_its_width():
    assert chunked.chunk_sizes(Masks(window=(255, 0)), None, None) == chunked.chunk_sizes(Masks(window=256, causal=True),
                                                                                          None, None) == (128, 128)
    assert chunked.chunk_sizes(Masks(window=(127, 127)), None, None) == chunked.chunk_sizes(Masks(window=128),
                                                                                            None, None)
    assert chunked.chunk_sizes(Masks(window=(-1, 127)), None, None) == chunked.DEFAULT_CHUNKS  # unbounded on a side
    assert chunked.chunk_sizes(Masks(window=(-1, 127), causal=True), None, None) == chunked.CAUSAL_CHUNKS
    assert chunked.chunk_sizes(Masks(window=(4000, 0)), None, None) == chunked.DEFAULT_CHUNKS  # wider than the cap


def _peak(n: int, mode: str, monkeypatch, **args) -> int:
    from tests.backends.test_memory import LiveTensorPeak

    monkeypatch.setattr(chunked_pool, "HEAD_THREADS", 1)  # the tracker sees the calling thread only
    q, k, v = selfattn.make_qkv(1, 4, n, n, 32, seed=0, kv_heads=2, requires_grad=mode == "fwd_bwd")
    with LiveTensorPeak() as tracker:
        if mode == "fwd":
            with torch.no_grad():
                selfattn.attention(q, k, v, backend="chunked", causal=True, **args)
        else:
            out = selfattn.attention(q, k, v, backend="chunked", causal=True, **args)
            out.backward(torch.ones_like(out))
            del out
    return tracker.peak_bytes


def _predicted(n: int, mode: str, **args) -> int:
    point = Point(backend="chunked", heads=4, kv_heads=2, seq_len=n, head_dim=32, causal=True, mode=mode, **args)
    return chunked.predict_mem_bytes(point, chunked.resolve_options({}, "cpu", torch.float32), "cpu")


@pytest.mark.parametrize("mode,args", [("fwd", dict(alibi=True)), ("fwd_bwd", dict(alibi=True)),
                                       ("fwd_bwd", dict(softcap=30.0))], ids=["alibi-fwd", "alibi-fwd_bwd", "softcap-bwd"])
def test_the_memory_model_has_what_a_transform_adds(mode, args, monkeypatch):
    # Measured as tests/backends/test_memory.py measures (live tensors after every op): what the variant
    # adds to the plain call's peak is what predict_mem_bytes adds (ALiBi: slopes per row and a block of
    # distances; soft-cap: the backward's tanh block).
    n = 1024  # 256 x 512 blocks (causal auto): a block of every kind; that the peak is O(n) is test_memory.py's
    added = _peak(n, mode, monkeypatch, **args) - _peak(n, mode, monkeypatch)
    predicted = _predicted(n, mode, **args) - _predicted(n, mode)
    assert added > 0 and 0.8 < added / predicted < 1.25, (added, predicted)


def test_fp8_runs_every_variant_with_an_fp8_sized_error():
    q, k, v = selfattn.make_qkv(1, 4, 130, 300, 64, seed=7, kv_heads=2)
    args = dict(window=(120, 30), softcap=2.0, alibi=True, sink=0.5)
    exact = selfattn.attention_reference(q.double(), k.double(), v.double(), **args)
    naive = selfattn.attention(q, k, v, backend="naive", fp8="e4m3", **args)
    fp8 = selfattn.attention(q, k, v, backend="chunked", fp8="e4m3", q_chunk=32, kv_chunk=48, **args)

    def rel_rms(a, b):
        return float((a.double() - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt())

    assert 0 < rel_rms(fp8, exact) < 1.5 * rel_rms(naive, exact)
    plain = selfattn.attention_reference(q.double(), k.double(), v.double(), window=(120, 30))
    assert rel_rms(fp8, plain) > 5 * rel_rms(fp8, exact)  # control: the transforms were applied


@pytest.mark.compile_matrix
def test_compiled_blocks_run_every_variant_forward_and_backward():
    # Minutes of torch.compile on a CPU (the block functions take the transforms as arguments): with
    # --compile-matrix only. fp32: compiled blocks against float64, values and gradients.
    q, k, v = selfattn.make_qkv(1, 4, 300, 300, 16, dtype=torch.float32, seed=1, kv_heads=2)
    args = dict(window=(40, 5), softcap=2.0, alibi=True, sink=0.5)
    ref, ref_grads, upstream = _out_and_grads(lambda *t: selfattn.attention_reference(*t, **args),
                                              q.double(), k.double(), v.double())
    out, grads, _ = _out_and_grads(lambda *t: selfattn.attention(*t, backend="chunked", compile=True, **args),
                                   q, k, v, upstream.float())
    assert (out.double() - ref).abs().max() < 2e-6
    for got, want in zip(grads, ref_grads):
        assert (got.double() - want).abs().max() < 1e-5
