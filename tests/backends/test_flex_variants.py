"""flex with the variants (window pairs, softcap, ALiBi, sink) against the float64 reference.

A covering design, not the product: each variant alone and all four at once, each meeting causal or a
window pair, GQA or MQA, padding (with rows that see no key) or documents, q_len != seq_len (CASES).
inductor's CPU flex has no backward, and torch refuses CPU gradients even in eager flex_attention
(`_validate_device`); its eager path is differentiable all the same, so every case is checked there,
forward and backward in float64, with that one check lifted: the same block mask, score_mod and sink
code (flex.flex_call) that the compiled kernel runs, through both ways of the sink ("key", a CPU's;
"lse", CUDA's). Every new shape, mask kind or combination of transforms compiles (15 s or more each on
a loaded 2-core CPU), so the compiled forward (fp32) runs three of the cases (COMPILED). CUDA's
compiled backward is the gpu-marked test at the end.
"""

from __future__ import annotations

import pytest
import torch

import selfattn
from selfattn.backends import flex
from selfattn.compile import graphs_compiled
from selfattn.masks import Masks
from test_masks import _inputs

FP32_ATOL = 1e-5
F64_ATOL = 1e-10

# (q_len, seq_len, kv_heads, masks, transforms): batch 2, heads 4, head_dim 16
PAD_EMPTY = "pad-empty"  # key_lengths [53, 9]: with a window, the late queries of sequence 1 see no key
CASES = {
    "pair-softcap-gqa-M37": (37, 53, 2, dict(window=(20, 3)), dict(softcap=2.0)),
    "causal-alibi-mqa-pad-M37": (37, 53, 1, dict(causal=True, key_lengths="pad"), dict(alibi=True)),
    "causal-sink-docs": (53, 53, 4, dict(causal=True, document_ids="docs"), dict(sink=0.5)),
    "pair-all-gqa-pad-empty-M37": (37, 53, 2, dict(window=(5, 7), key_lengths=PAD_EMPTY),
                                   dict(softcap=3.0, alibi=True, sink=-0.5)),
}


def _case(name, dtype):
    q_len, seq_len, kv_heads, masks, transforms = CASES[name]
    q, k, v, key_lengths, document_ids = _inputs(2, 4, kv_heads, q_len, seq_len, 16, dtype,
                                                 pad=masks.get("key_lengths") == "pad",
                                                 documents=masks.get("document_ids") == "docs")
    masks = {**masks, "key_lengths": key_lengths, "document_ids": document_ids}
    if CASES[name][3].get("key_lengths") == PAD_EMPTY:
        masks["key_lengths"] = torch.tensor([seq_len, 9])
    return (q, k, v), {**masks, **transforms}


def _reference(qkv, arguments):
    with torch.no_grad():
        return selfattn.attention_reference(*(t.double() for t in qkv), **arguments)


# compiled: all four variants at once (a window pair, GQA, rows that see no key, q_len != seq_len), the sink with
# documents (per-sequence block masks, the sink's key beside them), ALiBi under MQA (inductor's head indexing)
COMPILED = ["pair-all-gqa-pad-empty-M37", "causal-sink-docs", "causal-alibi-mqa-pad-M37"]


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_variants_match_float64(name):
    qkv, arguments = _case(name, torch.float32)
    with torch.no_grad():
        out = selfattn.attention(*qkv, backend="flex", **arguments)
    ref = _reference(qkv, arguments)
    assert out.shape == qkv[0].shape and out.dtype == torch.float32 and torch.isfinite(out).all()
    assert (out.double() - ref).abs().max().item() <= FP32_ATOL
    # the variants changed the output (the comparison above is not one of plain attention)
    plain = {key: value for key, value in arguments.items() if key not in ("softcap", "alibi", "sink")}
    assert (_reference(qkv, plain) - ref).abs().max().item() > 100 * FP32_ATOL
    if name == "pair-all-gqa-pad-empty-M37":
        lo, hi = Masks(window=(5, 7), key_lengths=arguments["key_lengths"]).intervals(37, 53)
        empty = lo > hi
        assert empty.any() and (out[empty[:, None].expand(-1, 4, -1)] == 0).all()  # rows that see no key: zeros


def test_new_cap_and_sink_values_reuse_the_compiled_graph():
    """The values are tensors the score_mod captures: a new cap or sink compiles nothing (same shape)."""
    qkv, arguments = _case("pair-all-gqa-pad-empty-M37", torch.float32)
    with torch.no_grad():
        selfattn.attention(*qkv, backend="flex", **arguments)  # compiled by the test above, or here
        before = graphs_compiled()
        arguments.update(softcap=7.0, sink=1.5)
        out = selfattn.attention(*qkv, backend="flex", **arguments)
    assert graphs_compiled() == before
    assert (out.double() - _reference(qkv, arguments)).abs().max().item() <= FP32_ATOL


def _eager_call(qkv, arguments, sink_by):
    """flex.flex_call through torch's eager flex_attention (differentiable, any dtype)."""
    from torch.nn.attention.flex_attention import flex_attention

    q = qkv[0]
    return flex.flex_call(flex_attention, *qkv, masks=Masks(**arguments), scale=q.shape[-1] ** -0.5, sink_by=sink_by)


EAGER = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")  # on purpose here


@pytest.fixture
def eager_cpu_gradients(monkeypatch):
    """Lift torch's refusal of CPU gradients in flex_attention (only that check; the rest still runs)."""
    import torch.nn.attention.flex_attention as flex_module

    check = flex_module._validate_device
    monkeypatch.setattr(flex_module, "_validate_device", lambda q, k, v: check(q.detach(), k.detach(), v.detach()))


