"""MVM (multi-view machines): model equation, log density, optimiser, inference, estimator.

References used here are independent of the package code: a brute-force full interaction
tensor, NumPy log densities written out, finite differences, scikit-learn's logistic
regression and linear SVM.
"""

import itertools
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.special import expit, log_expit
from scipy.stats import gamma as gamma_dist
from scipy.stats import halfnorm, laplace, norm
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression
from sklearn.svm import LinearSVC

import bayesmv
from bayesmv import MVM, MVMRegressor
from bayesmv.components import CPInteractionCombiner, LinearFeatures
from bayesmv.data import check_views
from bayesmv.inference.optimize import FlatLogp
from bayesmv.models.mvm import DEFAULT_ENSEMBLE

# ---------------------------------------------------------------- helpers


def brute_force_tensor(factors):
    """W = Σ_f a_f^(1) ∘ … ∘ a_f^(V) for one task (factors: list of (D_v + 1, k))."""
    letters = "abcdefgh"[: len(factors)]
    spec = ",".join(f"{c}z" for c in letters) + "->" + letters
    return np.einsum(spec, *factors)


def brute_force_yhat(W, xs):
    """⟨W, z_1 ∘ … ∘ z_V⟩ with z_v = [x_v, 1], one sample at a time."""
    out = []
    for i in range(xs[0].shape[0]):
        T = W
        for x in xs:
            T = np.tensordot(np.append(x[i], 1.0), T, axes=(0, 0))
        out.append(float(T))
    return np.array(out)


def _contract_subset(W, xs, S):
    """The block of ``W`` for the views in S (bias index elsewhere), contracted with their x."""
    index = tuple(slice(0, -1) if s else -1 for s in S)
    block = W[index]
    chosen = [x for x, s in zip(xs, S, strict=True) if s]
    if not chosen:
        return np.full(xs[0].shape[0], float(block))
    letters = "abcdefgh"[: len(chosen)]
    spec = letters + "," + ",".join(f"n{c}" for c in letters) + "->n"
    return np.einsum(spec, block, *chosen)


def views_data(rng, n, sizes):
    return [rng.standard_normal((n, d)) for d in sizes]


def built_model(X, y, **params):
    est = MVM(standardize=False, **{"loss": "logistic", **params})
    return est, est.build_model(X, y)


# ------------------------------------------------------------- model equation
@pytest.mark.parametrize("sizes", [(3, 2), (2, 3, 2), (2, 2, 3, 2)])
def test_model_equation_equals_full_tensor(sizes):
    rng = np.random.default_rng(len(sizes))
    n, k, T = 7, 3, 2
    xs = views_data(rng, n, sizes)
    factors = [rng.standard_normal((T, d + 1, k)) for d in sizes]
    fast = CPInteractionCombiner.evaluate(factors, xs)
    sparse = CPInteractionCombiner.evaluate(factors, [sp.csr_matrix(x) for x in xs])
    for t in range(T):
        W = brute_force_tensor([A[t] for A in factors])
        ref = brute_force_yhat(W, xs)
        rel = np.abs(fast[:, t] - ref).max() / np.abs(ref).max()
        assert rel <= 1e-10
        np.testing.assert_allclose(sparse[:, t], ref, rtol=1e-10, atol=1e-12)
        # every interaction order, from the global bias W[-1, …, -1] to the V-th, comes
        # from the bias rows: the sum of all 2^V order blocks is the model equation
        orders = sum(_contract_subset(W, xs, S)
                     for S in itertools.product([False, True], repeat=len(sizes)))
        np.testing.assert_allclose(orders, ref, rtol=1e-10)
        global_bias = np.sum(np.prod([A[t][-1] for A in factors], axis=0))
        assert W[(-1,) * len(sizes)] == pytest.approx(global_bias, rel=1e-12)


def test_graph_f_equals_numpy_model_equation():
    rng = np.random.default_rng(3)
    X = views_data(rng, 20, (3, 2, 4))
    y = rng.integers(0, 3, 20)
    est, built = built_model(X, y, rank=2)
    point = built.initial_values(rng)
    model = built.model
    f_graph = model.compile_fn(model.replace_rvs_by_values([model["f"]])[0],
                               inputs=model.value_vars, point_fn=False)(
        *[point[v.name] for v in model.value_vars])
    f_np = CPInteractionCombiner.evaluate([point[f"A_{v}"] for v in range(3)], X)
    np.testing.assert_allclose(f_graph, f_np, rtol=1e-12)
    assert f_graph.shape == (20, 3)  # one-vs-rest: one column per class


# ---------------------------------------------------------- log posterior
def numpy_log_posterior(point, X, y, *, loss, prior, s=1.0, C=1.0, scale_prior=None):
    V = len(X)
    factors = [point[f"A_{v}"] for v in range(V)]
    f = CPInteractionCombiner.evaluate(factors, X)[:, 0]
    yy = np.where(y > 0, 1.0, -1.0)
    if loss == "logistic":
        lp = log_expit(yy * f).sum()
    elif loss == "hinge":
        lp = -2 * C * np.maximum(0.0, 1.0 - yy * f).sum()
    else:
        sigma = np.exp(point["sigma_log__"])
        lp = norm.logpdf(y, f, sigma).sum() + halfnorm.logpdf(sigma)
    if scale_prior is None:
        rates = np.full(V, 1 / s**2 if prior == "normal" else 1 / s)
    else:
        rates = np.exp(point["prior_rate_log__"])
        lp += gamma_dist.logpdf(rates, scale_prior[0], scale=1 / scale_prior[1]).sum()
    for A, r in zip(factors, rates, strict=True):
        lp += (norm.logpdf(A, 0, r**-0.5) if prior == "normal"
               else laplace.logpdf(A, 0, 1 / r)).sum()
    return lp


