"""M3LAK end to end: the two samplers agree, known parameters are recovered, fits are
reproducible, fitted models round-trip through netCDF, and bad input fails before sampling."""

import warnings

import arviz as az
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

import bayesmv
from bayesmv import M3LAK
from bayesmv.datasets import make_lvm_classification, make_nonlinear_latent
from bayesmv.diagnostics import ConvergenceWarning
from bayesmv.diagnostics.convergence import without_numba
from bayesmv.inference.sample import keep_warmup
from bayesmv.models.base import load

TINY = dict(latent_dim=2, n_frequencies=8, view_latent_dim=1, n_components=3, draws=60, tune=60,
            chains=2, cores=1)


def _toy(n=40, seed=0, n_classes=2):
    X, y = make_nonlinear_latent(n_samples=n, view_dims=(5, 4), latent_dim=2,
                                 view_latent_dim=1, noise=0.3, random_seed=seed)
    if n_classes == 3:
        rng = np.random.default_rng(seed)
        y = np.where(rng.uniform(size=n) < 0.33, 2, y)
    return X, y


@pytest.fixture(scope="module")
def fitted():
    X, y = _toy()
    labels = np.array(["neg", "pos"])[y]
    with pytest.warns(ConvergenceWarning):  # 60 draws cannot meet the ESS thresholds
        est = M3LAK(random_seed=7, **TINY).fit(X, labels)
    return est, X, labels


def test_fit_returns_fitted_state(fitted):
    est, X, labels = fitted
    assert list(est.classes_) == ["neg", "pos"]
    idata = est.idata_
    assert isinstance(idata, az.InferenceData)
    for group in ("posterior", "sample_stats", "observed_data"):
        assert group in idata
    f = idata.posterior["f"]
    assert f.dims == ("chain", "draw", "sample", "task")
    assert f.shape == (2, 60, 40, 1)
    assert "H" not in idata.posterior  # per-sample latents are not stored
    assert est.convergence_.var_names[0] == "f"
    assert est.sampling_time_ > 0


