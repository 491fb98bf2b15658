"""MAP and Laplace approximations on a ``pm.Model``'s own compiled log density.

:class:`FlatLogp` compiles the model's log density and its gradient (one PyTensor function
for both) as a function of one flat vector of the free value variables; :func:`find_map` runs
SciPy's L-BFGS-B on it (full batch, from a caller-supplied — for factor models jittered —
start), and :func:`laplace_approximation` puts a Gaussian at the mode.  Optimising the
compiled graph directly, rather than a re-implementation, guarantees the mode is the mode of
the model that NUTS would sample; on 10⁴+ parameters it is also 10–20× faster than
``pm.find_MAP``'s wrapper (measured on the MVM benchmark).

L1 (Laplace-prior) terms are not differentiable at zero, which stalls quasi-Newton methods.
:class:`L1Penalty` names them, and :func:`find_map` then optimises the exact L1 problem by the
split ``u = p - q`` with ``p, q ≥ 0`` (smooth with bound constraints, which L-BFGS-B handles),
so entries can be exactly zero at the mode.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import arviz as az
import numpy as np
import pymc as pm
import pytensor.tensor as pt
from scipy.optimize import minimize

from bayesmv.data import block_slices


class FlatLogp:
    """A model's log density and gradient as functions of one flat parameter vector.

    Parameters
    ----------
    model : pm.Model
    jacobian : bool
        Include the log-Jacobians of the transforms (the density of the unconstrained
        values, right for Laplace approximations) or not (the mode in the original
        parameterisation, as ``pm.find_MAP`` computes it).
    """

    def __init__(self, model: pm.Model, *, jacobian: bool = True) -> None:
        self.model = model
        self.jacobian = jacobian
        self.value_vars = list(model.continuous_value_vars)
        if len(self.value_vars) != len(model.value_vars):
            raise ValueError("FlatLogp needs a model with continuous free variables only")
        self.names = [v.name for v in self.value_vars]
        point = model.initial_point()
        self.shapes = [np.shape(point[n]) for n in self.names]
        self.sizes = [int(np.prod(s)) for s in self.shapes]
        self.slices = dict(zip(self.names, block_slices(self.sizes), strict=True))
        self.size = sum(self.sizes)
        self._logp = model.logp(jacobian=jacobian)
        # compiled on first use: a registered solver strategy reads the layout above and
        # evaluates the density once, so the gradient's compilation would be wasted on it
        self._grads: list | None = None
        self._fn: Callable | None = None
        self._hvp_fn: Callable | None = None
        self._value_fn: Callable | None = None
        self.n_evals = 0

    # ------------------------------------------------------------ packing
    def to_point(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Flat vector → {value-variable name: array}."""
        return {n: np.asarray(x[self.slices[n]]).reshape(s)
                for n, s in zip(self.names, self.shapes, strict=True)}

    def from_point(self, point: dict[str, np.ndarray]) -> np.ndarray:
        """{value-variable name: array} → flat vector (every free variable required)."""
        missing = [n for n in self.names if n not in point]
        if missing:
            raise KeyError(f"point lacks values for {missing}")
        return np.concatenate([np.asarray(point[n], dtype=float).ravel() for n in self.names])

    def _args(self, x: np.ndarray) -> list[np.ndarray]:
        return [np.asarray(x[self.slices[n]], dtype=float).reshape(s)
                for n, s in zip(self.names, self.shapes, strict=True)]

    # ---------------------------------------------------------- evaluation
    @property
    def gradients(self) -> list:
        """The symbolic gradient of the log density, one entry per value variable (built
        once: the value-and-gradient and the Hessian-vector functions share it)."""
        if self._grads is None:
            self._grads = pt.grad(self._logp, self.value_vars)
        return self._grads

    def __call__(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """``(log p(x), ∇ log p(x))``."""
        self.n_evals += 1
        if self._fn is None:
            self._fn = self.model.compile_fn([self._logp, *self.gradients],
                                             inputs=self.value_vars, point_fn=False)
        out = self._fn(*self._args(x))
        return float(out[0]), np.concatenate([np.asarray(g).ravel() for g in out[1:]])

    def logp(self, x: np.ndarray) -> float:
        """``log p(x)`` alone, for the many evaluations that need no gradient (a Laplace
        approximation's importance ratios): on MVM's graphs of the UCI digits 0.18 ms against
        0.45 ms for value and gradient (3 vs 5), 4.3 ms against 17.6 ms (ten digits)."""
        if self._value_fn is None:
            self._value_fn = self.model.compile_fn(self._logp, inputs=self.value_vars,
                                                   point_fn=False)
        return float(self._value_fn(*self._args(x)))

    def hvp(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Exact Hessian-vector product ``∇² log p(x) · v`` (double back-propagation)."""
        if self._hvp_fn is None:
            dirs = [var.type() for var in self.value_vars]
            inner = pt.sum([pt.sum(g * d) for g, d in zip(self.gradients, dirs, strict=True)])
            hv = pt.grad(inner, self.value_vars)
            self._hvp_fn = self.model.compile_fn(hv, inputs=self.value_vars + dirs,
                                                 point_fn=False)
        out = self._hvp_fn(*self._args(x), *self._args(v))
        return np.concatenate([np.asarray(h).ravel() for h in out])


@dataclass
class L1Penalty:
    """Value variables whose entries carry Laplace priors, and the rate of each.

    Attributes
    ----------
    names : sequence of str
        Value-variable names with an elementwise ``-rate · |u|`` term in the log density.
    rates : sequence of float or (str, int)
        A fixed rate, or ``(log_rate_value_variable, index)`` when the rate is a (log-
        transformed) free variable of the model: rate = ``exp(x[name][index])``.
    """

    names: Sequence[str]
    rates: Sequence[float | tuple[str, int]]


@dataclass
class MapResult:
    """Outcome of :func:`find_map`."""

    x: np.ndarray
    point: dict[str, np.ndarray]
    logp: float
    n_iter: int
    n_evals: int
    success: bool
    message: str
    hit_max_iter: bool = False


#: problems up to this many parameters get Newton steps after L-BFGS-B (see find_map)
POLISH_MAX = 400


def newton_polish(flat: FlatLogp, x: np.ndarray, *, max_steps: int = 20,
                  gtol: float = 1e-10) -> np.ndarray:
    """Newton steps with the exact Hessian from ``x`` while they increase the log density.

    L-BFGS-B stops on the relative change of the objective, which on ill-conditioned
    problems (nearly separable logistic regression) leaves gradients of 1e-3 to 1e-2; a few
    Newton steps reach the mode to rounding.  Directions without clear negative curvature
    (exact symmetries, saddles) are left alone: the step is taken in the span of the
    eigenvectors of ``-H`` with eigenvalue above ``1e-10 · max``.
    """
    lp, g = flat(x)
    for _ in range(max_steps):
        if np.max(np.abs(g)) <= gtol * max(1.0, abs(lp)):
            break
        lam, vecs = np.linalg.eigh(-full_hessian(flat, x))
        keep = lam > 1e-10 * max(lam.max(), 0.0)
        if not keep.any():
            break
        step = vecs[:, keep] @ ((vecs[:, keep].T @ g) / lam[keep])
        for scale in (1.0, 0.5, 0.25, 0.125):
            trial = x + scale * step
            lp_t, g_t = flat(trial)
            if np.isfinite(lp_t) and lp_t >= lp:
                x, lp, g = trial, lp_t, g_t
                break
        else:
            break
    return x


def find_map(flat: FlatLogp, x0: np.ndarray, *, l1: L1Penalty | None = None,
             max_iter: int = 1000, tol: float = 1e-9, maxcor: int = 20,
             polish: bool = True) -> MapResult:
    """Maximise ``flat`` by L-BFGS-B from ``x0`` (full batch).

    Parameters
    ----------
    flat : FlatLogp
        Usually compiled with ``jacobian=False`` (the mode of the original parameters).
    x0 : ndarray
        Start.  For factor models it must be jittered: zero is a saddle point.
    l1 : L1Penalty or None
        Optimise these entries through the split ``u = p - q, p, q ≥ 0`` (exact L1).
    max_iter : int
        Maximum L-BFGS-B iterations.
    tol : float
        Relative objective tolerance (SciPy's ``ftol``); the projected-gradient tolerance
        is ``1000·tol``.
    polish : bool, default True
        Finish with :func:`newton_polish` when the problem is smooth (no ``l1``) and has at
        most :data:`POLISH_MAX` parameters.
    """
    x0 = np.asarray(x0, dtype=float)
    l1_idx: list[tuple[slice, float | tuple[int, int]]] = []
    if l1 is not None:
        for name, rate in zip(l1.names, l1.rates, strict=True):
            if isinstance(rate, tuple):
                hyper, j = rate
                rate = (flat.slices[hyper].start + int(j), 0)
            l1_idx.append((flat.slices[name], rate))
    mask = np.zeros(flat.size, dtype=bool)
    for sl, _ in l1_idx:
        mask[sl] = True
    free = np.flatnonzero(~mask)
    pen = np.flatnonzero(mask)
    m = pen.size

    def assemble(y: np.ndarray) -> np.ndarray:
        x = np.empty(flat.size)
        x[free] = y[:free.size]
        x[pen] = y[free.size:free.size + m] - y[free.size + m:]
        return x

    # position of each L1 slice inside `pen`
    offsets = np.full(flat.size, -1)
    offsets[pen] = np.arange(m)

    def objective(y: np.ndarray) -> tuple[float, np.ndarray]:
        x = assemble(y)
        lp, g = flat(x)
        if not np.isfinite(lp):
            return np.inf, np.zeros_like(y)
        gy = np.empty_like(y)
        gy[:free.size] = g[free]
        if m:
            p, q = y[free.size:free.size + m], y[free.size + m:]
            gp, gq = np.empty(m), np.empty(m)
            g_hyper = np.zeros(flat.size)
            for sl, rate in l1_idx:
                k = offsets[sl]
                if isinstance(rate, tuple):
                    r = float(np.exp(x[rate[0]]))
                else:
                    r = float(rate)
                u = x[sl]
                # the model's term is -r|u|; the split problem's is -r(p + q): same where
                # p·q = 0 (always true at the optimum), smooth everywhere
                gap = float(np.sum(np.abs(u) - p[k] - q[k]))
                lp += r * gap
                g_lik = g[sl] + r * np.sign(u)  # gradient of everything but -r|u|
                gp[k] = g_lik - r
                gq[k] = -g_lik - r
                if isinstance(rate, tuple):
                    g_hyper[rate[0]] += r * gap  # d(r·gap)/d log r
            gy[:free.size] += g_hyper[free]
            gy[free.size:free.size + m] = gp
            gy[free.size + m:] = gq
        return -lp, -gy

    y0 = np.concatenate([x0[free], np.maximum(x0[pen], 0.0), np.maximum(-x0[pen], 0.0)])
    bounds = [(None, None)] * free.size + [(0.0, None)] * (2 * m)
    n0 = flat.n_evals
    res = minimize(objective, y0, jac=True, method="L-BFGS-B",
                   bounds=bounds if m else None,
                   options={"maxiter": int(max_iter), "maxfun": 4 * int(max_iter) + 20,
                            "ftol": tol, "gtol": 1e3 * tol, "maxcor": maxcor})
    x = assemble(res.x)
    if polish and not m and flat.size <= POLISH_MAX:
        x = newton_polish(flat, x)
    lp, _ = flat(x)
    return MapResult(x=x, point=flat.to_point(x), logp=lp, n_iter=int(res.nit),
                     n_evals=flat.n_evals - n0, success=bool(res.success),
                     message=str(res.message), hit_max_iter=int(res.nit) >= int(max_iter))


@dataclass
class LaplaceResult:
    """A Gaussian ``N(mean, Σ)`` over the flat unconstrained parameters.

    ``curvature`` is ``"full"`` (Σ = (-H)⁺ from the exact Hessian, ``cov_factor`` L with
    Σ = L Lᵀ; ``n_clipped`` flat directions get zero variance) or ``"diagonal"``
    (Σ = diag(1 / -H_jj) from the exact Hessian diagonal).
    """

    mean: np.ndarray
    curvature: str
    sd: np.ndarray
    cov_factor: np.ndarray | None = None
    n_clipped: int = 0

    def sample(self, draws: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``draws`` samples of shape (draws, P) and their log density under the Gaussian
        (up to a constant, which importance ratios do not need)."""
        if self.cov_factor is not None:
            z = rng.standard_normal((draws, self.cov_factor.shape[1]))
            return self.mean + z @ self.cov_factor.T, -0.5 * np.sum(z**2, axis=1)
        z = rng.standard_normal((draws, self.mean.size))
        return self.mean + z * self.sd, -0.5 * np.sum(z**2, axis=1)

    def marginal_directions(self) -> np.ndarray:
        """Directions ``d_k`` (rows, shape (K, P)) with ``Σ_k d_k d_kᵀ`` equal to Σ wherever a
        per-task predictive reads it (here everywhere: the columns of the full factor)."""
        if self.cov_factor is None:
            raise ValueError("a diagonal Gaussian has no factor directions")
        return self.cov_factor.T


@dataclass
class TaskBlockGaussian(LaplaceResult):
    """A Gaussian whose covariance is block-diagonal: independent blocks of the flat vector
    (one per task of a task-separable posterior), each with its own factor.

    ``blocks`` holds ``(slice, F)`` with the block's covariance ``F Fᵀ``.  Draws are drawn
    block by block, independently.  :meth:`marginal_directions` combines the k-th column of
    every block into one direction: the sum of their outer products has every block's
    covariance exactly and nonzero products between blocks, so it serves predictives that
    read one task at a time (a task's decision values depend on its own block only), with
    ``max_k`` directions instead of ``Σ k``.
    """

    blocks: tuple[tuple[slice, np.ndarray], ...] = ()

    def sample(self, draws: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        X = np.tile(self.mean, (draws, 1))
        log_q = np.zeros(draws)
        for where, F in self.blocks:
            z = rng.standard_normal((draws, F.shape[1]))
            X[:, where] += z @ F.T
            log_q -= 0.5 * np.sum(z**2, axis=1)
        return X, log_q

    def marginal_directions(self) -> np.ndarray:
        K = max((F.shape[1] for _, F in self.blocks), default=0)
        D = np.zeros((K, self.mean.size))
        for where, F in self.blocks:
            D[:F.shape[1], where] = F.T
        return D


def pareto_khat(log_p: np.ndarray, log_q: np.ndarray) -> float:
    """Pareto k̂ of the importance ratios p/q of draws from an approximation q.

    The PSIS diagnostic of Yao, Vehtari, Simpson & Gelman (2018, "Yes, but did it work?"):
    k̂ < 0.5 the approximation is good, 0.5–0.7 usable, > 0.7 the approximation (and any
    expectation computed from its draws) is unreliable.  Constants in either density cancel.
    """
    lw = np.asarray(log_p, dtype=float) - np.asarray(log_q, dtype=float)
    if not np.all(np.isfinite(lw)):
        return float("inf")
    return float(az.psislw(lw - lw.max())[1])


def full_hessian(flat: FlatLogp, x: np.ndarray) -> np.ndarray:
    """Exact Hessian of ``flat`` at ``x`` from P Hessian-vector products (symmetrised)."""
    P = x.size
    H = np.empty((P, P))
    e = np.zeros(P)
    for j in range(P):
        e[j] = 1.0
        H[:, j] = flat.hvp(x, e)
        e[j] = 0.0
    return 0.5 * (H + H.T)


def laplace_approximation(flat: FlatLogp, mode: np.ndarray, *, curvature: str = "auto",
                          full_max: int = 2000,
                          neg_hessian_diagonal: Callable[[np.ndarray], np.ndarray] | None = None,
                          null_directions: np.ndarray | None = None,
                          flat_tol: float = 1e-6,
                          hessian: np.ndarray | None = None) -> LaplaceResult:
    """Gaussian approximation at a mode of ``flat`` (compile ``flat`` with ``jacobian=True``).

    Parameters
    ----------
    curvature : {"auto", "full", "diagonal"}
        ``"full"``: the exact Hessian (P Hessian-vector products, O(P²) memory, O(P³)
        factorisation), keeping every posterior correlation.  ``"diagonal"``: only the exact
        diagonal of the Hessian (correlations, e.g. between the factors of different views,
        are dropped, so marginal variances are those conditional on the other parameters —
        an underestimate).  ``"auto"``: full when P ≤ ``full_max``, else diagonal.
    neg_hessian_diagonal : callable or None
        ``x → -diag ∇² log p(x)``: a fast model-specific diagonal.  Without it the diagonal
        comes from P Hessian-vector products.
    null_directions : ndarray of shape (P, m) or None
        Tangents of known exact symmetries of the density at the mode (full curvature only):
        they are projected out and get zero variance.  Numerically their curvature is only
        O(|gradient|), not zero, and would otherwise give absurd variances.
    hessian : ndarray of shape (P, P) or None
        The Hessian at the mode when the caller has it already (full curvature only: a
        quadratic log density's, formed once for its Newton step); else P Hessian-vector
        products form it.

    Notes
    -----
    Directions in which ``-H`` has (numerically) no curvature, eigenvalues below
    ``flat_tol · max``, get zero variance: for factor models these are exact symmetries (with
    two views, ``A^{(1)} R`` and ``A^{(2)} R`` for any rotation R leave both the likelihood and
    a Gaussian prior unchanged), along which ``f`` does not change, so the approximation lives
    on the quotient.  Clearly negative eigenvalues (below ``-flat_tol · max``: a saddle, or an
    optimiser that stopped early) are treated the same way, with a warning.
    """
    if curvature not in ("auto", "full", "diagonal"):
        raise ValueError(f"curvature must be 'auto', 'full' or 'diagonal', got {curvature!r}")
    mode = np.asarray(mode, dtype=float)
    P = mode.size
    if curvature == "auto":
        curvature = "full" if P <= full_max else "diagonal"
    if curvature == "full":
        prec = -(full_hessian(flat, mode) if hessian is None else hessian)
        if null_directions is not None and null_directions.size:
            Q, R = np.linalg.qr(null_directions)
            Q = Q[:, np.abs(np.diag(R)) > 1e-12 * max(np.abs(np.diag(R)).max(), 1e-300)]
            proj = np.eye(P) - Q @ Q.T
            prec = proj @ prec @ proj
        evals, evecs = np.linalg.eigh(prec)
        top = max(float(evals.max()), 1e-300)
        flat_dirs = evals <= flat_tol * top
        negative = int(np.sum(evals < -flat_tol * top))
        if negative:
            warnings.warn(f"Laplace approximation: {negative} of {P} curvature eigenvalues are "
                          "negative at the mode (a saddle point, or the optimiser stopped "
                          "early); those directions get zero variance.", RuntimeWarning,
                          stacklevel=2)
        keep = ~flat_dirs
        factor = evecs[:, keep] / np.sqrt(evals[keep])  # Σ = V Λ⁻¹ Vᵀ on the kept directions
        sd = np.sqrt(np.sum(factor**2, axis=1))
        return LaplaceResult(mode, "full", sd, cov_factor=factor,
                             n_clipped=int(flat_dirs.sum()))
    if neg_hessian_diagonal is not None:
        diag = np.asarray(neg_hessian_diagonal(mode), dtype=float)
    else:
        diag = np.empty(P)
        e = np.zeros(P)
        for j in range(P):
            e[j] = 1.0
            diag[j] = -flat.hvp(mode, e)[j]
            e[j] = 0.0
    floor = 1e-8 * max(float(diag.max()), 1e-300)
    bad = int(np.sum(diag < floor))
    if bad:
        warnings.warn(f"Laplace approximation: {bad} of {P} diagonal curvatures were not "
                      "positive at the mode; they were raised to a small floor.",
                      RuntimeWarning, stacklevel=2)
        diag = np.maximum(diag, floor)
    return LaplaceResult(mode, "diagonal", 1.0 / np.sqrt(diag), n_clipped=bad)
