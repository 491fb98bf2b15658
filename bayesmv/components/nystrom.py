"""Nyström features per view with one shared random subset (MVML's block-wise Nyström).

For view ``v`` with kernel ``k_v`` and a subset ``S`` of ``r`` training rows (the same rows for
every view), ``W_v = K_v[S, S] = V_v diag(s_v) V_vᵀ`` and

    U_v = K_v[:, S] V_v diag(s_v)^{-1/2},   so that   U_v U_vᵀ = K_v[:, S] W_v⁻¹ K_v[S, :] ≈ K_v.

This is ``K_v[:, S] W_v^{-1/2}`` written in the eigenbasis of ``W_v`` (the symmetric square root
is this times ``V_vᵀ``; every MVML quantity is invariant under such an orthogonal change of basis
within a view, so decision values do not depend on the choice).  The eigendecomposition is
done once per view; eigenvalues below ``rcond · max(s_v)`` are dropped rather than inverted,
so a near-singular ``W_v`` (duplicate rows in S, a low-dimensional view) never amplifies
rounding noise: view ``v`` then contributes ``r_v < r`` features.  No pseudo-inverse is ever
recomputed and no jitter is added.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pymc as pm
from sklearn.metrics.pairwise import PAIRWISE_KERNEL_FUNCTIONS, pairwise_kernels

from bayesmv.components.base import (
    FIXED,
    VIEW_FEATURES,
    VIEWS,
    BuildContext,
    Component,
    ViewFeatures,
)
from bayesmv.components.kernels import KERNELS, per_view, view_gram
from bayesmv.components.linear import publish_view_features
from bayesmv.data import MultiViewData, block_slices, check_complete_views

__all__ = ["NystromFeatures", "NystromState", "check_complete_views", "kernel_eigenbasis",
           "n_landmarks"]

#: relative eigenvalue cut-off of :func:`kernel_eigenbasis` (``NystromFeatures``' default)
RCOND = 1e-10
#: kernels that take a ``gamma`` parameter in :func:`sklearn.metrics.pairwise.pairwise_kernels`
_GAMMA_KERNELS = ("rbf", "laplacian", "poly", "polynomial", "sigmoid", "chi2")


def n_landmarks(nystrom: float | int, n_samples: int) -> int:
    """Size r of the Nyström subset: ``floor(nystrom · N)`` for a fraction in (0, 1], else the
    integer itself; always between 1 and N.

    Parameters
    ----------
    nystrom : float in (0, 1] or int >= 1
        Fraction of the training rows, or a number of rows.
    n_samples : int
        Number of training rows N.

    Returns
    -------
    int
    """
    if isinstance(nystrom, bool):
        raise ValueError(f"nystrom must be a fraction in (0, 1] or a positive integer, "
                         f"got {nystrom!r}")
    if isinstance(nystrom, numbers.Integral):
        if nystrom < 1:
            raise ValueError(f"nystrom must be a positive integer or a fraction, got {nystrom!r}")
        return int(min(int(nystrom), n_samples))
    if isinstance(nystrom, numbers.Real) and np.isfinite(nystrom) and 0 < nystrom <= 1:
        # floor, as the reference implementation (scikit-multimodallearn) does
        return int(min(max(1, int(np.floor(float(nystrom) * n_samples))), n_samples))
    raise ValueError(f"nystrom must be a fraction in (0, 1] or a positive integer, got {nystrom!r}")


def kernel_eigenbasis(W: np.ndarray, rcond: float, what: str) -> tuple[np.ndarray, np.ndarray]:
    """The eigenvalues ``s`` of a kernel matrix on a subset above ``rcond · max(s)`` and their
    eigenvectors ``V``: ``V diag(s)^{-1/2}`` maps kernel values against the subset to features
    whose inner products are the Nyström kernel ``K[:, S] W⁺ K[S, :]``.

    Parameters
    ----------
    W : ndarray (r, r)
        ``K[S, S]`` (symmetrised here).
    rcond : float
        Relative cut-off; smaller eigenvalues are dropped, not inverted.
    what : str
        What ``W`` belongs to, for the error message (e.g. "view 0 ('fourier')").

    Returns
    -------
    s : ndarray (r_kept,)
    V : ndarray (r, r_kept)
    """
    s, V = np.linalg.eigh(0.5 * (W + W.T))
    if not np.isfinite(s).all() or s[-1] <= 0:
        raise ValueError(f"{what}: the kernel matrix on the subset has no positive "
                         "eigenvalue; is the kernel positive semi-definite?")
    keep = s > rcond * s[-1]
    return s[keep], V[:, keep]


def _kernel(X: np.ndarray, Y: np.ndarray, name: str, gamma: float | None) -> np.ndarray:
    """``k(X, Y)``; RBF and linear as the exact per-view kernels compute them, the rest
    through scikit-learn's ``pairwise_kernels``."""
    if name in KERNELS:
        return view_gram(name, X, Y, gamma)
    params = {} if gamma is None else {"gamma": gamma}
    return pairwise_kernels(X, Y, metric=name, filter_params=True, **params)


