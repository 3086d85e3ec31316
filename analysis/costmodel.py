"""A cost model per line: y(n) = fixed + linear·n + quadratic·n², with non-negative terms.

Why a model and not a local slope: a real call costs a fixed part (Python, dispatch, kernel
launches), a part per row or per block (linear in n) and the n² work. Its log-log slope,
(linear·n + 2·quadratic·n²) / y, reaches 2 only where the n² term dominates, so a back end with
large per-row costs (chunked on a CPU) shows a slope well under 2 at a few thousand tokens while its
n² term already carries most of its time. A local slope judged against a band around 2 flips
from run to run there; the model's n² share does not.

How it is fitted: non-negative least squares on relative residuals (every size weighs the same,
whatever its magnitude), over every measured size. Non-negative terms make log y convex in
log n: local slopes can only rise, towards 2. Its interval comes from a residual bootstrap (the
fit's own log residuals resampled onto the fitted curve, a fixed seed: the same rows always give
the same interval). A model that cannot follow the rows (rms log residual above twice the
noise measured between repeats, and above NOISE_FLOOR) is flagged `fits = False`: data on a
straight log-log line at slope 1.5 are not "fixed + linear + n²", however the terms are chosen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from analysis.nnls import nnls_many

MIN_MODEL_SIZES = 5  # three terms and at least two sizes to judge the fit by
BOOTSTRAP_RESAMPLES = 400
BOOTSTRAP_SEED = 0  # fixed: an interval is a function of the rows, not of the moment
NOISE_FLOOR = 0.03  # rms log residual that no shared machine beats between points (3%)
FIT_TOLERANCE = 2.0  # the model fits when its rms log residual is within this many times the repeat noise


@dataclass(frozen=True)
class CostModel:
    fixed: float  # y(n) = fixed + linear * n + quadratic * n**2
    linear: float
    quadratic: float
    n_min: float
    n_max: float
    n_points: int  # distinct sizes fitted
    share: float  # the n² term's share of y at n_max
    share_low: float  # its 95% bootstrap interval
    share_high: float
    residual: float  # rms of log(measured / model)
    noise: float  # rms log scatter between repeats of one size (NaN without repeats)

    @property
    def tolerance(self) -> float:
        """The largest rms log residual that still counts as following the rows."""
        noise = self.noise if math.isfinite(self.noise) else 0.0
        return max(FIT_TOLERANCE * noise, NOISE_FLOOR)

    @property
    def fits(self) -> bool:
        return self.residual <= self.tolerance

    def terms(self, n: np.ndarray | float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(fixed, linear, quadratic) parts of y at n."""
        n = np.asarray(n, dtype=float)
        return np.full_like(n, self.fixed), self.linear * n, self.quadratic * n ** 2

    def predict(self, n: np.ndarray | float) -> np.ndarray:
        fixed, linear, quadratic = self.terms(n)
        return fixed + linear + quadratic

    def local_slope(self, n: np.ndarray | float) -> np.ndarray:
        """d log y / d log n of the model: rises from 0 (fixed costs) towards 2 (the n² term)."""
        _, linear, quadratic = self.terms(n)
        return (linear + 2 * quadratic) / self.predict(n)

    def n_for_share(self, share: float) -> float:
        """The n at which the n² term makes `share` of y (inf without an n² term)."""
        if self.quadratic <= 0:
            return math.inf
        # quadratic·n² = share·(fixed + linear·n + quadratic·n²)  ->  (1-share)·q·n² - share·l·n - share·f = 0
        a, b, c = (1 - share) * self.quadratic, -share * self.linear, -share * self.fixed
        return float((-b + math.sqrt(b * b - 4 * a * c)) / (2 * a))

    def label(self) -> str:
        """'n² 72% [61, 80] of y at n=3072': the share a legend or an evidence cell shows."""
        text = (f"n² {100 * self.share:.0f}% [{100 * self.share_low:.0f}, {100 * self.share_high:.0f}] "
                f"at n={self.n_max:.0f}")
        return text if self.fits else text + f" (model off by {100 * self.residual:.0f}% rms)"


def repeat_noise(n: np.ndarray, y: np.ndarray) -> float:
    """rms scatter of log y between repeats of one size (NaN when no size was measured twice): the
    sample standard deviation of each size's log values, pooled over sizes."""
    n = np.asarray(n, dtype=float)
    log_y = np.log(np.asarray(y, dtype=float))
    spreads = []
    for size in np.unique(n):
        values = log_y[n == size]
        if len(values) >= 2:
            spreads.append(np.std(values, ddof=1))
    return float(np.sqrt(np.mean(np.square(spreads)))) if spreads else math.nan


def _nnls_relative(n: np.ndarray, y_BN: np.ndarray) -> np.ndarray:
    """Non-negative (fixed, linear, quadratic) minimising the relative residuals, for each row of y_BN (all
    at the sizes n): coef_B3. Columns scaled by n_max."""
    scale = float(n.max())
    x = n / scale
    design = np.stack([np.ones_like(x), x, x ** 2], axis=1)
    coef_B3 = nnls_many(design[None, :, :] / y_BN[:, :, None], np.ones_like(y_BN))
    return coef_B3 / np.array([1.0, scale, scale ** 2])


def _share(coef_B3: np.ndarray, n: float) -> np.ndarray:
    """The n² term's share of y at n, per fit (NaN where the model is not positive there)."""
    total = coef_B3[:, 0] + coef_B3[:, 1] * n + coef_B3[:, 2] * n * n
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > 0, coef_B3[:, 2] * n * n / total, math.nan)


def fit_cost_model(n: np.ndarray, y: np.ndarray, *, noise: float = math.nan,
                   min_points: int = MIN_MODEL_SIZES) -> CostModel | None:
    """Fit y = fixed + linear·n + quadratic·n² over every size (one value per size: the caller reduces
    repeats first); None with fewer than `min_points` usable sizes."""
    n = np.asarray(n, dtype=float)
    y = np.asarray(y, dtype=float)
    good = np.isfinite(n) & np.isfinite(y) & (n > 0) & (y > 0)
    n, y = n[good], y[good]
    order = np.argsort(n)
    n, y = n[order], y[order]
    if len(np.unique(n)) < min_points:
        return None
    coef = _nnls_relative(n, y[None, :])[0]
    fitted = coef[0] + coef[1] * n + coef[2] * n ** 2
    log_residuals = np.log(y / fitted)
    n_max = float(n.max())
    # Residual bootstrap, by hand: scipy.stats.bootstrap resamples observations, not a model's residuals. The
    # misfit itself is resampled, so a model that follows the rows badly gets a wide interval, and noise-free
    # rows a point. All resamples are drawn in one call: numpy's generator
    # gives a (resamples, sizes) draw the same numbers as one draw of `sizes` per resample in turn
    # (tests/analysis/test_costmodel_bootstrap.py), in a hundredth of the time; the fits are solved at once.
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    centred = log_residuals - log_residuals.mean()
    resampled = fitted * np.exp(rng.choice(centred, size=(BOOTSTRAP_RESAMPLES, len(n))))
    shares = _share(_nnls_relative(n, resampled), n_max)
    shares = shares[np.isfinite(shares)]
    low, high = (np.percentile(shares, [2.5, 97.5]) if len(shares) else (math.nan, math.nan))
    share = float(_share(coef[None, :], n_max)[0])
    return CostModel(float(coef[0]), float(coef[1]), float(coef[2]), float(n.min()), n_max, len(n), share,
                     float(min(low, share)), float(max(high, share)),
                     float(np.sqrt(np.mean(log_residuals ** 2))), float(noise))
