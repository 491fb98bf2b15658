"""The samplers' direct LAPACK calls against NumPy's general solvers."""

import numpy as np
import pytest
from scipy.linalg import LinAlgError

from bayesmv.linalg import (
    cho_inverse,
    cho_solve_lower,
    cholesky_lower,
    inverse_lower,
    solve_lower,
    weighted_gram_cholesky,
)


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
    np.testing.assert_allclose(inverse_lower(L), np.linalg.inv(L), rtol=1e-10, atol=1e-14)
    # the full symmetric inverse, in double precision also from a single-precision factor
    np.testing.assert_allclose(cho_inverse(L), np.linalg.inv(A), rtol=1e-10, atol=1e-14)
    L32 = L.astype(np.float32)
    assert cho_inverse(L32).dtype == np.float64
    np.testing.assert_allclose(cho_inverse(L32), np.linalg.inv(L32.astype(float) @ L32.T),
                               rtol=1e-10, atol=1e-14)
    # a vector right-hand side keeps its shape
    assert solve_lower(L, B[:, 0]).shape == (n,)


def test_a_matrix_that_is_not_positive_definite_is_refused():
    with pytest.raises(LinAlgError, match="not positive definite"):
        cholesky_lower(np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(LinAlgError, match="singular"):
        solve_lower(np.array([[1.0, 0.0], [1.0, 0.0]]), np.ones(2))


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-12), (np.float32, 1e-4)])
def test_weighted_gram_factor_matches_numpy_in_the_inputs_precision(dtype, rtol):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((40, 6))
    w = rng.gamma(1.0, 1.0, 40)
    ridge = np.array([0.0, 1.0, 2.0, 0.5, 3.0, 1.0])  # a zero: a flat prior's coefficient
    A = X.T @ (w[:, None] * X) + np.diag(ridge)
    L = weighted_gram_cholesky(X.astype(dtype), w.astype(dtype), ridge)
    assert L.dtype == dtype
    assert np.allclose(np.triu(L, 1), 0.0)
    np.testing.assert_allclose(L.astype(float) @ L.T.astype(float), A, rtol=rtol,
                               atol=rtol * np.abs(A).max())
    # the solves follow the factor's precision
    B = rng.standard_normal((6, 3))
    assert cho_solve_lower(L, B.astype(dtype)).dtype == dtype
    np.testing.assert_allclose(cho_solve_lower(L, B.astype(dtype)), np.linalg.solve(A, B),
                               rtol=100 * rtol, atol=100 * rtol)
    assert inverse_lower(L).dtype == dtype
    Linv = np.linalg.inv(L.astype(float))
    np.testing.assert_allclose(inverse_lower(L), Linv, rtol=100 * rtol,
                               atol=100 * rtol * np.abs(Linv).max())


def test_weighted_gram_that_float32_rounding_makes_singular_is_factorised_in_double():
    # Gram [[1 + ε², 1], [1, 1]]: positive definite, but 1 + ε² rounds to 1 in float32
    X = np.array([[1.0, 1.0], [1e-4, 0.0]], dtype=np.float32)
    L = weighted_gram_cholesky(X, np.ones(2, np.float32), 0.0)
    assert L.dtype == np.float64  # the single-precision factorisation failed
    Xd = X.astype(float)  # the inputs as given, in double
    np.testing.assert_allclose(L @ L.T, Xd.T @ Xd, rtol=1e-10)
