"""The HMC blocks leave their exact conditional invariant, hinge included.

With a one-dimensional latent (m = 1) the conditional of each latent row, and of a single
frequency, is a 1-D density that quadrature normalises exactly.  The density is written here
independently of the sampler (scipy.stats for the Gaussian parts, the paper's feature map
and hinge), and long chains of the step are compared with its CDF by Kolmogorov–Smirnov.
With a two-dimensional latent (m = 2) each row's correlated conditional is normalised on a
grid and its projections on the axes and the diagonals are compared the same way.
"""

import arviz as az
import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import logsumexp

from bayesmv import M3LAK
from bayesmv.components import DPMixtureSpectral
from bayesmv.diagnostics.convergence import without_numba
from bayesmv.inference.hmc import CoefficientHMC, FrequencyHMC, LatentHMC
from bayesmv.inference.spec import HybridSpec


@pytest.fixture(scope="module")
def one_dim_model():
    rng = np.random.default_rng(0)
    n = 4
    X = [rng.normal(size=(n, 3)), rng.normal(size=(n, 2))]
    X[1][3] = np.nan  # the last sample misses view 1
    y = np.array([0, 1, 1, 0])
    est = M3LAK(latent_dim=1, n_frequencies=2, view_latent_dim=1, n_components=2, C=1.5,
                standardize=False)
    built = est.build_model(X, y)
    point = built.initial_values(np.random.default_rng(1))
    point["beta"] = np.array([[1.2, -0.8, 0.5, 1.0, 0.3]])
    point["Omega"] = np.array([[1.1], [-0.6]])
    point["H"] = rng.normal(size=(n, 1))
    return built, point, HybridSpec.from_built(built)


def _features(h, Omega):
    """φ̃(h) = [cos Ωh, sin Ωh, √M] / √M for latent rows h of shape (k, m)."""
    S = h @ Omega.T
    M = Omega.shape[0]
    return np.concatenate([np.cos(S), np.sin(S), np.full((len(h), 1), np.sqrt(M))],
                          axis=1) / np.sqrt(M)


def _row_log_density(spec, nat, row, h):
    """log p(h_row | everything else) up to a constant, for k candidate rows h (k, m): the
    N(0, I) prior, every observed view with U_v integrated out (x | h ~ N(W h, V Vᵀ + I/τ))
    and the hinge of that row's decision value."""
    total = stats.norm.logpdf(h).sum(axis=1)
    for v, (Xv, obs) in enumerate(zip(spec.views, spec.observed_index, strict=True)):
        if row not in obs:
            continue
        x = Xv[list(obs).index(row)]
        W, V, tau = nat[f"W_{v}"], nat[f"V_{v}"], nat["tau"][v]
        cov = V @ V.T + np.eye(len(x)) / tau
        total = total + stats.multivariate_normal(np.zeros(len(x)), cov).logpdf(
            x[None, :] - h @ W.T)
    f = _features(h, nat["Omega"]) @ nat["beta"][0]
    return total + _hinge(f, spec.targets[row, 0], spec.C)


def _hinge(f, y, C):
    return -2 * C * np.maximum(0, 1 - y * f)


def _normalised(log_w):
    w = np.exp(log_w - log_w.max())
    return w / w.sum()


def _ks_pvalue(draws, log_density, lo=-12, hi=12):
    grid = np.linspace(lo, hi, 20001)
    logd = log_density(grid)
    dens = np.exp(logd - logd.max())
    cdf = integrate.cumulative_trapezoid(dens, grid, initial=0)
    cdf /= cdf[-1]
    return stats.kstest(draws, lambda x: np.interp(x, grid, cdf)).pvalue


def _run(step, point, name, n_iter, thin):
    step.tune = True
    for _ in range(300):  # adapt the step size, then freeze it
        point, _ = step.step(point)
    step.stop_tuning()
    out = []
    for i in range(n_iter):
        point, _ = step.step(point)
        if i % thin == 0:
            out.append(point[name].copy())
    return np.array(out)


def test_latent_hmc_samples_the_exact_row_conditional(one_dim_model):
    built, point, spec = one_dim_model
    nat = spec.natural(point)
    step = LatentHMC([built.model.rvs_to_values[built.model["H"]]], spec,
                     model=built.model, rng=np.random.default_rng(2))
    draws = _run(step, dict(point), "H", 6000, 6)[:, :, 0]  # (1000, n)
    for row in range(draws.shape[1]):
        def log_density(h, row=row):
            return _row_log_density(spec, nat, row, h[:, None])

        assert _ks_pvalue(draws[:, row], log_density) > 1e-3, row


