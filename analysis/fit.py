"""Power-law fits y = c * n^b by least squares of log y on log n, with a 95% interval on b.

Only the larger sizes enter the fit: at small n fixed overheads (kernel launches, Python,
allocator pages) dominate and would pull the exponent towards 0. The rule: the upper half
of the distinct sizes, but at least `min_points` of them (all of them when fewer exist).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class PowerFit:
    exponent: float
    ci_low: float  # 95% interval on the exponent; NaN with only two sizes
    ci_high: float
    prefactor: float  # c in y = c * n^b
    n_points: int  # distinct sizes used
    n_min: float  # smallest and largest size used
    n_max: float

    def predict(self, n: np.ndarray | float) -> np.ndarray | float:
        return self.prefactor * np.power(n, self.exponent)

    def ratio(self, n_from: float, n_to: float) -> tuple[float, float, float]:
        """y(n_to)/y(n_from) the fit predicts, with the ratio's 95% interval."""
        factor = math.log(n_to / n_from)
        return (math.exp(self.exponent * factor), math.exp(self.ci_low * factor),
                math.exp(self.ci_high * factor))

    def label(self) -> str:
        """'b=2.01 [1.95, 2.07]': exponent and its 95% interval, as legends and tables show it."""
        if math.isnan(self.ci_low):
            return f"b={self.exponent:.2f} (2 sizes, no CI)"
        return f"b={self.exponent:.2f} [{self.ci_low:.2f}, {self.ci_high:.2f}]"


def upper_sizes(sizes: np.ndarray, min_points: int = 3) -> np.ndarray:
    """The distinct sizes a fit uses: the upper half, at least `min_points` (or all)."""
    distinct = np.unique(sizes)
    keep = max(min_points, math.ceil(len(distinct) / 2))
    return distinct[-keep:]


def fit_power_law(n: np.ndarray, y: np.ndarray, *, min_points: int = 3) -> PowerFit | None:
    """Fit y = c * n^b over the larger sizes; None when fewer than two usable sizes remain.

    Several y values at one n (seeds, repeats) are reduced to their median first, so every
    size weighs the same and the interval counts sizes, not repeats.
    """
    n = np.asarray(n, dtype=float)
    y = np.asarray(y, dtype=float)
    good = np.isfinite(n) & np.isfinite(y) & (n > 0) & (y > 0)
    n, y = n[good], y[good]
    if len(np.unique(n)) < 2:
        return None
    sizes = upper_sizes(n, min_points)
    log_n = np.log(sizes)
    log_y = np.log([np.median(y[n == s]) for s in sizes])
    if len(sizes) == 2:
        slope = (log_y[1] - log_y[0]) / (log_n[1] - log_n[0])
        return PowerFit(float(slope), math.nan, math.nan, float(math.exp(log_y[0] - slope * log_n[0])),
                        2, float(sizes[0]), float(sizes[-1]))
    result = stats.linregress(log_n, log_y)
    half_width = stats.t.ppf(0.975, len(sizes) - 2) * result.stderr
    return PowerFit(float(result.slope), float(result.slope - half_width), float(result.slope + half_width),
                    float(math.exp(result.intercept)), len(sizes), float(sizes[0]), float(sizes[-1]))
