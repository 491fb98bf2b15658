"""Every Gibbs conditional and HMC target of the hybrid sampler is checked against the joint
density of the PyMC model it claims to come from: for two values of the updated block, with
everything else fixed, the difference of the conditional's log-density must equal the
difference of the model's joint log-density (so the normalising constant drops out)."""

from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from bayesmv import M3LAK
from bayesmv.components.features import fourier_features
from bayesmv.datasets import make_lvm_classification
from bayesmv.inference.gibbs import (
    LatentVariableGibbs,
    ard_conditional,
    ard_given_latents_log_density,
    beta_conditional,
    collapsed_log_marginal,
    dp_assignment_logits,
    draw_noise_and_ard_given_latents,
    loadings_conditional,
    nig_conditional,
    noise_conditional,
    noise_given_latents_log_density,
    noise_log_density_without_view_latent,
    residual_square_norm,
    sample_lambda,
    stick_conditional,
    view_latent_conditional,
)
from bayesmv.inference.hmc import FrequencyTarget, WhitenedLatentTarget, hinge_terms
from bayesmv.inference.spec import HybridSpec

# many small graphs, each evaluated a few times: no gcc (see conftest._ops_for)
pytestmark = pytest.mark.python_ops


def _estimator():
    return M3LAK(latent_dim=2, n_frequencies=3, view_latent_dim=1, n_components=3,
                 precision_prior=(2.0, 1.0), C=0.8)


def _data():
    X, y, _ = make_lvm_classification(n_samples=15, view_dims=(4, 3), latent_dim=2,
                                      view_latent_dim=1, random_seed=0)
    X[1][[2, 5]] = np.nan  # two samples miss view 1
    return X, y


def _model_at_random_point(augmented: bool, seed: int):
    """The built graph, a random point (value space), its joint log-density and the spec."""
    X, y = _data()
    built = _estimator().build_model(X, y, augmented=augmented)
    rng = np.random.default_rng(seed)
    point = built.initial_values(rng)
    point["beta"] = rng.normal(size=point["beta"].shape)
    point["dp_mu"] = rng.normal(scale=0.3, size=point["dp_mu"].shape)
    if augmented:
        point["lam_log__"] = rng.normal(size=point["lam_log__"].shape)
    return built, point, built.model.compile_logp(jacobian=False), HybridSpec.from_built(built)


@pytest.fixture(scope="module")
def augmented():
    return _model_at_random_point(augmented=True, seed=3)


@pytest.fixture(scope="module")
def collapsed():
    return _model_at_random_point(augmented=False, seed=4)


def _assert_same_differences(logp, point, name, values, cond_logpdf, encode=lambda x: x):
    joint, cond = [], []
    for value in values:
        p = dict(point)
        p[name] = encode(value)
        joint.append(float(logp(p)))
        cond.append(float(cond_logpdf(value)))
    joint, cond = np.array(joint), np.array(cond)
    np.testing.assert_allclose(joint - joint[0], cond - cond[0], rtol=1e-7, atol=1e-7)


def _gaussian_logpdf_precision(x, mean, chol):
    """log N(x | mean, (L Lᵀ)⁻¹) summed over columns, up to a constant."""
    d = x - mean
    return -0.5 * float(np.sum((chol.T @ d) ** 2))


def test_beta_conditional_matches_joint(augmented):
    built, point, logp, spec = augmented
    nat = spec.natural(point)
    Phi = fourier_features(nat["H"], nat["Omega"])
    lam = np.exp(point["lam_log__"])[:, 0]
    mean, chol = beta_conditional(Phi, spec.targets[:, 0], lam, spec.C, nat["v"])
    rng = np.random.default_rng(0)
    values = [rng.normal(size=point["beta"].shape) for _ in range(4)]
    _assert_same_differences(logp, point, "beta", values,
                             lambda b: _gaussian_logpdf_precision(b[0], mean, chol))


def test_lambda_conditional_matches_joint(augmented):
    built, point, logp, spec = augmented
    nat = spec.natural(point)
    f = fourier_features(nat["H"], nat["Omega"]) @ nat["beta"].T
    a = spec.C * (1 - spec.targets * f)
    rng = np.random.default_rng(1)
    values = [np.exp(rng.normal(size=a.shape)) for _ in range(4)]
    gig = stats.geninvgauss(0.5, np.abs(a), scale=np.abs(a))
    _assert_same_differences(logp, point, "lam_log__", values,
                             lambda lam: gig.logpdf(lam).sum(), encode=np.log)


