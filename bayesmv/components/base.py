"""Shared plumbing for model-graph components.

A component contributes random variables and potentials to a ``pm.Model`` (``build``),
proposes a dispersed starting point for them (``initial_values``) and, where prediction needs
it, evaluates the same map with NumPy on one posterior draw or a fitted state.  Components
talk to each other only through :class:`BuildContext`: what one piece produces (a latent
dimension, a number of features) it records in ``ctx.sizes`` for the next piece to read, and
the coordinates it names it registers with :meth:`BuildContext.add_coord`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pymc as pm

from bayesmv.data import MultiViewData


@dataclass
class BuildContext:
    """What one ``ModelBuilder.build`` call knows while it adds the pieces.

    Attributes
    ----------
    data : MultiViewData
        The (standardised) training views.
    targets : ndarray of shape (n_samples, n_tasks)
        Targets, one column per task (±1 for classification, real values for regression).
    augmented : bool
        Build the data-augmented graph (explicit per-sample auxiliaries such as the hinge's
        λ and the view-specific latents U) instead of the collapsed one.
    sizes : dict
        Sizes one piece publishes for the next (``"latent"``, ``"feature"``, ...).
    state : dict
        Fixed (non-random) quantities a piece derives from the training data and that
        prediction needs again (landmark indices, Nyström subsets, random frequencies...).
    """

    data: MultiViewData
    targets: np.ndarray
    augmented: bool = False
    sizes: dict[str, int] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def n_samples(self) -> int:
        return self.data.n_samples

    @property
    def n_tasks(self) -> int:
        return int(self.targets.shape[1])

    def add_coord(self, name: str, length: int) -> None:
        """Register ``name`` as a dimension of ``length`` on the model being built."""
        self.sizes[name] = int(length)
        model = pm.modelcontext(None)
        if name not in model.coords:
            model.add_coord(name, np.arange(int(length)))


class Component:
    """Base class of the pieces.

    ``build(ctx, upstream)`` adds variables to the open ``pm.Model`` and returns what the next
    piece consumes; ``initial_values(ctx, rng)`` proposes a start for the variables it added
    (value-variable names → arrays).
    """

    def build(self, ctx: BuildContext, upstream: Any = None) -> Any:
        raise NotImplementedError

    def initial_values(self, ctx: BuildContext, rng: np.random.Generator
                       ) -> dict[str, np.ndarray]:
        return {}


class Identity(Component):
    """The views as given: the representation of every model without a shared latent."""

    def build(self, ctx: BuildContext, upstream: Any = None) -> MultiViewData:
        return ctx.data


@dataclass
class LatentGaussian:
    """A Gaussian latent the likelihood may integrate out: ``f = mean + g``.

    ``cov`` is the prior covariance of ``g`` (shared by every task), or ``None`` when ``mean``
    already holds the whole latent with its weights explicit.  ``noise_factor`` multiplies the
    likelihood's own noise variance (the ϱ-tensor model's ``1/τ²``).
    """

    mean: Any
    cov: Any = None
    noise_factor: Any = 1.0
