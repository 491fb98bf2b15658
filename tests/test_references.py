"""Independent references for results that were only compared with the code's own pieces.

* MVL-SVM's MAP against the soft-margin primal solved here by a generic solver (SLSQP on
  ``½||θ||² + c Σ ξ`` with the margin constraints), not by the libsvm the model calls.
* ϱTMV-RKM's Laplace predictive against the textbook Gaussian-process predictive with a flat
  bias (Rasmussen & Williams 2006, eqs. 2.41–2.42), with the model's kernel written out here.
* The Gaussian and Dirichlet-process draw routines behind M³LAK and ϱTMV-RKM against their
  exact distributions (Kolmogorov–Smirnov and moment tests with fixed seeds): a draw from a
  Gaussian given its precision's Cholesky factor, the exact joint posterior draws of the
  kernel and feature posteriors, and one blocked-Gibbs sweep of the DP mixture, whose output
  is a finite mixture over the assignments that is computed here exactly.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import integrate, linalg, optimize, stats
from scipy.spatial.distance import cdist
from scipy.special import betaln, expit

from bayesmv import M3LAK, MVLSVM, RhoTMVRKM
from bayesmv.inference.conjugate import FeaturePosterior, KernelPosterior
from bayesmv.inference.gibbs import (
    DPMixtureGibbs,
    collapsed_assignment_sweep,
    draw_gaussian_from_precision,
)
from bayesmv.inference.spec import HybridSpec

#: KS p-values below this fail (fixed seeds: each test is deterministic)
P_MIN = 1e-3


def _views(n, sizes, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, d)) for d in sizes]


# ------------------------------------------------------------------- MVL-SVM's MAP
def _primal_svm(Phi: np.ndarray, y: np.ndarray, cost: float) -> tuple[np.ndarray, float]:
    """``min ½||θ||² + cost Σ ξ_n`` s.t. ``y_n(θᵀφ_n + b) ≥ 1 - ξ_n``, ``ξ ≥ 0``, b free —
    the soft-margin SVM as the quadratic programme it is, solved by SLSQP."""
    N, p = Phi.shape

    def split(z):
        return z[:p], z[p], z[p + 1:]

    def objective(z):
        theta, _, xi = split(z)
        return 0.5 * theta @ theta + cost * xi.sum()

    def gradient(z):
        theta, _, _ = split(z)
        return np.concatenate([theta, [0.0], np.full(N, cost)])

    margin_jac = np.concatenate([y[:, None] * Phi, y[:, None], np.eye(N)], axis=1)
    constraints = [{"type": "ineq", "fun": lambda z: margin_jac @ z - 1.0,
                    "jac": lambda z: margin_jac}]
    bounds = [(None, None)] * (p + 1) + [(0.0, None)] * N
    z0 = np.concatenate([np.zeros(p + 1), np.ones(N)])  # feasible: θ = 0, b = 0, ξ = 1
    res = optimize.minimize(objective, z0, jac=gradient, bounds=bounds,
                            constraints=constraints, method="SLSQP",
                            options={"ftol": 1e-12, "maxiter": 2000})
    assert res.success, res.message
    theta, b, _ = split(res.x)
    return theta, float(b)


def _primal_value(Phi, y, cost, theta, b) -> float:
    return 0.5 * theta @ theta + cost * np.maximum(0.0, 1.0 - y * (Phi @ theta + b)).sum()


@pytest.mark.parametrize("n_classes", [2, 3])
def test_mvlsvm_map_solves_the_svm_primal_of_a_generic_qp_solver(n_classes):
    rng = np.random.default_rng(0)
    N = 45
    labels = np.arange(N) % n_classes
    shift = np.array([[0.0, 0.0], [1.0, 0.5], [-0.5, 1.0]])[labels]
    X = [rng.standard_normal((N, 3)) + np.c_[shift, shift[:, :1]],
         rng.standard_normal((N, 2)) + shift[:, ::-1]]
    Xt = [rng.standard_normal((15, 3)), rng.standard_normal((15, 2))]
    C = 40.0
    est = MVLSVM(n_landmarks=5, C=C, tol=1e-9, random_seed=1).fit(X, labels)
    Phi, Phi_t = est.transform(X), est.transform(Xt)
    cost = C / N  # the paper's (C/N) Σ hinge
    beta = est.idata_.posterior["beta"].values[0, 0]
    bias = est.idata_.posterior["bias"].values[0, 0]
    tasks = [np.where(labels == 1, 1.0, -1.0)] if n_classes == 2 else \
        [np.where(labels == k, 1.0, -1.0) for k in range(n_classes)]
    reference = []
    for t, y in enumerate(tasks):
        theta, b = _primal_svm(Phi, y, cost)
        # some points strictly inside the margin band: b is pinned, the solution unique
        inside = np.abs(y * (Phi @ theta + b) - 1.0) > 1e-4
        assert 0 < inside.sum() < N
        mine, ref = _primal_value(Phi, y, cost, beta[t], bias[t]), _primal_value(
            Phi, y, cost, theta, b)
        assert mine <= ref * (1 + 1e-7)  # the MAP is at least as good as SLSQP's optimum
        assert mine >= ref * (1 - 1e-6)
        np.testing.assert_allclose(beta[t], theta, atol=1e-4 * np.abs(theta).max())
        reference.append(Phi_t @ theta + b)
    reference = np.column_stack(reference)
    dec = est.decision_function(Xt)
    dec = dec[:, None] if dec.ndim == 1 else dec
    np.testing.assert_allclose(dec, reference, atol=1e-4 * np.abs(reference).max())


# --------------------------------------------------- ϱTMV-RKM's Laplace predictive
def _rbf(A, B, gamma):
    return np.exp(-gamma * cdist(A, B, "sqeuclidean"))


def _gp_flat_bias_predictive(K, K_cross, k_diag, y, noise):
    """Rasmussen & Williams eqs. 2.41–2.42 with ``h(x) = 1`` and a vague prior on its
    coefficient: mean and variance of ``g(x*) + b`` given ``y = g + b + ε``."""
    Ky = K + noise * np.eye(len(K))
    H, H_star = np.ones((1, len(K))), np.ones((1, len(K_cross)))
    Ky_inv_y = np.linalg.solve(Ky, y)
    Ky_inv_H = np.linalg.solve(Ky, H.T)
    A = H @ Ky_inv_H                                      # H Ky⁻¹ Hᵀ
    beta = np.linalg.solve(A, H @ Ky_inv_y)               # β̄
    R = H_star - H @ np.linalg.solve(Ky, K_cross.T)       # R = H* - H Ky⁻¹ K*
    mean = K_cross @ Ky_inv_y + (R.T @ beta).ravel()
    cov_g = k_diag - np.sum(K_cross.T * np.linalg.solve(Ky, K_cross.T), axis=0)
    var = cov_g + np.sum(R * np.linalg.solve(A, R), axis=0)
    return mean, var


def _expected_sigmoid_by_quadrature(mean, var, scale):
    """E[sigmoid(scale · h)], h ~ N(mean, var), by adaptive quadrature (QUADPACK), split at
    the sigmoid's centre."""
    out = []
    for m, sd in zip(mean, np.sqrt(var), strict=True):
        def integrand(h, m=m, sd=sd):
            return expit(scale * h) * stats.norm.pdf(h, m, sd)

        lo, hi = min(m - 12 * sd, 0.0), max(m + 12 * sd, 0.0)
        out.append(sum(integrate.quad(integrand, a, b, epsabs=1e-13, epsrel=1e-12)[0]
                       for a, b in ((lo, 0.0), (0.0, hi))))
    return np.array(out)


