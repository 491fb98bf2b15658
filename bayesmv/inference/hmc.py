"""Gradient-based blocks of the hybrid sampler: batched per-sample HMC for H, HMC for Ω.

H moves on its conditional with λ and U integrated out, whose only non-Gaussian factor is the
hinge pseudo-likelihood (its gradient is bounded, so trajectories stay stable); Ω moves with β
integrated out given λ.

* ``H``: the rows h_n are conditionally independent given the global parameters.  Each row's
  LVM factor is Gaussian, N(μ_n, P_n⁻¹), so the step works in whitened coordinates
  ``h_n = μ_n + L_n^{-T} ξ_n`` where that factor is N(0, I) and only the hinge perturbs it.
  All rows move together (one matrix product per leapfrog step) and each row is accepted or
  rejected on its own (a product of independent HMC kernels).
* ``Ω``: one HMC move given the hinge's augmentation λ with β integrated out (a partially
  collapsed Gibbs step that then redraws β), preconditioned by the spectral prior's scale.

Step sizes adapt during tuning by dual averaging (Hoffman & Gelman 2014) and are frozen after.
"""

from __future__ import annotations

import math

import numpy as np

from bayesmv.components.features import fourier_features_of_phases
from bayesmv.components.latent import latent_gaussian
from bayesmv.components.likelihoods import hinge_log_pseudolikelihood
from bayesmv.inference.gibbs import (
    GibbsBlockStep,
    TuningAverageLambda,
    collapsed_frequency_prior,
    collapsed_log_marginal,
    draw_assignments,
    draw_components,
    draw_gaussian_from_precision,
    sample_lambdas,
)
from bayesmv.linalg import inverse_lower, solve_lower


def fourier_pullback(cos: np.ndarray, sin: np.ndarray, G_cos: np.ndarray,
                     G_sin: np.ndarray) -> np.ndarray:
    """Gradient w.r.t. ``S = H Ωᵀ`` of a function of ``φ̃ = [cos S, sin S, √M]/√M`` whose
    gradient w.r.t. the cosine and sine columns of φ̃ is ``G_cos`` and ``G_sin``."""
    return (G_sin * cos - G_cos * sin) / math.sqrt(cos.shape[1])