# the collapsed move is off by default (see FrequencyHMC): checked in the exhaustive run
@pytest.mark.parametrize("collapse", [False, pytest.param(True, marks=pytest.mark.exhaustive)],
                         ids=["given-components", "collapsed"])
def test_frequency_hmc_samples_the_exact_conditional(collapse):
    """A one-frequency model: Ω is a scalar under its DP-mixture prior and the hinge; the step
    also redraws β, so Ω's draws follow p(Ω | H, …) with β ~ N(0, I/v) integrated out
    (the reference integrates β by Monte Carlo from its prior).  Given the components the
    prior is the mixture at (π, μ, σ²); collapsed, the step also redraws (μ, σ²) and Ω's
    marginal prior is the normal–inverse-gamma predictive, a Student t with 2a₀ degrees of
    freedom and scale² b₀(1 + 1/κ₀)/a₀ whatever the weights (written here from the
    textbook formula, not from the package)."""
    rng = np.random.default_rng(3)
    X = [rng.normal(size=(6, 2)), rng.normal(size=(6, 2))]
    y = np.array([0, 1, 1, 0, 1, 0])
    est = M3LAK(latent_dim=1, n_frequencies=1, view_latent_dim=1, n_components=2, C=2.0,
                standardize=False)
    built = est.build_model(X, y)
    spec = HybridSpec.from_built(built)
    if collapse:
        # a light-tailed base measure (2a₀ = 40 degrees of freedom): with the default a₀ = 3
        # the t prior's tails reach the likelihood's far modes at |ω| ≈ 3-6, which one chain
        # visits too rarely to estimate the sd
        spec.spectral = DPMixtureSpectral(n_components=2, a0=20.0, bandwidth=0.3)
    point = built.initial_values(np.random.default_rng(4))
    point["beta"] = np.array([[1.5, -1.0, 0.2]])
    point["H"] = rng.normal(size=(6, 1))
    point["dp_mu"] = np.array([[0.8], [-0.5]])
    # narrow components: with β integrated out, ±ω fit alike and a wide prior gives two modes
    # far apart that a single chain visits too rarely for a KS test
    point["dp_sigma2_log__"] = np.log([[0.3], [0.3]])
    nat = spec.natural(point)
    value = built.model.rvs_to_values
    # four chains: the modes near ±ω exchange slowly, and one chain's effective sample size
    # depends on its floating-point path (one seeded chain of 5000 gave an ESS above 150 on
    # one processor and 72 on another, whose BLAS kernels differ)
    draws = np.stack([
        _run(FrequencyHMC([value[built.model["Omega"]], value[built.model["beta"]]], spec,
                          model=built.model, rng=np.random.default_rng(seed),
                          collapse_components=collapse),
             dict(point), "Omega", 4000, 1)[:, 0, 0]
        for seed in np.random.SeedSequence(5).spawn(4)])  # (4 chains, 4000)
    h, y_pm = nat["H"][:, 0], spec.targets[:, 0]
    betas = np.random.default_rng(6).normal(scale=nat["v"] ** -0.5, size=(40_000, 3))
    grid = np.linspace(-6, 6, 481)
    if collapse:
        sp = spec.spectral
        a0, kappa0 = sp.a0, sp.kappa0
        b0 = (a0 - 1.0) * sp.bandwidth**2  # E[σ²] = bandwidth² / m with m = 1
        prior = stats.t.logpdf(grid, df=2 * a0, scale=np.sqrt(b0 * (1 + 1 / kappa0) / a0))
    else:
        prior = np.log(sum(wk * stats.norm.pdf(grid, mk, np.sqrt(sk))
                           for wk, mk, sk in zip(nat["dp_weights"], nat["dp_mu"][:, 0],
                                                 nat["dp_sigma2"][:, 0], strict=True)))
    log_lik = np.empty_like(grid)
    for i, w in enumerate(grid):  # M = 1: φ̃ = [cos ωh, sin ωh, 1]
        f = betas @ np.stack([np.cos(w * h), np.sin(w * h), np.ones_like(h)])
        log_lik[i] = logsumexp(_hinge(f, y_pm[None, :], spec.C).sum(axis=1))
    density = np.exp(prior + log_lik - np.max(prior + log_lik))
    density /= integrate.trapezoid(density, grid)
    cdf = integrate.cumulative_trapezoid(density, grid, initial=0)
    mean = integrate.trapezoid(grid * density, grid)
    reference = {"mean": mean,
                 "sd": np.sqrt(integrate.trapezoid((grid - mean) ** 2 * density, grid)),
                 **{q: np.interp(q, cdf, grid) for q in (0.1, 0.5, 0.9)}}
    # the draws are autocorrelated (the modes near ±ω exchange slowly): compare each summary
    # with its Monte-Carlo standard error rather than with a KS test that assumes independence
    estimates = _chain_summaries(draws, (0.1, 0.5, 0.9))
    assert float(az.ess(az.convert_to_dataset({"w": draws}))["w"]) > 150
    for name, (value, se) in estimates.items():
        assert abs(value - reference[name]) < 4 * se, (name, value, reference[name], se)


