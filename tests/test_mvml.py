"""MVML: Nyström features, the exact g-step, metric updates, the graph, the reference code."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import expit, gammaln
from sklearn.base import clone
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.model_selection import cross_val_score
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from bayesmv import MVML, load
from bayesmv.components.likelihoods import class_probabilities, log_expected_sigmoid
from bayesmv.components.metric import BlockMetricCombiner
from bayesmv.components.nystrom import NystromFeatures
from bayesmv.data import check_views
from bayesmv.datasets import load_multiple_features
from bayesmv.inference.evidence import platt_targets
from bayesmv.inference.metric import (
    MetricProblem,
    block_group_norm,
    cholesky_rank_one_update,
    fit_block_metrics,
    fit_metric,
    initial_metric,
    loo_predictive,
    task_predictive,
)


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    # small matrices: two BLAS threads on two shared cores made the reference's pseudo-inverses
    # (and our dense steps) several times slower here
    with threadpool_limits(limits=1, user_api="blas"):
        yield


# ----------------------------------------------------------------------------- data helpers
def _digits(n_train=160, seed=0, classes=(3, 5)):
    X, y = load_multiple_features(classes=classes)
    idx = np.random.default_rng(seed).permutation(len(y))
    tr, te = idx[:n_train], idx[n_train:n_train + 120]
    return [v[tr] for v in X], y[tr], [v[te] for v in X], y[te]


def _noise_view_data(seed=0, n=400, n_train=300):
    """Views 0 and 1 carry the label, view 2 is independent noise."""
    rng = np.random.default_rng(seed)
    X = [rng.standard_normal((n, 3)) for _ in range(3)]
    y = (X[0][:, 0] + X[1][:, 0] > 0).astype(int)
    return [v[:n_train] for v in X], y[:n_train], [v[n_train:] for v in X], y[n_train:]


def _problem(seed=1, nystrom=0.1, n_train=160):
    X, y, _, _ = _digits(n_train)
    data = check_views([StandardScaler().fit_transform(v) for v in X])
    state = NystromFeatures(nystrom, random_seed=seed).fit_state(data)
    return MetricProblem(state.transform(data), state.block_sizes), np.where(y == 5, 1.0, -1.0)


# ------------------------------------------------------------------------------ Nyström
def test_nystrom_features_reproduce_the_kernel_approximation():
    X, _, Xt, _ = _digits(120)
    data, test = check_views(X), check_views(Xt)
    state = NystromFeatures(0.2, gamma=0.01, random_seed=3).fit_state(data)
    S = state.subset
    assert len(S) == 24 and len(np.unique(S)) == 24
    U_test, U_train = state.transform_views(test), state.transform_views(data)
    for v, (Xv, Xtv) in enumerate(zip(X, Xt, strict=True)):
        K, W = rbf_kernel(Xtv, Xv[S], gamma=0.01), rbf_kernel(Xv[S], gamma=0.01)
        # U Uᵀ = K W⁻¹ Kᵀ (every view uses the same rows S)
        np.testing.assert_allclose(U_test[v] @ U_test[v].T, K @ np.linalg.solve(W, K.T),
                                   rtol=1e-7, atol=1e-9)
        Us = U_train[v][S]
        np.testing.assert_allclose(Us @ Us.T, W, atol=1e-10)      # exact on the subset


def test_nystrom_drops_null_directions_instead_of_inverting_them():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((30, 2))
    data = check_views([np.vstack([x, x])])          # every row twice: W is singular
    state = NystromFeatures(subset=np.arange(60)).fit_state(data)
    assert state.block_sizes[0] <= 30
    U = state.transform(data)
    assert np.isfinite(U).all() and np.abs(U).max() < 10
    K = rbf_kernel(data.views[0], gamma=0.5)
    np.testing.assert_allclose(U @ U.T, K, atol=1e-8)


def test_cholesky_rank_one_update_survives_where_refactoring_fails():
    rng = np.random.default_rng(0)
    Q = np.linalg.qr(rng.standard_normal((30, 30)))[0]
    A = (Q * np.logspace(0, -17, 30)) @ Q.T           # numerically singular for Cholesky
    R = np.linalg.cholesky(A + 1e-12 * np.eye(30)).T  # a factor of a nearby PD matrix
    A = R.T @ R
    u = rng.standard_normal(30)
    R1 = cholesky_rank_one_update(R, u)
    assert np.allclose(np.triu(R1), R1) and np.all(np.diag(R1) > 0)
    np.testing.assert_allclose(R1.T @ R1, A + np.outer(u, u), atol=1e-13 * np.abs(A).max())


# ------------------------------------------------------------------------------ g-step
@pytest.mark.parametrize("learn_A,objective,max_iter", [
    ("identity", "paper", 0), ("cov", "paper", 0), ("full", "paper", 3),
    ("full", "bayes", 3), ("sparse", "paper", 3)])
def test_g_is_the_closed_form_given_A(learn_A, objective, max_iter):
    problem, y = _problem()
    fit = fit_metric(problem, y, lmbda=0.1, eta=0.1, learn_A=learn_A, objective=objective,
                     max_iter=max_iter, tol=0)
    Z = problem.Z(fit.w)
    A = fit.A
    assert np.linalg.cond(A) < 1e9                     # the closed form below is meaningful
    g_cf = np.linalg.solve(Z.T @ Z + 0.1 * np.linalg.inv(A), Z.T @ y)
    assert np.linalg.norm(fit.g - g_cf) <= 1e-8 * np.linalg.norm(g_cf)
    np.testing.assert_allclose(fit.f, Z @ g_cf, rtol=1e-8, atol=1e-10)
    # the exact Gaussian posterior: Cov(g | y, A) = ½ (ZᵀZ + λA⁻¹)⁻¹
    cov = 0.5 * np.linalg.inv(Z.T @ Z + 0.1 * np.linalg.inv(A))
    C = fit.cov_factor
    np.testing.assert_allclose(0.5 * C @ C.T, cov, rtol=1e-6, atol=1e-9 * np.abs(cov).max())


# ---------------------------------------------------------------------- metric updates
def _J_paper(Z, y, g, A, lmbda, eta, pen):
    r = y - Z @ g
    return r @ r + lmbda * g @ np.linalg.solve(A, g) + pen(A)


def _profile(Z, y, A, lmbda, bayes):
    """min_g J without the penalty, and (bayes) + ½ log det(I + ZAZᵀ/λ), in sample space."""
    M = lmbda * np.eye(len(y)) + Z @ A @ Z.T
    val = lmbda * y @ np.linalg.solve(M, y)
    if bayes:
        val += 0.5 * np.linalg.slogdet(M / lmbda)[1]
    return val


@pytest.mark.parametrize("learn_A,objective", [
    ("full", "paper"), ("full", "bayes"), ("sparse", "paper"), ("sparse", "bayes")])
def test_each_metric_update_decreases_its_objective_and_keeps_A_psd(learn_A, objective):
    problem, y = _problem(nystrom=0.06)
    lmbda, eta, sizes = 0.1, 1.0, problem.sizes
    Z = problem.Z(np.full(problem.n_views, 1 / problem.n_views))
    frob = lambda A: eta * np.sum(A * A)                       # noqa: E731
    group = lambda A: eta * block_group_norm(A, sizes)         # noqa: E731
    pen = frob if learn_A == "full" else group
    records = []
    fit = fit_metric(problem, y, lmbda=lmbda, eta=eta, learn_A=learn_A, objective=objective,
                     max_iter=8, tol=0, callback=records.append)
    assert len(records) == 8
    for rec in records:
        A0, A1 = rec["A_old"], rec["A_new"]
        assert np.array_equal(A1, A1.T)
        ev = np.linalg.eigvalsh(A1)
        assert ev[0] >= -1e-10 * ev[-1]
        if learn_A == "full" and objective == "paper":
            # the paper's step at fixed g: J(g, A_new) < J(g, A_old)
            before = _J_paper(Z, y, rec["g"], A0, lmbda, eta, pen)
            after = _J_paper(Z, y, rec["g"], A1, lmbda, eta, pen)
        elif learn_A == "full":
            # EM: the surrogate λ tr(A⁻¹E[ggᵀ]) + ½ log det A + η||A||² and -log p(A|y) fall
            before = _profile(Z, y, A0, lmbda, True) + pen(A0)
            after = _profile(Z, y, A1, lmbda, True) + pen(A1)
        else:
            before = _profile(Z, y, A0, lmbda, objective == "bayes") + pen(A0)
            after = _profile(Z, y, A1, lmbda, objective == "bayes") + pen(A1)
        assert after < before
    h = np.asarray(fit.objective)
    assert np.all(np.diff(h) <= 1e-12 * np.abs(h[:-1]))


def test_em_step_is_the_exact_minimiser_of_its_surrogate():
    problem, y = _problem(nystrom=0.05)
    lmbda, eta = 0.1, 1.0
    fit0 = fit_metric(problem, y, lmbda=lmbda, eta=eta, objective="bayes", max_iter=0)
    records = []
    fit_metric(problem, y, lmbda=lmbda, eta=eta, objective="bayes", max_iter=1, tol=0,
               callback=records.append)
    A1 = records[0]["A_new"]
    S = np.outer(fit0.g, fit0.g) + 0.5 * fit0.cov_factor @ fit0.cov_factor.T   # E[ggᵀ]

    def Q(A):
        return (lmbda * np.trace(np.linalg.solve(A, S)) + 0.5 * np.linalg.slogdet(A)[1]
                + eta * np.sum(A * A))

    # stationarity λA⁻¹SA⁻¹ = ½A⁻¹ + 2ηA, and no random PSD perturbation does better
    Ai = np.linalg.inv(A1)
    resid = lmbda * Ai @ S @ Ai - 0.5 * Ai - 2 * eta * A1
    assert np.abs(resid).max() < 1e-6 * np.abs(2 * eta * A1).max()
    rng = np.random.default_rng(0)
    for _ in range(5):
        E = rng.standard_normal(A1.shape)
        assert Q(A1 + 1e-3 * (E @ E.T) / A1.shape[0]) > Q(A1)


# ------------------------------------------------------------------------ sparse variant
@pytest.mark.parametrize("objective", ["paper", "bayes"])
def test_sparse_variant_zeroes_the_view_without_signal(objective):
    X, y, Xt, yt = _noise_view_data()
    clf = MVML(learn_A="sparse", objective=objective, alpha=3.0, metric_penalty=10.0, nystrom=20,
               random_seed=0).fit(X, y)
    vi = clf.view_interactions_[0]
    assert np.all(vi[2] == 0) and np.all(vi[:, 2] == 0)          # noise view: exact zeros
    assert vi[0, 0] > 0.1 and vi[1, 1] > 0.1 and vi[0, 1] > 0.1   # signal views and their pair
    r = clf._state.block_sizes
    assert np.all(clf.g_[0, r[0] + r[1]:] == 0)
    assert clf.score(Xt, yt) > 0.85
    # the dense metric keeps all three views
    assert np.all(MVML(alpha=3.0, nystrom=20, random_seed=0).fit(X, y).view_interactions_ > 0)


# ------------------------------------------------------------------ graph = objective
def _graph_point(clf, model):
    point = model.initial_point()
    if "A_chol" in point:
        point["A_chol"] = np.stack([BlockMetricCombiner.pack_factor(A) for A in clf.A_])
    point["g"] = clf.g_
    if "w_simplex__" in point:
        point["w_simplex__"] = model.rvs_to_transforms[model["w"]].forward(clf.w_).eval()
    return point


@pytest.mark.python_ops  # four graphs, each evaluated at a few points: no gcc
@pytest.mark.parametrize("kw", [dict(), dict(learn_A="sparse", metric_penalty=0.5),
                                dict(learn_w=True), dict(learn_A="identity")])
def test_graph_log_density_is_minus_the_paper_objective(kw):
    rng = np.random.default_rng(1)
    N, V = 40, 3
    X = [rng.standard_normal((N, 3)) for _ in range(V)]
    y = (X[0][:, 0] + X[1][:, 0] > 0).astype(int)
    clf = MVML(nystrom=4, random_seed=0, max_iter=5, **kw).fit(X, y)
    model = clf.build_model(X, y).model
    point = _graph_point(clf, model)
    logp = model.compile_logp(jacobian=False)(point)
    J = clf.objective_history_[0][-1]
    dirichlet = gammaln(V) if kw.get("learn_w") else 0.0       # Dirichlet(1) = (V-1)! on Δ
    assert logp == pytest.approx(-J - N / 2 * np.log(np.pi) + dirichlet, rel=1e-10)
    # g is the exact optimum given A: the graph's gradient in g vanishes there
    grad = model.compile_dlogp(vars=[model["g"]], jacobian=False)(point)
    assert np.abs(grad).max() < 1e-7 * max(1.0, np.abs(clf.g_).max())


@pytest.mark.python_ops  # evaluates graphs a few times: gcc would be most of it
def test_graph_is_the_proper_gaussian_model_whose_marginal_bayes_maximises():
    rng = np.random.default_rng(2)
    N = 40
    X = [rng.standard_normal((N, 3)) for _ in range(2)]
    y = (X[0][:, 0] - X[1][:, 1] > 0).astype(int)
    clf = MVML(objective="bayes", nystrom=5, random_seed=0, max_iter=6).fit(X, y)
    model = clf.build_model(X, y).model
    logp_joint = model.compile_logp(jacobian=False)(_graph_point(clf, model))
    # Bayes at the posterior mean: log p(y | A) = log p(y, ḡ | A) - log p(ḡ | y, A)
    C = clf._cov_factors[0]
    Sigma = 0.5 * C @ C.T
    log_post_at_mean = -0.5 * np.linalg.slogdet(2 * np.pi * Sigma)[1]
    Phi = clf.objective_history_[0][-1]          # -log p(A | y) as the fit computes it
    assert logp_joint - log_post_at_mean == pytest.approx(-Phi - N / 2 * np.log(np.pi),
                                                          rel=1e-9)
    # and the g-term is a normalised Gaussian: it carries -½ log det(A/(2λ))
    paper = MVML(objective="paper", nystrom=5, random_seed=0, max_iter=6).fit(X, y)
    m_paper = paper.build_model(X, y).model
    pt = _graph_point(clf, m_paper)
    diff = logp_joint - m_paper.compile_logp(jacobian=False)(pt)
    A = clf.A_[0]
    expected = -0.5 * np.linalg.slogdet(2 * np.pi * A / (2 * 0.1))[1]
    assert diff == pytest.approx(expected, rel=1e-9)


# -------------------------------------------------------------------------- reference
def _reference():
    mvml = pytest.importorskip(
        "multimodal.kernels.mvml",
        reason="scikit-multimodallearn (the reference MVML) is not installed; "
               "pip install 'bayesmv[test]'")
    import scipy.linalg as spli

    class OneStep(mvml.MVML):
        """The reference with its A-update reduced to the paper's single gradient step.

        Its own inner loop keeps stepping while ||ΔA||/||A|| grows and so accepts steps that
        raise the objective (checked below); everything else — kernels, Nyström, A₀, the
        g-step with its pseudo-inverses, the outer loop — is the reference's code.
        """

        def _learn_A_func(self, A, g, lmbda, eta):
            s = 0.5 if 0.5 * eta < 0.5 else 0.9 / (2 * eta)
            Ap = spli.pinv(A)
            return (1 - 2 * s * eta) * A + s * lmbda * (Ap @ g) @ (g.T @ Ap)

    return mvml.MVML, OneStep


@pytest.fixture(scope="module")
def reference_setup():
    Ref, OneStep = _reference()
    X, y, Xt, yt = _digits(200)
    scalers = [StandardScaler().fit(v) for v in X]
    X = [s.transform(v) for s, v in zip(scalers, X, strict=True)]
    Xt = [s.transform(v) for s, v in zip(scalers, Xt, strict=True)]
    views_ind = np.cumsum([0] + [v.shape[1] for v in X])
    return Ref, OneStep, X, y, Xt, views_ind


def _reference_decisions(cls, X, y, Xt, views_ind, subset, **kw):
    # the reference takes the first r rows as its Nyström subset: put ours first
    perm = np.concatenate([subset, np.setdiff1d(np.arange(len(y)), subset)])
    # one gamma for every view: the reference passes kernel_params[0] to every view's kernel
    ref = cls(kernel="rbf", kernel_params={"gamma": 0.01}, precision=0, **kw)
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref.fit(np.hstack(X)[perm], y[perm], views_ind=views_ind)
            return ref, ref.decision_function(np.hstack(Xt))
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.parametrize("learn_A,code,n_loops,lmbda,eta", [
    ("identity", 4, 0, 0.1, 1.0), ("cov", 3, 0, 0.1, 1.0),
    ("full", 1, 0, 0.1, 1.0), ("full", 1, 1, 0.1, 1.0), ("full", 1, 2, 0.1, 1.0),
    ("full", 1, 2, 1.0, 0.01)])
def test_decision_values_match_the_reference_implementation(reference_setup, learn_A, code,
                                                            n_loops, lmbda, eta):
    """Same kernels (rbf, γ = 0.01 on the standardised views), same subset (ours moved to
    the front), same A₀ and one paper gradient step per A-update.

    Tolerance 1e-6 (relative, decision values on held-out rows): the two codes solve the same
    linear systems, the reference with explicit pseudo-inverses of A + 1e-8·I and of the
    g-system.  Here cond(A) ≤ 1e7 and cond(ZᵀZ + λA⁻¹) ≤ 1e9, so inverse-based solves lose up
    to ~1e-7 relative; we measured ≤ 4e-9.  The check that the reference's A stays
    symmetric to 1e-6 guards the regime: after three or more updates its pinv-based update
    loses symmetry and the two diverge (the reference's accuracy then collapses; see
    benchmarks/results/mvml.txt).
    """
    Ref, OneStep, X, y, Xt, views_ind = reference_setup
    ours = MVML(alpha=lmbda, metric_penalty=eta, nystrom=0.1, learn_A=learn_A, gamma=0.01,
                standardize=False, max_iter=n_loops, tol=0, random_seed=1).fit(X, y)
    cls = OneStep if learn_A == "full" else Ref
    ref, d_ref = _reference_decisions(cls, X, y, Xt, views_ind, ours.nystrom_subset_,
                                      lmbda=lmbda, eta=eta, nystrom_param=0.1, learn_A=code,
                                      n_loops=n_loops)
    A_ref = ref.A
    assert np.abs(A_ref - A_ref.T).max() <= 1e-6 * np.abs(A_ref).max()
    # the reference's decision value is the weights' point estimate at the test rows: our
    # posterior mean (decision_function is the moderated value, see MVML.decision_function)
    d = ours.decision_distribution(Xt)[0][:, 0]
    assert np.linalg.norm(d - d_ref) <= 1e-6 * np.linalg.norm(d_ref)


def test_reference_inner_loop_raises_the_objective_it_descends(reference_setup):
    """Why the comparison above replaces the reference's A inner loop: started from its own
    A₀ and g, its update returns an A with a larger ``λgᵀA⁻¹g + η||A||²_F`` than A₀ (its
    acceptance rule keeps stepping while ||ΔA||/||A|| grows)."""
    Ref, _, X, y, _, views_ind = reference_setup
    subset = MVML(nystrom=0.1, gamma=0.01, standardize=False, max_iter=0,
                  random_seed=1).fit(X, y).nystrom_subset_
    ref, _ = _reference_decisions(Ref, X, y, X, views_ind, subset, nystrom_param=0.1,
                                  n_loops=0)
    U = np.hstack([ref.U_dict[v] for v in range(len(X))])
    A0 = initial_metric(MetricProblem(U, (len(subset),) * len(X)), "full")
    g = ref.g

    def F(A):
        return float(0.1 * (g.T @ np.linalg.solve(A, g))[0, 0] + np.sum(A * A))

    A_ref = ref._learn_A_func(A0.copy(), g, 0.1, 1.0)
    assert F(A_ref) > F(A0)
    # whereas our update (same A₀, g) lowers it
    problem = MetricProblem(U, (len(subset),) * len(X))
    records = []
    y_pm = np.where(y == 5, 1.0, -1.0)
    perm = np.concatenate([subset, np.setdiff1d(np.arange(len(y)), subset)])
    fit_metric(problem, y_pm[perm], lmbda=0.1, eta=1.0, max_iter=1, tol=0,
               callback=records.append)
    np.testing.assert_allclose(records[0]["A_old"], A0, rtol=1e-12)
    assert F(records[0]["A_new"]) < F(A0)


# ------------------------------------------------------------------------- estimator API
@pytest.mark.parametrize("calibration", ["likelihood", "temperature"])
def test_predict_proba_averages_the_likelihood_over_the_gaussian_posterior(calibration):
    X, y, Xt, _ = _digits(120)
    clf = MVML(nystrom=0.1, random_seed=0, calibration=calibration).fit(X, y)
    slope = 4.0 if calibration == "likelihood" else clf.slope_
    assert (clf.slope_ is None) == (calibration == "likelihood")
    mean, std = clf.decision_distribution(Xt)
    # independent: the posterior variance ½ z*ᵀ(ZᵀZ + λA⁻¹)⁻¹z* from the training features
    data = clf.standardizer_.transform(check_views(X))
    test = clf.standardizer_.transform(check_views(Xt))
    wf = np.repeat(clf.w_[0], clf._state.block_sizes)
    Z, Zt = clf._state.transform(data) * wf, clf._state.transform(test) * wf
    cov = 0.5 * np.linalg.inv(Z.T @ Z + 0.1 * np.linalg.inv(clf.A_[0]))
    np.testing.assert_allclose(std[:, 0] ** 2, np.einsum("ij,jk,ik->i", Zt, cov, Zt),
                               rtol=1e-5)
    np.testing.assert_allclose(mean[:, 0], Zt @ clf.g_[0], rtol=1e-10)
    p = clf.predict_proba(Xt)
    for i in range(5):
        m, sd = mean[i, 0], std[i, 0]
        exact = integrate.quad(
            lambda f, m=m, sd=sd: expit(slope * f) * stats.norm.pdf(f, m, sd), -np.inf,
            np.inf)[0]
        assert p[i, 1] == pytest.approx(exact, abs=1e-8)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert np.all(std > 0)


@pytest.mark.parametrize("calibration", ["likelihood", "temperature"])
def test_multiclass_is_one_vs_rest_of_binary_fits(calibration):
    X, y, Xt, _ = _digits(150, classes=(1, 4, 7))
    clf = MVML(nystrom=0.1, random_seed=2, max_iter=5, calibration=calibration).fit(X, y)
    d = clf.decision_function(Xt)
    mean, std = clf.decision_distribution(Xt)
    assert d.shape == mean.shape == (len(Xt[0]), 3) and clf.A_.shape[0] == 3
    for k, c in enumerate(clf.classes_):
        binary = MVML(nystrom=0.1, random_seed=2, max_iter=5, calibration=calibration
                      ).fit(X, y == c)
        # the fitted predictive is the binary fit's; the temperature-calibrated moderated
        # value is too only at the same slope (one slope is fitted to all the tasks)
        b_mean, b_std = binary.decision_distribution(Xt)
        np.testing.assert_allclose(mean[:, k], b_mean[:, 0], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(std[:, k], b_std[:, 0], rtol=1e-9, atol=1e-12)
        if calibration == "likelihood":
            np.testing.assert_allclose(d[:, k], binary.decision_function(Xt), rtol=1e-9,
                                       atol=1e-12)
    p = clf.predict_proba(Xt)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert set(clf.predict(Xt)) <= set(clf.classes_)


def test_missing_views_raise_a_clear_error():
    X, y, Xt, _ = _digits(80)
    X[2] = X[2].copy()
    X[2][5] = np.nan
    with pytest.raises(ValueError, match=r"view 2 \('view2'\).*missing.*imput") as info:
        MVML(nystrom=0.1).fit(X, y)
    assert "M3LAK" in str(info.value)
    X, _, _, _ = _digits(80)
    clf = MVML(nystrom=0.1, random_seed=0, max_iter=2).fit(X, y)
    Xt[0] = Xt[0].copy()
    Xt[0][0] = np.nan
    with pytest.raises(ValueError, match=r"view 0 .*missing"):
        clf.predict(Xt)


@pytest.mark.parametrize("param,value", [
    ("alpha", 0.0), ("metric_penalty", -1.0), ("nystrom", 0.0), ("nystrom", 1.5),
    ("learn_A", "dense"), ("objective", "map"), ("max_iter", -1), ("tol", -1e-3), ("gamma", -2.0),
    ("kernel", "gaussian"), ("learn_w", "yes"), ("calibration", "platt")])
def test_bad_hyperparameters_are_named(param, value):
    X, y, _, _ = _digits(40)
    with pytest.raises(ValueError, match=param):
        MVML(**{param: value}).fit(X, y)


def test_reproducible_save_load_and_sklearn_tools(tmp_path):
    X, y, Xt, yt = _digits(120)
    a = MVML(nystrom=0.1, random_seed=5).fit(X, y)
    b = clone(a).fit(X, y)
    np.testing.assert_array_equal(a.predict_proba(Xt), b.predict_proba(Xt))
    assert a.idata_.posterior.attrs["inference"] == "map"
    assert a.idata_.posterior["f"].dims == ("chain", "draw", "sample", "task")
    path = a.save(tmp_path / "mvml.nc")
    c = load(path)
    np.testing.assert_array_equal(c.predict_proba(Xt), a.predict_proba(Xt))
    np.testing.assert_array_equal(c.decision_function(Xt), a.decision_function(Xt))
    assert c.calibration == "temperature" and c.slope_ == a.slope_ and a.slope_ > 0
    np.testing.assert_array_equal(c.A_, a.A_)
    np.testing.assert_array_equal(c.view_interactions_, a.view_interactions_)
    sizes = tuple(v.shape[1] for v in X)
    scores = cross_val_score(MVML(nystrom=0.3, random_seed=0, max_iter=3, view_sizes=sizes),
                             np.hstack(X), y, cv=2)
    assert scores.min() > 0.85
    # a failed refit leaves the previous fit intact
    with pytest.raises(ValueError):
        a.set_params(alpha=-1).fit(X, y)
    np.testing.assert_array_equal(a.predict_proba(Xt), b.predict_proba(Xt))


def test_learned_view_weights_stay_on_the_simplex_and_lower_the_objective():
    X, y, _, _ = _digits(120)
    for objective in ("paper", "bayes"):
        clf = MVML(nystrom=0.1, random_seed=0, learn_w=True, objective=objective,
                   max_iter=10).fit(X, y)
        w = clf.w_[0]
        assert np.all(w >= 0) and w.sum() == pytest.approx(1.0)
        h = clf.objective_history_[0]
        assert np.all(np.diff(h) <= 1e-12 * np.abs(h[:-1])) and h[-1] < h[0]


# ------------------------------------------------------------------- calibration
def test_loo_predictive_matches_refitting_without_the_row():
    """The closed-form leave-one-out predictive (given the fitted A and w) against the Gaussian
    posterior refitted without the row, in the dual form (no inverse of A): MVML's own fits
    (noise variance ½) and the graph's at another noise variance."""
    X, y, _, _ = _digits(40)
    for learn_A, noise in (("full", 0.5), ("identity", 0.5), ("full", 2.0)):
        clf = MVML(nystrom=0.5, random_seed=0, learn_A=learn_A, max_iter=5).fit(X, y)
        U = clf._state.transform(clf.standardizer_.transform(check_views(X)))
        sizes = clf._state.block_sizes
        t = np.where(y == clf.classes_[1], 1.0, -1.0)
        fit = fit_block_metrics(MetricProblem(U, sizes), t[:, None], alpha=clf.alpha,
                                metric_penalty=clf.metric_penalty, learn_A=learn_A,
                                learn_w=False, objective="paper", noise_variance=noise,
                                max_iter=5, tol=clf.tol)[0]
        if noise == 0.5:  # MVML's fit is this one
            np.testing.assert_allclose(fit.g, clf.g_[0], atol=1e-10)
        Z = U * np.repeat(fit.w, sizes)
        A, lmbda = fit.A, clf.alpha
        mean, var = task_predictive(U, sizes, fit.w, fit.g, fit.cov_factor, noise)
        f_loo, var_loo = loo_predictive(t, mean, var, noise)
        for i in range(len(y)):
            keep = np.arange(len(y)) != i
            Zk, z = Z[keep], Z[i]
            # (prior + noise covariance)·2λ
            M = Zk @ A @ Zk.T + 2 * lmbda * noise * np.eye(len(Zk))
            k = Zk @ A @ z
            assert f_loo[i] == pytest.approx(k @ np.linalg.solve(M, t[keep]), rel=1e-7,
                                             abs=1e-9)
            exact_var = (z @ A @ z - k @ np.linalg.solve(M, k)) / (2 * lmbda)
            assert var_loo[i] == pytest.approx(exact_var, rel=1e-6, abs=1e-12)
        # the check has teeth: leaving a row out moves its value
        assert np.max(np.abs(f_loo - mean)) > 1e-3 and np.all(var_loo > var)


