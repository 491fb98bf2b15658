"""Per-view kernels: exact Gram matrices, or random Fourier features whose product term is
built from jointly drawn frequencies.

Two kernels per view are offered, both from scikit-learn's pairwise module:

* ``"rbf"``: ``k(x, x') = exp(-γ ||x - x'||²)``;
* ``"linear"``: ``k(x, x') = xᵀx'``.

:class:`ViewKernels` hands the combiner one N × N Gram matrix per view (exact, O(N²) memory,
O(N³) to solve).  :class:`ViewRandomFeatures` hands it explicit features instead, so that
fitting grows linearly in N: per RBF view ``φ_v(x) = M^{-1/2}[cos(Ω_v x); sin(Ω_v x)]`` with
rows of Ω_v drawn from N(0, 2γ_v I) (Bochner), per linear view the view itself, and for the
product of all views' kernels ``φ_×(x) = M^{-1/2}[cos(s); sin(s)] ⊙ Π_{linear v} (G_v x_v)``
with ``s = Σ_{rbf v} Ω_v x_v``: a product of RBF kernels is an RBF kernel on the concatenated
views, whose frequencies are the per-view frequencies drawn jointly, and a Gaussian projection
``G_v x_v`` is an unbiased random feature of the linear kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from bayesmv.components.base import (
    FIXED,
    GRAMS,
    PRODUCT_BLOCK,
    VIEW_FEATURES,
    VIEWS,
    BuildContext,
    Component,
    ViewFeatures,
)
from bayesmv.components.features import fourier_features_of_phases
from bayesmv.components.linear import fill_missing, publish_view_features
from bayesmv.data import MultiViewData, check_complete_views

KERNELS = ("rbf", "linear")
#: search range of an RBF width chosen by the marginal likelihood, in units of 1/D_v
#: (γ·D_v from 1e-4, a nearly linear kernel, to 1e2, a nearly diagonal one)
GAMMA_RANGE = (1e-4, 1e2)


def per_view(value: Any, n_views: int, name: str) -> list:
    """A per-view parameter as a list of ``n_views`` entries: one value (a string, a number
    or None) serves every view, a sequence must have one entry per view."""
    if isinstance(value, str) or value is None or not isinstance(value, Sequence | np.ndarray):
        return [value] * n_views
    value = list(value)
    if len(value) != n_views:
        raise ValueError(f"{name} has {len(value)} entries but there are {n_views} views")
    return value


def _view_kernels(piece, n_views: int) -> tuple[list[str], list]:
    """``piece``'s kernel and γ per view (its ``kernel`` / ``gamma``, or their deprecated
    aliases), the kernels checked against :data:`KERNELS`."""
    kinds = per_view(piece._param("kernel"), n_views, piece._param_name("kernel"))
    for kind in kinds:
        if kind not in KERNELS:
            raise ValueError(f"{type(piece).__name__}: {piece._param_name('kernel')} must be "
                             f"one of {KERNELS} (one, or one per view), got {kind!r}")
    return kinds, per_view(piece._param("gamma"), n_views, piece._param_name("gamma"))


def view_gram(kind: str, A: np.ndarray, B: np.ndarray | None, gamma: float | None
              ) -> np.ndarray:
    """Gram matrix ``k(A_i, B_j)`` of one view's kernel (B = A when None)."""
    if kind == "rbf":
        return rbf_gram(squared_distances(A, B), gamma)
    return A @ (A if B is None else B).T


def rbf_gram(sqdist, gamma, xp=np):
    """The RBF kernel ``exp(-γ ||a - b||²)`` from squared distances, in NumPy or, with
    ``xp=pytensor.tensor``, in the model graph: the one definition of both."""
    return xp.exp(-gamma * sqdist)


