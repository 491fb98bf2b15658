"""Closed-form posteriors of Gaussian-likelihood, Gaussian-prior models with a flat bias.

The model is ``y_t = b_t 1 + g_t + ε_t`` for every task column t, with ``g_t ~ N(0, K)``
(or ``g_t = Ψ θ_t``, ``θ_t ~ N(0, I)``), ``ε_t ~ N(0, σ² I)`` and a flat prior on ``b_t``.
Its posterior is Gaussian, so the MAP is the posterior mean and the Laplace approximation is
exact.  Two forms are offered:

* dual (:class:`KernelPosterior`): one Cholesky factor of ``C = K + σ² I`` serves every task;
* primal (:class:`FeaturePosterior`): one Cholesky factor of the (P + 1)-dim precision of
  ``[θ; b]``, so the cost grows linearly in N.

Both give the generalised-least-squares bias ``b = 1ᵀC⁻¹y / 1ᵀC⁻¹1``, the posterior of the
latent at new points (mean and variance, bias uncertainty included) and exact joint draws.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy import linalg


class NumericalWarning(UserWarning):
    """A matrix needed jitter (or another numerical rescue) to be factorised."""


def cholesky_with_jitter(A: np.ndarray, what: str, max_relative_jitter: float = 1e-4
                         ) -> np.ndarray:
    """Lower Cholesky factor of a symmetric PSD matrix, adding diagonal jitter if needed.

    Jitter starts at 1e-10 × mean diagonal and grows ×10 up to ``max_relative_jitter``; a
    :class:`NumericalWarning` says how much was added.  Beyond that a ``LinAlgError`` names
    the matrix: a silent NaN is never returned.
    """
    try:
        return linalg.cholesky(A, lower=True, check_finite=True)
    except linalg.LinAlgError:
        pass
    scale = float(np.mean(np.abs(np.diag(A)))) or 1.0
    jitter = 1e-10
    while jitter <= max_relative_jitter:
        try:
            L = linalg.cholesky(A + jitter * scale * np.eye(A.shape[0]), lower=True)
        except linalg.LinAlgError:
            jitter *= 10.0
            continue
        warnings.warn(f"{what} is numerically singular; added {jitter:.0e} × its mean diagonal "
                      "to factorise it (results are those of the slightly regularised matrix)",
                      NumericalWarning, stacklevel=3)
        return L
    raise linalg.LinAlgError(f"{what} is not positive definite even with "
                             f"{max_relative_jitter:.0e} relative jitter; check for "
                             "duplicated samples with a noise variance of zero, or raise it")


def _chol_solve(L: np.ndarray, B: np.ndarray) -> np.ndarray:
    return linalg.cho_solve((L, True), B)


@dataclass
class KernelPosterior:
    """Exact posterior of ``y = b + g + ε``, ``g ~ N(0, K)``, in the dual form.

    Attributes
    ----------
    chol : ndarray (N, N)
        Lower Cholesky factor of ``C = K + σ² I``.
    weights : ndarray (N, T)
        ``C⁻¹ (y - b)``: the latent's posterior mean at x* is ``k(x*, X) @ weights``.
    bias : ndarray (T,)
        Generalised-least-squares bias (the posterior mean of b).
    ones_solve : ndarray (N,)
        ``C⁻¹ 1``.
    ones_precision : float
        ``1ᵀ C⁻¹ 1``: the posterior precision of each b.
    """

    chol: np.ndarray
    weights: np.ndarray
    bias: np.ndarray
    ones_solve: np.ndarray
    ones_precision: float

    @classmethod
    def fit(cls, K: np.ndarray, Y: np.ndarray, noise_variance: float,
            what: str = "the kernel matrix plus noise") -> KernelPosterior:
        N = K.shape[0]
        C = K.copy()
        C[np.diag_indices(N)] += noise_variance
        L = cholesky_with_jitter(C, what)
        CiY = _chol_solve(L, Y)
        Ci1 = _chol_solve(L, np.ones(N))
        s = float(Ci1.sum())
        bias = CiY.sum(axis=0) / s
        return cls(chol=L, weights=CiY - np.outer(Ci1, bias), bias=bias, ones_solve=Ci1,
                   ones_precision=s)

    def mean(self, K_cross: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        """Posterior mean of the latent g at new points (rows of ``K_cross = k(x*, X)``): with
        b integrated out, or given the bias ``b`` (T,), ``k*ᵀC⁻¹(y - b)``."""
        if bias is None:
            return K_cross @ self.weights
        return K_cross @ (self.weights + np.outer(self.ones_solve, self.bias - bias))

    def latent_variance(self, K_cross: np.ndarray, k_diag: np.ndarray) -> np.ndarray:
        """Posterior variance of g(x*) given b, ``k** - k*ᵀC⁻¹k*`` (the same for every task)."""
        Z = linalg.solve_triangular(self.chol, K_cross.T, lower=True)
        return np.maximum(k_diag - np.sum(Z**2, axis=0), 0.0)

    def variance(self, K_cross: np.ndarray, k_diag: np.ndarray, scale: float = 1.0
                 ) -> np.ndarray:
        """Posterior variance of ``scale·g(x*) + b`` (the same for every task).

        ``scale² (k** - k*ᵀC⁻¹k*) + (1 - scale·k*ᵀC⁻¹1)² / (1ᵀC⁻¹1)``: the GP variance plus the
        bias's, with their covariance ``-k*ᵀC⁻¹1 / 1ᵀC⁻¹1``.
        """
        return (scale**2 * self.latent_variance(K_cross, k_diag)
                + (1.0 - scale * K_cross @ self.ones_solve) ** 2 / self.ones_precision)

    def draws(self, K: np.ndarray, Y: np.ndarray, noise_variance: float, n_draws: int,
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Exact joint draws of (g, b) at the training points: (S, N, T) and (S, T).

        b first from its marginal posterior N(b̂, 1/1ᵀC⁻¹1); then g | b, y by Matheron's rule:
        ``g = g₀ + K C⁻¹ (y - b - g₀ - ε₀)`` with ``g₀ ~ N(0, K)``, ``ε₀ ~ N(0, σ² I)``.
        """
        N, T = Y.shape
        b = self.bias + rng.standard_normal((n_draws, T)) / np.sqrt(self.ones_precision)
        # a symmetric square root of the (possibly singular) prior covariance: eigenvalues
        # below rounding level are clipped to 0, so no jitter is needed for prior draws
        evals, evecs = linalg.eigh(K)
        root = evecs * np.sqrt(np.clip(evals, 0.0, None))
        z = rng.standard_normal((N, n_draws * T))
        g0 = (root @ z).reshape(N, n_draws, T).transpose(1, 0, 2)
        eps = np.sqrt(noise_variance) * rng.standard_normal((n_draws, N, T))
        resid = Y[None] - b[:, None, :] - g0 - eps
        sol = _chol_solve(self.chol, resid.transpose(1, 0, 2).reshape(N, -1))
        g = g0 + (K @ sol).reshape(N, n_draws, T).transpose(1, 0, 2)
        return g, b


