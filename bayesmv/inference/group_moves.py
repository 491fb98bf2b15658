"""Group moves of the hybrid sampler along directions its other blocks barely move.

A latent column's scale is not identified by the likelihood: ``h_j → h_j / g`` with
``W_{v,:j} → g W_{v,:j}`` leaves every ``W_v h`` unchanged, and ``Ω_{:j} → g Ω_{:j}`` leaves
every ``Ω h`` (so every decision value) unchanged.  Only the priors see g.  The Gibbs and HMC
blocks update H given W and W given H, each conditional pinned by the other, so the scale
moves by tiny steps: on the digits task log ||W_v|| had an effective sample size of 5 in 800
draws.  :class:`LatentScaleMove` draws g for every column at once from its exact conditional
along the group orbit (Liu & Sabatti 2000; "parameter expansion" for factor models), so the
scale mixes in a few sweeps.
"""

from __future__ import annotations

import numpy as np

from bayesmv.components.features import fourier_features
from bayesmv.components.latent import view_noise_terms
from bayesmv.components.likelihoods import hinge_log_pseudolikelihood
from bayesmv.inference.gibbs import (
    GibbsBlockStep,
    TuningAverageLambda,
    draw_assignments,
)
from bayesmv.inference.slice import slice_sample_independent
from bayesmv.linalg import cho_solve_lower, solve_lower


def latent_scale_log_ratio(spec, nat: dict, log_g: np.ndarray) -> np.ndarray:
    """Per latent column j, log[π(moved) / π(current) × Jacobian] of the move

    ``h_{:j} → h_{:j}/g_j``, ``W_{v,:j} → g_j W_{v,:j}``, ``r_{vj} → r_{vj}/g_j²`` (every view),
    ``Ω_{:j} → g_j Ω_{:j}`` with the spectral prior's parameters of dimension j
    (see ``rescale`` of the spectral densities).

    Terms: the N(0, I) prior of H with its Jacobian, ``-(g⁻² - 1)·Σ_n h_nj²/2 - N log g``; the
    loadings' prior N(0, 1/r) with W's Jacobian cancels exactly once r moves with them; the
    Gamma(a_r, b_r) prior of r with its Jacobian, ``-2 a_r log g - b_r r (g⁻² - 1)`` per view;
    and the spectral prior's own ratio.  The likelihood terms do not change.
    """
    g = np.exp(log_g)
    H, r = nat["H"], nat["r"]                          # (N, m), (V, m)
    latent = -(g**-2 - 1.0) * 0.5 * np.sum(H**2, axis=0) - H.shape[0] * log_g
    ard = np.sum(-2.0 * spec.a_r * log_g - spec.b_r * r * (g**-2 - 1.0), axis=0)
    return latent + ard + spec.spectral.rescale(nat, g)[1]


def apply_latent_scale(spec, point: dict, nat: dict, g: np.ndarray) -> dict:
    """The point (value space) moved by the per-column factors g (see latent_scale_log_ratio)."""
    new = spec.scaled_frequencies(point, nat, g)
    new["H"] = nat["H"] / g
    for v in range(spec.n_views):
        new[f"W_{v}"] = nat[f"W_{v}"] * g
    new["r_log__"] = point["r_log__"] - 2.0 * np.log(g)
    return new


class LatentScaleMove(GibbsBlockStep):
    """Per-column scale of (H, W, r, Ω, spectral prior) drawn along its group orbit.

    The conditional of ``log g_j`` (Haar measure of the multiplicative group, Liu & Sabatti
    2000) is ``exp(latent_scale_log_ratio)`` and the columns are independent given the rest,
    so one vectorised slice-sampling update moves them all exactly.
    """

    stats_dtypes_shapes = {"latent_scale_change": (float, [])}

    def step(self, point):
        s, nat = self.spec, self.spec.natural(point)
        n = nat["H"].shape[0]
        # the H prior dominates: log g has sd about 1/sqrt(2N); a few sds per slice width
        width = 3.0 / np.sqrt(2.0 * n)
        log_g = slice_sample_independent(lambda x: latent_scale_log_ratio(s, nat, x),
                                         np.zeros(s.latent_dim), width, self.rng)
        new = apply_latent_scale(s, point, nat, np.exp(log_g))
        return new, [{"latent_scale_change": float(np.max(np.abs(log_g)))}]


