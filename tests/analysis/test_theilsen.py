"""analysis.theilsen gives scipy.stats.theilslopes' numbers (scipy is a test dependency here, not a report's)."""

import numpy as np
import pytest
from scipy import stats

from analysis.theilsen import theil_sen


@pytest.mark.parametrize("case", range(40))
def test_slope_intercept_and_interval_match_scipy(case):
    rng = np.random.default_rng(case)
    n = 3 + case % 9
    x = np.log(np.sort(rng.choice([64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096], n)))  # ties too
    y = (1 + case % 3) * x + rng.normal(0, 0.3, n)
    if case % 5 == 0:
        y[1] = y[0]  # a tie in y
    want = stats.theilslopes(y, x, alpha=0.95)
    got = theil_sen(y, x, alpha=0.95)
    np.testing.assert_allclose(got, tuple(want), rtol=1e-12, atol=1e-12, equal_nan=True)


def test_a_wrong_slope_is_caught():  # negative control: the comparison above can fail
    x = np.log([256.0, 512, 1024, 2048])
    y = 2 * x
    assert theil_sen(y, x).slope == pytest.approx(2.0)
    assert theil_sen(y[::-1], x).slope == pytest.approx(-2.0)


def test_fewer_than_two_points_are_refused():
    with pytest.raises(ValueError, match="at least 2"):
        theil_sen([1.0], [1.0])
