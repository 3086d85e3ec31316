"""Theil-Sen's slope and Sen's 95% interval, as `scipy.stats.theilslopes` computes them (method "separate").

Written out in numpy because importing scipy.stats costs a report more than every fit it makes (a second
of a small report's few, on a quiet machine). tests/analysis/test_theilsen.py holds it to scipy's numbers.
"""

from __future__ import annotations

from statistics import NormalDist
from typing import NamedTuple

import numpy as np


class TheilSen(NamedTuple):
    slope: float
    intercept: float
    low_slope: float
    high_slope: float


def _tie_counts(values: np.ndarray) -> np.ndarray:
    """How many times each value that occurs more than once occurs."""
    _, counts = np.unique(values, return_counts=True)
    return counts[counts > 1]


def theil_sen(y: np.ndarray, x: np.ndarray, alpha: float = 0.95) -> TheilSen:
    """The median of the slopes between every pair of points with distinct x, the intercept median(y) - slope ·
    median(x), and the slope's `alpha` interval from Kendall's tau (Sen 1968, eq. 2.6, ties in x and y counted)."""
    y = np.asarray(y, dtype=float).ravel()
    x = np.asarray(x, dtype=float).ravel()
    if len(x) != len(y) or len(x) < 2:
        raise ValueError("theil_sen: x and y must have one length, at least 2")
    dx = x[:, np.newaxis] - x
    dy = y[:, np.newaxis] - y
    slopes = np.sort(dy[dx > 0] / dx[dx > 0])
    slope = float(np.median(slopes)) if slopes.size else float("nan")
    intercept = float(np.median(y) - slope * np.median(x))
    tail = 1.0 - alpha if alpha > 0.5 else alpha
    z = NormalDist().inv_cdf(tail / 2.0)
    ties = sum(k * (k - 1) * (2 * k + 5) for k in (*_tie_counts(x), *_tie_counts(y)))
    n = len(y)
    sigma = np.sqrt((n * (n - 1) * (2 * n + 5) - ties) / 18.0)
    if not slopes.size or not np.isfinite(sigma):
        return TheilSen(slope, intercept, float("nan"), float("nan"))
    upper = min(int(np.round((len(slopes) - z * sigma) / 2.0)), len(slopes) - 1)
    lower = max(int(np.round((len(slopes) + z * sigma) / 2.0)) - 1, 0)
    return TheilSen(slope, intercept, float(slopes[lower]), float(slopes[upper]))
