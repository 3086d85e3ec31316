"""Plugins and the variants (selfattn/variants.py): a plugin gets softcap=, alibi=, sink= and a window pair only
when it declares them and the call uses them; one that declares none is an `unsupported` row naming the
variant, never run without it; a Declaration naming an unknown variant is refused. ~3 s.
"""

from __future__ import annotations

import uuid

import pytest
import torch

import selfattn
from selfattn.backends import Declaration, registry
from selfattn.measure import Budget, measure_point
from selfattn.point import Point
from selfattn.reference import attention_reference

PLUGINS = '''
from selfattn.backends import backend
from selfattn.reference import attention_reference

CALLS = []  # the keyword arguments each call received


@backend(variants=("asymmetric_window", "softcap", "alibi", "sink"))
def every_variant(q, k, v, *, causal, window, key_lengths, document_ids, scale, **variants):
    CALLS.append(dict(variants, window=window))
    return attention_reference(q, k, v, causal=causal, window=window, key_lengths=key_lengths,
                               document_ids=document_ids, scale=scale, **variants).to(q.dtype)


@backend(variants="softcap")
def capped(q, k, v, *, causal, window, key_lengths, document_ids, scale, softcap=None):
    CALLS.append(dict(softcap=softcap))
    return attention_reference(q, k, v, causal=causal, window=window, scale=scale, softcap=softcap).to(q.dtype)


def plain(q, k, v, *, causal, window, key_lengths, document_ids, scale):  # written before the variants
    return attention_reference(q, k, v, causal=causal, window=window, key_lengths=key_lengths,
                               document_ids=document_ids, scale=scale).to(q.dtype)
'''
MISDECLARED = '''
from selfattn.backends import backend


@backend(variants=("softcap", "tanh_cap"))
def misdeclared(q, k, v, **kw):
    return q
'''
BUDGET = Budget(timing_s=0.02, accuracy_rows=8, measure_device_peak=False)


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """The module above on sys.path under a fresh name (so its CALLS start empty); forgotten afterwards."""
    name = f"variant_plugins_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(PLUGINS)
    (tmp_path / f"bad_{name}.py").write_text(MISDECLARED)  # its decorator raises: the module fails to import
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    registry.forget()


def _qkv(dtype=torch.float64):
    return selfattn.make_qkv(2, 4, 12, 16, 8, dtype=dtype, seed=0, kv_heads=2)


def test_a_declaring_plugin_gets_each_variant_only_when_the_call_uses_it(plugins):
    import importlib

    calls = importlib.import_module(plugins).CALLS
    q, k, v = _qkv()
    for arguments in ({}, dict(softcap=2.0), dict(alibi=True, causal=True), dict(sink=-0.5, window=(3, 1)),
                      dict(softcap=1.0, alibi=True, sink=0.0, window=4)):
        out = selfattn.attention(q, k, v, backend=f"{plugins}:every_variant", **arguments)
        torch.testing.assert_close(out, attention_reference(q, k, v, **arguments), rtol=0, atol=1e-12)
    received = [{key: value for key, value in call.items() if key != "window"} for call in calls]
    assert received == [{}, dict(softcap=2.0), dict(alibi=True), dict(sink=-0.5),
                        dict(softcap=1.0, alibi=True, sink=0.0)]
    assert [call["window"] for call in calls] == [None, None, None, (3, 1), 4]  # a pair arrives as a tuple


def test_a_plugin_declaring_some_variants_is_refused_the_others_naming_them(plugins):
    q, k, v = _qkv()
    out = selfattn.attention(q, k, v, backend=f"{plugins}:capped", softcap=3.0)
    torch.testing.assert_close(out, attention_reference(q, k, v, softcap=3.0), rtol=0, atol=1e-12)
    with pytest.raises(selfattn.Unsupported, match=r"^backend capped does not support variant alibi, sink \(declared: softcap\)$"):
        selfattn.attention(q, k, v, backend=f"{plugins}:capped", softcap=3.0, alibi=True, sink=1.0)


@pytest.mark.parametrize("axes, variant", [(dict(softcap=30.0), "softcap"), (dict(alibi=True), "alibi"),
                                           (dict(sink=0.5), "sink"), (dict(window=[7, 0]), "asymmetric_window")])
def test_a_plugin_declaring_no_variant_gives_an_unsupported_row_naming_it(plugins, axes, variant):
    point = Point(backend=f"{plugins}:plain", device="cpu", seq_len=32, heads=2, head_dim=8, **axes)
    row = measure_point(point, BUDGET)
    assert row.status == "unsupported" and f"variant {variant}" in row.error and "declared: none" in row.error
    assert row.time_ms is None  # nothing ran
    q, k, v = _qkv()
    call_axes = {key: tuple(value) if isinstance(value, list) else value for key, value in axes.items()}
    with pytest.raises(selfattn.Unsupported, match=f"^backend plain does not support variant {variant} "
                                                   r"\(declared: none\)$") as refused:
        selfattn.attention(q, k, v, backend=f"{plugins}:plain", **call_axes)
    assert row.error == f"Unsupported: {refused.value}"  # one answer (capability.why_not): the row's and the call's
    # negative control: the same plugin without the variant runs, with a one-width window too
    assert measure_point(Point(backend=f"{plugins}:plain", device="cpu", seq_len=32, heads=2, head_dim=8,
                               window=7), BUDGET).status == "ok"


def test_a_declaration_naming_an_unknown_variant_is_refused(plugins):
    with pytest.raises(ValueError, match="^variants: expected some of asymmetric_window, softcap, alibi, sink, "
                                         "got 'tanh_cap'$"):
        Declaration(variants=("softcap", "tanh_cap"))
    row = measure_point(Point(backend=f"bad_{plugins}:misdeclared", device="cpu", seq_len=32, heads=2, head_dim=8),
                        BUDGET)
    assert row.status == "unsupported" and "variants: expected some of" in row.error and "'tanh_cap'" in row.error
