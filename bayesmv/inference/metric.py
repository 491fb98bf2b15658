"""Solvers of the block-metric combiner (MVML's model): the exact Gaussian g-step, the
metric (A) updates and the view weights.

Notation (Huusari, Kadri & Capponi 2018): ``Ũ = [U_1, …, U_V]`` (N × n, n = Σ r_v) the
Nyström features,
``Z = [w_1 U_1, …, w_V U_V]``, ``G = ZᵀZ``, ``A`` the PSD block metric, λ, η the
regularisation constants.  The published objective is

    J(g, A, w) = ||y - Z g||² + λ gᵀA⁻¹g + pen(A),     pen(A) = η||A||²_F  (or the block norm)

and ``g | A ~ N(0, A/(2λ))``, ``y | g ~ N(Z g, ½)`` is its Bayesian reading.

Numerics.  ``A`` is never inverted.  With any factor ``A = L Lᵀ`` (Cholesky, eigen-factor, or
a rectangular one) the g-step is the well-conditioned system

    B h = Lᵀ Zᵀ y,   B = Lᵀ G L + λ I   (Cholesky, eigenvalues ≥ λ),   g = L h,

which equals ``(ZᵀZ + λA⁻¹)⁻¹ Zᵀ y`` whenever ``A`` is invertible and stays defined when it is
not (then g lives in the range of A, the limit of the published objective).  The same factor
gives ``gᵀA⁻¹g = ||h||²``, ``log det(I + A G/λ) = log det(B/λ)`` and the exact posterior
covariance ``Cov(g | y, A) = ½ (L R⁻¹)(L R⁻¹)ᵀ`` with ``B = RᵀR``.  At the g-optimum
``A⁻¹g = Zᵀ(y - Z g)/λ``, so the metric gradient needs no solve with A either.

A-updates
---------
* ``full`` + ``paper``: the paper's gradient step ``A ← (1 - 2sη)A + sλ uuᵀ`` with
  ``u = A⁻¹g``, ``s < 1/(2η)``, halved until ``J(g, ·)`` decreases (Armijo).  The update is a
  positive scaling plus a PSD rank one, so A stays exactly symmetric positive definite and
  every iterate is ``α A₀ + W diag(d) Wᵀ``: with w fixed the g-step runs in the generalised
  eigenbasis of ``(ZᵀZ, A₀)``, shared by all one-vs-rest tasks (O((N + n)(n + k)) per step),
  and the Cholesky factor of A used by the line search is carried by O(n²) rank-one updates.
* ``full`` + ``bayes``: EM on ``p(A | y)`` (g integrated out).  M-step: the exact minimiser of
  ``λ tr(A⁻¹ E[ggᵀ]) + ½ log det A + η||A||²_F``, i.e. ``A = V φ⁻¹(Λ) Vᵀ`` from the
  eigendecomposition ``λ E[ggᵀ] = V Λ Vᵀ`` and ``φ(a) = ½a + 2ηa³``.
* ``sparse``: proximal gradient with block soft-thresholding (group lasso over the blocks
  ``A_uv``, u ≤ v) on ``min_g J(g, A)`` (paper) or ``-log p(A | y)`` (bayes), both smooth on
  the whole PSD cone; the step is projected onto the PSD cone and halved until the objective
  decreases.  A view whose diagonal block reaches zero is dropped (its blocks and its part
  of g are exactly zero); the gradient can bring it back.
* ``identity`` / ``cov``: A fixed (MVML_I, MVML_Cov).

w-step: least squares of y on the per-view outputs over the probability simplex (paper
objective), or its EM counterpart with the posterior covariance of g (bayes objective).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import linalg, optimize
from threadpoolctl import ThreadpoolController

from bayesmv.components.likelihoods import log_expected_sigmoid, multiclass_log_probabilities
from bayesmv.components.metric import (
    LEARN_A,
    OBJECTIVES,
    MetricProblem,
    block_group_norm,
    initial_metric,
    view_blocks,
)
from bayesmv.inference.evidence import (
    fit_slope,
    loo_decision_values,
    loo_variance,
    platt_targets,
)
from bayesmv.linalg import psd_factor, try_cholesky_upper

__all__ = [
    "MetricFit",
    "MetricProblem",
    "block_group_norm",
    "block_norms",
    "cholesky_rank_one_update",
    "fit_block_metrics",
    "fit_metric",
    "g_step",
    "initial_metric",
    "loo_calibration_slope",
    "loo_predictive",
    "paper_step_size",
    "psd_factor",
    "simplex_least_squares",
    "single_blas_thread",
    "task_predictive",
]

# Armijo constant of the backtracking line searches
_ARMIJO = 1e-4
_MAX_HALVINGS = 60
# below this size LAPACK's QR row insertion beats a Python sweep for rank-one updates
_QR_INSERT_MAX = 550


# --------------------------------------------------------------------------- linear algebra
def cholesky_rank_one_update(R: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Upper-triangular R' with ``R'ᵀR' = RᵀR + x xᵀ`` (a new array; O(n²)).

    Adding a PSD rank one is unconditionally stable (no cancellation), unlike refactoring the
    sum, which fails once the smallest eigenvalue drops below rounding of the largest.  Small
    n: LAPACK's Givens-based QR row insertion on ``[R; xᵀ]`` (compiled, but it also updates an
    n × n Q); large n: the classical column sweep, whose per-column NumPy overhead is then
    negligible.
    """
    R = np.asarray(R, dtype=float)
    x = np.asarray(x, dtype=float)
    n = R.shape[0]
    if n <= _QR_INSERT_MAX:
        _, R1 = linalg.qr_insert(np.eye(n), R, x, n, which="row", check_finite=False)
        R1 = R1[:n]
        return R1 * np.sign(np.diag(R1))[:, None]
    R = np.array(R, order="C", copy=True)
    x = np.array(x, copy=True)
    for k in range(n):
        rkk = R[k, k]
        r = np.hypot(rkk, x[k])
        c, s = r / rkk, x[k] / rkk
        R[k, k] = r
        if k + 1 < n:
            row = R[k, k + 1:]
            row += s * x[k + 1:]
            row /= c
            x[k + 1:] *= c
            x[k + 1:] -= s * row
    return R


