"""The views' noise precisions drawn with the shared latents carried along (interweaving).

Given the loadings and precisions θ = (W, V, τ), a row's shared latent has the Gaussian
conditional ``N(μ_n, P_n⁻¹)`` that ignores the label (``P_n = I + Σ_{v observed} W_vᵀ Ψ_v⁻¹
W_v``, ``Ψ_v = V_v V_vᵀ + τ_v⁻¹ I``). The other blocks update τ given H (its *centred* form):
with many rows H pins each view's residual, and τ moves only as fast as H and W trade the weak
latent directions between the views, a factor model's slowest direction. On the UCI digits 0-4
against 5-9 (1600 rows, m = 16) the 216-feature view's τ stayed at a different value in each
chain (R-hat 1.8, bulk ESS 3 in 2 × 2000 draws).

In the *non-centred* form ``h_n = μ_n(θ) + L_n(θ)^{-T} ξ_n`` (``L_n L_nᵀ = P_n``) the joint
density of (θ, ξ) is ``p(θ) p(X | θ) N(ξ | 0, I) ℓ(y | f(H(θ, ξ)))``, with ``p(X | θ)`` the
factor model's marginal (H and the view latents U integrated out) and ``ℓ`` the hinge pseudo-
likelihood (λ integrated out; :class:`~bayesmv.inference.gibbs.BetaLambdaGibbs` draws it afresh
at the start of the next sweep). :class:`NoiseInterweavingMove` draws each τ_v from that
conditional given ξ (a Metropolis step per view), so H follows τ; alternating it with the
centred draw is an ancillarity–sufficiency interweaving (Yu & Meng 2011). In a factor model
without labels on the same views (exact Gibbs draws of H, W, r, τ) it took the smallest bulk
ESS of log τ from 3 to 1480 in 2 × 1000 sweeps.

In M³LAK's sweep it helps where one view is explained almost exactly by the shared latent, so
that view pins H and H pins its τ: on scikit-learn's breast-cancer data as three views (the
"worst" values nearly repeat the means; log τ 4.6 against 1.8–2.5) the third view's τ had a
bulk ESS of 584–764 in 4 × 2000 draws and f's smallest bulk ESS fell to 57 on one seed (tuning
seeds 13, 14); with the move, 1788–1962 and 707–1116, for 10 % more time a sweep (from the first
tuning iteration; from halfway, as the default sweep runs it, seed 13 gave 1803 and 593).  It does
not cure every slow τ: at 1600 rows of the UCI digits each chain still kept its own τ of the
216-feature view (R-hat 1.80 with and without it; the two values are states of the weak
latent columns, which view explains them, that τ alone does not carry).
"""

from __future__ import annotations

import numpy as np

from bayesmv.components.features import fourier_features
from bayesmv.components.latent import latent_precision, view_noise_correction
from bayesmv.components.likelihoods import hinge_log_pseudolikelihood
from bayesmv.inference.gibbs import GibbsBlockStep, noise_log_density_without_view_latent
from bayesmv.linalg import cholesky_lower, solve_lower


class NoncentredNoiseDensity:
    """``log τ_v ↦ log p(τ_v | ξ, rest)`` (Haar measure on log τ_v) and the latents it implies.

    Built at a point; ``ξ`` are the current H's whitened coordinates.  Each view's products
    with its loadings (``X_v W_v``, ``X_v V_v``) are formed once, so an evaluation costs
    O(N m² + N M m) whatever the views' widths.
    """

    def __init__(self, spec, nat: dict) -> None:
        self.spec, self.nat = spec, nat
        self.tau = np.array(nat["tau"], dtype=float)
        self.XW, self.XV, self.WtW, self.WtV = [], [], [], []
        statistics = []
        for v, Xo in enumerate(spec.views):
            W, V = nat[f"W_{v}"], nat[f"V_{v}"]
            self.XW.append(Xo @ W)
            self.XV.append(Xo @ V)
            self.WtW.append(W.T @ W)
            self.WtV.append(W.T @ V)
            Q, sv, _ = np.linalg.svd(V, full_matrices=False)
            # the view's own term: its rows are N(0, Ψ_v + W_v W_vᵀ); Ψ_v's part here, W_v's
            # through P below (the matrix determinant lemma)
            statistics.append((float(np.sum(Xo**2)), Xo @ Q, sv, Xo.shape[1]))
        self.view_density = noise_log_density_without_view_latent(statistics, spec.a_tau,
                                                                  spec.b_tau)
        self.terms = [self._view_terms(v, t) for v, t in enumerate(self.tau)]
        _, self.xi = self._latents(self.terms, H=nat["H"])

    def _view_terms(self, v: int, tau: float) -> tuple[np.ndarray, np.ndarray]:
        """``(W_vᵀ Ψ_v⁻¹ W_v, X_v Ψ_v⁻¹ W_v)`` at noise precision tau."""
        c = view_noise_correction(self.nat[f"W_{v}"], self.nat[f"V_{v}"], tau)
        return tau * self.WtW[v] - tau**2 * (self.WtV[v] @ c), tau * self.XW[v] - tau**2 * (
            self.XV[v] @ c)

    def _latents(self, terms, *, xi=None, H=None) -> tuple[float, np.ndarray]:
        """``Σ_n [½ bₙᵀ Pₙ⁻¹ bₙ - ½ log|Pₙ|]`` (the latent's share of log p(X | θ)) and either
        H at whitened coordinates ``xi`` or the whitened coordinates of ``H``."""
        s = self.spec
        m = terms[0][0].shape[0]
        b = np.zeros((len(s.pattern_of_row), m))
        for (_, B), idx in zip(terms, s.observed_index, strict=True):
            b[idx] += B
        G = [G for G, _ in terms]
        value, out = 0.0, np.empty_like(b)
        for p, mask in enumerate(s.patterns):
            rows = s.pattern_rows[p]
            L = cholesky_lower(latent_precision(G, mask))
            z = solve_lower(L, b[rows].T)  # L⁻¹ bₙ, so μₙ = L⁻ᵀ z
            value += 0.5 * float(np.sum(z**2)) - len(rows) * float(np.sum(np.log(np.diag(L))))
            if H is None:
                out[rows] = solve_lower(L, z + xi[rows].T, transposed=True).T
            else:
                out[rows] = H[rows] @ L - z.T  # Lᵀ (h - μ) in row form
        return value, out

    def __call__(self, v: int, log_tau: float) -> tuple[float, np.ndarray]:
        """The log density of (log τ, ξ) with ``log τ_v = log_tau`` (the other views' τ as
        they are; one constant for every v, so values at different views compare) and the
        moved H."""
        terms = list(self.terms)
        terms[v] = self._view_terms(v, float(np.exp(log_tau)))
        latent, H = self._latents(terms, xi=self.xi)
        log_taus = np.log(self.tau)
        log_taus[v] = log_tau
        return self._total(log_taus, latent, H), H

    def value(self) -> float:
        """The log density at the current τ (the same constant as :meth:`__call__`'s)."""
        latent, H = self._latents(self.terms, xi=self.xi)
        return self._total(np.log(self.tau), latent, H)

    def _total(self, log_taus: np.ndarray, latent: float, H: np.ndarray) -> float:
        nat, s = self.nat, self.spec
        f = fourier_features(H, nat["Omega"]) @ nat["beta"].T
        hinge = float(np.sum(hinge_log_pseudolikelihood(f, s.targets, s.C)))
        return float(np.sum(self.view_density(log_taus))) + latent + hinge

    def accept(self, v: int, log_tau: float) -> None:
        """Make ``τ_v = exp(log_tau)`` the current value (ξ stays)."""
        self.tau[v] = np.exp(log_tau)
        self.terms[v] = self._view_terms(v, float(self.tau[v]))