def test_view_latent_conditional_matches_joint(augmented):
    built, point, logp, spec = augmented
    nat = spec.natural(point)
    rng = np.random.default_rng(2)
    for v, (Xo, idx) in enumerate(zip(spec.views, spec.observed_index, strict=True)):
        resid = Xo - nat["H"][idx] @ nat[f"W_{v}"].T
        mean, chol = view_latent_conditional(resid @ nat[f"V_{v}"], nat[f"V_{v}"],
                                             float(nat["tau"][v]))
        values = [rng.normal(size=point[f"U_{v}"].shape) for _ in range(3)]
        _assert_same_differences(
            logp, point, f"U_{v}", values,
            lambda U, mean=mean, chol=chol: _gaussian_logpdf_precision(U.T, mean, chol))


def test_loadings_conditional_matches_joint(augmented):
    built, point, logp, spec = augmented
    nat = spec.natural(point)
    rng = np.random.default_rng(3)
    m = spec.latent_dim
    for v, (Xo, idx) in enumerate(zip(spec.views, spec.observed_index, strict=True)):
        mean, chol = loadings_conditional(Xo, nat["H"][idx], point[f"U_{v}"], nat["r"][v],
                                          spec.view_loading_precision, float(nat["tau"][v]))
        joint, cond = [], []
        for _ in range(3):
            WV = rng.normal(size=(Xo.shape[1], m + spec.view_latent_dim))
            p = dict(point)
            p[f"W_{v}"], p[f"V_{v}"] = WV[:, :m], WV[:, m:]
            joint.append(float(logp(p)))
            cond.append(_gaussian_logpdf_precision(WV.T, mean, chol))
        np.testing.assert_allclose(np.diff(joint), np.diff(cond), rtol=1e-7, atol=1e-7)


def test_ard_and_noise_conditionals_match_joint(augmented):
    built, point, logp, spec = augmented
    nat = spec.natural(point)
    rng = np.random.default_rng(4)
    r_values = [np.exp(rng.normal(size=nat["r"].shape)) for _ in range(3)]

    def r_logpdf(r):
        total = 0.0
        for v in range(spec.n_views):
            shape, rate = ard_conditional(nat[f"W_{v}"], spec.a_r, spec.b_r)
            total += stats.gamma(shape, scale=1 / rate).logpdf(r[v]).sum()
        return total

    _assert_same_differences(logp, point, "r_log__", r_values, r_logpdf, encode=np.log)

    def tau_logpdf(tau):
        total = 0.0
        for v, (Xo, idx) in enumerate(zip(spec.views, spec.observed_index, strict=True)):
            resid = Xo - nat["H"][idx] @ nat[f"W_{v}"].T - point[f"U_{v}"] @ nat[f"V_{v}"].T
            shape, rate = noise_conditional(resid.size, float(np.sum(resid**2)), spec.a_tau,
                                            spec.b_tau)
            total += stats.gamma(shape, scale=1 / rate).logpdf(tau[v])
        return total

    tau_values = [np.exp(rng.normal(size=nat["tau"].shape)) for _ in range(3)]
    _assert_same_differences(logp, point, "tau_log__", tau_values, tau_logpdf, encode=np.log)


def _latent_statistics(spec, nat, point):
    """Per view, stacked: ``ZᵀZ``, ``M = ZᵀX (ZᵀX)ᵀ`` with ``Z = [H U_v]`` of the rows that
    observe the view, ‖X_v‖², the rows and the features."""
    ZtZ, M, sq, rows, features = [], [], [], [], []
    for v, (Xo, idx) in enumerate(zip(spec.views, spec.observed_index, strict=True)):
        Z = np.concatenate([nat["H"][idx], point[f"U_{v}"]], axis=1)
        ZtZ.append(Z.T @ Z)
        M.append((Z.T @ Xo) @ (Z.T @ Xo).T)
        sq.append(float(np.sum(Xo**2)))
        rows.append(Xo.shape[0])
        features.append(Xo.shape[1])
    return (np.stack(ZtZ), np.stack(M), np.array(sq), np.array(rows, float),
            np.array(features, float))