def test_rhotmvrkm_laplace_predictive_is_the_gp_predictive_with_a_flat_bias():
    """The model (the class docstring): ``y = b + g + ε``, ``g ~ GP(0, K_ϱ/(ητ²))``,
    ``ε ~ N(0, λ/τ²)``, flat b, ``K_ϱ = (1-ϱ)ΣK_v + ϱ ΠK_v``, ``τ = (1-ϱ)V + ϱ``; the Laplace
    predictive of ``h = g(x*) + b`` is then the GP predictive with the bias's variance."""
    X, Xt = _views(30, (3, 2), seed=1), _views(12, (3, 2), seed=2)
    y = (X[0][:, 0] - X[1][:, 1] + 0.3 * np.random.default_rng(3).standard_normal(30) > 0)
    rho, lam, eta, gammas = 0.3, 0.4, 1.7, (0.35, 0.6)
    # calibration="likelihood": the model's own predictive (the default is LOO temperature)
    est = RhoTMVRKM(rho=rho, alpha=lam, eta=eta, gamma=list(gammas), inference="laplace",
                    calibration="likelihood", standardize=False, draws=10,
                    random_seed=0).fit(X, y.astype(int))
    V, tau = 2, (1 - rho) * 2 + rho

    def kernel(A, B):
        Ks = [_rbf(a, b, g) for a, b, g in zip(A, B, gammas, strict=True)]
        return ((1 - rho) * sum(Ks) + rho * np.prod(Ks, axis=0)) / (eta * tau**2)

    k_diag = np.full(12, ((1 - rho) * V + rho) / (eta * tau**2))  # RBF: k(x, x) = 1 per view
    mean, var = _gp_flat_bias_predictive(kernel(X, X), kernel(Xt, X), k_diag,
                                         np.where(y, 1.0, -1.0), lam / tau**2)
    model_mean, model_var = est._model_predictive(Xt)
    np.testing.assert_allclose(model_mean[:, 0], mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(model_var, var, rtol=1e-8)
    assert var.min() > 0.05 * var.max()  # the bias's share keeps them away from zero
    # predict_proba: the normalised Gaussian likelihood sigmoid(2τ²h/λ), averaged over h
    p = _expected_sigmoid_by_quadrature(mean, var, 2 * tau**2 / lam)
    np.testing.assert_allclose(est.predict_proba(Xt)[:, 1], p, rtol=0, atol=1e-9)


def test_rhotmvrkm_random_feature_variance_is_the_gp_variance_of_the_feature_kernel():
    """With random features the model is Bayesian linear regression ``g = Ψθ``, θ ~ N(0, I),
    flat b: by the weight-space / function-space equivalence its predictive variance is the
    GP one (R&W eq. 2.42) with the kernel ``Ψ Ψᵀ``."""
    X, Xt = _views(40, (3, 2), seed=4), _views(10, (3, 2), seed=5)
    y = (X[0][:, 1] + X[1][:, 0] > 0).astype(int)
    rho, lam, eta = 0.6, 0.5, 1.3
    est = RhoTMVRKM(rho=rho, alpha=lam, eta=eta, gamma=[0.4, 0.7], n_frequencies=15,
                    inference="laplace", standardize=False, draws=10,
                    random_seed=0).fit(X, y)
    tau = (1 - rho) * 2 + rho

    def design(views):
        per_view, joint = est._rff().blocks(views)
        blocks = [np.sqrt(1 - rho) * B for B in per_view] + [np.sqrt(rho) * joint]
        return np.concatenate(blocks, axis=1) / (tau * np.sqrt(eta))

    Psi, Psi_t = design(X), design(Xt)
    mean, var = _gp_flat_bias_predictive(Psi @ Psi.T, Psi_t @ Psi.T,
                                         np.sum(Psi_t**2, axis=1), 2.0 * y - 1, lam / tau**2)
    model_mean, model_var = est._model_predictive(Xt)
    np.testing.assert_allclose(model_mean[:, 0], mean, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(model_var, var, rtol=1e-7)


# ------------------------------------------------------------ Gaussian draw routines
def _assert_gaussian(draws, mean, cov):
    """Draws (n, d) follow N(mean, cov): KS on every marginal and on the squared Mahalanobis
    distance (χ²_d: checks the whole covariance), and the sample mean within 5 standard
    errors."""
    n, d = draws.shape
    sd = np.sqrt(np.diag(cov))
    for j in range(d):
        assert stats.kstest(draws[:, j], stats.norm(mean[j], sd[j]).cdf).pvalue > P_MIN, j
    centred = draws - mean
    maha = np.sum(centred * np.linalg.solve(cov, centred.T).T, axis=1)
    assert stats.kstest(maha, stats.chi2(d).cdf).pvalue > P_MIN
    assert np.all(np.abs(centred.mean(axis=0)) < 5 * sd / np.sqrt(n))


def test_draw_gaussian_from_precision_has_the_inverse_covariance():
    rng = np.random.default_rng(10)
    P = np.array([[4.0, 1.5, -0.8], [1.5, 2.0, 0.3], [-0.8, 0.3, 1.0]])  # a precision
    mean = np.array([0.5, -1.0, 2.0])
    n = 20000
    draws = draw_gaussian_from_precision(np.repeat(mean[:, None], n, axis=1),
                                         linalg.cholesky(P, lower=True), rng).T
    _assert_gaussian(draws, mean, np.linalg.inv(P))
    # one column at a time (as the Gibbs blocks call it) is the same distribution
    single = np.array([draw_gaussian_from_precision(mean, linalg.cholesky(P, lower=True), rng)
                       for _ in range(4000)])
    _assert_gaussian(single, mean, np.linalg.inv(P))


def _joint_posterior_with_vague_bias(K, y, noise, bias_var=1e6):
    """Posterior of u = (g, b) for ``y = g + b1 + ε``, ``g ~ N(0, K)``, ``b ~ N(0, B)``, by
    Gaussian conditioning in covariance form; B large stands in for the flat prior (the
    error is O(1/B))."""
    N = len(K)
    prior = linalg.block_diag(K, [[bias_var]])
    Hobs = np.concatenate([np.eye(N), np.ones((N, 1))], axis=1)
    S = Hobs @ prior @ Hobs.T + noise * np.eye(N)
    gain = prior @ Hobs.T @ np.linalg.inv(S)
    return gain @ y, prior - gain @ Hobs @ prior


def test_kernel_posterior_draws_are_the_exact_joint_posterior_of_g_and_b():
    rng = np.random.default_rng(11)
    Xtr = rng.standard_normal((6, 2))
    K = 0.8 * _rbf(Xtr, Xtr, 0.5)
    y = np.array([1.0, -1.0, 1.0, 1.0, -1.0, -1.0])
    noise = 0.3
    post = KernelPosterior.fit(K, y[:, None], noise)
    g, b = post.draws(K, y[:, None], noise, 20000, rng)
    draws = np.concatenate([g[:, :, 0], b], axis=1)        # (S, N + 1)
    mean, cov = _joint_posterior_with_vague_bias(K, y, noise)
    _assert_gaussian(draws, mean, cov)


def test_feature_posterior_draws_are_the_exact_posterior_of_the_weights():
    """Bayesian linear regression with θ ~ N(0, I) and a flat bias (Bishop 2006 eqs.
    3.53–3.54, the bias's prior precision → 0): draws of [θ; b] against it."""
    rng = np.random.default_rng(12)
    Psi = rng.standard_normal((25, 3))
    y = Psi @ np.array([0.5, -1.0, 0.2]) + 0.7 + 0.4 * rng.standard_normal(25)
    noise = 0.16
    post = FeaturePosterior.fit(Psi, y[:, None], noise)
    draws = post.draws(20000, rng)[:, :, 0]
    Psi1 = np.concatenate([Psi, np.ones((25, 1))], axis=1)
    cov = np.linalg.inv(Psi1.T @ Psi1 / noise + np.diag([1.0, 1.0, 1.0, 0.0]))
    _assert_gaussian(draws, cov @ Psi1.T @ y / noise, cov)


# -------------------------------------------------------- the DP mixture's Gibbs sweep
def _mixture_cdf(weights, dists):
    return lambda x: sum(w * d.cdf(x) for w, d in zip(weights, dists, strict=True))


def _assignment_posterior(Omega, K, alpha, kappa0, a0, b0):
    """Every assignment z of Ω's rows to K components and its exact p(z | Ω), enumerated.

    Written independently of the sampler's sequential predictive: p(z) is the product of
    Beta-function ratios of the truncated stick-breaking prior (each E[v^{n_k} (1 - v)^{T_k}]
    for v ~ Beta(1, α)), and each component's frequencies are jointly multivariate-t per
    dimension with 2a₀ degrees of freedom and shape (b₀/a₀)(I + 11ᵀ/κ₀) (μ ~ N(0, σ²/κ₀),
    σ² ~ InvGamma(a₀, b₀) integrated out).
    """
    M, m = Omega.shape

    def log_prior(z):
        n = np.bincount(z, minlength=K)
        tail = np.cumsum(n[::-1])[::-1] - n
        return sum(betaln(1 + n[k], alpha + tail[k]) - betaln(1, alpha) for k in range(K - 1))

    def log_marginal(w):
        if len(w) == 0:
            return 0.0
        shape = (b0 / a0) * (np.eye(len(w)) + 1.0 / kappa0)
        t = stats.multivariate_t(np.zeros(len(w)), shape, df=2 * a0)
        return sum(t.logpdf(w[:, d]) for d in range(m))

    states = [np.array(z) for z in itertools.product(range(K), repeat=M)]
    log_post = np.array([log_prior(z) + sum(log_marginal(Omega[z == k]) for k in range(K))
                         for z in states])
    weights = np.exp(log_post - log_post.max())
    return states, weights / weights.sum()


def test_collapsed_assignment_sweep_leaves_the_assignments_posterior_invariant():
    """z ~ p(z | Ω) exactly (enumerated by :func:`_assignment_posterior`, independently of
    the scan), one collapsed scan, and z must still follow p(z | Ω).  Independent starting
    draws make the outputs independent, so a chi-square test applies.
    """
    rng = np.random.default_rng(21)
    K, alpha, kappa0, a0, b0 = 3, 0.7, 2.0, 3.0, 0.8
    Omega = np.array([[0.2, -0.1], [1.5, 0.9], [1.3, 1.2]])
    M = Omega.shape[0]
    states, exact = _assignment_posterior(Omega, K, alpha, kappa0, a0, b0)
    assert exact.min() > 1e-3  # every state is visited often enough for the test

    n = 8000
    start = rng.choice(len(states), size=n, p=exact)
    index = {tuple(z): i for i, z in enumerate(states)}
    out = np.bincount([index[tuple(collapsed_assignment_sweep(Omega, states[i], K, alpha,
                                                              kappa0, a0, b0, rng))]
                       for i in start], minlength=len(states))
    assert stats.chisquare(out, exact * n).pvalue > P_MIN
    # and it moves: from every frequency in one component it reaches the others
    moved = [collapsed_assignment_sweep(Omega, np.zeros(M, int), K, alpha, kappa0, a0, b0, rng)
             for _ in range(200)]
    assert len({tuple(z) for z in moved}) > 5


def _tiny_dp_mixture(collapsed_sweeps: int):
    """A DPMixtureGibbs step on M = 2 one-dimensional frequencies and K = 2 components, and a
    state: (step, point, α, κ₀, a₀, b₀, ω)."""
    rng = np.random.default_rng(13)
    X = [rng.standard_normal((4, 2)), rng.standard_normal((4, 2))]
    alpha = 1.3
    est = M3LAK(latent_dim=1, n_frequencies=2, view_latent_dim=1, n_components=2,
                concentration=alpha, bandwidth=1.2, standardize=False)
    built = est.build_model(X, np.array([0, 1, 1, 0]))
    spec = HybridSpec.from_built(built)
    sp = spec.spectral
    b0 = (sp.a0 - 1.0) * 1.2**2 / 1  # E[σ²] = b0/(a0 - 1) = bandwidth²/m with m = 1

    omega = np.array([0.3, -0.4])
    stick, mu, sigma2 = 0.6, np.array([0.5, -0.6]), np.array([0.8, 1.4])
    point = built.initial_values(np.random.default_rng(14))
    point["Omega"] = omega[:, None]
    point["dp_sticks_logodds__"] = np.log([stick / (1 - stick)])
    point["dp_mu"] = mu[:, None]
    point["dp_sigma2_log__"] = np.log(sigma2)[:, None]
    model = built.model
    step = DPMixtureGibbs([model.rvs_to_values[model[name]]
                           for name in ("dp_sticks", "dp_sigma2", "dp_mu")],
                          spec, collapsed_sweeps=collapsed_sweeps, model=model,
                          rng=np.random.default_rng(15))
    return step, point, alpha, sp.kappa0, sp.a0, b0, omega


def _nig_laws(z, omega, alpha, kappa0, a0, b0):
    """Given the assignments z: the stick's Beta law, and per component the InvGamma law of
    σ²_k and the Student t law of μ_k (σ² integrated out) of the normal–inverse-gamma
    posterior (Murphy 2007 §3)."""
    counts = np.bincount(z, minlength=2)
    sigma_laws, mu_laws = [], []
    for k in range(2):
        w = omega[z == k]
        nk, xbar = len(w), (w.mean() if len(w) else 0.0)
        kn, an = kappa0 + nk, a0 + nk / 2
        bn = b0 + 0.5 * np.sum((w - xbar) ** 2) + kappa0 * nk * xbar**2 / (2 * kn)
        sigma_laws.append(stats.invgamma(an, scale=bn))
        mu_laws.append(stats.t(2 * an, loc=nk * xbar / kn, scale=np.sqrt(bn / (an * kn))))
    return stats.beta(1 + counts[0], alpha + counts[1]), sigma_laws, mu_laws


def _check_dp_outputs(out, weights, laws):
    """KS tests of the outputs' stick, σ²_k and μ_k against the mixtures over z of ``laws``
    (:func:`_nig_laws` per z) with ``weights``."""
    sticks = expit(np.array([o["dp_sticks_logodds__"][0] for o in out]))
    sig = np.exp(np.array([o["dp_sigma2_log__"][:, 0] for o in out]))
    mus = np.array([o["dp_mu"][:, 0] for o in out])
    assert stats.kstest(sticks, _mixture_cdf(weights, [law[0] for law in laws])).pvalue > P_MIN
    for k in range(2):
        assert stats.kstest(sig[:, k], _mixture_cdf(
            weights, [law[1][k] for law in laws])).pvalue > P_MIN, k
        assert stats.kstest(mus[:, k], _mixture_cdf(
            weights, [law[2][k] for law in laws])).pvalue > P_MIN, k


def test_dp_mixture_gibbs_sweep_draws_from_its_exact_conditional():
    """One sweep from a fixed state: z_j | ω_j ∝ π_k N(ω_j; μ_k, σ²_k), then the sticks, then
    (μ_k, σ²_k) per component given z under the normal–inverse-gamma base.  With M = 2
    frequencies and K = 2 components z takes 4 values, so each output's law is a 4-term
    mixture: Beta(1 + n_0, α + n_1) for the stick, InvGamma(a_n, b_n) for σ²_k and the Student
    t with 2a_n degrees of freedom, location κ₀-shrunk mean and scale √(b_n/(a_n κ_n)) for
    μ_k."""
    step, point, alpha, kappa0, a0, b0, omega = _tiny_dp_mixture(collapsed_sweeps=0)
    stick = 0.6
    mu, sigma2 = point["dp_mu"][:, 0], np.exp(point["dp_sigma2_log__"][:, 0])
    out = [step.step(dict(point))[0] for _ in range(6000)]
    # the exact law: a mixture over the 4 assignments z
    resp = np.array([stick, 1.0 - stick]) * stats.norm.pdf(omega[:, None], mu, np.sqrt(sigma2))
    resp /= resp.sum(axis=1, keepdims=True)   # (M, K)
    states = [np.array(z) for z in itertools.product(range(2), repeat=2)]
    weights = [np.prod(resp[np.arange(2), z]) for z in states]
    assert min(weights) > 0.05  # every assignment matters
    _check_dp_outputs(out, weights, [_nig_laws(z, omega, alpha, kappa0, a0, b0)
                                     for z in states])


def test_dp_mixture_gibbs_with_collapsed_scans_leaves_the_posterior_invariant():
    """The sampler's default step: z | ω, π, μ, σ², then two scans of z | Ω with the sticks
    and the components integrated out, then the sticks and (μ, σ²) given z.  Started from
    exact draws of p(π, μ, σ² | Ω), its outputs must follow that posterior: the mixture over
    z of the normal–inverse-gamma laws with weights p(z | Ω) (:func:`_assignment_posterior`,
    independent of the step).  Independent starts make the outputs independent, so KS tests
    apply."""
    step, point, alpha, kappa0, a0, b0, omega = _tiny_dp_mixture(collapsed_sweeps=2)
    states, weights = _assignment_posterior(omega[:, None], 2, alpha, kappa0, a0, b0)
    laws = [_nig_laws(z, omega, alpha, kappa0, a0, b0) for z in states]
    rng = np.random.default_rng(16)
    out = []
    for i in rng.choice(len(states), size=6000, p=weights):
        z, (stick_law, sigma_laws, _) = states[i], laws[i]
        counts = np.bincount(z, minlength=2).astype(float)
        sums = np.array([omega[z == k].sum() for k in range(2)])
        sigma2 = np.array([law.rvs(random_state=rng) for law in sigma_laws])
        mu = (sums + np.sqrt(sigma2 * (kappa0 + counts)) * rng.standard_normal(2)) / (
            kappa0 + counts)
        stick = stick_law.rvs(random_state=rng)
        start = dict(point)
        start["dp_sticks_logodds__"] = np.log([stick / (1 - stick)])
        start["dp_mu"], start["dp_sigma2_log__"] = mu[:, None], np.log(sigma2)[:, None]
        out.append(step.step(start)[0])
    _check_dp_outputs(out, weights, laws)
