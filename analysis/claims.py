"""The chapter's claims, each checked against the measured rows with a stated rule.

A verdict is computed, never written: `holds` when every measured group passes the rule,
`does not hold` when any group fails it (the evidence says which), `not measured` when
the rows needed are absent. The thresholds are module constants so the report can
print them and tests can reason about them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.cost import causal_ratios, cost_facets
from analysis.fit import fit_power_law
from analysis.slices import number_text
from analysis.stability import stability_points, stability_slice
from selfattn.point import FIELD_NAMES

HOLDS, FAILS, NOT_MEASURED = "holds", "does not hold", "not measured"

QUADRATIC_BAND = (1.7, 2.3)  # fitted exponent of a quadratic cost (fixed costs and caches blur 2.0)
LINEAR_MAX = 1.3  # fitted memory exponent below which a back end counts as O(n) memory
MIN_FIT_SIZES = 3  # a claim uses only fits over at least this many seq_len values...
MAX_CI_HALF_WIDTH = 0.5  # ...whose 95% interval is at most +-this wide (a wider one decides nothing)
CAUSAL_MIN_RATIO = 1.3  # time(no mask)/time(causal) at the largest n that counts as a real saving (ideal 2)
STD_BAND = (0.7, 1.4)  # measured logit std / theory (s² scaled, s²·sqrt(d_k) unscaled)
SQRT_EXPONENT_BAND = (0.35, 0.65)  # fitted exponent of unscaled logit std vs d_k (theory 0.5)
SATURATED_MAX_WEIGHT = 0.5  # unscaled mean largest weight at the largest d_k is at least this...
SATURATION_FACTOR = 2.0  # ...and at least this many times the scaled one
GRAD_VANISH_RATIO = 0.5  # unscaled / scaled gradient norm at the largest d_k below this = "vanishes"
# The witness of "gradients vanish": the median row's ‖∂loss/∂logits‖, the gradient at softmax's input
# (see selfattn/measure/stability.py). Older CSVs lack it; there the ‖∂loss/∂Q‖ rule is used, which is
# a poor witness: it carries √d_k unscaled and a norm over all rows follows the unsaturated few.
GRAD_WITNESS, GRAD_FALLBACK = "grad_norm_logits", "grad_norm_q"
FP16_MAX = 65504.0
OVERFLOW_REGIME_STD = FP16_MAX / 6  # unscaled logit std from which a max over many logits nears FP16_MAX

RULES = {
    "memory_quadratic": f"naive (no mask) memory exponent b within [{QUADRATIC_BAND[0]}, {QUADRATIC_BAND[1]}], "
                        f"on every device and precision (fits over >= {MIN_FIT_SIZES} of the largest sizes with a "
                        f"95% CI no wider than ±{MAX_CI_HALF_WIDTH}; wider ones are listed but not counted)",
    "chunked_linear": f"chunked (no mask) memory exponent b <= {LINEAR_MAX} on every device and precision "
                      "(same fit rule)",
    "compute_quadratic": f"time exponent b of every back end (no mask) within [{QUADRATIC_BAND[0]}, "
                         f"{QUADRATIC_BAND[1]}] (same fit rule)",
    "causal_half": f"some back end's time(no mask)/time(causal) >= {CAUSAL_MIN_RATIO} at the largest n "
                   "(ideal 2n/(n+1)), on every device and precision",
    "scaled_std_one": f"scaled logit std / s² within [{STD_BAND[0]}, {STD_BAND[1]}] at every d_k and precision",
    "unscaled_std_sqrt": f"unscaled logit std / (s²·√d_k) within [{STD_BAND[0]}, {STD_BAND[1]}] at every d_k, "
                         f"and its fitted exponent vs d_k within [{SQRT_EXPONENT_BAND[0]}, {SQRT_EXPONENT_BAND[1]}] "
                         "when >= 3 d_k were measured",
    "unscaled_saturates": f"at the largest d_k: unscaled mean largest weight >= {SATURATED_MAX_WEIGHT} and >= "
                          f"{SATURATION_FACTOR:g}x the scaled one, for every precision",
    "unscaled_grad_vanishes": f"at the largest d_k: unscaled / scaled median per-row ‖∂loss/∂logits‖ (the "
                              f"gradient at softmax's input) < {GRAD_VANISH_RATIO}, for every precision; CSVs "
                              "without grad_norm_logits (older ones): unscaled / scaled ‖∂loss/∂Q‖ < "
                              f"{GRAD_VANISH_RATIO} instead",
    "fp16_overflows": "some unscaled fp16 point has a non-finite output fraction > 0; not measured unless some "
                      f"unscaled fp16 logit std reached {OVERFLOW_REGIME_STD:.0f} (65504/6) or overflowed",
    "scale_prevents_overflow": "wherever unscaled fp16 has non-finite outputs, the scaled twin has a smaller fraction",
}


@dataclass
class Claim:
    key: str
    claim: str  # the chapter's statement
    evidence: str  # the measured numbers, generated from the rows
    verdict: str  # holds | does not hold | not measured
    rule: str
    experiment: str  # what to run when it is not measured


def check_claims(rows: pd.DataFrame) -> list[Claim]:
    time_facets = cost_facets(rows, "time_ms")
    mem_facets = cost_facets(rows, "peak_mem_bytes")
    chosen = stability_slice(rows)
    points = stability_points(chosen) if chosen else pd.DataFrame()
    input_std = float(chosen.fixed.get("input_std", 1.0)) if chosen else 1.0
    return [
        _memory_claim(mem_facets), _chunked_claim(mem_facets), _compute_claim(time_facets),
        _causal_claim(time_facets), _scaled_std_claim(points, input_std), _unscaled_std_claim(points, input_std),
        _saturation_claim(points), _grad_claim(points), *_overflow_claims(rows),
    ]


def _in(value: float, band: tuple[float, float]) -> bool:
    return band[0] <= value <= band[1]


def _verdict(passes: list[bool]) -> str:
    if not passes:
        return NOT_MEASURED
    return HOLDS if all(passes) else FAILS


def _fits(facets, backend: str | None):
    """(facet, line, precise) for every no-mask line fitted over enough sizes; precise: CI narrow enough."""
    for facet in facets:
        for line in facet.lines:
            if line.causal or (backend and line.backend != backend):
                continue
            if line.fit and line.fit.n_points >= MIN_FIT_SIZES:
                precise = (line.fit.ci_high - line.fit.ci_low) / 2 <= MAX_CI_HALF_WIDTH
                yield facet, line, precise


def _noisy(precise: bool) -> str:
    return "" if precise else " (CI too wide, not counted)"


def _cost_experiment(parts: list[str], passes: list[bool]) -> str:
    """What to run: more sizes and longer timing when fits exist but all were too noisy to count."""
    return "quadratic_cost (more seq_len values, longer timing)" if parts and not passes else "quadratic_cost"


def _memory_claim(facets) -> Claim:
    passes, parts = [], []
    for facet, line, precise in _fits(facets, "naive"):
        fit = line.fit
        if precise:
            passes.append(_in(fit.exponent, QUADRATIC_BAND))
        ratio = fit.ratio(4096, 131072)
        parts.append(f"{facet.title}: {fit.label()} over n={fit.n_min:.0f}–{fit.n_max:.0f}, "
                     f"so 4K→128K ×{ratio[0]:,.0f}{_noisy(precise)}")
    return Claim("memory_quadratic", "The materialized attention matrix makes memory grow as n² "
                 "(4K→128K tokens: ×1024)", "; ".join(parts) or "no naive memory fit over >= 3 sizes",
                 _verdict(passes), RULES["memory_quadratic"], _cost_experiment(parts, passes))


def _chunked_claim(facets) -> Claim:
    passes, parts = [], []
    for facet, line, precise in _fits(facets, "chunked"):
        if precise:
            passes.append(line.fit.exponent <= LINEAR_MAX)
        parts.append(f"{facet.title}: {line.fit.label()}{_noisy(precise)}")
    return Claim("chunked_linear", "Exact attention does not need O(n²) memory (chunked online softmax)",
                 "; ".join(parts) or "no chunked memory fit over >= 3 sizes", _verdict(passes),
                 RULES["chunked_linear"], _cost_experiment(parts, passes))


def _compute_claim(facets) -> Claim:
    passes, parts = [], []
    for facet, line, precise in _fits(facets, None):
        if precise:
            passes.append(_in(line.fit.exponent, QUADRATIC_BAND))
        parts.append(f"{facet.title} {line.label}: {line.fit.label()}{_noisy(precise)}")
    return Claim("compute_quadratic", "Attention compute grows as n²", "; ".join(parts)
                 or "no time fit over >= 3 sizes", _verdict(passes), RULES["compute_quadratic"],
                 _cost_experiment(parts, passes))


def _causal_claim(facets) -> Claim:
    passes, parts = [], []
    for facet in facets:
        ratios = causal_ratios(facet)
        if ratios.empty:
            continue
        largest = ratios[ratios["seq_len"] == ratios["seq_len"].max()]
        passes.append(bool((largest["ratio"] >= CAUSAL_MIN_RATIO).any()))
        listed = ", ".join(f"{r.label} ×{r.ratio:.2f}" for r in largest.itertuples())
        parts.append(f"{facet.title} at n={int(largest['seq_len'].iloc[0])}: {listed}")
    return Claim("causal_half", "A causal mask needs only n(n+1)/2 of the n² scores, saving about half",
                 "; ".join(parts) or "no back end timed with and without a mask at the same n", _verdict(passes),
                 RULES["causal_half"], "causal_mask")


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


def _scaled_std_claim(points: pd.DataFrame, input_std: float) -> Claim:
    part = _scaled(points, "auto")
    if part.empty or part["head_dim"].nunique() < 2:
        return Claim("scaled_std_one", "With the 1/√d_k scale the logits' std stays near 1 at any d_k",
                     _too_few(part, "scaled"), NOT_MEASURED, RULES["scaled_std_one"], "scaling_stability")
    ratio = (part["logit_std"] / input_std ** 2).to_numpy() if len(part) else np.array([])
    evidence = f"logit std / s² = {_range_text(ratio)} over {_dk_text(part)}, s={number_text(input_std)}"
    return Claim("scaled_std_one", "With the 1/√d_k scale the logits' std stays near 1 at any d_k", evidence,
                 _verdict([_in(r, STD_BAND) for r in ratio]), RULES["scaled_std_one"], "scaling_stability")


def _unscaled_std_claim(points: pd.DataFrame, input_std: float) -> Claim:
    part = _scaled(points, "none")
    if part.empty or part["head_dim"].nunique() < 2:
        return Claim("unscaled_std_sqrt", "Without it the logits' std grows as √d_k (≈22.6 at d_k=512)",
                     _too_few(part, "unscaled"), NOT_MEASURED, RULES["unscaled_std_sqrt"],
                     "scaling_stability")
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
    return Claim("unscaled_std_sqrt", "Without it the logits' std grows as √d_k (≈22.6 at d_k=512)", evidence,
                 _verdict(passes), RULES["unscaled_std_sqrt"], "scaling_stability")


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


def _saturation_claim(points: pd.DataFrame) -> Claim:
    passes, parts = [], []
    entropy = {(p, d): (s, u) for p, d, s, u in _pairs_at_largest_dk(points, "softmax_entropy")}
    for precision, d, scaled, unscaled in _pairs_at_largest_dk(points, "max_weight"):
        passes.append(unscaled >= SATURATED_MAX_WEIGHT and unscaled >= SATURATION_FACTOR * scaled)
        text = f"{precision} d_k={number_text(d)}: max weight {unscaled:.2f} unscaled vs {scaled:.3f} scaled"
        if (precision, d) in entropy:
            s, u = entropy[(precision, d)]
            text += f", entropy {u:.2f} vs {s:.2f}"
        parts.append(text)
    return Claim("unscaled_saturates", "Unscaled, the softmax saturates towards one-hot as d_k grows",
                 "; ".join(parts) or "no max weight measured both with and without the scale", _verdict(passes),
                 RULES["unscaled_saturates"], "scaling_stability")


def _grad_claim(points: pd.DataFrame) -> Claim:
    passes, parts = [], []
    witness = {p: (d, s, u) for p, d, s, u in _pairs_at_largest_dk(points, GRAD_WITNESS)}
    fallback = {p: (d, s, u) for p, d, s, u in _pairs_at_largest_dk(points, GRAD_FALLBACK)}
    for precision in sorted(set(witness) | set(fallback)):  # per precision: a merge may mix old and new CSVs
        d, scaled, unscaled = witness.get(precision) or fallback[precision]
        if scaled <= 0:
            continue
        ratio = unscaled / scaled
        passes.append(ratio < GRAD_VANISH_RATIO)
        if precision in witness:
            parts.append(f"{precision} d_k={number_text(d)}: median per-row ‖∂L/∂logits‖ {unscaled:.3g} unscaled "
                         f"vs {scaled:.3g} scaled (ratio {ratio:.2g})")
        else:
            # Unscaled logits are sqrt(d_k) x larger, so their gradient carries that factor before any
            # saturation; the ratio / sqrt(d_k) is what the softmax itself contributes.
            parts.append(f"{precision} d_k={number_text(d)}: ‖∂L/∂Q‖ {unscaled:.3g} unscaled vs {scaled:.3g} scaled "
                         f"(ratio {ratio:.2g}; ÷√d_k: {ratio / d ** 0.5:.2g}; no grad_norm_logits in these rows, "
                         "so the ‖∂L/∂Q‖ rule)")
    return Claim("unscaled_grad_vanishes", "…and its gradients vanish", "; ".join(parts)
                 or "no gradient norm measured both ways (needs mode=fwd_bwd)", _verdict(passes),
                 RULES["unscaled_grad_vanishes"], "scaling_stability (mode=fwd_bwd)")


# The same point on the same device but for its scale.
TWIN_KEY = ["device_label", *(name for name in FIELD_NAMES if name not in ("device", "scale"))]


def _overflow_claims(rows: pd.DataFrame) -> list[Claim]:
    fp16 = rows[(rows["precision"] == "fp16") & (rows["status"] == "ok") & rows["nonfinite_frac"].notna()]
    unscaled = fp16[fp16["scale"] == "none"]
    claim_a, claim_b = ("In fp16, unscaled logits pass 65504 and turn into inf/NaN",
                        "The 1/√d_k scale keeps fp16 finite where unscaled overflows")
    if unscaled.empty:
        return [Claim("fp16_overflows", claim_a, "no unscaled fp16 rows", NOT_MEASURED, RULES["fp16_overflows"],
                      "scaling_stability (precision=fp16, large input_std)"),
                Claim("scale_prevents_overflow", claim_b, "no unscaled fp16 rows", NOT_MEASURED,
                      RULES["scale_prevents_overflow"], "scaling_stability (precision=fp16, large input_std)")]
    bad = unscaled[unscaled["nonfinite_frac"] > 0]
    if bad.empty:
        top_std = float(unscaled["logit_std"].max())
        evidence_a = (f"0 of {len(unscaled)} unscaled fp16 points non-finite (up to d_k="
                      f"{number_text(float(unscaled['head_dim'].max()))}, s={number_text(float(unscaled['input_std'].max()))}"
                      f", largest logit std {top_std:.3g})")
        if not top_std >= OVERFLOW_REGIME_STD:  # the sweep never came near 65504: it tested nothing
            evidence_a += f", never near the overflow regime (std >= {OVERFLOW_REGIME_STD:.0f})"
            return [Claim("fp16_overflows", claim_a, evidence_a, NOT_MEASURED, RULES["fp16_overflows"],
                          "scaling_stability (precision=fp16, input_std large enough that s²·√d_k > 11000)"),
                    Claim("scale_prevents_overflow", claim_b, "unscaled fp16 never reached the overflow regime",
                          NOT_MEASURED, RULES["scale_prevents_overflow"],
                          "scaling_stability (precision=fp16, larger input_std)")]
    else:
        first = bad.sort_values(["input_std", "head_dim"]).iloc[0]
        evidence_a = (f"{len(bad)} of {len(unscaled)} unscaled fp16 points non-finite (max fraction "
                      f"{bad['nonfinite_frac'].max():.2f}); first at d_k={number_text(float(first['head_dim']))}, "
                      f"s={number_text(float(first['input_std']))}")
    a = Claim("fp16_overflows", claim_a, evidence_a, HOLDS if len(bad) else FAILS, RULES["fp16_overflows"],
              "scaling_stability (precision=fp16, large input_std)")
    twins = bad.merge(fp16[fp16["scale"] == "auto"][TWIN_KEY + ["nonfinite_frac"]], on=TWIN_KEY,
                      suffixes=("", "_scaled"))
    if twins.empty:
        evidence_b = "no scaled twin of an overflowing unscaled fp16 point" if len(bad) else "unscaled fp16 never overflowed"
        b = Claim("scale_prevents_overflow", claim_b, evidence_b, NOT_MEASURED, RULES["scale_prevents_overflow"],
                  "scaling_stability (precision=fp16, large input_std)")
    else:
        better = twins["nonfinite_frac_scaled"] < twins["nonfinite_frac"]
        evidence_b = (f"scaled twin has a smaller non-finite fraction at {int(better.sum())} of {len(twins)} "
                      f"overflowing points (scaled max {twins['nonfinite_frac_scaled'].max():.2f} vs unscaled "
                      f"max {twins['nonfinite_frac'].max():.2f})")
        b = Claim("scale_prevents_overflow", claim_b, evidence_b, _verdict(list(better)),
                  RULES["scale_prevents_overflow"], "scaling_stability (precision=fp16, large input_std)")
    return [a, b]


def claims_frame(claims: list[Claim]) -> pd.DataFrame:
    return pd.DataFrame([c.__dict__ for c in claims])