def test_predictions_have_sklearn_shapes(fitted):
    est, X, labels = fitted
    proba = est.predict_proba(X)
    assert proba.shape == (40, 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    dec = est.decision_function(X)
    assert dec.shape == (40,)
    # positive decision values favour classes_[1], as in scikit-learn
    assert np.mean((dec > 0) == (proba[:, 1] > 0.5)) > 0.9
    assert set(est.predict(X)) <= {"neg", "pos"}
    assert est.score(X, labels) > 0.7


def test_missing_views_at_prediction(fitted):
    est, X, labels = fitted
    X_missing = [X[0].copy(), X[1].copy()]
    X_missing[1][:10] = np.nan  # view 1 missing for 10 samples
    dec = est.decision_function(X_missing)
    proba = est.predict_proba(X_missing)
    assert np.all(np.isfinite(dec)) and np.all(np.isfinite(proba))
    # samples with every view present are unaffected by their neighbours' missing views
    np.testing.assert_allclose(dec[10:], est.decision_function(X)[10:])


def test_save_load_predicts_identically(fitted, tmp_path):
    est, X, labels = fitted
    path = est.save(tmp_path / "m3lak.nc")
    loaded = bayesmv.load(path)
    assert isinstance(loaded, M3LAK)
    assert loaded.get_params() == est.get_params()
    np.testing.assert_array_equal(loaded.classes_, est.classes_)
    np.testing.assert_array_equal(loaded.decision_function(X), est.decision_function(X))
    np.testing.assert_array_equal(loaded.predict_proba(X), est.predict_proba(X))
    assert az.from_netcdf(str(path)).posterior["f"].shape == (2, 60, 40, 1)


def test_load_refuses_other_files_and_types(fitted, tmp_path):
    est, X, labels = fitted

    class Other:
        pass

    path = est.save(tmp_path / "m3lak.nc")
    with pytest.raises(TypeError, match="holds a M3LAK, not a Other"):
        load(path, expected=Other)
    plain = tmp_path / "plain.nc"
    az.from_dict(posterior={"x": np.zeros((1, 3))}).to_netcdf(str(plain))
    with pytest.raises(ValueError, match="no bayesmv model description"):
        bayesmv.load(plain)


def test_bad_input_fails_before_sampling_and_keeps_fitted_state(fitted):
    est, X, labels = fitted
    idata_before = est.idata_
    bad_partial = [X[0].copy(), X[1].copy()]
    bad_partial[0][3, 1] = np.nan
    with pytest.raises(ValueError, match="view 0.*partially missing"):
        est.fit(bad_partial, labels)
    with pytest.raises(ValueError, match="y"):
        est.fit(X, labels[:-1])
    with pytest.raises(ValueError, match="C must be a positive"):
        clone(est).set_params(C=-1.0).fit(X, labels)
    with pytest.raises(ValueError, match="sampler must be"):
        clone(est).set_params(sampler="gibbs").fit(X, labels)
    with pytest.raises(ValueError, match="fitted on 2"):
        est.predict([X[0]])
    with pytest.raises(ValueError, match="features"):
        est.predict([X[0][:, :3], X[1]])
    assert est.idata_ is idata_before
    with pytest.raises(NotFittedError):
        M3LAK().predict(X)


def test_sklearn_conventions():
    est = M3LAK(C=2.0, latent_dim=4)
    assert clone(est).get_params() == est.get_params()
    est.set_params(n_frequencies=12)
    assert est.n_frequencies == 12 and not hasattr(est, "idata_")


def test_single_array_with_view_sizes_and_multiclass():
    X, y = _toy(n=36, seed=1, n_classes=3)
    X_concat = np.hstack(X)
    est = M3LAK(view_sizes=(5, 4), random_seed=1, **TINY)
    with pytest.warns(ConvergenceWarning):
        est.fit(X_concat, y)
    assert est.idata_.posterior["f"].shape[-1] == 3  # one-vs-rest tasks, shared latent space
    assert est.decision_function(X_concat).shape == (36, 3)
    proba = est.predict_proba(X_concat)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    # chance is 1/3; 60 draws of this tiny model scored 0.44-0.72 over seeds 1-17
    assert est.score(X_concat, y) > 0.4
    # each draw's probability is the hinge likelihood of the one-hot label, written out:
    # q_k ∝ ℓ_k(+1) Π_{j≠k} ℓ_j(-1) with ℓ(y | f) = exp(-2C max(0, 1 - y f)), then averaged
    f = est._latent_draw_f(X_concat)
    f = f.reshape(-1, *f.shape[-2:])  # (draws × h* draws, n, 3)
    pos, neg = (np.exp(-2 * est.C * np.maximum(0, 1 - s * f)) for s in (1, -1))
    q = np.stack([pos[..., k] * np.prod(np.delete(neg, k, axis=-1), axis=-1)
                  for k in range(3)], axis=-1)
    np.testing.assert_allclose(proba, np.mean(q / q.sum(axis=-1, keepdims=True), axis=0),
                               rtol=1e-10)
    np.testing.assert_array_equal(est.classes_[np.argmax(est.decision_function(X_concat), 1)],
                                  est.predict(X_concat))


def test_reproducible_with_random_seed():
    X, y = _toy(n=30, seed=2)
    params = dict(TINY, draws=20, tune=20)
    with pytest.warns(ConvergenceWarning):
        a = M3LAK(random_seed=11, **params).fit(X, y)
        b = M3LAK(random_seed=11, **params).fit(X, y)
        c = M3LAK(random_seed=12, **params).fit(X, y)
    np.testing.assert_array_equal(a.idata_.posterior["f"], b.idata_.posterior["f"])
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    assert not np.array_equal(a.idata_.posterior["f"], c.idata_.posterior["f"])


def test_a_constant_column_is_left_out_of_the_latent_model():
    """A column constant on the training rows carries no information, but as an exactly
    reproduced feature it would inflate its view's noise precision: the fit with one appended
    equals, draw for draw, the fit without it, and predicts the same from the wider input."""
    X, y = _toy(n=30, seed=2)
    wide = [X[0], np.column_stack([X[1], np.full(len(y), 4.0)])]
    params = dict(TINY, draws=20, tune=20)
    with pytest.warns(ConvergenceWarning):
        plain = M3LAK(random_seed=5, **params).fit(X, y)
        padded = M3LAK(random_seed=5, **params).fit(wide, y)
    assert padded.n_features_in_ == plain.n_features_in_ + 1
    assert padded.layout_.view_sizes == (5, 5)
    np.testing.assert_array_equal(padded.idata_.posterior["f"], plain.idata_.posterior["f"])
    np.testing.assert_array_equal(padded.predict_proba(wide), plain.predict_proba(X))
    with pytest.raises(ValueError, match="has 4 features but the model was fitted with 5"):
        padded.predict(X)


def test_keep_warmup_adds_the_tuning_iterations_and_changes_no_draw():
    X, y = _toy(n=30, seed=2)
    params = dict(TINY, draws=12, tune=15)
    with pytest.warns(ConvergenceWarning):
        plain = M3LAK(random_seed=11, **params).fit(X, y)
        with keep_warmup():
            kept = M3LAK(random_seed=11, **params).fit(X, y)
        after = M3LAK(random_seed=11, **params).fit(X, y)
    assert "warmup_posterior" not in plain.idata_.groups()
    assert "warmup_posterior" not in after.idata_.groups()  # the setting ends with the block
    warm = kept.idata_.warmup_posterior
    assert (warm.sizes["chain"], warm.sizes["draw"]) == (2, 15)
    assert kept.idata_.warmup_sample_stats.sizes["draw"] == 15
    np.testing.assert_array_equal(kept.idata_.posterior["f"], plain.idata_.posterior["f"])
    # the chains move during tuning: the warm-up is the chains' own path, not a copy
    assert not np.allclose(warm["f"].values[:, 0], warm["f"].values[:, -1])


def test_gaussian_spectral_and_learned_prior_precision():
    X, y = _toy(n=30, seed=3)
    est = M3LAK(spectral="gaussian", precision_prior=(2.0, 2.0), random_seed=0,
                **dict(TINY, draws=30, tune=30))
    with pytest.warns(ConvergenceWarning):
        est.fit(X, y)
    post = est.idata_.posterior
    assert "v" in post and "dp_weights" not in post
    assert "v" in est.convergence_.var_names
    assert np.all(post["v"] > 0)


@pytest.mark.slow
def test_parameter_recovery_from_the_generative_model():
    """Noise precisions of the LVM are recovered and a separable labelling is learned."""
    tau = (4.0, 9.0)
    X, y, truth = make_lvm_classification(n_samples=240, view_dims=(10, 8), latent_dim=2,
                                          view_latent_dim=1, tau=tau, random_seed=5)
    train, test = np.arange(160), np.arange(160, 240)
    est = M3LAK(latent_dim=2, view_latent_dim=1, n_frequencies=20, n_components=5,
                view_loading_precision=1.0, standardize=False, draws=150, tune=150, chains=2,
                cores=1, random_seed=2)
    est.fit([x[train] for x in X], y[train])
    tau_mean = est.idata_.posterior["tau"].mean(("chain", "draw")).values
    np.testing.assert_allclose(tau_mean, tau, rtol=0.2)
    assert est.score([x[train] for x in X], y[train]) > 0.9
    assert est.score([x[test] for x in X], y[test]) > 0.85


def _held_out_summaries(sampler: str, draws: int) -> dict:
    """Mean, sd and 5 % / 95 % quantiles of six held-out decision values, each with its MCSE,
    from a small M3LAK posterior (default DP-mixture spectral density) sampled by ``sampler``."""
    X, y = make_nonlinear_latent(n_samples=40, view_dims=(8, 6), latent_dim=2,
                                 view_latent_dim=1, noise=0.3, random_seed=0)
    X_train, X_test = [x[:30] for x in X], [x[30:36] for x in X]
    est = M3LAK(latent_dim=2, n_frequencies=5, view_latent_dim=1, n_components=3,
                inference=sampler, draws=draws, tune=draws, chains=2, cores=1,
                random_seed=3, max_predict_draws=10**6)
    with warnings.catch_warnings():
        # judged by the agreement itself, whatever the per-chain ESS thresholds say
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X_train, y[:30])
    f = est._decision_draws(X_test)[..., 0].reshape(2, draws, -1)
    ds = az.convert_to_dataset({"f": f})
    with without_numba():  # ArviZ's numba path of the sd's MCSE fails on arrays
        return {
            "mean": (f.mean(axis=(0, 1)), az.mcse(ds)["f"].values),
            "sd": (f.reshape(-1, f.shape[-1]).std(axis=0, ddof=1),
                   az.mcse(ds, method="sd")["f"].values),
            **{f"q{q:.2f}": (np.quantile(f.reshape(-1, f.shape[-1]), q, axis=0),
                             az.mcse(ds, method="quantile", prob=q)["f"].values)
               for q in (0.05, 0.95)},
        }