def test_coefficient_hmc_samples_the_hinge_posterior_of_beta_with_lambda_integrated(
        one_dim_model):
    """β | Ω, H under the hinge itself (no augmentation): ``N(β; 0, I/v) Π_n exp(-2C max(0,
    1 - y_n φ̃_nᵀβ))``, a 5-dimensional density here.  The reference is self-normalised
    importance sampling from a multivariate t fitted to a pilot run (10⁶ draws; the t's heavy
    tails keep the weights bounded, since the target has the prior's Gaussian tails); the
    chains' mean, sd and 5/50/95 % quantiles of each β and of two decision values must agree
    within Monte-Carlo error (the chains' MCSE and the reference's)."""
    built, point, spec = one_dim_model
    nat = spec.natural(point)
    draws = np.stack([_run(CoefficientHMC([built.model.rvs_to_values[built.model["beta"]]],
                                          spec, bandwidth=False, model=built.model,
                                          rng=np.random.default_rng(seed)),
                           dict(point), "beta", 1500, 1)[:, 0, :]
                      for seed in range(21, 25)])  # (4 chains, 1500, 5)
    Phi = _features(nat["H"], nat["Omega"])
    probe = _features(np.array([[0.3], [-1.2]]), nat["Omega"])
    prior = stats.norm(scale=nat["v"] ** -0.5)

    def log_target(beta):
        return prior.logpdf(beta).sum(axis=1) + _hinge(beta @ Phi.T, spec.targets[:, 0],
                                                       spec.C).sum(axis=1)

    rng = np.random.default_rng(12)
    pilot = prior.rvs(size=(200_000, Phi.shape[1]), random_state=rng)
    w = _normalised(log_target(pilot) - prior.logpdf(pilot).sum(axis=1))
    # wider than the pilot's posterior covariance, with polynomial tails: the weights stay
    # bounded wherever the fit is off
    proposal = stats.multivariate_t(loc=w @ pilot, shape=1.5 * np.cov(pilot.T, aweights=w),
                                    df=5)
    sample = proposal.rvs(size=1_000_000, random_state=rng)
    w = _normalised(log_target(sample) - proposal.logpdf(sample))
    assert 1.0 / np.sum(w**2) > 300_000  # the importance sampler's own ESS

    chains = np.concatenate([draws, draws @ probe.T], axis=2)
    reference = np.concatenate([sample, sample @ probe.T], axis=1)
    _weighted_summaries_agree(chains, reference, w, min_ess=1000)


def _chain_summaries(chains, probs):
    """Mean, sd and the ``probs`` quantiles of pooled chains (chain, draw), each with its
    Monte-Carlo standard error: ``{name: (value, mcse)}``."""
    ds = az.convert_to_dataset({"x": chains})
    x = chains.ravel()
    with without_numba():  # ArviZ's numba path of the sd's MCSE fails on arrays
        return {"mean": (x.mean(), float(az.mcse(ds)["x"])),
                "sd": (x.std(ddof=1), float(az.mcse(ds, method="sd")["x"])),
                **{q: (np.quantile(x, q), float(az.mcse(ds, method="quantile", prob=q)["x"]))
                   for q in probs}}


