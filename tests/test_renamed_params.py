"""Renamed parameters (one name per concept): the old names are deprecated aliases.

Each old name still works, with a FutureWarning naming old and new, and gives what the new
name gives; ``get_params`` holds both names and ``clone`` keeps them; a model saved before the
rename loads and predicts identically, without a warning.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.base import clone

from bayesmv import M3LAK, MVML, RhoTMVRKM, load
from bayesmv.components import (
    BlockMetricCombiner,
    DPMixtureSpectral,
    RandomFourierFeatures,
    SharedLatent,
    ViewKernels,
    ViewRandomFeatures,
)
from bayesmv.datasets import make_lvm_classification, make_nonlinear_latent
from bayesmv.diagnostics import posterior_predictive_check


def _data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = [rng.standard_normal((n, 3)), rng.standard_normal((n, 2))]
    y = (X[0][:, 0] + X[1][:, 0] > 0).astype(int)
    return X, y


def _fit_both(cls, old, new, **common):
    """Fit with the new names (no warning) and the old ones (one FutureWarning per name)."""
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        a = cls(**common, **new).fit(X, y)
    with pytest.warns(FutureWarning) as record:
        b = cls(**common, **old).fit(X, y)
    messages = " ".join(str(w.message) for w in record)
    for name in old:
        assert f"({name}=...) is deprecated" in messages
    for name in new:
        assert f"use {name}=..." in messages
    return a, b, X


def _check_params(est, old, new):
    params = est.get_params()
    assert set(old) | set(new) <= set(params)
    copy = clone(est)
    assert {k: copy.get_params()[k] for k in (*old, *new)} == {k: params[k]
                                                                for k in (*old, *new)}


def test_rhotmvrkm_lam_and_n_features():
    old, new = dict(lam=0.3, n_features=12), dict(alpha=0.3, n_frequencies=12)
    a, b, X = _fit_both(RhoTMVRKM, old, new, rho=0.5, gamma="scale", random_seed=0)
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    assert a.alpha_ == b.alpha_ == 0.3
    with pytest.warns(FutureWarning, match="lam_ is deprecated; use alpha_"):
        assert b.lam_ == b.alpha_
    _check_params(RhoTMVRKM(**old), old, new)
    with pytest.raises(ValueError, match="^lam must be"), pytest.warns(FutureWarning):
        RhoTMVRKM(lam=-1.0).fit(X, np.arange(len(X[0])) % 2)
    with pytest.raises(ValueError, match="^alpha must be"):
        RhoTMVRKM(alpha=-1.0).fit(X, np.arange(len(X[0])) % 2)


def test_rhotmvrkm_laplace_draws():
    """``laplace_draws`` is ``draws`` (the other estimators' name for posterior draws)."""
    old, new = dict(laplace_draws=7), dict(draws=7)
    a, b, X = _fit_both(RhoTMVRKM, old, new, rho=0.5, gamma="scale", inference="laplace",
                        random_seed=0)
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    assert a.idata_.posterior.sizes["draw"] == b.idata_.posterior.sizes["draw"] == 7
    _check_params(RhoTMVRKM(**old), old, new)
    with pytest.raises(ValueError, match="^laplace_draws must be"), pytest.warns(FutureWarning):
        RhoTMVRKM(laplace_draws=0).fit(X, np.arange(len(X[0])) % 2)


@pytest.mark.parametrize("make", [
    lambda **kw: make_nonlinear_latent(n_samples=30, view_dims=(3, 2), **kw),
    lambda **kw: make_lvm_classification(n_samples=30, **kw)[:2],
])
def test_data_generators_random_state(make):
    """The generators' ``random_state`` is ``random_seed`` (the estimators' name)."""
    views, y = make(random_seed=3)
    with pytest.warns(FutureWarning, match=r"\(random_state=\.\.\.\) is deprecated; "
                                           "use random_seed="):
        old_views, old_y = make(random_state=3)
    np.testing.assert_array_equal(y, old_y)
    for a, b in zip(views, old_views, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(make(random_seed=4)[1], y)


def test_posterior_predictive_check_random_state():
    X, y = _data()
    est = RhoTMVRKM(rho=0.5, gamma="scale", random_seed=0).fit(X, y)
    new = posterior_predictive_check(est, X, y, n_replications=50, random_seed=5)
    with pytest.warns(FutureWarning, match="posterior_predictive_check\\(random_state"):
        old = posterior_predictive_check(est, X, y, n_replications=50, random_state=5)
    np.testing.assert_array_equal(new.y_rep, old.y_rep)


def test_mvml_lmbda_and_eta():
    old, new = dict(lmbda=0.5, eta=2.0), dict(alpha=0.5, metric_penalty=2.0)
    a, b, X = _fit_both(MVML, old, new, nystrom=10, max_iter=5, random_seed=0)
    np.testing.assert_array_equal(a.A_, b.A_)
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    _check_params(MVML(**old), old, new)
    y = np.arange(len(X[0])) % 2
    with pytest.raises(ValueError, match="^lmbda must be"):
        MVML(lmbda=0.0).fit(X, y)
    with pytest.raises(ValueError, match="^metric_penalty must be"):
        MVML(metric_penalty=-1.0).fit(X, y)


def test_m3lak_renamed_parameters_reach_the_built_model():
    """M3LAK fits are slow: the resolved values in the built graph's components instead."""
    old = dict(n_features=7, eta=20.0, alpha=0.4, v=2.5, v_prior=(3.0, 2.0))
    new = dict(n_frequencies=7, view_loading_precision=20.0, concentration=0.4,
               prior_precision=2.5, precision_prior=(3.0, 2.0))
    X, y = _data(20)
    common = dict(latent_dim=2, view_latent_dim=1, n_components=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        a = M3LAK(**common, **new).build_model(X, y)
    with pytest.warns(FutureWarning) as record:
        b = M3LAK(**common, **old).build_model(X, y)
    assert len(record) == 5
    for built in (a, b):
        fmap = built.builder.feature_map
        assert fmap.n_frequencies == 7 and fmap.spectral.concentration == 0.4
        assert built.builder.representation.view_loading_precision == 20.0
        assert len(built.model.coords["frequency"]) == 7
        combiner = built.builder.combiner
        assert combiner.prior_precision == 2.5 and combiner.precision_prior == (3.0, 2.0)
    _check_params(M3LAK(**old), old, new)
    with pytest.raises(ValueError, match="^n_features must be a positive integer"):
        M3LAK(n_features=0).build_model(X, y)
    with pytest.raises(ValueError, match="^concentration must be"):
        M3LAK(concentration=0.0).build_model(X, y)
    with pytest.raises(ValueError, match="^v must be"):
        M3LAK(v=-1.0).build_model(X, y)


@pytest.mark.parametrize("old,new,make", [
    (dict(n_features=5), dict(n_frequencies=5), RandomFourierFeatures),
    (dict(n_features=5), dict(n_frequencies=5),
     lambda **kw: ViewRandomFeatures(kernel=["rbf"], gamma=[0.1], **kw)),
    (dict(kernels=["rbf", "linear"], gammas=[0.1, None]),
     dict(kernel=["rbf", "linear"], gamma=[0.1, None]),
     lambda **kw: ViewRandomFeatures(n_frequencies=3, **kw)),
    (dict(kernels=["linear"], gammas=[0.3]), dict(kernel=["linear"], gamma=[0.3]), ViewKernels),
    (dict(alpha=0.7), dict(concentration=0.7), DPMixtureSpectral),
    (dict(eta=3.0), dict(view_loading_precision=3.0), SharedLatent),
    (dict(lmbda=0.2, eta=4.0), dict(alpha=0.2, metric_penalty=4.0), BlockMetricCombiner),
])
def test_component_aliases(old, new, make):
    if not isinstance(make, type) and "n_frequencies" in new:  # a required n_frequencies
        old_c, new_c = make(n_frequencies=1, **old), make(**new)
    else:
        old_c, new_c = make(**old), make(**new)
    for name, value in new.items():
        assert old_c._param(name) == new_c._param(name) == value
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        new_c._warn_renamed()
    with pytest.warns(FutureWarning) as record:
        old_c._warn_renamed()
    assert len(record) == len(old)
    _check_params(old_c, old, new)


@pytest.mark.parametrize("make,renames", [
    (lambda: RhoTMVRKM(rho=0.5, alpha=0.3, n_frequencies=10, gamma="scale", random_seed=0),
     {"alpha": "lam", "n_frequencies": "n_features"}),
    (lambda: MVML(nystrom=10, max_iter=5, alpha=0.5, metric_penalty=2.0, random_seed=0),
     {"alpha": "lmbda", "metric_penalty": "eta"}),
])
def test_model_saved_before_the_rename_loads_and_predicts_identically(tmp_path, monkeypatch,
                                                                       make, renames):
    """Write the file the previous version wrote (old parameter names, and RhoTMVRKM's
    fitted λ under "lam"), then load it."""
    X, y = _data()
    est = make().fit(X, y)
    cls = type(est)
    get_params, extra_state = cls.get_params, cls._extra_state

    def old_params(self, deep=True):
        params = get_params(self, deep)
        for old in renames.values():
            params.pop(old)
        return {renames.get(k, k): v for k, v in params.items()}

    def old_extra(self):
        state = extra_state(self)
        if "alpha" in state and cls is RhoTMVRKM:
            state["lam"] = state.pop("alpha")
        return state

    monkeypatch.setattr(cls, "get_params", old_params)
    monkeypatch.setattr(cls, "_extra_state", old_extra)
    path = tmp_path / "old.nc"
    est.save(path)
    monkeypatch.undo()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        loaded = load(path)
        proba = loaded.predict_proba(X)
    np.testing.assert_array_equal(proba, est.predict_proba(X))
    params = loaded.get_params()
    for new, old in renames.items():
        assert params[new] == est.get_params()[new] and params[old] is None


def test_view_kernel_pieces_take_one_kernel_for_every_view_and_the_old_lists():
    """``kernel``/``gamma`` may be one value for every view (as NystromFeatures' and the
    estimators'); the old per-view lists under ``kernels``/``gammas`` give the same blocks."""
    X, _ = _data()
    one = ViewRandomFeatures(3, "rbf", 0.2, random_seed=1).blocks(X)
    lists = ViewRandomFeatures(3, ["rbf", "rbf"], [0.2, 0.2], random_seed=1).blocks(X)
    old = ViewRandomFeatures(3, kernels=["rbf", "rbf"], gammas=[0.2, 0.2],
                             random_seed=1).blocks(X)
    for a, b, c in zip([*one[0], one[1]], [*lists[0], lists[1]], [*old[0], old[1]],
                       strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    grams = ViewKernels("rbf", 0.2).grams(X, [0.2, 0.2])
    np.testing.assert_allclose(grams[1], np.exp(-0.2 * ((X[1][:, None] - X[1][None]) ** 2)
                                                .sum(-1)), atol=1e-12)
    with pytest.raises(ValueError, match="view 1's RBF width in gamma"):
        ViewRandomFeatures(3, "rbf", [0.2, None]).blocks(X)
    with pytest.raises(ValueError, match="kernel must be one of"):
        ViewKernels("poly").grams(X, [None, None])
    with pytest.raises(ValueError, match="kernel has 3 entries but there are 2 views"):
        ViewKernels(["rbf"] * 3).grams(X, [None, None])
