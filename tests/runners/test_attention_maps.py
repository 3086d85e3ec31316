"""runners/attention_maps.py: the naive back end's weights (V = I) against an independent float64 softmax."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from runners import attention_maps as am


def softmax_reference(q: np.ndarray, k: np.ndarray, scale: float, keep: np.ndarray) -> np.ndarray:
    logits = np.where(keep, scale * (q @ k.T), -np.inf)
    logits -= logits.max(axis=1, keepdims=True)
    e = np.exp(logits)
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("d_k", [4, 16, 40])  # below, at and above the 16 keys
@pytest.mark.parametrize("mask", ["none", "causal", "window", "padding", "documents"])
@pytest.mark.parametrize("scaled", [True, False])
def test_weights_are_the_float64_softmax(d_k, mask, scaled):
    n = 16
    g = torch.Generator().manual_seed(d_k)
    q, k = (torch.randn(1, 1, n, d_k, generator=g, dtype=torch.float64) for _ in range(2))
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    docs = torch.tensor([[0] * 5 + [1] * 7 + [2] * 4])
    masks, keep = {
        "none": ({}, np.ones((n, n), bool)),
        "causal": ({"causal": True}, j <= i),
        "window": ({"causal": True, "window": 3}, (j <= i) & (i - j < 3)),
        "padding": ({"key_lengths": torch.tensor([11])}, np.broadcast_to(j < 11, (n, n))),
        "documents": ({"document_ids": docs}, docs[0].numpy()[:, None] == docs[0].numpy()[None, :]),
    }[mask]
    scale = 1 / math.sqrt(d_k) if scaled else 1.0
    got = am.weights(q, k, scale=scale, **masks)[0, 0].numpy()
    want = softmax_reference(q[0, 0].numpy(), k[0, 0].numpy(), scale, keep)
    assert np.allclose(got, want, atol=1e-12, rtol=0)


def test_the_maps_show_saturation_without_the_scale_and_the_masks_shape():
    maps = am.attention_maps(n=32)
    top = maps.groupby(["title", "query"])["weight"].max().groupby("title").mean()
    assert top[f"d_k={am.LARGE_D_K}, unscaled"] > 0.8 > 0.3 > top[f"d_k={am.LARGE_D_K}, scaled 1/√d_k"]
    rows = maps.groupby(["title", "query"])["weight"].sum()
    assert np.allclose(rows, 1.0)
    causal = maps[maps["title"] == "causal"]
    assert (causal.loc[causal["key"] > causal["query"], "weight"] == 0).all()


def test_the_command_writes_the_table_and_the_figure(tmp_path):
    assert am.main(["--out", str(tmp_path), "--n", "16", "--formats", "png"]) == 0
    table = pd.read_csv(tmp_path / "attention_maps.csv")
    assert len(table) == len(am.panels(16)) * 16 * 16
    assert (tmp_path / "figures" / "fig_attention_maps.png").stat().st_size > 10_000