def _loadings_integrated_out(logp, spec, point):
    """``log p(X, τ, r, rest)`` with the loadings integrated out, from the graph's joint by
    Chib's identity: ``log p(X, W, V, ·) - log p(W, V | X, ·)`` (the loadings' exact
    conditional, itself checked against the joint above) is the same at any W, V."""
    nat = spec.natural(point)
    value = float(logp(point))
    for v, (Xo, idx) in enumerate(zip(spec.views, spec.observed_index, strict=True)):
        mean, chol = loadings_conditional(Xo, nat["H"][idx], point[f"U_{v}"], nat["r"][v],
                                          spec.view_loading_precision, float(nat["tau"][v]))
        WV = np.concatenate([point[f"W_{v}"], point[f"V_{v}"]], axis=1)
        d = chol.T @ (WV.T - mean)
        value -= -0.5 * float(np.sum(d**2)) + Xo.shape[1] * float(np.sum(np.log(np.diag(chol))))
    return value


def test_noise_and_ard_with_the_loadings_integrated_out_match_joint(augmented):
    """τ's and each r_j's density given Z = [H U] with W, V integrated out: their differences
    over random values equal those of the graph's joint with the loadings integrated out
    (Chib's identity), once the densities on the log scale lose their Jacobians."""
    built, point, logp, spec = augmented
    nat = spec.natural(point)
    ZtZ, M, sq, rows, features = _latent_statistics(spec, nat, point)
    eta = spec.view_loading_precision
    rng = np.random.default_rng(4)
    log_r = np.log(nat["r"])
    tau_density = noise_given_latents_log_density(ZtZ, M, sq, rows, features, log_r, eta,
                                                  spec.a_tau, spec.b_tau)
    joint, ours = [], []
    for _ in range(4):
        log_tau = rng.normal(scale=1.5, size=spec.n_views)
        joint.append(_loadings_integrated_out(logp, spec, dict(point, tau_log__=log_tau)))
        ours.append(float(np.sum(tau_density(log_tau) - log_tau)))
    np.testing.assert_allclose(np.diff(joint), np.diff(ours), rtol=1e-7, atol=1e-7)
    log_tau = np.log(nat["tau"])
    for j in range(spec.latent_dim):
        r_density = ard_given_latents_log_density(ZtZ, M, features, log_tau, log_r, eta,
                                                  spec.a_r, spec.b_r, j)
        joint, ours = [], []
        for _ in range(4):
            moved = log_r.copy()
            moved[:, j] = rng.normal(scale=2.0, size=spec.n_views)
            joint.append(_loadings_integrated_out(logp, spec, dict(point, r_log__=moved)))
            ours.append(float(np.sum(r_density(moved[:, j]) - moved[:, j])))
        np.testing.assert_allclose(np.diff(joint), np.diff(ours), rtol=1e-7, atol=1e-7)


def test_noise_density_given_latents_is_the_gaussian_marginal():
    """Independently of the graph: with the loadings integrated out each feature column is
    ``N(0, Z Λ⁻¹ Zᵀ + I/τ)`` (scipy's multivariate normal, Λ = diag(r, η)); the density's
    differences over τ equal that marginal's plus the Gamma prior's on the log scale."""
    rng = np.random.default_rng(0)
    N, D, m, K, eta = 9, 5, 3, 1, 3.0
    Z, X = rng.normal(size=(N, m + K)), rng.normal(size=(N, D))
    log_r = rng.normal(size=(1, m))
    lam = np.concatenate([np.exp(log_r[0]), [eta]])
    density = noise_given_latents_log_density(
        (Z.T @ Z)[None], ((Z.T @ X) @ (Z.T @ X).T)[None], np.array([np.sum(X**2)]),
        np.array([N], float), np.array([D], float), log_r, eta, 0.7, 0.2)
    ours, reference = [], []
    for log_tau in (-1.0, 0.3, 1.2):
        cov = Z @ np.diag(1.0 / lam) @ Z.T + np.exp(-log_tau) * np.eye(N)
        reference.append(stats.multivariate_normal(np.zeros(N), cov).logpdf(X.T).sum()
                         + stats.gamma(0.7, scale=1 / 0.2).logpdf(np.exp(log_tau)) + log_tau)
        ours.append(float(density(np.array([log_tau]))[0]))
    np.testing.assert_allclose(np.diff(ours), np.diff(reference), rtol=1e-9, atol=1e-9)


