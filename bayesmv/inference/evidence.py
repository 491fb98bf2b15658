"""Choosing the hyper-parameters of the ϱ-tensor Gaussian process (per-view kernels, the
ϱ-tensor combiner and a Gaussian likelihood on ±1 targets), and calibrating its probabilities.

The model (the Gaussian-process reading of ϱTMV-RKM, on the scale of the ±1 targets) is,
for every task column t,

    y_t = b_t 1 + g_t + ε_t,   g_t ~ N(0, K_ϱ / (η τ²)),   ε_t ~ N(0, λ/τ² I),   b_t flat,

with ``K_ϱ = (1-ϱ) Σ_v K_v + ϱ ⊙_v K_v`` and ``τ = (1-ϱ)V + ϱ``; multiplying by τ gives the
paper's system (eq. 12) exactly.  Two criteria choose ϱ, λ and the kernel widths.

**Evidence** (:class:`RhoTensorEvidence`).  The bias is integrated out under its flat prior,
so the objective is the restricted (REML) likelihood

    -log p(Y) = Σ_t [½ y_tᵀ P y_t] + T/2 (log|C| + log 1ᵀC⁻¹1 + (N-1) log 2π),

``C = (K_ϱ/η + λI)/τ²``, ``P = C⁻¹ - C⁻¹11ᵀC⁻¹ / 1ᵀC⁻¹1``, with analytic gradient
``½ Σ_ij (T·P - P Y Yᵀ P)_ij ∂C_ij`` in the unconstrained parameters (log γ_v, log λ,
logit ϱ).  One Cholesky factor per evaluation serves all tasks (their kernels are shared).
On ±1 targets it tends to interpolate (λ at its lower bound).

**Leave-one-out** (:class:`RhoTensorLOO`).  ``P`` above is the upper-left block of the inverse
of the bordered training matrix ``A = [C 1; 1ᵀ 0]``, ``A⁻¹ = [P u; uᵀ ·]``, whose solution
is ``[w; b] = A⁻¹ [y; 0]``.  Deleting row i changes ``[w; b]`` by ``-A⁻¹[:, i] w_i / P_ii``
(the block-inverse identity), so any decision rule ``F = G w + b`` (G the rule's kernel
between the points and the training rows) has the exact leave-one-out value

    F₋ᵢ(xᵢ) = Fᵢ - (wᵢ / P_ii) ((G P)_ii + u_i)

from the one fit (Sundararajan & Keerthi 2001; Cawley & Talbot 2004 for the bias); for the
Gaussian model's own h (G = K) it is ``yᵢ - wᵢ/P_ii``.  The criterion is the leave-one-out
cross-entropy of the calibrated class probabilities (:func:`fit_slope`) against Platt's
targets, plus the negative log of weak proper hyper-priors, minimised over ϱ, λ and one
common multiplier m of the RBF widths: ``ϱ ~ Beta(1.1, 1.1)``, the noise share of the
targets' prior variance ``φ = λη / (λη + τ) ~ Beta(1.5, 1.5)`` and ``log m ~ N(0, 3²)``.
The priors matter only where the cross-entropy is flat, and there they keep the choice off
the edges: on these kernels the cross-entropy hardly changes as λ → 0, because RBF kernels
of wide views already carry a large diagonal, and it keeps falling slowly towards ϱ = 1 with
a small m or towards ϱ = 0.  Each evaluation costs one Cholesky factor, shared by every
task, and one triangular inverse; a 3 × 3 design in (m, ϱ) and line searches along log λ,
log m and logit ϱ need about 25.
"""

from __future__ import annotations

import itertools
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import linalg, optimize
from scipy.special import expit, logit

from bayesmv.components.base import Identity
from bayesmv.components.kernels import GAMMA_RANGE, ViewKernels, rbf_gram, squared_distances
from bayesmv.components.likelihoods import GaussianLikelihood
from bayesmv.components.tensor import (
    RhoTensorCombiner,
    combine_kernels,
    mix_sum_and_product,
    tau_of,
)
from bayesmv.inference.conjugate import (
    KernelPosterior,
    NumericalWarning,
    cholesky_with_jitter,
)

