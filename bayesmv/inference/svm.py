"""Inference for linear hinge models on fixed features with an unregularised bias.

The model: ``θ_t ~ N(0, I)``, flat ``b_t``, ``f_t = Φ θ_tᵀ + b_t`` and the hinge
pseudo-likelihood ``exp(-2C·max(0, 1 - y f))`` (the builder's :class:`HingeLikelihood`), one
task per one-vs-rest column.  Its log posterior is ``-(½||θ||² + 2C Σ_n hinge_n)``, so

* the MAP is the soft-margin SVM with cost ``2C`` per sample and an unpenalised bias —
  :func:`fit_svm_map` solves it exactly with libsvm's SMO (the equality constraint
  ``Σ α_n y_n = 0`` that an unpenalised bias adds to the dual rules out liblinear's
  single-coordinate descent, which penalises the bias);
* the full posterior is sampled by the Polson–Scott augmentation (Polson & Scott 2011) with
  the existing blocks :func:`~bayesmv.inference.gibbs.sample_lambda` and
  :func:`~bayesmv.inference.gibbs.beta_conditional`: λ | f, then (θ, b) | λ jointly (prior
  precision 1 on θ, 0 on b), then — when missing similarity blocks are unknowns — the blocks
  | λ, θ, b by Matheron's rule (an exact Gaussian conditional).  :class:`HingeGibbs` runs
  inside ``pm.sample``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import arviz as az
import numpy as np
from scipy import optimize
from scipy.special import logsumexp
from sklearn import config_context
from sklearn.svm import SVC

from bayesmv.builder import BuiltModel
from bayesmv.components.landmarks import MissingBlocks
from bayesmv.components.likelihoods import log_hinge_probability
from bayesmv.inference.gibbs import (
    GibbsBlockStep,
    beta_conditional,
    draw_gaussian_from_precision,
    sample_lambda,
)
from bayesmv.inference.sample import chain_seeds, numpy_steps, sample_pymc

#: above this many samples the N × N Gram matrix is not formed (memory); libsvm then
#: evaluates the linear kernel itself from its cache
GRAM_MAX_SAMPLES = 6000


def fit_svm_map(Phi: np.ndarray, targets: np.ndarray, cost: float, *, tol: float = 1e-4,
                max_gram_samples: int = GRAM_MAX_SAMPLES
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact soft-margin SVMs ``min ½||θ||² + cost·Σ_n max(0, 1 - y_n(θᵀφ_n + b))``, b free.

    One problem per column of ``targets``; the linear Gram matrix ``Φ Φᵀ`` is computed once
    (one BLAS call) and shared by all of them, and libsvm's SMO solves each dual with the
    bias's equality constraint.

    Parameters
    ----------
    Phi : ndarray (N, p)
    targets : ndarray (N, T) of ±1
    cost : float
        Per-sample hinge cost (scikit-learn's ``SVC(C=...)``).
    tol : float
        libsvm's stopping tolerance on the KKT violation.
    max_gram_samples : int
        Above this N, let libsvm evaluate the linear kernel itself (no N × N matrix).

    Returns
    -------
    theta : ndarray (T, p)
    bias : ndarray (T,)
    dual : ndarray (N, T)
        ``α_n y_n`` (zero off the support vectors), so ``θ = Φᵀ dual``.
    """
    N, p = Phi.shape
    T = targets.shape[1]
    use_gram = N <= max_gram_samples
    K = Phi @ Phi.T if use_gram else None
    theta, bias, dual = np.zeros((T, p)), np.zeros(T), np.zeros((N, T))
    for t in range(T):
        y = targets[:, t]
        # Φ is finite by construction; re-checking the N × N Gram matrix for every task cost
        # a third of libsvm's own time at N = 1600
        with config_context(assume_finite=True):
            if use_gram:
                svc = SVC(kernel="precomputed", C=cost, tol=tol).fit(K, y)
            else:
                svc = SVC(kernel="linear", C=cost, tol=tol, cache_size=1000).fit(Phi, y)
        # scikit-learn orders classes as (-1, +1) and signs dual_coef_ = α y so that the
        # decision value K(x, sv) · dual_coef_ + intercept_ favours +1 when positive
        dual[svc.support_, t] = svc.dual_coef_[0]
        theta[t] = Phi[svc.support_].T @ svc.dual_coef_[0]
        bias[t] = svc.intercept_[0]
    return theta, bias, dual