def test_noise_density_without_view_latent_matches_collapsed_joint(collapsed):
    """τ's density with U integrated out (a partially collapsed Gibbs step) against the PyMC
    graph whose U is marginalised: the differences over random τ agree, once the density on
    log τ has its Jacobian τ removed."""
    built, point, logp, spec = collapsed
    nat = spec.natural(point)
    # the step's own statistics (no formed residual), so the step's path meets the joint
    statistics = [
        LatentVariableGibbs._residual_statistics(Xo, nat["H"][idx], nat[f"W_{v}"],
                                                 nat[f"V_{v}"], float(np.sum(Xo**2)))[0]
        for v, (Xo, idx) in enumerate(zip(spec.views, spec.observed_index, strict=True))]
    log_density = noise_log_density_without_view_latent(statistics, spec.a_tau, spec.b_tau)
    rng = np.random.default_rng(8)
    values = [np.exp(rng.normal(scale=2.0, size=nat["tau"].shape)) for _ in range(4)]
    _assert_same_differences(logp, point, "tau_log__", values,
                             lambda tau: float(np.sum(log_density(np.log(tau)) - np.log(tau))),
                             encode=np.log)


def test_prior_precision_conditional_matches_joint(augmented):
    built, point, logp, spec = augmented
    a_v, b_v = spec.precision_prior
    beta = point["beta"]
    post = stats.gamma(a_v + 0.5 * beta.size, scale=1 / (b_v + 0.5 * np.sum(beta**2)))
    _assert_same_differences(logp, point, "v_log__", [0.3, 1.0, 4.0], post.logpdf,
                             encode=lambda v: np.array(np.log(v)))


def test_dp_conditionals_match_complete_data_joint(augmented):
    built, point, _, spec = augmented
    model = built.model
    nat = spec.natural(point)
    sp = spec.spectral
    K, m = sp.n_components, spec.latent_dim
    Omega = nat["Omega"]
    # assignments: their unnormalised probabilities sum to the model's mixture density of Ω
    omega_logp = model.compile_logp(vars=[model["Omega"]], jacobian=False)
    logits = dp_assignment_logits(Omega, nat["dp_weights"], nat["dp_mu"], nat["dp_sigma2"])
    assert logsumexp(logits, axis=1).sum() == pytest.approx(float(omega_logp(point)), rel=1e-10)

    # sticks and (μ, σ²) given z: the complete-data joint p(θ) Π_j π_{z_j} N(ω_j | θ_{z_j})
    prior_logp = model.compile_logp(
        vars=[model["dp_sticks"], model["dp_sigma2"], model["dp_mu"]], jacobian=False)
    z = np.array([0, 2, 2])

    def complete(p):
        n = spec.natural(p)
        comp = dp_assignment_logits(Omega, n["dp_weights"], n["dp_mu"], n["dp_sigma2"])
        return float(prior_logp(p)) + comp[np.arange(len(z)), z].sum()

    counts = np.bincount(z, minlength=K)
    a, b = stick_conditional(counts, sp.concentration)
    mean, kn, an, bn = nig_conditional(Omega, z, K, sp.kappa0, sp.a0, sp.b0(m))
    rng = np.random.default_rng(5)
    joint, cond = [], []
    for _ in range(4):
        sticks = rng.uniform(0.05, 0.95, size=K - 1)
        sigma2 = np.exp(rng.normal(-1, 0.5, size=(K, m)))
        mu = rng.normal(scale=0.5, size=(K, m))
        p = dict(point)
        p["dp_sticks_logodds__"] = spec.encode_unit(sticks)
        p["dp_sigma2_log__"], p["dp_mu"] = np.log(sigma2), mu
        joint.append(complete(p))
        cond.append(stats.beta(a, b).logpdf(sticks).sum()
                    + stats.invgamma(an, scale=bn).logpdf(sigma2).sum()
                    + stats.norm(mean, np.sqrt(sigma2 / kn)).logpdf(mu).sum())
    np.testing.assert_allclose(np.diff(joint), np.diff(cond), rtol=1e-7, atol=1e-7)


