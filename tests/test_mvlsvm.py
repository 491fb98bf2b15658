"""MVL-SVM: the MAP is the unpenalised-bias SVM (scikit-learn's SVC and a duality-gap
certificate), the PyMC graph is the objective, the Gibbs sampler agrees with NUTS and
concentrates on the MAP, the imputations are the paper's eq. 11 and its probabilistic
version, missing views cost little accuracy on the UCI digits, and the calibrated
probabilities are Platt's fit on out-of-fold SVM decisions and approach the true ones."""

import warnings

import arviz as az
import numpy as np
import pytest
from scipy import optimize, special, stats
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

import bayesmv
from bayesmv import MVLSVM
from bayesmv.components.landmarks import LandmarkFeatures
from bayesmv.data import check_views
from bayesmv.datasets import load_multiple_features
from bayesmv.diagnostics import ConvergenceWarning
from bayesmv.inference.sample import run_sampler
from bayesmv.inference.svm import HingeGibbsSpec, draw_missing_blocks, fit_svm_map

QUIET = dict(cores=1, progressbar=False)


def _blobs(n, seed=0, shift=(0.7, 0.4), p_positive=0.5):
    """Two overlapping Gaussian views whose means move with the label."""
    rng = np.random.default_rng(seed)
    y = (rng.uniform(size=n) < p_positive).astype(int)
    s = 2 * y[:, None] - 1
    return [rng.normal(size=(n, 3)) + shift[0] * s, rng.normal(size=(n, 2)) + shift[1] * s], y


def _drop_views(views, frac, rng, keep=()):
    """Each (row, view) missing with probability frac; every row keeps one view; rows in
    ``keep`` stay complete."""
    n, V = views[0].shape[0], len(views)
    miss = rng.uniform(size=(n, V)) < frac
    none = miss.all(axis=1)
    miss[none, rng.integers(0, V, none.sum())] = False
    miss[list(keep)] = False
    return [np.where(miss[:, [v]], np.nan, X) for v, X in enumerate(views)], miss


@pytest.fixture(scope="module")
def digits():
    views, y = load_multiple_features()
    rng = np.random.default_rng(0)
    idx = rng.permutation(y.size)[:700]
    tr, te = idx[:450], idx[450:]
    return [v[tr] for v in views], y[tr], [v[te] for v in views], y[te]


# ------------------------------------------------------------------------ the MAP
@pytest.mark.parametrize("classes", [(3, 5), (0, 1, 2, 7)])
def test_map_equals_svc_on_the_landmark_features(digits, classes):
    Xtr, ytr, Xte, yte = digits
    rows_tr, rows_te = np.isin(ytr, classes), np.isin(yte, classes)
    Xtr, ytr = [x[rows_tr] for x in Xtr], ytr[rows_tr]
    Xte, yte = [x[rows_te] for x in Xte], yte[rows_te]
    C, N = 30.0, ytr.size
    est = MVLSVM(n_landmarks=12, C=C, random_seed=0).fit(Xtr, ytr)
    Ptr, Pte = est.transform(Xtr), est.transform(Xte)
    assert Ptr.shape == (N, 12 * 6)
    if len(classes) == 2:
        ref = SVC(kernel="linear", C=C / N, tol=1e-6).fit(Ptr, ytr)
        ref_dec, ref_pred = ref.decision_function(Pte), ref.predict(Pte)
    else:  # one-vs-rest, one binary SVC per class
        ref_dec = np.column_stack([
            SVC(kernel="linear", C=C / N, tol=1e-6).fit(Ptr, np.where(ytr == k, 1, -1))
            .decision_function(Pte) for k in classes])
        ref_pred = np.asarray(classes)[ref_dec.argmax(axis=1)]
    dec = est.decision_function(Xte)
    assert np.max(np.abs(dec - ref_dec)) <= 1e-3 * np.max(np.abs(ref_dec))
    np.testing.assert_array_equal(est.predict(Xte), ref_pred)


