"""analysis.nnls (batched, which scipy is not) gives scipy.optimize.nnls' answers, one problem at a time."""

import numpy as np
import pytest
from scipy.optimize import nnls

from analysis.nnls import nnls_many


@pytest.mark.parametrize("columns", [1, 2, 3, 4])
def test_many_problems_at_once_match_scipy_one_at_a_time(columns):
    rng = np.random.default_rng(columns)
    a = rng.normal(size=(200, 7, columns))
    a[::2] = np.abs(a[::2])  # half with positive columns, as the cost model's
    b = rng.normal(size=(200, 7))
    got = nnls_many(a, b)
    want = np.stack([nnls(a[i], b[i])[0] for i in range(len(a))])
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert (got == 0).any() and (got > 0).any()  # both sides of the bound were exercised


def test_the_cost_models_problems_match_scipy():
    n = np.array([64.0, 128, 256, 512, 1024, 2048])
    x = n / n.max()
    design = np.stack([np.ones_like(x), x, x ** 2], axis=1)
    for y in (0.05 + 1e-7 * n ** 2, 0.05 + 1e-4 * n, 3.0 * n ** 1.5, 1e-6 * n ** 2 * (1 + 0.1 * np.sin(n))):
        got = nnls_many(design[None] / y[None, :, None], np.ones((1, len(n))))[0]
        want = nnls(design / y[:, None], np.ones(len(n)))[0]
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-14)


def test_a_negative_answer_is_never_given():  # negative control: unconstrained least squares would go below zero
    a = np.array([[[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])
    b = np.array([[2.0, 1.0, -1.0]])
    np.testing.assert_allclose(nnls_many(a, b)[0], [1.5, 0.0])
    assert np.linalg.lstsq(a[0], b[0], rcond=None)[0][1] < 0


def test_shapes_are_checked():
    with pytest.raises(ValueError, match="expected a \\(problems, rows, columns\\)"):
        nnls_many(np.ones((3, 2)), np.ones(3))