def test_latent_hmc_target_matches_collapsed_joint(collapsed):
    built, point, logp, spec = collapsed
    nat = spec.natural(point)
    target = WhitenedLatentTarget(spec, nat)
    rng = np.random.default_rng(6)
    values = [nat["H"] + rng.normal(scale=0.5, size=nat["H"].shape) for _ in range(4)]
    _assert_same_differences(logp, point, "H", values,
                             lambda H: target.logp_grad(target.to_xi(H))[0].sum())
    # gradient against central finite differences (away from hinge kinks)
    xi = target.to_xi(values[1])
    _, grad = target.logp_grad(xi)
    eps = 1e-6
    for n, j in [(0, 0), (3, 1), (7, 0), (2, 1)]:  # rows 2 and 5 miss a view
        d = np.zeros_like(xi)
        d[n, j] = eps
        fd = (target.logp_grad(xi + d)[0].sum() - target.logp_grad(xi - d)[0].sum()) / (2 * eps)
        assert grad[n, j] == pytest.approx(fd, rel=1e-5, abs=1e-6)


def _log_integral_over_beta(logp, point):
    """log ∫ exp(joint) dβ for a joint that is exactly quadratic in β (the augmented model
    given λ): the quadratic is recovered from the PyMC graph's own log-density at β = 0,
    e_i and e_i + e_j, and integrated in closed form (up to a constant free of everything
    else)."""
    shape = point["beta"].shape
    d = int(np.prod(shape))

    def at(beta_flat):
        return float(logp(dict(point, beta=beta_flat.reshape(shape))))

    basis = np.eye(d)
    f0 = at(np.zeros(d))
    f1 = np.array([at(basis[i]) for i in range(d)])
    hess = np.empty((d, d))
    for i in range(d):
        for j in range(i, d):
            hess[i, j] = hess[j, i] = at(basis[i] + basis[j]) - f1[i] - f1[j] + f0
    grad = f1 - f0 - 0.5 * np.diag(hess)
    precision = -hess
    return f0 + 0.5 * grad @ np.linalg.solve(precision, grad) - 0.5 * np.linalg.slogdet(
        precision)[1]


def test_frequency_hmc_target_matches_augmented_joint_with_beta_integrated(augmented):
    """Ω's HMC target is p(Ω | λ, H, …) with β integrated out: its differences over Ω equal
    those of the augmented PyMC joint integrated over β (exactly, it is Gaussian in β)."""
    built, point, logp, spec = augmented
    nat = spec.natural(point)
    lams = [np.exp(point["lam_log__"])[:, t] for t in range(spec.targets.shape[1])]
    target = FrequencyTarget(spec, nat, lams)
    rng = np.random.default_rng(7)
    values = [nat["Omega"] + rng.normal(scale=0.3, size=nat["Omega"].shape) for _ in range(4)]
    reference = [_log_integral_over_beta(logp, dict(point, Omega=O)) for O in values]
    ours = [target.logp_grad(O / target.scale)[0] for O in values]
    np.testing.assert_allclose(np.diff(ours), np.diff(reference), rtol=1e-7, atol=1e-7)
    theta = values[2] / target.scale
    _, grad = target.logp_grad(theta)
    eps = 1e-6
    for idx in [(0, 0), (1, 1), (2, 0)]:
        d = np.zeros_like(theta)
        d[idx] = eps
        fd = (target.logp_grad(theta + d)[0] - target.logp_grad(theta - d)[0]) / (2 * eps)
        assert grad[idx] == pytest.approx(fd, rel=1e-5, abs=1e-6)


def test_frequency_forces_are_single_precision_unless_a_weight_is_huge(augmented):
    """The leapfrog forces of Ω's HMC are the float64 gradient rounded through float32 algebra
    (close, not equal); when some λ_n is tiny the float32 gradient would be mostly rounding
    error (c - C²Φm/λ cancels two numbers of size C²/λ), and the forces are then exact."""
    built, point, logp, spec = augmented
    nat = spec.natural(point)
    lams = [np.exp(point["lam_log__"])[:, t] for t in range(spec.targets.shape[1])]
    target = FrequencyTarget(spec, nat, lams)
    theta = nat["Omega"] / target.scale
    assert target.force_dtype == np.float32
    exact, single = target.logp_grad(theta)[1], target.logp_grad(theta, target.force_dtype)[1]
    assert not np.array_equal(single, exact)
    np.testing.assert_allclose(single, exact, rtol=1e-3, atol=1e-4 * np.abs(exact).max())
    tiny = [lam.copy() for lam in lams]
    tiny[0][0] = 1e-9 * spec.C**2
    target = FrequencyTarget(spec, nat, tiny)
    assert target.force_dtype == np.float64
    np.testing.assert_array_equal(target.logp_grad(theta, target.force_dtype)[1],
                                  target.logp_grad(theta)[1])