def _weighted_summaries_agree(chains, reference, w, min_ess, batches=20):
    """Each quantity of ``chains`` (chain, draw, k) against the self-normalised importance sample
    ``reference`` (n, k) with weights w: mean, sd and 5/50/95 % quantiles within four combined
    Monte-Carlo standard errors, the chains' MCSE and the reference's.  Several chains,
    because one chain's MCSE understates the error of its sd and tail quantiles where modes
    exchange slowly (one chain of 4000 draws: z-scores spread 1.4x wider than N(0, 1); four
    of 1500: 0.7-1.1x, over repeats).  The reference's SE comes from ``batches`` independent
    parts of its sample, each normalised on its own (the spread of their estimates over
    √batches): the weights' ESS alone understates it when a few large weights dominate
    (prior draws as the proposal: 1/Σw² said 19 000 for a sample whose sd of β varied 3x
    more between repeats than that ESS allows).  Batches can understate it too where a
    handful of weights dominate the whole sample, so a reference should have an ESS far
    above the chains'."""
    def summaries(x, w):
        w = w / w.sum()
        mean = float(w @ x)
        order = np.argsort(x)
        cdf = np.cumsum(w[order]) - 0.5 * w[order]
        return {"mean": mean, "sd": float(np.sqrt(w @ (x - mean) ** 2)),
                **{q: float(np.interp(q, cdf, x[order])) for q in (0.05, 0.5, 0.95)}}

    parts = np.array_split(np.arange(len(w)), batches)
    for j in range(chains.shape[2]):
        ref = reference[:, j]
        expected = summaries(ref, w)
        per_batch = [summaries(ref[p], w[p]) for p in parts]
        assert float(az.ess(az.convert_to_dataset({"x": chains[:, :, j]}))["x"]) > min_ess, j
        for name, (value, se) in _chain_summaries(chains[:, :, j], (0.05, 0.5, 0.95)).items():
            ref_se = np.std([b[name] for b in per_batch], ddof=1) / np.sqrt(batches)
            assert abs(value - expected[name]) < 4 * np.hypot(se, ref_se), (
                j, name, value, expected[name], se, ref_se)


def test_coefficient_hmc_with_bandwidth_samples_the_joint_along_the_scale_orbit(one_dim_model):
    """With ``bandwidth=True`` the step moves β and the frequencies' log scale ℓ together:
    ``(Ω, μ, σ²) = (e^ℓ Ω₀, e^ℓ μ₀, e^{2ℓ} σ₀²)`` from the chain's start.  A group move
    (Liu & Sabatti 2000) leaves the joint invariant when ℓ follows, on the Haar measure dℓ,
    the joint density at the moved point times the map's Jacobian ``e^{ℓ (M + K + 2K)}``
    (M frequencies, K component means, K variances scaled by e^{2ℓ}).  Written here from
    scipy's densities: β ~ N(0, I/v), the hinge, each frequency from the Gaussian mixture,
    μ_k ~ N(0, σ²_k/κ₀), σ²_k ~ InvGamma(a₀, b₀).  The reference draws β from its prior and ℓ
    from a wide normal and weights them (10⁶ draws, ESS about 4000: its batch SE is the
    rougher one here); the chains' mean, sd and quantiles of ℓ, each β and two decision
    values (four chains) must agree within Monte-Carlo error."""
    built, point, spec = one_dim_model
    nat = spec.natural(point)
    Omega0, mu0, sigma0 = nat["Omega"][:, 0], nat["dp_mu"][:, 0], nat["dp_sigma2"][:, 0]

    def chain(seed, n_draws=1500):
        step = CoefficientHMC([built.model.rvs_to_values[built.model["beta"]]], spec,
                              n_tune=300, model=built.model, rng=np.random.default_rng(seed))
        current = dict(point)
        step.tune = True
        for _ in range(300):
            current, _ = step.step(current)
        step.stop_tuning()
        betas, scales = [], []
        for _ in range(n_draws):
            current, _ = step.step(current)
            betas.append(current["beta"][0].copy())
            scales.append(np.log(current["Omega"][0, 0] / nat["Omega"][0, 0]))
        # the other scaled quantities followed Ω exactly
        last = spec.natural(current)
        c = np.exp(scales[-1])
        np.testing.assert_allclose(last["Omega"][:, 0], c * Omega0, rtol=1e-10)
        np.testing.assert_allclose(last["dp_mu"][:, 0], c * mu0, rtol=1e-10)
        np.testing.assert_allclose(last["dp_sigma2"][:, 0], c**2 * sigma0, rtol=1e-10)
        return np.array(betas), np.array(scales)

    runs = [chain(seed) for seed in range(31, 35)]

    sp, weights = spec.spectral, nat["dp_weights"]
    M, K = len(Omega0), len(mu0)
    rng = np.random.default_rng(14)
    n = 1_000_000
    beta = rng.normal(scale=nat["v"] ** -0.5, size=(n, 2 * M + 1))
    proposal_sd = 0.6
    ell = rng.normal(scale=proposal_sd, size=n)
    cs = np.exp(ell)[:, None]
    S = nat["H"][:, 0][None, :, None] * (cs * Omega0)[:, None, :]          # (n, N, M)
    Phi_beta = (np.einsum("inm,im->in", np.cos(S), beta[:, :M])
                + np.einsum("inm,im->in", np.sin(S), beta[:, M:2 * M])) / np.sqrt(M) \
        + beta[:, [2 * M]]
    log_w = _hinge(Phi_beta, spec.targets[:, 0], spec.C).sum(axis=1)
    omega, mu, sigma2 = cs * Omega0, cs * mu0, cs**2 * sigma0
    mixture = logsumexp(np.log(weights)[None, None, :] + stats.norm.logpdf(
        omega[:, :, None], mu[:, None, :], np.sqrt(sigma2)[:, None, :]), axis=2)
    log_w += mixture.sum(axis=1)
    log_w += stats.norm.logpdf(mu, 0.0, np.sqrt(sigma2 / sp.kappa0)).sum(axis=1)
    log_w += stats.invgamma.logpdf(sigma2, sp.a0, scale=sp.b0(1)).sum(axis=1)
    log_w += (M + 3 * K) * ell - stats.norm.logpdf(ell, 0.0, proposal_sd)
    w = _normalised(log_w)
    assert 1.0 / np.sum(w**2) > 3_000  # the importance sampler's own ESS (about 4 000)

    probe = np.array([0.3, -1.2])
    def decision(b, log_scale):
        S = probe[None, :, None] * (np.exp(log_scale)[:, None] * Omega0)[:, None, :]
        return (np.einsum("inm,im->in", np.cos(S), b[:, :M])
                + np.einsum("inm,im->in", np.sin(S), b[:, M:2 * M])) / np.sqrt(M) \
            + b[:, [2 * M]]

    chains = np.stack([np.column_stack([scales, betas, decision(betas, scales)])
                       for betas, scales in runs])
    reference = np.column_stack([ell, beta, decision(beta, ell)])
    assert min(np.std(scales) for _, scales in runs) > 0.05  # the scale does move
    _weighted_summaries_agree(chains, reference, w, min_ess=400)


