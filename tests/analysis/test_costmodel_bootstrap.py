"""The cost model's bootstrap draws every resample in one call (analysis/costmodel.py): that gives the same
numbers as one draw per resample, so a model's interval is what it was when the draws were made in turn."""

import numpy as np
import pytest

from analysis import costmodel


@pytest.mark.parametrize("sizes", [2, 3, 5, 8, 9, 17, 33])
def test_one_draw_of_all_resamples_is_the_draws_in_turn(sizes):
    centred = np.random.default_rng(sizes).normal(size=sizes)
    in_turn = np.random.default_rng(costmodel.BOOTSTRAP_SEED)
    expected = np.stack([in_turn.choice(centred, size=sizes) for _ in range(costmodel.BOOTSTRAP_RESAMPLES)])
    at_once = np.random.default_rng(costmodel.BOOTSTRAP_SEED).choice(
        centred, size=(costmodel.BOOTSTRAP_RESAMPLES, sizes))
    assert np.array_equal(at_once, expected)


def test_the_interval_is_the_one_the_draws_in_turn_give():
    n = np.array([256, 512, 1024, 2048, 4096, 8192], dtype=float)
    y = (0.05 + 1e-5 * n + 3e-8 * n ** 2) * np.exp(np.random.default_rng(3).normal(0, 0.05, size=len(n)))
    model = costmodel.fit_cost_model(n, y)
    # the same interval computed with one draw per resample, as the model once drew them
    coef = costmodel._nnls_relative(n, y[None, :])[0]
    fitted = coef[0] + coef[1] * n + coef[2] * n ** 2
    residuals = np.log(y / fitted)
    rng = np.random.default_rng(costmodel.BOOTSTRAP_SEED)
    resampled = np.stack([fitted * np.exp(rng.choice(residuals - residuals.mean(), size=len(n)))
                          for _ in range(costmodel.BOOTSTRAP_RESAMPLES)])
    shares = costmodel._share(costmodel._nnls_relative(n, resampled), n.max())
    low, high = np.percentile(shares[np.isfinite(shares)], [2.5, 97.5])
    assert model.share_low == pytest.approx(min(low, model.share), abs=0, rel=0)
    assert model.share_high == pytest.approx(max(high, model.share), abs=0, rel=0)
    assert model.share_high > model.share_low  # noisy rows: a real interval, not a point
