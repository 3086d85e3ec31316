"""The triton kernel's variants (window pairs, soft-cap, ALiBi, sink) against the float64 reference, on a CPU
through triton's interpreter (the `kernel` fixture of test_triton.py: TRITON_INTERPRET=1 while the kernel is
decorated, everything put back after).

A covering design, not the product: tiny shapes with 16 x 16 tiles (so a few blocks per axis still cut
windows, padding and documents inside blocks), and every variant meets causal, GQA (4 heads over 2 or 1 K/V
heads; 6 heads, whose ALiBi slopes are the interpolated ones, over 3 and 2), padding, documents,
q_len < seq_len and q_len > seq_len, rows that see no key, and fp32/fp16 (one bf16). Each case also checks
that every variant it uses changes the float64 answer by far more than the tolerance, so a kernel that
ignored one would fail.
"""

from __future__ import annotations

import pytest
import torch

import selfattn
from selfattn.inputs import make_qkv
from selfattn.score_mods import transform_scores
from selfattn.masks import Masks

from test_triton import ABS_TOL_FP32, DTYPE_NAMES, FA_EPS, kernel, mask_arguments  # noqa: F401 (kernel: a fixture)

SMALL = {"block_m": 16, "block_n": 16}

# (batch, heads, kv_heads, q_len, seq_len, head_dim, dtype, masks, variants); masks as test_triton.py's cases
CASES = [
    (2, 4, 2, 40, 40, 32, torch.float32, "pad", {"window": (5, 2)}),  # both sides bounded, unequal
    (1, 4, 4, 50, 30, 32, torch.float16, "full", {"window": (-1, 3)}),  # right only; q_len > seq_len: empty rows
    (2, 4, 1, 20, 70, 16, torch.float32, "causal-pad", {"window": (6, -1), "alibi": True}),  # decode-like rows
    (2, 4, 2, 48, 48, 32, torch.float32, "docs", {"softcap": 3.0}),
    (1, 6, 3, 40, 40, 32, torch.float16, "causal-docs", {"alibi": True}),  # 6 heads: interpolated slopes
    (2, 6, 2, 24, 60, 64, torch.float32, "full", {"alibi": True, "softcap": 4.0}),
    (2, 4, 2, 40, 40, 32, torch.float32, "causal-pad", {"sink": 0.5}),
    (1, 4, 1, 50, 30, 32, torch.float32, "full", {"window": (2, 1), "sink": 3.0}),  # sink on rows with no key
    (1, 4, 2, 30, 30, 32, torch.float32, "causal", {"sink": 12.0}),  # the sink above every logit
    (2, 4, 2, 40, 40, 32, torch.float16, "causal-docs-pad", {"window": (9, -1), "softcap": 2.0, "alibi": True,
                                                              "sink": -1.0}),
    (2, 4, 4, 30, 45, 32, torch.float32, "pad", {"window": (9, 4), "softcap": 5.0, "alibi": True, "sink": 1.0}),
    (1, 4, 2, 33, 33, 32, torch.bfloat16, "causal", {"softcap": 2.0, "sink": 0.0}),
    (2, 4, 2, 40, 40, 32, torch.float16, "window-pad", {"sink": 0.5}),  # a one-width window beside a sink
]


def case_id(case) -> str:
    b, h, kv, m, n, d, dtype, masks, variants = case
    parts = [f"{key}{list(val) if isinstance(val, tuple) else val}" for key, val in variants.items()]
    return f"B{b}-H{h}-K{kv}-M{m}-N{n}-D{d}-{DTYPE_NAMES[dtype]}-{masks}-" + "-".join(parts).replace(" ", "")


def _arguments(case) -> dict:
    b, _h, _kv, _m, n, _d, _dtype, masks, variants = case
    args = mask_arguments(masks, b, n)
    return {**args, **variants}  # a variant's window (a pair, or a width) replaces the mask's


def _without(args: dict, variant: str) -> dict:
    """The arguments with one variant left out (a window pair: no window at all)."""
    return {key: val for key, val in args.items() if key != variant}


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_variants_match_float64_reference(kernel, case):
    b, h, kv, m, n, d, dtype, masks, variants = case
    q, k, v = make_qkv(b, h, m, n, d, dtype=dtype, seed=m + n + d, kv_heads=kv)
    args = _arguments(case)
    out = selfattn.attention(q, k, v, backend="triton", **args, **SMALL)
    assert out.dtype == dtype and out.shape == q.shape
    ref = selfattn.attention_reference(q, k, v, **args)
    err = (out.double() - ref).abs().max().item()
    if dtype == torch.float32:
        tol = ABS_TOL_FP32
    else:  # the FlashAttention rule, against naive on the same inputs
        naive = selfattn.attention(q, k, v, backend="naive", **args)
        tol = 2 * (naive.double() - ref).abs().max().item() + FA_EPS[dtype]
    assert err <= tol, f"max abs error {err:.3g} > {tol:.3g}"
    empty = (ref == 0).all(dim=-1)
    assert torch.equal(out[empty], torch.zeros_like(out[empty]))  # rows that see no key are zeros, sink or not
    if m > n:
        assert empty.any(), "this case is meant to have rows that see no key"
    # each variant of the case matters here: leaving it out moves the exact answer far beyond the tolerance
    for variant in variants:
        moved = (selfattn.attention_reference(q, k, v, **_without(args, variant)) - ref).abs().max().item()
        assert moved > 10 * tol, f"{variant} changes the answer by only {moved:.3g}"