def test_whitened_map_is_the_svm_of_the_summed_nystrom_kernels(digits):
    """With ``whiten=True`` the MAP is the SVM whose kernel is Σ_v K_v(x, L) K_v(L, L)⁺
    K_v(L, x') (the Nyström approximation of each view's RBF kernel through the landmarks),
    built here from scikit-learn's scaler, ``rbf_kernel`` and a pseudo-inverse; with raw
    similarities (``whiten=False``) it is not."""
    Xtr, ytr, Xte, yte = digits
    rows_tr, rows_te = np.isin(ytr, (3, 5)), np.isin(yte, (3, 5))
    Xtr, ytr = [x[rows_tr] for x in Xtr], ytr[rows_tr]
    Xte = [x[rows_te] for x in Xte]
    C, N = 100.0, ytr.size
    est = MVLSVM(n_landmarks=25, C=C, random_seed=0).fit(Xtr, ytr)
    lm = est.landmark_indices_
    K_tr, K_te = np.zeros((N, N)), np.zeros((len(Xte[0]), N))
    for A, B in zip(Xtr, Xte, strict=True):
        scaler = StandardScaler().fit(A)
        A, B = scaler.transform(A), scaler.transform(B)
        gamma = 1.0 / A.shape[1]
        inv = np.linalg.pinv(rbf_kernel(A[lm], gamma=gamma), rcond=1e-10, hermitian=True)
        K_tr += rbf_kernel(A, A[lm], gamma=gamma) @ inv @ rbf_kernel(A[lm], A, gamma=gamma)
        K_te += rbf_kernel(B, A[lm], gamma=gamma) @ inv @ rbf_kernel(A[lm], A, gamma=gamma)
    ref = SVC(kernel="precomputed", C=C / N, tol=1e-6).fit(K_tr, ytr).decision_function(K_te)
    dec = est.decision_function(Xte)
    assert np.max(np.abs(dec - ref)) <= 1e-3 * np.max(np.abs(ref))
    raw = MVLSVM(n_landmarks=25, C=C, random_seed=0, whiten=False).fit(Xtr, ytr)
    assert np.max(np.abs(raw.decision_function(Xte) - ref)) > 0.1 * np.max(np.abs(ref))


def test_map_closes_the_duality_gap():
    """Primal ½||θ||² + c Σ hinge equals the dual Σα - ½||Σ α y φ||² at the solution, with
    0 ≤ α ≤ c and Σ α y = 0 (the unpenalised bias's constraint)."""
    rng = np.random.default_rng(1)
    Phi = rng.uniform(size=(120, 15))
    y = np.where(Phi[:, :3].sum(1) + 0.3 * rng.normal(size=120) > 1.5, 1.0, -1.0)
    for cost in (0.01, 1.0):
        theta, bias, dual = fit_svm_map(Phi, y[:, None], cost, tol=1e-6)
        alpha = dual[:, 0] * y
        assert np.all(alpha >= -1e-12) and np.all(alpha <= cost + 1e-12)
        assert abs(np.sum(dual[:, 0])) < 1e-8
        np.testing.assert_allclose(theta[0], Phi.T @ dual[:, 0], atol=1e-12)
        primal = 0.5 * theta[0] @ theta[0] + cost * np.maximum(
            0, 1 - y * (Phi @ theta[0] + bias[0])).sum()
        dual_value = alpha.sum() - 0.5 * theta[0] @ theta[0]
        assert primal - dual_value <= 1e-5 * primal


def test_graph_log_density_is_minus_the_objective_and_peaks_at_the_map(digits):
    Xtr, ytr, _, _ = digits
    rows = np.isin(ytr, (1, 7))
    X, y = [x[rows][:60] for x in Xtr], ytr[rows][:60]
    C, N = 20.0, 60
    est = MVLSVM(n_landmarks=5, C=C, random_seed=3).fit(X, y)
    built = est.build_model(X, y)
    np.testing.assert_array_equal(built.context.state["landmark_indices"],
                                  est.landmark_indices_)
    logp = built.model.compile_logp()
    Phi = est.transform(X)
    t = np.where(y == 7, 1.0, -1.0)

    def objective(theta, b):
        return 0.5 * theta @ theta + C / N * np.maximum(0, 1 - t * (Phi @ theta + b)).sum()

    theta_map = est.idata_.posterior["beta"].values[0, 0, 0]
    b_map = est.idata_.posterior["bias"].values[0, 0, 0]
    rng = np.random.default_rng(0)
    points = [(theta_map, b_map)] + [(rng.normal(size=theta_map.size), rng.normal())
                                     for _ in range(3)]
    lp = np.array([float(logp({"beta": th[None], "bias": np.array([b])})) for th, b in points])
    obj = np.array([objective(th, b) for th, b in points])
    np.testing.assert_allclose(lp - lp[0], -(obj - obj[0]), rtol=1e-9, atol=1e-9)
    for _ in range(30):  # no nearby point of the graph beats the MAP
        th = theta_map + 1e-3 * rng.normal(size=theta_map.size)
        b = b_map + 1e-3 * rng.normal()
        assert float(logp({"beta": th[None], "bias": np.array([b])})) <= lp[0] + 1e-12


