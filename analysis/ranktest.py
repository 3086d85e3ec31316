"""The Mann-Whitney U test in numpy, as scipy.stats.mannwhitneyu computes it (two-sided; the report and
compare import no scipy; tests/analysis/test_ranktest.py checks it against scipy).

method "auto" as scipy chooses it: the exact distribution of U when either sample holds at most EXACT_MAX values
and no value ties, else the normal approximation with the tie correction and the continuity correction.
`min_p_value` says how small a p-value the sizes can reach at all (a rank test on 3 against 3 samples never goes
below 0.1): analysis/ab.py decides nothing on sizes that cannot reach its level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

EXACT_MAX = 8  # scipy's `_mwu_choose_method`: exact when either size is at most 8 and nothing ties


@dataclass(frozen=True)
class UTest:
    u: float  # U of the first sample (x): the pairs (x_i, y_j) with x_i > y_j, ties counting a half
    p_value: float  # two-sided
    method: str  # exact | asymptotic


def _ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks (1-based) of `values`, and the sizes of its groups of ties."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    counts = np.diff(np.r_[starts, ordered.size])
    mean_rank = starts + (counts + 1) / 2.0  # 1-based average rank of each group
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.repeat(mean_rank, counts)
    return ranks, counts


def _exact_counts(n1: int, n2: int) -> np.ndarray:
    """How many of the C(n1+n2, n1) orderings give each U = 0 .. n1*n2 (the recursion of Mann and Whitney)."""
    # f[i][j] = counts of U for sizes (i, j): f(i, j)[u] = f(i-1, j)[u - j] + f(i, j-1)[u]
    table = {(0, j): np.ones(1) for j in range(n2 + 1)}
    for i in range(1, n1 + 1):
        table[(i, 0)] = np.ones(1)
        for j in range(1, n2 + 1):
            size = i * j + 1
            counts = np.zeros(size)
            prev_i = table[(i - 1, j)]
            counts[j:j + prev_i.size] += prev_i
            prev_j = table[(i, j - 1)]
            counts[:prev_j.size] += prev_j
            table[(i, j)] = counts
    return table[(n1, n2)]


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def mann_whitney(x, y) -> UTest:
    """Two-sided Mann-Whitney U test of samples `x` and `y` (scipy's defaults: method auto, continuity on)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n1, n2 = x.size, y.size
    if n1 == 0 or n2 == 0:
        raise ValueError(f"samples: expected at least one value on each side, got {n1} and {n2}")
    ranks, ties = _ranks(np.concatenate([x, y]))
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    u2 = n1 * n2 - u1
    big = max(u1, u2)
    if min(n1, n2) <= EXACT_MAX and not (ties > 1).any():
        counts = _exact_counts(min(n1, n2), max(n1, n2))  # U's distribution is the same either way round
        # P(U >= big) under the null, doubled (the distribution is symmetric), capped at 1
        p = float(counts[int(round(big)):].sum() / counts.sum())
        return UTest(u1, min(1.0, 2.0 * p), "exact")
    n = n1 + n2
    mean = n1 * n2 / 2.0
    tie_term = float((ties ** 3 - ties).sum()) / (n * (n - 1)) if n > 1 else 0.0
    sd = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - tie_term))
    if sd == 0:  # every value the same: nothing differs
        return UTest(u1, 1.0, "asymptotic")
    z = (big - mean - 0.5) / sd
    return UTest(u1, min(1.0, 2.0 * _normal_sf(z)), "asymptotic")


def min_p_value(n1: int, n2: int) -> float:
    """The smallest two-sided p-value samples of these sizes can give (complete separation, no ties).

    Exact sizes: 2 / C(n1+n2, n1). Larger ones: the normal approximation's, with its continuity correction."""
    if n1 == 0 or n2 == 0:
        return 1.0
    if min(n1, n2) <= EXACT_MAX:
        return min(1.0, 2.0 / math.comb(n1 + n2, n1))
    n = n1 + n2
    z = (n1 * n2 / 2.0 - 0.5) / math.sqrt(n1 * n2 * (n + 1) / 12.0)
    return min(1.0, 2.0 * _normal_sf(z))