def test_temperature_calibration_improves_held_out_log_loss():
    """Five digits one-vs-rest: the slope fitted to the leave-one-out predictive sharpens the
    under-confident likelihood (κ = 4) and lowers the held-out log-loss; the classes, the
    ranking and the fit are unchanged."""
    X, y, Xt, yt = _digits(300, classes=(1, 3, 5, 7, 8))
    cal = MVML(nystrom=0.1, random_seed=0).fit(X, y)
    raw = MVML(nystrom=0.1, random_seed=0, calibration="likelihood").fit(X, y)
    assert raw.slope_ is None and cal.slope_ > 4.0
    np.testing.assert_array_equal(cal.g_, raw.g_)
    np.testing.assert_array_equal(cal.predict(Xt), raw.predict(Xt))
    pc, pr = cal.predict_proba(Xt), raw.predict_proba(Xt)
    np.testing.assert_array_equal(np.argmax(cal.decision_function(Xt), axis=1),
                                  np.argmax(pc, axis=1))
    assert np.mean(cal.predict(Xt) == yt) > 0.9
    index = np.searchsorted(cal.classes_, yt)
    loss_cal = -np.mean(np.log(pc[np.arange(len(yt)), index]))
    loss_raw = -np.mean(np.log(pr[np.arange(len(yt)), index]))
    assert loss_cal < 0.7 * loss_raw
    # the slope is the minimiser of the leave-one-out cross-entropy it was fitted to
    Y = cal.idata_.observed_data["y_tasks"].values
    U = cal._state.transform(cal.standardizer_.transform(check_views(X)))
    pred = [task_predictive(U, cal._state.block_sizes, cal.w_[k], cal.g_[k],
                            cal._cov_factors[k], 0.5) for k in range(len(cal.classes_))]
    loo = [loo_predictive(Y[:, k], *pred[k], 0.5) for k in range(len(cal.classes_))]
    F, V = np.stack([f for f, _ in loo], axis=1), np.stack([v for _, v in loo], axis=1)
    targets = platt_targets(np.searchsorted(cal.classes_, y), len(cal.classes_))

    def cross_entropy(s):
        return -np.sum(targets * class_probabilities(log_expected_sigmoid(F, V, s), log=True))

    assert cross_entropy(cal.slope_) <= min(cross_entropy(cal.slope_ * 0.9),
                                            cross_entropy(cal.slope_ * 1.1), cross_entropy(4.0))