# ------------------------------------------------------------------------ the posterior
@pytest.mark.long
@pytest.mark.timeout(600)
def test_gibbs_posterior_mean_approaches_the_map_as_the_likelihood_sharpens():
    """With the per-sample cost C/N fixed, N (hence C·N) growing sharpens the posterior:
    the Gibbs posterior mean of (θ, b) closes in on the MAP."""
    rel = []
    for n in (50, 400, 3200):
        X, y = _blobs(n, seed=1)
        common = dict(n_landmarks=3, C=0.1 * n, random_seed=0)
        w_map = MVLSVM(**common).fit(X, y).idata_.posterior
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            post = MVLSVM(inference="gibbs", draws=1000, tune=300, **common, **QUIET).fit(
                X, y).idata_.posterior
        a = np.append(w_map["beta"].values[0, 0, 0], w_map["bias"].values[0, 0])
        b = np.append(post["beta"].mean(("chain", "draw")).values[0],
                      post["bias"].mean(("chain", "draw")).values)
        rel.append(np.linalg.norm(b - a) / np.linalg.norm(a))
    assert rel[0] > rel[1] > rel[2], rel
    assert rel[2] < 0.35 * rel[0], rel


@pytest.mark.long
@pytest.mark.timeout(600)
def test_gibbs_agrees_with_nuts_on_the_marginal_model_with_unknown_blocks():
    """Bayesian imputation: the Gibbs sampler (λ, (θ, b), missing blocks) and NUTS on the
    builder's collapsed graph (hinge potential, MvNormal blocks) give the same posterior of f
    within Monte-Carlo error.  Unbalanced classes put the bias far from 0, where a
    regularised bias would show."""
    X, y = _blobs(40, seed=4, shift=(0.8, 0.8), p_positive=0.75)
    X[1][5:17] = np.nan  # view 1 missing for 12 samples
    est = MVLSVM(n_landmarks=3, C=40.0, impute="bayes", inference="gibbs", draws=1500,
                 tune=300, chains=2, random_seed=5, **QUIET)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gibbs = est.fit(X, y).idata_
    built = est.build_model(X, y)
    assert any(v.name.startswith("mu_missing") for v in built.model.free_RVs)
    nuts = run_sampler(built, sampler="nuts", draws=1000, tune=700, chains=2, cores=1,
                       random_seed=6, trace_vars=["f", "bias"], progressbar=False)
    for name, rtol in (("f", 0.15), ("bias", 0.08)):
        s_g = az.summary(gibbs, var_names=[name])
        s_n = az.summary(nuts, var_names=[name])
        assert s_g["r_hat"].max() < 1.05 and s_n["r_hat"].max() < 1.05
        z = (s_g["mean"] - s_n["mean"]) / np.hypot(s_g["mcse_mean"], s_n["mcse_mean"])
        assert np.max(np.abs(z)) < 4.0, (name, z.max())
        np.testing.assert_allclose(s_g["sd"], s_n["sd"], rtol=rtol, err_msg=name)