def block_norms(A: np.ndarray, sizes: tuple[int, ...]) -> np.ndarray:
    """V × V Frobenius norms of the blocks ``A_uv``."""
    out = np.empty((len(sizes), len(sizes)))
    for u, v, rows, cols in view_blocks(sizes):
        out[u, v] = np.linalg.norm(A[rows, cols])
    return out


def _block_soft_threshold(A: np.ndarray, sizes: tuple[int, ...], thresh: float) -> np.ndarray:
    """Proximal map of ``thresh · Σ_{u≤v} ||A_uv||_F`` for a symmetric A (Frobenius metric).

    A diagonal block shrinks by ``thresh``; an off-diagonal pair (A_uv, A_vu = A_uvᵀ) appears
    twice in ``||·||²_F``, so each of its blocks shrinks by ``thresh / 2``.
    """
    out = np.zeros_like(A)
    for u, v, su, sv in view_blocks(sizes, upper=True):
        nrm = np.linalg.norm(A[su, sv])
        t = thresh if u == v else 0.5 * thresh
        if nrm > t:
            out[su, sv] = (1.0 - t / nrm) * A[su, sv]
            if u != v:
                out[sv, su] = out[su, sv].T
    return out


def simplex_least_squares(H: np.ndarray, b: np.ndarray, w0: np.ndarray) -> np.ndarray:
    """``argmin_w wᵀHw - 2bᵀw`` over the probability simplex (H PSD, V small).

    A small convex QP, solved by SLSQP to ~1e-15; never returns anything worse than ``w0``
    (so the w-step cannot raise the objective).
    """
    V = len(b)
    H = 0.5 * (H + H.T)

    def value(w):
        return float(w @ H @ w - 2.0 * b @ w)

    def grad(w):
        return 2.0 * (H @ w - b)

    res = optimize.minimize(value, w0, jac=grad, method="SLSQP",
                            bounds=[(0.0, 1.0)] * V,
                            constraints=[{"type": "eq", "fun": lambda w: np.sum(w) - 1.0,
                                          "jac": lambda w: np.ones(V)}],
                            options={"ftol": 1e-15, "maxiter": 500})
    w = np.clip(np.asarray(res.x, dtype=float), 0.0, None)
    w = w / w.sum() if w.sum() > 0 else w0
    return w if value(w) <= value(w0) else np.asarray(w0, dtype=float)


def _cubic_root(sigma: np.ndarray, eta: float) -> np.ndarray:
    """Positive root a of ``2η a³ + a/2 = σ`` (σ ≥ 0), vectorised Newton from an upper bound."""
    sigma = np.maximum(sigma, 0.0)
    a = np.minimum(2.0 * sigma, np.cbrt(sigma / (2.0 * eta)))
    for _ in range(100):
        f = 2.0 * eta * a**3 + 0.5 * a - sigma
        step = f / (6.0 * eta * a**2 + 0.5)
        a = a - step
        if np.all(np.abs(step) <= 1e-15 * np.maximum(a, 1e-300)):
            break
    return np.maximum(a, 0.0)


# --------------------------------------------------------------------------------- problem
def _eigen_basis(problem: MetricProblem, w: np.ndarray) -> EigenBasis:
    """The generalised eigenbasis of ``(ZᵀZ, A₀)`` for view weights w (cached on the problem
    per w: every one-vs-rest task starts from the same A₀)."""

    def compute() -> EigenBasis:
        L0, _ = _initial_factor(problem, "full")
        P = problem.Z(w) @ L0
        lam, Q = linalg.eigh(P.T @ P, check_finite=False)
        return EigenBasis(T=L0 @ Q, ZT=P @ Q, lam=np.maximum(lam, 0.0), L0=L0,
                          A0=initial_metric(problem, "full"))

    return problem.cached("eigen_basis", tuple(np.asarray(w, dtype=float).tolist()), compute)


def _initial_factor(problem: MetricProblem, learn_A: str) -> tuple[np.ndarray, bool]:
    """A factor L (A = L Lᵀ) of the initial metric and whether it is square lower-triangular.

    Built from QR factors of the features rather than by factoring ``UᵀU`` (no squaring of
    the condition number).
    """
    n, N = problem.n, problem.U.shape[0]
    if learn_A == "identity":
        return np.eye(n), True
    if learn_A == "cov":
        if N < n:
            return np.ascontiguousarray(problem.U.T), False  # A = ŨᵀŨ = (Ũᵀ)(Ũᵀ)ᵀ, rank ≤ N
        R = linalg.qr(problem.U, mode="r", check_finite=False)[0][:n]
        return _fix_signs(R).T.copy(), True
    L = np.zeros((n, n))
    for v in range(problem.n_views):
        b = problem.block(v)
        Uv = problem.U[:, b]
        if Uv.shape[0] >= Uv.shape[1]:
            R = linalg.qr(Uv, mode="r", check_finite=False)[0][:Uv.shape[1]]
            R = _fix_signs(R)
        else:
            R = None
        if R is None or np.min(np.abs(np.diag(R))) <= 1e-13 * np.max(np.abs(np.diag(R))):
            # fewer rows than features in this view, or rank-deficient: A_vv is singular
            R = try_cholesky_upper(Uv.T @ Uv)
            if R is None:
                raise np.linalg.LinAlgError(
                    f"the initial metric block of view {v} is singular (fewer Nyström-feature "
                    "directions than training rows support); use a smaller nystrom, "
                    "learn_A='identity' or a larger kernel width")
        L[b, b] = R.T
    return L, True


