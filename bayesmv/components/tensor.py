"""The ϱ-tensor combiner of ϱTMV-RKM: ``K_ϱ = (1-ϱ) Σ_v K_v + ϱ ⊙_v K_v``.

ϱ = 0 is MV-RKM (late fusion, one weight vector per view), ϱ = 1 TMV-RKM (early fusion
through the tensor product of the views' feature maps).  In the Bayesian reading
the decision values are a Gaussian process on the ±1 targets' scale,

    y_t = b_t + g_t + ε_t,   g_t ~ N(0, K_ϱ / (η τ²)),   ε_t ~ N(0, λ/τ²),   τ = (1-ϱ)V + ϱ,

and the paper's linear system (eq. 12) is τ times its posterior-mean equations.  With exact
kernels the combiner hands the likelihood this Gaussian latent to integrate out; with random
features it makes the weights explicit, ``g_t = Ψ θ_t``, ``θ_t ~ N(0, I)``, with
``Ψ = [√(1-ϱ) Φ_1, …, √(1-ϱ) Φ_V, √ϱ Φ_×] / (τ √η)`` so that ``Ψ Ψᵀ ≈ K_ϱ / (η τ²)``.
The bias ``b_t`` has the paper's flat prior, in the graph a
:class:`~bayesmv.components.base.WideFlat` (flat up to ``½(b/FLAT_SCALE)²``, and drawable).
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Sequence
from functools import reduce

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from bayesmv.components.base import (
    GAUSSIAN_PROCESS,
    GRAMS,
    PRODUCT_BLOCK,
    VIEW_FEATURES,
    BuildContext,
    Component,
    LatentGaussian,
    ViewFeatures,
    WideFlat,
)


def tau_of(rho: float, n_views: int) -> float:
    """``τ = (1 - ϱ)V + ϱ`` (paper eq. 12)."""
    return (1.0 - rho) * n_views + rho


def mix_sum_and_product(total, prod, rho):
    """``(1-ϱ) Σ + ϱ ⊙``: the ϱ-tensor rule applied to the views' sum and product (kernels,
    or decision values read off them), for NumPy arrays and PyTensor tensors alike."""
    return (1.0 - rho) * total + rho * prod


def combine_kernels(grams: Sequence, rho) -> np.ndarray | pt.TensorVariable:
    """``K_ϱ = (1-ϱ) Σ_v K_v + ϱ ⊙_v K_v`` of NumPy Gram matrices or PyTensor kernels (the
    graph's and the solvers' one definition)."""
    total = reduce(operator.add, grams)
    if len(grams) == 1:  # a NumPy Gram is copied: never hand back the caller's (cached) one
        return np.array(total, dtype=float, copy=True) if isinstance(total, np.ndarray) else total
    if isinstance(rho, numbers.Real) and rho == 0.0:
        return total
    return mix_sum_and_product(total, reduce(operator.mul, grams), rho)


def feature_design(per_view: Sequence, joint, rho, eta: float):
    """``Ψ = [√(1-ϱ) Φ_1, …, √(1-ϱ) Φ_V, √ϱ Φ_×] / (τ √η)``, NumPy or PyTensor blocks."""
    tau = tau_of(rho, len(per_view))
    xp = pt if isinstance(joint, pt.Variable) else np
    blocks = [xp.sqrt(1.0 - rho) * B for B in per_view] + [xp.sqrt(rho) * joint]
    return xp.concatenate(blocks, axis=1) / (tau * np.sqrt(eta))


#: what the graph's ``f`` is with random features (see :class:`RhoTensorCombiner`)
DECISION_RULES = ("model", "add")


class RhoTensorCombiner(Component):
    """Mix the views' kernels (or feature blocks) with the ϱ-tensor rule.

    Parameters
    ----------
    rho : float or None
        ϱ ∈ [0, 1]; ``None`` makes it a free hyper-parameter with a uniform prior.
    eta : float
        The paper's η: the prior covariance of the decision values is ``K_ϱ / (η τ²)``.
    decision_rule : {"model", "add"}, default "model"
        What the decision value prediction reads is: ``"model"``, the Gaussian model's
        ``g + b``; ``"add"``, the paper's eq. 15, ``τg + b`` (its linear system is τ times
        the model's).  The likelihood sees ``g + b`` either way, so the fit is the same.
        With random features it is the graph's ``f``; with exact kernels the process's
        ``decision_scale`` (:class:`~bayesmv.components.base.LatentGaussian`).
    """

    consumes = (GRAMS, VIEW_FEATURES)
    produces = GAUSSIAN_PROCESS
    requires = {VIEW_FEATURES: frozenset({PRODUCT_BLOCK})}

    def __init__(self, rho: float | None = 0.5, eta: float = 1.0,
                 decision_rule: str = "model") -> None:
        self.rho = rho
        self.eta = eta
        self.decision_rule = decision_rule

    def build(self, ctx: BuildContext, kernels) -> LatentGaussian:
        if self.decision_rule not in DECISION_RULES:
            raise ValueError(f"RhoTensorCombiner: decision_rule must be one of "
                             f"{DECISION_RULES}, got {self.decision_rule!r}")
        rho = self.rho if self.rho is not None else pm.Uniform("rho", 0.0, 1.0)
        bias = WideFlat("b", dims="task")
        if isinstance(kernels, ViewFeatures):  # random features: per-view and product blocks
            Psi = feature_design(kernels.tensors, kernels.product, rho, self.eta)
            ctx.add_coord("weight", int(Psi.shape[1].eval()))
            theta = pm.Normal("theta", 0.0, 1.0, dims=("task", "weight"))
            tau = tau_of(rho, len(kernels.tensors))
            g = Psi @ theta.T
            if self.decision_rule == "model":
                h = pm.Deterministic("f", g + bias, dims=("sample", "task"))
            else:
                pm.Deterministic("f", tau * g + bias, dims=("sample", "task"))
                h = g + bias
            return LatentGaussian(mean=h, cov=None, noise_factor=tau**-2)
        tau = tau_of(rho, len(kernels))
        return LatentGaussian(mean=bias, cov=combine_kernels(kernels, rho) / (self.eta * tau**2),
                              noise_factor=tau**-2,
                              decision_scale=tau if self.decision_rule == "add" else 1.0)

    def initial_values(self, ctx: BuildContext, rng=None) -> dict[str, np.ndarray]:
        out = {"b": np.zeros(ctx.n_tasks)}
        if self.rho is None:
            out["rho_interval__"] = np.array(0.0)
        return out