@pytest.mark.python_ops  # the joint's graph evaluated at a few points: gcc would be most of it
@pytest.mark.parametrize("whiten", [False, True])
def test_missing_block_conditional_matches_the_augmented_joint(whiten):
    """The Gaussian that ``draw_missing_blocks`` samples by Matheron's rule is the exact
    conditional of the augmented graph (log-density differences), and its draws have that
    Gaussian's mean and covariance."""
    X, y = _blobs(30, seed=2)
    X[0][:6] = np.nan
    y3 = np.where(np.arange(30) % 3 == 0, 2, y)  # three one-vs-rest tasks
    est = MVLSVM(n_landmarks=3, C=60.0, impute="bayes", random_seed=1, whiten=whiten)
    built = est.build_model(X, y3, augmented=True)
    spec = HingeGibbsSpec.from_built(built)
    (blk,) = spec.missing
    logp = built.model.compile_logp(jacobian=False)
    rng = np.random.default_rng(0)
    point = built.initial_values(rng)
    point["beta"] = rng.normal(size=point["beta"].shape)
    point["bias"] = rng.normal(size=3)
    point["lam_log__"] = rng.normal(size=point["lam_log__"].shape)
    lam = np.exp(point["lam_log__"])
    # the blocks are similarities: with whitening, f's weights on them are the mapped ones
    W = np.column_stack([point["beta"], point["bias"]])
    if whiten:
        W = spec.mapped(W)
    C = spec.C
    S = blk.covariance()
    Theta = W[:, blk.columns]
    # dense conditional of each row: prior N(m, S) times Π_t N(z_t | c_t + θ_tᵀ μ, λ_t / C²)
    Phi1 = spec.design(point)[1]
    rest = Phi1[blk.rows] @ W.T - Phi1[np.ix_(blk.rows, blk.columns)] @ Theta.T
    z = spec.targets[blk.rows] * (1 + lam[blk.rows] / C)
    means, covs = [], []
    for i, n in enumerate(blk.rows):
        prec = np.linalg.inv(S) + (Theta.T * (C**2 / lam[n])) @ Theta
        lin = np.linalg.solve(S, blk.mean[i]) + Theta.T @ (C**2 / lam[n] * (z[i] - rest[i]))
        covs.append(np.linalg.inv(prec))
        means.append(covs[-1] @ lin)
    joint, cond = [], []
    for _ in range(4):
        value = rng.normal(size=blk.mean.shape)
        p = dict(point, mu_missing_0=value)
        joint.append(float(logp(p)))
        cond.append(sum(stats.multivariate_normal(means[i], covs[i]).logpdf(value[i])
                        for i in range(len(means))))
    np.testing.assert_allclose(np.diff(joint), np.diff(cond), rtol=1e-7, atol=1e-7)
    draws = np.array([draw_missing_blocks(spec.missing, Phi1, W, spec.targets, lam, C, rng)[0]
                      for _ in range(4000)])
    for i in range(len(means)):
        sd = np.sqrt(np.diag(covs[i]))
        assert np.all(np.abs(draws[:, i].mean(0) - means[i]) < 4.5 * sd / np.sqrt(4000))
        np.testing.assert_allclose(np.cov(draws[:, i].T), covs[i],
                                   atol=0.1 * float(np.max(np.diag(covs[i]))))


# ------------------------------------------------------------------------ imputation
def test_landmark_features_are_per_view_rbf_similarities_and_complete_rows_pass_through():
    rng = np.random.default_rng(0)
    views = [rng.normal(size=(25, 4)), rng.normal(size=(25, 9))]
    data = check_views(views)
    for impute in ("landmarks", "bayes", "zero", None):
        fmap = LandmarkFeatures(n_landmarks=6, impute=impute, random_seed=0).fit_state(data)
        lm = fmap.landmark_indices_
        expected = np.hstack([np.exp(-((X[:, None, :] - X[lm][None]) ** 2).sum(-1) / X.shape[1])
                              for X in views])  # paper's radius √D_v
        np.testing.assert_allclose(fmap.transform(data), expected, rtol=1e-12)
    fmap = LandmarkFeatures(6, gamma=[0.5, 2.0], random_seed=0).fit_state(data)
    np.testing.assert_allclose(fmap.transform(data)[:, 6:],
                               np.exp(-2.0 * ((views[1][:, None] - views[1][fmap.landmark_indices_]
                                               [None]) ** 2).sum(-1)), rtol=1e-12)


def test_landmark_piece_is_a_specification_its_fitted_map_a_separate_object():
    """``fit_state`` returns the fitted map and leaves the piece alone; ``indices`` rebuilds
    the same map; the former ``fit`` is a deprecated alias returning that map."""
    rng = np.random.default_rng(4)
    data = check_views([rng.normal(size=(30, 3)), rng.normal(size=(30, 2))])
    piece = LandmarkFeatures(5, impute="bayes", random_seed=1)
    fitted = piece.fit_state(data)
    assert not [name for name in vars(piece) if name.endswith("_")]
    again = LandmarkFeatures(impute="bayes", indices=fitted.landmark_indices_).fit_state(data)
    np.testing.assert_array_equal(again.transform(data), fitted.transform(data))
    assert (again.coef_var_, again.noise_var_) == (fitted.coef_var_, fitted.noise_var_)
    with pytest.warns(FutureWarning, match="LandmarkFeatures.fit is deprecated; use fit_state"):
        old = piece.fit(data)
    np.testing.assert_array_equal(old.landmark_indices_, fitted.landmark_indices_)
    with pytest.raises(ValueError, match="indices must be training rows with every view"):
        LandmarkFeatures(indices=[0, 30]).fit_state(data)


