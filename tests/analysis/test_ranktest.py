"""analysis.ranktest gives scipy.stats.mannwhitneyu's numbers (scipy is a test dependency here, not compare's)."""

import math

import numpy as np
import pytest
from scipy import stats

from analysis.ranktest import mann_whitney, min_p_value


@pytest.mark.parametrize("case", range(48))
def test_u_and_p_match_scipy(case):
    rng = np.random.default_rng(case)
    sizes = [(3, 3), (4, 7), (8, 8), (3, 40), (9, 12), (30, 25), (200, 180), (5, 200)]
    n1, n2 = sizes[case % len(sizes)]
    x = rng.lognormal(0.0, 0.2, n1)
    y = rng.lognormal(0.1 * (case % 3), 0.2, n2)
    if case % 4 == 1:  # ties: the tie correction (and scipy's switch to the normal approximation)
        x, y = np.round(x, 1), np.round(y, 1)
    want = stats.mannwhitneyu(x, y, alternative="two-sided")
    got = mann_whitney(x, y)
    assert got.u == pytest.approx(want.statistic, abs=1e-9)
    assert got.p_value == pytest.approx(want.pvalue, rel=1e-9, abs=1e-15)


def test_a_shifted_sample_is_found_and_the_same_one_is_not():  # negative control: the test can fail
    rng = np.random.default_rng(0)
    a = rng.normal(10, 0.5, 100)
    assert mann_whitney(a, a + 3).p_value < 1e-20
    assert mann_whitney(a, rng.permutation(a)).p_value == pytest.approx(1.0)


@pytest.mark.parametrize("n1, n2", [(3, 3), (4, 5), (8, 8), (3, 50), (10, 10), (40, 60)])
def test_min_p_value_is_the_p_of_complete_separation(n1, n2):
    x, y = np.arange(n1, dtype=float), np.arange(n2, dtype=float) + 1000
    assert min_p_value(n1, n2) == pytest.approx(stats.mannwhitneyu(x, y, alternative="two-sided").pvalue, rel=1e-9)


def test_small_samples_cannot_reach_a_strict_level():
    assert min_p_value(3, 3) == pytest.approx(0.1)  # 2 / C(6, 3)
    assert min_p_value(6, 6) > 0.002 > min_p_value(7, 7)  # 2/924 and 2/3432
    assert min_p_value(0, 5) == 1.0
    with pytest.raises(ValueError, match="samples"):
        mann_whitney([], [1.0])
    assert math.isclose(mann_whitney([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]).p_value, 1.0)