def _fix_signs(R: np.ndarray) -> np.ndarray:
    """Make the diagonal of a QR triangle non-negative (a Cholesky factor)."""
    s = np.sign(np.diag(R))
    s[s == 0] = 1.0
    return R * s[:, None]


# ---------------------------------------------------------------------------------- g-step
@dataclass
class GStep:
    """The exact solution for g given A (through the factor L) and w, for one or more tasks."""

    h: np.ndarray        # (k,) or (k, T)
    g: np.ndarray        # L h
    f: np.ndarray        # Z g
    r: np.ndarray        # y - f
    Rb: np.ndarray       # upper Cholesky factor of B = LᵀGL + λI
    ZL: np.ndarray       # Z L
    logdet_B_over_lambda: float

    def cov_factor(self, L: np.ndarray) -> np.ndarray:
        """C with ``Cov(g | y, A) = ½ C Cᵀ``: ``C = L R⁻¹``."""
        return linalg.solve_triangular(self.Rb, L.T, trans="T", lower=False,
                                       check_finite=False).T


def g_step(Z: np.ndarray, L: np.ndarray, y: np.ndarray, lmbda: float) -> GStep:
    """Solve ``(ZᵀZ + λA⁻¹) g = Zᵀy`` through ``A = L Lᵀ`` without inverting A.

    Parameters
    ----------
    Z : ndarray (N, n)
        Weighted features.
    L : ndarray (n, k)
        Any factor of A.
    y : ndarray (N,) or (N, T)
        Targets (several tasks share one factorisation).
    lmbda : float
        λ.
    """
    ZL = Z @ L
    B = ZL.T @ ZL
    B[np.diag_indices_from(B)] += lmbda
    Rb = linalg.cholesky(B, lower=False, check_finite=False)
    h = linalg.cho_solve((Rb, False), ZL.T @ y, check_finite=False)
    g = L @ h
    f = ZL @ h
    logdet = 2.0 * float(np.sum(np.log(np.diag(Rb)))) - B.shape[0] * np.log(lmbda)
    return GStep(h=h, g=g, f=f, r=y - f, Rb=Rb, ZL=ZL, logdet_B_over_lambda=logdet)


def paper_step_size(eta: float) -> float:
    """Initial metric step ``s``: 0.5, or ``0.45/η`` when that would break ``s < 1/(2η)``
    (the reference implementation's rule)."""
    return 0.5 if 0.5 * eta < 0.5 else 0.9 / (2.0 * eta)


# ------------------------------------------------------------------------------ the solver
@dataclass
class MetricFit:
    """Result of :func:`fit_metric` for one task.

    Attributes
    ----------
    A : ndarray (n, n)
        Learned (or fixed) metric, symmetric PSD.
    L : ndarray (n, k)
        A factor with ``A = L Lᵀ``.
    g : ndarray (n,)
        Posterior mean / minimiser of g given A and w.
    w : ndarray (V,)
        View weights.
    cov_factor : ndarray (n, k)
        ``Cov(g | y, A, w) = ½ C Cᵀ``.
    f : ndarray (N,)
        Training decision values ``Z g``.
    objective : list of float
        Objective after every g-step (``paper``: J; ``bayes``: -log p(A, w | y) + const).
    n_iter : int
        Number of A/w-updates made.
    converged : bool
        Whether the relative change of g fell below ``tol``.
    """

    A: np.ndarray
    L: np.ndarray
    g: np.ndarray
    w: np.ndarray
    cov_factor: np.ndarray
    f: np.ndarray
    objective: list[float]
    n_iter: int
    converged: bool


def _objective(gs: GStep, lmbda: float, pen: float, objective: str) -> float:
    val = float(gs.r @ gs.r) + lmbda * float(gs.h @ gs.h) + pen
    if objective == "bayes":
        val += 0.5 * gs.logdet_B_over_lambda
    return val