def squared_distances(A: np.ndarray, B: np.ndarray | None = None) -> np.ndarray:
    """``||A_i - B_j||²``, clipped at 0 against rounding, with exact zeros on the diagonal
    when B is None (or A itself).

    Expanded as ``||a||² + ||b||² - 2 aᵀb`` (one matrix product), as scikit-learn's
    ``euclidean_distances`` does, without its input checks, which cost more than the product
    on the small blocks the Nyström and landmark maps compare.  Both sets are first shifted
    by B's column means (A's when B is None; distances do not change): the expansion cancels
    ``||a||²`` against ``2aᵀb``, so features far from zero relative to their spread (an
    unstandardised view at 1e8 ± 1) would otherwise leave only rounding error.  The shift
    comes from B (landmarks, training rows), so a row of A gets the same distances whatever
    other rows it is passed with.
    """
    square = B is None or B is A
    shift = (A if square else B).mean(axis=0)
    A = A - shift
    B = A if square else B - shift
    D = (np.einsum("ij,ij->i", A, A)[:, None] + np.einsum("ij,ij->i", B, B)[None, :]
         - 2.0 * (A @ B.T))
    np.maximum(D, 0.0, out=D)
    if square:
        np.fill_diagonal(D, 0.0)
    return D


class ViewKernels(Component):
    """One exact Gram matrix per view.

    Parameters
    ----------
    kernel : {"rbf", "linear"} or a sequence of them, default "rbf"
        Kernel of every view, or of each view.
    gamma : float, None or a sequence of them, default None
        RBF width of every view or of each (ignored for linear views); ``None`` makes it a
        free hyper-parameter of the graph with a flat prior on ``log γ`` over
        ``GAMMA_RANGE / D_v`` (chosen by the marginal likelihood, or sampled).
    kernels, gammas : deprecated aliases of ``kernel`` and ``gamma`` (the other pieces' and
        estimators' names); when given they take precedence, with a ``FutureWarning``.
    """

    consumes = (VIEWS,)
    produces = GRAMS
    RENAMED = {"kernel": "kernels", "gamma": "gammas"}

    def __init__(self, kernel: str | Sequence[str] = "rbf",
                 gamma: float | Sequence[float | None] | None = None, *,
                 kernels: Sequence[str] | None = None,
                 gammas: Sequence[float | None] | None = None) -> None:
        self.kernel = kernel
        self.gamma = gamma
        self.kernels = kernels
        self.gammas = gammas

    def build(self, ctx: BuildContext, data: MultiViewData) -> list[pt.TensorVariable]:
        self._warn_renamed()
        check_complete_views(data, needs="ViewKernels")
        grams = []
        kinds, gammas = _view_kernels(self, data.n_views)
        for v, (kind, gamma, X) in enumerate(zip(kinds, gammas, data.views, strict=True)):
            if kind == "linear":
                Xd = pm.Data(f"X_{v}", X)
                grams.append(Xd @ Xd.T)
                continue
            D2 = pm.Data(f"sqdist_{v}", squared_distances(X))
            if gamma is None:
                lo, hi = np.log(np.asarray(GAMMA_RANGE) / X.shape[1])
                gamma = pt.exp(pm.Uniform(f"log_gamma_{v}", lo, hi))
            grams.append(rbf_gram(D2, gamma, xp=pt))
        return grams

    def initial_values(self, ctx: BuildContext, rng=None) -> dict[str, np.ndarray]:
        return {f"log_gamma_{v}_interval__": np.array(0.0)
                for v, (kind, gamma) in enumerate(zip(*_view_kernels(self, ctx.data.n_views),
                                                      strict=True))
                if kind == "rbf" and gamma is None}

    def view_settings(self, n_views: int) -> tuple[list[str], list[float | None]]:
        """The kernel and γ of each of ``n_views`` views (``None``: a free width)."""
        return _view_kernels(self, n_views)

    def grams(self, views: Sequence[np.ndarray], gammas: Sequence[float | None],
              train_views: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        """NumPy Gram matrices: ``k(views, train_views)`` (square when train_views is None)."""
        others = [None] * len(views) if train_views is None else train_views
        kinds, _ = _view_kernels(self, len(views))
        return [view_gram(kind, X, B, g) for kind, X, B, g
                in zip(kinds, views, others, gammas, strict=True)]


class ViewRandomFeatures(Component):
    """Random Fourier features per RBF view plus joint features of the product kernel.

    Parameters
    ----------
    n_frequencies : int
        Number M of random frequencies per RBF view and for the product term (2M features
        each).  Linear views contribute their D_v columns exactly to the sum term.
    kernel : {"rbf", "linear"} or a sequence of them, default "rbf"
        Kernel of every view, or of each view.
    gamma : float or a sequence of float (None for a linear view)
        RBF widths (fixed: the frequencies are ``sqrt(2γ_v)`` times fixed standard normals).
    base : list of ndarray, optional
        The standard-normal draws (one (M, D_v) array per view); drawn from ``random_seed``
        when None.  Keeping them makes a saved model predict exactly as before saving.
    random_seed : int or None
        Seed of the base draws.
    random_state : int or None
        Deprecated alias of ``random_seed``.
    n_features : int or None
        Deprecated alias of ``n_frequencies``; when given it takes precedence, with a
        ``FutureWarning``.
    kernels, gammas : deprecated aliases of ``kernel`` and ``gamma``, as ``n_features``.
    """

    consumes = (VIEWS,)
    produces = VIEW_FEATURES
    provides = frozenset({FIXED, PRODUCT_BLOCK})
    RENAMED = {"n_frequencies": "n_features", "random_seed": "random_state",
               "kernel": "kernels", "gamma": "gammas"}

    def __init__(self, n_frequencies: int, kernel: str | Sequence[str] = "rbf",
                 gamma: float | Sequence[float | None] | None = None,
                 base: Sequence[np.ndarray] | None = None, random_seed: int | None = None,
                 random_state: int | None = None, n_features: int | None = None, *,
                 kernels: Sequence[str] | None = None,
                 gammas: Sequence[float | None] | None = None) -> None:
        self.n_frequencies = n_frequencies
        self.kernel = kernel
        self.gamma = gamma
        self.kernels = kernels
        self.gammas = gammas
        self.base = base
        self.random_seed = random_seed
        self.random_state = random_state
        self.n_features = n_features

    def draw_base(self, view_sizes: Sequence[int]) -> list[np.ndarray]:
        """``base`` when given, else standard normals drawn from ``random_seed`` (the same
        ones for the same seed; the component is not changed).  ``build`` warns of a
        deprecated ``random_state``; this helper reads it silently."""
        if self.base is not None:
            return [np.asarray(b, dtype=float) for b in self.base]
        rng = np.random.default_rng(self._param("random_seed"))
        return [rng.standard_normal((int(self._param("n_frequencies")), D)) for D in view_sizes]

    def blocks(self, views: Sequence[np.ndarray], base: Sequence[np.ndarray] | None = None
               ) -> tuple[list[np.ndarray], np.ndarray]:
        """Per-view feature blocks of the sum term and the product term's block."""
        if base is None:
            base = self.draw_base([X.shape[1] for X in views])
        M = int(self._param("n_frequencies"))
        n = views[0].shape[0]
        phase = np.zeros((n, M))
        linear_factor = np.ones((n, M))
        view_blocks = []
        kinds, gammas = _view_kernels(self, len(views))
        for v, (kind, gamma, X, E) in enumerate(zip(kinds, gammas, views, base, strict=True)):
            if kind == "rbf" and gamma is None:
                raise ValueError(f"ViewRandomFeatures draws fixed frequencies: give view {v}'s "
                                 f"RBF width in {self._param_name('gamma')} (None leaves it "
                                 "free, which only ViewKernels can)")
            if kind == "linear":
                view_blocks.append(X)
                linear_factor *= X @ E.T
                continue
            S = X @ (np.sqrt(2.0 * gamma) * E).T
            phase += S
            view_blocks.append(fourier_features_of_phases(np.cos(S), np.sin(S), constant=False))
        joint = fourier_features_of_phases(np.cos(phase) * linear_factor,
                                           np.sin(phase) * linear_factor, constant=False)
        return view_blocks, joint

    def build(self, ctx: BuildContext, data: MultiViewData) -> ViewFeatures:
        self._warn_renamed()
        base = ctx.fitted_state("random_base", lambda: self.draw_base(data.view_sizes))
        per_view, joint = self.blocks([fill_missing(X) for X in data.views], base)
        tensors = [pm.Data(f"features_{v}", B) for v, B in enumerate(per_view)]
        return publish_view_features(ctx, tensors, per_view,
                                     product=pm.Data("features_product", joint))
