"""The model-graph builder: representation → feature map → combiner → likelihood.

Every model in bayesmv is one ``pm.Model`` assembled from four pieces (DESIGN §1).  Each piece
is a :class:`~bayesmv.components.base.Component` with

* ``build(ctx, ...)`` adding its random variables and potentials to the open model and
  returning the tensor the next piece consumes,
* ``initial_values(...)`` proposing a dispersed start, and
* a NumPy ``evaluate`` used at prediction time on posterior draws.

New pieces (ϱ-tensor or CP combiners, Nyström or landmark maps, logistic or least-squares
likelihoods) plug in by implementing the same three methods; the builder does not change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pymc as pm

from bayesmv.components.base import BuildContext, Component
from bayesmv.data import MultiViewData


@dataclass
class BuiltModel:
    """A built graph plus what samplers and predictors need to know about it."""

    model: pm.Model
    context: BuildContext
    builder: ModelBuilder

    def initial_values(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """A fresh dispersed starting point (value-variable names → arrays)."""
        return self.builder.initial_values(self.context, rng)


class ModelBuilder:
    """Compose representation, feature map, combiner and likelihood into one ``pm.Model``.

    Parameters
    ----------
    representation : Component
        Maps the views to what the features see (e.g. :class:`SharedLatent`).
    feature_map : Component
        E.g. :class:`RandomFourierFeatures`.
    combiner : Component
        E.g. :class:`SumCombiner` (one weight vector per task).
    likelihood : Component
        E.g. :class:`HingeLikelihood`.

    Examples
    --------
    >>> from bayesmv import ModelBuilder
    >>> from bayesmv.components import (SharedLatent, RandomFourierFeatures,
    ...                                 DPMixtureSpectral, SumCombiner, HingeLikelihood)
    >>> builder = ModelBuilder(SharedLatent(latent_dim=5),
    ...                        RandomFourierFeatures(50, DPMixtureSpectral()),
    ...                        SumCombiner(), HingeLikelihood(C=1.0))
    """

    def __init__(self, representation: Component, feature_map: Component,
                 combiner: Component, likelihood: Component) -> None:
        self.representation = representation
        self.feature_map = feature_map
        self.combiner = combiner
        self.likelihood = likelihood

    @property
    def latent_dim(self) -> int:
        return int(self.representation.latent_dim)

    @property
    def n_outputs(self) -> int:
        return 2 * int(self.feature_map.n_features) + 1

    def coords(self, data: MultiViewData, targets: np.ndarray) -> dict[str, Any]:
        coords = {
            "sample": np.arange(data.n_samples),
            "view": list(data.view_names),
            "task": np.arange(targets.shape[1]),
            "latent": np.arange(self.latent_dim),
            "feature": np.arange(self.n_outputs),
            "frequency": np.arange(self.feature_map.n_features),
        }
        spectral = getattr(self.feature_map, "spectral", None)
        if hasattr(spectral, "n_components"):
            coords["component"] = np.arange(spectral.n_components)
        return coords

    def build(self, data: MultiViewData, targets: np.ndarray, *, augmented: bool = False
              ) -> BuiltModel:
        """Build the graph on training data.

        Parameters
        ----------
        data : MultiViewData
            Validated (and usually standardised) views.
        targets : ndarray of shape (n_samples, n_tasks)
            ±1 targets.
        augmented : bool
            Keep the augmentation variables (hinge λ, view latents U) explicit.  Samplers use
            the collapsed graph; the augmented one is the joint the Gibbs steps are derived from.
        """
        targets = np.asarray(targets, dtype=float)
        if targets.ndim != 2 or targets.shape[0] != data.n_samples:
            raise ValueError("targets must have shape (n_samples, n_tasks)")
        ctx = BuildContext(data=data, targets=targets, augmented=augmented)
        with pm.Model(coords=self.coords(data, targets)) as model:
            Z = self.representation.build(ctx)
            Phi = self.feature_map.build(ctx, Z, self.latent_dim)
            f = self.combiner.build(ctx, Phi, self.n_outputs)
            self.likelihood.build(ctx, f)
        return BuiltModel(model=model, context=ctx, builder=self)

    def initial_values(self, ctx: BuildContext, rng: np.random.Generator
                       ) -> dict[str, np.ndarray]:
        out = self.representation.initial_values(ctx.data, rng)
        out.update(self.feature_map.initial_values(self.latent_dim, rng))
        out.update(self.combiner.initial_values(ctx.n_tasks, self.n_outputs))
        out.update(self.likelihood.initial_values(ctx.targets, ctx.augmented))
        if ctx.augmented:
            K = self.representation.view_latent_dim
            for v in range(ctx.data.n_views):
                n_obs = int(ctx.data.observed[:, v].sum())
                out[f"U_{v}"] = rng.standard_normal((n_obs, K))
        return out