#: search ranges of the unconstrained λ and ϱ
LOG_LAM_RANGE = (np.log(1e-8), np.log(1e3))
LOGIT_RHO_RANGE = (-10.0, 10.0)
#: search range of the calibration slope (:func:`fit_slope`)
LOG_SLOPE_RANGE = (np.log(1e-4), np.log(1e4))


def is_rho_tensor_process(builder) -> bool:
    """Whether a builder's pieces are the ϱ-tensor Gaussian process this module's criteria
    evaluate: the views as given, exact per-view kernels, the ϱ-tensor combiner and a
    Gaussian likelihood."""
    rep, fmap, comb, lik = builder.pieces
    return (isinstance(rep, Identity) and isinstance(fmap, ViewKernels)
            and isinstance(comb, RhoTensorCombiner) and isinstance(lik, GaussianLikelihood))


def noise_prior_on_search_range(likelihood: GaussianLikelihood) -> bool:
    """Whether the likelihood's noise is fixed or has the log-uniform prior on exactly
    :data:`LOG_LAM_RANGE`, the range the criteria search (another prior is another
    objective)."""
    if likelihood.sigma is not None:
        return True
    return likelihood.variance_range is not None and bool(np.allclose(
        np.log(likelihood.variance_range), LOG_LAM_RANGE, rtol=1e-12, atol=0.0))


@dataclass
class EvidenceResult:
    """Hyper-parameters chosen by the marginal likelihood, and how the search went."""

    gammas: list[float | None]
    alpha: float
    rho: float
    neg_log_evidence: float
    n_iterations: int
    seconds: float
    n_samples: int
    free: tuple[str, ...]
    at_bounds: tuple[str, ...] = ()
    #: the optimum in the search's unconstrained coordinates (log γ_v, log λ, logit ϱ)
    z: np.ndarray | None = None


class _ViewGrams:
    """The views' squared distances (RBF) or inner products (linear), computed once, and
    the Gram matrices of given widths from them."""

    def __init__(self, views: Sequence[np.ndarray], kernels: Sequence[str]) -> None:
        self.kernels = tuple(kernels)
        self.V = len(views)
        self.base = [squared_distances(X) if k == "rbf" else X @ X.T
                     for k, X in zip(self.kernels, views, strict=True)]

    def grams(self, gammas: Sequence[float | None]) -> list[np.ndarray]:
        return [rbf_gram(B, g) if k == "rbf" else B
                for k, g, B in zip(self.kernels, gammas, self.base, strict=True)]