# ------------------------------------------------------------------- held-out calibration
#: total hinge costs C (per-row cost C/N) a held-out criterion chooses among: the MVL-SVM
#: paper tuned C over 1e-3 … 1e4; below 10 the 1/N scaling regularises hard at any realistic N
HINGE_COST_GRID = (10.0, 100.0, 1000.0, 10000.0)
#: Gauss–Hermite nodes for E[p(y | f)] over f ~ N(m, s²) (unknown similarity blocks)
N_QUADRATURE = 24
#: search range of the calibrated hinge constant (Platt's smoothed targets keep the optimum
#: finite even when every held-out decision value has the right sign)
LOG_LINK_BOUNDS = (np.log(1e-8), np.log(1e8))


def out_of_fold_decision_values(
        Phi: np.ndarray, targets: np.ndarray, y_index: np.ndarray, cost: float, folds: int,
        seed: int | None, *, tol: float = 1e-4,
        spread: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
        ) -> tuple[np.ndarray, np.ndarray | None]:
    """Each row's decision values from the SVMs fitted on the stratified folds that leave it
    out (``StratifiedKFold(folds, shuffle=True, random_state=seed)``), each with per-row cost
    ``cost / (its training rows)``: (1, N, T), and with ``spread(theta, test_rows)`` the sd
    of each held-out value, (1, N, T) (None without)."""
    from sklearn.model_selection import StratifiedKFold

    N, T = targets.shape
    f = np.empty((1, N, T))
    sd = None if spread is None else np.zeros((1, N, T))
    splitter = StratifiedKFold(folds, shuffle=True, random_state=seed)
    for train, test in splitter.split(np.zeros(N), y_index):
        theta, bias, _ = fit_svm_map(Phi[train], targets[train], cost / train.size, tol=tol)
        f[0, test] = Phi[test] @ theta.T + bias
        if spread is not None:
            sd[0, test] = spread(theta, test)
    return f, sd


def hinge_mixture_log_probabilities(f: np.ndarray, sd: np.ndarray | None, log_w: np.ndarray,
                                    c: float) -> tuple[np.ndarray, np.ndarray]:
    """``log p(y = ±1)`` of the hinge probability with constant c averaged over draws of f.

    Parameters
    ----------
    f : ndarray (draws, n, tasks)
        Decision values per draw.
    sd : ndarray like f, or None
        Standard deviation of a Gaussian spread of f per draw (unknown blocks), integrated by
        Gauss–Hermite.
    log_w : ndarray broadcasting against f
        Log weights of the draws, summing to one over the first axis.

    Returns
    -------
    log_pos, log_neg : ndarray (n, tasks)
    """
    if sd is None:
        g, lw, axes = f, log_w, 0
    else:
        nodes, weights = np.polynomial.hermite.hermgauss(N_QUADRATURE)
        g = f[..., None] + np.sqrt(2.0) * sd[..., None] * nodes
        lw, axes = log_w[..., None] + np.log(weights / np.sqrt(np.pi)), (0, 3)
    return (logsumexp(log_hinge_probability(g, c) + lw, axis=axes),
            logsumexp(log_hinge_probability(-g, c) + lw, axis=axes))


def fit_link_constant(f: np.ndarray, sd: np.ndarray | None, log_w: np.ndarray, *,
                      targets: np.ndarray) -> tuple[float, float]:
    """The hinge constant c that maximises the held-out log-likelihood of Platt's smoothed
    targets, summed over the one-vs-rest tasks (arguments as
    :func:`hinge_mixture_log_probabilities`; ``targets`` ±1, (n, tasks)), and that maximum's
    negative log-likelihood."""
    positive = targets > 0
    n_pos, n_neg = positive.sum(axis=0), (~positive).sum(axis=0)
    # Platt (1999): targets pulled off 0 and 1 by one pseudo-count, so that separable
    # held-out values do not send c to infinity
    s = np.where(positive, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))

    def loss(log_c: float) -> float:
        log_pos, log_neg = hinge_mixture_log_probabilities(f, sd, log_w, float(np.exp(log_c)))
        return -float(np.sum(s * log_pos + (1.0 - s) * log_neg))

    res = optimize.minimize_scalar(loss, bounds=LOG_LINK_BOUNDS, method="bounded",
                                   options={"xatol": 1e-6})
    return float(np.exp(res.x)), float(res.fun)