class _FixedNormals:
    """A stand-in generator whose ``standard_normal`` returns given values."""

    def __init__(self, values):
        self.values = np.asarray(values, dtype=float)

    def standard_normal(self, shape):
        return self.values.reshape(shape)


def test_coefficient_hmc_metric_depends_on_the_reference_not_on_the_moved_bandwidth(
        one_dim_model):
    """The joint move rescales Ω's columns, so β's metric must not depend on their norms:
    two states on one orbit (Ω and cΩ with μ, σ² moved alike) that draw the same absolute
    reference (offsets δ and δ - log c) get identical whitening factors, and the reference's
    density ``N(δ; ℓ, sd²)`` enters the target so that the pair (state, reference) is what
    the trajectory samples.  Whitened at the current Ω instead, the factors would differ by
    the bandwidth change."""
    built, point, spec = one_dim_model
    step = CoefficientHMC([built.model.rvs_to_values[built.model["beta"]]], spec,
                          model=built.model, rng=np.random.default_rng(0))
    step.lam_average.total, step.lam_average.count = np.full(spec.targets.shape, 3.0), 1
    nat = spec.natural(point)
    c = 1.7
    moved = spec.natural(spec.scaled_frequencies(dict(point), nat, c))
    sd = step.reference_sd_factor * step.log_scale_sd
    eps = np.array([0.4])
    step.rng = _FixedNormals(eps)
    chols, (offset, ref_sd) = step.reference_whitening(nat)
    step.rng = _FixedNormals(eps - np.log(c) / sd)
    chols_moved, (offset_moved, _) = step.reference_whitening(moved)
    np.testing.assert_allclose(offset_moved, offset - np.log(c))
    np.testing.assert_allclose(chols_moved[0], chols[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ref_sd, sd)
    # at the current Ω the factors would differ: the test can tell the two apart
    at_current = step._whitening(spec.features(moved["H"], moved["Omega"]), moved["v"])
    assert np.abs(at_current[0] - chols[0]).max() > 1e-3
    # the target carries the reference's density in ℓ: log N(δ; ℓ, sd²) up to a constant
    from bayesmv.inference.hmc import CoefficientBandwidthTarget
    target = CoefficientBandwidthTarget(spec, nat, chols, step.log_scale_sd, (offset, ref_sd))
    plain = CoefficientBandwidthTarget(spec, nat, chols, step.log_scale_sd)
    x = target.to_x(nat["beta"])
    x[-1] = 0.3 / step.log_scale_sd[0]  # ℓ = 0.3
    expected = stats.norm.logpdf(offset[0], 0.3, ref_sd[0]) - stats.norm.logpdf(0, 0, ref_sd[0])
    assert target.logp_grad(x)[0] - plain.logp_grad(x)[0] == pytest.approx(expected, abs=1e-9)


def _directional_ks_pvalue(draws, log_density, direction, half_width=8.0, n_grid=801):
    """KS p-value of the projections ``draws @ direction`` against the projection of a 2-D
    density: on a grid rotated so that its first axis is ``direction`` (unit Jacobian), the
    density is summed over the second axis and the marginal integrated to a CDF."""
    a = np.asarray(direction, float) / np.linalg.norm(direction)
    b = np.array([-a[1], a[0]])
    s = np.linspace(-half_width, half_width, n_grid)
    S, T = np.meshgrid(s, s, indexing="ij")
    points = S.reshape(-1, 1) * a + T.reshape(-1, 1) * b
    logd = log_density(points).reshape(S.shape)
    marginal = np.exp(logd - logd.max()).sum(axis=1)
    cdf = integrate.cumulative_trapezoid(marginal, s, initial=0)
    cdf /= cdf[-1]
    return stats.kstest(draws @ a, lambda x: np.interp(x, s, cdf)).pvalue


def test_joint_coefficient_bandwidth_gradient_is_exact_and_its_float32_forces_follow_it(
        central_gradient):
    """The joint (β, ℓ) target of a three-class model with a two-column latent: its float64
    gradient against central finite differences of its own log density, and the float32
    leapfrog forces (rearranged algebra, every task) against that gradient."""
    from bayesmv.inference.gibbs import beta_precision_and_linear
    from bayesmv.inference.hmc import CoefficientBandwidthTarget

    rng = np.random.default_rng(3)
    n = 30
    X = [rng.normal(size=(n, 4)), rng.normal(size=(n, 3))]
    y = np.arange(n) % 3
    est = M3LAK(latent_dim=2, n_frequencies=5, view_latent_dim=1, n_components=3,
                standardize=False)
    built = est.build_model(X, y)
    spec = HybridSpec.from_built(built)
    point = built.initial_values(np.random.default_rng(4))
    point["H"] = rng.normal(size=(n, 2))
    point["beta"] = rng.normal(size=point["beta"].shape)
    nat = spec.natural(point)
    Phi = spec.features(nat["H"], nat["Omega"])
    chols = [beta_precision_and_linear(Phi, spec.targets[:, t], np.full(n, 2.0), spec.C,
                                       nat["v"])[0] for t in range(spec.targets.shape[1])]
    target = CoefficientBandwidthTarget(spec, nat, chols, np.array([0.07, 0.2]))
    x = target.to_x(nat["beta"]) + rng.normal(scale=0.05, size=target.to_x(nat["beta"]).shape)
    logp, grad = target.logp_grad(x)
    numeric = central_gradient(lambda y: target.logp_grad(y)[0], x)
    # the hinge has kinks: no decision value sits within the steps' reach of one here
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-5 * np.abs(grad).max())
    forces = target.logp_grad(x, np.float32)[1]
    np.testing.assert_allclose(forces, grad, rtol=0, atol=1e-4 * np.abs(grad).max())
    assert target.logp_grad(x, np.float32)[0] is None  # forces only: the energy is float64