def test_likelihood_calibration_round_trips_through_save(tmp_path):
    X, y, Xt, _ = _digits(120)
    a = MVML(nystrom=0.1, random_seed=1, calibration="likelihood").fit(X, y)
    b = load(a.save(tmp_path / "raw.nc"))
    assert b.calibration == "likelihood" and b.slope_ is None
    np.testing.assert_array_equal(b.predict_proba(Xt), a.predict_proba(Xt))


def test_view_blocks_tile_the_metric_and_the_penalty_sums_the_upper_blocks():
    """The one partition of the metric into view blocks, against index arithmetic written
    here: every entry in exactly one block, and the group penalty over u ≤ v."""
    from bayesmv.components.metric import view_blocks

    sizes = (2, 3, 1)
    owner = np.full((6, 6), -1)
    for u, v, rows, cols in view_blocks(sizes):
        assert np.all(owner[rows, cols] == -1)
        owner[rows, cols] = 3 * u + v
    view = np.array([0, 0, 1, 1, 1, 2])
    np.testing.assert_array_equal(owner, 3 * view[:, None] + view[None, :])
    assert [(u, v) for u, v, _, _ in view_blocks(sizes, upper=True)] == [
        (0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]
    A = np.random.default_rng(0).standard_normal((6, 6))
    expected = sum(np.sqrt(np.sum(A[np.ix_(view == u, view == v)] ** 2))
                   for u in range(3) for v in range(u, 3))
    np.testing.assert_allclose(block_group_norm(A, sizes), expected, rtol=1e-14)
