"""The model-graph builder: representation → feature map → combiner → likelihood.

Every model in bayesmv is one ``pm.Model`` assembled from four pieces.  Each piece
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

from bayesmv.components.base import BuildContext, Component, Identity
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
    representation : Component or None
        Maps the views to what the features see (e.g. :class:`SharedLatent`); ``None`` means
        :class:`~bayesmv.components.base.Identity` (the views as given).
    feature_map : Component
        E.g. :class:`RandomFourierFeatures`, :class:`ViewKernels`, :class:`LandmarkFeatures`.
    combiner : Component
        E.g. :class:`SumCombiner` (one weight vector per task), :class:`RhoTensorCombiner`.
    likelihood : Component
        E.g. :class:`HingeLikelihood`, :class:`GaussianLikelihood`.

    Notes
    -----
    Each piece's ``build`` receives what the previous one returned; sizes and coordinates
    travel through the :class:`BuildContext`, so any feature map can feed any combiner that
    understands its output.  Models whose pieces are conjugate (Gaussian weights, Gaussian
    likelihood) are also solved in closed form from the same pieces' NumPy methods; the graph
    then serves as the reference density (tests compare the two) and for sampling
    hyper-parameters.

    Examples
    --------
    >>> from bayesmv import ModelBuilder
    >>> from bayesmv.components import (SharedLatent, RandomFourierFeatures,
    ...                                 DPMixtureSpectral, SumCombiner, HingeLikelihood)
    >>> builder = ModelBuilder(SharedLatent(latent_dim=5),
    ...                        RandomFourierFeatures(50, DPMixtureSpectral()),
    ...                        SumCombiner(), HingeLikelihood(C=1.0))
    """

    def __init__(self, representation: Component | None, feature_map: Component,
                 combiner: Component, likelihood: Component) -> None:
        self.representation = representation if representation is not None else Identity()
        self.feature_map = feature_map
        self.combiner = combiner
        self.likelihood = likelihood

    @property
    def pieces(self) -> tuple[Component, Component, Component, Component]:
        return (self.representation, self.feature_map, self.combiner, self.likelihood)

    def build(self, data: MultiViewData, targets: np.ndarray, *, augmented: bool = False
              ) -> BuiltModel:
        """Build the graph on training data.

        Parameters
        ----------
        data : MultiViewData
            Validated (and usually standardised) views.
        targets : ndarray of shape (n_samples, n_tasks)
            One column per task (±1 for the classification likelihoods).
        augmented : bool
            Keep the augmentation variables (hinge λ, view latents U) explicit.  Samplers use
            the collapsed graph; the augmented one is the joint the Gibbs steps are derived from.
        """
        targets = np.asarray(targets, dtype=float)
        if targets.ndim != 2 or targets.shape[0] != data.n_samples:
            raise ValueError("targets must have shape (n_samples, n_tasks)")
        ctx = BuildContext(data=data, targets=targets, augmented=augmented)
        coords = {"sample": np.arange(data.n_samples), "view": list(data.view_names),
                  "task": np.arange(targets.shape[1])}
        with pm.Model(coords=coords) as model:
            out: Any = None
            for piece in self.pieces:
                out = piece.build(ctx, out)
        return BuiltModel(model=model, context=ctx, builder=self)

    def initial_values(self, ctx: BuildContext, rng: np.random.Generator
                       ) -> dict[str, np.ndarray]:
        """A dispersed start: every piece proposes values for the variables it added."""
        out: dict[str, np.ndarray] = {}
        for piece in self.pieces:
            out.update(piece.initial_values(ctx, rng))
        return out
