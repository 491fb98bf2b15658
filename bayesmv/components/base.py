"""Shared plumbing for model-graph components.

A component contributes random variables and potentials to a ``pm.Model`` (``build``),
proposes a dispersed starting point for them (``initial_values``) and declares what it
consumes and produces (:attr:`Component.consumes`, :attr:`Component.produces`).  Components
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
from typing import Any, ClassVar

import numpy as np
import pymc as pm
import pytensor.sparse as pts
import pytensor.tensor as pt
from pymc.distributions.shape_utils import rv_size_is_none
from pytensor.tensor.random.op import RandomVariable
from sklearn.base import BaseEstimator

from bayesmv.data import MultiViewData, block_slices
from bayesmv.params import RenamedParameters

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
    targets: np.ndarray | None
    augmented: bool = False
    sizes: dict[str, int] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    fitted: dict[str, Any] | None = None
    n_outputs: int | None = None

    @property
    def n_samples(self) -> int:
        return self.data.n_samples

    @property
    def n_tasks(self) -> int:
        return int(self.targets.shape[1]) if self.targets is not None else int(self.n_outputs)

    @property
    def predicting(self) -> bool:
        """Whether the graph is being built on new rows, to evaluate ``f`` at posterior draws
        (no targets, no per-row random variables, state fitted on the training rows)."""
        return self.fitted is not None

    def fitted_state(self, key: str, fit: Any) -> Any:
        """The training build's ``state[key]`` when predicting, else ``fit()`` (stored in
        ``state[key]`` so that prediction finds it): state fitted on the training rows lives
        in the built model, never in the component."""
        value = self.fitted[key] if self.predicting else fit()
        self.state[key] = value
        return value

    def add_coord(self, name: str, length: int) -> None:
        """Register ``name`` as a dimension of ``length`` on the model being built."""
        self.sizes[name] = int(length)
        model = pm.modelcontext(None)
        if name not in model.coords:
            model.add_coord(name, np.arange(int(length)))


#: what flows between the pieces (see :attr:`Component.consumes`)
VIEWS = "views"                    # MultiViewData: the views as given
LATENT = "latent"                  # tensor (n, m): one shared representation of every view
VIEW_FEATURES = "view_features"    # ViewFeatures: one feature block per view
GRAMS = "grams"                    # list of (n, n) Gram matrices, one per view
DECISION = "decision"              # tensor f (n, T): one decision value per task
GAUSSIAN_PROCESS = "gaussian_process"  # LatentGaussian: f with a prior covariance to integrate
NOTHING = "nothing"                # what a likelihood hands on
#: properties an output may provide (see :attr:`Component.provides`)
FIXED = "fixed"                    # data, not a function of random variables
PRODUCT_BLOCK = "product_block"    # features of the product of the views' kernels too

#: a sentence per kind, for the builder's error messages
KIND_DESCRIPTIONS = {
    VIEWS: "the views as given",
    LATENT: "a shared latent representation",
    VIEW_FEATURES: "one feature block per view",
    GRAMS: "one Gram matrix per view",
    DECISION: "decision values f",
    GAUSSIAN_PROCESS: "a Gaussian-process latent with a prior covariance",
    NOTHING: "nothing",
}


class Component(RenamedParameters, BaseEstimator):
    """Base class of the pieces.

    ``build(ctx, upstream)`` adds variables to the open ``pm.Model`` and returns what the next
    piece consumes; ``initial_values(ctx, rng)`` proposes a start for the variables it added
    (value-variable names → arrays).

    A component is an immutable specification: its constructor's arguments are its
    parameters (``get_params``/``set_params``/``sklearn.base.clone`` work on it), and whatever
    it derives from training data (landmarks, subsets, random bases) goes into the built
    model's :class:`BuildContext`, so one component can build on two data sets
    independently.

    Attributes
    ----------
    consumes : tuple of str
        The kinds of input ``build`` accepts (``VIEWS``, ``LATENT``, ``VIEW_FEATURES``...).
    produces : str
        The kind of what ``build`` returns.
    provides : frozenset of str
        Properties of the output a consumer may require: ``"fixed"`` (features that are data,
        not functions of random variables), ``"product_block"`` (features of the views'
        product kernel besides the per-view blocks).
    requires : dict
        ``{input kind: properties the input must provide}``.
    models_views : bool
        Whether the piece puts a likelihood on the view features themselves (a generative
        model of X).  Estimators then leave out the columns constant on the training rows,
        which such a model would read as features reproduced without noise.
    """

    consumes: ClassVar[tuple[str, ...]] = ()
    produces: ClassVar[str] = NOTHING
    provides: ClassVar[frozenset[str]] = frozenset()
    requires: ClassVar[dict[str, frozenset[str]]] = {}
    models_views: ClassVar[bool] = False

    def build(self, ctx: BuildContext, upstream: Any = None) -> Any:
        raise NotImplementedError

    def initial_values(self, ctx: BuildContext, rng: np.random.Generator
                       ) -> dict[str, np.ndarray]:
        return {}


class Identity(Component):
    """The views as given: the representation of every model without a shared latent."""

    produces = VIEWS

    def build(self, ctx: BuildContext, upstream: Any = None) -> MultiViewData:
        return ctx.data


def project_factors(dot, A, D: int, n):
    """``z_vᵀ A`` of shape (n, T, k) for factors A of shape (T, D + 1, k), bias row last, where
    ``dot(B)`` is ``x_v B``: the one definition for NumPy arrays and the graph's tensors (the
    view's product with all T·k columns at once, dense or sparse as ``dot`` makes it)."""
    T, k = A.shape[0], A.shape[2]
    B = A[:, :D, :].transpose(1, 0, 2).reshape((D, T * k))
    return dot(B).reshape((n, T, k)) + A[:, D, :][None, :, :]