@dataclass
class NystromState:
    """What a fitted Nyström map remembers (all of it is needed again at prediction time).

    Attributes
    ----------
    subset : ndarray of int, shape (r,)
        Training rows in the shared subset S.
    landmarks : list of ndarray
        ``X_v[S]`` for every view (the points new samples are compared with).
    whiteners : list of ndarray
        ``V_v diag(s_v)^{-1/2}`` restricted to the kept eigenvalues, shape (r, r_v).
    kernels : list of str
        Kernel name per view.
    gammas : list of float or None
        Kernel parameter per view (None for kernels without one).
    eigenvalues : list of ndarray
        Kept eigenvalues ``s_v`` of ``W_v`` (diagnostics).
    """

    subset: np.ndarray
    landmarks: list[np.ndarray]
    whiteners: list[np.ndarray]
    kernels: list[str]
    gammas: list[float | None]
    eigenvalues: list[np.ndarray]

    @property
    def block_sizes(self) -> tuple[int, ...]:
        """Number of features ``r_v`` each view contributes."""
        return tuple(int(w.shape[1]) for w in self.whiteners)

    @property
    def n_features(self) -> int:
        return int(sum(self.block_sizes))

    def kernel(self, v: int, X: np.ndarray) -> np.ndarray:
        """``K_v(X, S)``."""
        return _kernel(X, self.landmarks[v], self.kernels[v], self.gammas[v])

    def transform_views(self, data: MultiViewData) -> list[np.ndarray]:
        """The feature blocks ``U_v`` (one (n, r_v) array per view)."""
        check_complete_views(data)
        return [self.kernel(v, X) @ self.whiteners[v] for v, X in enumerate(data.views)]

    def transform(self, data: MultiViewData) -> np.ndarray:
        """``[U_1, …, U_V]`` concatenated, shape (n, Σ r_v)."""
        return np.concatenate(self.transform_views(data), axis=1)

    def to_dict(self) -> dict[str, Any]:
        return {"subset": self.subset.tolist(),
                "landmarks": [x.tolist() for x in self.landmarks],
                "whiteners": [w.tolist() for w in self.whiteners],
                "kernels": list(self.kernels), "gammas": list(self.gammas),
                "eigenvalues": [s.tolist() for s in self.eigenvalues]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NystromState:
        return cls(subset=np.asarray(d["subset"], dtype=np.intp),
                   landmarks=[np.asarray(x, dtype=float) for x in d["landmarks"]],
                   whiteners=[np.asarray(w, dtype=float).reshape(len(d["subset"]), -1)
                              for w in d["whiteners"]],
                   kernels=list(d["kernels"]), gammas=list(d["gammas"]),
                   eigenvalues=[np.asarray(s, dtype=float) for s in d["eigenvalues"]])


class NystromFeatures(Component):
    """Per-view kernels approximated on one shared random subset of training rows.

    Parameters
    ----------
    nystrom : float in (0, 1] or int, default 0.25
        Size of the subset S: a fraction of the training rows (``floor(nystrom · N)``) or a
        number of rows.  The same rows serve every view, so the blocks of the MVML metric
        relate the same landmarks across views.
    kernel : str or sequence of str, default "rbf"
        A :func:`sklearn.metrics.pairwise.pairwise_kernels` metric, one for all views or one
        per view.
    gamma : float, sequence of float or None
        Kernel parameter per view; None gives ``1 / D_v`` (scikit-learn's default: with
        standardised views that is ``2 / E||x - x'||²``).  Ignored by kernels without one.
    rcond : float, default 1e-10
        Eigenvalues of ``W_v`` below ``rcond · max eigenvalue`` are dropped (not inverted).
    random_seed : int, Generator or None
        Seeds the choice of S.
    subset : array of int or None
        Use these training rows as S instead of drawing them (reproduces another
        implementation's subset, e.g. the first r rows).
    random_state : int, Generator or None
        Deprecated alias of ``random_seed``.

    Notes
    -----
    In the graph the features are fixed data (a ``pm.Data`` named ``"U"`` with dims
    ``("sample", "nystrom_feature")``), handed on as one block per view; the fitted
    :class:`NystromState` is left in ``ctx.state["nystrom"]``.
    """

    consumes = (VIEWS,)
    produces = VIEW_FEATURES
    provides = frozenset({FIXED})
    RENAMED = {"random_seed": "random_state"}

    def __init__(self, nystrom: float | int = 0.25, kernel: str | Sequence[str] = "rbf",
                 gamma: float | Sequence[float] | None = None, rcond: float = RCOND,
                 random_seed: int | np.random.Generator | None = None,
                 subset: Sequence[int] | np.ndarray | None = None,
                 random_state: int | np.random.Generator | None = None) -> None:
        self.nystrom = nystrom
        self.kernel = kernel
        self.gamma = gamma
        self.rcond = rcond
        self.random_seed = random_seed
        self.random_state = random_state
        self.subset = subset

    def check_params(self, n_views: int) -> tuple[list[str], list]:
        """Validate kernel and gamma for ``n_views`` views (raises ValueError)."""
        kernels = per_view(self.kernel, n_views, "kernel")
        for k in kernels:
            if not isinstance(k, str) or k not in PAIRWISE_KERNEL_FUNCTIONS or k == "precomputed":
                raise ValueError(f"kernel must name a sklearn pairwise kernel "
                                 f"({sorted(set(PAIRWISE_KERNEL_FUNCTIONS) - {'precomputed'})}),"
                                 f" got {k!r}")
        gammas = per_view(self.gamma, n_views, "gamma")
        for gm in gammas:
            if gm is not None and (isinstance(gm, bool) or not isinstance(gm, numbers.Real)
                                   or not np.isfinite(gm) or gm <= 0):
                raise ValueError(f"gamma must be None or positive finite numbers, got {gm!r}")
        if not (isinstance(self.rcond, numbers.Real) and 0 <= self.rcond < 1):
            raise ValueError(f"rcond must lie in [0, 1), got {self.rcond!r}")
        return kernels, gammas

    def fit_state(self, data: MultiViewData) -> NystromState:
        """Choose S, factor every ``W_v`` once and return the fitted :class:`NystromState`."""
        self._warn_renamed()
        check_complete_views(data)
        n = data.n_samples
        kernels, gammas = self.check_params(data.n_views)
        if self.subset is not None:
            subset = np.asarray(self.subset)
            if (subset.ndim != 1 or subset.size == 0
                    or not np.issubdtype(subset.dtype, np.integer)
                    or subset.min() < 0 or subset.max() >= n
                    or np.unique(subset).size != subset.size):
                raise ValueError("subset must be distinct row indices in [0, n_samples)")
            subset = subset.astype(np.intp)
        else:
            r = n_landmarks(self.nystrom, n)
            rng = np.random.default_rng(self._param("random_seed"))
            subset = np.sort(rng.choice(n, size=r, replace=False)).astype(np.intp)
        landmarks, whiteners, eigs, used_gamma = [], [], [], []
        for v, X in enumerate(data.views):
            kname = kernels[v]
            gm = gammas[v]
            if kname in _GAMMA_KERNELS:
                gm = float(1.0 / X.shape[1]) if gm is None else float(gm)
            else:
                gm = None
            Xs = np.ascontiguousarray(X[subset])
            s, V = kernel_eigenbasis(_kernel(Xs, Xs, kname, gm), self.rcond,
                                     f"view {v} ({data.view_names[v]!r})")
            landmarks.append(Xs)
            whiteners.append(np.ascontiguousarray(V / np.sqrt(s)))
            eigs.append(s)
            used_gamma.append(gm)
        return NystromState(subset=subset, landmarks=landmarks, whiteners=whiteners,
                            kernels=list(kernels), gammas=used_gamma, eigenvalues=eigs)

    def build(self, ctx: BuildContext, data: MultiViewData | None = None) -> ViewFeatures:
        data = ctx.data if data is None else data
        state = ctx.fitted_state("nystrom", lambda: self.fit_state(data))
        U = state.transform(data)
        ctx.add_coord("nystrom_feature", U.shape[1])
        Ud = pm.Data("U", U, dims=("sample", "nystrom_feature"))
        slices = block_slices(state.block_sizes)
        return publish_view_features(ctx, [Ud[:, cols] for cols in slices],
                                     [U[:, cols] for cols in slices])