def loading_scale_log_density(spec, r_j: np.ndarray, A: np.ndarray, B: np.ndarray,
                               log_c: np.ndarray) -> np.ndarray:
    """Per view v, log[π(moved) / π(current) × Jacobian] of ``W_{v,:j} → c_v W_{v,:j}``,
    ``r_{vj} → r_{vj}/c_v²`` for one latent column j.

    Terms: the loadings' N(0, 1/r) prior with W's Jacobian cancels once r moves with them; the
    Gamma(a_r, b_r) prior of r with its Jacobian gives ``-2 a_r log c - b_r r (c⁻² - 1)``; and
    the view's likelihood with U_v integrated out, ``x_n ~ N(W h_n, Ψ)``, changes by
    ``(c - 1) A - ½ (c - 1)² B`` with ``A = w_jᵀ Ψ⁻¹ Eᵀ h_j`` (E the residuals ``X - H Wᵀ``) and
    ``B = (w_jᵀ Ψ⁻¹ w_j)(h_jᵀ h_j)`` (:func:`loading_scale_terms`).
    """
    c = np.exp(log_c)
    return (-2.0 * spec.a_r * log_c - spec.b_r * r_j * (c**-2 - 1.0)
            + (c - 1.0) * A - 0.5 * (c - 1.0) ** 2 * B)


def loading_scale_terms(W: np.ndarray, Q: np.ndarray, HtX: np.ndarray, HtH: np.ndarray,
                        j: int) -> tuple[float, float]:
    """``(A, B)`` of :func:`loading_scale_log_density` for one view's column j, from its
    loadings W (D × m), ``Q = Ψ⁻¹ W`` and the cross products ``HᵀX`` (m × D) and ``HᵀH`` of
    the rows that observe the view: ``Eᵀ h_j = (HᵀX)_j - W (HᵀH)_{:j}``."""
    residual_cross = HtX[j] - W @ HtH[:, j]
    return float(Q[:, j] @ residual_cross), float(W[:, j] @ Q[:, j]) * float(HtH[j, j])


def frequency_scale_log_density(spec, nat: dict, log_c: float) -> float:
    """log[π(moved) × Jacobian] of ``(Ω, μ, σ²) → (cΩ, cμ, c²σ²)`` with β and H held, up to a
    constant: the hinge at the moved frequencies plus the spectral prior's own ratio (see its
    ``rescale``)."""
    c = float(np.exp(log_c))
    f = fourier_features(nat["H"], c * nat["Omega"]) @ nat["beta"].T
    logl = np.sum(hinge_log_pseudolikelihood(f, spec.targets, spec.C))
    return float(logl + spec.spectral.rescale(nat, c)[1])


class FrequencyScaleMove(GibbsBlockStep):
    """The kernel's bandwidth under the hinge itself: ``(Ω, μ, σ²) → (cΩ, cμ, c²σ²)`` with β
    and H held, log c drawn from its exact conditional by slice sampling (Liu & Sabatti 2000).

    :class:`BetaLambdaGibbs` makes the same move with β integrated out given the hinge's
    augmentation λ, which pins every decision value near its current one, so the bandwidth
    moved by small steps; given β instead, only the points inside the margin resist a change
    of c.
    """

    stats_dtypes_shapes = {"frequency_scale_change": (float, [])}

    def step(self, point):
        s, nat = self.spec, self.spec.natural(point)
        # log c moves by about 0.015 per sweep on the digits; 0.1 brackets it in one step
        log_c = slice_sample_independent(
            lambda x: np.array([frequency_scale_log_density(s, nat, x[0])]), np.zeros(1),
            0.1, self.rng)
        new = s.scaled_frequencies(point, nat, float(np.exp(log_c[0])))
        return new, [{"frequency_scale_change": float(abs(log_c[0]))}]


