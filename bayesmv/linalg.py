"""Dense linear algebra shared by the model components and the samplers and solvers.

Cholesky factorisation and triangular solves on LAPACK directly, for the samplers' loops:
the hybrid sampler factorises and solves small systems tens of thousands of times per fit.
``scipy.linalg``'s wrappers validate and convert their inputs on every call, which costs
10–20 µs, ten times the LAPACK work itself on a 10 × 10 system; these call the same LAPACK
routines (``potrf``, ``potrs``, ``trtrs``, ``trtri``), so the results are the same to the bit.
Inputs are assumed finite and two-dimensional where a matrix is expected (the samplers build
them).
Only :func:`weighted_gram_cholesky` on float32 inputs works in single precision (the HMC
steps' leapfrog forces, where rounding only changes the proposal), and the solves with the
factor it returns when their right-hand side is float32 too; everything else is double.

Square roots of symmetric positive semi-definite matrices (:func:`psd_factor`), for the block
metric of MVML (its graph component and its NumPy solvers alike).
"""

from __future__ import annotations

import numpy as np
from scipy import linalg
from scipy.linalg import LinAlgError, blas, lapack

#: the single- and double-precision routines, by NumPy's dtype character
_SINGLE, _DOUBLE = "f", "d"
_ROUTINES = {
    _SINGLE: {"potrf": lapack.spotrf, "potrs": lapack.spotrs, "trtrs": lapack.strtrs,
              "trtri": lapack.strtri, "syrk": blas.ssyrk},
    _DOUBLE: {"potrf": lapack.dpotrf, "potrs": lapack.dpotrs, "trtrs": lapack.dtrtrs,
              "trtri": lapack.dtrtri, "syrk": blas.dsyrk},
}


def _routine(name: str, *arrays: np.ndarray):
    """LAPACK / BLAS ``name`` in single precision when every array is float32, else in double
    (f2py would silently round a float64 operand of an ``s`` routine down to float32)."""
    single = all(a.dtype == np.float32 for a in arrays)
    return _ROUTINES[_SINGLE if single else _DOUBLE][name]


def _check(info: int, routine: str, failure: str) -> None:
    """Raise as scipy.linalg would on LAPACK's ``info``: ``failure`` says what a positive one
    means for this routine."""
    if info > 0:
        raise LinAlgError(f"{routine}: {failure} (LAPACK info {info})")
    if info < 0:
        raise ValueError(f"{routine}: illegal value in argument {-info}")


def cholesky_lower(A: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor L of a symmetric positive-definite A (``A = L Lᵀ``), in double
    precision whatever A's dtype; only A's lower triangle is read."""
    L, info = lapack.dpotrf(A, lower=1, clean=1)
    _check(info, "potrf", "the matrix is not positive definite")
    return L


def weighted_gram_cholesky(X: np.ndarray, weights: np.ndarray, ridge) -> np.ndarray:
    """Lower Cholesky factor of ``Xᵀ diag(weights) X + diag(ridge)`` (weights ≥ 0).

    Only the lower triangle of the Gram matrix is formed (BLAS ``syrk``: half the work of
    ``Xᵀ (w X)``), in single precision when X and the weights are both float32, else in
    double.  A float32 Gram that rounding leaves not positive definite is formed again in
    double precision, so the factor is a deterministic function of the inputs either way.
    """
    B = X * np.sqrt(weights)[:, None]
    # Bᵀ of a C-ordered B is Fortran-ordered: syrk reads it without a copy
    A = _routine("syrk", B)(1.0, B.T, lower=1)
    np.einsum("ii->i", A)[...] += ridge
    L, info = _routine("potrf", A)(A, lower=1, clean=1, overwrite_a=1)
    if info > 0 and A.dtype == np.float32:
        return weighted_gram_cholesky(X.astype(np.float64), np.asarray(weights, np.float64),
                                      ridge)
    _check(info, "potrf", "the matrix is not positive definite")
    return L


def cho_solve_lower(L: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``A⁻¹ B`` given A's lower Cholesky factor L (B a vector or a matrix of columns), in
    single precision only when both are float32."""
    B = np.asarray(B)
    X, info = _routine("potrs", L, B)(L, B, lower=1)
    _check(info, "potrs", "the factor is singular")
    return X


def cho_inverse(L: np.ndarray) -> np.ndarray:
    """``A⁻¹`` (full, symmetric) given A's lower Cholesky factor L, always in double precision.

    For many right-hand sides ``B @ A⁻¹`` is a matrix product, several times faster than
    :func:`cho_solve_lower`'s triangular solves, and inverting a float32 factor in double
    precision keeps the products as accurate as those solves (the factor's own rounding
    dominates).
    """
    Ainv, info = lapack.dpotri(np.asarray(L, dtype=np.float64), lower=1)
    _check(info, "potri", "the factor is singular")
    lower = np.tril(Ainv)
    return lower + np.tril(lower, -1).T


def inverse_lower(L: np.ndarray) -> np.ndarray:
    """``L⁻¹`` of a lower-triangular L (lower triangular too), in L's precision."""
    Linv, info = _routine("trtri", L)(L, lower=1)
    _check(info, "trtri", "singular matrix")
    return Linv


def solve_lower(L: np.ndarray, B: np.ndarray, *, transposed: bool = False) -> np.ndarray:
    """``L⁻¹ B`` for a lower-triangular L, or ``L⁻ᵀ B`` with ``transposed``, in single
    precision only when both are float32."""
    B = np.asarray(B)
    X, info = _routine("trtrs", L, B)(L, B, lower=1, trans=int(transposed))
    _check(info, "trtrs", "singular matrix")
    return X


def try_cholesky_upper(A: np.ndarray) -> np.ndarray | None:
    """Upper Cholesky factor R of A (``A = RᵀR``), or None where A is not numerically positive
    definite.

    Parameters
    ----------
    A : ndarray of shape (n, n)
        A symmetric matrix (only its upper triangle is read), assumed finite.

    Returns
    -------
    ndarray of shape (n, n) or None
        ``scipy.linalg.cholesky(A, lower=False)``, or None where it raises ``LinAlgError``.
    """
    try:
        return linalg.cholesky(A, lower=False, check_finite=False)
    except LinAlgError:
        return None


def psd_factor(A: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
    """A square root ``L`` (n × k) with ``A ≈ L Lᵀ`` of a symmetric PSD matrix.

    Cholesky when A is numerically positive definite; otherwise the eigen-factor restricted to
    eigenvalues above ``rtol · max eigenvalue`` (those below are zero in floating point).
    """
    R = try_cholesky_upper(A)
    if R is not None and np.all(np.isfinite(R)):
        return R.T
    d, V = linalg.eigh(0.5 * (A + A.T), check_finite=False)
    top = max(d[-1], 0.0)
    keep = d > rtol * top
    return V[:, keep] * np.sqrt(d[keep])
