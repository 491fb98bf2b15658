"""Type-II maximum likelihood for the ϱ-tensor Gaussian model (ϱTMV-RKM's hyper-parameters).

The model (the Gaussian-process reading of ϱTMV-RKM, on the scale of the ±1 targets) is,
for every task column t,

    y_t = b_t 1 + g_t + ε_t,   g_t ~ N(0, K_ϱ / (η τ²)),   ε_t ~ N(0, λ/τ² I),   b_t flat,

with ``K_ϱ = (1-ϱ) Σ_v K_v + ϱ ⊙_v K_v`` and ``τ = (1-ϱ)V + ϱ``; multiplying by τ gives the
paper's system (eq. 12) exactly.  The bias is integrated out under its flat prior, so the
objective is the restricted (REML) likelihood

    -log p(Y) = Σ_t [½ y_tᵀ P y_t] + T/2 (log|C| + log 1ᵀC⁻¹1 + (N-1) log 2π),

``C = (K_ϱ/η + λI)/τ²``, ``P = C⁻¹ - C⁻¹11ᵀC⁻¹ / 1ᵀC⁻¹1``, with analytic gradient
``½ Σ_ij (T·P - P Y Yᵀ P)_ij ∂C_ij`` in the unconstrained parameters (log γ_v, log λ,
logit ϱ).  One Cholesky factor per evaluation serves all tasks (their kernels are shared).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import linalg, optimize
from scipy.special import expit

from bayesmv.components.kernels import GAMMA_RANGE, squared_distances
from bayesmv.components.tensor import tau_of
from bayesmv.inference.conjugate import cholesky_with_jitter

#: search ranges of the unconstrained λ and ϱ
LOG_LAM_RANGE = (np.log(1e-8), np.log(1e3))
LOGIT_RHO_RANGE = (-10.0, 10.0)


@dataclass
class EvidenceResult:
    """Hyper-parameters chosen by the marginal likelihood, and how the search went."""

    gammas: list[float | None]
    lam: float
    rho: float
    neg_log_evidence: float
    n_iterations: int
    seconds: float
    n_samples: int
    free: tuple[str, ...]
    at_bounds: tuple[str, ...] = ()


class RhoTensorEvidence:
    """Negative restricted log marginal likelihood of the ϱ-tensor model and its gradient.

    Parameters
    ----------
    views : list of ndarray
        Standardised training views.
    kernels : sequence of {"rbf", "linear"}
    Y : ndarray (N, T)
        Targets, one column per task.
    eta : float
        The paper's η (fixed).
    gammas, lam, rho :
        Fixed values, or None for the ones to choose.
    """

    def __init__(self, views: Sequence[np.ndarray], kernels: Sequence[str], Y: np.ndarray,
                 eta: float, gammas: Sequence[float | None], lam: float | None,
                 rho: float | None) -> None:
        self.kernels = tuple(kernels)
        self.Y = np.asarray(Y, dtype=float)
        self.eta = float(eta)
        self.V = len(views)
        self.sizes = [X.shape[1] for X in views]
        self.fixed_gammas = list(gammas)
        self.fixed_lam, self.fixed_rho = lam, rho
        # what does not depend on the hyper-parameters, computed once
        self.base = [squared_distances(X) if k == "rbf" else X @ X.T
                     for k, X in zip(self.kernels, views, strict=True)]
        self.free_gamma = [v for v in range(self.V)
                           if self.kernels[v] == "rbf" and gammas[v] is None]

    # ------------------------------------------------------------ parameters
    @property
    def free(self) -> tuple[str, ...]:
        names = [f"gamma[{v}]" for v in self.free_gamma]
        names += ["lam"] if self.fixed_lam is None else []
        names += ["rho"] if self.fixed_rho is None else []
        return tuple(names)

    def bounds(self) -> list[tuple[float, float]]:
        out = [tuple(np.log(np.asarray(GAMMA_RANGE) / self.sizes[v])) for v in self.free_gamma]
        out += [LOG_LAM_RANGE] if self.fixed_lam is None else []
        out += [LOGIT_RHO_RANGE] if self.fixed_rho is None else []
        return out

    def start(self) -> np.ndarray:
        z = [np.log(1.0 / self.sizes[v]) for v in self.free_gamma]
        z += [np.log(0.1)] if self.fixed_lam is None else []
        z += [0.0] if self.fixed_rho is None else []
        return np.asarray(z, dtype=float)

    def unpack(self, z: np.ndarray) -> tuple[list[float | None], float, float]:
        z = list(np.asarray(z, dtype=float))
        gammas = list(self.fixed_gammas)
        for v in self.free_gamma:
            gammas[v] = float(np.exp(z.pop(0)))
        lam = float(np.exp(z.pop(0))) if self.fixed_lam is None else float(self.fixed_lam)
        rho = float(expit(z.pop(0))) if self.fixed_rho is None else float(self.fixed_rho)
        return gammas, lam, rho

    # -------------------------------------------------------------- objective
    def grams(self, gammas: Sequence[float | None]) -> list[np.ndarray]:
        return [np.exp(-g * B) if k == "rbf" else B
                for k, g, B in zip(self.kernels, gammas, self.base, strict=True)]

    def __call__(self, z: np.ndarray) -> tuple[float, np.ndarray]:
        gammas, lam, rho = self.unpack(z)
        Ks = self.grams(gammas)
        N, T = self.Y.shape
        tau = tau_of(rho, self.V)
        prod = np.prod(Ks, axis=0)
        total = np.sum(Ks, axis=0)
        scale = 1.0 / (self.eta * tau**2)
        C = ((1.0 - rho) * total + rho * prod) * scale
        C[np.diag_indices(N)] += lam / tau**2
        L = cholesky_with_jitter(C, "the marginal likelihood's covariance")
        Ci = linalg.cho_solve((L, True), np.eye(N))
        Ci1 = Ci.sum(axis=1)
        s = float(Ci1.sum())
        CiY = Ci @ self.Y
        PY = CiY - np.outer(Ci1, CiY.sum(axis=0) / s)
        nll = (0.5 * float(np.sum(self.Y * PY))
               + 0.5 * T * (2.0 * np.sum(np.log(np.diag(L))) + np.log(s)
                            + (N - 1) * np.log(2 * np.pi)))
        M = T * (Ci - np.outer(Ci1, Ci1) / s) - PY @ PY.T  # ∂nll = ½ Σ M ∘ ∂C
        grad = []
        for v in self.free_gamma:
            dC = -gammas[v] * self.base[v] * ((1.0 - rho) * Ks[v] + rho * prod) * scale
            grad.append(0.5 * float(np.sum(M * dC)))
        if self.fixed_lam is None:
            grad.append(0.5 * float(np.trace(M)) * lam / tau**2)
        if self.fixed_rho is None:
            dC = (prod - total) * scale - (2.0 * (1.0 - self.V) / tau) * C
            grad.append(0.5 * float(np.sum(M * dC)) * rho * (1.0 - rho))
        return nll, np.asarray(grad)

    def maximise(self, max_iter: int = 200) -> EvidenceResult:
        """Maximise the evidence over the free hyper-parameters with L-BFGS-B."""
        start = time.perf_counter()
        res = optimize.minimize(self, self.start(), jac=True, method="L-BFGS-B",
                                bounds=self.bounds(), options={"maxiter": max_iter})
        gammas, lam, rho = self.unpack(res.x)
        # an optimum on the search range's edge: the evidence keeps rising beyond it (e.g.
        # λ → 0 when the labels can be interpolated, γ → 0 when a view is best linear)
        at_bounds = tuple(name for name, z, (lo, hi) in zip(self.free, res.x, self.bounds(),
                                                             strict=True)
                          if min(z - lo, hi - z) < 1e-6 * max(1.0, hi - lo))
        return EvidenceResult(gammas=gammas, lam=lam, rho=rho, at_bounds=at_bounds,
                              neg_log_evidence=float(res.fun), n_iterations=int(res.nit),
                              seconds=time.perf_counter() - start, n_samples=self.Y.shape[0],
                              free=self.free)


__all__ = ["EvidenceResult", "RhoTensorEvidence"]