def _reference_lse(q, k, v, scale, args) -> torch.Tensor:
    """float64 log-sum-exp of each row's denominator: its keys' transformed logits, and the sink's."""
    b, h, m, _d = q.shape
    n = k.shape[2]
    group = h // k.shape[1]
    masks = Masks(causal=args.get("causal", False), window=args.get("window"), key_lengths=args.get("key_lengths"),
                  document_ids=args.get("document_ids"), softcap=args.get("softcap"), alibi=args.get("alibi", False),
                  sink=args.get("sink"))
    kk = k.double().repeat_interleave(group, dim=1)
    scores = transform_scores(q.double() @ kk.transpose(-1, -2) * scale, masks, m, n)
    scores = scores.masked_fill(~masks.keep(m, n)[:, None], float("-inf"))
    if masks.sink is not None:
        scores = torch.cat([scores, scores.new_full((b, h, m, 1), masks.sink)], dim=-1)
    return torch.logsumexp(scores, dim=-1)


@pytest.mark.parametrize("sink", [None, 2.0], ids=["no-sink", "sink"])
def test_the_log_sum_exp_counts_every_term_of_the_denominator(kernel, sink):
    """The kernel's second output, what a backward pass would reuse: log(exp(sink) + sum exp(logits)) per row;
    a row that sees no key has -inf, or the sink's logit alone (its running max started at the sink, its
    running sum at 1, and no key changed either)."""
    q, k, v = make_qkv(2, 4, 40, 24, 32, seed=5, kv_heads=2)
    args = {"window": (3, 2), "softcap": 3.0, "alibi": True, "key_lengths": torch.tensor([24, 9])}
    if sink is not None:
        args["sink"] = sink
    scale = 32 ** -0.5
    out, lse = kernel.attention_fwd(q, k, v, scale=scale, extents=(3, 2), key_lengths=args["key_lengths"],
                                    softcap=3.0, alibi_slopes_log2=kernel.alibi_slopes_log2(4, torch.device("cpu")),
                                    sink=sink, **SMALL)
    ref_lse = _reference_lse(q, k, v, scale, args)
    empty = (selfattn.attention_reference(q, k, v, **args) == 0).all(dim=-1)
    assert empty.any() and (~empty).any()  # q_len > seq_len and padding: some rows see no key
    assert (lse.double()[~empty] - ref_lse[~empty]).abs().max().item() <= 1e-5
    if sink is None:
        assert torch.all(lse[empty] == float("-inf"))
    else:
        assert (lse.double()[empty] - sink).abs().max().item() <= 1e-6
    assert torch.all(out[empty] == 0)


def test_an_asymmetric_window_skips_key_blocks_on_both_sides(kernel):
    """The loop bounds from a pair, to the key: with window (128, 64) the query block of 64 rows [r, r + 64)
    sees keys [r - 128, r + 127], so query blocks 3..5 (rows 192..383) need key blocks 1..6 exactly, and
    poisoned key blocks 0 and 7 (keys < 64 and >= 448) leave them exact: those blocks are never loaded (a NaN
    loaded and masked would still poison the tile's P·V). A bound one key too wide on either side would load
    a poisoned block."""
    q, k, v = make_qkv(1, 1, 512, 512, 32, seed=2)
    window = (128, 64)
    out = selfattn.attention(q, k, v, backend="triton", window=window, block_m=64, block_n=64)
    assert (out.double() - selfattn.attention_reference(q, k, v, window=window)).abs().max().item() <= ABS_TOL_FP32
    keys = torch.arange(512)
    poison = (keys < 64) | (keys >= 448)
    k_poisoned, v_poisoned = k.clone(), v.clone()
    k_poisoned[:, :, poison] = float("nan")
    v_poisoned[:, :, poison] = float("nan")
    poisoned = selfattn.attention(q, k_poisoned, v_poisoned, backend="triton", window=window, block_m=64, block_n=64)
    assert torch.equal(poisoned[:, :, 192:384], out[:, :, 192:384])
    # negative controls: query block 2 loads key block 0, query block 6 loads key block 7
    assert torch.isnan(poisoned[:, :, 128:192]).any() and torch.isnan(poisoned[:, :, 384:448]).any()


def test_a_sink_or_cap_beyond_fp32_gives_no_nan(kernel):
    """sink is any finite number; times log2(e) in fp32 it would be inf, and exp2(inf - inf) NaN. The launcher
    clamps it to fp32's largest value: every weight is 0 (as in float64); a sink of -1e300, clamped to the
    lowest, weighs nothing."""
    q, k, v = make_qkv(1, 2, 20, 20, 16, seed=7)
    for sink in (1e300, -1e300):
        out = selfattn.attention(q, k, v, backend="triton", causal=True, sink=sink, **SMALL)
        ref = selfattn.attention_reference(q, k, v, causal=True, sink=sink)
        assert (out.double() - ref).abs().max().item() <= ABS_TOL_FP32, sink
    assert torch.equal(selfattn.attention(q, k, v, backend="triton", sink=1e300, **SMALL), torch.zeros_like(q))
    # a cap so small that 1 / cap overflows fp32: every logit is +-cap, about 0, so the weights are uniform
    q[..., 0, :] = 0.0  # a query whose logits are exactly 0 (0 times an inf factor would be NaN)
    out = selfattn.attention(q, k, v, backend="triton", causal=True, softcap=1e-300, **SMALL)
    assert (out.double() - selfattn.attention_reference(q, k, v, causal=True, softcap=1e-300)).abs().max() <= ABS_TOL_FP32