def fit_metric(problem: MetricProblem, y: np.ndarray, *, lmbda: float, eta: float,
               learn_A: str = "full", learn_w: bool = False, objective: str = "paper",
               max_iter: int = 6, tol: float = 1e-4, w0: np.ndarray | None = None,
               a_steps: int = 1, callback: Callable[[dict], None] | None = None
               ) -> MetricFit:
    """Fit g, A (and w) for one task by alternating exact g-steps with A- and w-updates.

    Parameters
    ----------
    problem : MetricProblem
    y : ndarray (N,)
        ±1 targets of the task.
    lmbda, eta : float
        λ (prior precision scale of g) and η (metric penalty).
    learn_A : {"full", "sparse", "identity", "cov"}
    learn_w : bool
    objective : {"paper", "bayes"}
    max_iter : int
        Maximum number of A/w-updates (each followed by a g-step).
    tol : float
        Stop when an iteration lowers the objective by less than ``tol`` times its value.
    w0 : ndarray or None
        Starting view weights (uniform ``1/V`` by default).
    a_steps : int
        Gradient steps per A-update (``full`` + ``paper``); the paper takes one.
    callback : callable or None
        Called after every A-update with a dict: ``iteration``, ``A_old``, ``A_new`` (dense),
        ``g`` (the g the update was made at), ``g_new`` (g after the update: differs only when
        the sparse variant drops a view) and ``w``.  Forming the dense matrices costs O(n²k)
        per call on the low-rank path; use it for monitoring and tests.

    Returns
    -------
    MetricFit
    """
    if learn_A not in LEARN_A:
        raise ValueError(f"learn_A must be one of {LEARN_A}, got {learn_A!r}")
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    y = np.asarray(y, dtype=float)
    V, sizes = problem.n_views, problem.sizes
    w = np.full(V, 1.0 / V) if w0 is None else np.asarray(w0, dtype=float).copy()
    if learn_A == "full" and objective == "paper":
        return _fit_paper_full(problem, y, w, lmbda, eta, learn_w, max_iter, tol, a_steps,
                               callback)
    Z = problem.Z(w)
    L, _ = _initial_factor(problem, learn_A)
    A = initial_metric(problem, learn_A) if learn_A != "full" else None
    A_norm2 = float(np.sum(initial_metric(problem, "full") ** 2)) if learn_A == "full" else None

    def pen() -> float:
        if learn_A == "full":
            return eta * A_norm2
        if learn_A == "sparse":
            return eta * block_group_norm(A, sizes)
        return 0.0

    gs = g_step(Z, L, y, lmbda)
    history = [_objective(gs, lmbda, pen(), objective)]
    fixed_A = learn_A in ("identity", "cov")
    converged = fixed_A and not learn_w
    n_iter = 0
    t_prox = None
    for _ in range(0 if converged else max_iter):
        # the posterior covariance of g under the current (A, w): the EM statistics
        cov_C = (gs.cov_factor(L) if objective == "bayes" and (learn_w or learn_A == "full")
                 else None)
        g_for_w = gs.g
        A_old = (L @ L.T if A is None else A) if callback is not None else None
        # ------------------------------------------------------------------ A-update
        if learn_A == "full":
            L, A_norm2 = _em_full_step(gs, cov_C, lmbda, eta)
        elif learn_A == "sparse":
            A, L, t_prox = _sparse_step(problem, A, gs, Z, y, lmbda, eta, t_prox,
                                        objective == "bayes")
        if callback is not None and not fixed_A:
            callback({"iteration": n_iter, "A_old": A_old,
                      "A_new": L @ L.T if A is None else A.copy(), "g": gs.g,
                      "g_new": g_for_w, "w": w.copy()})
        # ------------------------------------------------------------------ w-update
        if learn_w:
            w = _w_step(problem, g_for_w, w, y, cov_C)
            Z = problem.Z(w)
        # ------------------------------------------------------------------ g-step
        gs = g_step(Z, L, y, lmbda)
        n_iter += 1
        history.append(_objective(gs, lmbda, pen(), objective))
        if _converged(history, tol):
            converged = True
            break
    if A is None:
        A = L @ L.T
    A = 0.5 * (A + A.T)
    return MetricFit(A=A, L=L, g=gs.g, w=w, cov_factor=gs.cov_factor(L), f=gs.f,
                     objective=history, n_iter=n_iter, converged=converged)


def _converged(history: list[float], tol: float) -> bool:
    """Relative decrease of the objective over the last iteration below ``tol``."""
    return history[-2] - history[-1] <= tol * abs(history[-1])


@dataclass
class EigenBasis:
    """``A₀ = T Tᵀ`` and ``Tᵀ G T = diag(lam)`` for the initial metric ``A₀ = blockdiag(U_vᵀU_v)``
    and ``G = ZᵀZ`` (one generalised eigendecomposition, shared by every one-vs-rest task).

    Attributes: ``T`` (n × n), ``ZT = Z T`` (N × n), ``lam`` (n,), ``L0`` (lower Cholesky
    factor of A₀, block-diagonal), ``A0``.
    """

    T: np.ndarray
    ZT: np.ndarray
    lam: np.ndarray
    L0: np.ndarray
    A0: np.ndarray


