"""Power-law fits recover known exponents from noisy synthetic data, over the larger sizes only."""

import math

import numpy as np
import pytest

from analysis.fit import fit_power_law, upper_sizes

SIZES = np.array([128, 256, 512, 1024, 2048, 4096, 8192])


@pytest.mark.parametrize("exponent", [2.0, 1.0], ids=["quadratic", "linear"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_known_exponent_is_recovered_within_0_05(exponent, seed):
    rng = np.random.default_rng(seed)
    n = np.repeat(SIZES, 3)  # three repeats per size, as seeds would give
    y = 3e-6 * n ** exponent * np.exp(rng.normal(0, 0.03, size=n.size))
    fit = fit_power_law(n, y)
    assert abs(fit.exponent - exponent) < 0.05
    assert fit.ci_low < exponent < fit.ci_high
    assert fit.n_points == 4 and fit.n_min == 1024 and fit.n_max == 8192


def test_fixed_overhead_at_small_n_does_not_bias_the_fit():
    # 0.2 ms of fixed cost swamps the n^2 term at small n; the fit over the larger sizes still finds ~2
    n = SIZES.astype(float)
    y = 0.2 + 1e-6 * n ** 2
    everything = np.polyfit(np.log(n), np.log(y), 1)[0]
    assert everything < 1.5  # what a naive fit over all sizes would claim
    assert fit_power_law(n, y).exponent > 1.85


def test_upper_sizes_keeps_upper_half_but_at_least_three():
    assert list(upper_sizes(np.array([1, 2, 4, 8, 16, 32, 64, 128]))) == [16, 32, 64, 128]
    assert list(upper_sizes(np.array([1, 2, 4, 8]))) == [2, 4, 8]
    assert list(upper_sizes(np.array([1, 2]))) == [1, 2]


def test_two_sizes_give_an_exponent_without_interval_and_one_size_gives_none():
    fit = fit_power_law(np.array([100, 200]), np.array([1.0, 4.0]))
    assert fit.exponent == pytest.approx(2.0)
    assert math.isnan(fit.ci_low) and "no CI" in fit.label()
    assert fit_power_law(np.array([100, 100]), np.array([1.0, 1.1])) is None


def test_nonpositive_and_nan_values_are_ignored():
    n = np.array([256, 512, 1024, 2048, 4096], dtype=float)
    y = n ** 2
    y[0] = 0.0  # e.g. a CPU peak RSS that did not move
    y[1] = np.nan
    assert fit_power_law(n, y).exponent == pytest.approx(2.0)


def test_ratio_extrapolates_4k_to_128k():
    fit = fit_power_law(SIZES, SIZES.astype(float) ** 2)
    assert fit.ratio(4096, 131072)[0] == pytest.approx(1024, rel=1e-6)
