"""The chapter's cost claims, judged from the cost lines of analysis.cost (figures 1-4 read the same lines).

Memory, chunked memory, compute and the causal saving. The thresholds are module constants so the
rules print them and tests can reason about them.
"""

from __future__ import annotations

import pandas as pd

from analysis.claim import Evidence, claim, per_rows
from analysis.cost import causal_ratios, cost_facets, memory_metric
from analysis.fit import pooled_fit, upper_sizes

QUADRATIC_BAND = (1.7, 2.3)  # fitted exponent of a quadratic cost (fixed costs and caches blur 2.0)
LINEAR_MAX = 1.3  # fitted memory exponent below which a back end counts as O(n) memory
MIN_FIT_SIZES = 3  # a claim uses only fits over at least this many seq_len values...
MAX_CI_HALF_WIDTH = 0.5  # ...whose 95% interval is at most +-this wide (a wider one decides nothing)
CAUSAL_MIN_RATIO = 1.3  # time(no mask)/time(causal) at the largest n that counts as a real saving (ideal 2)
FIT_RULE = (f"Theil-Sen fits over >= {MIN_FIT_SIZES} of the largest sizes, the top 1.5 octaves, with a 95% CI no "
            f"wider than ±{MAX_CI_HALF_WIDTH}; wider ones are listed but not counted")
EXPERIMENT = "quadratic_cost"


def _in(value: float, band: tuple[float, float]) -> bool:
    return band[0] <= value <= band[1]


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


def _evidence(parts: list[str], passes: list[bool], empty: str) -> Evidence:
    """More sizes and longer timing are what to run when fits exist but all were too noisy to count."""
    more = f"{EXPERIMENT} (more seq_len values, longer timing)" if parts and not passes else None
    return Evidence("; ".join(parts) or empty, tuple(passes), experiment=more)


@per_rows
def _time_facets(rows: pd.DataFrame):
    return cost_facets(rows, "time_ms")


@per_rows
def _memory_facets(rows: pd.DataFrame):
    # Memory claims read the allocator's exact peak: RSS moves by MiBs with the OS, enough to void a fit of
    # an O(n) back end whose whole peak is a few MiB.
    return cost_facets(rows, memory_metric(rows))


@claim("memory_quadratic", "The materialized attention matrix makes memory grow as n² (4K→128K tokens: ×1024)",
       rule=f"naive (no mask) memory exponent b within [{QUADRATIC_BAND[0]}, {QUADRATIC_BAND[1]}], on every device "
            f"and precision, memory being the allocator's exact peak ({FIT_RULE})",
       experiment=EXPERIMENT)
def memory_quadratic(rows: pd.DataFrame) -> Evidence:
    passes, parts = [], []
    for facet, line, precise in _fits(_memory_facets(rows), "naive"):
        fit = line.fit
        if precise:
            passes.append(_in(fit.exponent, QUADRATIC_BAND))
        ratio = fit.ratio(4096, 131072)
        parts.append(f"{facet.title}: {fit.label()} over n={fit.n_min:.0f}–{fit.n_max:.0f}, "
                     f"so 4K→128K ×{ratio[0]:,.0f}{_noisy(precise)}")
    return _evidence(parts, passes, "no naive memory fit over >= 3 sizes")


@claim("chunked_linear", "Exact attention does not need O(n²) memory (chunked online softmax)",
       rule=f"chunked (no mask) memory exponent b <= {LINEAR_MAX} on every device and precision (same fit rule)",
       experiment=EXPERIMENT)
def chunked_linear(rows: pd.DataFrame) -> Evidence:
    passes, parts = [], []
    for facet, line, precise in _fits(_memory_facets(rows), "chunked"):
        if precise:
            passes.append(line.fit.exponent <= LINEAR_MAX)
        parts.append(f"{facet.title}: {line.fit.label()}{_noisy(precise)}")
    return _evidence(parts, passes, "no chunked memory fit over >= 3 sizes")


@claim("compute_quadratic", "Attention compute grows as n²",
       rule=f"time exponent b of every back end (no mask) within [{QUADRATIC_BAND[0]}, {QUADRATIC_BAND[1]}] (same "
            "fit rule; each size's time the faster of its repeats); where no line is precise alone, the exponent all "
            "lines of the panel share (back ends and masks: Sen's estimator over every line's pairwise slopes, "
            "interval from the summed Kendall variance) decides by the same band and CI rule",
       experiment=EXPERIMENT)
def compute_quadratic(rows: pd.DataFrame) -> Evidence:
    passes, parts = [], []
    for facet in _time_facets(rows):
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
    return _evidence(parts, passes, "no time fit over >= 3 sizes")


@claim("causal_half", "A causal mask needs only n(n+1)/2 of the n² scores, saving about half",
       rule=f"some back end's time(no mask)/time(causal), median over the fitted sizes (the top 1.5 octaves), "
            f">= {CAUSAL_MIN_RATIO} (ideal 2n/(n+1)), on every device and precision",
       experiment="causal_mask")
def causal_half(rows: pd.DataFrame) -> Evidence:
    passes, parts = [], []
    for facet in _time_facets(rows):
        ratios = causal_ratios(facet)
        if ratios.empty:
            continue
        # The median over the fitted sizes, not the largest n alone: one point slowed by load must not decide.
        top = ratios[ratios["seq_len"].isin(upper_sizes(ratios["seq_len"].to_numpy()))]
        medians = top.groupby("label", sort=True)["ratio"].median()
        passes.append(bool((medians >= CAUSAL_MIN_RATIO).any()))
        listed = ", ".join(f"{label} ×{ratio:.2f}" for label, ratio in medians.items())
        parts.append(f"{facet.title}, median over n={int(top['seq_len'].min())}–{int(top['seq_len'].max())}: {listed}")
    return Evidence("; ".join(parts) or "no back end timed with and without a mask at the same n", tuple(passes))