@dataclass
class ViewFeatures:
    """What a per-view feature map hands to a combiner: one block ``φ_v`` per view.

    Attributes
    ----------
    tensors : list
        ``φ_v`` of shape (n, d_v): PyTensor tensors, shared variables or sparse shared
        variables.
    widths : tuple of int
        ``d_v`` per block.
    sparse : tuple of bool
        Which blocks are sparse.
    product : tensor or None
        Features of the product of the views' kernels (for the ϱ-tensor combiner), if the map
        provides them.
    """

    tensors: list[Any]
    widths: tuple[int, ...]
    sparse: tuple[bool, ...]
    product: Any = None

    @property
    def n_views(self) -> int:
        return len(self.tensors)

    @property
    def sizes(self) -> tuple[int, ...]:
        """``d_v + 1`` per block: the length of ``z_v = [φ_v; 1]``."""
        return tuple(w + 1 for w in self.widths)

    def dot(self, v: int, B: Any) -> Any:
        """Graph of ``φ_v B`` (sparse blocks stay sparse)."""
        X = self.tensors[v]
        return pts.dot(X, B) if self.sparse[v] else pt.dot(X, B)

    def project(self, v: int, A: Any) -> Any:
        """Graph of ``z_vᵀ A`` with ``A`` of shape (T, d_v + 1, k): returns (n, T, k)."""
        return project_factors(lambda B: self.dot(v, B), A, self.widths[v],
                               self.tensors[v].shape[0])

    def linear(self, beta: Any) -> Any:
        """Graph of ``[φ_1, …, φ_V] βᵀ`` for ``β`` of shape (T, Σ d_v), block by block."""
        if self.n_views == 1:
            return self.dot(0, beta.T)
        terms = [self.dot(v, beta[:, cols].T) for v, cols in enumerate(block_slices(self.widths))]
        return terms[0] if len(terms) == 1 else pt.add(*terms)


@dataclass
class LatentGaussian:
    """A Gaussian latent the likelihood may integrate out: ``f = mean + g``.

    ``cov`` is the prior covariance of ``g`` (shared by every task), or ``None`` when ``mean``
    already holds the whole latent with its weights explicit.  ``noise_factor`` multiplies the
    likelihood's own noise variance (the ϱ-tensor model's ``1/τ²``).  ``decision_scale``: the
    decision value prediction reads is ``mean + decision_scale·g`` (the ϱ-tensor paper's
    ``τg + b``); the likelihood sees ``mean + g``.
    """

    mean: Any
    cov: Any = None
    noise_factor: Any = 1.0
    decision_scale: Any = 1.0


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
