"""Shared plumbing for model-graph components.

A component contributes random variables and potentials to a ``pm.Model`` (``build``),
proposes a dispersed starting point for them (``initial_values``) and, where prediction needs
it, evaluates the same map with NumPy on one posterior draw or a fitted state.  Components
talk to each other only through :class:`BuildContext`: what one piece produces (a latent
dimension, a number of features) it records in ``ctx.sizes`` for the next piece to read, and
the coordinates it names it registers with :meth:`BuildContext.add_coord`.

Where a model states an improper flat prior (an SVM's bias, the unpenalised parameters of a
published objective), the graph uses :class:`WideFlat`: a proper stand-in whose log-density
differs from the flat one by ``(x / scale)² / 2``, so that PyMC's forward tools
(``pm.sample_prior_predictive``, ``pm.model_to_graphviz``), which must draw every variable,
work on every graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.distributions.shape_utils import rv_size_is_none
from pytensor.tensor.random.op import RandomVariable

from bayesmv.data import MultiViewData

#: scale of :class:`WideFlat`: far beyond any value a bias or a penalised weight reaches on
#: the standardised data and ±1 targets these models see; the log-density then differs from
#: the flat prior's by ½(x/FLAT_SCALE)², under 5·10⁻⁹ for |x| < 100
FLAT_SCALE = 1e6


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


class WideFlatRV(RandomVariable):
    """Draws of :class:`WideFlat`: ``scale`` times standard normals."""

    name = "wide_flat"
    signature = "()->()"
    dtype = "floatX"
    _print_name = ("WideFlat", "\\operatorname{WideFlat}")

    @classmethod
    def rng_fn(cls, rng: np.random.Generator, scale: np.ndarray, size) -> np.ndarray:
        return rng.normal(0.0, scale, size=size)


wide_flat = WideFlatRV()


class WideFlat(pm.Continuous):
    r"""A flat prior made proper: ``N(0, scale²)`` without its normalising constant.

    .. math:: \log p(x) = -\tfrac12 (x / \mathrm{scale})^2

    Stands where the model's prior is improper and flat, e.g. the unpenalised bias of an
    SVM.  ``pm.Flat`` cannot be drawn from, so PyMC's prior predictive and its model graph
    (which evaluates shapes by drawing) fail on it; this one draws ``scale · N(0, 1)``.  The
    normalising constant ``-log(scale √(2π))`` is left out so that the graph's log-density
    still equals minus the published objective (as the tests check) up to ``½(x/scale)²``;
    with the default :data:`FLAT_SCALE` fitted results do not change beyond rounding.

    Parameters
    ----------
    scale : float, default FLAT_SCALE
        Standard deviation of the proper stand-in.
    """

    rv_op = wide_flat

    @classmethod
    def dist(cls, scale: float = FLAT_SCALE, **kwargs):
        return super().dist([pt.as_tensor_variable(np.float64(scale))], **kwargs)

    def support_point(rv, size, scale):
        # the flat prior's start (pm.Flat starts at zero too)
        return pt.zeros(scale.shape if rv_size_is_none(size) else size)

    def logp(value, scale):
        return -0.5 * (value / scale) ** 2