def test_margin_edge_cases_are_finite():
    """y f = 1 exactly: λ's conditional degenerates to Gamma(1/2, 2); nothing is NaN or inf."""
    rng = np.random.default_rng(8)
    Phi = rng.normal(size=(4, 6))  # more features than points: the margin can be hit exactly
    y = np.array([1.0, -1, 1, -1])
    beta = np.linalg.lstsq(Phi, y, rcond=None)[0]  # y f = 1 on every point at once
    a = 1.0 * (1 - y * (Phi @ beta))
    assert np.allclose(a, 0, atol=1e-12)
    lam = sample_lambda(a, rng)
    assert np.all(np.isfinite(lam)) and np.all(lam > 0)
    mean, chol = beta_conditional(Phi, y, lam, 1.0, 1.0)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(chol))
    S = np.zeros((2, 2))
    beta_full = np.array([[0.0, 0.0, 0.0, 0.0, 1.0]])  # f = 1 exactly
    logl, dS = hinge_terms(S, beta_full, np.ones((2, 1)), 1.0)
    assert np.all(logl == 0) and np.all(np.isfinite(dS))


def test_spectral_rescaling_ratio_matches_joint(collapsed):
    """(Ω, μ, σ²) → (cΩ, cμ, c²σ²): the move's log ratio is the joint's change plus the
    log-Jacobian (M·m + K·m + 2·K·m)·log c of the map in natural coordinates."""
    built, point, logp, spec = collapsed
    nat = spec.natural(point)
    M, m = nat["Omega"].shape
    K = spec.spectral.n_components
    for c in (0.7, 1.3):
        updates, log_prior_jac = spec.spectral.rescale(nat, c)
        S = nat["H"] @ nat["Omega"].T
        hinge = (hinge_terms(c * S, nat["beta"], spec.targets, spec.C)[0].sum()
                 - hinge_terms(S, nat["beta"], spec.targets, spec.C)[0].sum())
        moved = dict(point, Omega=c * nat["Omega"], dp_mu=updates["dp_mu"],
                     dp_sigma2_log__=np.log(updates["dp_sigma2"]))
        expected = float(logp(moved) - logp(point)) + (M * m + 3 * K * m) * np.log(c)
        assert hinge + log_prior_jac == pytest.approx(expected, rel=1e-9)


def test_collapsed_marginal_integrates_beta_out(augmented):
    """½bᵀA⁻¹b - ½log|A| differences equal those of ∫ p(β) Π p_aug(y, λ | f) dβ, computed
    independently as log N(z; 0, ΦΦᵀ/v + diag(λ/C²)) with scipy (and by quadrature-free
    algebra the 1/C factors cancel)."""
    built, point, _, spec = augmented
    nat = spec.natural(point)
    lam = np.exp(point["lam_log__"])
    y = spec.targets[:, 0]
    z = y * (1 + lam[:, 0] / spec.C)
    rng = np.random.default_rng(9)
    ours, reference = [], []
    for _ in range(3):
        Phi = fourier_features(nat["H"], nat["Omega"] * np.exp(rng.normal(0, 0.3)))
        ours.append(collapsed_log_marginal(Phi, spec.targets, [lam[:, 0]], spec.C,
                                           nat["v"])[0])
        cov = Phi @ Phi.T / nat["v"] + np.diag(lam[:, 0] / spec.C**2)
        reference.append(stats.multivariate_normal(np.zeros(len(z)), cov).logpdf(z))
    np.testing.assert_allclose(np.diff(ours), np.diff(reference), rtol=1e-8, atol=1e-8)