CONFIGS = [
    dict(loss="logistic", prior="normal", s=0.8),
    dict(loss="logistic", prior="laplace", s=0.5),
    dict(loss="hinge", prior="normal", s=1.3, C=0.7),
    dict(loss="logistic", prior="normal", scale_prior=(2.0, 1.5)),
    dict(loss="squared", prior="normal", s=0.9),
]


def _make(cfg, rng):
    X = views_data(rng, 25, (3, 2, 2))
    if cfg["loss"] == "squared":
        y = rng.standard_normal(25)
        est = MVMRegressor(rank=2, prior=cfg["prior"], prior_scale=cfg.get("s", 1.0),
                           scale_prior=cfg.get("scale_prior"), standardize=False)
        built = est.build_model(X, y)
        y = built.context.targets[:, 0]  # the graph sees the standardised target
    else:
        y = rng.integers(0, 2, 25)
        est = MVM(rank=2, loss=cfg["loss"], prior=cfg["prior"], prior_scale=cfg.get("s", 1.0),
                  C=cfg.get("C", 1.0), scale_prior=cfg.get("scale_prior"), standardize=False)
        built = est.build_model(X, y)
    return X, y, built


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c['loss']}-{c['prior']}")
@pytest.mark.python_ops  # evaluates graphs a few times: gcc would be most of it
def test_log_posterior_and_gradient(cfg):
    rng = np.random.default_rng(11)
    X, y, built = _make(cfg, rng)
    flat = FlatLogp(built.model, jacobian=False)
    x = flat.from_point(built.initial_values(rng)) + 0.3 * rng.standard_normal(flat.size)
    lp, grad = flat(x)
    ref = numpy_log_posterior(flat.to_point(x), X, y, loss=cfg["loss"], prior=cfg["prior"],
                              s=cfg.get("s", 1.0), C=cfg.get("C", 1.0),
                              scale_prior=cfg.get("scale_prior"))
    assert lp == pytest.approx(ref, rel=1e-10)
    assert flat.logp(x) == pytest.approx(ref, rel=1e-10)  # the value alone (Laplace's k̂)
    h = 1e-6
    for j in rng.choice(flat.size, size=min(flat.size, 25), replace=False):
        e = np.zeros(flat.size)
        e[j] = h
        fd = (flat(x + e)[0] - flat(x - e)[0]) / (2 * h)
        assert grad[j] == pytest.approx(fd, rel=1e-5, abs=1e-6)


def test_zero_is_a_saddle_and_the_start_is_not():
    rng = np.random.default_rng(2)
    X = views_data(rng, 30, (3, 3))
    est, built = built_model(X, rng.integers(0, 2, 30), rank=3)
    flat = FlatLogp(built.model, jacobian=False)
    assert np.abs(flat(np.zeros(flat.size))[1]).max() == 0.0  # all gradients vanish at 0
    start = flat.from_point(built.initial_values(rng))
    assert np.abs(flat(start)[1]).max() > 1e-2


@pytest.mark.python_ops  # an exact Hessian graph evaluated once: no gcc
@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_exact_hessian_diagonal(loss):
    from bayesmv.inference.curvature import fast_diagonal

    rng = np.random.default_rng(5)
    X = views_data(rng, 30, (2, 3))
    if loss == "squared":
        est = MVMRegressor(rank=2, standardize=False, scale_prior=(2.0, 1.0))
        built = est.build_model(X, rng.standard_normal(30))
    else:
        est, built = built_model(X, rng.integers(0, 2, 30), rank=2)
    flat = FlatLogp(built.model, jacobian=True)
    x = flat.from_point(built.initial_values(rng)) + 0.2 * rng.standard_normal(flat.size)
    diag = fast_diagonal(built, flat)(x)  # the CP strategy the Laplace engine uses
    e = np.zeros(flat.size)
    ref = np.empty(flat.size)
    for j in range(flat.size):
        e[j] = 1.0
        ref[j] = -flat.hvp(x, e)[j]
        e[j] = 0.0
    np.testing.assert_allclose(diag, ref, rtol=1e-9, atol=1e-10)


# ------------------------------------------------------------------- MAP
def test_map_recovers_planted_interaction_where_linear_fails():
    rng = np.random.default_rng(0)
    n = 1000
    X = views_data(rng, n, (5, 4))
    u = [rng.standard_normal(5), rng.standard_normal(4)]
    y = ((X[0] @ u[0]) * (X[1] @ u[1]) > 0).astype(int)
    tr, te = slice(0, 500), slice(500, None)
    est = MVM(rank=4, loss="logistic", random_seed=0).fit([x[tr] for x in X], y[tr])
    acc = est.score([x[te] for x in X], y[te])
    Z = np.hstack(X)
    linear = LogisticRegression().fit(Z[tr], y[tr]).score(Z[te], y[te])
    assert acc > 0.9 and linear < 0.65, (acc, linear)
    assert est.idata_.posterior.attrs["inference"] == "map"
    # the default MAP keeps DEFAULT_ENSEMBLE modes, one chain, best first; factors_ is the
    # best one
    post = est.idata_.posterior
    assert post.sizes["chain"] == 1 and post.sizes["draw"] == DEFAULT_ENSEMBLE
    assert np.all(np.diff(post.attrs["mode_logps"]) <= 0)
    assert [A.shape for A in est.factors_] == [(6, 4), (5, 4)]


