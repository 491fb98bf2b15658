"""Dense linear algebra shared by the model components and the samplers and solvers.

Cholesky factorisation and triangular solves on LAPACK directly, for the samplers' loops:
the hybrid sampler factorises and solves small systems tens of thousands of times per fit.
``scipy.linalg``'s wrappers validate and convert their inputs on every call, which costs
10–20 µs, ten times the LAPACK work itself on a 10 × 10 system; these call the same LAPACK
routines (``potrf``, ``potrs``, ``trtrs``), so the results are the same to the bit.  Inputs
are assumed finite and two-dimensional where a matrix is expected (the samplers build them).

Square roots of symmetric positive semi-definite matrices (:func:`psd_factor`), for the block
metric of MVML (its graph component and its NumPy solvers alike).
"""

from __future__ import annotations

import numpy as np
from scipy import linalg
from scipy.linalg import LinAlgError, lapack


def _check(info: int, routine: str, failure: str) -> None:
    """Raise as scipy.linalg would on LAPACK's ``info``: ``failure`` says what a positive one
    means for this routine."""
    if info > 0:
        raise LinAlgError(f"{routine}: {failure} (LAPACK info {info})")
    if info < 0:
        raise ValueError(f"{routine}: illegal value in argument {-info}")


def cholesky_lower(A: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor L of a symmetric positive-definite A (``A = L Lᵀ``)."""
    L, info = lapack.dpotrf(A, lower=1, clean=1)
    _check(info, "potrf", "the matrix is not positive definite")
    return L


def cho_solve_lower(L: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``A⁻¹ B`` given A's lower Cholesky factor L (B a vector or a matrix of columns)."""
    X, info = lapack.dpotrs(L, B, lower=1)
    _check(info, "potrs", "the factor is singular")
    return X


def solve_lower(L: np.ndarray, B: np.ndarray, *, transposed: bool = False) -> np.ndarray:
    """``L⁻¹ B`` for a lower-triangular L, or ``L⁻ᵀ B`` with ``transposed``."""
    X, info = lapack.dtrtrs(L, B, lower=1, trans=int(transposed))
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