def test_double_precision_phases_are_remembered_exactly_and_not_pickled(augmented):
    """The sampler's cache of cos/sin of ``H Ωᵀ``: the values of NumPy's own functions, the
    same arrays again for the same bytes (whatever the array objects), recomputed for any
    other point, at most four points kept, and left out of a pickled spec (a chain sent to a
    worker process starts without it)."""
    import pickle

    _, point, _, spec = augmented
    nat = spec.natural(point)
    H, Omega = nat["H"], nat["Omega"]
    cos, sin = spec.phases(H, Omega)
    np.testing.assert_array_equal(cos, np.cos(H @ Omega.T))
    np.testing.assert_array_equal(sin, np.sin(H @ Omega.T))
    assert spec.phases(H.copy(), Omega.copy())[0] is cos
    np.testing.assert_array_equal(spec.features(H, Omega), fourier_features(H, Omega))
    moved = np.nextafter(Omega, np.inf)  # one ulp away: another point
    assert spec.phases(H, moved)[0] is not cos
    for c in (1.5, 2.0, 2.5, 3.0):
        spec.phases(H, c * Omega)
    assert len(spec._phases) == 4 and spec.phases(H, Omega)[0] is not cos
    assert pickle.loads(pickle.dumps(spec))._phases == {}


def test_single_precision_forces_stay_accurate_at_large_augmented_weights():
    """The float32 gradient of the collapsed marginal (Ω's leapfrog forces) against float64
    when five of 500 augmented weights C²/λ_n are 10⁴, below the 10⁶ at which the forces
    switch to double: within 1 % (0.26 % with the triangular solves; an explicit A⁻¹ in
    single precision gave 14 %, and divergent trajectories)."""
    rng = np.random.default_rng(0)
    H, Omega = rng.standard_normal((500, 10)), 0.3 * rng.standard_normal((50, 10))
    Phi = fourier_features(H, Omega)
    y = rng.choice([-1.0, 1.0], size=(500, 1))
    lam = rng.uniform(0.5, 3.0, 500)
    lam[:5] = 1e-4
    exact = collapsed_log_marginal(Phi, y, [lam], 1.0, 1.0, with_gradient=True)[2]
    single = collapsed_log_marginal(Phi.astype(np.float32), y.astype(np.float32),
                                    [lam.astype(np.float32)], 1.0, 1.0, with_gradient=True)[2]
    assert single.dtype == np.float32
    assert np.abs(single - exact).max() < 0.01 * np.abs(exact).max()


def test_dp_mixture_prior_of_frequencies_matches_scipy_and_its_gradient(collapsed):
    """The DP mixture's log density of Ω (as Ω's HMC evaluates it, constants once per
    trajectory) against scipy's normal densities and logsumexp, and its gradient against
    central finite differences."""
    built, point, _, spec = collapsed
    nat = spec.natural(point)
    prior = spec.spectral.prior_logp_grad_form(nat)
    rng = np.random.default_rng(5)
    w, mu, s2 = nat["dp_weights"], nat["dp_mu"], nat["dp_sigma2"]

    def reference(Omega):
        comp = np.log(w)[None, :] + stats.norm.logpdf(
            Omega[:, None, :], mu[None], np.sqrt(s2)[None]).sum(axis=2)
        return logsumexp(comp, axis=1).sum()

    for _ in range(3):
        Omega = nat["Omega"] + rng.normal(scale=0.3, size=nat["Omega"].shape)
        value, grad = prior(Omega)
        assert value == pytest.approx(reference(Omega), rel=1e-12)
        h = 1e-6
        numeric = np.array([(reference(Omega + h * e) - reference(Omega - h * e)) / (2 * h)
                            for e in np.eye(Omega.size).reshape(-1, *Omega.shape)])
        np.testing.assert_allclose(grad.ravel(), numeric, rtol=1e-6, atol=1e-8)
        assert spec.spectral.prior_logp_grad(Omega, nat)[0] == value