class _LowRankMetric:
    """``A = α A₀ + W diag(d) Wᵀ``: every iterate of the paper's full-metric steps.

    The g-step uses the factor ``L = [√α T, W diag(√d)]`` (n × (n + k)); in the eigenbasis of
    ``(G, A₀)`` its system ``B = LᵀGL + λI`` has a diagonal leading block, so one g-step costs
    O((N + n)(n + k) + k³) instead of O(N n²) — and nothing divides by α or d.
    """

    def __init__(self, eb: EigenBasis, Z: np.ndarray, y: np.ndarray, lmbda: float) -> None:
        self.eb, self.Z, self.y, self.lmbda = eb, Z, y, lmbda
        n, N = eb.T.shape[0], Z.shape[0]
        self.alpha = 1.0
        self.W = np.zeros((n, 0))
        self.d = np.zeros(0)
        self.ZW = np.zeros((N, 0))
        self.TGW = np.zeros((n, 0))       # Tᵀ G W
        self.WGW = np.zeros((0, 0))       # Wᵀ G W
        self.Tb = eb.ZT.T @ y             # Tᵀ Zᵀ y
        self.Wb = np.zeros(0)             # Wᵀ Zᵀ y

    def add(self, a: float, c: float, u: np.ndarray) -> None:
        """``A ← a A + c uuᵀ``."""
        self.alpha *= a
        self.d = np.append(a * self.d, c)
        Zu = self.Z @ u
        self.W = np.column_stack([self.W, u])
        self.TGW = np.column_stack([self.TGW, self.eb.ZT.T @ Zu])
        row = self.ZW.T @ Zu
        k = self.WGW.shape[0]
        WGW = np.empty((k + 1, k + 1))
        WGW[:k, :k], WGW[:k, k], WGW[k, :k], WGW[k, k] = self.WGW, row, row, Zu @ Zu
        self.WGW = WGW
        self.ZW = np.column_stack([self.ZW, Zu])
        self.Wb = np.append(self.Wb, Zu @ self.y)

    def _blocks(self):
        sa, sd = np.sqrt(self.alpha), np.sqrt(self.d)
        b11 = self.alpha * self.eb.lam + self.lmbda
        B12 = sa * self.TGW * sd
        B22 = sd[:, None] * self.WGW * sd[None, :]
        B22[np.diag_indices_from(B22)] += self.lmbda
        return sa, sd, b11, B12, B22

    def solve(self):
        """g, f = Zg, r = y - f and gᵀA⁻¹g = ||h||² of the exact g-step."""
        sa, sd, b11, B12, B22 = self._blocks()
        r1, r2 = sa * self.Tb, sd * self.Wb
        if self.d.size:
            X = B12 / b11[:, None]
            Rs = linalg.cholesky(B22 - B12.T @ X, lower=False, check_finite=False)
            h2 = linalg.cho_solve((Rs, False), r2 - X.T @ r1, check_finite=False)
        else:
            h2 = np.zeros(0)
        h1 = (r1 - B12 @ h2) / b11
        g = sa * (self.eb.T @ h1) + self.W @ (sd * h2)
        f = sa * (self.eb.ZT @ h1) + self.ZW @ (sd * h2)
        return g, f, self.y - f, float(h1 @ h1 + h2 @ h2)

    def factor_and_cov(self) -> tuple[np.ndarray, np.ndarray]:
        """The factor L of A and C = L R⁻¹ with ``Cov(g) = ½ C Cᵀ`` (``B = RᵀR``)."""
        sa, sd, b11, B12, B22 = self._blocks()
        n = b11.size
        B = np.zeros((n + sd.size,) * 2)
        B[np.diag_indices(n)] = b11
        B[:n, n:], B[n:, :n], B[n:, n:] = B12, B12.T, B22
        Rb = linalg.cholesky(B, lower=False, check_finite=False)
        L = np.column_stack([sa * self.eb.T, self.W * sd])
        C = linalg.solve_triangular(Rb, L.T, trans="T", lower=False, check_finite=False).T
        return L, C

    def matrix(self) -> np.ndarray:
        A = self.alpha * self.eb.A0 + (self.W * self.d) @ self.W.T
        return 0.5 * (A + A.T)


def _fit_paper_full(problem: MetricProblem, y: np.ndarray, w: np.ndarray, lmbda: float,
                    eta: float, learn_w: bool, max_iter: int, tol: float, a_steps: int,
                    callback: Callable[[dict], None] | None = None) -> MetricFit:
    """``learn_A="full"``, ``objective="paper"``: exact g-steps and Armijo-guarded gradient
    steps on A, each a positive scaling plus a PSD rank one.

    With w fixed the iterates stay ``α A₀ + low rank``, solved in the shared eigenbasis of
    ``(G, A₀)`` (:class:`_LowRankMetric`); with ``learn_w`` every g-step is the dense factor
    form.  The Cholesky factor of A is carried along by O(n²) rank-one updates for the
    line searches.
    """
    Z = problem.Z(w)
    L0, _ = _initial_factor(problem, "full")
    R = L0.T.copy()
    A_norm2 = float(np.sum(initial_metric(problem, "full") ** 2))
    lowrank = None if learn_w else _LowRankMetric(_eigen_basis(problem, w), Z, y, lmbda)

    def solve():
        if lowrank is not None:
            g, f, r, gAg = lowrank.solve()
        else:
            gs = g_step(Z, R.T, y, lmbda)
            g, r, gAg = gs.g, gs.r, float(gs.h @ gs.h)
        return g, r, Z.T @ r / lmbda, gAg      # u = A⁻¹g at the g-optimum

    g, r, u, gAg = solve()
    history = [float(r @ r) + lmbda * gAg + eta * A_norm2]
    converged, n_iter = False, 0
    for _ in range(max_iter):
        A_old = None
        if callback is not None:
            A_old = lowrank.matrix() if lowrank is not None else R.T @ R
        R, A_norm2, steps = _paper_full_step(R, A_norm2, g, u, gAg, lmbda, eta, a_steps)
        if lowrank is not None:
            for a, c, v in steps:
                lowrank.add(a, c, v)
        if callback is not None:
            A_new = lowrank.matrix() if lowrank is not None else R.T @ R
            callback({"iteration": n_iter, "A_old": A_old, "A_new": A_new, "g": g,
                      "g_new": g, "w": w.copy()})
        if learn_w:
            w = _w_step(problem, g, w, y, None)
            Z = problem.Z(w)
        g, r, u, gAg = solve()
        n_iter += 1
        history.append(float(r @ r) + lmbda * gAg + eta * A_norm2)
        if _converged(history, tol):
            converged = True
            break
    if lowrank is not None:
        A = lowrank.matrix()
        L, C = lowrank.factor_and_cov()
        g, f = lowrank.solve()[:2]
    else:
        L = R.T
        gs = g_step(Z, L, y, lmbda)
        A, C, g, f = L @ L.T, gs.cov_factor(L), gs.g, gs.f
    return MetricFit(A=0.5 * (A + A.T), L=L, g=g, w=w, cov_factor=C, f=f, objective=history,
                     n_iter=n_iter, converged=converged)