def test_latent_hmc_samples_the_exact_correlated_two_dim_row_conditional():
    """m = 2: each row's conditional is a correlated 2-D density (the loadings W_0 are nearly
    collinear, so the view pins h_1 + h_2 much more than h_1 - h_2) bent by the hinge.
    Written independently here and normalised on a grid, its projections on the two axes and
    on both diagonals are compared with the whitened, batched HMC's draws."""
    rng = np.random.default_rng(6)
    n = 3
    X = [rng.normal(size=(n, 3)), rng.normal(size=(n, 2))]
    X[1][2] = np.nan  # the last sample misses view 1
    y = np.array([0, 1, 1])
    est = M3LAK(latent_dim=2, n_frequencies=2, view_latent_dim=1, n_components=2, C=1.5,
                standardize=False)
    built = est.build_model(X, y)
    point = built.initial_values(np.random.default_rng(7))
    point["W_0"] = np.array([[1.5, 1.2], [0.9, 1.0], [-0.4, -0.3]])
    point["V_0"] = np.array([[0.3], [-0.2], [0.1]])
    point["W_1"] = np.array([[0.5, -0.2], [0.1, 0.4]])
    point["V_1"] = np.array([[0.2], [0.3]])
    point["tau_log__"] = np.log(np.array([2.0, 1.5]))
    point["beta"] = np.array([[1.2, -0.8, 0.5, 1.0, 0.3]])
    point["Omega"] = np.array([[1.1, -0.4], [-0.6, 0.9]])
    point["H"] = rng.normal(size=(n, 2))
    spec = HybridSpec.from_built(built)
    nat = spec.natural(point)
    step = LatentHMC([built.model.rvs_to_values[built.model["H"]]], spec,
                     model=built.model, rng=np.random.default_rng(8))
    # whitened HMC draws are nearly independent (ESS/draw ≈ 1-2 measured), so no thinning
    draws = _run(step, dict(point), "H", 4000, 1)  # (4000, n, 2)
    for row in range(n):
        def log_density(h, row=row):
            return _row_log_density(spec, nat, row, h)

        for direction in ([1, 0], [0, 1], [1, 1], [1, -1]):
            p = _directional_ks_pvalue(draws[:, row], log_density, direction,
                                       half_width=6.0, n_grid=401)
            assert p > 1e-3, (row, direction, p)
    # the target really is correlated where the view is seen: the draws say so too
    assert abs(np.corrcoef(draws[:, 0].T)[0, 1]) > 0.3