def test_least_squares_imputation_is_eq_11():
    rng = np.random.default_rng(1)
    views = [rng.normal(size=(40, 3)), rng.normal(size=(40, 5)), rng.normal(size=(40, 2))]
    fmap = LandmarkFeatures(n_landmarks=4, random_seed=2).fit_state(check_views(views))
    lm = fmap.landmark_indices_
    missing = [v.copy() for v in views]
    target_rows = np.array([lm[0], 7 if 7 not in lm else 8])
    missing[1][target_rows] = np.nan
    data = check_views(missing)
    imputed = fmap.transform(data)
    full = fmap.transform(check_views(views))
    P = fmap.projections_
    obs = np.r_[0:4, 8:12]
    for row in target_rows:  # r = argmin ||μ_obs - r P_obs||², then μ_miss = r P_miss
        r = np.linalg.lstsq(P[:, obs].T, full[row, obs], rcond=None)[0]
        np.testing.assert_allclose(imputed[row, 4:8], r @ P[:, 4:8], rtol=1e-8, atol=1e-10)
        np.testing.assert_array_equal(imputed[row, obs], full[row, obs])
    # a landmark with a view deleted is rebuilt exactly (r is its indicator vector)
    np.testing.assert_allclose(imputed[lm[0]], full[lm[0]], atol=1e-8)
    others = np.setdiff1d(np.arange(40), target_rows)
    np.testing.assert_array_equal(imputed[others], full[others])


def test_probabilistic_imputation_marginal_likelihood_and_limit():
    rng = np.random.default_rng(3)
    views = [rng.normal(size=(50, 3)), rng.normal(size=(50, 4))]
    views[1][:10] = np.nan
    views[0][40:45] = np.nan
    data = check_views(views)
    fmap = LandmarkFeatures(n_landmarks=5, impute="bayes", random_seed=0).fit_state(data)
    M = fmap.similarities(data)
    P = fmap.projections_
    s2, sig2 = 0.3, 0.02
    dense = 0.0
    for row, obs in zip(M, data.observed, strict=True):
        cols = fmap._columns(obs)
        cov = s2 * P[:, cols].T @ P[:, cols] + sig2 * np.eye(cols.size)
        dense += stats.multivariate_normal(np.zeros(cols.size), cov).logpdf(row[cols])
    assert fmap.imputation_log_likelihood(M, data.observed, s2, sig2) == pytest.approx(dense)
    best = fmap.imputation_log_likelihood(M, data.observed, fmap.coef_var_, fmap.noise_var_)
    for f1, f2 in ((1.2, 1.0), (0.8, 1.0), (1.0, 1.2), (1.0, 0.8)):  # empirical Bayes optimum
        assert fmap.imputation_log_likelihood(M, data.observed, f1 * fmap.coef_var_,
                                              f2 * fmap.noise_var_) < best
    # conditional means become eq. 11's least squares as s² → ∞, σ² → 0
    blocks = fmap.missing_blocks(M, data.observed, coef_var=1e8, noise_var=1e-12)
    lsq = fmap.least_squares_impute(M, data.observed)
    for blk in blocks:
        np.testing.assert_allclose(blk.mean, lsq[np.ix_(blk.rows, blk.columns)], atol=1e-5)
    # and the covariance is that of μ_miss | μ_obs under the dense joint Gaussian
    blk = blocks[0]
    obs = fmap._columns(data.observed[blk.rows[0]])
    mid = fmap.missing_blocks(M, data.observed, coef_var=s2, noise_var=sig2)[0]
    joint = s2 * P.T @ P + sig2 * np.eye(P.shape[1])
    Soo, Smo = joint[np.ix_(obs, obs)], joint[np.ix_(blk.columns, obs)]
    cond = joint[np.ix_(blk.columns, blk.columns)] - Smo @ np.linalg.solve(Soo, Smo.T)
    np.testing.assert_allclose(mid.covariance(), cond, atol=1e-10)
    np.testing.assert_allclose(mid.mean, (Smo @ np.linalg.solve(Soo, M[np.ix_(blk.rows, obs)].T)).T,
                               atol=1e-10)


