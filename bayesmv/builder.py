"""The model-graph builder: representation → feature map → combiner → likelihood.

Every model in bayesmv is one ``pm.Model`` assembled from four pieces.  Each piece
is a :class:`~bayesmv.components.base.Component` with

* ``build(ctx, ...)`` adding its random variables and potentials to the open model and
  returning the tensor the next piece consumes,
* ``initial_values(...)`` proposing a dispersed start, and
* a declaration of what it consumes and produces (checked when the builder is made).

Prediction builds the same graph on the new rows (``build(..., fitted=...)``) and evaluates
its ``f`` at the posterior draws (:class:`bayesmv.inference.predict.GraphPredictor`).

New pieces (ϱ-tensor or CP combiners, Nyström or landmark maps, logistic or least-squares
likelihoods) plug in by implementing the same three methods; the builder does not change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pymc as pm
from sklearn.base import BaseEstimator

from bayesmv.components.base import (
    KIND_DESCRIPTIONS,
    VIEWS,
    BuildContext,
    Component,
    Identity,
)
from bayesmv.data import MultiViewData


class CompositionError(ValueError):
    """Two pieces of a :class:`ModelBuilder` that cannot be connected."""


def _name(piece: Component) -> str:
    return type(piece).__name__


def _fitting(kind: str, role: str) -> list[str]:
    """Names of the public components in ``role`` that consume ``kind``."""
    import bayesmv.components as components

    out = []
    for name in components.__all__:
        cls = getattr(components, name)
        if (isinstance(cls, type) and issubclass(cls, Component) and cls is not Component
                and kind in cls.consumes and _ROLE.get(cls.produces) == role):
            out.append(name)
    return out


#: which slot of the builder a piece producing this kind fills
_ROLE = {"views": "representation", "latent": "representation",
         "view_features": "feature_map", "grams": "feature_map",
         "decision": "combiner", "gaussian_process": "combiner", "nothing": "likelihood"}


def check_composition(pieces: tuple[Component, ...]) -> None:
    """Raise :class:`CompositionError` naming both pieces when one cannot consume what the
    previous one produces (or lacks a property it requires)."""
    roles = ("representation", "feature_map", "combiner", "likelihood")
    for role, piece in zip(roles, pieces, strict=True):
        if not isinstance(piece, Component):
            raise CompositionError(f"{role} must be a bayesmv component "
                                   f"(bayesmv.components), got {piece!r}")
        if _ROLE.get(piece.produces) != role:
            raise CompositionError(f"{_name(piece)} cannot be the {role}: it produces "
                                   f"{KIND_DESCRIPTIONS[piece.produces]}")
    previous: Component | None = None
    for piece in pieces:
        if previous is not None:
            kind = previous.produces
            if kind not in piece.consumes:
                takes = " or ".join(KIND_DESCRIPTIONS[k] for k in piece.consumes)
                alternatives = _fitting(kind, _ROLE[piece.produces])
                raise CompositionError(
                    f"{_name(piece)} cannot follow {_name(previous)}: {_name(previous)} "
                    f"produces {KIND_DESCRIPTIONS[kind]} and {_name(piece)} takes {takes}"
                    + (f"; after {_name(previous)} use "
                       f"{', '.join(alternatives)}" if alternatives else ""))
            missing = piece.requires.get(kind, frozenset()) - previous.provides
            if missing:
                raise CompositionError(
                    f"{_name(piece)} cannot follow {_name(previous)}: it needs "
                    f"{KIND_DESCRIPTIONS[kind]} "
                    + " and ".join(_PROPERTY_HELP[p] for p in sorted(missing))
                    + f", which {_name(previous)} does not provide")
        elif piece.consumes and VIEWS not in piece.consumes:
            raise CompositionError(f"{_name(piece)} cannot read the views directly")
        previous = piece


_PROPERTY_HELP = {
    "fixed": "that are data, not functions of random variables (LinearFeatures, "
             "LandmarkFeatures, NystromFeatures or ViewRandomFeatures)",
    "product_block": "with a block for the product of the views' kernels (ViewRandomFeatures; "
                     "ViewKernels for exact kernels)",
}


@dataclass
class BuiltModel:
    """A built graph plus what samplers and predictors need to know about it."""

    model: pm.Model
    context: BuildContext
    builder: ModelBuilder
    cache: dict[Any, Any] = field(default_factory=dict)  # compiled functions of the model

    def initial_values(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """A fresh dispersed starting point (value-variable names → arrays): every piece's
        proposal for its variables, and PyMC's default start for any variable a piece left
        out."""
        proposed = self.builder.initial_values(self.context, rng)
        names = [v.name for v in self.model.value_vars]
        if all(n in proposed for n in names):
            return proposed
        default = self.model.initial_point()
        return {n: proposed[n] if n in proposed else default[n] for n in names}


class ModelBuilder(BaseEstimator):
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
    Each piece declares what it consumes and produces (``Component.consumes``,
    ``produces``, ``provides``, ``requires``); the constructor checks that every piece can
    take what the previous one hands on and raises :class:`CompositionError`, naming both
    pieces and what would fit, when it cannot.  Each piece's ``build`` receives what the
    previous one returned; sizes and coordinates travel through the :class:`BuildContext`, so
    any feature map can feed any combiner that understands its output.  The builder is a
    scikit-learn-style object: ``get_params(deep=True)`` lists every piece's parameters
    (``combiner__prior_precision``...), and ``clone`` copies it.  Models whose pieces are
    conjugate (Gaussian weights, Gaussian likelihood) are also solved in closed form from the
    same pieces' NumPy methods; the graph then serves as the reference density (tests
    compare the two) and for sampling hyper-parameters.

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
        self.representation = representation
        self.feature_map = feature_map
        self.combiner = combiner
        self.likelihood = likelihood
        check_composition(self.pieces)

    @property
    def pieces(self) -> tuple[Component, Component, Component, Component]:
        representation = (self.representation if self.representation is not None
                          else Identity())
        return (representation, self.feature_map, self.combiner, self.likelihood)

    @property
    def models_views(self) -> bool:
        """Whether a piece puts a likelihood on the view features themselves (then columns
        constant on the training rows are left out: see ``Component.models_views``)."""
        return any(piece.models_views for piece in self.pieces)

    def build(self, data: MultiViewData, targets: np.ndarray | None, *,
              augmented: bool = False, fitted: dict[str, Any] | None = None,
              n_outputs: int | None = None) -> BuiltModel:
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
        fitted : dict or None
            The training build's ``context.state``: build the graph of ``f`` on new rows
            (``targets=None``, ``n_outputs`` tasks) with what the pieces fitted on the training
            rows (landmarks, subsets, random bases), without the likelihood and without
            per-row random variables, so that ``f`` can be evaluated at posterior draws of
            the global variables (:class:`bayesmv.inference.predict.GraphPredictor`).
        """
        check_composition(self.pieces)  # also after set_params
        if fitted is None:
            targets = np.asarray(targets, dtype=float)
            if targets.ndim != 2 or targets.shape[0] != data.n_samples:
                raise ValueError("targets must have shape (n_samples, n_tasks)")
            n_tasks = targets.shape[1]
        else:
            targets, n_tasks = None, int(n_outputs)
        ctx = BuildContext(data=data, targets=targets, augmented=augmented, fitted=fitted,
                           n_outputs=n_tasks)
        coords = {"sample": np.arange(data.n_samples), "view": list(data.view_names),
                  "task": np.arange(n_tasks)}
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