def test_latent_gaussian_factor_is_the_factor_analysis_posterior_in_several_dimensions():
    """The HMC's whitening (and prediction) rest on the Gaussian factor of each row,
    ``N(h; 0, I) Π_v N(x_v; W_v h, V_v V_vᵀ + I/τ_v)`` ∝ ``N(h; P⁻¹ Σ_v W_vᵀΨ_v⁻¹x_v, P⁻¹)``
    with ``P = I + Σ_v W_vᵀ Ψ_v⁻¹ W_v`` over the row's observed views (m = 3 here, where a
    transposed loading or a mixed-up pattern would show)."""
    from bayesmv.components.latent import latent_gaussian

    rng = np.random.default_rng(9)
    m = 3
    W = [rng.standard_normal((4, m)), rng.standard_normal((2, m))]
    V = [rng.standard_normal((4, 2)), rng.standard_normal((2, 2))]
    tau = np.array([1.7, 0.6])
    X = [rng.standard_normal((5, 4)), rng.standard_normal((5, 2))]
    observed = np.ones((5, 2), dtype=bool)
    observed[3, 1] = observed[4, 0] = False
    index = [np.flatnonzero(observed[:, v]) for v in range(2)]
    patterns, pattern = np.unique(observed, axis=0, return_inverse=True)
    draw = {"W_0": W[0], "W_1": W[1], "V_0": V[0], "V_1": V[1], "tau": tau}
    mean, chols = latent_gaussian(draw, [X[v][index[v]] for v in range(2)], index, patterns,
                                  pattern.reshape(-1))
    for n in range(5):
        P, linear = np.eye(m), np.zeros(m)
        for v in np.flatnonzero(observed[n]):
            Psi = V[v] @ V[v].T + np.eye(W[v].shape[0]) / tau[v]
            P += W[v].T @ np.linalg.solve(Psi, W[v])
            linear += W[v].T @ np.linalg.solve(Psi, X[v][n])
        L = chols[pattern.reshape(-1)[n]]
        np.testing.assert_allclose(L @ L.T, P, rtol=1e-12)
        np.testing.assert_allclose(mean[n], np.linalg.solve(P, linear), rtol=1e-10, atol=1e-14)


class _SinglePrecisionForcesTarget:
    """A correlated Gaussian whose float32 gradient differs from the exact one by rounding,
    as the HMC targets' float32 leapfrog forces do."""

    force_dtype = np.float32

    def __init__(self, precision: np.ndarray) -> None:
        self.precision = precision

    def logp_grad(self, x: np.ndarray, dtype=np.float64):
        P, xd = self.precision.astype(dtype), x.astype(dtype)
        return -0.5 * float(x @ self.precision @ x), (-(P @ xd)).astype(np.float64)