class RhoTensorEvidence(_ViewGrams):
    """Negative restricted log marginal likelihood of the ϱ-tensor model and its gradient.

    Parameters
    ----------
    views : list of ndarray
        Standardised training views.
    kernels : sequence of {"rbf", "linear"}
    Y : ndarray (N, T)
        Targets, one column per task.
    eta : float
        The paper's η (fixed).
    gammas, lam, rho :
        Fixed values, or None for the ones to choose.
    restricted : bool, default True
        The bias integrated out (REML, the criterion above); False: the bias at its
        maximum, ``b_t = 1ᵀC⁻¹y_t / 1ᵀC⁻¹1`` (the profile likelihood, which is the
        Gaussian-process graph's density at its mode in b: its bias is a free variable).
    logit_rho_range : (float, float)
        Search range of logit ϱ.
    """

    def __init__(self, views: Sequence[np.ndarray], kernels: Sequence[str], Y: np.ndarray,
                 eta: float, gammas: Sequence[float | None], lam: float | None,
                 rho: float | None, *, restricted: bool = True,
                 logit_rho_range: tuple[float, float] = LOGIT_RHO_RANGE) -> None:
        super().__init__(views, kernels)
        self.Y = np.asarray(Y, dtype=float)
        self.eta = float(eta)
        self.restricted = bool(restricted)
        self.logit_rho_range = tuple(logit_rho_range)
        self.sizes = [X.shape[1] for X in views]
        self.fixed_gammas = list(gammas)
        self.fixed_lam, self.fixed_rho = lam, rho
        self.free_gamma = [v for v in range(self.V)
                           if self.kernels[v] == "rbf" and gammas[v] is None]

    # ------------------------------------------------------------ parameters
    @property
    def free(self) -> tuple[str, ...]:
        names = [f"gamma[{v}]" for v in self.free_gamma]
        names += ["alpha"] if self.fixed_lam is None else []
        names += ["rho"] if self.fixed_rho is None else []
        return tuple(names)

    def bounds(self) -> list[tuple[float, float]]:
        out = [tuple(np.log(np.asarray(GAMMA_RANGE) / self.sizes[v])) for v in self.free_gamma]
        out += [LOG_LAM_RANGE] if self.fixed_lam is None else []
        out += [self.logit_rho_range] if self.fixed_rho is None else []
        return out

    def start(self) -> np.ndarray:
        z = [np.log(1.0 / self.sizes[v]) for v in self.free_gamma]
        z += [np.log(0.1)] if self.fixed_lam is None else []
        z += [0.0] if self.fixed_rho is None else []
        return np.asarray(z, dtype=float)

    def unpack(self, z: np.ndarray) -> tuple[list[float | None], float, float]:
        z = list(np.asarray(z, dtype=float))
        gammas = list(self.fixed_gammas)
        for v in self.free_gamma:
            gammas[v] = float(np.exp(z.pop(0)))
        lam = float(np.exp(z.pop(0))) if self.fixed_lam is None else float(self.fixed_lam)
        rho = float(expit(z.pop(0))) if self.fixed_rho is None else float(self.fixed_rho)
        return gammas, lam, rho

    # -------------------------------------------------------------- objective
    def _covariance(self, gammas, lam: float, rho: float) -> tuple:
        """``C = (K_ϱ/η + λI)/τ²`` and the pieces its derivatives reuse:
        ``(C, Ks, prod, total, tau, scale)``."""
        Ks = self.grams(gammas)
        tau = tau_of(rho, self.V)
        prod = np.prod(Ks, axis=0)
        total = np.sum(Ks, axis=0)
        scale = 1.0 / (self.eta * tau**2)
        C = mix_sum_and_product(total, prod, rho) * scale
        C[np.diag_indices(len(C))] += lam / tau**2
        return C, Ks, prod, total, tau, scale

    def _solve(self, C: np.ndarray) -> tuple:
        """``(L, C⁻¹, C⁻¹1, 1ᵀC⁻¹1, C⁻¹Y)`` with ``L`` C's Cholesky factor."""
        L = cholesky_with_jitter(C, "the marginal likelihood's covariance")
        Ci = linalg.cho_solve((L, True), np.eye(len(C)))
        Ci1 = Ci.sum(axis=1)
        return L, Ci, Ci1, float(Ci1.sum()), Ci @ self.Y

    def bias(self, z: np.ndarray) -> np.ndarray:
        """The bias at its maximum given the hyper-parameters z, ``1ᵀC⁻¹y_t / 1ᵀC⁻¹1``
        per task (its posterior mean under the flat prior too)."""
        _, _, _, s, CiY = self._solve(self._covariance(*self.unpack(z))[0])
        return CiY.sum(axis=0) / s

    def __call__(self, z: np.ndarray) -> tuple[float, np.ndarray]:
        gammas, lam, rho = self.unpack(z)
        C, Ks, prod, total, tau, scale = self._covariance(gammas, lam, rho)
        N, T = self.Y.shape
        L, Ci, Ci1, s, CiY = self._solve(C)
        PY = CiY - np.outer(Ci1, CiY.sum(axis=0) / s)
        nll = 0.5 * float(np.sum(self.Y * PY)) + 0.5 * T * (2.0 * np.sum(np.log(np.diag(L))))
        if self.restricted:  # the bias integrated out: log 1ᵀC⁻¹1 and one dimension fewer
            nll += 0.5 * T * (np.log(s) + (N - 1) * np.log(2 * np.pi))
            M = T * (Ci - np.outer(Ci1, Ci1) / s) - PY @ PY.T  # ∂nll = ½ Σ M ∘ ∂C
        else:  # at its maximum: the envelope theorem leaves ∂ of the quadratic and log|C|
            nll += 0.5 * T * N * np.log(2 * np.pi)
            M = T * Ci - PY @ PY.T
        grad = []
        for v in self.free_gamma:
            dC = -gammas[v] * self.base[v] * mix_sum_and_product(Ks[v], prod, rho) * scale
            grad.append(0.5 * float(np.sum(M * dC)))
        if self.fixed_lam is None:
            grad.append(0.5 * float(np.trace(M)) * lam / tau**2)
        if self.fixed_rho is None:
            dC = (prod - total) * scale - (2.0 * (1.0 - self.V) / tau) * C
            grad.append(0.5 * float(np.sum(M * dC)) * rho * (1.0 - rho))
        return nll, np.asarray(grad)

    def maximise(self, max_iter: int = 200,
                 starts: Sequence[np.ndarray] = ()) -> EvidenceResult:
        """Maximise the evidence over the free hyper-parameters with L-BFGS-B.

        From :meth:`start` and from each of ``starts`` (points in the search's coordinates,
        clipped to its ranges), keeping the best: the evidence can have several modes (an
        interpolating one, λ near its lower bound, beside a smoother one).
        """
        start = time.perf_counter()
        bounds = self.bounds()
        lo, hi = np.asarray(bounds, dtype=float).reshape(-1, 2).T
        points = [self.start()] + [np.clip(np.asarray(z, dtype=float), lo, hi) for z in starts]
        res = min((optimize.minimize(self, z0, jac=True, method="L-BFGS-B", bounds=bounds,
                                     options={"maxiter": max_iter})
                   for z0 in points), key=lambda r: r.fun)
        gammas, lam, rho = self.unpack(res.x)
        # an optimum on the search range's edge: the evidence keeps rising beyond it (e.g.
        # λ → 0 when the labels can be interpolated, γ → 0 when a view is best linear)
        at_bounds = tuple(name for name, z, (a, b) in zip(self.free, res.x, bounds, strict=True)
                          if min(z - a, b - z) < 1e-6 * max(1.0, b - a))
        return EvidenceResult(gammas=gammas, alpha=lam, rho=rho, at_bounds=at_bounds,
                              neg_log_evidence=float(res.fun), n_iterations=int(res.nit),
                              seconds=time.perf_counter() - start, n_samples=self.Y.shape[0],
                              free=self.free, z=np.asarray(res.x))