@pytest.fixture(scope="module")
def nuts_held_out_summaries():
    return _held_out_summaries("nuts", 400)


def _assert_same_posterior(ours: dict, nuts: dict) -> None:
    for stat in ours:
        (h, se_h), (n, se_n) = ours[stat], nuts[stat]
        z = (h - n) / np.sqrt(se_h**2 + se_n**2)
        # 24 comparisons: |z| < 3.8 each keeps the family-wise false alarm rate below 0.4 %
        assert np.all(np.abs(z) < 3.8), (stat, z)
    (m_h, se_h), (_, se_n) = ours["mean"], nuts["mean"]
    assert np.all(se_h < 0.1) and np.all(se_n < 0.1) and np.ptp(m_h) > 1.0


@pytest.mark.long
@pytest.mark.timeout(600)
def test_hybrid_and_nuts_target_the_same_posterior(nuts_held_out_summaries):
    """Posterior mean, sd and 5 % / 95 % quantiles of held-out decision values agree within
    Monte-Carlo error (ArviZ's MCSE of each), with the default DP-mixture spectral density."""
    _assert_same_posterior(_held_out_summaries("hybrid", 500), nuts_held_out_summaries)


def _sweep_with(monkeypatch, step_class) -> None:
    """The default hybrid sweep with one more step (one not in the default sweep) at its end."""
    from bayesmv.inference import sample as sample_module
    from bayesmv.inference.spec import HybridSpec

    default_steps = sample_module.hybrid_steps

    def extended(built, target_accept=0.8, tune=0):
        H = built.model.rvs_to_values[built.model["H"]]
        return default_steps(built, target_accept=target_accept, tune=tune) + [
            step_class([H], HybridSpec.from_built(built), model=built.model)]

    monkeypatch.setattr(sample_module, "hybrid_steps", extended)


