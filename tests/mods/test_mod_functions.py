"""Mask and score functions (selfattn/mods/): the catalogue against today's interval masks, names and parameters,
and every back end that takes them against the float64 reference evaluating the functions themselves."""

import pytest
import torch

import selfattn
from selfattn.masks import Masks
from selfattn.mods import discovery, geometry
from selfattn.mods.contract import from_callable
from selfattn.reference import attention_reference
from tests.plugins_for_tests import gym_masks


@pytest.mark.parametrize("q_len,seq_len", [(37, 37), (11, 40)])
@pytest.mark.parametrize("name,options,axes", [
    ("causal", {}, {"causal": True}),
    ("sliding_window", {"window": 5}, {"window": 5}),
    ("window_pair", {"left": 6, "right": 2}, {"window": (6, 2)}),
    ("window_pair", {"left": -1, "right": 0}, {"window": (-1, 0)}),
])
def test_builtins_with_a_fast_path_are_the_masks_of_their_axes(name, options, axes, q_len, seq_len):
    mod = discovery.bind("mask", name, options)
    from_fn = geometry.mod_keep(mod, 1, 1, q_len, seq_len, "cpu")[0, 0]
    from_axes = Masks(**axes).keep(q_len, seq_len)[0]
    assert torch.equal(from_fn, from_axes)
    assert discovery.fast_path("mask", name, options) == {k: list(v) if isinstance(v, tuple) else v for k, v in axes.items()}


def test_prefix_lm_sees_the_prefix_and_is_causal_after_it():
    keep = geometry.mod_keep(discovery.bind("mask", "prefix_lm", {"prefix": 3}), 1, 1, 6, 6, "cpu")[0, 0]
    assert keep[0].tolist() == [True, True, True, False, False, False]  # the whole prefix, even ahead of it
    assert keep[4].tolist() == [True, True, True, True, True, False]  # causal after it
    # bottom-right: two queries over six keys sit at positions 4 and 5
    keep = geometry.mod_keep(discovery.bind("mask", "prefix_lm", {"prefix": 3}), 1, 1, 2, 6, "cpu")[0, 0]
    assert keep.sum(-1).tolist() == [5, 6]


def test_names_parameters_and_errors_are_one_line():
    assert discovery.names("mask")[:3] == ("none", "causal", "sliding_window")
    with pytest.raises(ValueError, match=r"mask: expected one of .*got 'prefix_ml'; did you mean prefix_lm\?"):
        discovery.resolve("mask", "prefix_ml")
    with pytest.raises(ValueError, match=r"mask.prefx: unknown key; did you mean mask.prefix\?"):
        discovery.bind("mask", "prefix_lm", {"prefx": 3})
    with pytest.raises(ValueError, match=r"mask.dilation: expected an integer >= 1, got 0"):
        discovery.bind("mask", "dilated_sliding_window", {"dilation": 0})
    with pytest.raises(ValueError, match=r"mask: cannot load no_such_module:f: ModuleNotFoundError"):
        discovery.resolve("mask", "no_such_module:f")
    spec = discovery.resolve("mask", "tests.plugins_for_tests.gym_masks:generate_prefix_lm_mask")
    assert (spec.name, spec.source, [p.name for p in spec.params]) == ("generate_prefix_lm_mask", "path", ["prefix_length"])
    direct = discovery.resolve("mask", "tests.plugins_for_tests.gym_masks:head_striped")
    assert direct.direct and direct.params == ()
    with pytest.raises(ValueError, match="takes no parameters"):
        direct.bind({"x": 1})
    with pytest.raises(ValueError, match="alibi=true"):
        discovery.bind("score_mod", "alibi")


def _inputs(batch, heads, kv_heads, q_len, seq_len, dim=16, dtype=torch.float32):
    g = torch.Generator().manual_seed(q_len * 1000 + seq_len)
    q = torch.randn(batch, heads, q_len, dim, generator=g, dtype=dtype)
    k = torch.randn(batch, kv_heads, seq_len, dim, generator=g, dtype=dtype)
    v = torch.randn(batch, kv_heads, seq_len, dim, generator=g, dtype=dtype)
    return q, k, v


GYM = [("generate_prefix_lm_mask", {"prefix_length": 13}), ("generate_dilated_sliding_window", {"window_size": 11, "dilation": 3}),
       ("generate_global_sliding_window", {"window_size": 7, "global_tokens": 3})]


@pytest.mark.parametrize("backend", ["naive", "sdpa", "chunked"])
@pytest.mark.parametrize("q_len,seq_len", [(50, 50), (130, 130), (17, 61)])
@pytest.mark.parametrize("factory,options", GYM, ids=[name for name, _ in GYM])
def test_attention_gym_masks_match_the_reference(backend, q_len, seq_len, factory, options):
    mod = discovery.bind("mask", f"tests.plugins_for_tests.gym_masks:{factory}", options)
    q, k, v = _inputs(2, 4, 2, q_len, seq_len)
    ref = attention_reference(q, k, v, mask_mod=mod)
    extra = {"q_chunk": 32, "kv_chunk": 16} if backend == "chunked" else {}
    out = selfattn.attention(q, k, v, backend=backend, mask_mod=mod, **extra)
    assert (out.double() - ref).abs().max() < 1e-5