# --------------------------------------------------------------------- leave-one-out
def platt_targets(y_index: np.ndarray, n_classes: int) -> np.ndarray:
    """Platt's (1999) smoothed targets, one row per sample: ``(n_k + 1)/(n_k + 2)`` on the
    sample's class k (``n_k`` training rows), the rest ``1/(n_k + 2)`` shared equally by the
    other classes.  For two classes these are exactly Platt's; they keep the fitted slope
    finite when the leave-one-out decision values separate the classes."""
    n = np.bincount(y_index, minlength=n_classes).astype(float)[y_index]
    targets = np.repeat((1.0 / ((n + 2.0) * (n_classes - 1)))[:, None], n_classes, axis=1)
    targets[np.arange(len(y_index)), y_index] = (n + 1.0) / (n + 2.0)
    return targets


def fit_slope(class_log_proba: Callable[[float], np.ndarray], targets: np.ndarray
              ) -> tuple[float, float]:
    """The calibration slope s > 0 minimising the cross-entropy ``-Σ_i targetsᵢᵀ log pᵢ(s)``.

    ``class_log_proba(s)`` gives the (n_samples, n_classes) log-probabilities at slope s;
    the search is Brent's on log s within ``LOG_SLOPE_RANGE``.  Returns (s, cross-entropy).
    """
    def cross_entropy(z: float) -> float:
        return -float(np.sum(targets * class_log_proba(float(np.exp(z)))))

    res = optimize.minimize_scalar(cross_entropy, bounds=LOG_SLOPE_RANGE, method="bounded",
                                   options={"xatol": 1e-2})
    return float(np.exp(res.x)), float(res.fun)


