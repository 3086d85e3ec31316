"""The chapter's cost claims, judged from the cost lines of analysis.cost (figures 1-4 read the same lines).

Memory, chunked memory and compute are judged by analysis.growth (a cost model, not a local slope:
see there why); the causal saving by the time ratio. The thresholds are module constants so the
rules print them and tests can reason about them.
"""

from __future__ import annotations

import pandas as pd

from analysis.claim import Evidence, claim, per_rows, shared_rule
from analysis.cost import Facet, causal_ratios, cost_facets, memory_metric
from analysis.fit import upper_sizes
from analysis.growth import (
    DECIDING_SHARE, DOMINANT_SHARE, LINEAR, MAX_CI_HALF_WIDTH, MIN_FIT_SIZES, NEGLIGIBLE_SHARE, QUADRATIC,
    QUADRATIC_BAND, SUB_QUADRATIC, UNDECIDED, Growth,
)

__all__ = ["LINEAR_MAX", "MAX_CI_HALF_WIDTH", "MIN_FIT_SIZES", "QUADRATIC_BAND"]  # compiled.py's fit rule reads them

LINEAR_MAX = 1.3  # fitted memory exponent below which a back end counts as O(n) memory
CAUSAL_MIN_RATIO = 1.3  # time(no mask)/time(causal) at the largest n that counts as a real saving (ideal 2)
GROWTH_RULE = shared_rule("the growth rule", (
    f"A line is quadratic when its Theil-Sen exponent b over the larger sizes (the top 1.5 octaves, >= "
    f"{MIN_FIT_SIZES} sizes) lies in [{QUADRATIC_BAND[0]}, {QUADRATIC_BAND[1]}] with a 95% CI no wider than "
    f"±{MAX_CI_HALF_WIDTH}, or when the cost model fixed + linear·n + quadratic·n² (non-negative least squares on "
    f"relative residuals over every size; 95% interval from a residual bootstrap) follows the rows (rms log "
    f"residual within twice the scatter between repeats, at least 3%) and its n² term is >= {DOMINANT_SHARE:.0%} "
    f"of the cost at the largest n (interval's lower end), unless one straight log-log line below the band "
    f"follows every size as well; linear when the model follows the rows and its n² share stays below "
    f"{NEGLIGIBLE_SHARE:.0%} (upper end); sub-quadratic when one straight log-log line with its whole CI below "
    f"{QUADRATIC_BAND[0]} follows every size at least as well as the model and b's whole CI (the larger sizes, "
    f"precise) is below {QUADRATIC_BAND[0]} too; otherwise not decided, with the n at "
    f"which the model's n² term would reach {DECIDING_SHARE:.0%}"))
EXPERIMENT = "quadratic_cost"
MORE = f"{EXPERIMENT} (more seq_len values, longer timing)"  # what to run where a line was not decided


def _evidence(parts: list[str], passes: list[bool], undecided: list[str], empty: str) -> Evidence:
    return Evidence("; ".join(parts) or empty, tuple(passes), tuple(undecided), MORE if undecided else None)


@per_rows
def _time_facets(rows: pd.DataFrame):
    return cost_facets(rows, "time_ms")


@per_rows
def _memory_facets(rows: pd.DataFrame):
    # Memory claims read the allocator's exact peak: RSS moves by MiBs with the OS, enough to void a fit of
    # an O(n) back end whose whole peak is a few MiB.
    return cost_facets(rows, memory_metric(rows))


def _growths(facets: list[Facet], backend: str | None = None):
    """(facet, line, growth) for every no-mask line (of `backend`, when given) fitted over enough sizes."""
    for facet in facets:
        for line in facet.lines:
            if line.causal or (backend and line.backend != backend) or not line.fit:
                continue
            if line.fit.n_points >= MIN_FIT_SIZES:
                yield facet, line, line.growth


def _undecided(where: str, growth: Growth) -> str:
    return f"{where}: {growth.need_text()}"


def _memory_ratio(growth: Growth) -> str:
    """The 4K->128K growth the power law implies, and the model's where it follows the rows."""
    text = f"4K→128K ×{growth.fit.ratio(4096, 131072)[0]:,.0f}"
    model = growth.model
    if model and model.fits:
        text += f" (model: ×{float(model.predict(131072) / model.predict(4096)):,.0f})"
    return text