def test_thirty_percent_missing_views_on_uci_digits(digits):
    """30 % of the (sample, view) slots missing in training and test: imputation loses at
    most a few points of accuracy and beats dropping the incomplete training rows."""
    Xtr, ytr, Xte, yte = digits
    rng = np.random.default_rng(0)
    params = dict(n_landmarks=30, C=1e3, random_seed=0)
    full = MVLSVM(**params).fit(Xtr, ytr).score(Xte, yte)
    Mtr, miss = _drop_views(Xtr, 0.3, rng)
    Mte, _ = _drop_views(Xte, 0.3, rng)
    scores = {imp: MVLSVM(impute=imp, **params).fit(Mtr, ytr).score(Mte, yte)
              for imp in ("landmarks", "bayes")}
    complete = ~miss.any(axis=1)
    dropped = MVLSVM(**params).fit([x[complete] for x in Mtr], ytr[complete]).score(Mte, yte)
    # dropping keeps 53 of 450 rows; over three such splits (rng seeds 0-2) imputation beat
    # it by 4.4-12.8 points with whitened similarities, 7.6-10.4 with raw ones
    for score in scores.values():
        assert score >= full - 0.06
        assert score > dropped + 0.03


# ------------------------------------------------------------------------ estimator
def test_fitted_state_predictions_and_round_trip(digits, tmp_path):
    Xtr, ytr, Xte, yte = digits
    rows = np.isin(ytr, (2, 4, 8))
    X, y = [x[rows][:90] for x in Xtr], ytr[rows][:90]
    X[2][:10] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = MVLSVM(n_landmarks=8, C=200.0, impute="bayes", inference="gibbs", draws=60,
                     tune=40, random_seed=2, **QUIET).fit(X, y)
    post = est.idata_.posterior
    assert post.attrs["inference"] == "gibbs"
    assert post["f"].dims == ("chain", "draw", "sample", "task")
    assert post["f"].shape == (2, 60, 90, 3) and post["beta"].shape == (2, 60, 3, 48)
    assert est.convergence_ is not None and est.sampling_time_ > 0
    assert est.landmark_indices_.size == 8
    assert np.isfinite(X[2][est.landmark_indices_]).all()  # landmarks are complete rows
    test = [x[np.isin(yte, (2, 4, 8))][:40] for x in Xte]
    test[0][:5] = np.nan
    proba = est.predict_proba(test)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    # the one-hot label's likelihood under the tasks' averaged probabilities, written out:
    # q_k ∝ p_k(+1) Π_{j≠k} p_j(-1)
    pos, neg = (np.exp(lp) for lp in est._log_predictive(test))
    q = np.stack([pos[:, k] * np.prod(np.delete(neg, k, axis=1), axis=1) for k in range(3)],
                 axis=1)
    np.testing.assert_allclose(proba, q / q.sum(axis=1, keepdims=True), rtol=1e-10)
    assert est.decision_function(test).shape == (40, 3)
    np.testing.assert_array_equal(np.argmax(est.decision_function(test), axis=1),
                                  np.argmax(proba, axis=1))
    path = est.save(tmp_path / "mvlsvm.nc")
    loaded = bayesmv.load(path)
    assert isinstance(loaded, MVLSVM) and loaded.get_params() == est.get_params()
    np.testing.assert_array_equal(loaded.predict_proba(test), proba)
    np.testing.assert_array_equal(loaded.transform(test), est.transform(test))
    np.testing.assert_array_equal(loaded.landmark_indices_, est.landmark_indices_)
    m = MVLSVM(n_landmarks=8, C=200.0, random_seed=2).fit(X, y)
    assert m.idata_.posterior.attrs["inference"] == "map"
    assert m.idata_.posterior["f"].shape == (1, 1, 90, 3) and m.convergence_.ok
    m2 = bayesmv.load(m.save(tmp_path / "map.nc"))
    np.testing.assert_array_equal(m2.decision_function(test), m.decision_function(test))
    # the calibration travels with the model
    assert m2.link_constant_ == m.link_constant_ != 200.0 / (2 * 90)
    np.testing.assert_array_equal(m2.predict_proba(test), m.predict_proba(test))
    raw = MVLSVM(n_landmarks=8, C=200.0, random_seed=2, whiten=False).fit(X, y)
    raw2 = bayesmv.load(raw.save(tmp_path / "raw.nc"))
    assert not raw2.feature_map_.whiten and m2.feature_map_.whiten
    np.testing.assert_array_equal(raw2.predict_proba(test), raw.predict_proba(test))