def test_a_head_dependent_mask_and_a_score_function_on_every_back_end_that_takes_them():
    q, k, v = _inputs(2, 4, 2, 45, 45)
    mask, score = gym_masks.head_striped, gym_masks.relative_bias
    ref = attention_reference(q, k, v, mask_mod=mask, score_mod=score, softcap=3.0)
    for backend in ("naive", "chunked"):
        out = selfattn.attention(q, k, v, backend=backend, mask_mod=mask, score_mod=score, softcap=3.0)
        assert (out.double() - ref).abs().max() < 1e-5, backend
    assert (selfattn.attention(q, k, v, backend="sdpa", mask_mod=mask).double()
            - attention_reference(q, k, v, mask_mod=mask)).abs().max() < 1e-5
    with pytest.raises(selfattn.Unsupported, match="score_mod"):
        selfattn.attention(q, k, v, backend="sdpa", score_mod=score)


def test_rows_that_see_no_key_are_zeros_with_a_mask_function():
    def late_keys(b, h, q_idx, kv_idx):  # the first rows see nothing
        return (kv_idx >= 20) & (q_idx >= kv_idx)

    q, k, v = _inputs(1, 2, 2, 40, 40)
    ref = attention_reference(q, k, v, mask_mod=late_keys)
    assert ref[:, :, :20].abs().max() == 0
    for backend in ("naive", "sdpa", "chunked"):
        out = selfattn.attention(q, k, v, backend=backend, mask_mod=late_keys, **({"q_chunk": 8, "kv_chunk": 8} if backend == "chunked" else {}))
        assert torch.isfinite(out).all() and (out.double() - ref).abs().max() < 1e-5, backend


def test_pairs_and_the_block_map_count_what_the_dense_mask_holds():
    mod = discovery.bind("mask", "dilated_sliding_window", {"window": 20, "dilation": 3})
    masks = Masks(mask_mod=mod, causal=True)
    dense = geometry.keep(masks, 1, 1, 100, 100, "cpu")
    assert geometry.pairs(masks, 3, 2, 100, 100) == int(dense.sum()) * 3 * 2
    plan = geometry.block_map(masks, 1, 1, 100, 100, 16, 16)
    seen = 0
    for m0, m1, kv in plan:
        for n0, n1, partial in kv:
            tile = dense[..., m0:m1, n0:n1]
            assert tile.any() and partial == (not bool(tile.all()))
            seen += int(tile.sum())
    assert seen == int(dense.sum())  # the skipped blocks hide every pair they hold
    skipped = sum(len(range(0, 100, 16)) - len(kv) for _, _, kv in plan)
    assert skipped > 0


def test_a_mask_function_is_refused_by_a_back_end_that_does_not_declare_it():
    from selfattn.backends.capability import ask_of_call, why_not
    from selfattn.backends import get_backend

    q, k, v = _inputs(1, 2, 2, 8, 8)
    masks = Masks(mask_mod=from_callable(gym_masks.causal_mask, "mask"))
    why = why_not(get_backend("tests.plugins_for_tests.gym_masks:plain_kernel"), ask_of_call(q, k, masks, "fp32", {}, False))
    assert why and "mask_mod" in why


def test_a_mask_function_intersects_padding_documents_and_a_window():
    from selfattn.inputs import make_document_ids, make_key_lengths

    q, k, v = _inputs(2, 2, 2, 64, 64)
    args = dict(key_lengths=make_key_lengths(2, 64, 0.3, seed=1), document_ids=make_document_ids(2, 64, 3, seed=1),
                window=(20, 0))
    mod = discovery.bind("mask", "global_sliding_window", {"window": 9, "global_tokens": 3, "causal": False})
    ref = attention_reference(q, k, v, mask_mod=mod, **args)
    for backend in ("naive", "sdpa", "chunked", "flex"):
        out = selfattn.attention(q, k, v, backend=backend, mask_mod=mod, **args)
        assert (out.double() - ref).abs().max() < 1e-5, backend


@pytest.mark.parametrize("backend", ["naive", "chunked"])
def test_gradients_through_a_mask_and_a_score_function(backend):
    q, k, v = (t.double().requires_grad_(True) for t in _inputs(1, 4, 2, 40, 56))
    mod = discovery.bind("mask", "dilated_sliding_window", {"window": 12, "dilation": 2})
    out = selfattn.attention(q, k, v, backend=backend, mask_mod=mod, score_mod=gym_masks.relative_bias,
                             **({"q_chunk": 16, "kv_chunk": 16} if backend == "chunked" else {}))
    ref = attention_reference(q, k, v, mask_mod=mod, score_mod=gym_masks.relative_bias)
    upstream = torch.randn_like(ref)
    got = torch.autograd.grad(out, (q, k, v), upstream)
    want = torch.autograd.grad(ref, (q, k, v), upstream)
    for g, w in zip(got, want):
        assert (g - w).abs().max() < 1e-9
