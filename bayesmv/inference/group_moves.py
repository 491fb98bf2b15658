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
from bayesmv.components.likelihoods import hinge_log_pseudolikelihood
from bayesmv.inference.gibbs import GibbsBlockStep, draw_assignments
from bayesmv.inference.slice import slice_sample_independent


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