def held_out_link_fits(Phi: np.ndarray, targets: np.ndarray, y_index: np.ndarray,
                       costs: Sequence[float], folds: int, seed: int | None, *,
                       tol: float = 1e-4,
                       spread: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
                       ) -> tuple[list[float], list[float]]:
    """For each total cost: the out-of-fold decision values
    (:func:`out_of_fold_decision_values`) and the link constant fitted to them
    (:func:`fit_link_constant`).  Returns the link constants and the held-out negative
    log-likelihoods, one per cost (the lowest is the held-out criterion's choice)."""
    links, losses = [], []
    for cost in costs:
        f, sd = out_of_fold_decision_values(Phi, targets, y_index, cost, folds, seed, tol=tol,
                                            spread=spread)
        link, loss = fit_link_constant(f, sd, np.zeros((1, 1, 1)), targets=targets)
        links.append(link)
        losses.append(loss)
    return links, losses


# ---------------------------------------------------------------------------------- Gibbs
@dataclass
class HingeGibbsSpec:
    """What :class:`HingeGibbs` needs to know about a built hinge graph with a flat bias."""

    features: np.ndarray            # (N, p) fixed features (missing entries: anything)
    targets: np.ndarray             # (N, T) ±1
    C: float                        # HingeLikelihood's C (pseudo-likelihood exp(-2C hinge))
    prior_precision: np.ndarray     # (p [+ 1],): θ's prior precision [, then 0 for the bias]
    missing: list[MissingBlocks]    # unknown similarity blocks (impute="bayes")
    has_bias: bool = True           # a flat bias b (SumCombiner(flat_bias=True))
    # with unknown blocks: the map from similarities to features (a whitening LandmarkMap's
    # ``whitened``; ``features`` then holds the similarities), None for the identity
    to_features: Callable[[np.ndarray], np.ndarray] | None = None

    @classmethod
    def from_built(cls, built: BuiltModel) -> HingeGibbsSpec:
        from bayesmv.inference.engines import fixed_design

        b = built.builder
        comb, lik = b.combiner, b.likelihood
        if comb.precision_prior is not None:
            raise ValueError("HingeGibbs needs a SumCombiner with a fixed prior precision")
        features = fixed_design(built)
        p = features.shape[1]
        precision = np.full(p, float(comb.prior_precision))
        if comb.flat_bias:
            precision = np.append(precision, 0.0)
        state = built.context.state
        missing = list(state.get("missing_blocks", []))
        to_features = None
        landmarks = state.get("landmarks")
        if missing and getattr(landmarks, "whiten", False):
            features, to_features = state["similarities"], landmarks.whitened
        return cls(features=features, targets=built.context.targets, C=float(lik.C),
                   prior_precision=precision, missing=missing,
                   has_bias=bool(comb.flat_bias), to_features=to_features)

    def design(self, point: dict) -> tuple[np.ndarray, np.ndarray]:
        """The design (features, plus a column of ones when the model has a bias) with the
        current missing blocks filled in, and the same with the similarities before
        ``to_features`` (the design itself when there is no such map)."""
        raw = np.empty((self.features.shape[0], self.features.shape[1] + int(self.has_bias)))
        raw[:, :self.features.shape[1]] = self.features
        if self.has_bias:
            raw[:, -1] = 1.0
        for k, blk in enumerate(self.missing):
            raw[blk.rows[:, None], blk.columns[None, :]] = point[f"mu_missing_{k}"]
        if self.to_features is None:
            return raw, raw
        return self.mapped(raw), raw

    def mapped(self, A: np.ndarray) -> np.ndarray:
        """``to_features`` on the feature columns of A (rows of a design or of weights)."""
        out = A.copy()
        p = self.features.shape[1]
        out[:, :p] = self.to_features(A[:, :p])
        return out


