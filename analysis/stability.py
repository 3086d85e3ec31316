"""The scaling-stability family's numbers: stability metrics vs head_dim, scaled vs unscaled.

With Q and K entries of standard deviation s, a logit q·k sums d_k products of variance
s^4, so its standard deviation is s²·sqrt(d_k); the 1/sqrt(d_k) scale brings it back to s².
Whether fp16 overflows then depends on where that scale is applied (see predicted_nonfinite_frac;
the overflow claims are in analysis.overflow). The four claims on the scale's effect are here.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from analysis.claim import Evidence, claim, per_rows
from analysis.fit import fit_power_law
from analysis.slices import Slice, fix_axes, number_text, self_attention

METRICS = ("logit_std", "softmax_entropy", "max_weight", "saturated_frac", "grad_norm_q", "grad_norm_k",
           "grad_norm_logits", "nonfinite_frac", "grad_nonfinite_frac")
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
    p = _normal_sf(FINITE_MAX.get(precision, FP16_MAX) / sigma)
    return -np.expm1(np.asarray(keys, dtype=float) * np.log1p(-p))


_erfc = np.frompyfunc(math.erfc, 1, 1)


def _normal_sf(z: np.ndarray | float) -> np.ndarray:
    """P(Z > z) for a standard normal Z (as scipy.stats.norm.sf, without importing scipy.stats)."""
    return 0.5 * np.asarray(_erfc(np.asarray(z, dtype=float) / math.sqrt(2.0)), dtype=float)


STD_BAND = (0.7, 1.4)  # measured logit std / theory (s² scaled, s²·sqrt(d_k) unscaled)
SQRT_EXPONENT_BAND = (0.35, 0.65)  # fitted exponent of unscaled logit std vs d_k (theory 0.5)
SATURATED_MAX_WEIGHT = 0.5  # unscaled mean largest weight at the largest d_k is at least this...
SATURATION_FACTOR = 2.0  # ...and at least this many times the scaled one
GRAD_VANISH_RATIO = 0.5  # unscaled / scaled gradient norm at the largest d_k below this = "vanishes"
# The witness of "gradients vanish": the median row's ‖∂loss/∂logits‖, the gradient at softmax's input
# (see selfattn/measure/stability.py). ‖∂loss/∂Q‖ would be a poor one: it carries √d_k unscaled, and a
# norm over all rows follows the unsaturated few.
GRAD_WITNESS = "grad_norm_logits"
EXPERIMENT = "scaling_stability"


@per_rows
def _points(rows: pd.DataFrame) -> tuple[pd.DataFrame, float]:
    """The chosen slice's points (stability_points) and its input std: what the four claims below read."""
    chosen = stability_slice(rows)
    points = stability_points(chosen) if chosen else pd.DataFrame()
    return points, float(chosen.fixed.get("input_std", 1.0)) if chosen else 1.0


def _in(value: float, band: tuple[float, float]) -> bool:
    return band[0] <= value <= band[1]


def _scaled(points: pd.DataFrame, scale: str) -> pd.DataFrame:
    if points.empty:
        return points
    part = points[(points["scale"] == scale) & np.isfinite(points["logit_std"])]
    return part[part["logit_std"] > 0]


def _range_text(values: np.ndarray) -> str:
    return f"{np.min(values):.2f}–{np.max(values):.2f}"


def _too_few(part: pd.DataFrame, which: str) -> str:
    if part.empty:
        return f"no {which} rows with a logit std"
    return f"{which} logit std measured at d_k={number_text(float(part['head_dim'].iloc[0]))} only; needs two or more d_k"


def _dk_text(part: pd.DataFrame) -> str:
    d = sorted(part["head_dim"].unique())
    return f"d_k={number_text(float(d[0]))}–{number_text(float(d[-1]))} ({', '.join(sorted(part['precision'].unique()))})"


@claim("scaled_std_one", "With the 1/√d_k scale the logits' std stays near 1 at any d_k",
       rule=f"scaled logit std / s² within [{STD_BAND[0]}, {STD_BAND[1]}] at every d_k and precision",
       metrics=("stability",), experiment=EXPERIMENT)
def scaled_std_one(rows: pd.DataFrame) -> Evidence:
    points, input_std = _points(rows)
    part = _scaled(points, "auto")
    if part.empty or part["head_dim"].nunique() < 2:
        return Evidence(_too_few(part, "scaled"))
    ratio = (part["logit_std"] / input_std ** 2).to_numpy()
    evidence = f"logit std / s² = {_range_text(ratio)} over {_dk_text(part)}, s={number_text(input_std)}"
    return Evidence(evidence, tuple(_in(r, STD_BAND) for r in ratio))


