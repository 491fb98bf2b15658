"""Combiners: from features to decision values ``f`` (one column per binary task)."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from bayesmv.components.base import (
    DECISION,
    VIEW_FEATURES,
    BuildContext,
    Component,
    ViewFeatures,
    WideFlat,
)


class SumCombiner(Component):
    """One weight vector per task on the (concatenated) features: ``f = Φ βᵀ``.

    ``Φ = [φ_1, …, φ_V]`` are the feature map's blocks (one per view, or the one block of a
    shared representation's features); with linear features and a Gaussian prior this is
    Bayesian linear (ridge, logistic...) regression on the concatenated views.

    Parameters
    ----------
    prior_precision : float
        Precision ``v`` of ``β ~ N(0, v⁻¹ I)`` when it is fixed (the paper's default 1e-2).
    precision_prior : tuple of float or None
        ``(a_v, b_v)``: give ``v`` a Gamma(a_v, b_v) hyper-prior instead of fixing it.
    flat_bias : bool, default False
        Add a per-task intercept ``b`` with a flat (unregularised) prior, ``f = Φ βᵀ + b`` —
        the bias of an SVM, which its objective does not penalise.  In the graph it is a
        :class:`~bayesmv.components.base.WideFlat` (the flat prior made proper, so PyMC's
        prior predictive can draw it); the posterior of the flat model is proper under the
        hinge as long as every task has both labels.
    """

    consumes = (VIEW_FEATURES,)
    produces = DECISION

    def __init__(self, prior_precision: float = 1e-2,
                 precision_prior: tuple[float, float] | None = None,
                 flat_bias: bool = False) -> None:
        self.prior_precision = prior_precision
        self.precision_prior = precision_prior
        self.flat_bias = flat_bias

    def build(self, ctx: BuildContext, features: ViewFeatures) -> pt.TensorVariable:
        n_outputs = ctx.sizes["feature"]
        if self.precision_prior is None:
            v = self.prior_precision
        else:
            a_v, b_v = self.precision_prior
            v = pm.Gamma("v", alpha=a_v, beta=b_v)
        beta = pm.Normal("beta", 0.0, v**-0.5, shape=(ctx.n_tasks, n_outputs),
                         dims=("task", "feature"))
        f = features.linear(beta)
        if self.flat_bias:
            f = f + WideFlat("bias", shape=ctx.n_tasks, dims="task")
        return pm.Deterministic("f", f, dims=("sample", "task"))

    def initial_values(self, ctx: BuildContext, rng=None) -> dict[str, np.ndarray]:
        out = {"beta": np.zeros((ctx.n_tasks, ctx.sizes["feature"]))}
        if self.precision_prior is not None:
            out["v_log__"] = np.array(np.log(self.prior_precision))
        if self.flat_bias:
            out["bias"] = np.zeros(ctx.n_tasks)
        return out
