"""Non-negative least squares for a few columns, many problems at once: argmin ||A x - b|| subject to x >= 0.

The cost model (analysis/costmodel.py) solves one such problem of three columns per line and 400 more for its
bootstrap. Kept by hand because scipy has no batched NNLS: scipy.optimize.nnls solves one problem a call, 400
Python calls per line. With k columns the answer is found among 2^k - 1 supports:
the solution is the unconstrained least squares of the columns it leaves non-zero (its KKT conditions), so
of the supports whose least-squares coefficients are all non-negative, the one with the smallest residual is
it (the problem is convex; for A of full column rank its solution is unique). That is seven small least
squares for three columns, done for every problem in one batched call each. tests/analysis/test_nnls.py holds
it to scipy's answers.
"""

from __future__ import annotations

import itertools

import numpy as np

MAX_COLUMNS = 6  # 2^k - 1 supports: a handful of columns, not a general solver


def nnls_many(a_BMK: np.ndarray, b_BM: np.ndarray) -> np.ndarray:
    """x_BK >= 0 minimising ||a_BMK[i] @ x_BK[i] - b_BM[i]|| for every problem i."""
    a_BMK = np.asarray(a_BMK, dtype=float)
    b_BM = np.asarray(b_BM, dtype=float)
    if a_BMK.ndim != 3 or b_BM.shape != a_BMK.shape[:2]:
        raise ValueError(f"nnls_many: expected a (problems, rows, columns) and b (problems, rows), got "
                         f"{a_BMK.shape} and {b_BM.shape}")
    problems, _, columns = a_BMK.shape
    if not 1 <= columns <= MAX_COLUMNS:
        raise ValueError(f"nnls_many: 1 to {MAX_COLUMNS} columns, got {columns}")
    best_BK = np.zeros((problems, columns))
    best_residual_B = np.linalg.norm(b_BM, axis=1)  # x = 0: always allowed
    for size in range(1, columns + 1):
        for support in itertools.combinations(range(columns), size):
            part_BMS = a_BMK[:, :, support]
            # least squares of the support's columns (pseudo-inverse: a rank-deficient support is no error)
            x_BS = np.einsum("bsm,bm->bs", np.linalg.pinv(part_BMS), b_BM)
            residual_B = np.linalg.norm(np.einsum("bms,bs->bm", part_BMS, x_BS) - b_BM, axis=1)
            better_B = (x_BS >= 0).all(axis=1) & (residual_B < best_residual_B)
            if better_B.any():
                best_residual_B = np.where(better_B, residual_B, best_residual_B)
                best_BK[np.ix_(better_B, support)] = x_BS[better_B]
                others = [c for c in range(columns) if c not in support]
                best_BK[np.ix_(better_B, others)] = 0.0
    return best_BK