def _hinge_p_positive(f, C):
    """p(y = +1 | f) of the normalised hinge pseudo-likelihood, written out."""
    up, down = np.exp(-2 * C * np.maximum(0, 1 - f)), np.exp(-2 * C * np.maximum(0, 1 + f))
    return up / (up + down)


def test_map_ensemble_is_the_equal_mixture_of_independent_modes():
    rng = np.random.default_rng(3)
    X = views_data(rng, 160, (4, 3, 2))
    y = ((X[0][:, 0] * X[1][:, 1] + X[2][:, 0]) > 0).astype(int)
    tr, te = slice(0, 120), slice(120, None)
    Xtr, Xte = [x[tr] for x in X], [x[te] for x in X]
    kw = dict(rank=3, C=2.0, standardize=False, random_seed=5)
    ens = MVM(ensemble=4, n_init=1, **kw).fit(Xtr, y[tr])
    post = ens.idata_.posterior
    # with one start per member, the members are the restarts, sorted by log density
    np.testing.assert_allclose(post.attrs["mode_logps"],
                               np.sort(post.attrs["restart_logps"])[::-1])
    assert len(np.unique(np.round(post.attrs["mode_logps"], 6))) == 4  # distinct modes
    # the best member is the best-of-4-starts single MAP
    single = MVM(ensemble=1, n_init=4, **kw).fit(Xtr, y[tr])
    assert single.idata_.posterior.sizes["draw"] == 1
    for a, b in zip(ens.factors_, single.factors_, strict=True):
        np.testing.assert_array_equal(a, b)
    # predict_proba: the hinge probability averaged over the modes, model equation by hand
    p = np.zeros(len(y[te]))
    for s in range(4):
        proj = [np.hstack([x, np.ones((len(x), 1))]) @ post[f"A_{v}"].values[0, s, 0]
                for v, x in enumerate(Xte)]
        p += _hinge_p_positive(np.prod(proj, axis=0).sum(axis=1), 2.0) / 4
    np.testing.assert_allclose(ens.predict_proba(Xte)[:, 1], p, rtol=1e-10, atol=1e-12)
    # decision_function is the moderated value: it ranks and signs rows as predict_proba
    d = ens.decision_function(Xte)
    assert np.all(np.diff(p[np.argsort(d)]) >= -1e-12)  # (rows with p = 1.0 tie)
    np.testing.assert_array_equal(ens.predict(Xte), (p > 0.5).astype(int))
    with pytest.raises(ValueError, match="ensemble=3.*inference='map'"):
        MVM(ensemble=3, inference="laplace", loss="logistic").fit(Xtr, y[tr])
    # reports name the ensemble; the summary gives the best mode and the spread over modes
    from bayesmv.diagnostics import check_convergence, summary

    assert "MAP ensemble (4 modes" in check_convergence(ens).summary_line()
    table = summary(ens, var_names=["f"])
    f = post["f"].values[0, :, :, 0]  # (modes, rows)
    np.testing.assert_allclose(table["map"], f[0])
    np.testing.assert_allclose(table["mean"], f.mean(axis=0))
    np.testing.assert_allclose(table["max"] - table["min"], np.ptp(f, axis=0))
    np.testing.assert_allclose(table["sd"], f.std(axis=0, ddof=1))


