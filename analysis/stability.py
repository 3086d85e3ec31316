"""The scaling-stability family's numbers: stability metrics vs head_dim, scaled vs unscaled.

With Q and K entries of standard deviation s, a logit q·k sums d_k products of variance
s^4, so its standard deviation is s²·sqrt(d_k); the 1/sqrt(d_k) scale brings it back to s².
"""

from __future__ import annotations

import numpy as np
import pandas as pd

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