@pytest.mark.long
@pytest.mark.timeout(600)
def test_latent_column_move_keeps_the_hybrid_sampler_on_the_posterior(nuts_held_out_summaries,
                                                                     monkeypatch):
    """The sweep with :class:`LatentColumnHMC` added (not in the default sweep) still samples
    the posterior NUTS samples: the move and its loadings' redraw leave it invariant."""
    from bayesmv.inference.latent_column import LatentColumnHMC

    _sweep_with(monkeypatch, LatentColumnHMC)
    _assert_same_posterior(_held_out_summaries("hybrid", 500), nuts_held_out_summaries)


@pytest.mark.long
@pytest.mark.timeout(600)
def test_collapsed_views_move_keeps_the_hybrid_sampler_on_the_posterior(nuts_held_out_summaries,
                                                                       monkeypatch):
    """The sweep with :class:`CollapsedViewsHMC` added (not in the default sweep) still
    samples the posterior NUTS samples: the view latents' draw, the move with every view's
    loadings integrated out and their redraw leave it invariant."""
    from bayesmv.inference.collapsed_views import CollapsedViewsHMC

    _sweep_with(monkeypatch, CollapsedViewsHMC)
    _assert_same_posterior(_held_out_summaries("hybrid", 500), nuts_held_out_summaries)


@pytest.mark.parametrize("view_sizes", [(76, 216, 64, 240, 47, 6), (10, 10, 10), (5, 4),
                                        (3, 2), (30, 8), (1000, 2)])
def test_auto_latent_dims_leave_a_typical_view_out_of_exact_reach(view_sizes):
    """The latent (m + K dimensions) cannot reproduce the median view, is the largest that
    cannot (the classifier sees the views only through it), keeps the paper's order of size
    where the views allow it, and both are at least 1."""
    from bayesmv.components.latent import auto_latent_dims

    m, K = auto_latent_dims(view_sizes)
    typical = np.median(view_sizes)
    assert m >= 1 and K >= 1
    assert m <= 10 and K == 1  # the authors' code used K = 1; more columns mix slowly
    if typical >= 4:
        assert m + K < typical
        # one more shared column would reach the median view (rounded down)
        assert m == 10 or m + K + 1 >= int(typical)
    if typical >= 20:
        assert m == 10


def test_auto_latent_cap_grows_with_the_training_rows():
    """10 up to 600 rows, ``10·sqrt(N/600)`` beyond, at most 16; never past the views' bound."""
    from bayesmv.components.latent import auto_latent_dims

    digits = (76, 216, 64, 240, 47, 6)
    caps = [auto_latent_dims(digits, n_samples=n)[0] for n in (50, 300, 600, 1000, 1600, 10**5)]
    assert caps == [10, 10, 10, 13, 16, 16]
    assert auto_latent_dims(digits)[0] == 10
    assert auto_latent_dims((10, 10, 10), n_samples=5000) == (8, 1)


def test_latent_dims_auto_is_resolved_from_the_views_and_explicit_sizes_are_kept():
    X, y = _toy(n=30, seed=4)
    sizes = [x.shape[1] for x in X]
    est = M3LAK(**dict(TINY, latent_dim="auto", view_latent_dim="auto"), random_seed=0)
    with pytest.warns(ConvergenceWarning):
        est.fit(X, y)
    m, K = est.latent_dims_
    post = est.idata_.posterior
    assert post["W_0"].shape[-2:] == (sizes[0], m) and post["V_0"].shape[-1] == K
    assert m + K < np.median(sizes)
    assert M3LAK(latent_dim=3, view_latent_dim=2)._latent().dims(sizes) == (3, 2)
    # an explicit K: the automatic m still leaves a typical view out of exact reach
    m3, K3 = M3LAK(view_latent_dim=3)._latent().dims([10, 10, 10])
    assert K3 == 3 and m3 + K3 == 9
    with pytest.raises(ValueError, match="latent_dim must be a positive integer or 'auto'"):
        M3LAK(latent_dim="big").fit(X, y)


def test_sampler_is_a_deprecated_alias_of_inference():
    est = M3LAK(sampler="nuts")
    with pytest.warns(FutureWarning, match="use inference"):
        est._validate_params()
    assert est._method == "nuts" and M3LAK(inference="nuts")._method == "nuts"
    assert M3LAK()._method == "hybrid"