@claim("memory_quadratic", "The materialized attention matrix makes memory grow as n² (4K→128K tokens: ×1024)",
       rule=f"naive (no mask) memory, the allocator's exact peak, quadratic on every device and precision; does not "
            f"hold where it is linear or sub-quadratic. {GROWTH_RULE}",
       metrics=("memory",), experiment=EXPERIMENT)
def memory_quadratic(rows: pd.DataFrame) -> Evidence:
    passes, undecided, parts = [], [], []
    for facet, _line, growth in _growths(_memory_facets(rows), "naive"):
        parts.append(f"{facet.title}: {growth.text()}; {_memory_ratio(growth)}")
        if growth.kind == UNDECIDED:
            undecided.append(_undecided(facet.title, growth))
        else:
            passes.append(growth.kind == QUADRATIC)
    return _evidence(parts, passes, undecided, "no naive memory measured at >= 3 sizes")


@claim("chunked_linear", "Exact attention does not need O(n²) memory (chunked online softmax)",
       rule=f"chunked (no mask) memory, the allocator's exact peak, on every device and precision: holds where it is "
            f"linear, or its exponent b <= {LINEAR_MAX} with a precise CI; does not hold where it is quadratic. "
            f"{GROWTH_RULE}",
       metrics=("memory",), experiment=EXPERIMENT)
def chunked_linear(rows: pd.DataFrame) -> Evidence:
    passes, undecided, parts = [], [], []
    for facet, line, growth in _growths(_memory_facets(rows), "chunked"):
        fit = growth.fit
        by_exponent = (fit.ci_high - fit.ci_low) / 2 <= MAX_CI_HALF_WIDTH and fit.exponent <= LINEAR_MAX
        low = growth.kind == LINEAR or by_exponent
        if low and growth.kind != LINEAR:  # the evidence names what decided, never a judgement the verdict overrules
            parts.append(f"{facet.title}: {fit.label()}"
                         + (f"; {growth.model.label()}" if growth.model else "")
                         + f": at most linear by its exponent (b <= {LINEAR_MAX}, CI ±{MAX_CI_HALF_WIDTH} or narrower)")
        else:
            parts.append(f"{facet.title}: {growth.text()}")
        if low or growth.kind == QUADRATIC:
            passes.append(low)
        else:
            undecided.append(_undecided(facet.title, growth))
    return _evidence(parts, passes, undecided, "no chunked memory measured at >= 3 sizes")


@claim("compute_quadratic", "Attention compute grows as n²",
       rule="per device and precision (no mask): every back end whose time is decided is quadratic, and at least "
            "one is (a back end not decided at these sizes is named with the n it needs); does not hold where a "
            f"back end's time is linear or sub-quadratic. Each size's time is the faster of its repeats. {GROWTH_RULE}",
       experiment=EXPERIMENT)
def compute_quadratic(rows: pd.DataFrame) -> Evidence:
    passes, undecided, parts = [], [], []
    for facet in _time_facets(rows):
        kinds, waiting, judged = [], [], []
        for _facet, line, growth in _growths([facet]):
            judged.append((f"{facet.title} {line.label}: {growth.text()}", growth.kind))
            if growth.kind == UNDECIDED:
                waiting.append(f"{line.label} {growth.need_text()}")
            kinds.append(growth.kind)
        # beside a quadratic line the rule counts only the decided ones: an undecided line's text says so
        counted_only = QUADRATIC in kinds and not any(kind in (LINEAR, SUB_QUADRATIC) for kind in kinds)
        parts += [text + (", not counted" if counted_only and kind == UNDECIDED else "") for text, kind in judged]
        if any(kind in (LINEAR, SUB_QUADRATIC) for kind in kinds):
            passes.append(False)
        elif QUADRATIC in kinds:
            passes.append(True)
        elif waiting:
            undecided.append(f"{facet.title}: " + ", ".join(waiting))
    return _evidence(parts, passes, undecided, "no time measured at >= 3 sizes")


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