def hinge_terms(S: np.ndarray, beta: np.ndarray, Y: np.ndarray, C: float,
                dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise hinge log-pseudo-likelihood and its gradient w.r.t. ``S = H Ωᵀ``.

    Returns ``(logl, dS)`` with ``logl[n] = -2C Σ_t max(0, 1 - y_nt f_nt)``.  With
    ``dtype=np.float32`` the trigonometry runs ~9× faster at ~1e-7 relative error: the HMC
    blocks use that for the leapfrog forces only (any deterministic force field gives a
    volume-preserving, reversible map) and accept or reject on float64 energies, so the
    chain's target is exact.
    """
    S = S.astype(dtype, copy=False)
    return hinge_terms_of_phases(np.cos(S), np.sin(S), beta, Y, C)


def hinge_terms_of_phases(cos: np.ndarray, sin: np.ndarray, beta: np.ndarray, Y: np.ndarray,
                          C: float, with_beta_gradient: bool = False) -> tuple:
    """:func:`hinge_terms` from the cosines and sines of the phases, in their precision; with
    ``with_beta_gradient`` also the gradient w.r.t. β, (tasks, 2M + 1), in float64."""
    M, dtype = cos.shape[1], cos.dtype
    beta, Y = beta.astype(dtype, copy=False), Y.astype(dtype, copy=False)
    bc, bs, b0 = beta[:, :M], beta[:, M:2 * M], beta[:, 2 * M]
    scale = 1.0 / math.sqrt(M)  # a Python float keeps float32 arrays float32
    F = scale * (cos @ bc.T + sin @ bs.T) + b0
    margin = 1.0 - Y * F
    active = margin > 0
    logl = -2.0 * C * np.sum(np.where(active, margin, 0.0), axis=1)
    Gf = 2.0 * C * Y * active
    # the sum over tasks; one task (the usual case) by broadcasting, several times faster
    # than a matrix product over it and the same numbers
    over_tasks = np.multiply if Gf.shape[1] == 1 else np.matmul
    dS = fourier_pullback(cos, sin, over_tasks(Gf, bc), over_tasks(Gf, bs))
    if not with_beta_gradient:
        return logl.astype(np.float64), dS.astype(np.float64)
    d_beta = np.concatenate([scale * (Gf.T @ cos), scale * (Gf.T @ sin),
                             np.sum(Gf, axis=0)[:, None]], axis=1)
    return logl.astype(np.float64), dS.astype(np.float64), d_beta.astype(np.float64)


class DualAveraging:
    """Stan's dual-averaging step-size adaptation towards a target acceptance rate."""

    def __init__(self, initial: float, target: float = 0.8, gamma: float = 0.05,
                 t0: float = 10.0, kappa: float = 0.75) -> None:
        self.initial, self.target = initial, target
        self.gamma, self.t0, self.kappa = gamma, t0, kappa
        self.reset()

    def reset(self) -> None:
        self.mu = np.log(10.0 * self.initial)
        self.log_eps = np.log(self.initial)
        self.log_eps_bar = 0.0
        self.h_bar = 0.0
        self.t = 0

    def update(self, accept: float) -> None:
        self.t += 1
        w = 1.0 / (self.t + self.t0)
        self.h_bar = (1.0 - w) * self.h_bar + w * (self.target - accept)
        self.log_eps = self.mu - np.sqrt(self.t) / self.gamma * self.h_bar
        eta = self.t ** -self.kappa
        self.log_eps_bar = eta * self.log_eps + (1.0 - eta) * self.log_eps_bar

    def step_size(self, tuning: bool) -> float:
        return float(np.exp(self.log_eps if tuning or self.t == 0 else self.log_eps_bar))


class _HMCStep(GibbsBlockStep):
    stats_dtypes_shapes = {"step_size": (float, []), "accept": (float, []),
                           "n_steps": (int, []), "diverging": (bool, [])}
    #: an energy error beyond this many nats counts as a divergent trajectory (as in PyMC)
    max_energy_error = 1000.0

    def __init__(self, vars, spec, target_accept: float = 0.8, initial_step: float = 0.5,
                 max_steps: int = 32, model=None, rng=None, blocked=True):
        super().__init__(vars, spec, model=model, rng=rng, blocked=blocked)
        self.initial_step = initial_step
        self.adapt = DualAveraging(initial_step, target_accept)
        self.max_steps = max_steps

    def reset_tuning(self):
        super().reset_tuning()
        # a fresh adapter, not adapt.reset(): FrequencyHMC swaps in one that starts from the
        # tuned step, which would leak one chain's tuning into the next in a sequential run
        self.adapt = DualAveraging(self.initial_step, self.adapt.target)

    def _leapfrog(self, target, x0: np.ndarray, eps: float, n_steps: int):
        """Leapfrog from x0; return (x1, p0, p1, lp0, lp1) with exact (float64) lp.

        The two half kicks use the float64 gradients that come with the end points' exact
        energies; the full kicks in between use float32 forces (half the cost of the Gaussian
        algebra).  The kicks read in reverse are the same sequence, so the map is its own
        reverse under a momentum flip and preserves volume: the Metropolis test on the exact
        energies keeps the target exact.  (A float32 first kick with a float64 last one is
        reversible only to float32 rounding.)  The inner forces are computed in the target's
        ``force_dtype``.
        """
        p0 = self.rng.standard_normal(x0.shape)
        lp0, g0 = target.logp_grad(x0)
        x, mom = x0.copy(), p0 + 0.5 * eps * g0
        for i in range(n_steps):
            x += eps * mom
            if i < n_steps - 1:
                mom += eps * target.logp_grad(x, target.force_dtype)[1]
        lp1, g = target.logp_grad(x)
        mom += 0.5 * eps * g
        return x, p0, mom, lp0, lp1

    #: trajectory length in quarter periods of the unit oscillator
    quarter_periods = 1.0

    def _trajectory(self) -> tuple[float, int]:
        eps = min(self.adapt.step_size(self.tune), 2.0)
        # a quarter period of the unit oscillator decorrelates a N(0, I) factor; jitter it
        length = self.rng.uniform(0.6, 1.0) * np.pi / 2 * self.quarter_periods
        return eps, int(np.clip(np.ceil(length / eps), 1, self.max_steps))

    def _transition(self, target, x0: np.ndarray) -> tuple[np.ndarray, bool, dict]:
        """One Metropolis-corrected HMC transition from x0 (step size adapted while tuning):
        the kept point, whether the proposal was accepted, and the step's sampler stats."""
        eps, n_steps = self._trajectory()
        # a diverging trajectory may overflow (e.g. a log bandwidth's exp): its energy is then
        # not finite and the proposal is rejected as divergent, without a warning per step
        with np.errstate(over="ignore", invalid="ignore"):
            x, p0, mom, lp0, lp1 = self._leapfrog(target, x0, eps, n_steps)
            log_ratio = (lp1 - 0.5 * np.sum(mom**2)) - (lp0 - 0.5 * np.sum(p0**2))
        if not np.isfinite(log_ratio):
            log_ratio = -np.inf
        accept_prob = float(np.exp(min(log_ratio, 0.0)))
        accepted = bool(np.log(self.rng.uniform()) < log_ratio)
        if self.tune:
            self.adapt.update(accept_prob)
        return (x if accepted else x0), accepted, {
            "step_size": eps, "accept": accept_prob, "n_steps": n_steps,
            "diverging": bool(log_ratio < -self.max_energy_error)}


class WhitenedLatentTarget:
    """log p(H | globals) with U and λ integrated out, in whitened per-row coordinates ξ.

    ``h_n = μ_n + L_n^{-T} ξ_n`` where ``P_n = L_n L_nᵀ = I + Σ_{v observed} W_vᵀ Ψ_v⁻¹ W_v``;
    the Gaussian factor becomes ``-½||ξ_n||²`` and the hinge is added on top.
    """

    #: the leapfrog's inner forces: the hinge's trigonometry in float32 (see hinge_terms)
    force_dtype = np.float32

    def __init__(self, spec, nat: dict) -> None:
        self.spec, self.Omega, self.beta = spec, nat["Omega"], nat["beta"]
        # the chain's current H, at which the start of the trajectory is evaluated (its
        # whitened coordinates map back to it only up to rounding; see start_at)
        self.start, self._H = None, nat["H"]
        m = nat["H"].shape[1]
        self.mean, self.L = latent_gaussian(nat, spec.views, spec.observed_index,
                                            spec.patterns, spec.pattern_of_row)
        self.Linv = np.array([solve_lower(L, np.eye(m)) for L in self.L])
        self.rows = spec.pattern_rows

    def to_h(self, xi: np.ndarray) -> np.ndarray:
        h = np.empty_like(xi)
        for p, r in enumerate(self.rows):
            h[r] = self.mean[r] + xi[r] @ self.Linv[p]  # row form of μ + L^{-T} ξ
        return h

    def to_xi(self, h: np.ndarray) -> np.ndarray:
        xi = np.empty_like(h)
        for p, r in enumerate(self.rows):
            xi[r] = (h[r] - self.mean[r]) @ self.L[p]  # row form of Lᵀ (h - μ)
        return xi

    def start_at(self) -> np.ndarray:
        """The current H's whitened coordinates, remembered as the trajectory's start: its
        energy is evaluated at H itself, whose features the previous step computed."""
        self.start = self.to_xi(self._H)
        return self.start

    def logp_grad(self, xi: np.ndarray, dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
        """Per-row log density (up to a constant) and its gradient w.r.t. ξ."""
        if dtype == np.float64:
            h = self._H if xi is self.start else self.to_h(xi)
            logl, dS = hinge_terms_of_phases(*self.spec.phases(h, self.Omega), self.beta,
                                             self.spec.targets, self.spec.C)
        else:
            logl, dS = hinge_terms(self.to_h(xi) @ self.Omega.T, self.beta, self.spec.targets,
                                   self.spec.C, dtype)
        gh = dS @ self.Omega
        g = -xi.copy()
        for p, r in enumerate(self.rows):
            g[r] += gh[r] @ self.Linv[p].T
        return -0.5 * np.sum(xi**2, axis=1) + logl, g


class LatentHMC(_HMCStep):
    """Batched whitened HMC for the shared latents H (one accept/reject per sample)."""

    def step(self, point):
        nat = self.spec.natural(point)
        H0 = nat["H"]
        target = WhitenedLatentTarget(self.spec, nat)
        xi0 = target.start_at()
        eps, n_steps = self._trajectory()
        xi, p0, mom, lp0, lp1 = self._leapfrog(target, xi0, eps, n_steps)
        log_ratio = (lp1 - 0.5 * np.sum(mom**2, axis=1)) - (lp0 - 0.5 * np.sum(p0**2, axis=1))
        log_ratio = np.where(np.isfinite(log_ratio), log_ratio, -np.inf)
        accept_prob = np.exp(np.minimum(log_ratio, 0.0))
        take = np.log(self.rng.uniform(size=len(H0))) < log_ratio
        if self.tune:
            self.adapt.update(float(accept_prob.mean()))
        new = dict(point)
        # rejected rows keep their exact old values (no round-off through the whitening)
        new["H"] = np.where(take[:, None], target.to_h(xi), H0)
        return new, [{"step_size": eps, "accept": float(accept_prob.mean()),
                      "n_steps": n_steps,
                      "diverging": bool(np.any(log_ratio < -self.max_energy_error))}]


#: the largest augmented weight C²/λ_n for which FrequencyTarget's forces run in float32: the
#: relative error of the float32 gradient was 8e-7 at 1e2, 5e-4 at 1e6 and 0.4 at 1e9 (N = 500)
_SINGLE_FORCES_MAX_WEIGHT = 1e6


class FrequencyTarget:
    """log p(Ω | λ, H, spectral prior) with β integrated out, in prior-scaled coordinates.

    Given the hinge's augmentation λ the labels are a Gaussian regression on the features, so
    β integrates out in closed form (:func:`collapsed_log_marginal`).  Conditioning Ω on β
    instead pins the features to reproduce the current f, and Ω then moves by tiny steps.
    """

    def __init__(self, spec, nat: dict, lams: list, scale: np.ndarray | None = None,
                 prior=None) -> None:
        self.spec, self.nat, self.lams = spec, nat, lams
        # the gradient's term c - C²Φm/λ cancels two numbers of size C²/λ: once a weight C²/λ_n
        # exceeds _SINGLE_FORCES_MAX_WEIGHT, float32 forces are mostly rounding error (their
        # acceptance drops), so this trajectory's forces run in double; λ is fixed along it,
        # so the force field is still one function of position
        max_weight = max(float(np.max(spec.C**2 / lam)) for lam in lams)
        self.force_dtype = np.float32 if max_weight <= _SINGLE_FORCES_MAX_WEIGHT else np.float64
        # Ω's prior: the spectral density at the current parameters, or e.g. the DP mixture
        # with its components integrated out given the assignments (FrequencyHMC)
        self.prior = (prior if prior is not None
                      else spec.spectral.prior_logp_grad_form(nat))
        self.H = nat["H"]
        self.scale = (spec.spectral.prior_scale(nat, self.H.shape[1])[None, :]
                      if scale is None else scale)
        # the chain's current Ω, at which the start of the trajectory is evaluated (θ·scale
        # gives it back only up to rounding; see start_at)
        self.start, self._Omega = None, nat["Omega"]
        # β | λ, Ω of each float64 evaluation, by θ: the step draws β at the point it keeps
        # (the trajectory's start or end, both evaluated in float64) without refactoring
        self._conditionals: dict[bytes, list] = {}

    def start_at(self) -> np.ndarray:
        """The current Ω in the scaled coordinates, remembered as the trajectory's start: its
        energy is evaluated at Ω itself, whose features the previous step computed."""
        self.start = self._Omega / self.scale
        return self.start

    def logp_grad(self, theta: np.ndarray, dtype=np.float64) -> tuple[float, np.ndarray]:
        # float32 (leapfrog forces only) halves the cost of the Gaussian algebra; energies
        # are float64, so the chain's target stays exact (see hinge_terms)
        Omega = self._Omega if theta is self.start else theta * self.scale
        prior, gprior = self.prior(Omega)
        H = self.H.astype(dtype, copy=False)
        if dtype == np.float64:
            cos, sin = self.spec.phases(H, Omega)
        else:
            S = H @ Omega.astype(dtype).T
            cos, sin = np.cos(S), np.sin(S)
        M = cos.shape[1]
        lams = [lam.astype(dtype) for lam in self.lams]
        logm, conditionals, G = collapsed_log_marginal(
            fourier_features_of_phases(cos, sin), self.spec.targets.astype(dtype), lams,
            self.spec.C, self.nat["v"], with_gradient=True)
        if dtype == np.float64:
            self._conditionals[theta.tobytes()] = conditionals
        dS = fourier_pullback(cos, sin, G[:, :M], G[:, M:2 * M])
        return prior + logm, (gprior + (dS.T @ H).astype(np.float64)) * self.scale

    def beta_conditionals(self, theta: np.ndarray) -> list:
        """Each task's (mean, Cholesky factor of the precision) of β | λ, Ω at θ."""
        key = theta.tobytes()
        if key not in self._conditionals:
            self.logp_grad(theta)
        return self._conditionals[key]


class FrequencyHMC(_HMCStep):
    """λ | β, then HMC for the frequencies Ω given λ with β integrated out, then β | λ, Ω.

    A partially collapsed Gibbs step (van Dyk & Park 2008): λ is drawn from its exact
    conditional, Ω moves under ``p(Ω | λ, H)`` (β summed out, :class:`FrequencyTarget`) and β
    is drawn afresh from ``p(β | λ, Ω, H)``, so the block leaves the posterior invariant.
    On the digits task this raised the effective sample size of ||Ω|| from 13 to 112 in
    2000 draws, against HMC on Ω given β.

    Under the DP-mixture spectral density, ``collapse_components=True`` makes the step first
    draw the assignments z | Ω, π, μ, σ², move Ω under ``p(Ω | z, λ, H)`` with the
    components' (μ, σ²) integrated out (normal–inverse-gamma, conjugate), and then draw
    (μ, σ²) | Ω, z, so that the frequencies' scale and their components' variances move
    together.  Every draw is from an exact (marginal or) conditional of the joint, so the
    block still leaves the posterior invariant.  It is off by default: on the digits 3 vs 5
    (4 × (500 + 500), seed 0) it gave f max R-hat 1.053 and min bulk ESS 60 against 1.039
    and 150 without, and ||Ω|| mixed no better (R-hat 1.10, ESS 31): the frequencies' slow
    direction is not their coupling to the component variances.

    Until the middle of tuning the mass matrix is the spectral prior's scale; then it becomes
    the per-element posterior standard deviation of Ω estimated over the window
    [0.25, 0.6)·tune (regularised towards the prior scale as in Stan), and the step size
    re-adapts for the rest of tuning.  Everything is frozen after tuning.
    """

    # 20, not 10: with 10 the quarter-period trajectory was cut short (9.5 steps on average
    # on the digits) and Ω diffused; 20 raised the min ESS of f from 88 to 150 in 2000 draws
    def __init__(self, vars, spec, n_tune: int = 0, max_steps: int = 20,
                 collapse_components: bool = False, **kwargs):
        super().__init__(vars, spec, max_steps=max_steps, **kwargs)
        self.n_tune = n_tune
        self.collapse_components = collapse_components
        self._reset_mass()

    def _reset_mass(self):
        self.iteration = 0
        self.mass_scale = None
        self._count, self._mean, self._m2 = 0, 0.0, 0.0

    def reset_tuning(self):
        super().reset_tuning()
        self._reset_mass()

    def _adapt_mass(self, Omega: np.ndarray, prior_scale: np.ndarray) -> None:
        start, stop = int(0.25 * self.n_tune), int(0.6 * self.n_tune)
        if start <= self.iteration < stop:
            self._count += 1
            delta = Omega - self._mean
            self._mean = self._mean + delta / self._count
            self._m2 = self._m2 + delta * (Omega - self._mean)
        elif self.iteration == stop and self._count >= 10:
            n = self._count
            var = self._m2 / (n - 1)
            self.mass_scale = np.sqrt(n / (n + 5.0) * var + 5.0 / (n + 5.0) * 1e-3 * prior_scale**2)
            self.adapt = DualAveraging(self.adapt.step_size(True), self.adapt.target)
        self.iteration += 1

    def step(self, point):
        s, nat = self.spec, self.spec.natural(point)
        lams = sample_lambdas(s, s.features(nat["H"], nat["Omega"]), nat["beta"], self.rng)
        collapsed = self.collapse_components and s.is_dp
        prior = None
        if collapsed:
            sp = s.spectral
            K, m = sp.n_components, nat["Omega"].shape[1]
            z = draw_assignments(nat["Omega"], nat["dp_weights"], nat["dp_mu"],
                                 nat["dp_sigma2"], self.rng)

            def prior(Omega):
                return collapsed_frequency_prior(Omega, z, K, sp.kappa0, sp.a0, sp.b0(m))

        target = FrequencyTarget(s, nat, lams, self.mass_scale, prior)
        if self.tune:
            self._adapt_mass(nat["Omega"], target.scale)
        kept, accepted, stats = self._transition(target, target.start_at())
        new = dict(point)
        new["Omega"] = kept * target.scale if accepted else nat["Omega"]
        new["beta"] = np.array([draw_gaussian_from_precision(mean, chol, self.rng)
                                for mean, chol in target.beta_conditionals(kept)])
        if collapsed:
            mu, sigma2 = draw_components(new["Omega"], z, K, sp.kappa0, sp.a0, sp.b0(m),
                                         self.rng)
            new["dp_mu"], new["dp_sigma2_log__"] = mu, np.log(sigma2)
        return new, [stats]


class WhitenedCoefficients:
    """β's coordinates ξ whitened by the augmented precision ``A_t = L_t L_tᵀ`` of each task,
    ``β_t = L_t^{-T} ξ_t``, and its N(0, diag(v)⁻¹) prior in them.

    Once per step, so that an evaluation is a few matrix-vector products per task and no
    triangular solve: L⁻¹ and the prior's precision in ξ, ``L⁻¹ diag(v) L⁻ᵀ``.
    """

    def __init__(self, chols: list, v) -> None:
        self.chols = chols
        v = np.asarray(v, dtype=float)
        self.Linv = [inverse_lower(L) for L in chols]
        self.prior_precision = [(Li * v) @ Li.T for Li in self.Linv]

    @property
    def size(self) -> int:
        return len(self.chols) * self.chols[0].shape[0]

    def to_beta(self, xi: np.ndarray) -> np.ndarray:
        return np.array([Li.T @ x for Li, x in zip(self.Linv, xi, strict=True)])

    def to_xi(self, beta: np.ndarray) -> np.ndarray:
        return np.array([L.T @ b for L, b in zip(self.chols, beta, strict=True)])

    def prior(self, xi: np.ndarray) -> tuple[float, np.ndarray]:
        """The prior's log density (up to a constant) and gradient at ξ."""
        grad = -np.array([B @ x for B, x in zip(self.prior_precision, xi, strict=True)])
        return 0.5 * float(np.sum(grad * xi)), grad

    def pullback(self, grad_beta: np.ndarray) -> np.ndarray:
        """A gradient w.r.t. β as one w.r.t. ξ."""
        return np.array([Li @ g for Li, g in zip(self.Linv, grad_beta, strict=True)])


class CoefficientTarget:
    """log p(β | Ω, H) with the hinge's augmentation λ integrated out, in whitened ξ
    (:class:`WhitenedCoefficients`); the density is the Gaussian prior times the hinge
    pseudo-likelihood itself (piecewise linear in β, so its gradient is bounded).
    """

    #: its gradient is a few matrix-vector products a task, so the forces stay exact
    force_dtype = np.float64

    def __init__(self, Phi: np.ndarray, targets: np.ndarray, C: float, v, chols: list) -> None:
        self.targets, self.C = targets, C
        self.whitened = WhitenedCoefficients(chols, v)
        # the features in whitened coordinates Φ L⁻ᵀ, so that f = Ψ ξ
        self.Psi = [Phi @ Li.T for Li in self.whitened.Linv]

    def to_beta(self, xi: np.ndarray) -> np.ndarray:
        return self.whitened.to_beta(xi)

    def to_xi(self, beta: np.ndarray) -> np.ndarray:
        return self.whitened.to_xi(beta)

    def logp_grad(self, xi: np.ndarray, dtype=np.float64) -> tuple[float, np.ndarray]:
        # always float64 (its force_dtype); dtype keeps the targets' common signature
        F = np.column_stack([Psi @ x for Psi, x in zip(self.Psi, xi, strict=True)])
        logp, grad = self.whitened.prior(xi)
        logp += float(np.sum(hinge_log_pseudolikelihood(F, self.targets, self.C)))
        G = 2.0 * self.C * self.targets * (self.targets * F < 1.0)
        grad += np.array([Psi.T @ g for Psi, g in zip(self.Psi, G.T, strict=True)])
        return logp, grad


class CoefficientBandwidthTarget:
    """log p(β, ℓ | Ω₀, H) with λ integrated out, where ``Ω = Ω₀ diag(e^ℓ)``.

    ℓ moves each latent column's bandwidth along the group orbit
    ``(Ω_{:d}, μ_{:d}, σ²_{:d}) → (c_d Ω_{:d}, c_d μ_{:d}, c_d² σ²_{:d})`` (uniform Haar
    measure on ``ℓ = log c``; the spectral prior's ratio and Jacobian are its
    ``log_scale_ratio``), jointly with β under the hinge itself.  Given λ the bandwidth is
    pinned (every decision value is, to within ``√λ_n / C``); under the hinge a decision value
    beyond the margin is free, and β follows the bandwidth in the same trajectory.  β is
    whitened as in :class:`CoefficientTarget`, ℓ scaled by ``log_scale_sd``.

    With ``reference = (δ, sd)`` the density gains ``Π_d N(δ_d; ℓ_d, sd_d²)``, the
    conditional of the auxiliary reference at which :class:`CoefficientHMC` whitened β.
    """

    #: float32 trigonometry and products for the inner leapfrog forces (see hinge_terms)
    force_dtype = np.float32

    def __init__(self, spec, nat: dict, chols: list, log_scale_sd: np.ndarray,
                 reference: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        self.spec, self.nat = spec, nat
        self.H, self.Omega0 = nat["H"], nat["Omega"]
        self.whitened = WhitenedCoefficients(chols, nat["v"])
        self.log_scale_sd = log_scale_sd
        # the reference's log density in ℓ (see CoefficientHMC): N(δ; ℓ, sd²) for the offset δ
        self.reference = reference
        # the inner forces' constants in float32, once per step (see _forces)
        f32 = np.float32
        self._H32, self._Omega32 = self.H.astype(f32), self.Omega0.astype(f32)
        self._H32T = np.ascontiguousarray(self._H32.T)
        self._Linv32 = np.array(self.whitened.Linv, dtype=f32)
        self._prior32 = np.array(self.whitened.prior_precision, dtype=f32)
        self._Y32, self._2C = spec.targets.astype(f32), f32(2.0 * spec.C)
        self._scale_ratio = spec.spectral.log_scale_ratio_form(nat)

    def to_x(self, beta: np.ndarray) -> np.ndarray:
        return np.concatenate([self.whitened.to_xi(beta).ravel(),
                               np.zeros(self.Omega0.shape[1])])

    def split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(β, ℓ)`` at the position x."""
        n = self.whitened.size
        xi = x[:n].reshape(len(self.whitened.chols), -1)
        return self.whitened.to_beta(xi), x[n:] * self.log_scale_sd

    def logp_grad(self, x: np.ndarray, dtype=np.float64) -> tuple[float | None, np.ndarray]:
        if dtype != np.float64:
            return None, self._forces(x)
        n = self.whitened.size
        xi = x[:n].reshape(len(self.whitened.chols), -1)
        beta, log_c = self.whitened.to_beta(xi), x[n:] * self.log_scale_sd
        Omega = self.Omega0 * np.exp(log_c)
        cos, sin = self.spec.phases(self.H, Omega)
        logl, dS, d_beta = hinge_terms_of_phases(cos, sin, beta, self.spec.targets,
                                                 self.spec.C, with_beta_gradient=True)
        ratio, ratio_grad = self._scale_ratio(log_c)
        reference, reference_grad = self._reference(log_c)
        logp, grad_xi = self.whitened.prior(xi)
        logp += float(np.sum(logl)) + float(np.sum(ratio)) + reference
        grad_xi += self.whitened.pullback(d_beta)
        # S = H diag(c) Ω₀ᵀ: ∂/∂ℓ_d = Σ_nk ∂/∂S_nk h_nd Ω_kd
        grad_log_c = np.sum(self.H * (dS @ Omega), axis=0) + ratio_grad + reference_grad
        return logp, np.concatenate([grad_xi.ravel(), grad_log_c * self.log_scale_sd])

    def _reference(self, log_c: np.ndarray) -> tuple[float, np.ndarray]:
        """log N(δ; ℓ, sd²) summed over the columns (up to a constant) and its gradient."""
        if self.reference is None:
            return 0.0, np.zeros_like(log_c)
        offset, sd = self.reference
        z = (log_c - offset) / sd
        return -0.5 * float(z @ z), -z / sd

    def _forces(self, x: np.ndarray) -> np.ndarray:
        """The gradient alone, in float32 with the step's constants: the leapfrog's inner
        forces (any deterministic force field keeps the map reversible and volume-preserving;
        the energies that accept or reject are float64).  The algebra of :meth:`logp_grad`
        rearranged for a few hundred rows, where the count of array operations is the cost:
        ∂/∂ℓ is contracted from ``(H ∘ g)ᵀ cos S`` and ``(H ∘ g)ᵀ sin S`` (m × M, g the
        hinge's gradient w.r.t. f) with ``Ω₀ diag(c)``, without forming the N × M gradient
        w.r.t. the phases."""
        T, n = len(self.whitened.chols), self.whitened.size
        xi = x[:n].astype(np.float32).reshape(T, -1)
        log_c = x[n:] * self.log_scale_sd
        M = self._Omega32.shape[0]
        Omega = self._Omega32 * np.exp(log_c).astype(np.float32)  # Ω₀ diag(c)
        S = self._H32 @ Omega.T
        cos, sin = np.cos(S), np.sin(S)
        beta = np.matmul(xi[:, None, :], self._Linv32)[:, 0]  # β_t = L_t⁻ᵀ ξ_t
        scale = np.float32(1.0 / math.sqrt(M))
        bc, bs = beta[:, :M] * scale, beta[:, M:2 * M] * scale
        F = cos @ bc.T + sin @ bs.T + beta[:, 2 * M]
        Gf = self._2C * self._Y32 * (self._Y32 * F < 1.0)  # ∂ hinge / ∂f, (N, T)
        grad_beta = np.concatenate([(Gf.T @ cos) * scale, (Gf.T @ sin) * scale,
                                    Gf.sum(axis=0)[:, None]], axis=1)
        grad_xi = (np.matmul(self._Linv32, grad_beta[:, :, None])
                   - np.matmul(self._prior32, xi[:, :, None]))[..., 0]
        grad_log_c = self._scale_ratio.gradient(log_c) + self._reference(log_c)[1]
        for t in range(T):  # ∂f_t/∂S_nk = cos·bs - sin·bc; ∂S_nk/∂ℓ_d = h_nd Ω_kd
            weighted = self._H32T * Gf[:, t]
            grad_log_c += np.einsum("dk,kd->d", (weighted @ cos) * bs[t]
                                    - (weighted @ sin) * bc[t], Omega)
        return np.concatenate([grad_xi.ravel(), grad_log_c * self.log_scale_sd])


class CoefficientHMC(_HMCStep):
    """HMC for β on its conditional with λ integrated out (the hinge itself), and with it
    each latent column's bandwidth.

    The exact-Gibbs pair β | λ, λ | β is a data augmentation, and its two halves are strongly
    coupled: given λ each decision value is pinned to within ``√λ_n / C`` of its current
    value, so f moves by a random walk (on the digits, with Ω and H held fixed, the minimum
    effective sample size of f was 90 in 1000 sweeps).  This step moves β on the marginal
    ``p(β | Ω, H)``, preconditioned by the augmented precision ``A = vI + C² Φᵀ diag(1/λ̄) Φ``
    at the tuning-average λ̄ (frozen after tuning, so the mass matrix never depends on β).

    With ``bandwidth=True`` (the default) the same trajectory also moves the log scale of
    each column of Ω (with the spectral prior's parameters, a group move:
    :class:`CoefficientBandwidthTarget`).  Every other block moves the bandwidth given λ,
    which pins it; here a decision value beyond the margin is free and β follows the
    bandwidth.  On scikit-learn's breast-cancer data as three views (tuning seeds 11 and 12,
    4 chains of 500 + 2000, M = 30) f's smallest bulk ESS was 720 and 892 in 120 and 114 s,
    against 89-536 in 134-149 s for β alone at M = 40; on the digits 3 vs 5 (seed 11)
    2170 in 125 s against 515-1513.  Its scale comes from the curvature over the tuning
    window (:meth:`_adapt_log_scale`; 0.05 before), frozen after tuning.

    β's metric may not depend on what the trajectory moves: whitened at the current Ω, a move
    from Ω₀ to Ω₀ diag(c) and its reverse would run under two metrics and the chain would
    not keep the joint invariant.  Each step therefore first draws an auxiliary reference,
    log bandwidths ``log ‖Ω_{:d}‖ + δ_d`` with ``δ_d ~ N(0, sd_d²)``, and whitens β at Ω's
    columns rescaled to them: a point that depends on Ω only through its orbit (its columns'
    directions), the same for the move and its reverse.  The trajectory then samples the
    joint of the state and the reference, whose density in ℓ gains the factor
    ``N(δ_d; ℓ_d, sd_d²)`` (:class:`CoefficientBandwidthTarget`); the reference is drawn
    afresh, from its exact conditional, at the next step.  ``sd`` is ``reference_sd_factor``
    times the coordinates' scale: near the current point, so the metric still fits, and
    wide enough not to hold ℓ back.
    """

    # the hinge is flat beyond the margin, so the posterior is wider than A⁻¹ there: three
    # quarter periods (about 28 leapfrog steps) gave a min ESS of f of 779 in 1000 moves with
    # Ω and H fixed, against 67 for one quarter period and 313 for three short moves
    quarter_periods = 3.0
    #: the log-bandwidth coordinates' scale before it is adapted, and its adapted range
    initial_log_scale_sd, log_scale_sd_range = 0.05, (1e-3, 0.3)
    #: the auxiliary reference's sd in log bandwidth, in units of the coordinates' scale
    reference_sd_factor = 3.0

    def __init__(self, vars, spec, max_steps: int = 64, n_tune: int = 0,
                 bandwidth: bool = True, **kwargs):
        super().__init__(vars, spec, max_steps=max_steps, **kwargs)
        self.n_tune, self.bandwidth = n_tune, bandwidth
        self._reset_weights()

    def _reset_weights(self):
        self.lam_average = TuningAverageLambda(self.spec.targets, self.spec.C)
        self.iteration, self._curvature = 0, []
        self.log_scale_sd = np.full(self.spec.latent_dim, self.initial_log_scale_sd)

    def reset_tuning(self):
        super().reset_tuning()
        self._reset_weights()

    def _adapt_log_scale(self, nat: dict, lam_mean: np.ndarray) -> None:
        """Average, over the window [0.25, 0.6)·``n_tune``, each log bandwidth's curvature
        with β held (the hinge's by Gauss–Newton at the augmentation's mean weights
        ``C²/E[λ]``, as β's preconditioner; the spectral prior's exactly); at the window's
        end the coordinates' scale becomes its inverse square root."""
        start, stop = int(0.25 * self.n_tune), int(0.6 * self.n_tune)
        if start <= self.iteration < stop:
            s, H, Omega, beta = self.spec, nat["H"], nat["Omega"], nat["beta"]
            cos, sin = s.phases(H, Omega)
            M = cos.shape[1]
            weights = s.C**2 / lam_mean
            curvature = np.zeros(Omega.shape[1])
            for t in range(beta.shape[0]):  # ∂f_n/∂ℓ_d = h_nd Σ_k ∂f_n/∂S_nk Ω_kd
                df_dS = fourier_pullback(cos, sin, beta[t, :M], beta[t, M:2 * M])
                curvature += weights[:, t] @ (H * (df_dS @ Omega)) ** 2
            h = 1e-4
            prior = s.spectral.log_scale_ratio(nat, np.full(Omega.shape[1], h))[1]
            prior -= s.spectral.log_scale_ratio(nat, np.full(Omega.shape[1], -h))[1]
            self._curvature.append(curvature - prior / (2.0 * h))
        elif self.iteration == stop and len(self._curvature) >= 10:
            sd = np.mean(self._curvature, axis=0) ** -0.5
            self.log_scale_sd = np.clip(sd, *self.log_scale_sd_range)
            self.adapt = DualAveraging(self.adapt.step_size(True), self.adapt.target)
        self.iteration += 1

    def _whitening(self, Phi: np.ndarray, v) -> list:
        """Cholesky factors of each task's augmented precision ``A_t`` at features Φ and the
        tuning-average λ̄."""
        return [chol for chol, _ in self.lam_average.precisions(Phi, v)]

    def reference_whitening(self, nat: dict) -> tuple[list, tuple[np.ndarray, np.ndarray]]:
        """Draw the auxiliary reference, log bandwidths ``log ‖Ω_{:d}‖ + δ_d`` with
        ``δ_d ~ N(0, sd_d²)``, and whiten β at Ω's columns rescaled to them: the Cholesky
        factors and ``(δ, sd)``.  The factors depend on Ω only through its orbit."""
        sd = self.reference_sd_factor * self.log_scale_sd
        offset = sd * self.rng.standard_normal(sd.shape)
        Phi = self.spec.features(nat["H"], nat["Omega"] * np.exp(offset))
        return self._whitening(Phi, nat["v"]), (offset, sd)

    def step(self, point):
        s, nat = self.spec, self.spec.natural(point)
        beta0 = nat["beta"]
        if self.tune:
            Phi = s.features(nat["H"], nat["Omega"])
            lam = self.lam_average.add(Phi @ beta0.T)
            if self.bandwidth:
                self._adapt_log_scale(nat, lam)
        new = dict(point)
        if not self.bandwidth:
            Phi = s.features(nat["H"], nat["Omega"])
            chols = self._whitening(Phi, nat["v"])
            target = CoefficientTarget(Phi, s.targets, s.C, nat["v"], chols)
            xi, accepted, stats = self._transition(target, target.to_xi(beta0))
            if accepted:
                new["beta"] = target.to_beta(xi)
            return new, [stats]
        chols, reference = self.reference_whitening(nat)
        target = CoefficientBandwidthTarget(s, nat, chols, self.log_scale_sd, reference)
        x, accepted, stats = self._transition(target, target.to_x(beta0))
        if accepted:
            beta, log_c = target.split(x)
            new = s.scaled_frequencies(new, nat, np.exp(log_c))
            new["beta"] = beta
        return new, [stats]
