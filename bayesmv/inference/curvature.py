"""Fast curvature for the Laplace engine, registered for the pieces they serve.

The Laplace engine (:func:`bayesmv.inference.engines.fit_laplace`) works on any graph: the
full curvature by P Hessian-vector products, the diagonal one by P more.  A strategy here
gives it something cheaper or better where the pieces allow, and is used only when its
condition on the pieces holds:

- :func:`cp_hessian_diagonal`: a CP-interaction combiner under a logistic or Gaussian
  likelihood is multilinear in its factors, so the diagonal of the log likelihood's Hessian
  is a closed form at O(k·nnz) cost (the few other parameters by Hessian-vector products);
- :func:`cp_rotation_directions`: with two views, ``(A_1 R, A_2 R)`` for orthogonal R
  leaves ``f`` and a Gaussian prior unchanged, flat directions that the full curvature
  projects out instead of inverting their rounding-level curvature.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.special import expit

from bayesmv.builder import BuiltModel
from bayesmv.components.base import FIXED, Identity
from bayesmv.components.interaction import CPInteractionCombiner, factor_name
from bayesmv.components.likelihoods import GaussianLikelihood, LogisticLikelihood
from bayesmv.inference.optimize import FlatLogp


def _cp_views(built: BuiltModel) -> list | None:
    """The CP combiner's per-view inputs when they are fixed data (the views themselves, or
    fixed landmark, Nyström or random-feature blocks), else None."""
    representation, feature_map, combiner, _ = built.builder.pieces
    if (not isinstance(combiner, CPInteractionCombiner)
            or not isinstance(representation, Identity) or FIXED not in feature_map.provides):
        return None
    return built.context.state.get("view_feature_arrays")


def cp_hessian_diagonal(built: BuiltModel, flat: FlatLogp
                        ) -> Callable[[np.ndarray], np.ndarray] | None:
    """Exact ``-diag ∇² log p`` in the value space of a CP-interaction model with a logistic
    or Gaussian likelihood: factors in closed form, the other parameters by Hessian-vector
    products; None for other pieces."""
    views = _cp_views(built)
    lik = built.builder.likelihood
    if views is None or not isinstance(lik, LogisticLikelihood | GaussianLikelihood):
        return None
    combiner: CPInteractionCombiner = built.builder.combiner
    V = len(views)
    targets = built.context.targets
    names = [factor_name(v) for v in range(V)]

    def diag(x: np.ndarray) -> np.ndarray:
        point = flat.to_point(x)
        factors = [point[n] for n in names]
        if isinstance(lik, LogisticLikelihood):
            p = expit(combiner.evaluate(factors, views))
            d2 = -p * (1.0 - p)
        else:
            sigma = (float(np.exp(point["sigma_log__"])) if "sigma_log__" in point
                     else float(lik.sigma))
            d2 = np.full(targets.shape, -1.0 / sigma**2)
        lik_diag = combiner.loglik_hessian_diagonal(factors, views, d2)
        rates = combiner.prior_rates(point, V)
        out = np.empty(flat.size)
        for v, name in enumerate(names):
            out[flat.slices[name]] = (-lik_diag[v] + rates[v]).ravel()
        e = np.zeros(flat.size)
        for name in (n for n in flat.names if n not in names):
            for j in range(flat.slices[name].start, flat.slices[name].stop):
                e[j] = 1.0
                out[j] = -flat.hvp(x, e)[j]
                e[j] = 0.0
        return out

    return diag


def cp_rotation_directions(built: BuiltModel, flat: FlatLogp, x: np.ndarray
                           ) -> np.ndarray | None:
    """Tangents at ``x`` of the exact rotation symmetry of a two-view CP model.

    With V = 2, ``f = z_1ᵀ A_1 A_2ᵀ z_2`` and ``(A_1 R, A_2 R)`` for orthogonal R leaves f and
    a Gaussian prior (also with per-view scales) unchanged: k(k-1)/2 flat directions per
    task, ``(A_1 G, A_2 G)`` for antisymmetric G.  With V ≥ 3 the CP factors are essentially
    unique (up to permutations and rescalings, which the prior breaks).  None otherwise.
    """
    views = _cp_views(built)
    if views is None or len(views) != 2:
        return None
    point = flat.to_point(x)
    A = [point[factor_name(0)], point[factor_name(1)]]
    T, _, k = A[0].shape
    dirs = []
    for t in range(T):
        for i in range(k):
            for j in range(i + 1, k):
                d = np.zeros(flat.size)
                for v in range(2):
                    dA = np.zeros_like(A[v])
                    dA[t, :, j] = A[v][t, :, i]   # A G with G = e_i e_jᵀ - e_j e_iᵀ
                    dA[t, :, i] = -A[v][t, :, j]
                    d[flat.slices[factor_name(v)]] = dA.ravel()
                dirs.append(d)
    return np.column_stack(dirs) if dirs else None


#: ``(built, flat) → x ↦ -diag ∇² log p(x)`` or None; the first that serves the pieces is used
DIAGONAL_STRATEGIES: list[Callable] = [cp_hessian_diagonal]
#: ``(built, flat, mode) → (P, m) flat directions`` or None (full curvature only)
SYMMETRY_STRATEGIES: list[Callable] = [cp_rotation_directions]


def fast_diagonal(built: BuiltModel, flat: FlatLogp) -> Callable | None:
    """The first registered diagonal that serves ``built``'s pieces, else None."""
    for strategy in DIAGONAL_STRATEGIES:
        diag = strategy(built, flat)
        if diag is not None:
            return diag
    return None


def flat_directions(built: BuiltModel, flat: FlatLogp, x: np.ndarray) -> np.ndarray | None:
    """The first registered symmetry's tangents at ``x`` that serves the pieces, else None."""
    for strategy in SYMMETRY_STRATEGIES:
        dirs = strategy(built, flat, x)
        if dirs is not None:
            return dirs
    return None
