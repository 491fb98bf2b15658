"""ϱTMV-RKM: the paper's linear systems written independently with numpy, the Gaussian
model's algebra (dual = primal, variances = draws), the marginal likelihood (gradient,
graph density, recovery of known hyper-parameters), the leave-one-out shortcut against
brute-force refits, the calibration against its definition and a calibrated SVC, and the
estimator's contract."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, optimize, stats
from scipy.special import expit, log_expit, log_softmax, softmax
from sklearn.calibration import CalibratedClassifierCV
from sklearn.model_selection import GridSearchCV, StratifiedShuffleSplit
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from bayesmv import RhoTMVRKM, load
from bayesmv.components.likelihoods import expected_sigmoid, log_expected_sigmoid
from bayesmv.datasets import load_multiple_features
from bayesmv.diagnostics import calibration
from bayesmv.inference.conjugate import FeaturePosterior, KernelPosterior
from bayesmv.inference.evidence import RhoTensorEvidence, RhoTensorLOO


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
    est = RhoTMVRKM(rho=rho, alpha=0.05, eta=1.7, kernel=kinds, gamma=gammas,
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
        est = RhoTMVRKM(rho=rho, alpha=lam, eta=eta, gamma=list(g), standardize=False).fit(X, y)
        np.testing.assert_allclose(est.decision_function(X), K @ s[:N] / eta + s[N],
                                   rtol=1e-7, atol=1e-10)


def test_random_features_converge_to_the_exact_kernels():
    X = _views(150, (4, 3), seed=4)
    y = _labels(X, seed=5)
    Xtr, Xte = [x[:100] for x in X], [x[100:] for x in X]
    common = dict(rho=0.4, alpha=0.1, gamma=[0.2, 0.3], standardize=False)
    exact = RhoTMVRKM(**common).fit(Xtr, y[:100]).decision_function(Xte)
    errors = []
    for M in (10, 100, 1000):
        approx = RhoTMVRKM(**common, n_frequencies=M, random_seed=0).fit(Xtr, y[:100])
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


@pytest.mark.parametrize("restricted", [True, False])
def test_evidence_gradient_matches_finite_differences(restricted):
    X = _views(40, (3, 2, 4), seed=9)
    Y = np.where(_labels(X, seed=3)[:, None] == 1, 1.0, -1.0)
    ev = RhoTensorEvidence(X, ["rbf", "linear", "rbf"], Y, 1.3, [None, None, None], None, None,
                           restricted=restricted)
    z = np.array([np.log(0.2), np.log(0.5), np.log(0.05), 0.4])
    value, grad = ev(z)
    numeric = optimize.approx_fprime(z, lambda t: ev(t)[0], 1e-6)
    np.testing.assert_allclose(grad, numeric, rtol=1e-4, atol=1e-4)


@pytest.mark.python_ops  # evaluates graphs a few times: gcc would be most of it
def test_graph_density_is_the_restricted_marginal_likelihood():
    """The graph's density at the bias's maximum is the profile likelihood (the unrestricted
    evidence); integrating the bias out adds ½ log 2π - ½ log 1ᵀC⁻¹1: the restricted one."""
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
    graph = float(logp_fn(ip)) - prior
    assert graph + 0.5 * np.log(2 * np.pi) - 0.5 * np.log(Ci1.sum()) == pytest.approx(-nll,
                                                                                      rel=1e-8)
    profile = RhoTensorEvidence(X, ["rbf", "rbf"], Y, 1.5, [None, 0.4], None, None,
                                restricted=False)
    assert graph == pytest.approx(-profile(z)[0], rel=1e-8)
    np.testing.assert_allclose(profile.bias(z), [b_hat], rtol=1e-10)


def test_evidence_recovers_known_hyperparameters():
    # continuous targets drawn from the model itself, many tasks for a sharp likelihood
    rng = np.random.default_rng(11)
    X = _views(200, (2, 2), seed=12)
    truth = dict(gamma=[0.5, 1.5], alpha=0.1, rho=0.7)
    ev = RhoTensorEvidence(X, ["rbf", "rbf"], np.zeros((200, 1)), 1.0, [None, None], None, None)
    Ks = ev.grams(truth["gamma"])
    tau = 0.3 * 2 + 0.7
    C = (0.3 * sum(Ks) + 0.7 * np.prod(Ks, axis=0) + truth["alpha"] * np.eye(200)) / tau**2
    Y = 0.4 + np.linalg.cholesky(C) @ rng.standard_normal((200, 40))
    ev = RhoTensorEvidence(X, ["rbf", "rbf"], Y, 1.0, [None, None], None, None)
    res = ev.maximise()
    assert res.gammas[0] == pytest.approx(0.5, rel=0.25)
    assert res.gammas[1] == pytest.approx(1.5, rel=0.25)
    assert res.alpha == pytest.approx(0.1, rel=0.15)
    assert res.rho == pytest.approx(0.7, abs=0.12)


def test_marginal_likelihood_prefers_the_tensor_term_for_a_product_label():
    rng = np.random.default_rng(13)
    n = 160
    s1, s2 = rng.standard_normal(n), rng.standard_normal(n)
    X = [np.column_stack([s1, rng.standard_normal(n)]),
         np.column_stack([s2, rng.standard_normal(n)])]
    # the marginal likelihood is no longer the default criterion: ask for it
    kw = dict(gamma=[0.5, 0.5], standardize=False, criterion="evidence")
    product = RhoTMVRKM(**kw).fit(X, np.sign(s1 * s2))
    additive = RhoTMVRKM(**kw).fit(X, np.sign(s1 + s2))
    assert product.rho_ > 0.6
    assert additive.rho_ < product.rho_ - 0.3
    assert product.evidence_["free"] == ["alpha", "rho"]


def test_laplace_and_map_agree_and_laplace_probabilities_average_the_posterior():
    X = _views(80, (3, 3), seed=14)
    y = _labels(X, seed=6)
    # the Gaussian model's own predictive is calibration="likelihood" (no longer the default)
    kw = dict(rho=0.5, alpha=0.3, gamma=[0.3, 0.3], standardize=False, random_seed=1,
              calibration="likelihood")
    m = RhoTMVRKM(**kw).fit(X[:1] + X[1:], y)
    la = RhoTMVRKM(**kw, inference="laplace", draws=3000).fit(X, y)
    Xt = _views(10, (3, 3), seed=15)
    # the posterior mean, not decision_function: Laplace's is the moderated value (it ranks
    # rows as the posterior-averaged predict_proba does), no longer the mean
    np.testing.assert_allclose(m.decision_distribution(Xt)[0], la.decision_distribution(Xt)[0],
                               rtol=1e-12)
    # MAP = posterior mean: Laplace draws of f at the training points average to MAP's f
    f_map = m.idata_.posterior["f"].values[0, 0, :, 0]
    draws = la.idata_.posterior["f"].values[0, :, :, 0]
    z = (draws.mean(0) - f_map) / (draws.std(0) / np.sqrt(len(draws)))
    assert np.max(np.abs(z)) < 4.5
    # predict_proba = E[sigmoid(2τ²h/λ)] over h's Gaussian posterior: check one point by
    # quadrature against the posterior mean and variance
    mean, var = la._model_predictive([x[:1] for x in Xt])
    scale = 2 * la.tau_**2 / la.alpha_
    ref = integrate.quad(lambda h: expit(scale * h) * stats.norm.pdf(h, mean[0, 0],
                                                                      np.sqrt(var[0])),
                         -np.inf, np.inf)[0]
    assert la.predict_proba([x[:1] for x in Xt])[0, 1] == pytest.approx(ref, abs=1e-8)
    assert var[0] > 0


@pytest.mark.parametrize("m,v,s", [(0.3, 0.04, 2.0), (0.3, 0.04, 200.0), (-0.02, 1e-4, 1e4),
                                   (0.5, 2.0, 0.1), (-1.0, 0.04, 50.0),
                                   # scale·sd 3 and 4.5, where 64 Gauss–Hermite nodes were
                                   # off by 1e-7 and 4e-5
                                   (0.54, 0.5852, 4.08), (-0.3, 0.09, 15.0)])
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
        est = RhoTMVRKM(multiclass=multiclass, rho=0.2, alpha=0.1, gamma="scale").fit(X, labels)
        assert est.decision_function(X).shape == (100, n_out)
        assert np.mean(est.predict(X) == labels) > 0.9
        proba = est.predict_proba(X)
        np.testing.assert_allclose(proba.sum(axis=1), 1.0)
        assert np.mean(est.classes_[proba.argmax(1)] == labels) > 0.9


@pytest.mark.parametrize("kw", [dict(), dict(n_frequencies=50), dict(inference="laplace"),
                                dict(n_frequencies=50, inference="laplace", multiclass="moc")])
def test_save_load_predicts_identically_and_seed_reproduces(tmp_path, kw):
    X = _views(70, (3, 2), seed=17)
    y = np.arange(70) % 3 if kw.get("multiclass") else _labels(X, seed=7)
    est = RhoTMVRKM(random_seed=3, gamma=[None, "scale"], **kw).fit(X, y)
    Xt = _views(9, (3, 2), seed=18)
    path = est.save(tmp_path / "rho.nc")
    back = load(path)
    np.testing.assert_array_equal(back.decision_function(Xt), est.decision_function(Xt))
    np.testing.assert_array_equal(back.predict_proba(Xt), est.predict_proba(Xt))
    np.testing.assert_array_equal(back.predict(Xt), est.predict(Xt))
    again = RhoTMVRKM(random_seed=3, gamma=[None, "scale"], **kw).fit(X, y)
    np.testing.assert_array_equal(again.predict_proba(Xt), est.predict_proba(Xt))
    assert back.rho_ == est.rho_ and back.gamma_ == est.gamma_
    assert back.slope_ == est.slope_ and back.selection_ == est.selection_


@pytest.mark.parametrize("kw,fragment", [
    (dict(rho=1.5), "rho must lie in [0, 1]"),
    (dict(alpha=-1.0), "alpha must be a positive"),
    (dict(eta=0), "eta must be a positive"),
    (dict(kernel="poly"), "kernel of view 0"),
    (dict(gamma=[0.1]), "gamma has 1 entries"),
    (dict(decision_rule="max"), "decision_rule must be one of"),
    (dict(n_frequencies=0), "n_frequencies must be a positive integer"),
    (dict(criterion="cv"), "criterion must be one of"),
    (dict(calibration="platt"), "calibration must be one of"),
    (dict(decision_rule="mean", inference="laplace"), "eq. 17's values"),
])
def test_bad_parameters_raise_before_fitting(kw, fragment):
    X = _views(20, (2, 2), seed=19)
    with pytest.raises(ValueError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        RhoTMVRKM(**kw).fit(X, _labels(X, seed=1))


def test_missing_view_is_a_clear_error_and_leaves_the_fit_intact():
    X = _views(30, (2, 2), seed=20)
    y = _labels(X, seed=2)
    est = RhoTMVRKM(rho=0.5, alpha=0.1, gamma="scale").fit(X, y)
    before = est.decision_function(X)
    bad = [X[0].copy(), X[1].copy()]
    bad[1][3] = np.nan
    with pytest.raises(ValueError, match=r"view 1 \('view1'\) is missing .* M3LAK or MVLSVM"):
        est.fit(bad, y)
    np.testing.assert_array_equal(est.decision_function(X), before)
    with pytest.raises(ValueError, match="view 1"):
        est.predict(bad)


# ------------------------------------------------------- leave-one-out and calibration
def _paper_system(Om, Om_prod, ypm, rho, lam, eta):
    """Eq. 12 for the given training Gram matrices (per view, and the product term), solved
    with np.linalg.solve: the dual variables α and b."""
    N, V = len(ypm), len(Om)
    tau = (1 - rho) * V + rho
    A = np.zeros((N + 1, N + 1))
    A[:N, :N] = ((1 - rho) * sum(Om) + rho * Om_prod) / eta + lam * np.eye(N)
    A[:N, N], A[N, :N] = tau, 1.0
    sol = np.linalg.solve(A, np.r_[tau * ypm, 0.0])
    return sol[:N], sol[N]


def _brute_force_loo(Om, Om_prod, Ypm, rho, lam, eta, rule):
    """Row i's decision value (eq. 15 or 17) from the system solved without row i, for every
    row and every ±1 target column."""
    N, V = Ypm.shape[0], len(Om)
    out = np.empty(Ypm.shape)
    for i in range(N):
        keep = np.arange(N) != i
        sub = [K[np.ix_(keep, keep)] for K in Om]
        for t in range(Ypm.shape[1]):
            alpha, b = _paper_system(sub, Om_prod[np.ix_(keep, keep)], Ypm[keep, t], rho, lam,
                                     eta)
            row = ((1 - rho) * sum(K[i, keep] for K in Om) + rho * Om_prod[i, keep]
                   if rule in ("add", "model") else sum(K[i, keep] for K in Om) / V)
            # the model's own g + b is eq. 15's τg + b with g's part divided by τ
            out[i, t] = row @ alpha / eta / ((1 - rho) * V + rho if rule == "model" else 1) + b
    return out


def _ova_targets(y):
    classes = np.unique(y)
    if len(classes) == 2:
        return np.where(y == classes[1], 1.0, -1.0)[:, None]
    return np.where(y[:, None] == classes[None, :], 1.0, -1.0)


@pytest.mark.parametrize("rule", ["add", "mean"])
@pytest.mark.parametrize("rho", [0.0, 0.4, 1.0])
def test_loo_shortcut_equals_brute_force_refits_with_exact_kernels(rule, rho):
    X = _views(40, (3, 2), seed=21)
    y = np.digitize(X[0][:, 0] + X[1][:, 1], [-0.5, 0.5])  # three classes: one-vs-all
    kinds, gammas, lam, eta = ["rbf", "linear"], [0.4, None], 0.07, 1.3
    est = RhoTMVRKM(rho=rho, alpha=lam, eta=eta, kernel=kinds, gamma=gammas, decision_rule=rule,
                    standardize=False).fit(X, y)
    Om = [_paper_kernel(k, x, x, g) for k, x, g in zip(kinds, X, gammas, strict=True)]
    ref = _brute_force_loo(Om, np.prod(Om, axis=0), _ova_targets(y), rho, lam, eta, rule)
    np.testing.assert_allclose(est.idata_.fit["f_loo"].values, ref, rtol=1e-8,
                               atol=1e-10 * np.abs(ref).max())


@pytest.mark.parametrize("rho", [0.0, 0.4, 1.0])
def test_loo_criterion_of_the_models_own_rule_equals_brute_force_refits(rho):
    """The criterion a composed estimator scores for a combiner with ``decision_rule=
    "model"`` (``g + b``, not eq. 15's ``τg + b``)."""
    X = _views(40, (3, 2), seed=21)
    y = np.digitize(X[0][:, 0] + X[1][:, 1], [-0.5, 0.5])
    kinds, gammas, lam, eta = ["rbf", "linear"], [0.4, None], 0.07, 1.3
    Y = _ova_targets(y)
    loo = RhoTensorLOO(X, kinds, Y, y, 3, lambda F, t: F, eta, gammas, [None, None], lam, rho,
                       rule="model")
    Om = [_paper_kernel(k, x, x, g) for k, x, g in zip(kinds, X, gammas, strict=True)]
    ref = _brute_force_loo(Om, np.prod(Om, axis=0), Y, rho, lam, eta, "model")
    np.testing.assert_allclose(loo.loo_values(None, lam, rho), ref, rtol=1e-8,
                               atol=1e-10 * np.abs(ref).max())


@pytest.mark.parametrize("rule", ["add", "mean"])
def test_loo_shortcut_equals_brute_force_refits_with_random_features(rule):
    X = _views(35, (3, 2), seed=22)
    y = _labels(X, seed=8)
    rho, lam, eta = 0.6, 0.2, 0.8
    est = RhoTMVRKM(rho=rho, alpha=lam, eta=eta, gamma=[0.3, 0.5], n_frequencies=12,
                    decision_rule=rule, standardize=False, random_seed=4).fit(X, y)
    # the paper's system on the random-feature Gram matrices (per view, and the jointly
    # drawn product term)
    per_view, joint = est._rff().blocks(X)
    Om = [B @ B.T for B in per_view]
    ref = _brute_force_loo(Om, joint @ joint.T, _ova_targets(y), rho, lam, eta, rule)
    np.testing.assert_allclose(est.idata_.fit["f_loo"].values, ref, rtol=1e-8,
                               atol=1e-10 * np.abs(ref).max())


def _flat_bias_variance(K, k_cross, k_self, noise, scale):
    """Posterior variance of scale·g(x) + b given y, g ~ GP(0, K), flat b (R&W eq. 2.42)."""
    C = K + noise * np.eye(len(K))
    Ci_k, Ci_1 = np.linalg.solve(C, k_cross), np.linalg.solve(C, np.ones(len(K)))
    r = 1.0 - scale * k_cross @ Ci_1
    return scale**2 * (k_self - k_cross @ Ci_k) + r**2 / Ci_1.sum()


def test_loo_posterior_variance_equals_brute_force_refits():
    X = _views(30, (2, 3), seed=23)
    y = _labels(X, seed=9)
    rho, lam, eta, gammas = 0.3, 0.15, 1.1, [0.5, 0.2]
    est = RhoTMVRKM(rho=rho, alpha=lam, eta=eta, gamma=gammas, inference="laplace",
                    draws=5, standardize=False).fit(X, y)
    tau = (1 - rho) * 2 + rho
    Om = [_paper_kernel("rbf", x, x, g) for x, g in zip(X, gammas, strict=True)]
    K = ((1 - rho) * sum(Om) + rho * np.prod(Om, axis=0)) / (eta * tau**2)
    ref = []
    for i in range(30):
        keep = np.arange(30) != i
        ref.append(_flat_bias_variance(K[np.ix_(keep, keep)], K[keep, i], K[i, i],
                                       lam / tau**2, tau))
    np.testing.assert_allclose(est.idata_.fit["f_loo_var"].values, ref, rtol=1e-8)
    # the Laplace fit's leave-one-out means are the MAP fit's
    m = RhoTMVRKM(rho=rho, alpha=lam, eta=eta, gamma=gammas, standardize=False).fit(X, y)
    np.testing.assert_allclose(est.idata_.fit["f_loo"].values, m.idata_.fit["f_loo"].values,
                               rtol=1e-12)


def test_loo_posterior_variance_with_random_features_equals_weight_space_refits():
    X = _views(30, (2, 3), seed=30)
    y = _labels(X, seed=13)
    rho, lam, eta = 0.4, 0.3, 0.9
    est = RhoTMVRKM(rho=rho, alpha=lam, eta=eta, gamma=[0.5, 0.2], n_frequencies=8,
                    inference="laplace", draws=5, standardize=False,
                    random_seed=2).fit(X, y)
    tau = (1 - rho) * 2 + rho
    per_view, joint = est._rff().blocks(X)
    Psi = np.concatenate([np.sqrt(1 - rho) * B for B in per_view] + [np.sqrt(rho) * joint],
                         axis=1) / (tau * np.sqrt(eta))
    Psi1, noise = np.column_stack([Psi, np.ones(30)]), lam / tau**2
    prior = np.diag(np.r_[np.ones(Psi.shape[1]), 0.0])  # θ ~ N(0, I), flat b
    ref = []
    for i in range(30):
        keep = np.arange(30) != i
        A = Psi1[keep].T @ Psi1[keep] / noise + prior
        c = np.r_[tau * Psi[i], 1.0]  # τ ψᵢᵀθ + b
        ref.append(c @ np.linalg.solve(A, c))
    np.testing.assert_allclose(est.idata_.fit["f_loo_var"].values, ref, rtol=1e-8)


def _platt_cross_entropy(log_slope, F, y_index, n_classes, scores):
    """Cross-entropy of the calibrated probabilities against Platt's targets, written out."""
    n = np.bincount(y_index, minlength=n_classes)[y_index]
    q = np.tile((1.0 / ((n + 2.0) * (n_classes - 1)))[:, None], (1, n_classes))
    q[np.arange(len(y_index)), y_index] = (n + 1.0) / (n + 2.0)
    return -np.sum(q * scores(np.exp(log_slope) * F))


@pytest.mark.parametrize("n_classes", [2, 3])
def test_temperature_calibration_is_its_definition(n_classes):
    X = _views(90, (3, 2), seed=24)
    y = (_labels(X, seed=10) if n_classes == 2
         else np.digitize(X[0][:, 0] - X[1][:, 0], [-0.6, 0.6]))
    est = RhoTMVRKM(rho=0.4, alpha=0.05, gamma="scale").fit(X, y)
    Xt = _views(20, (3, 2), seed=25)
    F = est.decision_function(Xt)
    if n_classes == 2:
        scores = lambda Z: np.column_stack([log_expit(-Z), log_expit(Z)])  # noqa: E731
        np.testing.assert_allclose(est.predict_proba(Xt)[:, 1], expit(est.slope_ * F),
                                   rtol=1e-12)
    else:
        scores = lambda Z: log_softmax(Z, axis=1)  # noqa: E731
        np.testing.assert_allclose(est.predict_proba(Xt), softmax(est.slope_ * F, axis=1),
                                   rtol=1e-12)
    # the slope minimises the leave-one-out cross-entropy against Platt's targets
    f_loo = est.idata_.fit["f_loo"].values
    f_loo = f_loo[:, 0] if n_classes == 2 else f_loo
    y_index = np.searchsorted(est.classes_, y)
    res = optimize.minimize_scalar(_platt_cross_entropy, bounds=(-5, 5), method="bounded",
                                   args=(f_loo, y_index, n_classes, scores),
                                   options={"xatol": 1e-8})
    assert np.log(est.slope_) == pytest.approx(res.x, abs=0.02)


def test_laplace_probabilities_average_the_calibrated_sigmoid_over_the_posterior():
    X = _views(60, (2, 2), seed=26)
    y = _labels(X, seed=11)
    rho, lam, gammas = 0.5, 0.2, [0.4, 0.4]
    est = RhoTMVRKM(rho=rho, alpha=lam, gamma=gammas, inference="laplace", draws=5,
                    standardize=False).fit(X, y)
    Xt = _views(4, (2, 2), seed=27)
    tau = (1 - rho) * 2 + rho

    def kernel(A, B):
        Ks = [_paper_kernel("rbf", a, b, g) for a, b, g in zip(A, B, gammas, strict=True)]
        return ((1 - rho) * sum(Ks) + rho * np.prod(Ks, axis=0)) / tau**2

    # the posterior mean of the paper's rule (decision_function is the moderated value)
    F = est.decision_distribution(Xt)[0][:, 0]
    K, Kx = kernel(X, X), kernel(Xt, X)
    for j in range(4):
        sd = np.sqrt(_flat_bias_variance(K, Kx[j], 1.0 / tau, lam / tau**2, tau))
        ref = integrate.quad(lambda f, m, sd: expit(est.slope_ * f) * stats.norm.pdf(f, m, sd),
                             -np.inf, np.inf, args=(F[j], sd), epsabs=1e-12)[0]
        assert est.predict_proba([x[j:j + 1] for x in Xt])[0, 1] == pytest.approx(ref,
                                                                                 abs=1e-8)


@pytest.mark.parametrize("n_classes", [2, 4])
def test_predict_is_the_argmax_of_predict_proba_and_binary_ranks_agree(n_classes):
    X = _views(120, (3, 3), seed=28)
    y = (_labels(X, seed=12) if n_classes == 2
         else np.digitize(X[0][:, 0] + X[1][:, 1], [-0.8, 0.0, 0.8]))
    est = RhoTMVRKM().fit(X[:1] + X[1:], y)
    Xt = _views(200, (3, 3), seed=29)
    proba, dec = est.predict_proba(Xt), est.decision_function(Xt)
    np.testing.assert_array_equal(est.predict(Xt), est.classes_[np.argmax(proba, axis=1)])
    if n_classes == 2:
        order = np.argsort(dec, kind="stable")
        assert np.all(np.diff(proba[order, 1]) >= 0)
        np.testing.assert_array_equal(est.predict(Xt), est.classes_[(dec > 0).astype(int)])
    else:
        np.testing.assert_array_equal(np.argmax(dec, axis=1), np.argmax(proba, axis=1))


def _digits_split(digits, seed=7):
    views, y = load_multiple_features(classes=digits)
    tr, te = next(StratifiedShuffleSplit(1, test_size=0.2, random_state=seed).split(views[0],
                                                                                     y))
    return [v[tr] for v in views], y[tr], [v[te] for v in views], y[te]


@pytest.mark.parametrize("digits", [(3, 5), (0, 1, 2)])
def test_default_hyperparameters_are_inside_their_ranges_on_bundled_digits(digits):
    X, y, _, _ = _digits_split(digits)
    est = RhoTMVRKM().fit(X, y)
    sel = est.selection_
    assert sel["criterion"] == "loo" and sel["free"] == ["gamma", "alpha", "rho"]
    assert sel["at_bounds"] == []
    # at least a factor e from every edge: ϱ ∈ (0, 1) in logit, λ ∈ [1e-8, 1e3], m ∈ [1e-4, 1e2]
    assert -9.0 < np.log(est.rho_ / (1 - est.rho_)) < 9.0
    assert np.log(1e-8) + 1 < np.log(est.alpha_) < np.log(1e3) - 1
    assert np.log(1e-4) + 1 < np.log(sel["width"]) < np.log(1e2) - 1


def test_evidence_interpolates_on_bundled_digits():
    """Why it is not the default: on ±1 targets the marginal likelihood takes λ to the lower
    end of its range (interpolation)."""
    X, y, _, _ = _digits_split((3, 5))
    est = RhoTMVRKM(gamma="scale", criterion="evidence").fit(X, y)
    assert "alpha" in est.selection_["at_bounds"] and est.alpha_ < 1e-7


def test_default_brier_is_within_ten_percent_of_a_calibrated_svc():
    X, y, Xt, yt = _digits_split((3, 5))
    est = RhoTMVRKM().fit(X, y)
    brier = calibration(yt, est.predict_proba(Xt), est.classes_).brier
    # the baseline sees the concatenated, standardised views; C and γ by 3-fold CV, then
    # Platt scaling (3-fold)
    scaler = StandardScaler().fit(np.hstack(X))
    Z, Zt = scaler.transform(np.hstack(X)), scaler.transform(np.hstack(Xt))
    grid = {"C": [0.1, 1, 10, 100], "gamma": [g / Z.shape[1] for g in (0.1, 0.3, 1, 3, 10)]}
    svc = GridSearchCV(SVC(), grid, cv=3).fit(Z, y).best_estimator_
    platt = CalibratedClassifierCV(svc, method="sigmoid", cv=3).fit(Z, y)
    baseline = calibration(yt, platt.predict_proba(Zt), platt.classes_).brier
    assert brier <= 1.1 * baseline