def test_single_view_map_is_penalised_logistic_regression():
    """V = 1: ŷ = z ᵀ Σ_f a_f is linear, and minimising Σ_f |a_f|²/2s² subject to Σ_f a_f = w
    gives |w|²/(2ks²): the MAP is L2 logistic regression with C = k s² (intercept penalised
    alike, via a column of ones).  For L1, min Σ_f |a_f|₁ s.t. Σ_f a_f = w is |w|₁: C = s."""
    rng = np.random.default_rng(1)
    n, D = 300, 6
    X = rng.standard_normal((n, D))
    y = (rng.random(n) < expit(X @ rng.standard_normal(D) + 0.5)).astype(int)
    Z = np.hstack([X, np.ones((n, 1))])
    k, s = 3, 0.7
    est = MVM(rank=k, loss="logistic", prior_scale=s, standardize=False, random_seed=0,
              tol=1e-12).fit([X], y)
    ref = LogisticRegression(C=k * s**2, fit_intercept=False, tol=1e-12, max_iter=10000)
    ref.fit(Z, y)
    np.testing.assert_allclose(est.decision_function([X]), ref.decision_function(Z),
                               atol=1e-5)
    np.testing.assert_allclose(est.factors_[0].sum(axis=1), ref.coef_[0], atol=1e-5)
    s1 = 0.05
    est = MVM(rank=2, loss="logistic", prior="laplace", prior_scale=s1, standardize=False,
              random_seed=0, tol=1e-12).fit([X], y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = LogisticRegression(penalty="l1", solver="liblinear", C=s1, fit_intercept=False,
                                 tol=1e-12, max_iter=100000).fit(Z, y)
    w = est.factors_[0].sum(axis=1)
    np.testing.assert_allclose(w, ref.coef_[0], atol=1e-5)
    np.testing.assert_array_equal(w == 0, ref.coef_[0] == 0)  # exact zeros, same support
    assert (w == 0).any()


def test_single_view_hinge_map_reaches_linear_svm_optimum():
    rng = np.random.default_rng(4)
    n, D = 200, 5
    X = rng.standard_normal((n, D))
    y = (X @ rng.standard_normal(D) + 0.5 * rng.standard_normal(n) > 0).astype(int)
    Z, yy = np.hstack([X, np.ones((n, 1))]), 2 * y - 1
    C, s = 0.5, 0.7

    def objective(w):  # -log posterior up to a constant: 2C Σ hinge + |w|²/(2s²)
        return 2 * C * np.maximum(0, 1 - yy * (Z @ w)).sum() + w @ w / (2 * s**2)

    est = MVM(rank=1, loss="hinge", C=C, prior_scale=s, standardize=False, random_seed=0,
              tol=1e-12, max_iter=5000).fit([X], y)
    svm = LinearSVC(C=2 * C * s**2, loss="hinge", fit_intercept=False, tol=1e-10,
                    max_iter=10**6).fit(Z, y)
    assert objective(est.factors_[0][:, 0]) <= objective(svm.coef_[0]) * (1 + 1e-4)


def test_linear_truth_matches_logistic_regression():
    """Truth linear in the concatenated views: the MVM (rank 4) and plain logistic regression
    estimate the same conditional; with n = 1500 they differ only by estimation noise (the
    MVM's 36 extra interaction parameters).  Measured over 3 seeds: mean |Δp| 0.020–0.027,
    accuracy gaps ≤ 0.006; the bounds below leave ~2× room."""
    rng = np.random.default_rng(0)
    n, nt = 1500, 2000
    X = views_data(rng, n + nt, (4, 3))
    logit = X[0] @ rng.standard_normal(4) + X[1] @ rng.standard_normal(3) + 0.3
    y = (rng.random(n + nt) < expit(logit)).astype(int)
    tr, te = slice(0, n), slice(n, None)
    est = MVM(rank=4, loss="logistic", random_seed=0, standardize=False).fit(
        [x[tr] for x in X], y[tr])
    Z = np.hstack(X)
    ref = LogisticRegression(C=1.0).fit(Z[tr], y[tr])
    p_mvm = est.predict_proba([x[te] for x in X])[:, 1]
    p_lr = ref.predict_proba(Z[te])[:, 1]
    assert np.abs(p_mvm - p_lr).mean() < 0.05
    assert abs(est.score([x[te] for x in X], y[te]) - ref.score(Z[te], y[te])) < 0.02


def test_l1_map_satisfies_optimality_conditions():
    """KKT conditions of the exact L1 problem: ∂ℓ/∂a = sign(a)/s where a ≠ 0 and
    |∂ℓ/∂a| ≤ 1/s where a = 0 (ℓ: log-likelihood)."""
    rng = np.random.default_rng(6)
    X = views_data(rng, 200, (6, 5))
    y = ((X[0][:, 0] + 0.5) * (X[1][:, 1] - 0.3) > 0).astype(int)
    s = 0.3
    est = MVM(rank=2, loss="logistic", prior="laplace", prior_scale=s, standardize=False,
              random_seed=1, tol=1e-12, max_iter=5000).fit(X, y)
    built = est.build_model(X, y)
    flat = FlatLogp(built.model, jacobian=False)
    point = {f"A_{v}": est.factors_[v][None] for v in range(2)}
    x = flat.from_point(point)
    _, g = flat(x)
    g_lik = g + np.sign(x) / s  # remove the prior's -sign(a)/s
    zero = x == 0
    assert zero.sum() >= 5  # L1 gives exact zeros
    np.testing.assert_allclose(g_lik[~zero], np.sign(x[~zero]) / s, atol=2e-3)
    assert np.all(np.abs(g_lik[zero]) <= 1 / s + 2e-3)


# --------------------------------------------------------------- sparse input
@pytest.mark.slow
def test_dense_and_sparse_inputs_give_the_same_fit(monkeypatch):
    rng = np.random.default_rng(7)
    n = 150
    dense = [sp.random(n, d, density=0.3, random_state=i, format="csr",
                       data_rvs=lambda m: rng.standard_normal(m)).toarray()
             for i, d in enumerate((8, 6, 5))]
    y = ((dense[0][:, :3].sum(1) + 0.1) * (dense[1][:, :2].sum(1) - 0.1) > 0).astype(int)
    params = dict(rank=3, loss="logistic", random_seed=3, standardize=False, tol=1e-12, ensemble=2)
    a = MVM(**params).fit(dense, y)
    sparse = [sp.csr_matrix(x) for x in dense]

    def no_densify(*args, **kwargs):
        raise AssertionError("a sparse view was densified")

    for name in ("toarray", "todense"):
        monkeypatch.setattr(sp.csr_matrix, name, no_densify)
    b = MVM(**params).fit(sparse, y)
    mixed = MVM(**params).fit([sparse[0], dense[1], sparse[2]], y)
    one_matrix = MVM(view_sizes=(8, 6, 5), **params).fit(sp.hstack(sparse, format="csr"), y)
    for other in (b, mixed, one_matrix):
        for A, B in zip(a.factors_, other.factors_, strict=True):
            np.testing.assert_allclose(A, B, atol=1e-6)
        np.testing.assert_allclose(a.predict_proba(dense), other.predict_proba(sparse),
                                   atol=1e-8)
    assert sp.issparse(b.build_model(sparse, y).context.state["linear_views"][0])


def test_data_layer_keeps_sparse_views_sparse():
    S = sp.random(12, 5, density=0.3, random_state=2, format="csr")
    D = np.arange(36.0).reshape(12, 3)
    with pytest.raises(TypeError, match="sparse matrix, which is not supported here"):
        check_views([S, D])  # the default is unchanged
    data = check_views([S, D], allow_sparse=True)
    assert sp.issparse(data.views[0]) and data.observed.all()
    assert (data.views[0] != S).nnz == 0 and data.views[0] is not S
    sub = data.subset([3, 1])
    assert sp.issparse(sub.views[0])
    np.testing.assert_array_equal(sub.views[0].toarray(), S.toarray()[[3, 1]])
    whole = data.concatenated()
    assert sp.issparse(whole) and whole.shape == (12, 8)
    split = check_views(sp.hstack([S, sp.csr_matrix(D)]), view_sizes=(5, 3), allow_sparse=True)
    np.testing.assert_array_equal(split.views[1].toarray(), D)
    from bayesmv.data import ViewStandardizer
    st = ViewStandardizer().fit(data)
    again = ViewStandardizer.from_dict(st.to_dict()).transform(data)
    assert (again.views[0] != S).nnz == 0  # sparse view passes through
    np.testing.assert_allclose(again.views[1].std(axis=0), 1.0)


def test_sparse_views_are_not_standardised_and_reject_nan():
    rng = np.random.default_rng(8)
    S = sp.random(40, 10, density=0.2, random_state=0, format="csr")
    D = rng.standard_normal((40, 3)) * 5 + 2
    y = rng.integers(0, 2, 40)
    est = MVM(rank=2, random_seed=0, max_iter=50).fit([S, D], y)
    data = est._prepare([S, D])
    assert sp.issparse(data.views[0]) and (data.views[0] != S).nnz == 0
    np.testing.assert_allclose(data.views[1], (D - D.mean(axis=0)) / D.std(axis=0))
    bad = S.copy()
    bad.data[0] = np.nan
    with pytest.raises(ValueError, match=r"view 0 \('view0'\) is sparse and contains NaN"):
        est.fit([bad, D], y)


# ----------------------------------------------------------- Laplace and NUTS
def test_laplace_approximation():
    rng = np.random.default_rng(9)
    X = views_data(rng, 200, (3, 3))
    y = ((X[0] @ [1, -1, 0.5]) * (X[1] @ [0.5, 1, 1]) > 0).astype(int)
    mp = MVM(rank=3, loss="logistic", random_seed=0, ensemble=1).fit(X, y)
    full = MVM(rank=3, random_seed=0, inference="laplace", draws=300).fit(X, y)
    diag = MVM(rank=3, random_seed=0, inference="laplace", draws=300,
               laplace_curvature="diagonal").fit(X, y)
    attrs = full.idata_.posterior.attrs
    assert attrs["inference"] == "laplace" and attrs["laplace_curvature"] == "full"
    assert attrs["laplace_flat_directions"] == 3  # rotations of two views: k(k-1)/2
    assert diag.idata_.posterior.attrs["laplace_curvature"] == "diagonal"
    assert full.idata_.posterior["f"].shape == (1, 300, 200, 1)
    for est in (full, diag):
        for A, B in zip(est.factors_, mp.factors_, strict=True):  # the mode is the MAP
            np.testing.assert_allclose(A, B, atol=1e-4)
        agree = np.mean(est.predict(X) == mp.predict(X))
        assert agree > 0.95
        p = est.predict_proba(X)
        np.testing.assert_allclose(p.sum(axis=1), 1.0)
        draws = est._class_probability_draws(X)  # the diagnostics protocol
        assert draws.shape == (200, 200, 2)  # max_predict_draws of the 300 draws
        np.testing.assert_allclose(draws.mean(axis=0), p, rtol=1e-10, atol=1e-12)
    assert np.isfinite(attrs["laplace_khat"])
    # averaging over the posterior pulls probabilities towards 1/2 relative to the plug-in MAP
    assert np.abs(full.predict_proba(X)[:, 1] - 0.5).mean() < \
        np.abs(mp.predict_proba(X)[:, 1] - 0.5).mean()


def test_laplace_khat_separates_good_from_bad_approximations():
    """With one view and rank 1 the model is logistic regression, whose posterior at n = 2000
    is close to Gaussian (Pareto k̂ < 0.5); on separable data with a wide prior the
    likelihood is flat at the mode and the Gaussian is far too wide (k̂ > 0.7, warned)."""
    rng = np.random.default_rng(16)
    X = rng.standard_normal((2000, 3))
    y = (rng.random(2000) < expit(X @ [1.0, -0.5, 0.3])).astype(int)
    good = MVM(rank=1, inference="laplace", draws=400, standardize=False, random_seed=0)
    assert good.fit([X], y).idata_.posterior.attrs["laplace_khat"] < 0.5
    Xs = views_data(rng, 80, (3, 3))
    ys = (Xs[0][:, 0] + Xs[1][:, 0] > 0).astype(int)
    with pytest.warns(RuntimeWarning, match="k-hat"):
        bad = MVM(rank=2, prior_scale=3.0, inference="laplace", draws=200,
                  random_seed=0).fit(Xs, ys)
    assert bad.idata_.posterior.attrs["laplace_khat"] > 0.7


def numpy_jacobian(factors, xs):
    """∂ŷ/∂a^(v)_{d,f} = z_{v,d} Π_{u≠v} z_uᵀ a^(u)_{:,f}, one task, written out per view:
    list of (n, D_v + 1, k)."""
    zs = [np.column_stack([x, np.ones(len(x))]) for x in xs]
    proj = [z @ A for z, A in zip(zs, factors, strict=True)]
    out = []
    for v, z in enumerate(zs):
        others = np.prod([proj[u] for u in range(len(zs)) if u != v], axis=0)
        out.append(z[:, :, None] * others[:, None, :])
    return out


@pytest.mark.parametrize("sizes", [(3, 4), (2, 3, 4)])
def test_jacobian_vector_product_matches_finite_differences(sizes):
    rng = np.random.default_rng(20 + len(sizes))
    n, k, T = 9, 3, 2
    xs = views_data(rng, n, sizes)
    factors = [rng.standard_normal((T, d + 1, k)) for d in sizes]
    tangents = [rng.standard_normal((T, d + 1, k)) for d in sizes]
    h = 1e-5
    plus = CPInteractionCombiner.evaluate([A + h * d for A, d in zip(factors, tangents,
                                                                     strict=True)], xs)
    minus = CPInteractionCombiner.evaluate([A - h * d for A, d in zip(factors, tangents,
                                                                      strict=True)], xs)
    fd = (plus - minus) / (2 * h)
    jvp = CPInteractionCombiner.jvp(factors, tangents, xs)
    assert np.abs(jvp - fd).max() / np.abs(fd).max() <= 1e-6
    # sparse views, and a batch of tangents, give the same products
    batch = [np.stack([d, -2.0 * d]) for d in tangents]
    both = CPInteractionCombiner.jvp(factors, batch, [sp.csr_matrix(x) for x in xs])
    np.testing.assert_allclose(both[0], jvp, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(both[1], -2.0 * jvp, rtol=1e-12, atol=1e-12)
    # the linearisation is exact to first order: ŷ(A + δ) − ŷ_lin(A + δ) = O(|δ|²)
    for eps in (1e-2, 1e-3):
        moved = [A + eps * d for A, d in zip(factors, tangents, strict=True)]
        lin = CPInteractionCombiner.linearized_evaluate(factors, [m[None] for m in moved], xs)
        gap = np.abs(CPInteractionCombiner.evaluate(moved, xs) - lin[0]).max()
        assert gap <= 50 * eps**2 * np.abs(fd).max()


@pytest.mark.parametrize("kind", ["logistic", "regressor"])
def test_laplace_predictive_is_the_linearised_gaussian(kind):
    """Diagonal Laplace: the linearised draws of ŷ at new points are N(ŷ_MAP, Σ_j J_j² σ_j²),
    with J written out in NumPy and σ_j the stored Laplace sds."""
    rng = np.random.default_rng(17)
    X = views_data(rng, 120, (3, 4))
    signal = (X[0] @ [1.0, -1.0, 0.5]) * (X[1] @ [0.5, 1.0, 1.0, -0.5]) + X[0][:, 0]
    Xn = views_data(rng, 40, (3, 4))
    S = 1500
    params = dict(rank=2, random_seed=0, standardize=False, laplace_curvature="diagonal",
                  draws=S, max_predict_draws=2 * S)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The Laplace approximation")
        if kind == "logistic":
            y = (rng.random(120) < expit(signal)).astype(int)
            mp = MVM(rank=2, loss="logistic", random_seed=0, standardize=False,
                     ensemble=1).fit(X, y)
            est = MVM(inference="laplace", **params).fit(X, y)
        else:
            y = 2.0 * signal + rng.standard_normal(120)
            mp = MVMRegressor(rank=2, random_seed=0, standardize=False).fit(X, y)
            est = MVMRegressor(inference="laplace", **params).fit(X, y)
    mode = [est.idata_.fit[f"A_{v}"].values[0] for v in range(2)]
    sds = [est.idata_.fit[f"sd_A_{v}"].values[0] for v in range(2)]
    zs = [np.column_stack([x, np.ones(len(x))]) for x in Xn]
    f_map = np.sum(np.prod([z @ A for z, A in zip(zs, mode, strict=True)], axis=0), axis=1)
    J = numpy_jacobian(mode, Xn)
    var = sum(np.sum(Jv**2 * sd[None] ** 2, axis=(1, 2)) for Jv, sd in zip(J, sds, strict=True))
    draws = est._decision_draws(Xn)[:, :, 0]
    assert draws.shape == (2 * S, 40)  # the retained draws and their reflections
    # the mean of the linearised draws is the MAP's decision value (exactly, by the pairs;
    # a Monte-Carlo bound of 4 standard errors would be ~0.1 sd)
    np.testing.assert_allclose(draws.mean(axis=0), f_map, rtol=1e-9, atol=1e-9)
    if kind == "logistic":
        # the posterior mean of ŷ, not decision_function: Laplace's is the moderated value
        np.testing.assert_allclose(est.decision_distribution(Xn)[0][:, 0],
                                   mp.decision_function(Xn), rtol=1e-6, atol=1e-6)
        assert np.array_equal(est.predict(Xn), mp.predict(Xn))
        p = est.predict_proba(Xn)[:, 1]
        np.testing.assert_allclose(p, expit(draws).mean(axis=0), rtol=1e-12)
    else:
        mean, sd = est.predict(Xn, return_std=True)
        # the Laplace mode includes log σ's Jacobian (the MAP does not): a slightly other σ
        np.testing.assert_allclose(mean, mp.predict(Xn), rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(mean, f_map * est.y_scale_ + est.y_mean_, rtol=1e-9)
        sigma2 = np.mean(est.idata_.posterior["sigma"].values.ravel() ** 2)
        np.testing.assert_allclose(sd**2 / est.y_scale_**2, draws.var(axis=0) + sigma2,
                                   rtol=1e-10)
    # Var of S i.i.d. N(0, v) about the known mean: relative sd sqrt(2/S) = 3.7 %; the band
    # below is ~4.5 of those, for the largest of 40 points
    ratio = draws.var(axis=0) / var
    assert np.abs(ratio - 1).max() < 0.17, ratio
    assert abs(ratio.mean() - 1) < 0.05
    # the stored training f is the linearised predictive too: centred on the mode's ŷ
    f_train = est.idata_.posterior["f"].values[0, :, :, 0]
    f_fit = np.sum(np.prod([np.column_stack([x, np.ones(120)]) @ A
                            for x, A in zip(X, mode, strict=True)], axis=0), axis=1)
    se = f_train.std(axis=0) / np.sqrt(S)
    assert np.all(np.abs(f_train.mean(axis=0) - f_fit) < 5 * se)


def test_laplace_keeps_map_accuracy_on_uci_digits():
    """Regression test: the sampled-factor predictive of the Laplace fit was near chance on
    the UCI digits (0.42–0.56 where the MAP had 0.95); the linearised one is not."""
    from sklearn.model_selection import train_test_split

    from bayesmv.datasets import load_multiple_features

    X, y = load_multiple_features(classes=(3, 5))
    tr, te = train_test_split(np.arange(len(y)), test_size=0.5, stratify=y, random_state=0)
    Xtr, Xte = [x[tr] for x in X], [x[te] for x in X]
    params = dict(rank=4, loss="logistic", max_iter=100, random_seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # max_iter reached; the Laplace k̂ warning
        mp = MVM(**params).fit(Xtr, y[tr])
        lap = MVM(inference="laplace", draws=200, **params).fit(Xtr, y[tr])
    assert lap.idata_.posterior.attrs["laplace_curvature"] == "diagonal"
    acc_map, acc_lap = mp.score(Xte, y[te]), lap.score(Xte, y[te])
    assert acc_map > 0.9
    assert abs(acc_lap - acc_map) <= 0.03, (acc_lap, acc_map)
    # what the model equation at the sampled factors gives (the old predictive): ŷ explodes
    views = LinearFeatures().transform(lap._prepare(Xte))
    post = lap.idata_.posterior
    sampled = np.mean([expit(CPInteractionCombiner.evaluate(
        [post[f"A_{v}"].values[0, s] for v in range(6)], views)[:, 0]) for s in range(50)],
        axis=0)
    assert np.mean((sampled > 0.5) == (y[te] == 5)) < acc_map - 0.1


def test_nuts_diagnostics_are_judged_on_f():
    rng = np.random.default_rng(10)
    X = views_data(rng, 60, (2, 2))
    y = ((X[0][:, 0] + 0.3) * (X[1][:, 0] - 0.2) > 0).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = MVM(rank=2, inference="nuts", draws=300, tune=300, chains=2, cores=1,
                  random_seed=1, prior_scale=0.7).fit(X, y)
    report = est.convergence_
    assert report.var_names == ("f",)
    assert "not identifiable" in report.note and "f" in report.note
    assert est.idata_.posterior.attrs["inference"] == "nuts"
    assert est.idata_.posterior["f"].shape == (2, 300, 60, 1)
    assert report.max_r_hat < 1.05 and report.min_ess_bulk > 150
    assert est.idata_.fit.attrs["point_estimate"] == "highest-density draw"
    assert 0.0 <= est.predict_proba(X).min() and est.score(X, y) > 0.8


# ------------------------------------------------------------- estimator API
def test_multiclass_one_vs_rest_and_missing_views():
    rng = np.random.default_rng(12)
    n = 240
    centers = rng.standard_normal((3, 5)) * 2
    labels = rng.integers(0, 3, n)
    full = centers[labels] + rng.standard_normal((n, 5))
    X = [full[:, :3], full[:, 3:]]
    names = np.array(["a", "b", "c"])[labels]
    est = MVM(rank=2, random_seed=0).fit(X, names)
    assert list(est.classes_) == ["a", "b", "c"]
    assert [A.shape for A in est.factors_] == [(3, 4, 2), (3, 3, 2)]
    assert est.decision_function(X).shape == (n, 3)
    np.testing.assert_allclose(est.predict_proba(X).sum(axis=1), 1.0)
    assert est.score(X, names) > 0.8
    # a missing view is read as x_v = 0, i.e. the view's training mean after standardisation
    X_missing = [X[0][:5].copy(), X[1][:5].copy()]
    X_missing[1][[1, 3]] = np.nan
    X_mean = [X[0][:5], X[1][:5].copy()]
    X_mean[1][[1, 3]] = X[1].mean(axis=0)
    np.testing.assert_allclose(est.decision_function(X_missing), est.decision_function(X_mean),
                               atol=1e-10)


def test_reproducible_save_load_and_sklearn_api(tmp_path):
    rng = np.random.default_rng(13)
    X = views_data(rng, 80, (3, 2))
    y = (X[0][:, 0] * X[1][:, 0] > 0).astype(int)
    a = MVM(rank=2, random_seed=5).fit(X, y)
    b = clone(a).fit(X, y)
    for A, B in zip(a.factors_, b.factors_, strict=True):
        np.testing.assert_array_equal(A, B)
    loaded = bayesmv.load(a.save(tmp_path / "mvm.nc"))
    assert isinstance(loaded, MVM)
    np.testing.assert_array_equal(loaded.predict_proba(X), a.predict_proba(X))
    np.testing.assert_array_equal(loaded.factors_[1], a.factors_[1])
    relevance = a.view_relevance()
    assert list(relevance.index) == ["view0", "view1"]
    assert relevance["share"].sum() == pytest.approx(1.0)
    concat = MVM(rank=2, random_seed=5, view_sizes=(3, 2)).fit(np.hstack(X), y)
    np.testing.assert_allclose(concat.decision_function(np.hstack(X)), a.decision_function(X))
    with pytest.raises(NotFittedError):
        MVM().predict(X)


@pytest.mark.parametrize(("params", "match"), [
    (dict(rank=0), "rank must be a positive integer"),
    (dict(loss="exp"), "loss must be one of"),
    (dict(prior="cauchy"), "prior must be 'normal' or 'laplace'"),
    (dict(prior_scale=-1.0), "prior_scale must be a positive"),
    (dict(inference="vi"), "inference must be one of"),
    (dict(scale_prior=(1.0, -2.0)), "scale_prior must be a pair"),
    (dict(inference="laplace", loss="hinge"), "twice-differentiable"),
    (dict(inference="laplace", prior="laplace"), "prior='laplace' is not offered"),
    (dict(loss="hinge", C=0.0), "C must be a positive"),
    (dict(max_iter=0), "max_iter must be a positive integer"),
    (dict(laplace_curvature="lowrank"), "laplace_curvature must be one of"),
    (dict(ensemble=0), "ensemble must be a positive integer"),
    (dict(ensemble=2.5), "ensemble must be a positive integer"),
    (dict(ensemble=True), "ensemble must be a positive integer"),
    (dict(ensemble=2, inference="nuts"), "ensemble=2 averages several MAP fits"),
])
def test_bad_hyper_parameters_raise_before_work(params, match):
    X = [np.ones((4, 2)), np.ones((4, 2))]
    with pytest.raises(ValueError, match=match):
        MVM(**params).fit(X, [0, 1, 0, 1])


def test_regressor_recovers_multiplicative_target(tmp_path):
    rng = np.random.default_rng(14)
    n = 400
    X = views_data(rng, n, (3, 3))
    target = (X[0] @ [1.0, -0.5, 0.2]) * (X[1] @ [0.3, 1.0, -1.0]) + 2.0
    y = 3.0 * target + 0.3 * rng.standard_normal(n)
    tr, te = slice(0, 300), slice(300, None)
    est = MVMRegressor(rank=2, random_seed=0).fit([x[tr] for x in X], y[tr])
    assert est.score([x[te] for x in X], y[te]) > 0.97
    mean, sd = est.predict([x[te] for x in X], return_std=True)
    sigma = float(est.idata_.posterior["sigma"].values.ravel()[0]) * est.y_scale_
    assert sigma == pytest.approx(0.3, rel=0.3)  # the noise level, on the original scale
    np.testing.assert_allclose(sd, sigma)  # one MAP (the regressor's default): no spread
    loaded = bayesmv.load(est.save(tmp_path / "reg.nc"))
    assert isinstance(loaded, MVMRegressor) and not hasattr(loaded, "classes_")
    np.testing.assert_array_equal(loaded.predict([x[te] for x in X]), mean)


def test_builder_pieces_compose_with_check_views():
    rng = np.random.default_rng(15)
    data = check_views([sp.random(10, 4, density=0.5, random_state=1, format="csr"),
                        rng.standard_normal((10, 2))], allow_sparse=True)
    views = LinearFeatures().transform(data)
    assert sp.issparse(views[0]) and views[1].shape == (10, 2)
    builder = bayesmv.ModelBuilder(None, LinearFeatures(), CPInteractionCombiner(rank=2),
                                   bayesmv.components.LogisticLikelihood())
    built = builder.build(data, np.where(rng.random((10, 1)) > 0.5, 1.0, -1.0))
    assert {"A_0", "A_1", "f", "y_obs"} <= set(built.model.named_vars)
    assert built.model.named_vars_to_dims["A_0"] == ("task", "z_0", "rank")


def test_one_hot_probabilities_are_the_likelihood_of_each_one_hot_label():
    """Written out: the product over tasks of ℓ_t(±1) at each one-hot target, normalised."""
    from bayesmv.components.likelihoods import log_hinge_probability, one_hot_probabilities

    rng = np.random.default_rng(21)
    f = 2.0 * rng.standard_normal((7, 4))
    p_pos = np.exp(log_hinge_probability(f, 0.8))
    joint = np.stack([np.prod(np.where(np.arange(4) == k, p_pos, 1.0 - p_pos), axis=1)
                      for k in range(4)], axis=1)
    got = one_hot_probabilities(log_hinge_probability(f, 0.8), log_hinge_probability(-f, 0.8))
    np.testing.assert_allclose(got, joint / joint.sum(axis=1, keepdims=True), rtol=1e-10)
    # two classes (one task): [ℓ(-1), ℓ(+1)]
    two = one_hot_probabilities(log_hinge_probability(f[:, :1], 0.8),
                                log_hinge_probability(-f[:, :1], 0.8))
    np.testing.assert_allclose(two[:, 1], p_pos[:, 0], rtol=1e-12)
    np.testing.assert_allclose(two.sum(axis=1), 1.0)
    # at the float limit (log-odds ±inf, or -inf - -inf) still a distribution, the right way
    for C in (1.0, 1e300):
        for f_far in ([1e308, 0.0, 0.0], [-1e308] * 3, [np.inf, 0.0, -np.inf]):
            f_far = np.array([f_far])
            with np.errstate(over="ignore", invalid="ignore"):
                p = one_hot_probabilities(log_hinge_probability(f_far, C),
                                          log_hinge_probability(-f_far, C))
            assert np.all(np.isfinite(p)) and p.sum() == pytest.approx(1.0), (C, f_far, p)
            if f_far[0, 0] > 0:
                assert p[0, 0] == pytest.approx(1.0)
