"""ϱTMV-RKM: the paper's linear systems written independently with numpy, the Gaussian
model's algebra (dual = primal, variances = draws), the marginal likelihood (gradient,
graph density, recovery of known hyper-parameters) and the estimator's contract."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, optimize, stats
from scipy.special import expit

from bayesmv import RhoTMVRKM, load
from bayesmv.components.likelihoods import expected_sigmoid, log_expected_sigmoid
from bayesmv.inference.conjugate import FeaturePosterior, KernelPosterior
from bayesmv.inference.evidence import RhoTensorEvidence


def _views(n, dims, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, d)) for d in dims]


def _labels(views, seed):
    rng = np.random.default_rng(seed)
    s = views[0][:, 0] * views[1][:, 0] + 0.3 * rng.standard_normal(len(views[0]))
    return np.where(s > 0, 1, 0)


def _paper_kernel(kind, A, B, gamma):
    if kind == "linear":
        return A @ B.T
    d2 = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    return np.exp(-gamma * d2)


def _paper_solution(Xtr, ytr_pm, Xte, kinds, gammas, rho, lam, eta, rule):
    """Eq. 12 solved with np.linalg.solve, then eq. 15 ("add") or eq. 17 ("mean")."""
    V, N = len(Xtr), len(ytr_pm)
    Om = [_paper_kernel(k, X, X, g) for k, X, g in zip(kinds, Xtr, gammas, strict=True)]
    tau = (1 - rho) * V + rho
    A = np.zeros((N + 1, N + 1))
    A[:N, :N] = ((1 - rho) * sum(Om) + rho * np.prod(Om, axis=0)) / eta + lam * np.eye(N)
    A[:N, N] = tau
    A[N, :N] = 1.0
    sol = np.linalg.solve(A, np.r_[tau * ytr_pm, 0.0])
    alpha, b = sol[:N], sol[N]  # alpha = y ⊙ h
    Kt = [_paper_kernel(k, T, X, g) for k, T, X, g in zip(kinds, Xte, Xtr, gammas, strict=True)]
    if rule == "add":
        return ((1 - rho) * sum(Kt) + rho * np.prod(Kt, axis=0)) @ alpha / eta + b
    return sum(Kt) / V @ alpha / eta + b


@pytest.mark.parametrize("rule", ["add", "mean"])
@pytest.mark.parametrize("n_views", [2, 3])
@pytest.mark.parametrize("rho", [0.0, 0.3, 1.0])
def test_decision_values_equal_the_papers_linear_system(rule, n_views, rho):
    X = _views(60, (3, 4, 2)[:n_views], seed=n_views)
    y = _labels(X, seed=1)
    kinds = ["rbf", "linear", "rbf"][:n_views]
    gammas = [0.3, None, 0.7][:n_views]
    est = RhoTMVRKM(rho=rho, lam=0.05, eta=1.7, kernel=kinds, gamma=gammas,
                    decision_rule=rule, standardize=False)
    Xtr, Xte = [x[:45] for x in X], [x[45:] for x in X]
    est.fit(Xtr, y[:45])
    ref = _paper_solution(Xtr, np.where(y[:45] == 1, 1.0, -1.0), Xte, kinds, gammas, rho,
                          0.05, 1.7, rule)
    got = est.decision_function(Xte)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-9 * np.abs(ref).max())
    np.testing.assert_array_equal(est.predict(Xte), np.where(ref > 0, 1, 0))


def test_rho_zero_is_mv_rkm_and_rho_one_is_tmv_rkm():
    X = _views(50, (3, 5), seed=3)
    y = _labels(X, seed=2)
    ypm = np.where(y == 1, 1.0, -1.0)
    lam, eta, g = 0.1, 1.0, (0.2, 0.4)
    Om = [_paper_kernel("rbf", x, x, gi) for x, gi in zip(X, g, strict=True)]
    N, V = 50, 2
    # eq. 7 (MV-RKM): [ΣΩ/η + λI, V·1; 1ᵀ, 0] [α; b] = [V y; 0]
    A7 = np.block([[sum(Om) / eta + lam * np.eye(N), np.full((N, 1), V)],
                   [np.ones((1, N)), np.zeros((1, 1))]])
    s7 = np.linalg.solve(A7, np.r_[V * ypm, 0])
    # eq. 10 (TMV-RKM): [⊙Ω/η + λI, 1; 1ᵀ, 0] [α; b] = [y; 0]
    A10 = np.block([[np.prod(Om, axis=0) / eta + lam * np.eye(N), np.ones((N, 1))],
                    [np.ones((1, N)), np.zeros((1, 1))]])
    s10 = np.linalg.solve(A10, np.r_[ypm, 0])
    for rho, s, K in ((0.0, s7, sum(Om)), (1.0, s10, np.prod(Om, axis=0))):
        est = RhoTMVRKM(rho=rho, lam=lam, eta=eta, gamma=list(g), standardize=False).fit(X, y)
        np.testing.assert_allclose(est.decision_function(X), K @ s[:N] / eta + s[N],
                                   rtol=1e-7, atol=1e-10)


def test_random_features_converge_to_the_exact_kernels():
    X = _views(150, (4, 3), seed=4)
    y = _labels(X, seed=5)
    Xtr, Xte = [x[:100] for x in X], [x[100:] for x in X]
    common = dict(rho=0.4, lam=0.1, gamma=[0.2, 0.3], standardize=False)
    exact = RhoTMVRKM(**common).fit(Xtr, y[:100]).decision_function(Xte)
    errors = []
    for M in (10, 100, 1000):
        approx = RhoTMVRKM(**common, n_features=M, random_seed=0).fit(Xtr, y[:100])
        errors.append(np.sqrt(np.mean((approx.decision_function(Xte) - exact) ** 2)))
    # the kernels' Monte-Carlo error shrinks like M^{-1/2}: ~10x from M = 10 to M = 1000
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < errors[0] / 4
    assert errors[2] < 0.25 * np.std(exact)


def test_feature_posterior_equals_kernel_posterior_on_the_same_features():
    rng = np.random.default_rng(6)
    Psi = rng.standard_normal((40, 7))
    Y = rng.standard_normal((40, 2))
    Psi_new = rng.standard_normal((5, 7))
    primal = FeaturePosterior.fit(Psi, Y, 0.3)
    dual = KernelPosterior.fit(Psi @ Psi.T, Y, 0.3)
    np.testing.assert_allclose(primal.bias, dual.bias, rtol=1e-9)
    np.testing.assert_allclose(Psi_new @ primal.theta, dual.mean(Psi_new @ Psi.T), rtol=1e-9)
    for scale in (1.0, 2.5):
        np.testing.assert_allclose(
            primal.variance(Psi_new, scale),
            dual.variance(Psi_new @ Psi.T, np.sum(Psi_new**2, axis=1), scale), rtol=1e-8)


def test_kernel_posterior_draws_match_its_mean_and_variance():
    rng = np.random.default_rng(7)
    X = rng.standard_normal((30, 2))
    K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    Y = np.sin(X[:, :1]) + 0.1 * rng.standard_normal((30, 1))
    post = KernelPosterior.fit(K, Y, 0.05)
    g, b = post.draws(K, Y, 0.05, 4000, np.random.default_rng(8))
    f = g + b[:, None, :]
    mean = K @ post.weights + post.bias
    var = post.variance(K, np.ones(30))
    z = (f.mean(axis=0)[:, 0] - mean[:, 0]) / np.sqrt(var / 4000)
    assert np.max(np.abs(z)) < 4.5
    np.testing.assert_allclose(f.var(axis=0)[:, 0], var, rtol=0.15)


def test_evidence_gradient_matches_finite_differences():
    X = _views(40, (3, 2, 4), seed=9)
    Y = np.where(_labels(X, seed=3)[:, None] == 1, 1.0, -1.0)
    ev = RhoTensorEvidence(X, ["rbf", "linear", "rbf"], Y, 1.3, [None, None, None], None, None)
    z = np.array([np.log(0.2), np.log(0.5), np.log(0.05), 0.4])
    value, grad = ev(z)
    numeric = optimize.approx_fprime(z, lambda t: ev(t)[0], 1e-6)
    np.testing.assert_allclose(grad, numeric, rtol=1e-4, atol=1e-4)


def test_graph_density_is_the_restricted_marginal_likelihood():
    X = _views(25, (2, 3), seed=10)
    y = _labels(X, seed=4)
    est = RhoTMVRKM(eta=1.5, gamma=[None, 0.4], standardize=False)
    built = est.build_model(X, y)
    model = built.model
    gamma0, lam, rho = 0.3, 0.02, 0.6
    Y = built.context.targets
    ev = RhoTensorEvidence(X, ["rbf", "rbf"], Y, 1.5, [None, 0.4], None, None)
    z = np.array([np.log(gamma0), np.log(lam), np.log(rho / (1 - rho))])
    nll = ev(z)[0]
    # the graph's flat bias at its GLS value: REML = log N(y; b̂, C) + ½log 2π - ½log 1ᵀC⁻¹1
    tau = 0.4 * 2 + 0.6
    C = (np.eye(25) * lam + ((1 - rho) * sum(ev.grams([gamma0, 0.4]))
                              + rho * np.prod(ev.grams([gamma0, 0.4]), axis=0)) / 1.5) / tau**2
    Ci1 = np.linalg.solve(C, np.ones(25))
    b_hat = Ci1 @ Y[:, 0] / Ci1.sum()
    point = {"b": np.array([b_hat]), "rho": rho, "log_gamma_0": np.log(gamma0),
             "log_noise_variance": np.log(lam)}
    logp_fn = model.compile_logp(jacobian=False)
    ip = model.initial_point()
    for name, value in point.items():
        rv = model[name]
        tr = model.rvs_to_transforms[rv]
        key = model.rvs_to_values[rv].name
        ip[key] = tr.forward(np.asarray(value), *rv.owner.inputs).eval() if tr else value
    # flat priors: ϱ ~ U(0, 1), log γ ~ U(log(1e-4/D), log(1e2/D)), log λ ~ U(log 1e-8, log 1e3)
    prior = -np.log(np.log(1e6)) - np.log(np.log(1e11))
    graph = float(logp_fn(ip)) - prior + 0.5 * np.log(2 * np.pi) - 0.5 * np.log(Ci1.sum())
    assert graph == pytest.approx(-nll, rel=1e-8)


def test_evidence_recovers_known_hyperparameters():
    # continuous targets drawn from the model itself, many tasks for a sharp likelihood
    rng = np.random.default_rng(11)
    X = _views(200, (2, 2), seed=12)
    truth = dict(gamma=[0.5, 1.5], lam=0.1, rho=0.7)
    ev = RhoTensorEvidence(X, ["rbf", "rbf"], np.zeros((200, 1)), 1.0, [None, None], None, None)
    Ks = ev.grams(truth["gamma"])
    tau = 0.3 * 2 + 0.7
    C = (0.3 * sum(Ks) + 0.7 * np.prod(Ks, axis=0) + truth["lam"] * np.eye(200)) / tau**2
    Y = 0.4 + np.linalg.cholesky(C) @ rng.standard_normal((200, 40))
    ev = RhoTensorEvidence(X, ["rbf", "rbf"], Y, 1.0, [None, None], None, None)
    res = ev.maximise()
    assert res.gammas[0] == pytest.approx(0.5, rel=0.25)
    assert res.gammas[1] == pytest.approx(1.5, rel=0.25)
    assert res.lam == pytest.approx(0.1, rel=0.15)
    assert res.rho == pytest.approx(0.7, abs=0.12)


def test_marginal_likelihood_prefers_the_tensor_term_for_a_product_label():
    rng = np.random.default_rng(13)
    n = 160
    s1, s2 = rng.standard_normal(n), rng.standard_normal(n)
    X = [np.column_stack([s1, rng.standard_normal(n)]),
         np.column_stack([s2, rng.standard_normal(n)])]
    product = RhoTMVRKM(gamma=[0.5, 0.5], standardize=False).fit(X, np.sign(s1 * s2))
    additive = RhoTMVRKM(gamma=[0.5, 0.5], standardize=False).fit(X, np.sign(s1 + s2))
    assert product.rho_ > 0.6
    assert additive.rho_ < product.rho_ - 0.3
    assert product.evidence_["free"] == ["lam", "rho"]


def test_laplace_and_map_agree_and_laplace_probabilities_average_the_posterior():
    X = _views(80, (3, 3), seed=14)
    y = _labels(X, seed=6)
    kw = dict(rho=0.5, lam=0.3, gamma=[0.3, 0.3], standardize=False, random_seed=1)
    m = RhoTMVRKM(**kw).fit(X[:1] + X[1:], y)
    la = RhoTMVRKM(**kw, inference="laplace", laplace_draws=3000).fit(X, y)
    Xt = _views(10, (3, 3), seed=15)
    np.testing.assert_allclose(m.decision_function(Xt), la.decision_function(Xt), rtol=1e-12)
    # MAP = posterior mean: Laplace draws of f at the training points average to MAP's f
    f_map = m.idata_.posterior["f"].values[0, 0, :, 0]
    draws = la.idata_.posterior["f"].values[0, :, :, 0]
    z = (draws.mean(0) - f_map) / (draws.std(0) / np.sqrt(len(draws)))
    assert np.max(np.abs(z)) < 4.5
    # predict_proba = E[sigmoid(2τ²h/λ)] over h's Gaussian posterior: check one point by
    # quadrature against the posterior mean and variance
    mean, var = la._model_predictive([x[:1] for x in Xt])
    scale = 2 * la.tau_**2 / la.lam_
    ref = integrate.quad(lambda h: expit(scale * h) * stats.norm.pdf(h, mean[0, 0],
                                                                      np.sqrt(var[0])),
                         -np.inf, np.inf)[0]
    assert la.predict_proba([x[:1] for x in Xt])[0, 1] == pytest.approx(ref, abs=1e-8)
    assert var[0] > 0


@pytest.mark.parametrize("m,v,s", [(0.3, 0.04, 2.0), (0.3, 0.04, 200.0), (-0.02, 1e-4, 1e4),
                                   (0.5, 2.0, 0.1), (-1.0, 0.04, 50.0)])
def test_expected_sigmoid_matches_quadrature(m, v, s):
    sd = np.sqrt(v)
    ref = integrate.quad(lambda h: expit(s * h) * stats.norm.pdf(h, m, sd), m - 14 * sd,
                         m + 14 * sd, points=[0.0] if abs(m) < 14 * sd else None, limit=500,
                         epsabs=1e-300, epsrel=1e-10)[0]
    assert expected_sigmoid(m, v, s) == pytest.approx(ref, rel=1e-7, abs=1e-15)
    assert log_expected_sigmoid(m, v, s) == pytest.approx(np.log(ref), rel=1e-6)


def test_multiclass_ova_and_output_codes():
    rng = np.random.default_rng(16)
    centres = rng.standard_normal((5, 4)) * 3
    labels = np.repeat(np.arange(5), 20)
    X = [centres[labels] + rng.standard_normal((100, 4)), rng.standard_normal((100, 2))]
    for multiclass, n_out in (("ova", 5), ("moc", 3)):
        est = RhoTMVRKM(multiclass=multiclass, rho=0.2, lam=0.1, gamma="scale").fit(X, labels)
        assert est.decision_function(X).shape == (100, n_out)
        assert np.mean(est.predict(X) == labels) > 0.9
        proba = est.predict_proba(X)
        np.testing.assert_allclose(proba.sum(axis=1), 1.0)
        assert np.mean(est.classes_[proba.argmax(1)] == labels) > 0.9


@pytest.mark.parametrize("kw", [dict(), dict(n_features=50), dict(inference="laplace"),
                                dict(n_features=50, inference="laplace", multiclass="moc")])
def test_save_load_predicts_identically_and_seed_reproduces(tmp_path, kw):
    X = _views(70, (3, 2), seed=17)
    y = np.arange(70) % 3 if kw.get("multiclass") else _labels(X, seed=7)
    est = RhoTMVRKM(random_seed=3, gamma=[None, "scale"], **kw).fit(X, y)
    Xt = _views(9, (3, 2), seed=18)
    path = est.save(tmp_path / "rho.nc")
    back = load(path)
    np.testing.assert_array_equal(back.decision_function(Xt), est.decision_function(Xt))
    np.testing.assert_array_equal(back.predict_proba(Xt), est.predict_proba(Xt))
    again = RhoTMVRKM(random_seed=3, gamma=[None, "scale"], **kw).fit(X, y)
    np.testing.assert_array_equal(again.predict_proba(Xt), est.predict_proba(Xt))
    assert back.rho_ == est.rho_ and back.gamma_ == est.gamma_


@pytest.mark.parametrize("kw,fragment", [
    (dict(rho=1.5), "rho must lie in [0, 1]"),
    (dict(lam=-1.0), "lam must be a positive"),
    (dict(eta=0), "eta must be a positive"),
    (dict(kernel="poly"), "kernel of view 0"),
    (dict(gamma=[0.1]), "gamma has 1 entries"),
    (dict(decision_rule="max"), "decision_rule must be one of"),
    (dict(n_features=0), "n_features must be a positive integer"),
])
def test_bad_parameters_raise_before_fitting(kw, fragment):
    X = _views(20, (2, 2), seed=19)
    with pytest.raises(ValueError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        RhoTMVRKM(**kw).fit(X, _labels(X, seed=1))


def test_missing_view_is_a_clear_error_and_leaves_the_fit_intact():
    X = _views(30, (2, 2), seed=20)
    y = _labels(X, seed=2)
    est = RhoTMVRKM(rho=0.5, lam=0.1, gamma="scale").fit(X, y)
    before = est.decision_function(X)
    bad = [X[0].copy(), X[1].copy()]
    bad[1][3] = np.nan
    with pytest.raises(ValueError, match=r"view 1 \('view1'\) is missing .* M3LAK or MVLSVM"):
        est.fit(bad, y)
    np.testing.assert_array_equal(est.decision_function(X), before)
    with pytest.raises(ValueError, match="view 1"):
        est.predict(bad)