# every case, and those with a sink by both of its ways
EAGER_CASES = [(name, way) for name, case in CASES.items() for way in (flex.SINK_WAYS if "sink" in case[4] else ["key"])]


@EAGER
@pytest.mark.parametrize("name, sink_by", EAGER_CASES, ids=[f"{name}-{way}" for name, way in EAGER_CASES])
def test_gradients_through_the_score_mod_and_the_sink_match_float64(eager_cpu_gradients, name, sink_by):
    qkv, arguments = _case(name, torch.float64)
    leaves = [t.clone().requires_grad_(True) for t in qkv]
    out = _eager_call(leaves, arguments, sink_by)
    ref_leaves = [t.clone().requires_grad_(True) for t in qkv]
    ref = selfattn.attention_reference(*ref_leaves, **arguments)
    assert torch.isfinite(out).all() and (out - ref).abs().max().item() <= F64_ATOL
    upstream = torch.randn(ref.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    grads = torch.autograd.grad(out, leaves, upstream)
    ref_grads = torch.autograd.grad(ref, ref_leaves, upstream)
    for got, want in zip(grads, ref_grads):
        assert torch.isfinite(got).all() and (got - want).abs().max().item() <= F64_ATOL


@EAGER
def test_the_lse_is_natural_log_so_the_rescale_is_exact(eager_cpu_gradients):
    """Negative control of the "lse" way: had flex returned log2 (its kernels' base), rescaling by
    sigmoid(lse - sink) would miss the reference by far more than the tolerance."""
    from torch.nn.attention.flex_attention import AuxRequest, flex_attention

    qkv, arguments = _case("causal-sink-docs", torch.float64)
    masks = Masks(causal=True, document_ids=arguments["document_ids"])
    block_mask = flex._block_mask(masks, 2, 53, 53, torch.device("cpu"))
    out, aux = flex_attention(*qkv, block_mask=block_mask, scale=0.25, return_aux=AuxRequest(lse=True))
    ref = _reference(qkv, arguments)
    natural = out * torch.sigmoid(aux.lse - 0.5)[..., None]
    as_log2 = out * torch.sigmoid(aux.lse / torch.log(torch.tensor(2.0)) - 0.5)[..., None]
    assert (natural - ref).abs().max().item() <= F64_ATOL
    assert (as_log2 - ref).abs().max().item() > 1e-3


def test_window_pair_block_mask_skips_the_blocks_outside_the_window():
    """n = 1024 in blocks of 128: a window (63, 0) lets each query block visit at most 2 key blocks
    (its own and the one before), where causal alone visits up to 8; the sink's key adds one block."""
    device = torch.device("cpu")

    def visited(masks, sink_key=False):
        bm = flex._block_mask(masks, 1, 1024, 1024, device, sink_key=sink_key)
        full = bm.full_kv_num_blocks if bm.full_kv_num_blocks is not None else 0
        return (bm.kv_num_blocks + full).flatten().tolist()

    assert visited(Masks(window=(63, 0))) == [1] + [2] * 7
    assert visited(Masks(causal=True)) == list(range(1, 9))
    assert visited(Masks(window=(63, 0), sink=0.5), sink_key=True) == [2] + [3] * 7  # and block 8, of one key
    # window=64 with causal is the same geometry as (63, 0): one cached block mask, not two
    assert flex._block_mask(Masks(causal=True, window=64), 1, 1024, 1024, device) is \
        flex._block_mask(Masks(window=(63, 0)), 1, 1024, 1024, device)


def test_kernel_column_says_what_the_variants_compiled_in():
    q, k, v = selfattn.make_qkv(1, 2, 8, 8, 8)
    assert flex.kernel_ran(q, k, v, masks=Masks(), scale=1.0) is None
    assert flex.kernel_ran(q, k, v, masks=Masks(softcap=5.0, alibi=True, sink=0.0), scale=1.0) == "score_mod+sink_key"
    assert flex.kernel_ran(q, k, v, masks=Masks(window=(3, 1)), scale=1.0) is None  # a window is the block mask's
    assert flex.sink_way(torch.device("cuda")) == "lse" and flex.sink_way(torch.device("cpu")) == "key"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_cuda_variants_forward_and_backward(dtype):
    """On CUDA (triton): every variant at once, with the sink by the LSE rescale, forward and backward,
    within the FlashAttention rule against naive in the same dtype."""
    q, k, v = selfattn.make_qkv(2, 8, 150, 200, 64, dtype=dtype, device="cuda", seed=4, kv_heads=2)
    arguments = dict(window=(40, 8), key_lengths=torch.tensor([200, 30], device="cuda"), softcap=5.0, alibi=True,
                     sink=0.5)
    upstream = torch.randn(q.shape, generator=torch.Generator().manual_seed(5)).to("cuda", dtype)
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    ref = selfattn.attention_reference(q64, k64, v64, **arguments)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), upstream.double())

    def errors(backend):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        out = selfattn.attention(*leaves, backend=backend, **arguments)
        grads = torch.autograd.grad(out, leaves, upstream)
        return ((out.double() - ref).abs().max().item(),
                max((g.double() - r).abs().max().item() for g, r in zip(grads, ref_grads)))

    naive_out, naive_grad = errors("naive")
    flex_out, flex_grad = errors("flex")
    eps = {torch.float32: 1e-4, torch.bfloat16: 1e-3}[dtype]
    assert flex_out <= 2 * naive_out + eps and flex_grad <= 2 * naive_grad + eps
