"""Simulation-based calibration (Talts et al. 2018) of M3LAK's hybrid sampler and MVL-SVM's
augmented Gibbs sampler.

For each replication the parameters θ̃ are drawn from the model, data from θ̃, and the
sampler is run on those data; the rank of each test quantity g(θ̃) among L thinned posterior
draws g(θ_1..L) is uniform on {0, …, L} for every g exactly when the sampler draws from the
posterior of the model the data were simulated from.  The ranks are pooled over replications
and tested for uniformity (chi-square on binned ranks; Kolmogorov–Smirnov on randomised
ranks ``(rank + U)/(L + 1)``, which are exactly U(0, 1) under the null).  Autocorrelated
draws would bend the histograms into a ∪ even for a correct sampler, so each chain is thinned
to roughly independent draws: the thinning is fixed per sampler from the ESS per sweep of
pilot chains, and the reports' ESS/L column (bulk ESS of the L kept draws over L) checks it.

The simulators below are written from the models' definitions and share no code with the
package: only the samplers (and the model graphs they are built from) come from bayesmv.

The hinge pseudo-likelihood ``ℓ(y | f) = exp(-2C·max(0, 1 - y f))`` is not a distribution of
y.  The posterior the samplers target, ``p(θ) Π_n ℓ(y_n | f_n)``, is exactly the posterior of
the proper joint model

    θ ~ p(θ) Π_n Z(f_n) / E_p[Π_n Z(f_n)],    y_n | θ ~ ℓ(y_n | f_n) / Z(f_n),

with ``Z(f) = ℓ(+1 | f) + ℓ(-1 | f) ≤ 1 + exp(-4C)``.  The simulators draw the tilted prior
exactly by rejection from the prior (accept with probability ``Π_n Z(f_n) / (1 + e^{-4C})^N``)
and then the labels from the normalised pseudo-likelihood.

M3LAK (the default DP-mixture spectral density, v learned, the default C = 1): every
variable the hybrid sampler updates is drawn from its prior — H, W_v, V_v, τ_v, the ARD
precisions r, the DP sticks, component means and variances, Ω, v and β — and the views from
``x_v = W_v h + V_v u_v + ε_v``.  Only hyper-parameters are fixed, at proper, moderate values
(the package's defaults for a_τ, b_τ, a_r, b_r are nearly improper: prior draws would give
data no sampler run of this length could be compared with; a bandwidth of 2 makes f vary
across points).  The test quantities are
invariant under the model's exact symmetries (signed permutations of the latent columns,
relabelling of the DP components), which no block of the sampler crosses and which the
posterior of any one of them therefore need not explore.

MVL-SVM: the landmark features are fixed covariates (views drawn independently of θ).  The
estimator's bias has a flat (improper) prior, which SBC cannot simulate from; here it has a
N(0, 1/v_b) prior, set through the same per-coefficient prior-precision vector that holds the
flat bias's 0 (the same code path).

    python benchmarks/sbc.py                 # full run, writes benchmarks/results/sbc.txt
    python benchmarks/sbc.py --quick         # a smoke run (fewer replications)
    python benchmarks/sbc.py --model mvlsvm  # one sampler only
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import arviz as az
import numpy as np
from scipy import stats
from threadpoolctl import threadpool_limits

from bayesmv import M3LAK, MVLSVM
from bayesmv.components.features import fourier_features
from bayesmv.components.landmarks import LandmarkFeatures
from bayesmv.data import MultiViewData
from bayesmv.inference.sample import hybrid_steps
from bayesmv.inference.spec import HybridSpec
from bayesmv.inference.svm import HingeGibbs, HingeGibbsSpec

RESULTS = Path(__file__).resolve().parent / "results" / "sbc.txt"
#: the package files (under bayesmv/) that define the two sampled models and their samplers
SAMPLER_SOURCES = tuple(f"inference/{f}.py" for f in ("gibbs", "hmc", "group_moves", "interweave",
                                                       "sample", "spec", "svm")) + tuple(
    f"components/{f}.py" for f in ("latent", "features", "combine", "likelihoods", "landmarks"))


# ------------------------------------------------------------------------- shared helpers
def hinge_log_lik(f: np.ndarray, y: np.ndarray, two_c: float) -> np.ndarray:
    """``log ℓ(y | f) = -two_c·max(0, 1 - y f)`` (``two_c`` is 2C in the package's form)."""
    return -two_c * np.maximum(0.0, 1.0 - y * f)


def log_normaliser(f: np.ndarray, two_c: float) -> np.ndarray:
    """``log Z(f) = log(ℓ(+1 | f) + ℓ(-1 | f))``."""
    return np.logaddexp(hinge_log_lik(f, 1.0, two_c), hinge_log_lik(f, -1.0, two_c))


def tilt_log_accept(f: np.ndarray, two_c: float) -> float:
    """log acceptance probability of a prior draw in the rejection sampler of the tilted prior.

    ``Z`` peaks at |f| = 1 with ``1 + exp(-2·two_c)`` (it is ``2e^{-two_c} cosh(two_c·f)``
    inside the margin and ``1 + e^{-two_c(1 + |f|)}`` outside).
    """
    z_max = np.log1p(np.exp(-2.0 * two_c))
    return float(np.sum(log_normaliser(f, two_c)) - f.size * z_max)


def draw_labels(f: np.ndarray, two_c: float, rng: np.random.Generator) -> np.ndarray:
    """y ~ ℓ(y | f) / Z(f), as ±1."""
    p_pos = np.exp(hinge_log_lik(f, 1.0, two_c) - log_normaliser(f, two_c))
    return np.where(rng.uniform(size=f.shape) < p_pos, 1.0, -1.0)


def draw_tilted(prior: Callable[[np.random.Generator], dict],
                decision: Callable[[dict], np.ndarray], two_c: float,
                rng: np.random.Generator, max_tries: int = 100_000) -> tuple[dict, int]:
    """A draw of θ from ``p(θ) Π_n Z(f_n(θ))`` by rejection; also the number of prior draws."""
    for tries in range(1, max_tries + 1):
        theta = prior(rng)
        if np.log(rng.uniform()) < tilt_log_accept(decision(theta), two_c):
            return theta, tries
    raise RuntimeError(f"no tilted-prior draw accepted in {max_tries} tries")


# ---------------------------------------------------------------------------------- M3LAK
@dataclass(frozen=True)
class M3LAKProblem:
    """A tiny M3LAK: its sizes and the (fixed) hyper-parameters of every prior."""

    n_samples: int = 12
    view_dims: tuple[int, ...] = (4, 3)
    latent_dim: int = 2
    view_latent_dim: int = 1
    n_frequencies: int = 10
    n_components: int = 3
    C: float = 1.0
    concentration: float = 1.0
    bandwidth: float = 2.0
    a_r: float = 4.0
    b_r: float = 4.0
    a_tau: float = 4.0
    b_tau: float = 2.0
    view_loading_precision: float = 4.0
    v_prior: tuple[float, float] = (4.0, 4.0)
    # the DP base measure's constants are not estimator parameters: the spectral
    # component's defaults (DPMixtureSpectral's kappa0 and a0)
    kappa0: float = 100.0
    a0: float = 3.0

    def estimator(self) -> M3LAK:
        return M3LAK(latent_dim=self.latent_dim, n_frequencies=self.n_frequencies, C=self.C,
                     view_latent_dim=self.view_latent_dim, n_components=self.n_components,
                     concentration=self.concentration, bandwidth=self.bandwidth, a_r=self.a_r,
                     b_r=self.b_r, a_tau=self.a_tau, b_tau=self.b_tau,
                     view_loading_precision=self.view_loading_precision,
                     precision_prior=self.v_prior,
                     spectral="dp_mixture")

    def probe(self) -> tuple[np.ndarray, ...]:
        """A fixed held-out point x* (one row per view), independent of every draw."""
        return tuple(np.linspace(-1.0, 1.0, D)[None, :] for D in self.view_dims)


def m3lak_prior(p: M3LAKProblem, rng: np.random.Generator) -> dict:
    """Every parameter the hybrid sampler updates, from its prior (natural space)."""
    m, M, K = p.latent_dim, p.n_frequencies, p.n_components
    a_v, b_v = p.v_prior
    v = rng.gamma(a_v, 1.0 / b_v)
    sticks = rng.beta(1.0, p.concentration, size=K - 1)
    weights = np.append(sticks, 1.0) * np.concatenate([[1.0], np.cumprod(1.0 - sticks)])
    # E[σ²] = b0 / (a0 - 1) = bandwidth² / m
    b0 = (p.a0 - 1.0) * p.bandwidth**2 / m
    sigma2 = 1.0 / rng.gamma(p.a0, 1.0 / b0, size=(K, m))
    mu = rng.normal(0.0, np.sqrt(sigma2 / p.kappa0))
    z = rng.choice(K, size=M, p=weights)
    theta = {
        "v": v, "beta": rng.normal(0.0, 1.0 / np.sqrt(v), size=(1, 2 * M + 1)),
        "dp_weights": weights, "dp_sigma2": sigma2, "dp_mu": mu,
        "Omega": mu[z] + np.sqrt(sigma2[z]) * rng.standard_normal((M, m)),
        "H": rng.standard_normal((p.n_samples, m)),
        "tau": rng.gamma(p.a_tau, 1.0 / p.b_tau, size=len(p.view_dims)),
        "r": rng.gamma(p.a_r, 1.0 / p.b_r, size=(len(p.view_dims), m)),
    }
    for v_, D in enumerate(p.view_dims):
        theta[f"W_{v_}"] = rng.standard_normal((D, m)) / np.sqrt(theta["r"][v_])
        theta[f"V_{v_}"] = (rng.standard_normal((D, p.view_latent_dim))
                            / np.sqrt(p.view_loading_precision))
    return theta


def m3lak_decision(theta: dict, H: np.ndarray | None = None) -> np.ndarray:
    """f = βᵀ φ̃(h) at the rows of H (the training latents by default)."""
    H = theta["H"] if H is None else H
    return fourier_features(H, theta["Omega"]) @ theta["beta"][0]


def simulate_m3lak(p: M3LAKProblem, rng: np.random.Generator
                   ) -> tuple[dict, tuple[np.ndarray, ...], np.ndarray, int]:
    """θ̃ from the tilted prior, then views and labels: ``(θ̃, views, y, prior draws used)``."""
    theta, tries = draw_tilted(lambda g: m3lak_prior(p, g), m3lak_decision, 2.0 * p.C, rng)
    N, K = p.n_samples, p.view_latent_dim
    views = []
    for v, D in enumerate(p.view_dims):
        U = rng.standard_normal((N, K))
        noise = rng.standard_normal((N, D)) / np.sqrt(theta["tau"][v])
        views.append(theta["H"] @ theta[f"W_{v}"].T + U @ theta[f"V_{v}"].T + noise)
    y = draw_labels(m3lak_decision(theta), 2.0 * p.C, rng)
    return theta, tuple(views), y, tries


def _view_covariance(theta: dict, v: int) -> np.ndarray:
    """Ψ_v = V_v V_vᵀ + τ_v⁻¹ I: the view's noise covariance with u_v integrated out."""
    V = theta[f"V_{v}"]
    return V @ V.T + np.eye(V.shape[0]) / theta["tau"][v]


def m3lak_quantities(theta: dict, views: tuple[np.ndarray, ...], y: np.ndarray,
                     probe: tuple[np.ndarray, ...], C: float) -> dict[str, float]:
    """Test quantities, each invariant under the model's exact symmetries.

    ``f*`` is the decision value at the held-out probe x* with its latent integrated out,
    ``E[f(h*) | x*, θ]``: h* | x*, θ is N(μ, P⁻¹) with ``P = I + Σ_v W_vᵀ Ψ_v⁻¹ W_v``, and
    ``E cos(ωᵀh*) = cos(ωᵀμ) exp(-ωᵀP⁻¹ω / 2)`` (likewise for sin).
    """
    m = theta["H"].shape[1]
    precision, linear, loglik_views = np.eye(m), np.zeros(m), 0.0
    for v, X in enumerate(views):
        W, Psi = theta[f"W_{v}"], _view_covariance(theta, v)
        Psi_inv_W = np.linalg.solve(Psi, W)
        precision += W.T @ Psi_inv_W
        linear += probe[v][0] @ Psi_inv_W
        loglik_views += float(np.sum(stats.multivariate_normal(cov=Psi).logpdf(
            X - theta["H"] @ W.T)))
    cov = np.linalg.inv(precision)
    mean = cov @ linear
    Omega, beta = theta["Omega"], theta["beta"][0]
    M = Omega.shape[0]
    damp = np.exp(-0.5 * np.einsum("jd,de,je->j", Omega, cov, Omega))
    phase = Omega @ mean
    f_probe = (beta[:M] @ (damp * np.cos(phase)) + beta[M:2 * M] @ (damp * np.sin(phase))
               ) / np.sqrt(M) + beta[2 * M]
    f = m3lak_decision(theta)
    w, mu, s2 = theta["dp_weights"][:, None], theta["dp_mu"], theta["dp_sigma2"]
    spectral_var = np.sum(w * (s2 + mu**2), axis=0) - np.sum(w * mu, axis=0) ** 2
    return {
        "f[0]": float(f[0]),
        "f*(x*)": float(f_probe),
        "log tau_0": float(np.log(theta["tau"][0])),
        "log tau_1": float(np.log(theta["tau"][1])),
        "log v": float(np.log(theta["v"])),
        "sum log r": float(np.sum(np.log(theta["r"]))),
        "log ||Omega||": float(np.log(np.linalg.norm(Omega))),
        "log spectral var": float(np.log(np.sum(spectral_var))),
        "log-lik": float(np.sum(hinge_log_lik(f, y, 2.0 * C))) + loglik_views,
    }


def sample_m3lak(p: M3LAKProblem, views: tuple[np.ndarray, ...], y: np.ndarray, *,
                 tune: int, draws: int, thin: int, rng: np.random.Generator) -> list[dict]:
    """Run the estimator's hybrid sampler (its graph, steps and start) on (views, y) and
    keep every ``thin``-th of ``draws × thin`` sweeps after ``tune`` tuning sweeps.

    The step methods are the ones ``M3LAK.fit`` hands to ``pm.sample``, driven here in
    the same order with the same tuning schedule; calling them directly saves pm.sample's
    per-run set-up, which would cost more than the whole chain on a problem this small.
    The views are not standardised (``fit`` would rescale them: a change of the data, not
    of the model).
    """
    data = MultiViewData(views, np.ones((p.n_samples, len(views)), dtype=bool),
                         tuple(f"view{v}" for v in range(len(views))))
    built = p.estimator().make_builder().build(data, y[:, None])
    spec = HybridSpec.from_built(built)
    if (spec.spectral.kappa0, spec.spectral.a0) != (p.kappa0, p.a0):
        raise ValueError("the simulator's DP base measure differs from the sampled model's")
    steps = hybrid_steps(built, tune=tune)
    for step, child in zip(steps, rng.spawn(len(steps)), strict=True):
        step.set_rng(child)
    point = built.initial_values(rng)
    out = []
    for i in range(tune + draws * thin):
        if i == tune:
            for step in steps:
                step.stop_tuning()
        for step in steps:
            point, _ = step.step(point)
        if i >= tune and (i - tune + 1) % thin == 0:
            out.append(spec.natural(point))
    return out


# -------------------------------------------------------------------------------- MVL-SVM
@dataclass(frozen=True)
class MVLSVMProblem:
    """A tiny MVL-SVM: two views, L landmarks, the paper's cost C (hinge scale C/N)."""

    n_samples: int = 20
    view_dims: tuple[int, ...] = (3, 2)
    n_landmarks: int = 4
    C: float = 20.0
    bias_precision: float = 1.0

    @property
    def hinge_scale(self) -> float:
        """``C/N``: the pseudo-likelihood is ``exp(-(C/N)·max(0, 1 - y f))``."""
        return self.C / self.n_samples

    def probe(self) -> tuple[np.ndarray, ...]:
        return tuple(np.linspace(-1.0, 1.0, D)[None, :] for D in self.view_dims)


def svm_features(p: MVLSVMProblem, rng: np.random.Generator
                 ) -> tuple[MultiViewData, LandmarkFeatures]:
    """Views drawn independently of θ (covariates) and the landmark map fitted on them."""
    views = tuple(rng.standard_normal((p.n_samples, D)) for D in p.view_dims)
    data = MultiViewData(views, np.ones((p.n_samples, len(views)), dtype=bool),
                         tuple(f"view{v}" for v in range(len(views))))
    fmap = LandmarkFeatures(p.n_landmarks, impute=None, random_seed=rng).fit_state(data)
    return data, fmap


def simulate_mvlsvm(p: MVLSVMProblem, Phi: np.ndarray, rng: np.random.Generator
                    ) -> tuple[dict, np.ndarray, int]:
    """θ ~ N(0, I), b ~ N(0, 1/v_b), tilted by Π Z(f_n); then the labels."""
    def prior(g: np.random.Generator) -> dict:
        return {"theta": g.standard_normal(Phi.shape[1]),
                "bias": g.normal(0.0, 1.0 / np.sqrt(p.bias_precision))}

    def decision(t: dict) -> np.ndarray:
        return Phi @ t["theta"] + t["bias"]

    theta, tries = draw_tilted(prior, decision, p.hinge_scale, rng)
    return theta, draw_labels(decision(theta), p.hinge_scale, rng), tries


def mvlsvm_quantities(theta: dict, Phi: np.ndarray, phi_probe: np.ndarray, y: np.ndarray,
                      hinge_scale: float) -> dict[str, float]:
    f = Phi @ theta["theta"] + theta["bias"]
    return {
        "theta[0]": float(theta["theta"][0]),
        "bias": float(theta["bias"]),
        "f[0]": float(f[0]),
        "f*(x*)": float(phi_probe @ theta["theta"] + theta["bias"]),
        "||theta||^2": float(np.sum(theta["theta"] ** 2)),
        "log-lik": float(np.sum(hinge_log_lik(f, y, hinge_scale))),
    }


def sample_mvlsvm(p: MVLSVMProblem, data: MultiViewData, fmap: LandmarkFeatures,
                  y: np.ndarray, *, tune: int, draws: int, thin: int,
                  rng: np.random.Generator) -> list[dict]:
    """Run MVL-SVM's :class:`HingeGibbs` on its own graph, the bias given a proper prior, and
    keep every ``thin``-th of ``draws × thin`` sweeps after ``tune`` sweeps.

    The spec comes from the estimator's graph (features, targets and the hinge constant
    C/(2N)); only the bias's prior precision changes from 0 (flat) to ``bias_precision``.
    """
    est = MVLSVM(n_landmarks=p.n_landmarks, C=p.C, impute=None, inference="gibbs")
    built = est.make_builder(p.n_samples, fmap).build(data, y[:, None])
    spec = HingeGibbsSpec.from_built(built)
    precision = spec.prior_precision.copy()
    precision[-1] = p.bias_precision
    spec = replace(spec, prior_precision=precision)
    step = HingeGibbs(list(built.model.value_vars), spec, model=built.model, rng=rng)
    # the estimator's start: θ from its prior, b = 0
    point = {"beta": rng.standard_normal((1, spec.features.shape[1])), "bias": np.zeros(1)}
    out = []
    for i in range(tune + draws * thin):
        point, _ = step.step(point)
        if i >= tune and (i - tune + 1) % thin == 0:
            out.append({"theta": point["beta"][0].copy(), "bias": float(point["bias"][0])})
    return out


# ------------------------------------------------------------------------------ SBC core
@dataclass(frozen=True)
class SBCSettings:
    """Replications, ranks per replication (L draws kept), thinning and tuning sweeps."""

    n_reps: int
    n_ranks: int
    thin: int
    tune: int
    seed: int = 0

    def describe(self) -> str:
        return (f"{self.n_reps} replications, L = {self.n_ranks} draws kept per chain (1 in "
                f"{self.thin} sweeps after {self.tune} tuning sweeps), seed {self.seed}")


@dataclass
class SBCResult:
    """Ranks (replications × quantities) and per-replication chain diagnostics."""

    names: list[str]
    ranks: np.ndarray
    settings: SBCSettings
    ess_per_kept_draw: np.ndarray      # bulk ESS of the L kept draws / L
    prior_draws_per_accept: np.ndarray
    seconds: float

    def pvalues(self, n_bins: int = 10) -> dict[str, tuple[float, float]]:
        """Per quantity: (chi-square p on ``n_bins`` rank bins, KS p on randomised ranks).

        The bins split the L + 1 possible ranks as evenly as possible and the expected
        counts follow the bins' widths.  The KS test sees ``(rank + U) / (L + 1)`` with one
        uniform U per rank (a fixed stream), which is exactly U(0, 1) under the null.
        """
        n_values = self.settings.n_ranks + 1
        edges = np.linspace(0, n_values, n_bins + 1).round()
        jitter = np.random.default_rng(self.settings.seed).uniform(size=self.ranks.shape)
        out = {}
        for j, name in enumerate(self.names):
            r = self.ranks[:, j]
            counts = np.histogram(r, bins=edges)[0]
            chi2 = stats.chisquare(counts, len(r) * np.diff(edges) / n_values).pvalue
            ks = stats.kstest((r + jitter[:, j]) / n_values, "uniform").pvalue
            out[name] = (float(chi2), float(ks))
        return out

    def min_pvalue(self, n_bins: int = 10) -> float:
        return min(p for pair in self.pvalues(n_bins).values() for p in pair)

    def n_tests(self) -> int:
        """Two tests (chi-square, KS) per quantity."""
        return 2 * len(self.names)

    def bonferroni_pvalue(self, n_bins: int = 10) -> float:
        """The smallest p-value times the number of tests, capped at 1: the family-wise
        p-value of the whole check."""
        return min(1.0, self.min_pvalue(n_bins) * self.n_tests())


def rank_with_ties(truth: float, draws: np.ndarray, rng: np.random.Generator) -> int:
    """Number of draws below the truth, ties split uniformly at random.

    Quantities with an atom tie: the hinge log-likelihood is exactly 0 whenever every point
    clears the margin.  Counting only strict inequalities would then push ranks down;
    breaking ties at random keeps the rank exactly uniform under the null.
    """
    below = int(np.sum(draws < truth))
    return below + int(rng.integers(0, int(np.sum(draws == truth)) + 1))


Replicate = Callable[[SBCSettings, np.random.Generator], tuple[dict, list[dict], int]]


def run_sbc(replicate: Replicate, settings: SBCSettings) -> SBCResult:
    """Ranks of each replication's true quantities among its L kept posterior draws.

    ``replicate(settings, rng)`` simulates one data set, samples it and returns the true
    quantities, those of the L kept draws and the number of prior draws the tilt used.
    """
    start = time.perf_counter()
    tie_rng = np.random.default_rng([settings.seed, 1])
    ranks, ess_ratio, tries = [], [], []
    names: list[str] = []
    for child in np.random.SeedSequence(settings.seed).spawn(settings.n_reps):
        # the blocks are tiny: BLAS threads only add overhead, and the budget is one core
        with threadpool_limits(limits=1):
            truth, kept, n_tries = replicate(settings, np.random.default_rng(child))
        names = list(truth)
        values = np.array([[q[name] for name in names] for q in kept])
        ranks.append([rank_with_ties(truth[name], values[:, j], tie_rng)
                      for j, name in enumerate(names)])
        ess_ratio.append([float(az.ess(values[None, :, j], method="bulk")) / len(kept)
                          for j in range(len(names))])
        tries.append(n_tries)
    return SBCResult(names, np.array(ranks), settings, np.array(ess_ratio), np.array(tries),
                     time.perf_counter() - start)


def m3lak_replicate(p: M3LAKProblem) -> Replicate:
    probe = p.probe()

    def replicate(s: SBCSettings, rng: np.random.Generator):
        sim_rng, chain_rng = rng.spawn(2)
        theta, views, y, tries = simulate_m3lak(p, sim_rng)
        kept = sample_m3lak(p, views, y, tune=s.tune, draws=s.n_ranks, thin=s.thin,
                            rng=chain_rng)
        return (m3lak_quantities(theta, views, y, probe, p.C),
                [m3lak_quantities(t, views, y, probe, p.C) for t in kept], tries)

    return replicate


def mvlsvm_replicate(p: MVLSVMProblem) -> Replicate:
    probe = MultiViewData(p.probe(), np.ones((1, len(p.view_dims)), dtype=bool),
                          tuple(f"view{v}" for v in range(len(p.view_dims))))

    def replicate(s: SBCSettings, rng: np.random.Generator):
        feat_rng, sim_rng, chain_rng = rng.spawn(3)
        data, fmap = svm_features(p, feat_rng)
        Phi, phi_probe = fmap.transform(data), fmap.transform(probe)[0]
        theta, y, tries = simulate_mvlsvm(p, Phi, sim_rng)
        kept = sample_mvlsvm(p, data, fmap, y, tune=s.tune, draws=s.n_ranks, thin=s.thin,
                             rng=chain_rng)
        return (mvlsvm_quantities(theta, Phi, phi_probe, y, p.hinge_scale),
                [mvlsvm_quantities(t, Phi, phi_probe, y, p.hinge_scale) for t in kept], tries)

    return replicate


# ---------------------------------------------------------------------------- reporting
def report(title: str, res: SBCResult, n_bins: int = 10) -> str:
    pv = res.pvalues(n_bins)
    n = res.ranks.shape[0]
    lines = [title,
             f"  {res.settings.describe()}; {res.seconds:.0f} s",
             f"  prior draws per tilted-prior draw: median "
             f"{np.median(res.prior_draws_per_accept):.0f}, max "
             f"{res.prior_draws_per_accept.max()}",
             f"  {'quantity':<18} {'chi2 p':>7} {'KS p':>7} {'ESS/L':>6}   rank histogram "
             f"({n_bins} bins, {n / n_bins:.0f} expected in each)"]
    edges = np.linspace(0, res.settings.n_ranks + 1, n_bins + 1).round()
    for j, name in enumerate(res.names):
        counts = np.histogram(res.ranks[:, j], bins=edges)[0]
        chi2, ks = pv[name]
        lines.append(f"  {name:<18} {chi2:7.3f} {ks:7.3f} "
                     f"{np.nanmedian(res.ess_per_kept_draw[:, j]):6.2f}   "
                     + " ".join(f"{c:3d}" for c in counts))
    lines.append(f"  smallest p {res.min_pvalue(n_bins):.3f} of {res.n_tests()} (Bonferroni "
                 f"{res.bonferroni_pvalue(n_bins):.3f})")
    return "\n".join(lines)


M3LAK_SETTINGS = {"full": SBCSettings(n_reps=200, n_ranks=99, thin=8, tune=100),
                  "quick": SBCSettings(n_reps=50, n_ranks=19, thin=10, tune=60)}
#: C/N = 1 mixes fast; at C/N = 3 the augmentation pins f more tightly (ESS per sweep of the
#: decision values about 0.05), so its chains are thinned more
MVLSVM_CASES = {
    "C/N = 1": (MVLSVMProblem(C=20.0), {"full": SBCSettings(400, 99, 3, 100),
                                        "quick": SBCSettings(100, 19, 3, 50)}),
    "C/N = 3": (MVLSVMProblem(C=60.0), {"full": SBCSettings(200, 99, 20, 200),
                                        "quick": SBCSettings(50, 19, 30, 100)}),
}


def sampler_fingerprint() -> str:
    """Short hash of the models' and samplers' source files, naming the version of the code a
    result belongs to."""
    import bayesmv

    digest = hashlib.sha256()
    for name in SAMPLER_SOURCES:
        digest.update((Path(bayesmv.__file__).parent / name).read_bytes())
    return f"sha256:{digest.hexdigest()[:12]} of bayesmv/{{{', '.join(SAMPLER_SOURCES)}}}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer replications and ranks")
    parser.add_argument("--model", choices=("m3lak", "mvlsvm", "both"), default="both")
    parser.add_argument("--no-write", action="store_true", help="do not write the results file")
    args = parser.parse_args(argv)
    command = "python benchmarks/sbc.py " + " ".join(sys.argv[1:] if argv is None else argv)
    size = "quick" if args.quick else "full"
    # read before sampling: the modules in use are the ones imported at start-up
    fingerprint = sampler_fingerprint()
    started, cpu_started = time.perf_counter(), time.process_time()
    blocks = []
    if args.model in ("m3lak", "both"):
        m3 = M3LAKProblem()
        res = run_sbc(m3lak_replicate(m3), M3LAK_SETTINGS[size])
        blocks.append(report(
            f"M3LAK hybrid sampler (DP-mixture spectral density, v learned): N = "
            f"{m3.n_samples}, views {m3.view_dims}, m = {m3.latent_dim}, K = "
            f"{m3.view_latent_dim}, M = {m3.n_frequencies}, DP truncation {m3.n_components} "
            f"(concentration {m3.concentration}, bandwidth {m3.bandwidth}), C = {m3.C}, "
            f"v ~ Gamma{m3.v_prior}, tau ~ Gamma({m3.a_tau}, {m3.b_tau}), "
            f"r ~ Gamma({m3.a_r}, {m3.b_r}), "
            f"view_loading_precision = {m3.view_loading_precision}", res))
        print(blocks[-1], "\n", flush=True)
    if args.model in ("mvlsvm", "both"):
        for label, (svm, settings) in MVLSVM_CASES.items():
            res = run_sbc(mvlsvm_replicate(svm), settings[size])
            blocks.append(report(
                f"MVL-SVM augmented Gibbs, {label}: N = {svm.n_samples}, views "
                f"{svm.view_dims}, {svm.n_landmarks} landmarks "
                f"({svm.n_landmarks * len(svm.view_dims)} features), C = {svm.C}, "
                f"bias ~ N(0, {1 / svm.bias_precision:g})", res))
            print(blocks[-1], "\n", flush=True)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    header = (f"# OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')} "
              f"{command.strip()}\n# {wall:.0f} s wall, {cpu:.0f} s CPU, one process (BLAS "
              f"limited to one thread); sources {fingerprint}\n"
              "# p-values: chi-square on 10 rank bins, KS on "
              "randomised ranks; ESS/L: median over replications of the kept draws' bulk "
              "ESS / L")
    print(header)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(header + "\n\n" + "\n\n".join(blocks) + "\n")


if __name__ == "__main__":
    main()