# ----------------------------------------------------------------------------- A-updates
def _paper_full_step(R: np.ndarray, A_norm2: float, g: np.ndarray, u: np.ndarray, gAg: float,
                     lmbda: float, eta: float, a_steps: int):
    """``a_steps`` gradient steps ``A ← (1 - 2sη)A + sλ uuᵀ`` (u = A⁻¹g) on
    ``F(A) = λgᵀA⁻¹g + η||A||²`` at fixed g, each Armijo-guarded (s halved until F falls).

    Every line-search quantity is a scalar (Sherman–Morrison), and an accepted step updates
    the Cholesky factor ``A = RᵀR`` in O(n²).  The descent stops early once a step had to be
    shortened.  Returns the new factor, ``||A||²_F`` and the applied
    steps ``(a, c, u)`` meaning ``A ← aA + c uuᵀ``.
    """
    F0 = lmbda * gAg + eta * A_norm2
    steps = []
    for step in range(int(a_steps)):
        if step > 0:
            # A changed with g fixed: u = A⁻¹g from the updated factor
            u = linalg.cho_solve((R, False), g, check_finite=False)
            gAg = float(g @ u)
            F0 = lmbda * gAg + eta * A_norm2
        uu = float(u @ u)                        # uᵀu = gᵀA⁻¹u
        v = linalg.solve_triangular(R, u, trans="T", lower=False, check_finite=False)
        uAu = float(v @ v)                       # uᵀA⁻¹u
        # ||∇F||² with uᵀAu = gᵀA⁻¹g
        grad2 = max(4 * eta**2 * A_norm2 - 4 * eta * lmbda * gAg + lmbda**2 * uu**2, 0.0)
        s = paper_step_size(eta)
        accepted = False
        for _ in range(_MAX_HALVINGS):
            a, c = 1.0 - 2.0 * s * eta, s * lmbda
            ca = c / a
            gAg_new = (gAg - ca * uu**2 / (1.0 + ca * uAu)) / a
            norm2_new = a * a * A_norm2 + 2 * a * c * gAg + c * c * uu**2
            F1 = lmbda * gAg_new + eta * norm2_new
            if F1 <= F0 - _ARMIJO * s * grad2:
                accepted = True
                break
            s *= 0.5
        if not accepted:
            break
        R = cholesky_rank_one_update(np.sqrt(a) * R, np.sqrt(c) * u)
        A_norm2, F0 = norm2_new, F1
        steps.append((a, c, u))
        if s < paper_step_size(eta):
            break  # the line search had to shorten the step: the descent has levelled off
    return R, A_norm2, steps


def _em_full_step(gs: GStep, C: np.ndarray, lmbda: float, eta: float):
    """EM M-step for A under ``objective='bayes'``: the exact minimiser of the surrogate
    ``Q(A) = λ tr(A⁻¹ E[ggᵀ]) + ½ log det A + η||A||²``.  Returns the new factor and ||A||²_F."""
    S = np.outer(gs.g, gs.g) + 0.5 * (C @ C.T)
    sigma, Vec = linalg.eigh(lmbda * S, check_finite=False)
    # S is positive definite in exact arithmetic; eigenvalues at rounding level are floored
    # there so that A stays positive definite
    sigma = np.maximum(sigma, np.finfo(float).eps * max(sigma[-1], 0.0) * len(sigma))
    a = _cubic_root(sigma, eta)
    return Vec * np.sqrt(a), float(np.sum(a**2))


def _embed_factor(n: int, idx: np.ndarray, Ra: np.ndarray) -> np.ndarray:
    L = np.zeros((n, Ra.shape[0]))
    L[idx] = Ra.T
    return L


def _active_index(problem: MetricProblem, active: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.repeat(active, problem.sizes))


def _drop_inactive(A: np.ndarray, problem: MetricProblem) -> tuple[np.ndarray, np.ndarray]:
    """Views whose diagonal block is zero: zero their rows and columns too (PSD needs it)."""
    active = np.array([np.any(A[problem.block(v), problem.block(v)] != 0)
                       for v in range(problem.n_views)])
    mask = np.repeat(active, problem.sizes)
    A = A.copy()
    A[~mask] = 0.0
    A[:, ~mask] = 0.0
    return A, active


def _psd_factor_active(A: np.ndarray, problem: MetricProblem, active: np.ndarray,
                       rtol: float = 1e-10) -> tuple[np.ndarray, np.ndarray] | None:
    """Project A (restricted to the active views) onto the PSD cone and factor it.

    Returns (projected A, L with A = L Lᵀ, L n × k), or None when nothing positive is left.
    The projection only acts when A is not numerically positive definite.
    """
    n = problem.n
    idx = _active_index(problem, active)
    sub = A[np.ix_(idx, idx)]
    Ra = try_cholesky_upper(sub)
    if Ra is not None and np.all(np.isfinite(Ra)):
        return A, _embed_factor(n, idx, Ra)
    d, V = linalg.eigh(0.5 * (sub + sub.T), check_finite=False)
    top = max(d[-1], 0.0)
    if top == 0.0:
        return None
    keep = d > rtol * top
    Lk = V[:, keep] * np.sqrt(d[keep])
    A_psd = np.zeros_like(A)
    A_psd[np.ix_(idx, idx)] = Lk @ Lk.T
    L = np.zeros((n, Lk.shape[1]))
    L[idx] = Lk
    return A_psd, L


