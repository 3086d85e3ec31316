"""Does a line's cost grow as n², as n, or can these sizes not tell? The cost claims' one judgement.

Three descriptions of one line (a back end's time or memory against seq_len) are weighed:

- the power law over the larger sizes (analysis.fit, Theil-Sen): its exponent b is the figures'
  legend, and where b sits in the band around 2 with a narrow interval, the n² growth is plain;
- the cost model over every size (analysis.costmodel: fixed + linear + n², non-negative terms): where
  it follows the rows, its n² share at the largest n says whether the n² work is most of the cost
  there, even while fixed and per-row costs hold the local slope below 2;
- one straight log-log line over every size: rows that follow n^1.5 at every size are not
  "fixed + linear + n²" (whose slopes must rise), and where that line describes them better than the
  model does, and the larger sizes' own exponent is below the band too, the growth is sub-quadratic.

Each judgement needs its evidence to be clear; otherwise the line is `undecided`, with the n at which
the model's n² term would reach DECIDING_SHARE (the sizes to run), never a guess.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from analysis.costmodel import MIN_MODEL_SIZES, CostModel, fit_cost_model, repeat_noise
from analysis.fit import PowerFit, fit_power_law
from scipy.stats import theilslopes

QUADRATIC_BAND = (1.7, 2.3)  # fitted exponent of a visibly quadratic cost
MIN_FIT_SIZES = 3  # a power-law fit counts over at least this many sizes...
MAX_CI_HALF_WIDTH = 0.5  # ...when its 95% interval is at most +-this wide
DOMINANT_SHARE = 0.5  # the n² term carries at least this share at the largest n (lower bound of its interval)
NEGLIGIBLE_SHARE = 0.25  # the n² term's share stays below this (upper bound): the cost grows as n
DECIDING_SHARE = 0.8  # "needs n >= ...": where the model's n² term would reach this share

QUADRATIC, SUB_QUADRATIC, LINEAR, UNDECIDED = "quadratic", "sub-quadratic", "linear", "undecided"


@dataclass(frozen=True)
class Straight:
    """One power law y = c·n^b over every size (Theil-Sen), and how far the rows sit from it."""
    exponent: float
    ci_low: float
    ci_high: float
    residual: float  # rms log residual


@dataclass(frozen=True)
class Growth:
    kind: str  # quadratic | sub-quadratic | linear | undecided
    reason: str  # the evidence behind `kind`, one clause
    fit: PowerFit | None  # the larger sizes' power law (the legend's b)
    model: CostModel | None
    straight: Straight | None
    needs_n: float = math.nan  # undecided: the n at which the model's n² term would reach DECIDING_SHARE

    def text(self) -> str:
        """'b=1.67 [1.51, 1.79]; n² 78% [70, 84] at n=3072: quadratic (...)': what an evidence cell shows."""
        parts = [self.fit.label() if self.fit else "no power-law fit"]
        if self.model:
            parts.append(self.model.label())
        return "; ".join(parts) + f": {self.kind} ({self.reason})"

    def need_text(self) -> str:
        if math.isfinite(self.needs_n):
            return f"needs n >= {_round_up(self.needs_n)}"
        if self.model is None:  # the evidence says "too few sizes for the model": the verdict names how many
            return f"needs {MIN_MODEL_SIZES} or more sizes"
        return "needs more sizes or steadier timing"


def _round_up(n: float) -> int:
    """A size worth typing: n rounded up to 2 significant binary digits (3072, 4096, 6144, ...)."""
    step = 2 ** max(0, math.floor(math.log2(n)) - 1)
    return int(math.ceil(n / step) * step)


def _straight(n: np.ndarray, y: np.ndarray) -> Straight | None:
    sizes = np.unique(n)
    if len(sizes) < 3:
        return None
    log_n = np.log(sizes)
    log_y = np.log([float(np.median(y[n == s])) for s in sizes])
    slope, intercept, low, high = theilslopes(log_y, log_n, alpha=0.95, method="separate")
    residual = float(np.sqrt(np.mean((log_y - intercept - slope * log_n) ** 2)))
    return Straight(float(slope), float(low), float(high), residual)


def per_size(n: np.ndarray, y: np.ndarray, reduce: str) -> tuple[np.ndarray, np.ndarray]:
    """One value per size: the fastest repeat for time (load only adds time), the median otherwise."""
    sizes = np.unique(n)
    pick = np.min if reduce == "min" else np.median
    return sizes, np.array([float(pick(y[n == s])) for s in sizes])


def judge_growth(n: np.ndarray, y: np.ndarray, *, reduce: str = "median") -> Growth:
    """Judge one line from every measured (n, y), repeats included (their scatter is the noise)."""
    n = np.asarray(n, dtype=float)
    y = np.asarray(y, dtype=float)
    good = np.isfinite(n) & np.isfinite(y) & (n > 0) & (y > 0)
    n, y = n[good], y[good]
    sizes, values = per_size(n, y, reduce)
    fit = fit_power_law(sizes, values)
    model = fit_cost_model(sizes, values, noise=repeat_noise(n, y))
    straight = _straight(sizes, values)
    precise = bool(fit and fit.n_points >= MIN_FIT_SIZES and (fit.ci_high - fit.ci_low) / 2 <= MAX_CI_HALF_WIDTH)
    in_band = bool(precise and QUADRATIC_BAND[0] <= fit.exponent <= QUADRATIC_BAND[1])
    # A straight log-log line below the band that describes the rows at least as well as the cost model,
    # and the larger sizes' own exponent below the band as well (its whole CI): over every size a line is
    # flattened by the small sizes' fixed costs, and timing noise of 10-20% (a shared VM) can make rows
    # whose slopes rise look straight. chunked on this CPU: n^1.52 [1.41, 1.62] over every size (rms 8%),
    # its larger sizes b = 1.59 [1.45, 1.90], the model's n² term 71% [64, 93] at n = 3072: it took the
    # lazy step from 3 key blocks a query block on (n >= 1536), so its slope fell after n = 1024.
    straight_sub = bool(straight and model and straight.ci_high < QUADRATIC_BAND[0]
                        and straight.residual <= model.tolerance and straight.residual <= model.residual
                        and precise and fit.ci_high < QUADRATIC_BAND[0])

    def growth(kind: str, reason: str, needs_n: float = math.nan) -> Growth:
        return Growth(kind, reason, fit, model, straight, needs_n)

    if in_band:
        return growth(QUADRATIC, f"b within [{QUADRATIC_BAND[0]}, {QUADRATIC_BAND[1]}], CI ±{MAX_CI_HALF_WIDTH} or narrower")
    if model and model.fits and model.share_low >= DOMINANT_SHARE and not straight_sub:
        return growth(QUADRATIC, f"the model follows the rows and its n² term is >= {DOMINANT_SHARE:.0%} of the "
                      f"cost at n={model.n_max:.0f}")
    if model and model.fits and model.share_high < NEGLIGIBLE_SHARE:
        return growth(LINEAR, f"the model's n² term stays below {NEGLIGIBLE_SHARE:.0%} of the cost")
    if straight_sub:
        return growth(SUB_QUADRATIC, f"one power law n^{straight.exponent:.2f} [{straight.ci_low:.2f}, "
                      f"{straight.ci_high:.2f}] follows every size (rms {100 * straight.residual:.0f}%), "
                      "as the rising slopes of fixed + linear + n² cannot")
    needs = model.n_for_share(DECIDING_SHARE) if model and model.fits else math.nan
    if model and not model.fits:
        reason = "the model does not follow the rows and b is not plainly in the band"
    elif model and model.share_high < DOMINANT_SHARE:
        reason = f"the n² term is present but under {DOMINANT_SHARE:.0%} of the cost at n={model.n_max:.0f}"
    elif model:
        reason = f"the n² term's share at n={model.n_max:.0f} spans {DOMINANT_SHARE:.0%}"
    else:
        reason = f"too few sizes for the model (it needs {MIN_MODEL_SIZES})"
    return growth(UNDECIDED, reason, needs if needs > (model.n_max if model else 0) else math.nan)