def test_reproducible_and_sklearn_compatible():
    X, y = _blobs(60, seed=7)
    params = dict(n_landmarks=4, C=30.0, inference="gibbs", draws=30, tune=10, **QUIET)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = MVLSVM(random_seed=3, **params).fit(X, y)
        b = MVLSVM(random_seed=3, **params).fit(X, y)
        c = MVLSVM(random_seed=4, **params).fit(X, y)
    np.testing.assert_array_equal(a.idata_.posterior["f"], b.idata_.posterior["f"])
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    assert not np.array_equal(a.idata_.posterior["f"], c.idata_.posterior["f"])
    est = MVLSVM(n_landmarks=5, C=50.0, random_seed=0, view_sizes=(3, 2))
    assert clone(est).get_params() == est.get_params()
    scores = cross_val_score(est, np.hstack(X), y, cv=3)
    assert scores.mean() > 0.7


def test_bad_input_fails_early_with_clear_messages():
    X, y = _blobs(30, seed=8)
    est = MVLSVM(n_landmarks=4, random_seed=0).fit(X, y)
    idata = est.idata_
    for params, match in (({"C": 0.0}, "C must be"), ({"n_landmarks": 0}, "n_landmarks"),
                          ({"inference": "vi"}, "inference must be"),
                          ({"impute": "mean"}, "impute must be"),
                          ({"gamma": -1.0}, "gamma must be positive"),
                          ({"gamma": [1.0, 2.0, 3.0]}, "gamma has 3 values"),
                          ({"tune": -1}, "tune"), ({"whiten": "yes"}, "whiten must be")):
        with pytest.raises(ValueError, match=match):
            clone(est).set_params(**params).fit(X, y)
    missing = [X[0], X[1].copy()]
    missing[1][:3] = np.nan
    with pytest.raises(ValueError, match=r"views \['view1'\].*impute=None"):
        clone(est).set_params(impute=None).fit(missing, y)
    strict = clone(est).set_params(impute=None).fit(X, y)
    with pytest.raises(ValueError, match=r"views \['view1'\].*impute=None"):
        strict.predict(missing)
    assert est.idata_ is idata
    with pytest.warns(UserWarning, match="only 2 training rows have every view"):
        few = [X[0], X[1].copy()]
        few[1][2:] = np.nan
        MVLSVM(n_landmarks=5, C=10.0).fit(few, y)
    with pytest.raises(NotFittedError):
        MVLSVM().predict(X)


# ------------------------------------------------------------------------ calibration
def _hinge_log_odds(f, c):
    """log ℓ(+1|f) - log ℓ(-1|f) with ℓ(y|f) = exp(-2c·max(0, 1 - y f)), written out."""
    return -2 * c * np.maximum(0, 1 - f) + 2 * c * np.maximum(0, 1 + f)


def _hinge_probability(f, c):
    """Sollich's normalised hinge likelihood ℓ(+1|f) / (ℓ(+1|f) + ℓ(-1|f))."""
    return special.expit(_hinge_log_odds(f, c))


def _platt_on_svc(Phi, y, C, seed):
    """Platt's fit (smoothed targets) of the hinge probability's constant to out-of-fold
    decision values of scikit-learn's SVC on the documented folds: (c, minimal NLL)."""
    oof = np.empty(y.size)
    for train, test in StratifiedKFold(5, shuffle=True, random_state=seed).split(Phi, y):
        svc = SVC(kernel="linear", C=C / train.size, tol=1e-10).fit(Phi[train], y[train])
        oof[test] = svc.decision_function(Phi[test])
    n_pos, n_neg = np.sum(y == 1), np.sum(y == 0)
    target = np.where(y == 1, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))

    def nll(log_c):
        odds = _hinge_log_odds(oof, np.exp(log_c))
        return -np.sum(target * special.log_expit(odds) + (1 - target) * special.log_expit(-odds))

    res = optimize.minimize_scalar(nll, bounds=(-10, 10), method="bounded",
                                   options={"xatol": 1e-10})
    return float(np.exp(res.x)), float(res.fun)


