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

from scipy import stats

from analysis.cost import causal_ratios, cost_facets, crossover_n, layer_shares, memory_metric
from analysis.fit import fit_power_law, pooled_fit, upper_sizes
from analysis.slices import number_text
from analysis.stability import AFTER, BEFORE, FUSED, overflow_rows, stability_points, stability_slice

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
PREDICTION_TOLERANCE = 0.25  # |measured - Gaussian-tail predicted| non-finite fraction (32 sampled rows: binomial noise)
# max |attn(PQ,PK,PV) - P attn(Q,K,V)| still counted as equal: a few roundings of outputs of size ~1
# (summing in another order); a causal mask must break it by far more.
PERM_TOLERANCE = {"fp64": 1e-12, "fp32": 1e-5, "tf32": 1e-2, "bf16": 3e-2, "fp16": 4e-3}
PERM_BROKEN_MIN = 0.1
SOFTMAX_EXAMPLE = ((2.0, 1.0, 0.5), (0.63, 0.23, 0.14))  # the chapter's worked example, to 2 decimals
CROSSOVER_FACTOR = 4.0  # measured n where the core takes half the layer's time, within this factor of 2·d_model

RULES = {
    "memory_quadratic": f"naive (no mask) memory exponent b within [{QUADRATIC_BAND[0]}, {QUADRATIC_BAND[1]}], "
                        f"on every device and precision, memory being the allocator's exact peak (Theil-Sen fits over "
                        f">= {MIN_FIT_SIZES} of the largest sizes, the top 1.5 octaves, with a 95% CI no wider than "
                        f"±{MAX_CI_HALF_WIDTH}; wider ones are listed but not counted)",
    "chunked_linear": f"chunked (no mask) memory exponent b <= {LINEAR_MAX} on every device and precision "
                      "(same fit rule)",
    "compute_quadratic": f"time exponent b of every back end (no mask) within [{QUADRATIC_BAND[0]}, "
                         f"{QUADRATIC_BAND[1]}] (same fit rule; each size's time the faster of its repeats); where no "
                         "line is precise alone, the exponent all lines of the panel share (back ends and masks: "
                         "Sen's estimator over every line's pairwise slopes, interval from the summed Kendall "
                         "variance) decides by the same band and CI rule",
    "causal_half": f"some back end's time(no mask)/time(causal), median over the fitted sizes (the top 1.5 octaves), "
                   f">= {CAUSAL_MIN_RATIO} (ideal 2n/(n+1)), on every device and precision",
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
    "fp16_overflows": "naive (the product formed in fp16) unscaled: some point non-finite, and at every point the "
                      f"measured non-finite fraction within ±{PREDICTION_TOLERANCE} of the Gaussian-tail prediction "
                      "1-(1-P(z > 65504/(s²·√d_k)))^n; not measured unless some unscaled fp16 logit std reached "
                      f"{OVERFLOW_REGIME_STD:.0f} (65504/6) or overflowed",
    "scale_prevents_overflow": "wherever unscaled naive fp16 has non-finite outputs: the scaled twin with the scale on Q "
                               "first (scale_at=query) is finite, and the scaled twin with the scale after QKᵀ "
                               f"(scale_at=logits) is non-finite within ±{PREDICTION_TOLERANCE} of the unscaled fraction",
    "permutation_equivariant": "without a mask, every back end's max |attn(PQ,PK,PV) - P attn(Q,K,V)| <= its precision's "
                               f"tolerance ({', '.join(f'{p} {t:g}' for p, t in PERM_TOLERANCE.items())}); with a causal "
                               f"mask, every back end's > {PERM_BROKEN_MIN} (the mask breaks it)",
    "head_dim_split": "in every row at a fixed d_model with two or more head counts: heads x d_k = d_model, and the "
                      "counted FLOPs per call equal across head counts (relative spread < 1e-9)",
    "softmax_example": "softmax(2.0, 1.0, 0.5) rounded to 2 decimals equals (0.63, 0.23, 0.14) exactly (computed, "
                       "not measured: the chapter's arithmetic)",
    "layer_crossover": "scope=layer vs scope=core at the same points: per back end, the core's share of the layer's "
                       "time rises with n (Theil-Sen slope > 0) and crosses 1/2 within the measured n, within a factor "
                       f"{CROSSOVER_FACTOR:g} of the FLOP crossover n = 2·d_model",
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
    # Memory claims read the allocator's exact peak: RSS moves by MiBs with the OS, enough to void a fit of
    # an O(n) back end whose whole peak is a few MiB.
    mem_facets = cost_facets(rows, memory_metric(rows))
    chosen = stability_slice(rows)
    points = stability_points(chosen) if chosen else pd.DataFrame()
    input_std = float(chosen.fixed.get("input_std", 1.0)) if chosen else 1.0
    return [
        _memory_claim(mem_facets), _chunked_claim(mem_facets), _compute_claim(time_facets),
        _causal_claim(time_facets), _scaled_std_claim(points, input_std), _unscaled_std_claim(points, input_std),
        _saturation_claim(points), _grad_claim(points), *_overflow_claims(rows), _permutation_claim(rows),
        _head_split_claim(rows), _softmax_example_claim(), _layer_claim(rows),
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
    for facet in facets:
        precise_here = False
        for _facet, line, precise in _fits([facet], None):
            if precise:
                passes.append(_in(line.fit.exponent, QUADRATIC_BAND))
                precise_here = True
            parts.append(f"{facet.title} {line.label}: {line.fit.label()}{_noisy(precise)}")
        if precise_here:
            continue
        # No line alone is precise (a busy machine): the exponent all lines share, from every line's
        # pairwise slopes together, has several times the slopes and so a narrower interval.
        pooled = pooled_fit([(line.points["seq_len"].to_numpy(), line.points["value"].to_numpy())
                             for line in facet.lines if line.fit and line.fit.n_points >= MIN_FIT_SIZES])
        if pooled is not None:
            precise = (pooled.ci_high - pooled.ci_low) / 2 <= MAX_CI_HALF_WIDTH
            if precise:
                passes.append(_in(pooled.exponent, QUADRATIC_BAND))
            parts.append(f"{facet.title}, no line precise alone, exponent shared by all {len(facet.lines)} lines "
                         f"(back ends x masks): {pooled.label()}{_noisy(precise)}")
    return Claim("compute_quadratic", "Attention compute grows as n²", "; ".join(parts)
                 or "no time fit over >= 3 sizes", _verdict(passes), RULES["compute_quadratic"],
                 _cost_experiment(parts, passes))


def _causal_claim(facets) -> Claim:
    passes, parts = [], []
    for facet in facets:
        ratios = causal_ratios(facet)
        if ratios.empty:
            continue
        # The median over the fitted sizes, not the largest n alone: one point slowed by load must not decide.
        top = ratios[ratios["seq_len"].isin(upper_sizes(ratios["seq_len"].to_numpy()))]
        medians = top.groupby("label", sort=True)["ratio"].median()
        passes.append(bool((medians >= CAUSAL_MIN_RATIO).any()))
        listed = ", ".join(f"{label} ×{ratio:.2f}" for label, ratio in medians.items())
        parts.append(f"{facet.title}, median over n={int(top['seq_len'].min())}–{int(top['seq_len'].max())}: {listed}")
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


# One overflow point: everything but the back end's variant and the scale.
OVERFLOW_KEY = ["device_label", "precision", "scope", "mode", "batch", "heads", "seq_len", "head_dim", "causal",
                "input_std", "seed"]
OVERFLOW_EXPERIMENT = "scaling_stability (precision=fp16, large input_std)"


def _overflow_claims(rows: pd.DataFrame) -> list[Claim]:
    claim_a = "In fp16, unscaled logits pass 65504 and turn into inf/NaN, as the Gaussian tail predicts"
    claim_b = ("The 1/√d_k scale keeps fp16 finite only when applied before the product (on Q, as fused kernels "
               "do); after QKᵀ, the chapter's order, the product has already overflowed")
    fp16 = overflow_rows(rows)
    fp16 = fp16[fp16["precision"] == "fp16"]
    naive = fp16[fp16["placement"] != FUSED]
    unscaled = naive[naive["scale"] == "none"]
    fused = fp16[fp16["placement"] == FUSED]
    fused_text = (f"; fused back ends ({', '.join(sorted(fused['backend'].unique()))}): "
                  f"{int((fused['nonfinite_frac'] > 0).sum())} of {len(fused)} points non-finite, scaled or not "
                  "(QKᵀ accumulates in fp32)") if len(fused) else ""
    if unscaled.empty:
        return [Claim("fp16_overflows", claim_a, "no unscaled naive fp16 rows", NOT_MEASURED, RULES["fp16_overflows"],
                      OVERFLOW_EXPERIMENT),
                Claim("scale_prevents_overflow", claim_b, "no unscaled naive fp16 rows", NOT_MEASURED,
                      RULES["scale_prevents_overflow"], OVERFLOW_EXPERIMENT)]
    bad = unscaled[unscaled["nonfinite_frac"] > 0]
    off = (unscaled["nonfinite_frac"] - unscaled["predicted"]).abs()
    if bad.empty and not float(unscaled["logit_std"].max()) >= OVERFLOW_REGIME_STD:
        evidence = (f"0 of {len(unscaled)} unscaled fp16 points non-finite (up to d_k="
                    f"{number_text(float(unscaled['head_dim'].max()))}, s={number_text(float(unscaled['input_std'].max()))}),"
                    f" never near the overflow regime (std >= {OVERFLOW_REGIME_STD:.0f})")
        return [Claim("fp16_overflows", claim_a, evidence, NOT_MEASURED, RULES["fp16_overflows"],
                      "scaling_stability (precision=fp16, input_std large enough that s²·√d_k > 11000)"),
                Claim("scale_prevents_overflow", claim_b, "unscaled fp16 never reached the overflow regime",
                      NOT_MEASURED, RULES["scale_prevents_overflow"], OVERFLOW_EXPERIMENT)]
    evidence_a = (f"naive: {len(bad)} of {len(unscaled)} unscaled points non-finite"
                  + (f", first at d_k={number_text(float(bad.sort_values(['input_std', 'head_dim']).iloc[0]['head_dim']))}, "
                     f"s={number_text(float(bad.sort_values(['input_std', 'head_dim']).iloc[0]['input_std']))}" if len(bad) else "")
                  + f"; measured vs predicted fraction differs by at most {off.max():.2f}" + fused_text)
    a = Claim("fp16_overflows", claim_a, evidence_a, _verdict([len(bad) > 0, bool((off <= PREDICTION_TOLERANCE).all())]),
              RULES["fp16_overflows"], OVERFLOW_EXPERIMENT)

    worst = bad.groupby(OVERFLOW_KEY, dropna=False)["nonfinite_frac"].max().rename("unscaled_frac").reset_index()
    scaled = naive[naive["scale"] == "auto"]
    twins = worst.merge(scaled[OVERFLOW_KEY + ["placement", "nonfinite_frac"]], on=OVERFLOW_KEY)
    before, after = twins[twins["placement"] == BEFORE], twins[twins["placement"] == AFTER]
    if worst.empty or before.empty or after.empty:
        missing = "unscaled fp16 never overflowed" if worst.empty else \
            "no scaled twin with the scale both before and after QKᵀ (naive scale_at=query and logits)"
        return [a, Claim("scale_prevents_overflow", claim_b, missing + fused_text, NOT_MEASURED,
                         RULES["scale_prevents_overflow"], OVERFLOW_EXPERIMENT + " with backend.scale_at=logits,query")]
    before_ok = before["nonfinite_frac"] == 0
    after_ok = (after["nonfinite_frac"] - after["unscaled_frac"]).abs() <= PREDICTION_TOLERANCE
    evidence_b = (f"at the {len(worst)} points where unscaled naive overflows (up to {worst['unscaled_frac'].max():.2f} of "
                  f"outputs): scale on Q first finite at {int(before_ok.sum())} of {len(before)} (max fraction "
                  f"{before['nonfinite_frac'].max():.2f}); scale after QKᵀ non-finite as unscaled at "
                  f"{int(after_ok.sum())} of {len(after)} (max fraction {after['nonfinite_frac'].max():.2f})" + fused_text)
    b = Claim("scale_prevents_overflow", claim_b, evidence_b, _verdict([*before_ok, *after_ok]),
              RULES["scale_prevents_overflow"], OVERFLOW_EXPERIMENT)
    return [a, b]


def _permutation_claim(rows: pd.DataFrame) -> Claim:
    claim = ("Self-attention is permutation equivariant: permuting the tokens permutes the outputs (a causal mask "
             "breaks it: what a token sees depends on its position)")
    ok = rows[(rows["status"] == "ok") & rows["perm_max_abs_diff"].notna()] if "perm_max_abs_diff" in rows else rows[:0]
    if ok.empty:
        return Claim("permutation_equivariant", claim, "no row has perm_max_abs_diff", NOT_MEASURED,
                     RULES["permutation_equivariant"], "quick")
    passes, parts = [], []
    for causal, part in ok.groupby("causal", sort=True):
        worst = part.groupby(["backend", "precision"], sort=True)["perm_max_abs_diff"].max()
        texts = []
        for (backend, precision), diff in worst.items():
            tolerance = PERM_TOLERANCE.get(str(precision), 1e-3)
            passes.append(diff > PERM_BROKEN_MIN if causal else diff <= tolerance)
            texts.append(f"{backend} {precision} {diff:.2g}")
        parts.append(("causal (must break): " if causal else "no mask: ") + ", ".join(texts))
    return Claim("permutation_equivariant", claim, "max |attn(PQ,PK,PV) − P·attn(Q,K,V)| per back end; "
                 + "; ".join(parts), _verdict(passes), RULES["permutation_equivariant"], "quick")


HEAD_GROUP = ["device_label", "precision", "backend", "backend_options", "scope", "mode", "batch", "seq_len", "causal",
              "scale", "input_std", "d_model"]


def _head_split_claim(rows: pd.DataFrame) -> Claim:
    claim = "d_k = d_model / h: splitting a fixed width into h heads changes d_k, not the work"
    ok = rows[(rows["status"] == "ok") & rows["d_model"].notna() & rows["flops"].notna()]
    groups = [g for _, g in ok.groupby(HEAD_GROUP, dropna=False) if g["heads"].nunique() >= 2]
    if not groups:
        return Claim("head_dim_split", claim, "no d_model measured with two or more head counts", NOT_MEASURED,
                     RULES["head_dim_split"], "heads")
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
    return Claim("head_dim_split", claim, "; ".join(parts), _verdict(passes), RULES["head_dim_split"], "heads")


def _softmax_example_claim() -> Claim:
    logits, expected = SOFTMAX_EXAMPLE
    x = np.asarray(logits)
    weights = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    exact = tuple(round(float(w), 2) for w in weights) == expected
    evidence = (f"softmax({', '.join(map(str, logits))}) = ({', '.join(f'{w:.4f}' for w in weights)}), rounded "
                f"({', '.join(f'{w:.2f}' for w in weights)})")
    return Claim("softmax_example", "The worked example: softmax(2.0, 1.0, 0.5) = (0.63, 0.23, 0.14)", evidence,
                 HOLDS if exact else FAILS, RULES["softmax_example"], "none (arithmetic)")


def _layer_claim(rows: pd.DataFrame) -> Claim:
    claim = ("In a layer, the projections cost 8·n·d_model² and attention 4·n²·d_model: attention dominates "
             "beyond n ≈ 2·d_model")
    shares = layer_shares(rows)
    keys = ["device_label", "precision", "backend", "backend_options", "d_model"]
    groups = [(k, g) for k, g in shares.groupby(keys, sort=True) if g["seq_len"].nunique() >= 3] if len(shares) else []
    if not groups:
        return Claim("layer_crossover", claim, "no back end timed with scope=layer and scope=core at 3 or more n",
                     NOT_MEASURED, RULES["layer_crossover"], "quick (grid layer: scope=core,layer)")
    passes, parts = [], []
    for (device, precision, backend, _options, d_model), g in groups:
        slope = stats.theilslopes(g["share"].to_numpy(), np.log(g["seq_len"].to_numpy(dtype=float)))[0]
        cross = crossover_n(g["seq_len"].to_numpy(), g["share"].to_numpy())
        theory = 2.0 * float(d_model)
        near = bool(np.isfinite(cross) and theory / CROSSOVER_FACTOR <= cross <= theory * CROSSOVER_FACTOR)
        passes += [slope > 0, near]
        shown = ", ".join(f"{int(n)}: {v:.2f}" for n, v in zip(g["seq_len"], g["share"]))
        where = f"crosses 1/2 at n≈{cross:.0f}" if np.isfinite(cross) else "never crosses 1/2 in the measured n"
        parts.append(f"{backend} ({precision}, d_model={int(d_model)}): core share of layer time {shown}; {where} "
                     f"(FLOP crossover {theory:.0f})")
    return Claim("layer_crossover", claim, "; ".join(parts), _verdict(passes), RULES["layer_crossover"],
                 "quick (grid layer: scope=core,layer)")


def claims_frame(claims: list[Claim]) -> pd.DataFrame:
    return pd.DataFrame([c.__dict__ for c in claims])