class NoiseInterweavingMove(GibbsBlockStep):
    """Each view's τ drawn given the whitened latents ξ (H moves with it), views in turn.

    See the module docstring.  A random-walk Metropolis step on each log τ_v, one density
    evaluation per view (each costs O(N m² + N M m), so slice sampling's five or more per view
    would double a sweep at 1600 rows); each view's step size adapts by Robbins–Monro towards
    the one-dimensional optimum acceptance 0.44 while tuning and is frozen after.

    ``views_per_step`` bounds the views updated in one step: that many, drawn uniformly without
    replacement, in random order (None: every view in turn).  The choice does not look at the
    state, so each step is a mixture of single-view updates that each leave the target
    invariant; with many views it bounds the cost of a sweep.  ``idle_tuning``: the first
    that many tuning iterations of a chain leave the point as it is (the move, and the
    adaptation of its step sizes, start after them).
    """

    stats_dtypes_shapes = {"noise_interweave_accept": (float, [])}

    def __init__(self, vars, spec, views_per_step: int | None = None, idle_tuning: int = 0,
                 **kwargs):
        super().__init__(vars, spec, **kwargs)
        self.idle_tuning = int(idle_tuning)
        if views_per_step is not None and views_per_step < 1:
            raise ValueError(f"views_per_step must be None or at least 1, got {views_per_step}")
        self.views_per_step = views_per_step
        self.reset_steps()

    def reset_steps(self):
        # the centred conditional's sd of log τ_v, about 1/sqrt(n D_v / 2), as a start
        sizes = np.array([Xo.size for Xo in self.spec.views], dtype=float)
        self.log_step = np.log(1.0 / np.sqrt(0.5 * sizes))
        self.tuning_iteration = 0

    def reset_tuning(self):
        super().reset_tuning()
        self.reset_steps()

    def step(self, point):
        if self.tune:
            self.tuning_iteration += 1
            if self.tuning_iteration <= self.idle_tuning:
                return dict(point), [{"noise_interweave_accept": 0.0}]
        s, nat = self.spec, self.spec.natural(point)
        density = NoncentredNoiseDensity(s, nat)
        current, H = density.value(), nat["H"]
        if self.views_per_step is None or self.views_per_step >= s.n_views:
            views = np.arange(s.n_views)
        else:
            views = self.rng.choice(s.n_views, self.views_per_step, replace=False)
        accepted = np.zeros(len(views))
        for i, v in enumerate(views):
            log_tau = float(np.log(density.tau[v]))
            proposal = log_tau + float(np.exp(self.log_step[v])) * self.rng.standard_normal()
            value, moved = density(v, proposal)
            log_ratio = value - current
            if np.log(self.rng.uniform()) < log_ratio:
                density.accept(v, proposal)
                current, H, accepted[i] = value, moved, 1.0
            if self.tune:
                rate = float(np.exp(min(log_ratio, 0.0)))
                # the gain falls with the tuning sweeps the move has run
                active = self.tuning_iteration - self.idle_tuning
                self.log_step[v] += (rate - 0.44) / np.sqrt(active)
        new = dict(point)
        new["H"] = H
        new["tau_log__"] = np.log(density.tau)
        return new, [{"noise_interweave_accept": float(accepted.mean())}]