def _sparse_step(problem: MetricProblem, A, gs: GStep, Z, y, lmbda, eta, t_prev, bayes: bool):
    """Proximal gradient step on the profile objective ``min_g J(g, A)`` (paper) or on
    ``-log p(A | y)`` (bayes, g integrated out), with the block penalty ``η Σ_{u≤v}||A_uv||``.

    Both smooth parts are functions of ``M = λI + ZAZᵀ`` only — ``λyᵀM⁻¹y`` (= min_g of the
    data term plus ``λgᵀA⁻¹g``), plus ``½ log det(M/λ)`` for bayes — and are defined on the
    whole PSD cone (A may be singular; g then lives in its range), so a view can be dropped
    exactly and can come back.  Gradient: ``-λuuᵀ`` (u = Zᵀα = A⁻¹g) ``+ ½ ZᵀM⁻¹Z`` (bayes).
    The block-thresholded point is projected onto the PSD cone and accepted when it meets the
    proximal-gradient sufficient-decrease condition and lowers the objective; otherwise the
    step is halved.
    """
    sizes = problem.sizes
    u = Z.T @ gs.r / lmbda
    grad = -lmbda * np.outer(u, u)
    if bayes:
        G = Z.T @ Z
        GLR = linalg.solve_triangular(gs.Rb, (Z.T @ gs.ZL).T, trans="T", lower=False,
                                      check_finite=False).T
        grad += 0.5 * (G - GLR @ GLR.T) / lmbda  # ½ Zᵀ M⁻¹ Z
    smooth = "bayes" if bayes else "paper"  # the objective without its penalty
    S0 = _objective(gs, lmbda, 0.0, smooth)
    P0 = eta * block_group_norm(A, sizes)
    t = 2.0 * t_prev if t_prev is not None else 1.0 / max(np.linalg.norm(grad), 1e-300)
    for _ in range(_MAX_HALVINGS):
        A_new, act_new = _drop_inactive(
            _block_soft_threshold(A - t * grad, sizes, t * eta), problem)
        fac = _psd_factor_active(A_new, problem, act_new) if act_new.any() else None
        if fac is not None:
            A_new, L_new = fac
            gs_new = g_step(Z, L_new, y, lmbda)
            S1 = _objective(gs_new, lmbda, 0.0, smooth)
            D = A_new - A
            P1 = eta * block_group_norm(A_new, sizes)
            if (S1 <= S0 + float(np.sum(grad * D)) + float(np.sum(D * D)) / (2 * t)
                    and S1 + P1 <= S0 + P0):
                return A_new, L_new, t
        t *= 0.5
    A, active = _drop_inactive(A, problem)
    A, L = _psd_factor_active(A, problem, active)
    return A, L, t


def _w_step(problem: MetricProblem, g: np.ndarray, w: np.ndarray, y: np.ndarray,
            C: np.ndarray | None) -> np.ndarray:
    """View weights on the simplex given g: least squares of y on the per-view outputs
    ``U_v g_v`` (paper), or, with the posterior covariance factor C (``Cov(g) = ½CCᵀ``), the
    EM version with ``E[(U_u g_u)ᵀ(U_v g_v)]`` (bayes)."""
    V = problem.n_views
    cols = np.column_stack([problem.U[:, problem.block(v)] @ g[problem.block(v)]
                            for v in range(V)])
    H = cols.T @ cols
    b = cols.T @ y
    if C is not None:
        UC = [problem.U[:, problem.block(v)] @ C[problem.block(v)] for v in range(V)]
        for a_ in range(V):
            for b_ in range(a_, V):
                val = 0.5 * float(np.sum(UC[a_] * UC[b_]))
                H[a_, b_] += val
                if a_ != b_:
                    H[b_, a_] += val
    return simplex_least_squares(H, b, np.asarray(w, dtype=float))


# ------------------------------------------------------- per-task fits and their predictive
@functools.cache
def _threadpools() -> ThreadpoolController:
    # discovering the BLAS libraries costs milliseconds: do it once per process
    return ThreadpoolController()


def single_blas_thread():
    """A context running BLAS on one thread.  The metric solvers make many small BLAS calls
    (matrix-vector products, rank-one updates); on 2 shared cores one thread fitted ten
    classes 1.7x faster at 5 % Nyström and as fast at 25 % (``benchmarks/mvml.py``)."""
    return _threadpools().limit(limits=1, user_api="blas")


