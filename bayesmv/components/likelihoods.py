"""Likelihoods of the targets given decision values ``f``: hinge (max-margin
pseudo-likelihood) and Gaussian (least squares).

The hinge pseudo-likelihood ``ℓ(y | f) = exp(-2C·max(0, 1 - y f))`` and its data augmentation
(Polson & Scott 2011): with ``a = C(1 - y f)``,

    ∫_0^∞ (2πλ)^{-1/2} exp(-(λ + a)² / (2λ)) dλ = exp(-2·max(a, 0)),

so the augmented joint density over (y, λ) has the pseudo-likelihood as its marginal.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from scipy import stats
from scipy.special import expit

from bayesmv.components.base import BuildContext, Component


def hinge_log_pseudolikelihood(f: np.ndarray, y: np.ndarray, C: float) -> np.ndarray:
    """``log ℓ(y | f) = -2C·max(0, 1 - y f)`` elementwise."""
    return -2.0 * C * np.maximum(0.0, 1.0 - y * f)


def augmented_log_density(lam: np.ndarray, f: np.ndarray, y: np.ndarray, C: float) -> np.ndarray:
    """Log of the augmented density ``(2πλ)^{-1/2} exp(-(λ + C(1 - y f))² / (2λ))``."""
    a = C * (1.0 - y * f)
    return -0.5 * np.log(2 * np.pi * lam) - (lam + a) ** 2 / (2.0 * lam)


def hinge_probability(f: np.ndarray, C: float) -> np.ndarray:
    """``p(y = +1 | f)`` from the normalised pseudo-likelihood (Sollich 2002)."""
    log_pos = hinge_log_pseudolikelihood(f, 1.0, C)
    log_neg = hinge_log_pseudolikelihood(f, -1.0, C)
    return 1.0 / (1.0 + np.exp(log_neg - log_pos))


class HingeLikelihood(Component):
    """Max-margin hinge pseudo-likelihood with regularisation constant ``C``."""

    def __init__(self, C: float = 1.0) -> None:
        self.C = C

    def build(self, ctx: BuildContext, f: pt.TensorVariable) -> None:
        y = pm.Data("y_tasks", ctx.targets, dims=("sample", "task"))
        if ctx.augmented:
            lam = pm.HalfFlat("lam", shape=ctx.targets.shape, dims=("sample", "task"))
            a = self.C * (1.0 - y * f)
            pm.Potential("hinge_augmented",
                         pt.sum(-0.5 * pt.log(2 * np.pi * lam) - (lam + a) ** 2 / (2.0 * lam)))
        else:
            pm.Potential("hinge", -2.0 * self.C * pt.sum(pt.maximum(0.0, 1.0 - y * f)))

    def initial_values(self, ctx: BuildContext, rng=None) -> dict[str, np.ndarray]:
        return {"lam_log__": np.zeros(ctx.targets.shape)} if ctx.augmented else {}

    def log_likelihood(self, f: np.ndarray, y: np.ndarray) -> np.ndarray:
        return hinge_log_pseudolikelihood(f, y, self.C)

    def probability(self, f: np.ndarray) -> np.ndarray:
        return hinge_probability(f, self.C)


class GaussianLikelihood(Component):
    """Least squares: ``y ~ N(f, σ²)`` for every task column.

    Parameters
    ----------
    sigma : float or None
        Noise standard deviation when fixed; ``None`` gives it a half-normal prior of scale
        ``sigma_prior_scale`` (sampled or optimised with the rest).
    sigma_prior_scale : float
        Scale of that half-normal prior.
    """

    def __init__(self, sigma: float | None = 1.0, sigma_prior_scale: float = 1.0) -> None:
        self.sigma = sigma
        self.sigma_prior_scale = sigma_prior_scale

    def build(self, ctx: BuildContext, f: pt.TensorVariable) -> None:
        sigma = (self.sigma if self.sigma is not None
                 else pm.HalfNormal("sigma", self.sigma_prior_scale))
        pm.Normal("y_obs", mu=f, sigma=sigma, observed=ctx.targets, dims=("sample", "task"))

    def initial_values(self, ctx: BuildContext, rng=None) -> dict[str, np.ndarray]:
        return {} if self.sigma is not None else {"sigma_log__": np.array(0.0)}

    def log_likelihood(self, f: np.ndarray, y: np.ndarray, sigma: float | None = None
                       ) -> np.ndarray:
        s = self.sigma if sigma is None else sigma
        return stats.norm.logpdf(y, loc=f, scale=s)

    @staticmethod
    def probability(f: np.ndarray, sigma2: float, target: float = 1.0) -> np.ndarray:
        """``p(y = +1 | f)`` from the likelihood normalised over the two targets ``±target``:
        ``N(t; f, σ²) / (N(t; f, σ²) + N(-t; f, σ²)) = sigmoid(2 t f / σ²)``."""
        return expit(2.0 * target * np.asarray(f) / sigma2)