def draw_missing_blocks(blocks: Sequence[MissingBlocks], Phi1: np.ndarray, W: np.ndarray,
                        targets: np.ndarray, lam: np.ndarray, C: float,
                        rng: np.random.Generator) -> list[np.ndarray]:
    """Draw the unknown feature blocks given λ, the weights and the observed blocks.

    Given λ the augmented hinge is Gaussian in f: ``z_nt = y_nt(1 + λ_nt/C) ~ N(f_nt,
    λ_nt/C²)`` with ``f_nt = w_tᵀ φ̃_n`` linear in the row's missing block μ (prior
    ``N(m, S)`` from :class:`MissingBlocks`).  Matheron's rule draws from the exact
    conditional: draw ``μ̃ ~ N(m, S)`` and ``ẽ ~ N(0, diag(λ/C²))``, then
    ``μ = μ̃ + S Θᵀ (Θ S Θᵀ + diag(λ/C²))⁻¹ (z - c - Θ μ̃ - ẽ)``, where Θ holds the T tasks'
    weights on the missing columns and c the rest of f.  ``S Θᵀ`` costs O(L d) per task
    through S's low-rank form; each row then solves one T × T system.

    Parameters
    ----------
    Phi1 : ndarray (N, p + 1)
        Current features with the bias column (the missing entries are overwritten).
    W : ndarray (T, p + 1)
        Weights and bias of every task.
    """
    out = []
    for blk in blocks:
        rows, cols = blk.rows, blk.columns
        Theta = W[:, cols]                                       # (T, d)
        G = blk.cov_times(Theta.T)                               # S Θᵀ, (d, T)
        H = Theta @ G                                            # (T, T)
        rest = Phi1[rows] @ W.T - Phi1[np.ix_(rows, cols)] @ Theta.T
        noise = lam[rows] / C**2                                 # (n_k, T)
        z = targets[rows] * (1.0 + lam[rows] / C)
        prior = blk.sample(rng)
        resid = (z - rest - prior @ Theta.T
                 - np.sqrt(noise) * rng.standard_normal(noise.shape))
        system = H[None, :, :] + noise[:, :, None] * np.eye(H.shape[0])[None]
        weights = np.linalg.solve(system, resid[:, :, None])[:, :, 0]
        out.append(prior + weights @ G.T)
    return out


class HingeGibbs(GibbsBlockStep):
    """One sweep of the augmented Gibbs sampler: λ | f, (θ, b) | λ per task, missing blocks.

    λ is drawn from its exact conditional at the start of each sweep and discarded at the
    end (it is not a model variable), so the step leaves the collapsed posterior invariant.
    """

    stats_dtypes_shapes = {"mean_lambda": (float, [])}
    spec: HingeGibbsSpec

    def step(self, point):
        s, rng = self.spec, self.rng
        Phi1, raw = s.design(point)
        W = (np.column_stack([point["beta"], point["bias"]]) if s.has_bias
             else np.asarray(point["beta"]))
        F = Phi1 @ W.T
        lam = np.empty_like(F)
        W_new = np.empty_like(W)
        for t in range(W.shape[0]):
            y = s.targets[:, t]
            lam[:, t] = sample_lambda(s.C * (1.0 - y * F[:, t]), rng)
            mean, chol = beta_conditional(Phi1, y, lam[:, t], s.C, s.prior_precision)
            W_new[t] = draw_gaussian_from_precision(mean, chol, rng)
        new = dict(point)
        if s.has_bias:
            new["beta"], new["bias"] = W_new[:, :-1], W_new[:, -1]
        else:
            new["beta"] = W_new
        if s.missing:  # the blocks are similarities: weights of the similarities, f = raw W'ᵀ
            W_raw = W_new if s.to_features is None else s.mapped(W_new)
            blocks = draw_missing_blocks(s.missing, raw, W_raw, s.targets, lam, s.C, rng)
            for k, value in enumerate(blocks):
                new[f"mu_missing_{k}"] = value
        return new, [{"mean_lambda": float(lam.mean())}]


def run_hinge_gibbs(built: BuiltModel, *, draws: int, tune: int, chains: int,
                    cores: int | None, random_seed: int | None, trace_vars: Sequence[str],
                    progressbar: bool = False) -> az.InferenceData:
    """Sample a built hinge graph (flat bias) with :class:`HingeGibbs` inside ``pm.sample``.

    Every chain starts from its own dispersed point (θ from its prior, missing blocks from
    theirs) drawn with a seed derived from ``random_seed``; the same seed gives the same
    draws.
    """
    spec = HingeGibbsSpec.from_built(built)
    model = built.model
    seeds, sample_seed = chain_seeds(random_seed, chains)
    initvals = []
    for seq in seeds:
        rng = np.random.default_rng(seq)
        start = built.initial_values(rng)
        start["beta"] = rng.standard_normal(start["beta"].shape)
        initvals.append(start)
    step = HingeGibbs(list(model.value_vars), spec, model=model)
    # one BLAS thread: a (450 × 122) precision update took 4.8 ms with OpenBLAS's default
    # threads on 2 cores and 1.1 ms with one; sample_pymc: per-chain streams, so
    # bayesmv.distributed can run chains one by one
    with numpy_steps():
        return sample_pymc(model, step=[step], draws=draws, tune=tune, chains=chains,
                           cores=cores, initvals=initvals,
                           sample_seed=sample_seed,
                           var_names=list(trace_vars), progressbar=progressbar,
                           compute_convergence_checks=False, return_inferencedata=True)