class LoadingScaleMove(GibbsBlockStep):
    """Each view's loading column with its ARD precision, ``(W_{v,:j}, r_{vj}) → (c W_{v,:j},
    r_{vj}/c²)``, log c drawn from its exact conditional (Liu & Sabatti 2000).

    The ARD prior makes ``(w_{vj}, r_{vj})`` a funnel: given r the column is shrunk towards 0
    and given w, r follows ``1/‖w‖²``, so the Gibbs updates of :class:`LatentVariableGibbs` walk
    along it by small steps.  In a view with few features (the UCI digits' ``mor``, five after
    its constant column is dropped) that walk is the slowest direction of the view's parameters:
    on the digits 3 vs 5 (2 chains of 1000 + 2000) the chains held a column of ``mor`` at log r
    4.2 and 6.9 (R-hat 1.38, bulk ESS 5), and its noise precision, which follows how much of the
    view the columns explain, at R-hat 1.04.  Along the funnel the prior's terms cancel and only
    the view's likelihood and r's Gamma prior remain, so a switched-off column's scale moves
    freely.  Views are independent given the rest and are updated together; the columns one at a
    time, in random order (each column's likelihood term reads the others).

    Not in the default sweep (:func:`~bayesmv.inference.sample.hybrid_steps` says why): it
    mixes the ARD states but did not converge more fits, and f's slowest values mixed no
    better; a compound step can include it (it writes W and r).
    """

    stats_dtypes_shapes = {"loading_scale_change": (float, [])}
    #: slice width in log c: a loading's log scale has posterior sd from about 0.03 (a column
    #: the view uses) to several units (a switched-off column); shrinking and stepping out
    #: cover both from one width
    width = 1.0

    def step(self, point):
        s, nat = self.spec, self.spec.natural(point)
        H, r = nat["H"], nat["r"].copy()
        W = [nat[f"W_{v}"].copy() for v in range(s.n_views)]
        Q, HtX, HtH = [], [], []
        for v, (Xo, idx) in enumerate(zip(s.views, s.observed_index, strict=True)):
            Ho = H[idx]
            Q.append(view_noise_terms(W[v], nat[f"V_{v}"], float(nat["tau"][v]))[1])
            HtX.append(Ho.T @ Xo)
            HtH.append(Ho.T @ Ho)
        largest = 0.0
        for j in self.rng.permutation(s.latent_dim):
            terms = np.array([loading_scale_terms(W[v], Q[v], HtX[v], HtH[v], j)
                              for v in range(s.n_views)])
            log_c = slice_sample_independent(
                lambda x, j=j, terms=terms: loading_scale_log_density(
                    s, r[:, j], terms[:, 0], terms[:, 1], x),
                np.zeros(s.n_views), self.width, self.rng)
            c = np.exp(log_c)
            for v in range(s.n_views):
                W[v][:, j] *= c[v]
                Q[v][:, j] *= c[v]  # Ψ⁻¹ W is linear in W's columns
            r[:, j] /= c**2
            largest = max(largest, float(np.max(np.abs(log_c))))
        new = dict(point)
        for v in range(s.n_views):
            new[f"W_{v}"] = W[v]
        new["r_log__"] = np.log(r)
        return new, [{"loading_scale_change": largest}]


def frequency_prior_given_assignments(spec, nat: dict, rng) -> tuple[np.ndarray, np.ndarray]:
    """Ω's prior as one Gaussian per entry, each shaped like Ω: (means, precisions).

    Under the DP mixture that is the prior given the assignments z, drawn here from their
    exact conditional (μ_z, 1/σ²_z); under the Gaussian spectral density it is the prior.
    """
    Omega = nat["Omega"]
    if not spec.is_dp:
        return np.zeros_like(Omega), np.full_like(Omega, spec.spectral.scale(Omega.shape[1]) ** -2)
    z = draw_assignments(Omega, nat["dp_weights"], nat["dp_mu"], nat["dp_sigma2"], rng)
    return nat["dp_mu"][z], 1.0 / nat["dp_sigma2"][z]


