"""The variants of selfattn/variants.py: the float64 reference checked against the definitions themselves,
and bad values refused in one line (a single call, a Point, a grid's `invalid` rows).

The brute force below is written from the definitions in selfattn/variants.py's docstring and the ALiBi
paper's reference slopes, not from selfattn's own code (no mask intervals, no score_mods): one Python loop
per (sequence, head, query) over the keys, in Python floats. A grid's `invalid` rows: tests/runners/
test_variant_sweep.py.
"""

from __future__ import annotations

import math

import pytest
import torch

import selfattn
from selfattn.point import Point
from selfattn.reference import attention_reference
from selfattn.variants import alibi_slopes


def paper_slopes(n: int) -> list[float]:
    """get_slopes of the ALiBi paper's reference code (Press et al., 2022), as published."""
    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + paper_slopes(2 * closest)[0::2][: n - closest]


def brute_force(q, k, v, *, causal=False, window=None, key_lengths=None, document_ids=None, scale=None,
                softcap=None, alibi=False, sink=None) -> torch.Tensor:
    """Attention from the definitions, one (b, h, i) at a time; float64 (B, H, q_len, D)."""
    batch, heads, q_len, dim = q.shape
    kv_heads, seq_len = k.shape[1], k.shape[2]
    scale = dim ** -0.5 if scale is None else scale
    slopes = paper_slopes(heads)
    out = torch.zeros(batch, heads, q_len, dim, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            kv = h // (heads // kv_heads)  # GQA: consecutive query heads share a K/V head
            for i in range(q_len):
                p = i + seq_len - q_len  # bottom-right aligned
                logits, values = [], []
                for j in range(seq_len):
                    if causal and j > p:
                        continue
                    if isinstance(window, int) and (p - j >= window or (not causal and j - p >= window)):
                        continue
                    if isinstance(window, tuple):
                        left, right = window
                        if (left != -1 and j < p - left) or (right != -1 and j > p + right):
                            continue
                    if key_lengths is not None and j >= int(key_lengths[b]):
                        continue
                    if document_ids is not None and int(document_ids[b, j]) != int(document_ids[b, p]):
                        continue
                    s = scale * sum(float(q[b, h, i, d]) * float(k[b, kv, j, d]) for d in range(dim))
                    if softcap is not None:
                        s = softcap * math.tanh(s / softcap)
                    if alibi:
                        s -= slopes[h] * abs(p - j)
                    logits.append(s)
                    values.append([float(x) for x in v[b, kv, j]])
                if not logits:
                    continue  # a row that sees no key: zeros, with a sink too
                top = max(logits + ([sink] if sink is not None else []))
                weights = [math.exp(s - top) for s in logits]
                total = sum(weights) + (math.exp(sink - top) if sink is not None else 0.0)
                for w, value in zip(weights, values):
                    for d in range(dim):
                        out[b, h, i, d] += w / total * value[d]
    return out


# A covering design: every variant alone and with the masks, GQA, q_len != seq_len and rows that see no key.
LENGTHS = torch.tensor([3, 9])  # sequence 0: three keys, so a window beyond them leaves rows empty
DOCS = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2], [0, 1, 1, 1, 1, 1, 2, 2, 2]])
CASES = {
    "pair": dict(window=(2, 1)),
    "pair-causal": dict(window=(3, 2), causal=True),
    "pair-left-unbounded": dict(window=(-1, 1)),
    "pair-right-unbounded-Mlt": dict(window=(1, -1), q_len=4),
    "width-causal": dict(window=3, causal=True),
    "softcap": dict(softcap=0.7),
    "softcap-causal-gqa": dict(softcap=1.5, causal=True, kv_heads=1),
    "alibi": dict(alibi=True),
    "alibi-H6": dict(alibi=True, heads=6, kv_heads=2),
    "alibi-H3-Mlt-causal": dict(alibi=True, heads=3, q_len=5, causal=True),
    "sink": dict(sink=0.8),
    "sink-padding": dict(sink=-0.5, key_lengths=LENGTHS),
    "sink-documents": dict(sink=1.0, document_ids=DOCS),
    "all-empty-rows": dict(softcap=2.0, alibi=True, sink=0.3, window=(0, 0), key_lengths=LENGTHS),
    "all-documents-gqa": dict(softcap=1.0, alibi=True, sink=0.0, causal=True, window=(2, -1), document_ids=DOCS,
                              kv_heads=1),
}


