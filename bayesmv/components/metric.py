"""Block-metric combiner (MVML): ``f = Σ_v w_v U_v g_v`` with ``g | A ~ N(0, A/(2λ))``.

The metric ``A`` (n × n, n = Σ_v r_v) has one block per pair of views; ``A_uv`` relates the
Nyström features of views u and v.  Four choices of A (``learn_A``):

* ``"full"``: learned, Frobenius prior ``p(A) ∝ exp(-η||A||²_F)`` on the PSD cone;
* ``"sparse"``: learned, block group-lasso prior ``p(A) ∝ exp(-η Σ_{u≤v} ||A_uv||_F)``;
* ``"identity"``: ``A = I`` (MVML_I);
* ``"cov"``: ``A_uv = U_uᵀU_v`` (MVML_Cov).

Two readings of the g-term (``objective``):

* ``"paper"``: the published penalty ``λ gᵀA⁻¹g`` as a potential on a flat g (no
  ``½ log det A``) — the graph's log-density is minus the published objective;
* ``"bayes"``: the proper ``g ~ MvNormal(0, A/(2λ))``, whose log-density carries
  ``-½ log det A``.

A learned A enters the graph through a free lower-triangular factor ``L`` (``A = L Lᵀ``,
variable ``A_chol`` holding the packed lower triangle per task) and the prior as a potential;
the view weights, when learned, are ``Dirichlet(1)`` (flat on the simplex).  MVML's NumPy
solvers (:class:`~bayesmv.models.mvml.MVML`) optimise exactly this density (the tests compare
the two); they take the data of a fit as a :class:`MetricProblem` and start from
:func:`initial_metric`, both defined here.

The flat variables (``A_chol``, and ``g`` or ``h`` under ``"paper"``) are
:class:`~bayesmv.components.base.WideFlat` (flat up to ``½(x/FLAT_SCALE)²``, and drawable), so
PyMC's prior predictive runs.  It draws them from that wide stand-in and, as PyMC does for
every potential, ignores the penalties: those draws show the graph's structure, not the prior
the penalties define.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from bayesmv.components.base import (
    DECISION,
    FIXED,
    VIEW_FEATURES,
    BuildContext,
    Component,
    ViewFeatures,
    WideFlat,
)
from bayesmv.components.linear import concatenated
from bayesmv.data import block_slices
from bayesmv.linalg import psd_factor
from bayesmv.params import check_positive

__all__ = ["BlockMetricCombiner", "MetricProblem", "block_group_norm", "initial_metric",
           "view_blocks"]

#: the choices of the metric (``learn_A``) and of the reading of the g-term (``objective``)
LEARN_A = ("full", "sparse", "identity", "cov")
OBJECTIVES = ("paper", "bayes")

_T = TypeVar("_T")


@dataclass
class MetricProblem:
    """The fixed data of one MVML fit: Nyström features and their view blocks.

    Parameters
    ----------
    U : ndarray of shape (N, n)
        ``[U_1, …, U_V]``.
    sizes : tuple of int
        ``r_v`` per view.
    """

    U: np.ndarray
    sizes: tuple[int, ...]
    _gram: np.ndarray | None = field(default=None, repr=False)
    _memo: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.U = np.ascontiguousarray(self.U, dtype=float)
        self.sizes = tuple(int(s) for s in self.sizes)
        if self.U.ndim != 2 or sum(self.sizes) != self.U.shape[1]:
            raise ValueError("U must be (N, sum(sizes))")
        self._blocks = block_slices(self.sizes)

    @property
    def n_views(self) -> int:
        return len(self.sizes)

    @property
    def n(self) -> int:
        return int(self.U.shape[1])

    def block(self, v: int) -> slice:
        return self._blocks[v]

    def view_of_feature(self) -> np.ndarray:
        return np.repeat(np.arange(self.n_views), self.sizes)

    @property
    def gram(self) -> np.ndarray:
        """``ŨᵀŨ`` (unweighted), computed once."""
        if self._gram is None:
            self._gram = self.U.T @ self.U
        return self._gram

    def cached(self, name: str, key: Hashable, compute: Callable[[], _T]) -> _T:
        """``compute()``, kept under ``name`` for the latest ``key`` only.

        For what a solver derives from the features and reuses across the fits of one
        problem (the MVML solvers' eigenbasis per view weights, shared by every one-vs-rest
        task); a call with another key recomputes and replaces it.
        """
        hit = self._memo.get(name)
        if hit is None or hit[0] != key:
            hit = self._memo[name] = (key, compute())
        return hit[1]

    def feature_weights(self, w: np.ndarray) -> np.ndarray:
        return np.repeat(np.asarray(w, dtype=float), self.sizes)

    def Z(self, w: np.ndarray) -> np.ndarray:
        return self.U * self.feature_weights(w)


def view_blocks(sizes: tuple[int, ...], *, upper: bool = False
                ) -> Iterator[tuple[int, int, slice, slice]]:
    """``(u, v, rows, columns)`` of each block ``A_uv`` of a metric over views of ``sizes``
    (features in view order), row-major; with ``upper`` only the blocks with u ≤ v."""
    slices = block_slices(sizes)
    for u, rows in enumerate(slices):
        for v in range(u if upper else 0, len(slices)):
            yield u, v, rows, slices[v]


def block_group_norm(A, sizes: tuple[int, ...]):
    """``Σ_{u ≤ v} ||A_uv||_F``, every block of the symmetric A counted once: MVML's sparse
    metric penalty (without η), over the last two axes of a NumPy array (the solver) or a
    PyTensor tensor (the graph, one value per task)."""
    total = 0.0
    for _, _, rows, cols in view_blocks(sizes, upper=True):
        total = total + (A[..., rows, cols] ** 2).sum(axis=(-2, -1)) ** 0.5
    return total


def initial_metric(problem: MetricProblem, learn_A: str) -> np.ndarray:
    """The paper's starting / fixed metric.

    ``full`` and ``sparse`` start from ``blockdiag(U_vᵀU_v)``; ``identity`` is ``I``
    (MVML_I); ``cov`` is ``A_uv = U_uᵀU_v`` (MVML_Cov).
    """
    n = problem.n
    if learn_A == "identity":
        return np.eye(n)
    if learn_A == "cov":
        return problem.gram.copy()
    A = np.zeros((n, n))
    for v in range(problem.n_views):
        b = problem.block(v)
        A[b, b] = problem.U[:, b].T @ problem.U[:, b]
    return A


class BlockMetricCombiner(Component):
    """MVML's combiner: weighted views, a block metric between them, Gaussian weights g.

    Parameters
    ----------
    alpha : float, default 0.1
        λ: ``g | A ~ N(0, A/(2λ))`` (penalty ``λ gᵀA⁻¹g``).
    metric_penalty : float, default 1.0
        η: weight of the metric's penalty / prior.
    learn_A : {"full", "sparse", "identity", "cov"}
    learn_w : bool, default False
        Learn the view weights (on the simplex) instead of fixing them at ``1/V``.
    objective : {"paper", "bayes"}
    metric : array-like (n, n) or (n_tasks, n, n), or None
        A fixed metric used as given (e.g. a fitted MVML's ``A_``), instead of learning one
        or ``learn_A``'s fixed choice; n is the features' total width.
    view_weights : array-like (V,) or (n_tasks, V), or None
        Fixed view weights (e.g. a fitted MVML's ``w_``) instead of ``1/V``; not with
        ``learn_w``.
    lmbda, eta : float or None
        Deprecated aliases of ``alpha`` and ``metric_penalty``; when given they take
        precedence, with a ``FutureWarning``.

    Notes
    -----
    Consumes per-view features that are data (Nyström, landmark or linear blocks: the metric
    relates their columns, so they must not be random) and returns ``f`` (dims sample, task).
    """

    consumes = (VIEW_FEATURES,)
    produces = DECISION
    requires = {VIEW_FEATURES: frozenset({FIXED})}

    RENAMED = {"alpha": "lmbda", "metric_penalty": "eta"}

    def __init__(self, alpha: float = 0.1, metric_penalty: float = 1.0, learn_A: str = "full",
                 learn_w: bool = False, objective: str = "paper", lmbda: float | None = None,
                 eta: float | None = None, metric=None, view_weights=None) -> None:
        self.alpha = alpha
        self.metric_penalty = metric_penalty
        self.learn_A = learn_A
        self.learn_w = learn_w
        self.objective = objective
        self.lmbda = lmbda
        self.eta = eta
        self.metric = metric
        self.view_weights = view_weights

    def check_params(self) -> None:
        """Raise ValueError naming the first invalid parameter."""
        for name in self.RENAMED:
            check_positive(self._param_name(name), self._param(name))
        if self.learn_A not in LEARN_A:
            raise ValueError(f"learn_A must be one of {LEARN_A}, got {self.learn_A!r}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if not isinstance(self.learn_w, bool | np.bool_):
            raise ValueError(f"learn_w must be True or False, got {self.learn_w!r}")
        if self.learn_w and self.view_weights is not None:
            raise ValueError("view_weights fixes the view weights; it cannot be given with "
                             "learn_w=True")

    def _fixed(self, name: str, value, shape: tuple[int, ...]) -> np.ndarray:
        """A fixed array parameter broadcast to one copy per task, or a clear error."""
        arr = np.asarray(value, dtype=float)
        if arr.shape not in (shape[1:], shape) or not np.all(np.isfinite(arr)):
            raise ValueError(f"BlockMetricCombiner: {name} must be finite with shape "
                             f"{shape[1:]} or {shape} for these features and tasks, got "
                             f"shape {arr.shape}")
        return np.broadcast_to(arr, shape)

    def given_metric(self, n_tasks: int, n: int) -> np.ndarray | None:
        """The given ``metric`` as one (n, n) matrix per task, checked, or None."""
        return None if self.metric is None else self._fixed("metric", self.metric,
                                                             (n_tasks, n, n))

    def given_view_weights(self, n_tasks: int, n_views: int) -> np.ndarray | None:
        """The given ``view_weights`` as one row per task, checked, or None."""
        return None if self.view_weights is None else self._fixed(
            "view_weights", self.view_weights, (n_tasks, n_views))

    # ------------------------------------------------------------------ numpy side
    @staticmethod
    def problem(ctx: BuildContext) -> MetricProblem:
        """The features and their view blocks as the NumPy solvers see them."""
        return MetricProblem(ctx.state["features"], tuple(ctx.state["block_sizes"]))

    def fixed_metric(self, problem: MetricProblem) -> np.ndarray:
        """``A`` for the fixed-metric variants (and the starting A of the learned ones)."""
        return initial_metric(problem, self.learn_A)

    # ------------------------------------------------------------------ graph
    def build(self, ctx: BuildContext, features: ViewFeatures) -> pt.TensorVariable:
        self.check_params()
        sizes = tuple(features.widths)
        n, V, T = int(sum(sizes)), len(sizes), ctx.n_tasks
        ctx.state["features"] = concatenated(ctx.state["view_feature_arrays"])
        ctx.state["block_sizes"] = sizes
        ctx.add_coord("nystrom_feature", n)
        ctx.add_coord("nystrom_feature_b", n)
        view_of_feature = np.repeat(np.arange(V), sizes)
        self._warn_renamed()
        alpha = float(self._param("alpha"))

        if self.learn_w:
            w = pm.Dirichlet("w", a=np.ones((T, V)), dims=("task", "view"))
        elif self.view_weights is not None:
            w = pt.as_tensor(self.given_view_weights(T, V).copy())
        else:
            w = pt.as_tensor(np.full((T, V), 1.0 / V))
        w_feat = w[:, view_of_feature]                                   # (T, n)

        if self.learn_A in ("full", "sparse") and self.metric is None:
            rows, cols = np.tril_indices(n)
            ctx.add_coord("metric_entry", rows.size)
            packed = WideFlat("A_chol", dims=("task", "metric_entry"))
            L = pt.zeros((T, n, n))[:, rows, cols].set(packed)
            A = pm.Deterministic("A", L @ L.transpose(0, 2, 1),
                                 dims=("task", "nystrom_feature", "nystrom_feature_b"))
            g = self._g_given_square_factor(L, alpha, T)
            if self.learn_A == "full":
                pm.Potential("A_prior", -self._param("metric_penalty") * pt.sum(A**2))
            else:
                pm.Potential("A_prior",
                             -self._param("metric_penalty") * pt.sum(block_group_norm(A, sizes)))
        else:
            if self.metric is not None:
                factors = [psd_factor(A) for A in self.given_metric(T, n)]
            else:
                # the training rows' metric (MVML_Cov's depends on the features), also on
                # new rows
                A_np = ctx.fitted_state("fixed_metric",
                                        lambda: self.fixed_metric(self.problem(ctx)))
                factors = [psd_factor(A_np)] * T
            if all(F.shape[1] == n and np.allclose(F, np.tril(F)) for F in factors):
                g = self._g_given_square_factor(pt.as_tensor(np.stack(factors)), alpha, T)
            else:
                # a rank-deficient A (MVML_Cov with fewer rows than features, a view the
                # sparse metric dropped): g lives in range(A); write g = L h with
                # h ~ N(0, I/(2λ)) (paper: penalty λ||h||²), each task's L padded with zero
                # columns to the largest rank
                k = max(F.shape[1] for F in factors)
                L_np = np.zeros((T, n, k))
                for t, F in enumerate(factors):
                    L_np[t, :, :F.shape[1]] = F
                ctx.add_coord("metric_rank", k)
                if self.objective == "bayes":
                    h = pm.Normal("h", 0.0, 1.0 / np.sqrt(2 * alpha), dims=("task", "metric_rank"))
                else:
                    h = WideFlat("h", dims=("task", "metric_rank"))
                    pm.Potential("g_penalty", -alpha * pt.sum(h**2))
                g = pm.Deterministic("g", pt.sum(pt.as_tensor(L_np) * h[:, None, :], axis=-1),
                                     dims=("task", "nystrom_feature"))
        return pm.Deterministic("f", features.linear(w_feat * g), dims=("sample", "task"))

    def _g_given_square_factor(self, L, alpha: float, T: int):
        if self.objective == "bayes":
            return pm.MvNormal("g", mu=0.0, chol=L / np.sqrt(2 * alpha),
                               dims=("task", "nystrom_feature"))
        g = WideFlat("g", dims=("task", "nystrom_feature"))
        z = pt.linalg.solve_triangular(L, g[..., None], lower=True)[..., 0]   # L⁻¹g
        pm.Potential("g_penalty", -alpha * pt.sum(z**2))                     # λ gᵀA⁻¹g
        return g

    def initial_values(self, ctx: BuildContext, rng=None) -> dict[str, np.ndarray]:
        n, T = int(sum(ctx.state["block_sizes"])), ctx.n_tasks
        out: dict[str, np.ndarray] = {}
        if self.learn_A in ("full", "sparse") and self.metric is None:
            L0 = psd_factor(initial_metric(self.problem(ctx), "full"))
            out["A_chol"] = np.tile(L0[np.tril_indices(n)], (T, 1))
            out["g"] = np.zeros((T, n))
        return out

    @staticmethod
    def pack_factor(A: np.ndarray) -> np.ndarray:
        """The packed lower Cholesky triangle of a PSD ``A`` (the value of ``A_chol``).

        A view the sparse variant dropped has zero rows and columns; the factor of the
        remaining views is used and those rows stay zero.
        """
        n = A.shape[0]
        active = np.flatnonzero(np.any(A != 0, axis=1))
        L = np.zeros((n, n))
        L[np.ix_(active, active)] = np.linalg.cholesky(A[np.ix_(active, active)])
        return L[np.tril_indices(n)]