def loo_decision_values(F: np.ndarray, W: np.ndarray, P_diag: np.ndarray,
                        GP_diag: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Exact leave-one-out values ``F₋ᵢ(xᵢ) = Fᵢ - (wᵢ/P_ii)((GP)_ii + uᵢ)`` of a decision
    rule ``F = G w + b`` at its own training rows (see the module docstring).

    Parameters
    ----------
    F, W : ndarray (N, T)
        The rule's values at the training rows and the weights ``w = P y``.
    P_diag, GP_diag, u : ndarray (N,)
        ``diag(P)``, ``diag(G P)`` and the bias row ``u = C⁻¹1 / 1ᵀC⁻¹1`` of the bordered
        inverse.
    """
    return F - (W / P_diag[:, None]) * (GP_diag + u)[:, None]


def loo_variance(P_diag: np.ndarray, u: np.ndarray | None, ones_precision: float | None,
                 noise: float, scale: float) -> np.ndarray:
    """Posterior variance of ``scale·g(xᵢ) + b`` given every training row but i, for each i.

    :meth:`KernelPosterior.variance <bayesmv.inference.conjugate.KernelPosterior.variance>`'s
    formula for the system without row i, whose pieces follow from the full one's by the
    block-inverse identities: with ``c = [C⁻¹]_ii = P_ii + s uᵢ²`` and ``s = 1ᵀC⁻¹1``, the
    latent variance is ``1/c - σ²``, ``kᵢᵀC₋ᵢ⁻¹1 = 1 - s uᵢ/c`` and
    ``1ᵀC₋ᵢ⁻¹1 = s P_ii / c``.  ``ones_precision`` None: a model without the bias b
    (``P = C⁻¹``, ``u`` unused), whose variance is the latent part ``scale² (1/P_ii - σ²)``
    alone.
    """
    no_bias = ones_precision is None
    s = 0.0 if no_bias else float(ones_precision)
    c = P_diag if no_bias else P_diag + s * u**2
    latent = np.maximum(1.0 / c - noise, 0.0)
    if no_bias:
        return scale**2 * latent
    return scale**2 * latent + (1.0 - scale * (1.0 - s * u / c)) ** 2 * c / (s * P_diag)


def own_kernel_rule(Y: np.ndarray, bias: np.ndarray, W: np.ndarray, P_diag: np.ndarray,
                    u: np.ndarray, noise: float, scale: float
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``F = scale · K w + b`` at the training rows and ``diag(scale · K P)`` for the rule
    whose kernel is the model's own K, scaled (eq. 15: ``scale = τ``), with no product of K:
    ``K w = y - b - σ² w`` (from ``C w = y - b``) and ``(K P)_ii = 1 - uᵢ - σ² P_ii`` (from
    ``C P + 1uᵀ = I``)."""
    F = scale * (Y - bias - noise * W) + bias
    return F, scale * (1.0 - u - noise * P_diag)


def loo_pieces(post: KernelPosterior, Y: np.ndarray, noise: float,
               rule_kernel: np.ndarray | None = None, rule_scale: float = 1.0
               ) -> dict[str, np.ndarray | float]:
    """What :func:`loo_decision_values` and :func:`loo_variance` need, from the fit's
    Cholesky factor of ``C = K + σ² I``.

    Parameters
    ----------
    post : KernelPosterior
        The fit (its factor, weights ``w = P y``, bias and ``C⁻¹1``).
    Y : ndarray (N, T)
    noise : float
        σ².
    rule_kernel : ndarray (N, N) or None
        The rule's G with ``F = G w + b`` at the training rows; None: ``rule_scale · K``
        (:func:`own_kernel_rule`).

    Returns
    -------
    dict with F, W (N, T), P_diag, GP_diag, u (N,) and ones_precision.
    """
    s = post.ones_precision
    c1 = post.ones_solve
    u = c1 / s
    L_inv = linalg.lapack.dtrtri(post.chol, lower=1)[0]
    P_diag = np.sum(L_inv**2, axis=0) - c1**2 / s  # diag(C⁻¹) - (C⁻¹1)²/1ᵀC⁻¹1
    W = post.weights
    if rule_kernel is None:
        F, GP_diag = own_kernel_rule(Y, post.bias, W, P_diag, u, noise, rule_scale)
    else:
        F = rule_kernel @ W + post.bias
        GP_diag = (np.einsum("ij,ij->i", rule_kernel, L_inv.T @ L_inv)
                   - (rule_kernel @ c1) * u)
    return {"F": F, "W": W, "P_diag": P_diag, "GP_diag": GP_diag, "u": u,
            "ones_precision": s}


#: hyper-priors of the leave-one-out criterion: ϱ ~ Beta(a, a), the noise share
#: φ = λη/(λη + τ) ~ Beta(a, a), log m ~ N(0, sd²)
RHO_PRIOR = 1.1
NOISE_SHARE_PRIOR = 1.5
LOG_WIDTH_PRIOR_SD = 3.0


def neg_log_hyperprior(rho: float | None, lam: float | None, width: float | None, eta: float,
                       tau: float) -> float:
    """``-log`` of the leave-one-out criterion's hyper-priors (constants dropped) for the
    free ones (None: fixed): ``ϱ ~ Beta(RHO_PRIOR, RHO_PRIOR)``, ``λη/(λη + τ) ~
    Beta(NOISE_SHARE_PRIOR, NOISE_SHARE_PRIOR)``, ``log m ~ N(0, LOG_WIDTH_PRIOR_SD²)``."""
    out = 0.0
    if rho is not None:
        out -= (RHO_PRIOR - 1.0) * (np.log(rho) + np.log1p(-rho))
    if lam is not None:
        share = lam * eta / (lam * eta + tau)
        out -= (NOISE_SHARE_PRIOR - 1.0) * (np.log(share) + np.log1p(-share))
    if width is not None:
        out += 0.5 * (np.log(width) / LOG_WIDTH_PRIOR_SD) ** 2
    return float(out)


def _parabola_vertex(x: Sequence[float], f: Sequence[float]) -> float:
    """Abscissa of the vertex of the parabola through three points (NaN if degenerate)."""
    (x1, x2, x3), (f1, f2, f3) = x, f
    den = (x2 - x1) * (f2 - f3) - (x2 - x3) * (f2 - f1)
    num = (x2 - x1) ** 2 * (f2 - f3) - (x2 - x3) ** 2 * (f2 - f1)
    return x2 - 0.5 * num / den if den != 0 else float("nan")


def line_minimise(f: Callable[[float], float], x0: float, step: float, lo: float, hi: float,
                  refinements: int = 2) -> float:
    """A minimum of ``f`` on [lo, hi] in few evaluations: walk downhill from ``x0`` in growing
    steps until the lowest point has higher neighbours (or sits on an end), then move to the
    vertex of the parabola through it and its neighbours, ``refinements`` times at most."""
    values: dict[float, float] = {}

    def evaluate(x: float) -> None:
        x = float(min(max(x, lo), hi))
        if x not in values:
            values[x] = f(x)

    for x in (x0 - step, x0, x0 + step):
        evaluate(x)
    while True:
        xs = sorted(values)
        i = int(np.argmin([values[x] for x in xs]))
        if i == 0 and xs[0] > lo:
            evaluate(xs[0] - step)
        elif i == len(xs) - 1 and xs[-1] < hi:
            evaluate(xs[-1] + step)
        else:
            break
        step *= 1.5
    for _ in range(refinements):
        xs = sorted(values)
        i = int(np.argmin([values[x] for x in xs]))
        if i in (0, len(xs) - 1):
            break
        triple = xs[i - 1:i + 2]
        vertex = _parabola_vertex(triple, [values[x] for x in triple])
        # a vertex outside the bracket or on a point already known adds nothing
        if not triple[0] < vertex < triple[2] or min(abs(vertex - x) for x in xs) < 1e-3:
            break
        evaluate(vertex)
    return min(values, key=values.get)


@dataclass
class LOOResult:
    """Hyper-parameters chosen by the leave-one-out criterion, and how the search went."""

    gammas: list[float | None]
    alpha: float
    rho: float
    width: float | None
    slope: float
    criterion: float
    cross_entropy: float
    n_evaluations: int
    seconds: float
    n_samples: int
    free: tuple[str, ...]
    at_bounds: tuple[str, ...] = ()


class RhoTensorLOO(_ViewGrams):
    """Leave-one-out criterion of the ϱ-tensor model's calibrated classifier.

    Parameters
    ----------
    views : list of ndarray
        Standardised training views.
    kernels : sequence of {"rbf", "linear"}
    Y : ndarray (N, T)
        ±1 targets, one column per output.
    y_index : ndarray (N,)
        Class index of each row (for Platt's targets).
    n_classes : int
    class_log_proba : callable
        ``class_log_proba(F, slope)``: the calibrated class log-probabilities (N, n_classes)
        of decision values F (N, T) at a slope.
    eta : float
        The paper's η (fixed).
    gammas : sequence of float or None
        RBF widths; None marks the views whose width is ``m · scale_gammas[v]`` with the
        common multiplier m chosen by the criterion.
    scale_gammas : sequence of float or None
        The reference widths of the free views (scikit-learn's ``"scale"``).
    lam, rho : float or None
        Fixed values, or None for the ones to choose.
    rule : {"add", "mean", "model"}
        The decision rule whose leave-one-out values are scored: the paper's eq. 15
        (``τg + b``) or 17 (the mean of the views' own kernels), or the Gaussian model's own
        ``g + b``.
    """

    #: line-search start and step of each free coordinate (log λ, log m, logit ϱ)
    START = {"alpha": np.log(0.1), "gamma": 0.0, "rho": 0.0}
    STEP = {"alpha": 1.5, "gamma": 0.5, "rho": 1.0}
    #: the first design in (log m, logit ϱ) when both are free
    SCAN = {"gamma": np.log([0.1, 0.3, 1.0]), "rho": logit([0.2, 0.7, 0.97])}

    def __init__(self, views: Sequence[np.ndarray], kernels: Sequence[str], Y: np.ndarray,
                 y_index: np.ndarray, n_classes: int,
                 class_log_proba: Callable[[np.ndarray, float], np.ndarray], eta: float,
                 gammas: Sequence[float | None], scale_gammas: Sequence[float | None],
                 lam: float | None, rho: float | None, rule: str = "add") -> None:
        super().__init__(views, kernels)
        self.Y = np.asarray(Y, dtype=float)
        self.class_log_proba = class_log_proba
        self.eta = float(eta)
        self.fixed_gammas = list(gammas)
        self.scale_gammas = list(scale_gammas)
        self.fixed_lam, self.fixed_rho = lam, rho
        self.rule = rule
        self.targets = platt_targets(np.asarray(y_index), n_classes)
        self.free_width = any(k == "rbf" and g is None
                              for k, g in zip(self.kernels, gammas, strict=True))
        self._grams_of: tuple[float | None, list[np.ndarray]] = (np.nan, [])

    @property
    def free(self) -> tuple[str, ...]:
        names = ["gamma"] if self.free_width else []
        names += ["alpha"] if self.fixed_lam is None else []
        names += ["rho"] if self.fixed_rho is None else []
        return tuple(names)

    def ranges(self) -> dict[str, tuple[float, float]]:
        """Search range of each free coordinate (log λ, log m, logit ϱ)."""
        out = {"gamma": tuple(np.log(GAMMA_RANGE)), "alpha": LOG_LAM_RANGE,
               "rho": LOGIT_RHO_RANGE}
        return {name: out[name] for name in self.free}

    def unpack(self, x: dict[str, float]) -> tuple[float | None, float, float]:
        """(m, λ, ϱ) of a point given by its free coordinates."""
        width = float(np.exp(x["gamma"])) if self.free_width else None
        lam = float(np.exp(x["alpha"])) if self.fixed_lam is None else float(self.fixed_lam)
        rho = float(expit(x["rho"])) if self.fixed_rho is None else float(self.fixed_rho)
        return width, lam, rho

    def gammas(self, width: float | None) -> list[float | None]:
        """The views' widths for a common multiplier m of the free ones."""
        return [width * sc if k == "rbf" and g is None else g
                for k, g, sc in zip(self.kernels, self.fixed_gammas, self.scale_gammas,
                                    strict=True)]

    def width_grams(self, width: float | None) -> list[np.ndarray]:
        if self._grams_of[0] != width:  # the line searches in ϱ and λ reuse them
            self._grams_of = (width, self.grams(self.gammas(width)))
        return self._grams_of[1]

    def loo_values(self, width: float | None, lam: float, rho: float) -> np.ndarray | None:
        """The rule's exact leave-one-out decision values (N, T) at (m, λ, ϱ), from one
        Cholesky factor; None where rounding left some ``P_ii ≤ 0`` (no usable values)."""
        grams = self.width_grams(width)
        tau = tau_of(rho, self.V)
        K = combine_kernels(grams, rho) / (self.eta * tau**2)
        noise = lam / tau**2
        G = (np.sum(grams, axis=0) / (self.V * self.eta * tau) if self.rule == "mean"
             else None)
        with warnings.catch_warnings():
            # a nearly singular K at a tiny λ is only a point the search moves away from
            warnings.simplefilter("ignore", NumericalWarning)
            pieces = loo_pieces(KernelPosterior.fit(K, self.Y, noise), self.Y, noise, G,
                                1.0 if self.rule == "model" else tau)
        if not np.all(pieces["P_diag"] > 0):
            return None
        return loo_decision_values(pieces["F"], pieces["W"], pieces["P_diag"],
                                   pieces["GP_diag"], pieces["u"])

    def evaluate(self, width: float | None, lam: float, rho: float) -> dict[str, float]:
        """Criterion at (m, λ, ϱ): the leave-one-out decision values of the rule
        (:meth:`loo_values`) and the slope that fits them best."""
        F_loo = self.loo_values(width, lam, rho)
        if F_loo is None:  # lost to rounding
            return {"criterion": np.inf, "slope": np.nan, "cross_entropy": np.inf}
        slope, ce = fit_slope(lambda t: self.class_log_proba(F_loo, t), self.targets)
        tau = tau_of(rho, self.V)
        prior = neg_log_hyperprior(None if self.fixed_rho is not None else rho,
                                   None if self.fixed_lam is not None else lam,
                                   width if self.free_width else None, self.eta, tau)
        return {"criterion": ce + prior, "slope": slope, "cross_entropy": ce}

    def minimise(self) -> LOOResult:
        """Choose the free hyper-parameters: from λ = 0.1, m = 1, ϱ = ½, the best point of a
        3 × 3 design in (m, ϱ) when both are free, then line searches
        (:func:`line_minimise`, one parabolic refinement each) along log λ, log m, logit ϱ
        and log λ again.  (A second round of line searches moved the criterion by about
        0.1 nat on the bundled digits, for twice the evaluations.)"""
        start = time.perf_counter()
        cache: dict[tuple, dict] = {}
        ranges = self.ranges()

        def criterion(x: dict[str, float]) -> float:
            key = tuple(round(x[name], 9) for name in ranges)
            if key not in cache:
                cache[key] = {**self.evaluate(*self.unpack(x)), "x": dict(x)}
            return cache[key]["criterion"]

        x = {name: float(np.clip(self.START[name], *ranges[name])) for name in ranges}
        criterion(x)
        if "gamma" in ranges and "rho" in ranges:
            # the criterion has a ridge from (m ≈ 1, small ϱ) to (small m, ϱ near 1): the
            # product of V view kernels is as wide as one view's only for a small m.  A 3 × 3
            # design across it picks the basin the line searches then descend in.
            for log_width, logit_rho in itertools.product(self.SCAN["gamma"],
                                                          self.SCAN["rho"]):
                criterion({**x, "gamma": log_width, "rho": logit_rho})
            x = dict(min(cache.values(), key=lambda r: r["criterion"])["x"])
        order = [name for name in ("alpha", "gamma", "rho") if name in ranges]
        for name in order + (["alpha"] if len(order) > 1 and "alpha" in ranges else []):
            x[name] = line_minimise(lambda t, name=name: criterion({**x, name: t}), x[name],
                                    self.STEP[name], *ranges[name], refinements=1)
        best = min(cache.values(), key=lambda r: r["criterion"])
        width, lam, rho = self.unpack(best["x"])
        edges = tuple(name for name, (lo, hi) in ranges.items()
                      if min(best["x"][name] - lo, hi - best["x"][name]) < 1e-6 * (hi - lo))
        return LOOResult(gammas=self.gammas(width), alpha=lam, rho=rho, width=width,
                         slope=best["slope"], criterion=best["criterion"],
                         cross_entropy=best["cross_entropy"], n_evaluations=len(cache),
                         seconds=time.perf_counter() - start, n_samples=self.Y.shape[0],
                         free=self.free, at_bounds=edges)


__all__ = ["EvidenceResult", "LOOResult", "RhoTensorEvidence", "RhoTensorLOO", "fit_slope",
           "loo_decision_values", "loo_pieces", "loo_variance", "own_kernel_rule",
           "platt_targets"]