def test_out_of_fold_calibration_is_platt_scaling_of_the_svm():
    """The MAP's link constant is Platt's maximum-likelihood fit (smoothed targets) of the
    hinge probability to out-of-fold decision values, recomputed here with scikit-learn's
    SVC on the landmark features and the documented folds."""
    X, y = _blobs(150, seed=11)
    Xt, _ = _blobs(50, seed=12)
    C = 30.0
    est = MVLSVM(n_landmarks=8, C=C, random_seed=4, tol=1e-8).fit(X, y)
    c, _ = _platt_on_svc(est.transform(X), y, C, seed=4)
    assert est.link_constant_ == pytest.approx(c, rel=1e-3)
    f = est.decision_function(Xt)  # a MAP fit on complete rows: the SVM's f itself
    np.testing.assert_allclose(f, est._decision_draws(Xt)[0, :, 0], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(est.predict_proba(Xt)[:, 1], _hinge_probability(f, c),
                               rtol=1e-3, atol=1e-6)
    raw = MVLSVM(n_landmarks=8, C=C, random_seed=4, tol=1e-8, calibration_cv=None).fit(X, y)
    assert raw.link_constant_ == C / (2 * y.size)
    np.testing.assert_allclose(raw.predict_proba(Xt)[:, 1],
                               _hinge_probability(f, C / (2 * y.size)), rtol=1e-9)


def test_auto_C_is_the_grid_value_with_the_best_held_out_calibrated_likelihood(tmp_path):
    """``C="auto"``: each candidate's held-out negative log-likelihood (Platt's fit on
    out-of-fold SVC decisions, recomputed with scikit-learn) is the one stored, the chosen
    C_ is their minimiser, and the fit is the one with that C given explicitly."""
    from bayesmv.models.mvlsvm import C_GRID

    X, y = _blobs(150, seed=21, shift=(0.5, 0.3))
    Xt, _ = _blobs(50, seed=22)
    est = MVLSVM(n_landmarks=10, random_seed=5, tol=1e-8).fit(X, y)
    Phi = est.transform(X)
    reference = np.array([_platt_on_svc(Phi, y, C, seed=5)[1] for C in C_GRID])
    stored = np.asarray(est.idata_.posterior.attrs["C_grid_heldout_nll"])
    np.testing.assert_allclose(stored, reference, rtol=1e-3)
    assert est.C_ == C_GRID[int(np.argmin(reference))]
    fixed = MVLSVM(n_landmarks=10, C=est.C_, random_seed=5, tol=1e-8).fit(X, y)
    np.testing.assert_allclose(est.predict_proba(Xt), fixed.predict_proba(Xt), rtol=1e-12)
    assert est.link_constant_ == fixed.link_constant_
    est.save(tmp_path / "auto.nc")
    loaded = bayesmv.load(tmp_path / "auto.nc")
    assert loaded.C_ == est.C_
    np.testing.assert_array_equal(loaded.predict_proba(Xt), est.predict_proba(Xt))
    with pytest.raises(ValueError, match="calibration_cv=None"):
        MVLSVM(calibration_cv=None).fit(X, y)
    with pytest.raises(ValueError, match="'auto'"):
        MVLSVM(C="big").fit(X, y)


def test_auto_landmarks_take_every_complete_row_up_to_200():
    X, y = _blobs(120, seed=3)
    assert MVLSVM(random_seed=0, C=10.0).fit(X, y).landmark_indices_.size == 120
    X, y = _blobs(260, seed=3)
    assert MVLSVM(random_seed=0, C=10.0).fit(X, y).landmark_indices_.size == 200


@pytest.mark.parametrize("inference", ["map", "gibbs"])
def test_calibrated_probabilities_approach_the_true_posterior(inference):
    """Gaussian views whose means move with the label have the exact posterior
    ``p(y = 1 | x) = sigmoid(2 Σ_v μ_vᵀ x_v)``: the calibrated probabilities (out-of-fold for
    the MAP, PSIS-LOO for Gibbs) come within a few points of it on fresh rows, and their
    Brier score within 0.03 of the Bayes-optimal one, where the pseudo-likelihood's own
    constant C/(2N) is off by a quarter."""
    X, y = _blobs(300, seed=0)
    Xt, yt = _blobs(3000, seed=1)
    truth = special.expit(2 * (0.7 * Xt[0].sum(axis=1) + 0.4 * Xt[1].sum(axis=1)))
    common = dict(n_landmarks=10, C=100.0, random_seed=0, inference=inference)
    if inference == "gibbs":
        common.update(n_landmarks=5, draws=300, tune=100, **QUIET)
    errors, briers = [], []
    for cv in (5, None):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            p = MVLSVM(calibration_cv=cv, **common).fit(X, y).predict_proba(Xt)[:, 1]
        errors.append(np.mean(np.abs(p - truth)))
        briers.append(np.mean((p - yt) ** 2))
    assert errors[0] < 0.1 and errors[1] > 0.2, errors
    assert briers[0] < np.mean((truth - yt) ** 2) + 0.03, briers