def case_inputs(case: dict, dtype=torch.float64, seed: int = 0):
    case = dict(case)
    heads, kv_heads, q_len = case.pop("heads", 2), case.pop("kv_heads", None), case.pop("q_len", 9)
    q, k, v = selfattn.make_qkv(2, heads, q_len, 9, 4, dtype=dtype, seed=seed, kv_heads=kv_heads)
    return (q, k, v), case


def test_paper_slopes_are_the_published_values_and_alibi_slopes_agrees():
    # H = 8: 1/2 ... 1/256; H = 6 (not a power of two): the 4-head slopes, then 1/2 and 1/8 of the 8-head ones
    assert paper_slopes(8) == pytest.approx([2.0 ** -e for e in range(1, 9)], rel=1e-15)
    assert paper_slopes(6) == pytest.approx([0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125], rel=1e-15)
    assert paper_slopes(12)[8:] == pytest.approx([2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5], rel=1e-15)
    for heads in (1, 2, 3, 5, 6, 8, 12, 16, 20, 32):
        assert alibi_slopes(heads) == pytest.approx(paper_slopes(heads), rel=1e-12), heads


@pytest.mark.parametrize("name", list(CASES))
def test_the_reference_is_the_definition(name):
    (q, k, v), arguments = case_inputs(CASES[name])
    expected = brute_force(q, k, v, **arguments)
    got = attention_reference(q, k, v, **arguments)
    assert torch.allclose(got, expected, rtol=0, atol=1e-12), (got - expected).abs().max()
    if "key_lengths" in arguments and arguments.get("window") == (0, 0):
        assert (got[0, :, 3:] == 0).all()  # rows past sequence 0's keys see nothing: zeros, sink or not


def test_the_brute_force_sees_each_transform_negative_control():
    """Each transform changes the result: the comparison above would catch a reference that dropped one."""
    (q, k, v), _ = case_inputs({})
    plain = brute_force(q, k, v)
    for arguments in (dict(softcap=0.3), dict(alibi=True), dict(sink=0.5), dict(window=(1, 0))):
        assert (brute_force(q, k, v, **arguments) - plain).abs().max() > 1e-3, arguments
    # and the ALiBi slopes are the query head's: swapping two heads' slopes changes the reference
    swapped = brute_force(q.flip(1), k.flip(1), v.flip(1), alibi=True).flip(1)
    assert (swapped - attention_reference(q, k, v, alibi=True)).abs().max() > 1e-3


BAD = [
    ("window", (3, -2), "window: expected None, an integer >= 1, or a pair [left, right] of integers >= -1"),
    ("window", (1, 2, 3), "window: expected None, an integer >= 1, or a pair"),
    ("window", (1.5, 2), "window: expected None, an integer >= 1, or a pair"),
    ("window", True, "window: expected None, an integer >= 1, or a pair"),
    ("softcap", 0, "softcap: expected None or a positive finite number, got 0"),
    ("softcap", -1.0, "softcap: expected None or a positive finite number, got -1.0"),
    ("softcap", float("inf"), "softcap: expected None or a positive finite number, got inf"),
    ("sink", float("nan"), "sink: expected None or a finite number, got nan"),
    ("sink", float("-inf"), "sink: expected None or a finite number, got -inf"),
    ("sink", True, "sink: expected None or a finite number, got True"),
    ("alibi", 1, "alibi: expected true or false, got 1"),
    ("alibi", "yes", "alibi: expected true or false, got 'yes'"),
    ("alibi", None, "alibi: expected true or false, got None"),
]


@pytest.mark.parametrize("key, value, message", BAD, ids=[f"{k}={v!r}" for k, v, _ in BAD])
def test_a_bad_value_is_one_line_naming_the_key_in_a_call_and_a_point(key, value, message):
    q, k, v = selfattn.make_qkv(1, 2, 8, 8, 4)
    with pytest.raises(ValueError) as call_error:
        selfattn.attention(q, k, v, backend="naive", **{key: value})
    with pytest.raises(ValueError) as point_error:
        Point(**{key: value}).validate()
    for error in (call_error, point_error):
        text = str(error.value)
        assert text.startswith(message) and "\n" not in text, text


def test_the_transforms_need_the_attention_core_and_dot_scores():
    with pytest.raises(ValueError, match=r"^softcap: .* need scope=core, got scope=layer$"):
        Point(softcap=2.0, scope="layer").validate()
    with pytest.raises(ValueError, match=r"^alibi: .* needs score=dot, got score=additive$"):
        Point(alibi=True, score="additive").validate()
    Point(softcap=2.0, alibi=True, sink=0.0, window=[3, 0]).validate()  # the good spellings pass
