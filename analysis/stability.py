"""The scaling-stability family's numbers: stability metrics vs head_dim, scaled vs unscaled.

With Q and K entries of standard deviation s, a logit q·k sums d_k products of variance
s^4, so its standard deviation is s²·sqrt(d_k); the 1/sqrt(d_k) scale brings it back to s².
Whether fp16 overflows then depends on where that scale is applied (see predicted_nonfinite_frac).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from scipy import stats

from analysis.slices import Slice, fix_axes, self_attention

METRICS = ("logit_std", "softmax_entropy", "max_weight", "saturated_frac", "grad_norm_q", "grad_norm_k",
           "grad_norm_logits", "nonfinite_frac", "grad_nonfinite_frac")  # grad_norm_logits: NaN in older CSVs
STABILITY_FIXED = ("device_label", "backend", "scope", "mode", "seq_len", "causal", "input_std", "heads", "batch")
STABILITY_VARY = ("head_dim", "scale", "precision")


def stability_slice(rows: pd.DataFrame) -> Slice | None:
    """Scaled and unscaled rows at one value of every other axis, richest in (head_dim, scale, precision)."""
    rows = self_attention(rows)
    rows = rows[rows["scale"].isin(["auto", "none"]) & rows["logit_std"].notna()]
    if rows.empty:
        return None
    # Prefer fwd_bwd: only there are gradient norms measured.
    return fix_axes(rows, STABILITY_FIXED, STABILITY_VARY, prefer={"mode": "fwd_bwd"})


def stability_points(chosen: Slice) -> pd.DataFrame:
    """Median over seeds of every stability metric per (precision, scale, head_dim)."""
    ok = chosen.rows[chosen.rows["status"] == "ok"]
    ok = ok.assign(**{m: np.nan for m in METRICS if m not in ok.columns})  # a frame not from load() may lack newer ones
    return ok.groupby(["precision", "scale", "head_dim"], sort=True)[list(METRICS)].median().reset_index()


def theory_logit_std(head_dim: np.ndarray, scale: str, input_std: float) -> np.ndarray:
    """s²·sqrt(d_k) unscaled, s² scaled: what iid inputs of std s give."""
    d = np.asarray(head_dim, dtype=float)
    return input_std ** 2 * (np.sqrt(d) if scale == "none" else np.ones_like(d))


FP16_MAX = 65504.0  # the largest finite fp16 value; a product past it rounds to inf
FINITE_MAX = {"fp16": FP16_MAX, "bf16": 3.39e38, "fp32": 3.40e38, "tf32": 3.40e38, "fp64": 1.80e308}
# Where the logits are formed decides overflow. Only naive materializes Q K^T in the input dtype:
# with its option scale_at=logits (the default, the chapter's order) the scale comes after that
# product, with scale_at=query before it. The fused kernels (sdpa, chunked) accumulate Q K^T in
# float32 and scale it there, so their logits never pass through fp16 at all.
AFTER, BEFORE, FUSED = "scale after QKᵀ", "scale on Q first", "fused, fp32 product"


def scale_placement(backend: str, backend_options: str) -> str:
    """AFTER, BEFORE (naive's scale_at) or FUSED (every other back end)."""
    if backend != "naive":
        return FUSED
    try:
        options = json.loads(backend_options) if backend_options else {}
    except json.JSONDecodeError:
        options = {}
    return BEFORE if isinstance(options, dict) and options.get("scale_at") == "query" else AFTER


def overflow_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """ok fp16/bf16 self-attention rows with a non-finite fraction, with `placement`, `variant` and
    `predicted` (the Gaussian-tail fraction for where that row's product is formed)."""
    rows = self_attention(rows)
    part = rows[(rows["status"] == "ok") & rows["precision"].isin(["fp16", "bf16"]) & rows["nonfinite_frac"].notna()
                & rows["scale"].isin(["auto", "none"])].copy()
    if part.empty:
        return part.assign(placement=pd.Series(dtype=str), variant=pd.Series(dtype=str),
                           predicted=pd.Series(dtype=float))
    part["placement"] = [scale_placement(b, o) for b, o in zip(part["backend"], part["backend_options"])]
    part["variant"] = part["backend"] + " (" + part["placement"] + ")"
    in_dtype = part["placement"] != FUSED
    unscaled_product = in_dtype & ((part["scale"] == "none") | (part["placement"] == AFTER))
    keys = np.where(part["causal"].astype(bool), (part["seq_len"] + 1) / 2, part["seq_len"])  # mean visible keys
    predicted = np.zeros(len(part))
    for precision in part["precision"].unique():
        mine = (part["precision"] == precision).to_numpy()
        for flag in (True, False):
            sel = mine & in_dtype.to_numpy() & (unscaled_product.to_numpy() == flag)
            predicted[sel] = predicted_nonfinite_frac(part["input_std"].to_numpy()[sel], part["head_dim"].to_numpy()[sel],
                                                      keys[sel], unscaled_product=flag, precision=precision)
    part["predicted"] = predicted
    return part


def predicted_nonfinite_frac(input_std: np.ndarray | float, head_dim: np.ndarray | float, keys: np.ndarray | float,
                             *, unscaled_product: bool, precision: str = "fp16") -> np.ndarray:
    """The fraction of output rows a Gaussian tail predicts to turn inf/NaN.

    A logit q·k of inputs with std s has std s²·√d_k; where that product is formed in the input
    dtype (unscaled, or scaled after the product) a logit past the dtype's largest value becomes
    +inf, and softmax turns that row into NaN: P(row) = 1 - (1 - P(z > max/σ))^keys. Scaled before
    the product the logits have std s², far inside the range. (A logit of -inf alone is harmless:
    its weight is 0.)
    """
    s = np.asarray(input_std, dtype=float)
    d = np.asarray(head_dim, dtype=float)
    sigma = s ** 2 * (np.sqrt(d) if unscaled_product else np.ones_like(d))
    p = stats.norm.sf(FINITE_MAX.get(precision, FP16_MAX) / sigma)
    return -np.expm1(np.asarray(keys, dtype=float) * np.log1p(-p))
