"""The samplers' direct LAPACK calls against NumPy's general solvers."""

import numpy as np
import pytest
from scipy.linalg import LinAlgError

from bayesmv.linalg import cho_solve_lower, cholesky_lower, solve_lower


@pytest.mark.parametrize("n, k", [(1, 1), (7, 1), (12, 5)])
def test_factor_and_solves_match_numpy(n, k):
    rng = np.random.default_rng(n)
    G = rng.standard_normal((n, n))
    A = G @ G.T + n * np.eye(n)
    B = rng.standard_normal((n, k))
    L = cholesky_lower(A)
    assert np.allclose(np.triu(L, 1), 0.0)
    np.testing.assert_allclose(L @ L.T, A, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cho_solve_lower(L, B), np.linalg.solve(A, B), rtol=1e-10)
    np.testing.assert_allclose(solve_lower(L, B), np.linalg.solve(L, B), rtol=1e-10)
    np.testing.assert_allclose(solve_lower(L, B, transposed=True), np.linalg.solve(L.T, B),
                               rtol=1e-10)
    # a vector right-hand side keeps its shape
    assert solve_lower(L, B[:, 0]).shape == (n,)


def test_a_matrix_that_is_not_positive_definite_is_refused():
    with pytest.raises(LinAlgError, match="not positive definite"):
        cholesky_lower(np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(LinAlgError, match="singular"):
        solve_lower(np.array([[1.0, 0.0], [1.0, 0.0]]), np.ones(2))