@pytest.mark.parametrize("explained", [False, True])
def test_view_residual_statistics_equal_the_ones_of_the_formed_residual(explained):
    """The factor model's Gibbs step reads E = X - H Wᵀ and the final residual
    X - [H U][W V]ᵀ through cross products (no n × D residual): each statistic equals its
    direct computation, also for a view the latents explain to 1e-9 (cancellation: the
    direct fallback)."""
    rng = np.random.default_rng(11)
    n, D, m, K = 300, 12, 3, 1
    H, W, V, U = (rng.normal(size=s) for s in [(n, m), (D, m), (D, K), (n, K)])
    X = H @ W.T + (1e-9 if explained else 1.0) * rng.normal(size=(n, D))
    sq = float(np.sum(X**2))
    (sq_norm, EQ, sv, width), EV, HtX, HtH = LatentVariableGibbs._residual_statistics(
        X, H, W, V, sq)
    E = X - H @ W.T
    Q, sv_ref, _ = np.linalg.svd(V, full_matrices=False)
    np.testing.assert_allclose(sq_norm, np.sum(E**2), rtol=1e-10)
    np.testing.assert_allclose(np.abs(EQ), np.abs(E @ Q), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(EV, E @ V, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(sv, sv_ref)
    assert width == D
    np.testing.assert_allclose(HtX, H.T @ X)
    Z, B = np.concatenate([H, U], axis=1), rng.normal(size=(D, m + K))
    if explained:
        B[:, :m] = W
        B[:, m:] = 0.0
    got = residual_square_norm(X, Z, B, sq, Z.T @ X, Z.T @ Z)
    np.testing.assert_allclose(got, np.sum((X - Z @ B.T) ** 2), rtol=1e-10)


def test_noise_and_ard_update_keeps_its_marginal():
    """The slice updates of (τ, r) given Z as a Markov kernel: with one shared column (m = 1)
    and one view-specific column, the draws of log τ and log r match the 2-D quadrature of
    p(τ, r | Z, X), each feature column N(0, Z Λ⁻¹ Zᵀ + I/τ) by scipy with the Gamma priors
    (KS tests on thinned draws)."""
    rng = np.random.default_rng(5)
    N, D, eta = 6, 9, 2.0
    Z, X = rng.normal(size=(N, 2)), rng.normal(size=(N, D))
    priors = SimpleNamespace(a_tau=2.0, b_tau=1.0, a_r=1.5, b_r=1.0)
    grid = np.linspace(-5.0, 5.0, 201)
    lt, lr = np.meshgrid(grid, grid, indexing="ij")
    cov = np.zeros(lt.shape + (N, N))
    cov += np.einsum("i,j->ij", Z[:, 0], Z[:, 0]) * np.exp(-lr)[..., None, None]
    cov += np.outer(Z[:, 1], Z[:, 1]) / eta + np.exp(-lt)[..., None, None] * np.eye(N)
    log_post = (-0.5 * D * np.linalg.slogdet(cov)[1]
                - 0.5 * np.einsum("nd,...nm,md->...", X, np.linalg.inv(cov), X)
                + stats.gamma(2.0, scale=1.0).logpdf(np.exp(lt)) + lt
                + stats.gamma(1.5, scale=1.0).logpdf(np.exp(lr)) + lr)
    post = np.exp(log_post - log_post.max())
    statistics = ((Z.T @ Z)[None], ((Z.T @ X) @ (Z.T @ X).T)[None], np.array([np.sum(X**2)]),
                  np.array([N], float), np.array([D], float))
    log_tau, log_r, draws = np.zeros(1), np.zeros((1, 1)), []
    for i in range(4500):
        log_tau, log_r = draw_noise_and_ard_given_latents(
            *statistics, log_tau, log_r, eta, priors, np.array([0.5]), rng)
        if i >= 500 and i % 4 == 0:
            draws.append((log_tau[0], log_r[0, 0]))
    draws = np.array(draws)
    for axis, column in ((1, 0), (0, 1)):
        marginal = post.sum(axis=axis)
        cdf = (np.cumsum(marginal) - 0.5 * marginal) / marginal.sum()
        assert stats.kstest(draws[:, column], lambda x, cdf=cdf: np.interp(x, grid, cdf)
                            ).pvalue > 1e-3


def test_wide_views_are_those_with_more_features_than_observed_rows():
    """Which views get their τ and r with the loadings integrated out: more features than the
    rows that observe the view (15 rows; view 1 is missing on two, so 13)."""
    X, y, _ = make_lvm_classification(n_samples=15, view_dims=(4, 14, 15), latent_dim=2,
                                      view_latent_dim=1, tau=4.0, random_seed=0)
    X[1][[2, 5]] = np.nan
    built = _estimator().build_model(X, y)
    spec = HybridSpec.from_built(built)
    step = LatentVariableGibbs([built.model.value_vars[0]], spec, model=built.model)
    np.testing.assert_array_equal(step.wide_views, [1])