def fit_block_metrics(problem: MetricProblem, targets: np.ndarray, *, alpha: float,
                      metric_penalty: float, learn_A: str, learn_w: bool, objective: str,
                      noise_variance: float, max_iter: int, tol: float,
                      metric: np.ndarray | None = None,
                      view_weights: np.ndarray | None = None) -> list[MetricFit]:
    """One :class:`MetricFit` per task (column of ``targets``) of the graph
    ``y | g ~ N(Zg, σ²)``, ``g | A ~ N(0, A/(2α))`` with the metric penalty ``metric_penalty``.

    The solver (:func:`fit_metric`) works on the objective times ``2σ²`` (λ and η scaled by
    it), which is the published objective at σ² = ½; learning A or w under
    ``objective="bayes"`` adds ``½ log det`` terms that do not scale so, and is offered at
    σ² = ½ only (given A and w, g's posterior is the same under both objectives).  A given
    ``metric`` (n_tasks, n, n) is used as it is: one exact g-step per task.  ``view_weights``
    (n_tasks, V) fix the view weights, or start them when ``learn_w``.
    """
    learns = learn_w or (metric is None and learn_A in ("full", "sparse"))
    if learns and objective == "bayes" and not np.isclose(noise_variance, 0.5, rtol=1e-12):
        raise ValueError(f"objective='bayes' is solved at the noise variance 1/2 of the "
                         f"published objective; got {noise_variance!r}: give sigma=sqrt(0.5) "
                         "or objective='paper'")
    scale = 2.0 * float(noise_variance)
    lmbda, eta = scale * float(alpha), scale * float(metric_penalty)
    fits = []
    with single_blas_thread():
        for t, y in enumerate(np.asarray(targets, dtype=float).T):
            w0 = None if view_weights is None else np.asarray(view_weights[t], dtype=float)
            if metric is None:
                fits.append(fit_metric(problem, y, lmbda=lmbda, eta=eta, learn_A=learn_A,
                                       learn_w=learn_w, objective=objective,
                                       max_iter=max_iter, tol=tol, w0=w0))
                continue
            w = np.full(problem.n_views, 1.0 / problem.n_views) if w0 is None else w0
            A = np.asarray(metric[t], dtype=float)
            L = psd_factor(A)
            gs = g_step(problem.Z(w), L, y, lmbda)
            fits.append(MetricFit(A=A, L=L, g=gs.g, w=w, cov_factor=gs.cov_factor(L), f=gs.f,
                                  objective=[_objective(gs, lmbda, 0.0, objective)], n_iter=0,
                                  converged=True))
    return fits


def task_predictive(U: np.ndarray, sizes: tuple[int, ...], w: np.ndarray, g: np.ndarray,
                    cov_factor: np.ndarray, noise_variance: float
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian posterior of ``f = zᵀg`` at the rows of U for one task given A and w: mean
    ``zᵀḡ`` and variance ``σ² zᵀCCᵀz`` (a fit's ``cov_factor`` C, whose ``CCᵀ`` is
    ``(ZᵀZ + 2σ²λA⁻¹)⁻¹``), with ``z = U_row ⊙ w`` repeated over each view's block of
    ``sizes`` features."""
    Z = U * np.repeat(w, sizes)
    ZC = Z @ cov_factor
    return Z @ g, noise_variance * np.einsum("ij,ij->i", ZC, ZC)


def loo_predictive(y: np.ndarray, mean: np.ndarray, var: np.ndarray, noise_variance: float
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Exact leave-one-out posterior predictive ``N(f₋ᵢ, v₋ᵢ)`` of ``f(xᵢ)`` at the training
    rows of one task, given the fitted A and w, from the one fit (no refits).

    The hat matrix ``H = Z(ZᵀZ + 2σ²λA⁻¹)⁻¹Zᵀ`` has ``H_ii = varᵢ/σ²`` (``var`` the
    training rows' posterior variance of f), and the model has no bias, so the leave-one-out
    pieces of :mod:`bayesmv.inference.evidence` are ``P = C⁻¹ = (I - H)/σ²``,
    ``w = (y - f)/σ²``, ``diag(KP) = diag(H)`` and ``u = 0``:
    ``f₋ᵢ = (fᵢ - H_ii yᵢ)/(1 - H_ii)`` and ``v₋ᵢ = varᵢ/(1 - H_ii)`` (Sundararajan &
    Keerthi 2001).  NaN where rounding left ``H_ii ≥ 1`` (a row the fit interpolates).

    Parameters
    ----------
    y : ndarray (N,)
        The task's ±1 targets.
    mean, var : ndarray (N,)
        Posterior mean and variance of f at the training rows (:func:`task_predictive`).
    noise_variance : float
        σ².
    """
    hat = var / noise_variance
    P_diag = (1.0 - hat) / noise_variance
    bad = ~(P_diag > 0)
    safe = np.where(bad, 1.0, P_diag)
    f_loo = loo_decision_values(mean[:, None], ((y - mean) / noise_variance)[:, None], safe,
                                hat, np.zeros_like(hat))[:, 0]
    var_loo = loo_variance(safe, None, None, noise_variance, 1.0)
    f_loo[bad] = np.nan
    var_loo[bad] = np.nan
    return f_loo, var_loo


def loo_calibration_slope(problem: MetricProblem, fits: list[MetricFit], targets: np.ndarray,
                          y_index: np.ndarray, codes: np.ndarray, rule: str,
                          noise_variance: float) -> float:
    """The slope s of the class probabilities ``E[σ(s f*)]`` (each task's Gaussian
    predictive, made class probabilities by the likelihood's multi-class ``rule``) that
    minimises their cross-entropy against Platt's targets at the exact leave-one-out
    predictive of every training row (:func:`loo_predictive`), by
    :func:`~bayesmv.inference.evidence.fit_slope`.  Rows whose leave-one-out values rounding
    lost are left out; ``2/σ²`` (the likelihood normalised over ±1) if that is every row."""
    columns = [loo_predictive(targets[:, t], *task_predictive(
        problem.U, problem.sizes, ft.w, ft.g, ft.cov_factor, noise_variance), noise_variance)
        for t, ft in enumerate(fits)]
    F = np.stack([f for f, _ in columns], axis=1)
    V = np.stack([v for _, v in columns], axis=1)
    usable = np.all(np.isfinite(F) & np.isfinite(V), axis=1)
    if not usable.any():
        return 2.0 / noise_variance
    F, V = F[usable], V[usable]
    slope, _ = fit_slope(
        lambda s: multiclass_log_probabilities(log_expected_sigmoid(F, V, s),
                                               log_expected_sigmoid(-F, V, s), rule,
                                               axis=None, codes=codes),
        platt_targets(y_index, len(codes))[usable])
    return slope