def test_leapfrog_with_single_precision_forces_is_exactly_reversible():
    """HMC's Metropolis test is exact only for a reversible, volume-preserving proposal: run
    the trajectory back from its end with the momentum flipped and it must return to its
    start to double-precision rounding, though its inner forces are rounded to float32."""
    from types import SimpleNamespace

    import pymc as pm

    rng = np.random.default_rng(0)
    G = rng.standard_normal((5, 5))
    target = _SinglePrecisionForcesTarget(G @ G.T + np.eye(5))
    with pm.Model() as model:  # a step method is made on a model's variables
        x = pm.Normal("x", shape=5)
    # the leapfrog shared by the HMC steps, run on the toy target
    step = LatentHMC([model.rvs_to_values[x]], None, model=model, rng=np.random.default_rng(1))
    x0 = rng.standard_normal(5)
    x1, p0, p1, lp0, lp1 = step._leapfrog(target, x0, 0.05, 12)
    assert lp0 == target.logp_grad(x0)[0] and lp1 == target.logp_grad(x1)[0]
    step.rng = SimpleNamespace(standard_normal=lambda shape: -p1)
    x_back, _, p_back, _, _ = step._leapfrog(target, x1, 0.05, 12)
    np.testing.assert_allclose(x_back, x0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(p_back, -p0, rtol=0, atol=1e-12)


def test_float32_phases_give_float32_features():
    """The leapfrog forces' float32 algebra starts from the features: a float64 constant in
    the map would promote them and silently run the forces in double."""
    from bayesmv.components.features import fourier_features_of_phases

    S = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    Phi = fourier_features_of_phases(np.cos(S), np.sin(S))
    assert Phi.dtype == np.float32
    np.testing.assert_allclose(
        Phi, np.concatenate([np.cos(S), np.sin(S), np.full((4, 1), np.sqrt(3))], 1) / np.sqrt(3),
        rtol=1e-6)


def test_fourier_map_is_one_definition_in_numpy_and_in_the_graph():
    """The graph's features (``xp=pytensor.tensor``) are the NumPy map's, and both are the
    textbook ``[cos Ωz, sin Ωz, √M]/√M`` written out here; a batch axis in front is kept."""
    import pytensor.tensor as pt

    from bayesmv.components.features import fourier_features

    rng = np.random.default_rng(1)
    Z, Omega = rng.standard_normal((2, 6, 3)), rng.standard_normal((5, 3))
    S = Z @ Omega.T
    expected = np.concatenate([np.cos(S), np.sin(S), np.full((2, 6, 1), np.sqrt(5))], -1) / 5**0.5
    np.testing.assert_allclose(fourier_features(Z, Omega), expected, rtol=1e-14)
    np.testing.assert_allclose(fourier_features(Z[0], Omega, constant=False),
                               expected[0, :, :10], rtol=1e-14)
    Om = pt.constant(Omega)
    graph = fourier_features(pt.as_tensor(Z[0]), Om, xp=pt).eval()
    np.testing.assert_allclose(graph, expected[0], rtol=1e-12)
    z, om = pt.matrix("z"), pt.matrix("omega")  # M not static: read from the shape
    symbolic = fourier_features(z, om, xp=pt).eval({z: Z[0], om: Omega})
    np.testing.assert_allclose(symbolic, expected[0], rtol=1e-12)


def test_view_kernels_match_scikit_learn():
    """RBF and linear Grams (the exact per-view kernels, the Nyström and landmark maps) against
    scikit-learn's ``rbf_kernel`` and ``linear_kernel``: an independent implementation."""
    from sklearn.metrics.pairwise import linear_kernel, rbf_kernel

    from bayesmv.components.kernels import squared_distances, view_gram

    rng = np.random.default_rng(2)
    A, B = rng.standard_normal((7, 4)), rng.standard_normal((5, 4))
    np.testing.assert_allclose(view_gram("rbf", A, B, 0.3), rbf_kernel(A, B, gamma=0.3),
                               rtol=1e-12)
    square = view_gram("rbf", A, None, 0.3)
    np.testing.assert_allclose(square, rbf_kernel(A, gamma=0.3), rtol=1e-12)
    assert np.all(np.diag(square) == 1.0) and np.all(np.diag(squared_distances(A, A)) == 0.0)
    np.testing.assert_allclose(view_gram("linear", A, B, None), linear_kernel(A, B), rtol=1e-12)


def test_squared_distances_stay_exact_far_from_the_origin():
    """Features at 1e8 ± 1 (an unstandardised view): the expanded form would cancel 1e16
    against 1e16; SciPy's ``cdist`` (differences first) is the reference."""
    from scipy.spatial.distance import cdist

    from bayesmv.components.kernels import squared_distances

    rng = np.random.default_rng(3)
    A = 1e8 + rng.standard_normal((6, 2))
    B = 1e8 + rng.standard_normal((4, 2))
    np.testing.assert_allclose(squared_distances(A, B), cdist(A, B, "sqeuclidean"),
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(squared_distances(A), cdist(A, A, "sqeuclidean"),
                               rtol=1e-6, atol=1e-6)