def _rotate_pairs(X: np.ndarray, pairs: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """X with column pairs (a, b) replaced by ``(cos θ x_a - sin θ x_b, sin θ x_a + cos θ x_b)``
    (the latent rotation ``h → R h`` read on a matrix whose rows pair with h: ``X Rᵀ``)."""
    a, b = pairs[:, 0], pairs[:, 1]
    c, s = np.cos(theta), np.sin(theta)
    out = X.copy()
    out[..., a] = c * X[..., a] - s * X[..., b]
    out[..., b] = s * X[..., a] + c * X[..., b]
    return out


def latent_rotation_coefficients(spec, nat: dict, prior_mean: np.ndarray,
                                 prior_precision: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Per pair of latent columns, the log density (up to a constant) of rotating that pair by
    θ in H, every W_v and Ω together, as coefficients on ``1, cos θ, sin θ, cos 2θ, sin 2θ``:
    shape (5, n_pairs).

    ``h → R h`` with ``W_v → W_v Rᵀ`` and ``Ω → Ω Rᵀ`` leaves every ``W_v h`` and ``Ω h`` (so
    every likelihood term and decision value) and H's N(0, I) prior unchanged, with unit
    Jacobian; what changes are the ARD prior of the loadings, N(0, 1/r_vj) per column, and the
    frequencies' prior, here one Gaussian per entry (``prior_mean``, ``prior_precision``:
    the DP mixture given its assignments).  Both factor over columns, so disjoint pairs are
    independent.  Rotating columns (a, b) by θ makes both a quadratic form in (cos θ, sin θ),
    ``Q_cc cos² + Q_ss sin² + Q_cs 2 cos sin + L_c cos + L_s sin``, whose sums over the rows
    are taken once here (the move then needs no rotated copies of W or Ω).
    """
    a, b = pairs[:, 0], pairs[:, 1]
    q_cc = q_ss = q_cs = 0.0
    for v in range(spec.n_views):
        W, r = nat[f"W_{v}"], nat["r"][v]
        s_aa, s_bb = np.sum(W[:, a] ** 2, axis=0), np.sum(W[:, b] ** 2, axis=0)
        q_cc = q_cc + r[a] * s_aa + r[b] * s_bb
        q_ss = q_ss + r[a] * s_bb + r[b] * s_aa
        q_cs = q_cs + (r[b] - r[a]) * np.sum(W[:, a] * W[:, b], axis=0)
    Omega = nat["Omega"]
    wa, wb = Omega[:, a], Omega[:, b]
    pa, pb = prior_precision[:, a], prior_precision[:, b]
    ma, mb = pa * prior_mean[:, a], pb * prior_mean[:, b]
    q_cc = q_cc + np.sum(pa * wa**2 + pb * wb**2, axis=0)
    q_ss = q_ss + np.sum(pa * wb**2 + pb * wa**2, axis=0)
    q_cs = q_cs + np.sum((pb - pa) * wa * wb, axis=0)
    l_c = -2.0 * np.sum(ma * wa + mb * wb, axis=0)
    l_s = 2.0 * np.sum(ma * wb - mb * wa, axis=0)
    # cos² = (1 + cos 2θ)/2, sin² = (1 - cos 2θ)/2, 2 cos sin = sin 2θ; the density is -½ ×
    return -0.5 * np.stack([0.5 * (q_cc + q_ss), l_c, l_s, 0.5 * (q_cc - q_ss), q_cs])


def latent_rotation_log_density(spec, nat: dict, prior_mean: np.ndarray,
                                prior_precision: np.ndarray, pairs: np.ndarray,
                                theta: np.ndarray) -> np.ndarray:
    """Per pair of latent columns, the log density (up to a constant) of rotating that pair by
    θ (see :func:`latent_rotation_coefficients`)."""
    coef = latent_rotation_coefficients(spec, nat, prior_mean, prior_precision, pairs)
    return _trig_polynomial(theta, coef)


def draw_rotation_angles(spec, nat: dict, prior_mean: np.ndarray, prior_precision: np.ndarray,
                         pairs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One exact update of each pair's angle (from 0, the current orientation) under
    :func:`latent_rotation_log_density`.

    That density is a trigonometric polynomial of degree 2 in θ, so a slice over one whole
    period, randomly placed, needs no stepping out.
    """
    coef = latent_rotation_coefficients(spec, nat, prior_mean, prior_precision, pairs)
    return slice_sample_independent(lambda t: _trig_polynomial(t, coef),
                                    np.zeros(len(pairs)), 2.0 * np.pi, rng, max_steps_out=1)


class LatentRotationMove(GibbsBlockStep):
    """Rotations of pairs of latent columns in (H, W, Ω): a move along the group orbit that
    leaves every likelihood term unchanged.

    The latent's orientation is not identified, and only the loadings' ARD prior and the
    frequencies' prior see it; the other blocks update H given W and W given H, so the
    orientation (and the per-view loading norms and ARD precisions that depend on it) moved
    by tiny steps.  Each sweep pairs the columns at random and draws each pair's angle from
    its exact conditional on the circle (uniform Haar measure, unit Jacobian; Liu & Sabatti
    2000) by slice sampling over a whole period, given the DP assignments drawn fresh.
    """

    stats_dtypes_shapes = {"latent_rotation": (float, [])}

    def step(self, point):
        s, nat = self.spec, self.spec.natural(point)
        m = s.latent_dim
        if m < 2:
            return dict(point), [{"latent_rotation": 0.0}]
        pairs = self.rng.permutation(m)[: 2 * (m // 2)].reshape(-1, 2)
        mean, precision = frequency_prior_given_assignments(s, nat, self.rng)
        theta = draw_rotation_angles(s, nat, mean, precision, pairs, self.rng)
        new = dict(point)
        new["H"] = _rotate_pairs(nat["H"], pairs, theta)
        new["Omega"] = _rotate_pairs(nat["Omega"], pairs, theta)
        for v in range(s.n_views):
            new[f"W_{v}"] = _rotate_pairs(nat[f"W_{v}"], pairs, theta)
        angle = np.abs((theta + np.pi) % (2.0 * np.pi) - np.pi)
        return new, [{"latent_rotation": float(np.max(angle))}]


def _trig_basis(theta: np.ndarray) -> np.ndarray:
    """Rows 1, cos θ, sin θ, cos 2θ, sin 2θ for each angle: (5, len(θ))."""
    theta = np.asarray(theta, dtype=float)
    return np.stack([np.ones_like(theta), np.cos(theta), np.sin(theta), np.cos(2 * theta),
                     np.sin(2 * theta)])


def _trig_polynomial(theta: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """Per pair, the degree-2 trigonometric polynomial with coefficients ``coef`` (5, n_pairs)
    on :func:`_trig_basis`, at that pair's angle."""
    return np.einsum("kp,kp->p", _trig_basis(theta), coef)


class BandwidthTransportMove(GibbsBlockStep):
    """A latent column's bandwidth by Metropolis–Hastings with β transported along.

    With β held, a column's bandwidth ``ℓ_d = log c_d`` (``Ω_{:d} → c_d Ω_{:d}`` with the
    spectral prior's parameters, as in :class:`FrequencyScaleMove`) is pinned by the points
    inside the margin, while its marginal is several times wider: on the breast-cancer data
    the discriminative column's log bandwidth has posterior sd 0.23, and
    :class:`~bayesmv.inference.hmc.CoefficientHMC` moved it by 0.07 a sweep.  This move
    proposes ``ℓ_d' = ℓ_d + ε``, ``ε ~ N(0, s_d²)``, and carries β with it by the affine map
    that takes the Gaussian approximation of β's conditional at Ω to the one at Ω'::

        β' = m(Ω') + L(Ω')⁻ᵀ L(Ω)ᵀ (β - m(Ω))

    where ``L Lᵀ = A = diag(v) + C² Φᵀ diag(1/λ̄) Φ`` and ``m = A⁻¹ Φᵀ C(1 + C/λ̄) y`` are the
    precision and mean of β given the augmentation at its tuning average λ̄.  The map depends
    on Ω alone and its inverse is the same map from Ω' to Ω, so the move is an exact
    Metropolis–Hastings step on ``(ℓ, β)`` whose ratio is the joint density (hinge, β's
    prior, the spectral prior's ratio) times the map's Jacobian
    ``Π_t det L_t(Ω) / det L_t(Ω')`` (Green 1995).

    Each sweep makes ``proposals_per_sweep`` proposals, each on a column drawn with
    probability proportional to its mean ``‖Ω_{:d}‖²`` over tuning (the columns f is most
    sensitive to; a column with a small bandwidth barely moves f).  λ̄, these probabilities
    and the per-column ``s_d`` (adapted towards an acceptance rate of ``target_accept``) are
    frozen when tuning ends, so the kernel is fixed while draws are kept.
    """

    stats_dtypes_shapes = {"bandwidth_transport_accept": (float, [])}
    target_accept = 0.4
    proposals_per_sweep = 2
    initial_sd, sd_range = 0.1, (1e-3, 1.0)

    def __init__(self, vars, spec, n_tune: int = 0, **kwargs):
        super().__init__(vars, spec, **kwargs)
        self.n_tune = n_tune
        self._reset()

    def _reset(self):
        self.lam_average = TuningAverageLambda(self.spec.targets, self.spec.C)
        self.iteration = 0
        self._spread_sum = np.zeros(self.spec.latent_dim)
        self.log_sd = np.full(self.spec.latent_dim, np.log(self.initial_sd))

    def reset_tuning(self):
        super().reset_tuning()
        self._reset()

    def gaussian_approximation(self, Phi: np.ndarray, v) -> list:
        """Per task, the Cholesky factor of A and the mean m at features Φ (see the class)."""
        return [(chol, cho_solve_lower(chol, lin))
                for chol, lin in self.lam_average.precisions(Phi, v)]

    def transport(self, beta: np.ndarray, source: list, target: list) -> tuple[np.ndarray, float]:
        """β mapped from the approximation ``source`` to ``target``, and the log-Jacobian."""
        moved, log_jac = np.empty_like(beta), 0.0
        for t, ((L0, m0), (L1, m1)) in enumerate(zip(source, target, strict=True)):
            moved[t] = m1 + solve_lower(L1, L0.T @ (beta[t] - m0), transposed=True)
            log_jac += float(np.sum(np.log(np.diag(L0))) - np.sum(np.log(np.diag(L1))))
        return moved, log_jac

    def log_density(self, Phi: np.ndarray, beta: np.ndarray, v) -> float:
        """The terms of the joint that change with (Ω, β) besides the spectral prior."""
        s = self.spec
        logl = np.sum(hinge_log_pseudolikelihood(Phi @ beta.T, s.targets, s.C))
        return float(logl - 0.5 * np.sum(np.asarray(v) * beta**2))

    def state(self, nat: dict, Phi: np.ndarray | None = None) -> tuple:
        """``(Φ, Gaussian approximation, log density)`` at the point: what a proposal reads
        at its start (and returns at its end); ``Phi`` the point's features if known."""
        if Phi is None:
            Phi = self.spec.features(nat["H"], nat["Omega"])
        return (Phi, self.gaussian_approximation(Phi, nat["v"]),
                self.log_density(Phi, nat["beta"], nat["v"]))

    def propose(self, point: dict, nat: dict, log_c: np.ndarray,
                current: tuple) -> tuple[dict, float, tuple]:
        """The point moved by the log bandwidths ``log_c`` (one per column) with β
        transported, the log acceptance ratio, and the :meth:`state` there; ``current`` is
        the state at the point."""
        s, (_, approx, log_density) = self.spec, current
        Phi1 = s.features(nat["H"], nat["Omega"] * np.exp(log_c))
        approx1 = self.gaussian_approximation(Phi1, nat["v"])
        beta1, log_jac = self.transport(nat["beta"], approx, approx1)
        proposed = (Phi1, approx1, self.log_density(Phi1, beta1, nat["v"]))
        moved = s.scaled_frequencies(point, nat, np.exp(log_c))
        moved["beta"] = beta1
        log_ratio = (proposed[2] - log_density
                     + float(np.sum(s.spectral.log_scale_ratio(nat, log_c)[0])) + log_jac)
        return moved, log_ratio, proposed

    def step(self, point):
        s, nat = self.spec, self.spec.natural(point)
        Phi = s.features(nat["H"], nat["Omega"])
        if self.tune:  # before the state: its approximation reads λ̄ with this point's λ in
            self.lam_average.add(Phi @ nat["beta"].T)
            self._spread_sum = self._spread_sum + np.sum(nat["Omega"] ** 2, axis=0)
        m, current = s.latent_dim, self.state(nat, Phi)
        weights = self._spread_sum + 1e-12
        columns = self.rng.choice(m, size=self.proposals_per_sweep, p=weights / weights.sum())
        accepted = np.zeros(len(columns))
        for i, d in enumerate(columns):
            log_c = np.zeros(m)
            log_c[d] = np.exp(self.log_sd[d]) * self.rng.standard_normal()
            moved, log_ratio, proposed = self.propose(point, nat, log_c, current)
            accepted[i] = np.exp(min(0.0, log_ratio))
            if self.rng.uniform() < accepted[i]:
                point, nat, current = moved, s.natural(moved), proposed
            if self.tune and self.iteration < self.n_tune:
                rate = (self.iteration + 10.0) ** -0.6
                self.log_sd[d] = np.clip(self.log_sd[d] + rate * (accepted[i] - self.target_accept),
                                         *np.log(self.sd_range))
        self.iteration += 1
        return point, [{"bandwidth_transport_accept": float(np.mean(accepted))}]