@dataclass
class FeaturePosterior:
    """Exact posterior of ``y = b + Ψθ + ε``, ``θ ~ N(0, I)``, flat b, in the primal form.

    Attributes
    ----------
    chol : ndarray (P + 1, P + 1)
        Lower Cholesky factor of the posterior precision of ``w = [θ; b]``,
        ``A = Ψ̃ᵀΨ̃ / σ² + diag(1, …, 1, 0)`` with ``Ψ̃ = [Ψ, 1]``.
    coef : ndarray (P + 1, T)
        Posterior means of ``[θ; b]`` per task.
    """

    chol: np.ndarray
    coef: np.ndarray

    @classmethod
    def fit(cls, Psi: np.ndarray, Y: np.ndarray, noise_variance: float) -> FeaturePosterior:
        Psi1 = np.concatenate([Psi, np.ones((Psi.shape[0], 1))], axis=1)
        A = Psi1.T @ Psi1 / noise_variance
        A[np.diag_indices(Psi.shape[1])] += 1.0
        L = cholesky_with_jitter(A, "the posterior precision of the feature weights")
        return cls(chol=L, coef=_chol_solve(L, Psi1.T @ Y / noise_variance))

    @property
    def theta(self) -> np.ndarray:
        return self.coef[:-1]

    @property
    def bias(self) -> np.ndarray:
        return self.coef[-1]

    def variance(self, Psi: np.ndarray, scale: float = 1.0) -> np.ndarray:
        """Posterior variance of ``scale·ψ(x*)ᵀθ + b`` (the same for every task)."""
        c = np.concatenate([scale * Psi, np.ones((Psi.shape[0], 1))], axis=1)
        Z = linalg.solve_triangular(self.chol, c.T, lower=True)
        return np.sum(Z**2, axis=0)

    def draws(self, n_draws: int, rng: np.random.Generator) -> np.ndarray:
        """Exact draws of ``[θ; b]``: (S, P + 1, T)."""
        z = rng.standard_normal((n_draws,) + self.coef.shape)
        # w = mean + L⁻ᵀ z has covariance (L Lᵀ)⁻¹ = A⁻¹
        noise = linalg.solve_triangular(self.chol.T, z.transpose(1, 0, 2).reshape(
            self.coef.shape[0], -1), lower=False)
        return self.coef[None] + noise.reshape(self.coef.shape[0], n_draws, -1).transpose(1, 0, 2)