@claim("unscaled_std_sqrt", "Without it the logits' std grows as √d_k (≈22.6 at d_k=512)",
       rule=f"unscaled logit std / (s²·√d_k) within [{STD_BAND[0]}, {STD_BAND[1]}] at every d_k, and its fitted "
            f"exponent vs d_k within [{SQRT_EXPONENT_BAND[0]}, {SQRT_EXPONENT_BAND[1]}] when >= 3 d_k were measured",
       metrics=("stability",), experiment=EXPERIMENT)
def unscaled_std_sqrt(rows: pd.DataFrame) -> Evidence:
    points, input_std = _points(rows)
    part = _scaled(points, "none")
    if part.empty or part["head_dim"].nunique() < 2:
        return Evidence(_too_few(part, "unscaled"))
    ratio = (part["logit_std"] / (input_std ** 2 * np.sqrt(part["head_dim"]))).to_numpy()
    passes = [_in(r, STD_BAND) for r in ratio]
    evidence = f"logit std / (s²·√d_k) = {_range_text(ratio)} over {_dk_text(part)}"
    for precision, group in part.groupby("precision"):
        if group["head_dim"].nunique() >= 3:
            fit = fit_power_law(group["head_dim"].to_numpy(), group["logit_std"].to_numpy(),
                                min_points=10**6)  # all d_k: no fixed overhead here
            if fit:
                passes.append(_in(fit.exponent, SQRT_EXPONENT_BAND))
                evidence += f"; {precision}: std ∝ d_k^{fit.exponent:.2f}"
    largest = part[part["head_dim"] == part["head_dim"].max()]
    evidence += f"; at d_k={number_text(float(largest['head_dim'].iloc[0]))}: std {largest['logit_std'].median():.1f}"
    return Evidence(evidence, tuple(passes))


def _pairs_at_largest_dk(points: pd.DataFrame, metric: str) -> list[tuple[str, float, float, float]]:
    """(precision, d_k, scaled value, unscaled value) at the largest d_k measured both ways."""
    out = []
    if points.empty:
        return out
    for precision, group in points.groupby("precision", sort=True):
        both = group[np.isfinite(group[metric])].pivot_table(index="head_dim", columns="scale", values=metric)
        if not {"auto", "none"} <= set(both.columns):
            continue
        both = both.dropna(subset=["auto", "none"])
        if both.empty:
            continue
        d = float(both.index.max())
        out.append((str(precision), d, float(both.loc[d, "auto"]), float(both.loc[d, "none"])))
    return out


@claim("unscaled_saturates", "Unscaled, the softmax saturates towards one-hot as d_k grows",
       rule=f"at the largest d_k: unscaled mean largest weight >= {SATURATED_MAX_WEIGHT} and >= "
            f"{SATURATION_FACTOR:g}x the scaled one, for every precision",
       metrics=("stability",), experiment=EXPERIMENT)
def unscaled_saturates(rows: pd.DataFrame) -> Evidence:
    points, _ = _points(rows)
    passes, parts = [], []
    entropy = {(p, d): (s, u) for p, d, s, u in _pairs_at_largest_dk(points, "softmax_entropy")}
    for precision, d, scaled, unscaled in _pairs_at_largest_dk(points, "max_weight"):
        passes.append(unscaled >= SATURATED_MAX_WEIGHT and unscaled >= SATURATION_FACTOR * scaled)
        text = f"{precision} d_k={number_text(d)}: max weight {unscaled:.2f} unscaled vs {scaled:.3f} scaled"
        if (precision, d) in entropy:
            s, u = entropy[(precision, d)]
            text += f", entropy {u:.2f} vs {s:.2f}"
        parts.append(text)
    return Evidence("; ".join(parts) or "no max weight measured both with and without the scale", tuple(passes))


@claim("unscaled_grad_vanishes", "…and its gradients vanish",
       rule=f"at the largest d_k: unscaled / scaled median per-row ‖∂loss/∂logits‖ (the gradient at softmax's "
            f"input) < {GRAD_VANISH_RATIO}, for every precision",
       metrics=("stability",), experiment=f"{EXPERIMENT} (mode=fwd_bwd)")
def unscaled_grad_vanishes(rows: pd.DataFrame) -> Evidence:
    points, _ = _points(rows)
    passes, parts = [], []
    for precision, d, scaled, unscaled in _pairs_at_largest_dk(points, GRAD_WITNESS):
        if scaled <= 0:
            continue
        ratio = unscaled / scaled
        passes.append(ratio < GRAD_VANISH_RATIO)
        parts.append(f"{precision} d_k={number_text(d)}: median per-row ‖∂L/∂logits‖ {unscaled:.3g} unscaled "
                     f"vs {scaled:.3g} scaled (ratio {ratio:.2g})")
    return Evidence("; ".join(parts) or "no gradient norm measured both ways (needs mode=fwd_bwd)", tuple(passes))
