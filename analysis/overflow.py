"""The chapter's two fp16 overflow claims, read from analysis.stability's overflow rows.

Unscaled, a logit of std s²·√d_k formed in fp16 passes 65504 as a Gaussian tail predicts; the
1/√d_k scale keeps it finite only when applied before the product (naive's scale_at=query, as
fused kernels do), not after QKᵀ (scale_at=logits, the chapter's order). Figure 6 draws these rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.claim import Evidence, claim, per_rows
from analysis.slices import number_text
from analysis.stability import AFTER, BEFORE, FP16_MAX, FUSED, overflow_rows

OVERFLOW_REGIME_STD = FP16_MAX / 6  # unscaled logit std from which a max over many logits nears FP16_MAX
PREDICTION_TOLERANCE = 0.25  # |measured - Gaussian-tail predicted| non-finite fraction (32 sampled rows: binomial noise)
# One overflow point: everything but the back end's variant and the scale.
OVERFLOW_KEY = ["device_label", "precision", "scope", "mode", "batch", "heads", "seq_len", "head_dim", "causal",
                "input_std", "seed"]
OVERFLOW_EXPERIMENT = "scaling_stability (precision=fp16, large input_std)"


@dataclass(frozen=True)
class _Fp16:
    naive: pd.DataFrame  # fp16 rows whose product is formed in fp16 (naive, either placement)
    unscaled: pd.DataFrame  # of those, the unscaled ones
    bad: pd.DataFrame  # of those, the ones with non-finite outputs
    fused_text: str  # what the fused back ends did, appended to both claims' evidence

    @property
    def in_regime(self) -> bool:
        """Some unscaled point overflowed, or its logit std reached the regime where a max nears 65504."""
        return not self.bad.empty or float(self.unscaled["logit_std"].max()) >= OVERFLOW_REGIME_STD


@per_rows
def _fp16(rows: pd.DataFrame) -> _Fp16:
    fp16 = overflow_rows(rows)
    fp16 = fp16[fp16["precision"] == "fp16"]
    naive = fp16[fp16["placement"] != FUSED]
    unscaled = naive[naive["scale"] == "none"]
    fused = fp16[fp16["placement"] == FUSED]
    fused_text = (f"; fused back ends ({', '.join(sorted(fused['backend'].unique()))}): "
                  f"{int((fused['nonfinite_frac'] > 0).sum())} of {len(fused)} points non-finite, scaled or not "
                  "(QKᵀ accumulates in fp32)") if len(fused) else ""
    return _Fp16(naive, unscaled, unscaled[unscaled["nonfinite_frac"] > 0], fused_text)


@claim("fp16_overflows", "In fp16, unscaled logits pass 65504 and turn into inf/NaN, as the Gaussian tail predicts",
       rule="naive (the product formed in fp16) unscaled: some point non-finite, and at every point the measured "
            f"non-finite fraction within ±{PREDICTION_TOLERANCE} of the Gaussian-tail prediction "
            "1-(1-P(z > 65504/(s²·√d_k)))^n; not measured unless some unscaled fp16 logit std reached "
            f"{OVERFLOW_REGIME_STD:.0f} (65504/6) or overflowed",
       metrics=("accuracy", "stability"), experiment=OVERFLOW_EXPERIMENT)
def fp16_overflows(rows: pd.DataFrame) -> Evidence:
    f = _fp16(rows)
    unscaled, bad = f.unscaled, f.bad
    if unscaled.empty:
        return Evidence("no unscaled naive fp16 rows")
    if not f.in_regime:
        return Evidence(f"0 of {len(unscaled)} unscaled fp16 points non-finite (up to d_k="
                        f"{number_text(float(unscaled['head_dim'].max()))}, s={number_text(float(unscaled['input_std'].max()))}),"
                        f" never near the overflow regime (std >= {OVERFLOW_REGIME_STD:.0f})",
                        experiment="scaling_stability (precision=fp16, input_std large enough that s²·√d_k > 11000)")
    off = (unscaled["nonfinite_frac"] - unscaled["predicted"]).abs()
    first = bad.sort_values(["input_std", "head_dim"]).iloc[0] if len(bad) else None
    evidence = (f"naive: {len(bad)} of {len(unscaled)} unscaled points non-finite"
                + (f", first at d_k={number_text(float(first['head_dim']))}, s={number_text(float(first['input_std']))}"
                   if first is not None else "")
                + f"; measured vs predicted fraction differs by at most {off.max():.2f}" + f.fused_text)
    return Evidence(evidence, (len(bad) > 0, bool((off <= PREDICTION_TOLERANCE).all())))


@claim("scale_prevents_overflow", "The 1/√d_k scale keeps fp16 finite only when applied before the product (on Q, as "
       "fused kernels do); after QKᵀ, the chapter's order, the product has already overflowed",
       rule="wherever unscaled naive fp16 has non-finite outputs: the scaled twin with the scale on Q first "
            "(scale_at=query) is finite, and the scaled twin with the scale after QKᵀ (scale_at=logits) is non-finite "
            f"within ±{PREDICTION_TOLERANCE} of the unscaled fraction",
       metrics=("accuracy", "stability"), experiment=OVERFLOW_EXPERIMENT)
def scale_prevents_overflow(rows: pd.DataFrame) -> Evidence:
    f = _fp16(rows)
    if f.unscaled.empty:
        return Evidence("no unscaled naive fp16 rows")
    if not f.in_regime:
        return Evidence("unscaled fp16 never reached the overflow regime")
    worst = f.bad.groupby(OVERFLOW_KEY, dropna=False)["nonfinite_frac"].max().rename("unscaled_frac").reset_index()
    scaled = f.naive[f.naive["scale"] == "auto"]
    twins = worst.merge(scaled[OVERFLOW_KEY + ["placement", "nonfinite_frac"]], on=OVERFLOW_KEY)
    before, after = twins[twins["placement"] == BEFORE], twins[twins["placement"] == AFTER]
    if worst.empty or before.empty or after.empty:
        missing = "unscaled fp16 never overflowed" if worst.empty else \
            "no scaled twin with the scale both before and after QKᵀ (naive scale_at=query and logits)"
        return Evidence(missing + f.fused_text, experiment=OVERFLOW_EXPERIMENT + " with backend.scale_at=logits,query")
    before_ok = before["nonfinite_frac"] == 0
    after_ok = (after["nonfinite_frac"] - after["unscaled_frac"]).abs() <= PREDICTION_TOLERANCE
    evidence = (f"at the {len(worst)} points where unscaled naive overflows (up to {worst['unscaled_frac'].max():.2f} of "
                f"outputs): scale on Q first finite at {int(before_ok.sum())} of {len(before)} (max fraction "
                f"{before['nonfinite_frac'].max():.2f}); scale after QKᵀ non-finite as unscaled at "
                f"{int(after_ok.sum())} of {len(after)} (max fraction {after['nonfinite_frac'].max():.2f})" + f.fused_text)
    return Evidence(evidence, tuple(bool(ok) for ok in [*before_ok, *after_ok]))
