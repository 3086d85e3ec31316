"""Bad input raises ValueError with one line naming the argument, never a deep torch error."""

from __future__ import annotations

import math

import pytest
import torch

import selfattn
from selfattn.inputs import make_qkv

Q, K, V = make_qkv(2, 3, 5, 7, 8)


def call(q=Q, k=K, v=V, **kwargs):
    return selfattn.attention(q, k, v, **kwargs)


CASES = {
    "q-rank": (dict(q=Q[0]), "q:"),
    "k-rank": (dict(k=K[None]), "k:"),
    "q-not-tensor": (dict(q=[[1.0]]), "q:"),
    "int-dtype": (dict(q=Q.long(), k=K.long(), v=V.long()), "q:"),
    "batch-mismatch": (dict(k=K[:1], v=V[:1]), "k:"),
    "heads-mismatch": (dict(k=K[:, :2], v=V[:, :2]), "k:"),
    "head_dim-mismatch": (dict(k=K[..., :4]), "k:"),
    "dtype-mismatch": (dict(v=V.double()), "v:"),
    "kv-length-mismatch": (dict(v=V[:, :, :6]), "v:"),
    "empty-length": (dict(k=K[:, :, :0], v=V[:, :, :0]), "k:"),
    "unknown-backend": (dict(backend="flash"), "backend:"),
    "scale-zero": (dict(scale=0.0), "scale:"),
    "scale-negative": (dict(scale=-1.0), "scale:"),
    "scale-nan": (dict(scale=math.nan), "scale:"),
    "scale-inf": (dict(scale=math.inf), "scale:"),
    "scale-string": (dict(scale="auto"), "scale:"),
    "causal-not-bool": (dict(causal="yes"), "causal:"),
    "causal-more-queries-than-keys": (dict(q=make_qkv(2, 3, 9, 7, 8)[0], causal=True), "causal:"),
    "q_chunk-zero": (dict(backend="chunked", q_chunk=0), "q_chunk:"),
    "kv_chunk-negative": (dict(backend="chunked", kv_chunk=-4), "kv_chunk:"),
    "kv_chunk-float": (dict(backend="chunked", kv_chunk=2.5), "kv_chunk:"),
    "sdpa-unknown-kernel": (dict(backend="sdpa", kernel="fast"), "kernel:"),
    "option-of-other-backend": (dict(backend="naive", q_chunk=4), "q_chunk:"),
    "upcast-not-bool": (dict(backend="naive", upcast_softmax="no"), "upcast_softmax:"),
}


@pytest.mark.parametrize("kwargs, prefix", CASES.values(), ids=CASES.keys())
def test_bad_input_raises_one_line_value_error(kwargs, prefix):
    with pytest.raises(ValueError) as info:
        call(**kwargs)
    message = str(info.value)
    assert message.startswith(prefix), message
    assert "\n" not in message


def test_unknown_backend_lists_valid_names():
    with pytest.raises(ValueError, match="naive, sdpa, chunked"):
        call(backend="nope")


def test_unknown_option_names_the_nearest_or_the_allowed_ones():
    with pytest.raises(ValueError, match=r"^chunk: unknown key; did you mean q_chunk\?$"):
        call(backend="chunked", chunk=64)
    with pytest.raises(ValueError, match=r"^blocks: unknown key; did you mean fp8_block\?$"):
        call(backend="chunked", blocks=64)
    with pytest.raises(ValueError, match=r"^xyz: unknown key; allowed: fp8, fp8_scaling, fp8_block, p_scale, hadamard, fp8_matmul, "
                                         r"q_chunk, kv_chunk, compute, compile$"):
        call(backend="chunked", xyz=64)


def test_device_mismatch():
    meta_k = K.to("meta")
    with pytest.raises(ValueError, match="^k: device"):
        call(k=meta_k, v=V.to("meta"))


@pytest.mark.parametrize(
    "kwargs, prefix",
    [
        (dict(d_model=64, heads=5), "heads:"),
        (dict(d_model=0, heads=1), "d_model:"),
        (dict(d_model=64, heads=4, backend="bogus"), "backend:"),
        (dict(d_model=64, heads=4, backend="chunked", q_chunk=0), "q_chunk:"),
        (dict(d_model=64, heads=4, scale=-2.0), "scale:"),
    ],
    ids=["heads-not-dividing", "d_model-zero", "backend", "chunk", "scale"],
)
def test_layer_bad_config(kwargs, prefix):
    with pytest.raises(ValueError) as info:
        selfattn.MultiHeadSelfAttention(**kwargs)
    assert str(info.value).startswith(prefix)


def test_layer_bad_input_shape():
    layer = selfattn.MultiHeadSelfAttention(16, 2)
    with pytest.raises(ValueError, match="^x: expected shape"):
        layer(torch.zeros(2, 5, 12))


@pytest.mark.parametrize(
    "kwargs, prefix",
    [(dict(std=0.0), "std:"), (dict(std=math.nan), "std:"), (dict(seed=-1), "seed:"), (dict(batch=0), "batch:")],
    ids=["std-zero", "std-nan", "seed-negative", "batch-zero"],
)
def test_inputs_bad_arguments(kwargs, prefix):
    args = dict(batch=1, heads=1, q_len=2, seq_len=2, head_dim=4)
    args.update(kwargs)
    with pytest.raises(ValueError) as info:
        make_qkv(**args)
    assert str(info.value).startswith(prefix)


def test_reference_rejects_out_of_range_rows():
    with pytest.raises(ValueError, match="^rows:"):
        selfattn.attention_reference(Q, K, V, rows=torch.tensor([0, 5]))
