"""The A/B comparison's statistics (analysis/ab.py, through scipy.stats): the U test's p-value, the smallest p-value
sample sizes can reach, and the bootstrap interval of the ratio of medians."""

import numpy as np
import pytest

from analysis import ab


def test_a_shifted_sample_is_found_and_the_same_one_is_not():  # negative control: the test can fail
    rng = np.random.default_rng(0)
    a = rng.normal(10, 0.5, 100)
    assert ab.p_value_of(a, a + 3) < 1e-20
    assert ab.p_value_of(a, rng.permutation(a)) == pytest.approx(1.0)
    assert ab.p_value_of(np.ones(3), np.ones(3)) == pytest.approx(1.0)  # every value tied: nothing differs


def test_small_samples_cannot_reach_a_strict_level():
    assert ab.min_p_value(3, 3) == pytest.approx(0.1)  # 2 / C(6, 3): the exact distribution of U
    assert ab.min_p_value(6, 6) > ab.ALPHA > ab.min_p_value(7, 7)  # 2/924 and 2/3432
    assert ab.min_p_value(0, 5) == 1.0
    rng = np.random.default_rng(3)
    for n1, n2 in ((3, 3), (4, 7), (9, 12)):  # no pair of samples of these sizes goes below it
        for _ in range(20):
            assert ab.p_value_of(rng.normal(0, 1, n1), rng.normal(5, 1, n2)) >= ab.min_p_value(n1, n2) - 1e-12


def test_a_reachable_level_with_a_clear_shift_is_a_verdict_and_an_unreachable_one_is_not():
    rng = np.random.default_rng(2)
    a, b = rng.lognormal(0, 0.02, 30), 1.5 * rng.lognormal(0, 0.02, 30)
    lo, hi = ab.ratio_interval(a, b)
    p_value = ab.p_value_of(a, b)
    assert ab.verdict(1.5, lo, hi, p_value, ab.min_p_value(30, 30) < ab.ALPHA, False) == "slower"
    assert ab.verdict(1.5, lo, hi, ab.p_value_of(a[:3], b[:3]), ab.min_p_value(3, 3) < ab.ALPHA, False) \
        == "too few samples"


def test_one_sample_on_a_side_gives_the_ratio_itself():
    assert ab.ratio_interval(np.array([2.0]), np.array([3.0, 3.0, 3.0])) == (1.5, 1.5)
