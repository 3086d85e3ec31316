"""Dot-product against additive scores (Vaswani et al. 2017, 3.2.1): "much faster and more space-efficient
in practice" than additive attention of the same complexity.

Rows of score=additive (naive's materialised Bahdanau scores, selfattn/additive.py) are paired with the
dot-product rows of the same point (every axis but the back end and the score: n, d_k, heads, batch, mask,
precision, mode, device) on naive and on sdpa; the claim reads both ratios at every such point.
"""

from __future__ import annotations

import pandas as pd

from analysis.claim import Evidence, claim
from analysis.cost import _options, memory_metric, variant_names
from analysis.slices import number_text, plain_rows

EXPERIMENT = "additive"
MATCH = ("device_label", "precision", "scope", "mode", "batch", "heads", "kv_heads", "q_len", "seq_len", "head_dim",
         "causal", "window", "pad_frac", "documents", "input_std")
DOT_BACKENDS = ("naive", "sdpa")  # the materialised dot product and the fused one


def _naive_defaults(text: str) -> bool:
    """naive's options at their defaults (the same path additive scores take: no upcast, the scale after QKᵀ)."""
    options = _options(text) or {}
    return not options.get("upcast_softmax", False) and options.get("scale_at", "logits") == "logits"


def additive_ratios(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (point, dot back end): the additive row's time and memory over the dot-product row's (fastest repeat
    of each, the memory of that repeat); empty without an additive row."""
    ok = rows[(rows["status"] == "ok") & (rows["time_ms"] > 0) & (rows["scale"] == "auto")]
    ok = plain_rows(ok, vary=("score", *MATCH))  # at every point of MATCH, masks included
    ok = ok[variant_names(ok) == ok["backend"]]  # eager code only: a compiled variant is other code
    metric = memory_metric(ok)
    additive = ok[(ok["score"] == "additive") & (ok["backend"] == "naive")]
    dot = ok[(ok["score"] == "dot") & ok["backend"].isin(DOT_BACKENDS)]
    dot = dot[(dot["backend"] != "naive") | dot["backend_options"].map(_naive_defaults)]
    columns = [*MATCH, "backend", "time_ratio", "mem_ratio", "metric"]
    if additive.empty or dot.empty:
        return pd.DataFrame(columns=columns)
    keys = list(MATCH)

    def fastest(part: pd.DataFrame, by: list[str]) -> pd.DataFrame:
        return part.sort_values("time_ms").drop_duplicates(by, keep="first")[[*by, "time_ms", metric]]

    add = fastest(additive, keys)
    dots = fastest(dot, [*keys, "backend"])
    both = dots.merge(add, on=keys, suffixes=("_dot", "_add"), how="inner")  # NaN axes match NaN in pandas merges
    both = both.assign(time_ratio=both["time_ms_add"] / both["time_ms_dot"],
                       mem_ratio=both[f"{metric}_add"] / both[f"{metric}_dot"], metric=metric)
    return both[columns]


@claim("dot_beats_additive", "Dot-product attention is faster and more space-efficient than additive attention "
       "(vᵀ tanh(W_q q + W_k k)) of the same complexity",
       rule="at every point measured with additive scores (naive) and with the dot product (naive, sdpa), every other "
            "axis equal: time(additive) / time(dot) > 1 and peak memory(additive) / peak memory(dot) > 1, for each "
            "dot-product back end (fastest repeat of each; memory: the allocator's peak where measured)",
       experiment=EXPERIMENT, metrics=("memory",))
def dot_beats_additive(rows: pd.DataFrame) -> Evidence:
    ratios = additive_ratios(rows)
    if ratios.empty:
        return Evidence("no point measured with both additive and dot-product scores")
    passes, parts = [], []
    for backend, part in ratios.groupby("backend", sort=True):
        passes += [bool(r > 1) for r in part["time_ratio"]] + [bool(r > 1) for r in part["mem_ratio"]]
        n = sorted(part["seq_len"].astype(int).unique())
        d = sorted(part["head_dim"].astype(int).unique())
        parts.append(f"vs {backend} ({len(part)} points, n={n[0]}–{n[-1]}, d_k={d[0]}–{d[-1]}): time "
                     f"×{part['time_ratio'].min():.3g}–{part['time_ratio'].max():.3g}, memory "
                     f"×{part['mem_ratio'].min():.3g}–{part['mem_ratio'].max():.3g}")
    return Evidence("additive / dot product — " + "; ".join(parts), tuple(passes))
