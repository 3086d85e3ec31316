"""The chapter's claims on what attention is, not what it costs: permutation equivariance, d_k = d_model / h,
and its worked softmax example (arithmetic, checked here so the chapter's numbers are computed too)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.claim import Evidence, claim
from analysis.slices import plain_rows

# max |attn(PQ,PK,PV) - P attn(Q,K,V)| still counted as equal: a few roundings of outputs of size ~1
# (summing in another order); a causal mask must break it by far more.
PERM_TOLERANCE = {"fp64": 1e-12, "fp32": 1e-5, "tf32": 1e-2, "bf16": 3e-2, "fp16": 4e-3}
PERM_BROKEN_MIN = 0.1
HEAD_GROUP = ["device_label", "precision", "backend", "backend_options", "scope", "mode", "batch", "seq_len", "causal",
              "scale", "input_std", "d_model", "score", "pos_enc"]
SOFTMAX_EXAMPLE = ((2.0, 1.0, 0.5), (0.63, 0.23, 0.14))  # the chapter's worked example, to 2 decimals


@claim("permutation_equivariant", "Self-attention is permutation equivariant: permuting the tokens permutes the "
       "outputs (a causal mask breaks it: what a token sees depends on its position)",
       rule="rows without a positional encoding (pos_enc=none); without a mask, every back end's max |attn(PQ,PK,PV) - P attn(Q,K,V)| <= its precision's tolerance "
            f"({', '.join(f'{p} {t:g}' for p, t in PERM_TOLERANCE.items())}); with a causal mask, every back end's "
            f"> {PERM_BROKEN_MIN} (the mask breaks it)",
       metrics=("permutation",), experiment="quick")
def permutation_equivariant(rows: pd.DataFrame) -> Evidence:
    # without a positional encoding (each encoding breaking it is a claim of analysis/positions.py), a window,
    # padding or ALiBi (each ties what a token sees to its position); dot-product and additive scores alike
    ok = plain_rows(rows[(rows["status"] == "ok") & rows["perm_max_abs_diff"].notna()], vary=("score",))
    if ok.empty:
        return Evidence("no row has perm_max_abs_diff")
    passes, parts = [], []
    for causal, part in ok.groupby("causal", sort=True):
        worst = part.groupby(["backend", "precision"], sort=True)["perm_max_abs_diff"].max()
        texts = []
        for (backend, precision), diff in worst.items():
            tolerance = PERM_TOLERANCE.get(str(precision), 1e-3)
            passes.append(bool(diff > PERM_BROKEN_MIN if causal else diff <= tolerance))
            texts.append(f"{backend} {precision} {diff:.2g}")
        parts.append(("causal (must break): " if causal else "no mask: ") + ", ".join(texts))
    return Evidence("max |attn(PQ,PK,PV) − P·attn(Q,K,V)| per back end; " + "; ".join(parts), tuple(passes))


@claim("head_dim_split", "d_k = d_model / h: splitting a fixed width into h heads changes d_k, not the work",
       rule="in every row at a fixed d_model with two or more head counts: heads x d_k = d_model, and the counted "
            "FLOPs per call equal across head counts (relative spread < 1e-9)",
       experiment="heads")
def head_dim_split(rows: pd.DataFrame) -> Evidence:
    ok = plain_rows(rows[(rows["status"] == "ok") & rows["d_model"].notna() & rows["flops"].notna()], vary=HEAD_GROUP)
    groups = [g for _, g in ok.groupby(HEAD_GROUP, dropna=False) if g["heads"].nunique() >= 2]
    if not groups:
        return Evidence("no d_model measured with two or more head counts")
    passes, parts = [], []
    for g in groups:
        split = bool(((g["heads"] * g["head_dim"]) == g["d_model"]).all())
        spread = float((g["flops"].max() - g["flops"].min()) / g["flops"].max())
        passes += [split, spread < 1e-9]
        heads = sorted(g["heads"].astype(int).unique())
        parts.append(f"{g['backend'].iloc[0]} d_model={int(g['d_model'].iloc[0])}, n={int(g['seq_len'].iloc[0])}: "
                     f"h={heads[0]}–{heads[-1]} gives d_k={int(g['head_dim'].max())}–{int(g['head_dim'].min())}, "
                     f"h·d_k=d_model in {'every' if split else 'not every'} row; FLOPs "
                     f"{g['flops'].median() / 1e9:.3g} G, spread {spread:.1g}")
    return Evidence("; ".join(parts), tuple(passes))


@claim("softmax_example", "The worked example: softmax(2.0, 1.0, 0.5) = (0.63, 0.23, 0.14)",
       rule="softmax(2.0, 1.0, 0.5) rounded to 2 decimals equals (0.63, 0.23, 0.14) exactly (computed, not measured: "
            "the chapter's arithmetic)",
       experiment="none (arithmetic)")
def softmax_example(rows: pd.DataFrame) -> Evidence:
    logits, expected = SOFTMAX_EXAMPLE
    x = np.asarray(logits)
    weights = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    exact = tuple(round(float(w), 2) for w in weights) == expected
    evidence = (f"softmax({', '.join(map(str, logits))}) = ({', '.join(f'{w:.4f}' for w in weights)}), rounded "
                f"({', '.join(f'{w:.2f}' for w in weights)})")
    return Evidence(evidence, (exact,))
