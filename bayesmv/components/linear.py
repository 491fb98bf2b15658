"""Linear feature map: ``z_v = [x_v; 1]`` per view, dense or sparse, never densified.

The constant feature is never materialised: a view's projection onto factors
``A ∈ R^{(D_v + 1) × k}`` (bias row last) is computed as ``z_vᵀ A = x_vᵀ A[:D_v] + A[D_v]``,
so a ``scipy.sparse`` view costs O(nnz · k) and stays sparse in the graph (PyTensor's sparse
``dot``, whose gradient is sparse too) and in NumPy.

A missing view (all-NaN row of a dense view) is read as ``x_v = 0``: then ``z_v = [0, …, 0, 1]``
and the view enters only through its bias row, i.e. the model keeps the lower-order
interactions among the views that are present.  After per-view standardisation ``x_v = 0`` is
the training mean of the view.  Sparse views cannot hold NaN; their empty rows are the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytensor
import scipy.sparse as sp

from bayesmv.components.base import (
    FIXED,
    VIEW_FEATURES,
    VIEWS,
    BuildContext,
    Component,
    ViewFeatures,
    project_factors,
)
from bayesmv.data import MultiViewData

ViewMatrix = np.ndarray | sp.csr_matrix


def fill_missing(view: ViewMatrix) -> ViewMatrix:
    """A view with its all-NaN (missing) rows set to zero; sparse views are returned as is."""
    if sp.issparse(view):
        return view
    nan = np.isnan(view)
    if not nan.any():
        return view
    return np.where(nan, 0.0, view)


def to_dense(view: ViewMatrix) -> np.ndarray:
    """A view or feature block as a dense array (CSR matrices densified)."""
    return view.toarray() if sp.issparse(view) else np.asarray(view)


def concatenated(blocks: Sequence[ViewMatrix]) -> np.ndarray:
    """Feature blocks side by side as one dense array (n, Σ d_v)."""
    return np.concatenate([to_dense(X) for X in blocks], axis=1)


def project_np(view: ViewMatrix, A: np.ndarray) -> np.ndarray:
    """NumPy ``z_vᵀ A`` for every row and task.

    Parameters
    ----------
    view : ndarray or CSR matrix of shape (n, D)
        ``x_v`` (no NaN; see :func:`fill_missing`).
    A : ndarray of shape (T, D + 1, k)
        Factors of each task, bias row last.

    Returns
    -------
    ndarray of shape (n, T, k)
    """
    D = A.shape[1] - 1
    if view.shape[1] != D:
        raise ValueError(f"view has {view.shape[1]} columns but the factors have {D} + 1 rows")
    return project_factors(lambda B: np.asarray(view @ B), A, D, view.shape[0])


#: the former name of :class:`~bayesmv.components.base.ViewFeatures` (its ``sizes`` are the
#: lengths ``D_v + 1`` of ``z_v = [x_v; 1]``)
LinearViews = ViewFeatures


class LinearFeatures(Component):
    """The linear feature map of multi-view machines: ``z_v = [x_v; 1]`` for each view.

    Parameters
    ----------
    views : sequence of int or None
        Indices of the views to use (default: all).

    Notes
    -----
    Publishes ``ctx.sizes["z_v"] = D_v + 1`` and a coordinate ``z_v`` for each view ``v`` (its
    last entry is the bias), and ``ctx.state["linear_views"]``: the NumPy/CSR views the graph
    holds (missing rows zeroed), which :meth:`initial_values` of the next piece may read.
    """

    consumes = (VIEWS,)
    produces = VIEW_FEATURES
    provides = frozenset({FIXED})

    def __init__(self, views: Sequence[int] | None = None) -> None:
        self.views = views

    def _selected(self, data: MultiViewData) -> list[int]:
        if self.views is None:
            return list(range(data.n_views))
        chosen = [int(v) for v in self.views]
        bad = [v for v in chosen if not 0 <= v < data.n_views]
        if bad or not chosen or len(set(chosen)) != len(chosen):
            raise ValueError(f"LinearFeatures: views must be distinct indices in "
                             f"[0, {data.n_views}), got {list(self.views)!r}")
        return chosen

    def transform(self, data: MultiViewData) -> list[ViewMatrix]:
        """The views as the model reads them: ``x_v`` with missing rows set to zero."""
        return [fill_missing(data.views[v]) for v in self._selected(data)]

    def build(self, ctx: BuildContext, data: MultiViewData | None = None) -> ViewFeatures:
        data = ctx.data if data is None else data
        views = self.transform(data)
        # shared variables, not constants: PyTensor would hash a large constant on compile
        tensors = [pytensor.shared(X, name=f"x_{v}", borrow=True) for v, X in enumerate(views)]
        ctx.state["linear_views"] = views
        ctx.sizes["n_linear_views"] = len(views)
        return publish_view_features(ctx, tensors, views)


def publish_view_features(ctx: BuildContext, tensors: list, arrays: list | None,
                          widths: Sequence[int] | None = None, product=None) -> ViewFeatures:
    """Register the coordinates ``z_v`` (length ``d_v + 1``) and ``feature`` (``Σ d_v``) and
    hand the blocks on; ``arrays`` (the blocks as NumPy/CSR when they are data) go to
    ``ctx.state["view_feature_arrays"]`` for the next piece's starting values."""
    if widths is None:
        widths = [X.shape[1] for X in arrays]
    widths = tuple(int(w) for w in widths)
    for v, w in enumerate(widths):
        ctx.add_coord(f"z_{v}", w + 1)
    ctx.add_coord("feature", int(sum(widths)))
    if arrays is not None:
        ctx.state["view_feature_arrays"] = list(arrays)
    sparse = tuple(bool(arrays is not None and sp.issparse(X)) for X in
                   (arrays if arrays is not None else [None] * len(widths)))
    return ViewFeatures(list(tensors), widths, sparse, product)

