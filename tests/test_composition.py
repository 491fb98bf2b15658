"""Compositions of the builder's pieces: refused at construction, or fitted and predicted.

The grid is {identity, shared latent} × {linear, random Fourier, Nyström, landmarks, per-view
exact kernels, per-view random features} × {sum, ϱ-tensor, CP interaction, block metric} ×
{hinge, logistic, Gaussian}.  Every cell is checked at construction (fast); every buildable
cell is fitted with every inference engine in the exhaustive run (``-m exhaustive``); the
cells the package promises are fitted in the default run, and two of them against
scikit-learn's own solvers (independent references).
"""

from __future__ import annotations

import copy
import itertools
import tempfile
import warnings

import numpy as np
import pymc as pm
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import GridSearchCV

import bayesmv
from bayesmv import (
    M3LAK,
    MVLSVM,
    MVM,
    MVML,
    ModelBuilder,
    MultiViewClassifier,
    RhoTMVRKM,
)
from bayesmv.builder import CompositionError
from bayesmv.components import (
    BlockMetricCombiner,
    CPInteractionCombiner,
    DPMixtureSpectral,
    GaussianLikelihood,
    GaussianSpectral,
    HingeLikelihood,
    LandmarkFeatures,
    LinearFeatures,
    LogisticLikelihood,
    NystromFeatures,
    RandomFourierFeatures,
    RhoTensorCombiner,
    SharedLatent,
    SumCombiner,
    ViewKernels,
    ViewRandomFeatures,
)
from bayesmv.datasets import load_multiple_features
from bayesmv.inference.engines import INFERENCES
from bayesmv.inference.optimize import TaskBlockGaussian
from bayesmv.models.composed import _posterior_directions
from bayesmv.models.mvm import DEFAULT_ENSEMBLE

V = 3  # views in the small problem

REPRESENTATIONS = {"identity": lambda: None, "shared latent": lambda: SharedLatent(2, 1)}
FEATURE_MAPS = {
    "linear": LinearFeatures,
    "random Fourier": lambda: RandomFourierFeatures(4, GaussianSpectral()),
    "Nystrom": lambda: NystromFeatures(8),
    "landmarks": lambda: LandmarkFeatures(6),
    "view kernels": lambda: ViewKernels(["rbf"] * V, [0.1] * V),
    "view random features": lambda: ViewRandomFeatures(4, ["rbf"] * V, [0.1] * V),
}
COMBINERS = {
    "sum": lambda: SumCombiner(1.0, flat_bias=True),
    "rho-tensor": lambda: RhoTensorCombiner(0.5),
    "CP": lambda: CPInteractionCombiner(rank=2),
    "block metric": lambda: BlockMetricCombiner(learn_A="identity"),
}
LIKELIHOODS = {"hinge": HingeLikelihood, "logistic": LogisticLikelihood,
               "Gaussian": lambda: GaussianLikelihood(1.0)}
CELLS = list(itertools.product(REPRESENTATIONS, FEATURE_MAPS, COMBINERS, LIKELIHOODS))


def make(rep: str, fmap: str, comb: str, lik: str) -> ModelBuilder:
    return ModelBuilder(REPRESENTATIONS[rep](), FEATURE_MAPS[fmap](), COMBINERS[comb](),
                        LIKELIHOODS[lik]())


@pytest.fixture(scope="module")
def small():
    views, y = load_multiple_features(classes=(3, 5))
    rng = np.random.default_rng(1)
    idx = rng.permutation(len(y))
    tr, te = idx[:40], idx[40:60]
    cols = [rng.choice(v.shape[1], size=min(6, v.shape[1]), replace=False) for v in views[:V]]
    return ([v[tr][:, c] for v, c in zip(views, cols, strict=False)], y[tr],
            [v[te][:, c] for v, c in zip(views, cols, strict=False)], y[te])


@pytest.fixture(scope="module")
def three_classes():
    """60 training and 30 test rows of the digits 3, 5 and 8, the small problem's views."""
    views, labels = load_multiple_features(classes=(3, 5, 8))
    rng = np.random.default_rng(1)
    idx = rng.permutation(len(labels))
    cols = [rng.choice(v.shape[1], size=6, replace=False) for v in views[:V]]
    return ([v[idx[:60]][:, c] for v, c in zip(views, cols, strict=False)], labels[idx[:60]],
            [v[idx[60:90]][:, c] for v, c in zip(views, cols, strict=False)])


@pytest.mark.parametrize("cell", CELLS, ids=[" + ".join(c) for c in CELLS])
def test_every_cell_is_built_or_refused_with_both_pieces_named(cell):
    try:
        builder = make(*cell)
    except CompositionError as err:
        message = str(err)
        named = [type(p).__name__ for p in (FEATURE_MAPS[cell[1]](), COMBINERS[cell[2]](),
                                            LIKELIHOODS[cell[3]](), SharedLatent())
                 if type(p).__name__ in message]
        assert len(named) >= 2, message
        return
    assert clone(builder).get_params(deep=True).keys() == builder.get_params(deep=True).keys()


@pytest.mark.parametrize("cell, refused_because", [
    (("identity", "view kernels", "sum", "logistic"), "one Gram matrix per view"),
    (("shared latent", "linear", "sum", "logistic"), "a shared latent representation"),
    (("identity", "linear", "rho-tensor", "hinge"), "product of the views' kernels"),
    (("identity", "view random features", "rho-tensor", "hinge"), "Gaussian-process"),
    (("identity", "random Fourier", "block metric", "logistic"), "not functions of random"),
])
def test_impossible_compositions_are_refused_with_what_would_fit(cell, refused_because):
    with pytest.raises(CompositionError, match=refused_because):
        make(*cell)


def check_fit(builder: ModelBuilder, inference: str, small, chains: int = 2, *,
              save_to=None, pymc_tools: bool = False) -> MultiViewClassifier:
    """Fit, predict, and with ``save_to`` (a folder) save, load and predict identically; with
    ``pymc_tools`` draw the fitted graph and sample its prior predictive (PyMC's own tools,
    on the graph rebuilt after loading when it was saved)."""
    X, y, Xt, _ = small
    est = MultiViewClassifier(builder, inference=inference, draws=40, tune=40, chains=chains,
                              random_seed=0).fit(X, y)
    proba = est.predict_proba(Xt)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(est.predict(Xt) == est.classes_[np.argmax(proba, axis=1)])
    assert "f" in est.idata_.posterior and est.inference_ == est.idata_.posterior.attrs[
        "inference"]
    loaded = est
    if save_to is not None:
        loaded = bayesmv.load(est.save(save_to / "model.nc"))
        np.testing.assert_array_equal(loaded.predict_proba(Xt), proba)
    if pymc_tools:
        assert "f" in pm.model_to_graphviz(loaded.model_).source
        prior = pm.sample_prior_predictive(draws=5, model=est.model_, random_seed=0)
        assert np.all(np.isfinite(prior.prior["f"].values))
    return est


# (cell, inference asked for, engine expected to run)
PROMISED = [
    (("identity", "landmarks", "CP", "logistic"), "map", "map"),
    (("identity", "landmarks", "CP", "logistic"), "laplace", "laplace"),
    (("identity", "landmarks", "CP", "logistic"), "nuts", "nuts"),
    (("identity", "random Fourier", "sum", "logistic"), "nuts", "nuts"),
    (("identity", "Nystrom", "sum", "hinge"), "map", "map"),
    (("identity", "Nystrom", "sum", "hinge"), "auto", "gibbs"),
    (("identity", "linear", "sum", "Gaussian"), "auto", "exact"),
    (("identity", "view random features", "block metric", "logistic"), "map", "map"),
]
# cells whose fits evaluate their graphs little: PyTensor's Python ops beat gcc from an empty
# compile cache (1-10 s against 10-46 s); the NUTS cells stay compiled
_PYTHON_OPS_CELLS = {0, 1, 4, 5, 6, 7}


@pytest.mark.parametrize("cell, inference, engine", [
    pytest.param(*case, marks=[pytest.mark.python_ops] if i in _PYTHON_OPS_CELLS else [])
    for i, case in enumerate(PROMISED)], ids=[" + ".join(c) + f" / {i}" for c, i, _ in PROMISED])
def test_promised_cells_fit_predict_round_trip_and_work_with_pymc(cell, inference, engine,
                                                                  small, tmp_path):
    est = check_fit(make(*cell), inference, small, chains=1 if engine == "nuts" else 2,
                    save_to=tmp_path, pymc_tools=inference == "map")
    assert est.inference_ == engine  # "auto" states the engine it chose


# long: PyTensor compiles about 100 C modules for this graph's gradient (the DP mixture's),
# 130-180 s on two slow cores with an empty compile cache, against 22 s with a warm one
@pytest.mark.long
@pytest.mark.timeout(600)
def test_shared_latent_with_dp_random_features_and_logistic_fits_by_nuts(small):
    builder = ModelBuilder(SharedLatent(2, 1), RandomFourierFeatures(4, DPMixtureSpectral(3)),
                           SumCombiner(1.0), LogisticLikelihood())
    est = check_fit(builder, "nuts", small, chains=1)
    # the test rows' latent is drawn from its conditional with random numbers shared by every
    # row: the same predictions on every call, and a row's does not depend on the others
    Xt = small[2]
    proba = est.predict_proba(Xt)
    np.testing.assert_array_equal(est.predict_proba(Xt), proba)
    np.testing.assert_allclose(est.predict_proba([v[3:7] for v in Xt]), proba[3:7],
                               rtol=1e-10)
    # copying (or pickling) the estimator leaves its fitted graph and predictions alone
    twin = copy.deepcopy(est)
    assert "_model" in vars(est)
    np.testing.assert_allclose(twin.predict_proba(Xt), proba, rtol=1e-10)


def test_an_engine_that_does_not_apply_is_refused_before_fitting(small):
    X, y, _, _ = small
    est = MultiViewClassifier(make("identity", "view kernels", "rho-tensor", "Gaussian"),
                              inference="laplace")
    with pytest.raises(ValueError, match="no explicit decision values f .*laplace does not "
                                         "apply; use one of .'exact', 'map', 'nuts'"):
        est.fit(X, y)
    est = MultiViewClassifier(make("identity", "linear", "sum", "hinge"), inference="laplace")
    with pytest.raises(ValueError, match="hinge pseudo-likelihood has zero curvature"):
        est.fit(X, y)
    assert not hasattr(est, "idata_")
    est = MultiViewClassifier(make("identity", "linear", "sum", "logistic"), inference="gibbs")
    with pytest.raises(ValueError, match="gibbs augments the hinge"):
        est.fit(X, y)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="ensemble must be a positive integer"):
            MultiViewClassifier(ensemble=bad).fit(X, y)
    with pytest.raises(ValueError, match="ensemble=3 averages several MAP fits"):
        MultiViewClassifier(ensemble=3, inference="nuts").fit(X, y)
    # None is one MAP, as for the presets
    one = MultiViewClassifier(ensemble=None, inference="map", random_seed=0).fit(X, y)
    assert one.idata_.posterior.sizes["draw"] == 1


def test_linear_sum_logistic_map_is_scikit_learns_logistic_regression(small):
    X, y, Xt, _ = small
    precision = 0.5
    builder = ModelBuilder(None, LinearFeatures(), SumCombiner(precision, flat_bias=True),
                           LogisticLikelihood())
    est = MultiViewClassifier(builder, inference="map", standardize=False,
                              random_seed=0).fit(X, y)
    ref = LogisticRegression(C=1.0 / precision, solver="newton-cholesky", tol=1e-14,
                             max_iter=1000).fit(np.hstack(X), y)
    np.testing.assert_allclose(est.idata_.fit["beta"].values[0], ref.coef_[0], atol=1e-6)
    np.testing.assert_allclose(est.predict_proba(Xt), ref.predict_proba(np.hstack(Xt)),
                               atol=1e-6)


def test_linear_sum_gaussian_exact_is_scikit_learns_ridge(small):
    X, y, _, _ = small
    precision, sigma = 2.0, 0.7
    builder = ModelBuilder(None, LinearFeatures(), SumCombiner(precision),
                           GaussianLikelihood(sigma))
    est = MultiViewClassifier(builder, inference="exact", standardize=False,
                              random_seed=0).fit(X, y)
    targets = np.where(y == est.classes_[1], 1.0, -1.0)
    ref = Ridge(alpha=precision * sigma**2, fit_intercept=False).fit(np.hstack(X), targets)
    np.testing.assert_allclose(est.idata_.fit["beta"].values[0], ref.coef_, atol=1e-8)
    # the draws are the exact Gaussian posterior: their mean is within Monte-Carlo error
    draws = est.idata_.posterior["beta"].values[0, :, 0]
    se = draws.std(axis=0) / np.sqrt(len(draws))
    assert np.all(np.abs(draws.mean(axis=0) - ref.coef_) < 5 * se + 1e-12)


@pytest.mark.parametrize("link_slope", [None, 1.3])
def test_exact_binary_probabilities_integrate_the_gaussian_predictive(link_slope, small):
    """Two classes, inference="exact": ``p(+1 | x*) = E[sigmoid(s f*)]`` over the exact
    predictive ``f* ~ N(x*ᵀβ̂, x*ᵀΣx*)`` (``Σ = (XᵀX/σ² + vI)⁻¹``, ``s = 2/σ²`` or the
    likelihood's ``link_slope``), against scipy's adaptive quadrature of that integral; and
    the MAP engine reaches the same mode in closed form."""
    from scipy import integrate, stats
    from scipy.special import expit

    X, y, Xt, _ = small
    precision, sigma = 2.0, 0.7
    builder = ModelBuilder(None, LinearFeatures(), SumCombiner(precision),
                           GaussianLikelihood(sigma, link_slope=link_slope))
    est = MultiViewClassifier(builder, inference="exact", standardize=False,
                              random_seed=0).fit(X, y)
    A, At = np.hstack(X), np.hstack(Xt)
    targets = np.where(y == est.classes_[1], 1.0, -1.0)
    cov = np.linalg.inv(A.T @ A / sigma**2 + precision * np.eye(A.shape[1]))
    mean = At @ (cov @ A.T @ targets / sigma**2)
    sd = np.sqrt(np.einsum("ij,jk,ik->i", At, cov, At))
    slope = 2.0 / sigma**2 if link_slope is None else link_slope
    ref = [integrate.quad(lambda z, m=m, s=s: expit(slope * (m + s * z)) * stats.norm.pdf(z),
                          -np.inf, np.inf, epsabs=1e-13)[0] for m, s in zip(mean, sd, strict=True)]
    np.testing.assert_allclose(est.predict_proba(Xt)[:, 1], ref, atol=1e-9)
    assert 0.05 < np.ptp(ref) and np.max(sd) > 0.1  # a real spread, a real variance
    mode = MultiViewClassifier(builder, inference="map", standardize=False,
                               random_seed=0).fit(X, y)
    assert mode.idata_.posterior.attrs["solver"] == "gaussian_map"
    np.testing.assert_allclose(mode.idata_.fit["beta"].values[0],
                               est.idata_.fit["beta"].values[0], atol=1e-10)


def test_mvm_preset_is_the_composed_estimator_with_its_builder(small):
    X, y, Xt, _ = small
    mvm = MVM(rank=2, inference="map", random_seed=3).fit(X, y)
    assert mvm.idata_.posterior.sizes["draw"] == DEFAULT_ENSEMBLE  # the default ensemble
    composed = MultiViewClassifier(mvm.make_builder(), inference="map", n_init=mvm.n_init,
                                   ensemble=DEFAULT_ENSEMBLE, max_iter=mvm.max_iter, tol=mvm.tol,
                                   random_seed=3).fit(X, y)
    np.testing.assert_allclose(composed.predict_proba(Xt), mvm.predict_proba(Xt), atol=1e-8)


def test_mvm_multiclass_preset_is_the_composed_estimator_with_its_builder(three_classes):
    """Three classes: both average, over the modes, the likelihood of the one-hot label under
    the one-vs-rest tasks (MVM's probability is its own code, the composed estimator's the
    graph's f and the likelihood's link)."""
    X, y_train, Xt = three_classes
    mvm = MVM(rank=2, inference="map", random_seed=3).fit(X, y_train)
    composed = MultiViewClassifier(mvm.make_builder(), inference="map", n_init=mvm.n_init,
                                   ensemble=DEFAULT_ENSEMBLE, max_iter=mvm.max_iter, tol=mvm.tol,
                                   random_seed=3).fit(X, y_train)
    proba = composed.predict_proba(Xt)
    np.testing.assert_allclose(proba, mvm.predict_proba(Xt), atol=1e-8)
    assert proba.shape == (30, 3) and not np.allclose(proba, proba.mean(axis=0))


@pytest.mark.python_ops
def test_mvm_laplace_preset_is_the_composed_laplace_with_its_linearised_predictive(small):
    """The same mode, the same Gaussian draws, and the linearised predictive: MVM's from the
    CP combiner's closed-form Jacobian, the composed estimator's by forward-mode
    differentiation of the graph's own f (an independent computation of J·δ)."""
    X, y, Xt, _ = small
    with pytest.warns(RuntimeWarning, match="Pareto k-hat"):  # a product of factors
        mvm = MVM(rank=2, inference="laplace", draws=40, random_seed=3).fit(X, y)
    with pytest.warns(RuntimeWarning, match="Pareto k-hat"):  # the engine says so too
        composed = MultiViewClassifier(mvm.make_builder(), inference="laplace", draws=40,
                                       n_init=mvm.n_init, max_iter=mvm.max_iter, tol=mvm.tol,
                                       random_seed=3).fit(X, y)
    assert composed.idata_.posterior.attrs["laplace_khat"] > 0.7
    post = composed.idata_.posterior
    assert post.attrs["laplace_predictive"] == "linearised"
    np.testing.assert_allclose(post["f"].values, mvm.idata_.posterior["f"].values,
                               rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(composed.predict_proba(Xt), mvm.predict_proba(Xt), atol=1e-8)
    # the antithetic pairs average to the mode's decision values exactly
    from bayesmv.inference.predict import GraphPredictor

    predictor = GraphPredictor(composed.builder_, composed._fitted(), composed._prepare(Xt), 1)
    at_mode = predictor({n: composed.idata_.fit[n].values[None] for n in predictor.names})[0]
    np.testing.assert_allclose(composed._decision_draws(Xt).mean(axis=0), at_mode, atol=1e-10)


@pytest.mark.python_ops  # builds and compiles two small graphs, evaluates none
def test_laplace_linearises_f_only_in_unconstrained_variables(small):
    """A free ϱ is interval-transformed: the Laplace Gaussian is over its log-odds, not over
    ϱ, so the engine evaluates f at the draws there (attrs "sampled") instead of linearising
    in ϱ; with ϱ fixed, f depends on unconstrained weights only and is linearised."""
    from bayesmv.inference.predict import DrawFunction

    X, y, _, _ = small
    for rho, expected in ((None, False), (0.5, True)):
        builder = ModelBuilder(None, ViewRandomFeatures(2, "rbf", 0.1), RhoTensorCombiner(rho),
                               GaussianLikelihood(1.0))
        assert DrawFunction(_built(builder, X[:2], y).model).linearisable is expected


@pytest.mark.python_ops  # evaluates graphs a few times: gcc would be most of it
def test_rhotmvrkm_preset_with_random_features_is_the_exact_composed_posterior(small):
    X, y, _, _ = small
    rkm = RhoTMVRKM(n_frequencies=20, rho=0.5, alpha=0.1, gamma=0.1, random_seed=0).fit(X, y)
    composed = MultiViewClassifier(rkm.make_builder(rkm.kernels_, rkm.gamma_, 0.5, 0.1),
                                   random_seed=0).fit(X, y)
    assert composed.inference_ == "exact"  # "auto": the posterior is Gaussian
    np.testing.assert_allclose(composed.idata_.fit["f"].values,
                               rkm.idata_.posterior["f"].values[0, 0], atol=1e-7)
    tau = 0.5 * len(X) + 0.5  # (1 - ϱ)V + ϱ: the noise variance is λ/τ²
    assert composed._fitted()["noise_factor"] == pytest.approx(tau**-2)


@pytest.mark.python_ops  # evaluates graphs a few times: gcc would be most of it
def test_rhotmvrkm_preset_probabilities_are_the_composed_estimators(small, three_classes):
    """With random features, ϱTMV-RKM's probabilities from its builder: the defaults (MAP,
    hyper-parameters chosen by the leave-one-out criterion, the paper's ``τg + b`` with the
    temperature slope) by the MAP engine, two and three classes (one-vs-all: the one-hot
    rule of plug-in bits is the paper's); the Laplace fits, with the likelihood's own
    probabilities or the temperature slope, by the exact engine's integrated predictive."""
    X, y, Xt, _ = small
    rkm = RhoTMVRKM(n_frequencies=20, random_seed=0).fit(X, y)
    builder = rkm.make_builder(rkm.kernels_, rkm.gamma_, rkm.rho_, rkm.alpha_,
                               decision_rule="add", link_slope=rkm.slope_)
    composed = MultiViewClassifier(builder, inference="map", random_seed=0).fit(X, y)
    assert composed.idata_.posterior.attrs["solver"] == "gaussian_map"
    np.testing.assert_allclose(composed.predict_proba(Xt), rkm.predict_proba(Xt), atol=1e-8)
    np.testing.assert_allclose(composed.idata_.fit["f"].values,
                               rkm.decision_function(X)[:, None], atol=1e-8)
    bayes = RhoTMVRKM(n_frequencies=20, rho=0.5, alpha=0.1, gamma=0.1, inference="laplace",
                      calibration="likelihood", random_seed=0).fit(X, y)
    exact = MultiViewClassifier(bayes.make_builder(bayes.kernels_, bayes.gamma_, 0.5, 0.1),
                                random_seed=0).fit(X, y)
    assert exact.inference_ == "exact"
    proba = exact.predict_proba(Xt)
    np.testing.assert_allclose(proba, bayes.predict_proba(Xt), atol=1e-8)
    assert np.ptp(proba[:, 1]) > 0.5
    # and the Laplace fit's temperature-scaled τg + b, averaged over its Gaussian predictive
    laplace = RhoTMVRKM(n_frequencies=20, inference="laplace", random_seed=0).fit(X, y)
    exact = MultiViewClassifier(
        laplace.make_builder(laplace.kernels_, laplace.gamma_, laplace.rho_, laplace.alpha_,
                             decision_rule="add", link_slope=laplace.slope_),
        random_seed=0).fit(X, y)
    np.testing.assert_allclose(exact.predict_proba(Xt), laplace.predict_proba(Xt), atol=1e-8)
    X3, y3, Xt3 = three_classes
    rkm3 = RhoTMVRKM(n_frequencies=20, random_seed=0).fit(X3, y3)
    composed3 = MultiViewClassifier(
        rkm3.make_builder(rkm3.kernels_, rkm3.gamma_, rkm3.rho_, rkm3.alpha_,
                          decision_rule="add", link_slope=rkm3.slope_),
        inference="map", random_seed=0).fit(X3, y3)
    np.testing.assert_allclose(composed3.predict_proba(Xt3), rkm3.predict_proba(Xt3),
                               atol=1e-8)


@pytest.mark.python_ops  # evaluates graphs a few times: gcc would be most of it
def test_rhotmvrkm_exact_kernel_defaults_are_the_composed_estimators(small, three_classes):
    """ϱTMV-RKM's defaults use exact kernels: the graph integrates the Gaussian process out
    (no explicit f) and the composed estimator conditions it on the training rows.  Its MAP
    (the bias's mode, hyper-parameters from the preset's criterion, the paper's ``τg + b``,
    the temperature slope) predicts as the preset, two and three classes, one-vs-all and
    output codes; its exact posterior (the bias's variance added) as the Laplace preset."""
    X, y, Xt, _ = small
    for settings, inference in (({}, "map"), ({"inference": "laplace"}, "exact")):
        rkm = RhoTMVRKM(random_seed=0, **settings).fit(X, y)
        builder = rkm.make_builder(rkm.kernels_, rkm.gamma_, rkm.rho_, rkm.alpha_,
                                   decision_rule="add", link_slope=rkm.slope_)
        composed = MultiViewClassifier(builder, inference=inference, random_seed=0).fit(X, y)
        assert "f" not in composed.model_.named_vars
        proba = composed.predict_proba(Xt)
        np.testing.assert_allclose(proba, rkm.predict_proba(Xt), atol=1e-8)
        assert np.ptp(proba[:, 1]) > 0.5
    # PyMC's own tools on the process's graph
    assert "y_obs" in pm.model_to_graphviz(composed.model_).source
    prior = pm.sample_prior_predictive(draws=5, model=composed.model_, random_seed=0)
    assert np.all(np.isfinite(prior.prior_predictive["y_obs"].values))
    X3, y3, Xt3 = three_classes
    for multiclass in ("ova", "moc"):
        rkm = RhoTMVRKM(multiclass=multiclass, random_seed=0).fit(X3, y3)
        composed = MultiViewClassifier(
            rkm.make_builder(rkm.kernels_, rkm.gamma_, rkm.rho_, rkm.alpha_,
                             decision_rule="add", link_slope=rkm.slope_),
            inference="map", random_seed=0).fit(X3, y3)
        proba = composed.predict_proba(Xt3)
        np.testing.assert_allclose(proba, rkm.predict_proba(Xt3), atol=1e-8)
        with tempfile.TemporaryDirectory() as tmp:
            composed.save(f"{tmp}/m")
            np.testing.assert_array_equal(bayesmv.load(f"{tmp}/m").predict_proba(Xt3), proba)


def _free_process_builder(kernels, **kwargs):
    """ϱTMV-RKM's builder with every width, ϱ and the noise left free (a user's
    composition: nothing taken from a fitted preset)."""
    return RhoTMVRKM().make_builder(kernels, [None] * len(kernels), None, None, **kwargs)


@pytest.mark.python_ops  # evaluates graphs a few times: gcc would be most of it
def test_rhotmvrkm_defaults_are_the_composed_estimator_choosing_by_its_criterion(
        small, three_classes):
    """The preset's whole default fit (hyper-parameters by its leave-one-out criterion, the
    temperature slope on those leave-one-out values, the paper's ``τg + b``) is the composed
    estimator on a builder with every hyper-parameter free and ``criterion="loo"``: the same
    choice and probabilities, two and three classes, one-vs-all and output codes; REML
    evidence with the likelihood's own probabilities likewise.  Before the criterion
    strategies the composed estimator could only take the preset's fitted values."""
    X, y, Xt, _ = small
    # the temperature's probabilities read the paper's τg + b, the likelihood's g + b
    for settings, criterion, rule in (
            ({}, "loo", "add"),
            ({"criterion": "evidence", "calibration": "likelihood"}, "evidence", "model")):
        rkm = RhoTMVRKM(random_seed=0, **settings).fit(X, y)
        composed = MultiViewClassifier(_free_process_builder(rkm.kernels_, decision_rule=rule),
                                       inference="map", criterion=criterion,
                                       random_seed=0).fit(X, y)
        params = composed.builder_.get_params()
        np.testing.assert_allclose(params["feature_map__gamma"], rkm.gamma_, rtol=1e-12)
        assert params["combiner__rho"] == pytest.approx(rkm.rho_, rel=1e-12)
        assert params["likelihood__sigma"] ** 2 == pytest.approx(rkm.alpha_, rel=1e-12)
        assert params["likelihood__link_slope"] == rkm.slope_  # None for the evidence's
        assert composed.idata_.posterior.attrs["criterion"] == criterion
        np.testing.assert_allclose(composed.predict_proba(Xt), rkm.predict_proba(Xt),
                                   atol=1e-8)
    X3, y3, Xt3 = three_classes
    for multiclass in ("ova", "moc"):
        rkm = RhoTMVRKM(multiclass=multiclass, random_seed=0).fit(X3, y3)
        composed = MultiViewClassifier(
            RhoTMVRKM(multiclass=multiclass).make_builder(
                rkm.kernels_, [None] * V, None, None, decision_rule="add"),
            inference="map", criterion="loo", random_seed=0).fit(X3, y3)
        proba = composed.predict_proba(Xt3)
        np.testing.assert_allclose(proba, rkm.predict_proba(Xt3), atol=1e-8)
        with tempfile.TemporaryDirectory() as tmp:  # the chosen values travel with the fit
            composed.save(f"{tmp}/m")
            np.testing.assert_array_equal(bayesmv.load(f"{tmp}/m").predict_proba(Xt3), proba)


@pytest.mark.python_ops
def test_a_criterion_on_a_row_subset_takes_its_slope_from_every_row(small, monkeypatch):
    """Beyond the criteria's row budget the hyper-parameters are chosen on a seeded subset
    (the preset's ``ml_max_samples``) and the temperature slope is refitted on every row's
    leave-one-out values, as the preset does after its own fit."""
    from bayesmv.inference import selection

    X, y, Xt, _ = small
    monkeypatch.setattr(selection, "CRITERION_MAX_SAMPLES", 25)
    rkm = RhoTMVRKM(ml_max_samples=25, random_seed=3).fit(X, y)
    composed = MultiViewClassifier(_free_process_builder(rkm.kernels_, decision_rule="add"),
                                   inference="map", criterion="loo", random_seed=3).fit(X, y)
    attrs = composed.idata_.posterior.attrs
    assert attrs["criterion_n_samples"] == 25 and rkm.selection_["n_samples"] == 25
    # the subset's own slope is not the one kept
    assert composed.builder_.likelihood.link_slope != pytest.approx(attrs["criterion_slope"])
    assert composed.builder_.likelihood.link_slope == pytest.approx(rkm.slope_, rel=1e-10)
    np.testing.assert_allclose(composed.predict_proba(Xt), rkm.predict_proba(Xt), atol=1e-8)


def test_mvlsvm_defaults_are_the_composed_estimator_choosing_by_held_out_loss(small,
                                                                               three_classes):
    """MVL-SVM's default fit (C from its grid and the probability's constant, both by the
    stratified out-of-fold log-likelihood) is the composed SVM MAP on its builder with the
    hinge's C left None and ``criterion="heldout"``; with C given, the criterion fits the
    constant alone, as MVL-SVM's ``calibration_cv`` does."""
    X, y, Xt, _ = small
    X3, y3, Xt3 = three_classes
    # 12 landmarks of 40 rows: the composed estimator must draw MVL-SVM's own landmarks
    for (Xa, ya, Xb), settings in (((X, y, Xt), {}), ((X, y, Xt), {"C": 10.0}),
                                   ((X, y, Xt), {"n_landmarks": 12}), ((X3, y3, Xt3), {})):
        svm = MVLSVM(random_seed=0, **settings).fit(Xa, ya)
        composed = MultiViewClassifier(MVLSVM(random_seed=0, **settings).make_builder(len(ya)),
                                       inference="map", criterion="heldout",
                                       random_seed=0).fit(Xa, ya)
        lik = composed.builder_.likelihood
        assert lik.C * 2 * len(ya) == pytest.approx(svm.C_, rel=1e-12)
        assert lik.link_constant == pytest.approx(svm.link_constant_, rel=1e-10)
        assert svm.link_constant_ != pytest.approx(svm.C_ / (2 * len(ya)))  # calibrated
        np.testing.assert_allclose(composed.predict_proba(Xb), svm.predict_proba(Xb),
                                   atol=1e-8)
    assert composed.idata_.posterior.attrs["criterion_free"] == "C,link_constant"


def test_a_hinge_left_free_needs_the_held_out_criterion(small):
    X, y, _, _ = small
    builder = ModelBuilder(None, LandmarkFeatures(10), SumCombiner(flat_bias=True),
                           HingeLikelihood(None))
    with pytest.raises(ValueError, match=r"HingeLikelihood\(C=None\).*criterion='heldout'"):
        MultiViewClassifier(builder, inference="map").fit(X, y)
    # the MAP of a hinge after a CP interaction is no SVM: refused, with the reason
    cp = ModelBuilder(None, LandmarkFeatures(10), CPInteractionCombiner(rank=2),
                      HingeLikelihood(None))
    with pytest.raises(ValueError, match="needs a hinge on fixed features.*SumCombiner"):
        MultiViewClassifier(cp, inference="map", criterion="heldout").fit(X, y)
    # both constants given: nothing to choose, the builder fitted as given
    given = builder.set_params(likelihood__C=0.5, likelihood__link_constant=0.3)
    fitted = MultiViewClassifier(given, inference="map", criterion="heldout",
                                 random_seed=0).fit(X, y)
    assert fitted.builder_.likelihood.get_params() == given.likelihood.get_params()
    assert fitted.idata_.posterior.attrs["criterion_free"] == ""


@pytest.mark.parametrize("settings", [{}, {"objective": "bayes"},
                                      {"learn_A": "sparse", "learn_w": True}])
@pytest.mark.python_ops  # evaluates graphs a few times: gcc would be most of it
def test_mvml_defaults_are_the_composed_estimator_choosing_by_its_criterion(
        settings, small, three_classes):
    """MVML's whole default fit (the metric and view weights by its objective, then the
    probabilities' slope by the exact leave-one-out predictive given them) is the composed
    estimator on MVML's builder, nothing fixed, with ``criterion="loo"`` and MVML's stopping
    rule: the same metric, weights, slope and probabilities (1e-8), two and three classes.
    Before the criterion served the block metric, this builder was refused."""
    X, y, Xt, _ = small
    X3, y3, Xt3 = three_classes
    for Xa, ya, Xb in ((X, y, Xt), (X3, y3, Xt3)):
        mvml = MVML(random_seed=0, **settings).fit(Xa, ya)
        composed = MultiViewClassifier(mvml.make_builder(), inference="exact", criterion="loo",
                                       random_seed=0, max_iter=mvml.max_iter,
                                       tol=mvml.tol).fit(Xa, ya)
        comb = composed.builder_.combiner
        np.testing.assert_allclose(comb.metric, mvml.A_, atol=1e-10)
        if settings.get("learn_w"):
            np.testing.assert_allclose(comb.view_weights, mvml.w_, atol=1e-10)
            assert not comb.learn_w
        slope = composed.builder_.likelihood.link_slope
        assert slope == pytest.approx(mvml.slope_, rel=1e-8) and slope > 4.0
        np.testing.assert_allclose(composed.predict_proba(Xb), mvml.predict_proba(Xb),
                                   atol=1e-8)
        attrs = composed.idata_.posterior.attrs
        assert attrs["criterion"] == "loo" and attrs["criterion_slope"] == slope
        assert attrs["criterion_free"] == ",".join(
            ["metric"] + (["view_weights"] if settings.get("learn_w") else []) + ["link_slope"])
    with tempfile.TemporaryDirectory() as tmp:  # the chosen metric travels with the builder
        composed.save(f"{tmp}/m")
        np.testing.assert_array_equal(bayesmv.load(f"{tmp}/m").predict_proba(Xt3),
                                      composed.predict_proba(Xt3))


def test_a_large_chosen_metric_is_saved_as_an_array_not_as_json(small, monkeypatch):
    """A criterion's metric (one (n, n) block per task: 49.5 million numbers on the ten
    digits) travels in the file's constant_data, not as JSON text: the description names
    where, the array comes back exactly, with or without the training data."""
    import json

    import arviz as az

    import bayesmv.models.composed as composed_module
    from bayesmv.models.base import MODEL_ATTR

    X, y, Xt, _ = small
    monkeypatch.setattr(composed_module, "JSON_ARRAY_MAX", 10)
    fitted = MultiViewClassifier(MVML(random_seed=0).make_builder(), inference="exact",
                                 criterion="loo", random_seed=0).fit(X, y)
    metric = fitted.builder_.combiner.metric
    assert metric.size > 10
    name = "builder_param__combiner__metric"
    np.testing.assert_array_equal(fitted.idata_.constant_data[name].values, metric)
    with tempfile.TemporaryDirectory() as tmp:
        for training in (False, True):
            path = fitted.save(f"{tmp}/m{training}", include_training_data=training)
            loaded = bayesmv.load(path)
            text = az.from_netcdf(path).posterior.attrs[MODEL_ATTR]
            assert json.loads(text)["extra"]["builder_"]["params"]["combiner"]["params"][
                "metric"] == name
            np.testing.assert_array_equal(loaded.builder_.combiner.metric, metric)
            np.testing.assert_array_equal(loaded.predict_proba(Xt), fitted.predict_proba(Xt))
    assert isinstance(fitted.builder_.combiner.metric, np.ndarray)  # saving left it alone
    # the saved builder is scikit-learn's clone with the reference in place, made without
    # copying the metric: every other parameter equal and copied, as clone copies them
    refs = {"combiner__metric": name}
    saved = composed_module.clone_replacing(fitted.builder_, refs).get_params(deep=True)
    original = fitted.builder_.get_params(deep=True)
    expected = clone(fitted.builder_).set_params(**refs).get_params(deep=True)
    assert saved.keys() == expected.keys()
    for key, value in expected.items():
        if hasattr(value, "get_params"):
            assert type(saved[key]) is type(value) and saved[key] is not original[key]
        elif isinstance(value, np.ndarray):
            np.testing.assert_array_equal(saved[key], value)
            assert not np.shares_memory(saved[key], original[key])
        else:
            assert saved[key] == value, key
    # a replacement is stored as given, not copied; a name the builder lacks is refused
    replaced = composed_module.clone_replacing(fitted.builder_, {"combiner__metric": metric})
    assert replaced.combiner.metric is metric and replaced.combiner is not fitted.builder_.combiner
    with pytest.raises(ValueError, match="no parameter"):
        composed_module.clone_replacing(fitted.builder_, {"combiner__metrik": metric})


def test_the_block_metric_criterion_keeps_what_is_given_and_refuses_a_free_noise(small):
    X, y, Xt, _ = small
    mvml = MVML(learn_A="identity", random_seed=0).fit(X, y)
    # a fixed metric and a given slope: nothing to choose, the builder is used as it is
    given = mvml.make_builder(link_slope=3.0)
    fitted = MultiViewClassifier(given, inference="exact", criterion="loo",
                                 random_seed=0).fit(X, y)
    assert fitted.builder_.likelihood.link_slope == 3.0 and fitted.builder_.combiner.metric is None
    assert fitted.idata_.posterior.attrs["criterion_free"] == ""
    # the slope alone: MVML_I's
    slope_only = MultiViewClassifier(mvml.make_builder(), inference="exact", criterion="loo",
                                     random_seed=0).fit(X, y)
    assert slope_only.builder_.likelihood.link_slope == pytest.approx(mvml.slope_, rel=1e-8)
    np.testing.assert_allclose(slope_only.predict_proba(Xt), mvml.predict_proba(Xt), atol=1e-8)
    free = MVML(random_seed=0).make_builder().set_params(likelihood__sigma=None)
    with pytest.raises(ValueError, match="BlockMetricCombiner learns the metric at a fixed "
                                         "noise: give GaussianLikelihood a sigma"):
        MultiViewClassifier(free, criterion="loo").fit(X, y)
    bayes = MVML(objective="bayes", random_seed=0).make_builder().set_params(
        likelihood__sigma=2.0)
    with pytest.raises(ValueError, match="objective='bayes' is solved at the noise variance"):
        MultiViewClassifier(bayes, criterion="loo").fit(X, y)


def test_a_criterion_without_a_strategy_for_the_pieces_is_refused_before_fitting(small):
    X, y, _, _ = small
    builder = ModelBuilder(None, LandmarkFeatures(10), SumCombiner(), LogisticLikelihood())
    with pytest.raises(ValueError, match=r"criterion='loo' has no strategy for Identity \+ "
                                         r"LandmarkFeatures \+ SumCombiner"):
        MultiViewClassifier(builder, inference="map", criterion="loo").fit(X, y)
    with pytest.raises(ValueError, match="criterion must be None or one of"):
        MultiViewClassifier(builder, criterion="cv").fit(X, y)
    # a free noise on another range is not the criteria's search: named, not guessed
    process = ModelBuilder(None, ViewKernels(), RhoTensorCombiner(None),
                           GaussianLikelihood(sigma=None, variance_range=(1e-3, 10.0)))
    with pytest.raises(ValueError, match="variance_range"):
        MultiViewClassifier(process, inference="map", criterion="evidence").fit(X, y)
    estimator = MultiViewClassifier(builder, inference="map", random_seed=0).fit(X, y)
    before = estimator.predict_proba(X)
    with pytest.raises(ValueError, match="has no strategy"):
        estimator.set_params(criterion="loo").fit(X, y)
    np.testing.assert_array_equal(estimator.predict_proba(X), before)  # the fit is intact


def test_exact_engine_evaluates_the_density_a_few_times_not_once_per_draw(small, monkeypatch):
    """The exact posterior is Gaussian: its draws need no importance diagnostic against the
    log density (before 2026-11-29 every draw was evaluated, a factorisation of the process's
    covariance each for a Gaussian-process model).  Laplace fits still report their k̂."""
    from bayesmv.inference.optimize import FlatLogp

    calls = []
    original = FlatLogp.__call__
    monkeypatch.setattr(FlatLogp, "__call__",
                        lambda self, x: calls.append(1) or original(self, x))
    X, y, _, _ = small
    builder = ModelBuilder(None, ViewKernels("rbf", 0.1), RhoTensorCombiner(0.5),
                           GaussianLikelihood(1.0))
    est = MultiViewClassifier(builder, inference="exact", draws=300, random_seed=0).fit(X, y)
    assert est.idata_.posterior.sizes["draw"] == 300
    assert len(calls) < 20
    assert "laplace_khat" not in est.idata_.posterior.attrs
    weights = ModelBuilder(None, LinearFeatures(), SumCombiner(1.0), LogisticLikelihood())
    laplace = MultiViewClassifier(weights, inference="laplace", draws=300, random_seed=0)
    assert np.isfinite(laplace.fit(X, y).idata_.posterior.attrs["laplace_khat"])


def test_gaussian_process_refuses_missing_views_naming_the_view_and_rows(small):
    X, y, Xt, _ = small
    builder = ModelBuilder(None, ViewKernels("rbf", 0.1), RhoTensorCombiner(0.5),
                           GaussianLikelihood(1.0))
    holed = [v.copy() for v in X]
    holed[1][3] = np.nan
    with pytest.raises(ValueError, match=r"X: view 1 .* missing .* rows \[3\]\. ViewKernels "
                                         "needs every view"):
        MultiViewClassifier(builder).fit(holed, y)
    est = MultiViewClassifier(builder).fit(X, y)
    proba = est.predict_proba(Xt)
    holed = [v.copy() for v in Xt]
    holed[2][0] = np.nan
    with pytest.raises(ValueError, match=r"X: view 2 .* rows \[0\]\. A Gaussian process"):
        est.predict_proba(holed)
    np.testing.assert_array_equal(est.predict_proba(Xt), proba)


def test_gaussian_process_predicts_each_row_alone_in_blocks(three_classes, monkeypatch):
    """A row's prediction does not depend on the other rows, nor on the blocks the new rows
    are conditioned in: the Monte-Carlo path (three classes, the one-hot rule over draws of
    the exact posterior) and the closed form (the normalised rule)."""
    import bayesmv.models.composed as composed_module

    X, y, Xt = three_classes
    for multiclass in ("one_hot", "normalised"):
        builder = ModelBuilder(None, ViewKernels("rbf", 0.1), RhoTensorCombiner(0.5),
                               GaussianLikelihood(0.5, multiclass=multiclass))
        est = MultiViewClassifier(builder, inference="exact", random_seed=0).fit(X, y)
        proba = est.predict_proba(Xt)
        np.testing.assert_allclose(est.predict_proba([v[3:7] for v in Xt]), proba[3:7],
                                   rtol=1e-10)
        monkeypatch.setattr(composed_module, "GP_PREDICTION_ROWS", 7)
        np.testing.assert_allclose(est.predict_proba(Xt), proba, rtol=1e-10)
        monkeypatch.undo()
        assert np.ptp(proba) > 0.5


@pytest.mark.python_ops  # evaluates graphs a few times: gcc would be most of it
def test_linear_kernel_process_is_the_weight_space_model(small):
    """Function space against weight space: the ϱ-tensor process of linear kernels at ϱ = 0,
    ``K = Σ_v X_v X_vᵀ / (η V²)`` with noise ``σ²/V²``, is the Bayesian linear model
    ``f = b + Σ_v X_v w_v``, ``w ~ N(0, 1/(η V²))``, noise ``σ/V``, flat b.  The process's
    predictive (kernel solves, conditioned on the training rows) and the weights' exact
    posterior (the engine's Gaussian, linearised predictive) give the same probabilities;
    the MAP, the same decision values' plug-in probabilities."""
    X, y, Xt, _ = small
    eta, sigma = 2.0, 3.0  # σ/V = 1: probabilities that are not saturated
    process = ModelBuilder(None, ViewKernels("linear"), RhoTensorCombiner(0.0, eta),
                           GaussianLikelihood(sigma))
    weights = ModelBuilder(None, LinearFeatures(), SumCombiner(eta * V**2, flat_bias=True),
                           GaussianLikelihood(sigma / V))
    for inference in ("exact", "map"):
        a = MultiViewClassifier(process, inference=inference, random_seed=0).fit(X, y)
        b = MultiViewClassifier(weights, inference=inference, random_seed=0).fit(X, y)
        pa, pb = a.predict_proba(Xt), b.predict_proba(Xt)
        np.testing.assert_allclose(pa, pb, atol=1e-7)
        assert np.ptp(pa[:, 1]) > 0.3
    # and the exact predictive is not the plug-in one: the posterior's spread is counted
    exact = MultiViewClassifier(process, inference="exact", random_seed=0).fit(X, y)
    assert np.abs(exact.predict_proba(Xt) - pa).max() > 1e-3


@pytest.mark.python_ops  # evaluates graphs a few times: gcc would be most of it
def test_rhotmvrkm_output_codes_are_the_composed_estimators():
    """Five classes by minimum output codes (3 tasks, 3 of 8 codes unused): the builder's
    likelihood fits the code bits and scores each class by its code's likelihood, so the
    composed MAP predicts as the preset; the one-vs-rest builder fits five tasks."""
    views, labels = load_multiple_features(classes=(0, 3, 5, 7, 8))
    rng = np.random.default_rng(2)
    idx = rng.permutation(len(labels))
    cols = [rng.choice(v.shape[1], size=6, replace=False) for v in views[:V]]
    X = [v[idx[:80]][:, c] for v, c in zip(views, cols, strict=False)]
    Xt = [v[idx[80:120]][:, c] for v, c in zip(views, cols, strict=False)]
    y = labels[idx[:80]]
    rkm = RhoTMVRKM(n_frequencies=20, multiclass="moc", random_seed=0).fit(X, y)
    builder = rkm.make_builder(rkm.kernels_, rkm.gamma_, rkm.rho_, rkm.alpha_,
                               decision_rule="add", link_slope=rkm.slope_)
    assert builder.likelihood.multiclass == "moc"
    composed = MultiViewClassifier(builder, inference="map", random_seed=0).fit(X, y)
    assert composed.idata_.fit["f"].shape == (80, 3)
    np.testing.assert_allclose(composed.predict_proba(Xt), rkm.predict_proba(Xt), atol=1e-8)
    np.testing.assert_array_equal(composed.predict(Xt), rkm.predict(Xt))
    builder.likelihood.set_params(multiclass="one_hot")
    ova = MultiViewClassifier(builder, inference="map", random_seed=0).fit(X, y)
    assert ova.idata_.fit["f"].shape == (80, 5)


def test_code_probabilities_enumerate_the_independent_bits():
    """``p(class k) ∝ Π_l p_l(code_kl)``, against the distribution of independent bits
    conditioned on landing on a used code, enumerated over all 2^L bit strings; one-vs-rest
    codes give the one-hot rule."""
    from itertools import product

    from bayesmv.components.likelihoods import (
        code_log_probabilities,
        one_hot_probabilities,
    )
    from bayesmv.data import output_codes

    rng = np.random.default_rng(3)
    for n_classes in (3, 5, 7):
        codes = output_codes(n_classes, "moc")
        p = rng.uniform(0.05, 0.95, size=codes.shape[1])
        joint = {bits: np.prod(np.where(np.array(bits) > 0, p, 1 - p))
                 for bits in product((-1.0, 1.0), repeat=codes.shape[1])}
        used = np.array([joint[tuple(c)] for c in codes])
        np.testing.assert_allclose(
            np.exp(code_log_probabilities(np.log(p), np.log1p(-p), codes)),
            used / used.sum(), rtol=1e-12)
    log_pos, log_neg = np.log(rng.uniform(0.01, 0.99, (2, 4, 6)))
    np.testing.assert_allclose(code_log_probabilities(log_pos, log_neg, output_codes(6, "ova")),
                               one_hot_probabilities(log_pos, log_neg, log=True), atol=1e-12)


@pytest.mark.parametrize("learn_A", ["identity", "cov"])
@pytest.mark.python_ops  # evaluates graphs a few times: gcc would be most of it
def test_mvml_preset_with_a_fixed_metric_is_the_exact_composed_posterior(learn_A, small):
    X, y, _, _ = small
    mvml = MVML(learn_A=learn_A, random_seed=0).fit(X, y)
    composed = MultiViewClassifier(mvml.make_builder(), random_seed=0).fit(X, y)
    assert composed.inference_ == "exact"
    np.testing.assert_allclose(composed.idata_.fit["f"].values,
                               mvml.idata_.posterior["f"].values[0, 0], atol=1e-8)


@pytest.mark.python_ops  # evaluates graphs a few times: gcc would be most of it
def test_block_metric_exact_strategy_is_the_graphs_gaussian(three_classes, monkeypatch):
    """The registered exact posterior of a fixed block metric (one Cholesky per task, no
    Hessian) against the generic exact engine on the same graph (its full Hessian): the same
    mean and, block by block, the same covariance, with no covariance between tasks; the
    combined directions reproduce every task's marginal variances; independent draws per
    task have that covariance; and the composed probabilities are the same either way."""
    import bayesmv.inference.engines as engines

    X, y3, Xt = three_classes
    mvml = MVML(random_seed=0).fit(X, y3)
    builder = mvml.make_builder(metric=mvml.A_, view_weights=mvml.w_, link_slope=mvml.slope_)
    builder.likelihood.set_params(sigma=0.8)  # away from MVML's own noise variance
    fast = MultiViewClassifier(builder, random_seed=0).fit(X, y3)
    built = builder.build(*fast._training_data())
    flat, posterior = engines.exact_posterior(built)
    assert isinstance(posterior, TaskBlockGaussian) and len(posterior.blocks) == 3
    with monkeypatch.context() as patch:
        patch.setattr(engines, "EXACT_STRATEGIES", [])
        slow = MultiViewClassifier(builder, random_seed=0).fit(X, y3)
        dense = engines.exact_posterior(builder.build(*slow._training_data()))[1]
    assert dense.cov_factor is not None
    np.testing.assert_allclose(posterior.mean, dense.mean, atol=1e-8)
    cov = dense.cov_factor @ dense.cov_factor.T
    scale = np.abs(cov).max()
    for i, (rows, F) in enumerate(posterior.blocks):
        np.testing.assert_allclose(F @ F.T, cov[rows, rows], atol=1e-8 * scale)
        for other, _ in posterior.blocks[i + 1:]:
            assert np.abs(cov[rows, other]).max() < 1e-8 * scale
    D = posterior.marginal_directions()
    np.testing.assert_allclose(np.sum(D**2, axis=0), np.diag(cov), atol=1e-8 * scale)
    # the predictive keeps the moved points of the free variables only (not f at every
    # training row), each the graph's own value there
    mean, moved = _posterior_directions(built)
    assert set(moved) == set(mean) == {rv.name for rv in built.model.free_RVs}
    full = engines.point_function(built)
    at_mean = full(flat.to_point(posterior.mean))
    for k in (0, len(D) - 1):
        point = full(flat.to_point(posterior.mean + D[k]))
        for name, stacked in moved.items():
            np.testing.assert_array_equal(stacked[k], point[name])
            np.testing.assert_array_equal(mean[name], at_mean[name])
    draws, _ = posterior.sample(20000, np.random.default_rng(0))
    (r0, F0), (r1, _) = posterior.blocks[:2]
    np.testing.assert_allclose(np.cov(draws[:, r0].T), F0 @ F0.T, atol=0.05 * scale)
    assert np.abs(np.cov(draws[:, r0].T, draws[:, r1].T)[:F0.shape[0], F0.shape[0]:]).max() < \
        0.05 * scale
    np.testing.assert_allclose(fast.predict_proba(Xt), slow.predict_proba(Xt), atol=1e-8)


def check_mvml_is_composed(X, y, Xt, **settings):
    """Fit MVML and the composed estimator on its builder holding what it learned; check the
    exact engine ran and that f and the probabilities agree to 1e-8.  Returns the builder,
    the composed estimator and its probabilities on Xt."""
    mvml = MVML(random_seed=0, **settings).fit(X, y)
    builder = mvml.make_builder(metric=mvml.A_, view_weights=mvml.w_, link_slope=mvml.slope_)
    composed = MultiViewClassifier(builder, random_seed=0).fit(X, y)
    assert composed.inference_ == "exact"
    np.testing.assert_allclose(composed.idata_.fit["f"].values,
                               mvml.idata_.posterior["f"].values[0, 0], atol=1e-8)
    proba = composed.predict_proba(Xt)
    np.testing.assert_allclose(proba, mvml.predict_proba(Xt), atol=1e-8)
    return builder, composed, proba


@pytest.mark.parametrize("settings", [{}, {"learn_A": "sparse", "learn_w": True}])
@pytest.mark.python_ops  # evaluates graphs a few times: gcc would be most of it
def test_mvml_preset_probabilities_are_the_composed_estimators(settings, small):
    """A fitted MVML (learned metric, learned view weights, temperature slope) is the exact
    composed posterior once its builder holds what it learned: the same f and the same
    probabilities, MVML's Gaussian predictive against the engine's integrated one."""
    X, y, Xt, _ = small
    _, composed, proba = check_mvml_is_composed(X, y, Xt, **settings)
    assert np.ptp(proba[:, 1]) > 0.5
    # saved and loaded (the fixed metric travels as the piece's parameter)
    with tempfile.TemporaryDirectory() as tmp:
        composed.save(f"{tmp}/m")
        np.testing.assert_array_equal(bayesmv.load(f"{tmp}/m").predict_proba(Xt), proba)


@pytest.mark.python_ops  # evaluates graphs a few times: gcc would be most of it
def test_mvml_three_class_probabilities_are_the_composed_estimators(three_classes):
    """Three classes: MVML's per-task metrics and its rule (each task's integrated
    probability, normalised over the classes) through the likelihood's
    ``multiclass="normalised"``; the composed exact fit integrates each task's predictive in
    closed form, so the two agree to rounding, not to Monte-Carlo error."""
    X, y3, Xt = three_classes
    builder, _, proba = check_mvml_is_composed(X, y3, Xt)
    assert builder.likelihood.multiclass == "normalised"
    # the one-hot rule is another distribution over the same posterior
    builder.likelihood.set_params(multiclass="one_hot")
    one_hot = MultiViewClassifier(builder, random_seed=0).fit(X, y3)
    assert np.abs(one_hot.predict_proba(Xt) - proba).max() > 1e-3
    builder.likelihood.set_params(multiclass="softmax")
    with pytest.raises(ValueError, match="GaussianLikelihood: multiclass must be one of"):
        MultiViewClassifier(builder).fit(X, y3)


@pytest.mark.python_ops  # a few graph evaluations: gcc would be most of it
def test_learned_block_metric_map_is_the_graphs_mode_found_by_the_metric_solver(
        small, three_classes, monkeypatch):
    """A learned metric (MVML's pieces, paper objective): the registered metric solver's
    point is a stationary point of the graph's own log density, higher than L-BFGS-B reaches
    from its starts, for two and three classes; with MVML's stopping rule (``max_iter``,
    ``tol``) it is MVML's own fit (the same solver: one definition)."""
    import bayesmv.inference.engines as engines
    from bayesmv.inference.optimize import FlatLogp

    for X, y in (small[:2], three_classes[:2]):
        mvml = MVML(alpha=0.5, metric_penalty=0.3, random_seed=0)
        fast = MultiViewClassifier(mvml.make_builder(), inference="map", random_seed=0).fit(X, y)
        post = fast.idata_.posterior
        assert post.attrs["solver"] == "metric_map"
        flat = FlatLogp(fast.model_, jacobian=False)
        x = flat.from_point({"A_chol": post["A_chol"].values[0, 0],
                             "g": post["g"].values[0, 0]})
        logp, grad = flat(x)
        nearby = x + 0.01 * np.random.default_rng(0).standard_normal(x.size)
        assert np.abs(grad).max() < 1e-2 * np.abs(flat(nearby)[1]).max()
        if len(np.unique(y)) == 2:  # the generic optimiser on the same graph: lower
            with monkeypatch.context() as patch:
                patch.setattr(engines, "MAP_STRATEGIES", [
                    s for s in engines.MAP_STRATEGIES if s is not engines._metric_map])
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # L-BFGS-B may stop at max_iter here
                    slow = MultiViewClassifier(mvml.make_builder(), inference="map",
                                               n_init=1, random_seed=0).fit(X, y)
            assert slow.idata_.posterior.attrs["solver"] == "lbfgs"
            assert logp >= slow.idata_.posterior.attrs["map_logp"] - 1e-6
        # MVML's stopping rule through the engine: MVML's metric and weights
        mvml.fit(X, y)
        same = MultiViewClassifier(mvml.make_builder(), inference="map", random_seed=0,
                                   max_iter=mvml.max_iter, tol=mvml.tol).fit(X, y)
        np.testing.assert_allclose(same.idata_.posterior["A"].values,
                                   mvml.idata_.posterior["A"].values, atol=1e-8)
        np.testing.assert_allclose(same.idata_.posterior["g"].values,
                                   mvml.idata_.posterior["g"].values, atol=1e-8)


def _unconstrained_mode(est) -> dict[str, np.ndarray]:
    """A fitted MAP's mode as the graph's value variables, through PyMC's own transforms."""
    model, post = est.model_, est.idata_.posterior
    point = {}
    for rv in model.free_RVs:
        value = post[rv.name].values[0, 0]
        transform = model.rvs_to_transforms.get(rv)
        point[model.rvs_to_values[rv].name] = (
            value if transform is None else transform.forward(value, *rv.owner.inputs).eval())
    return point


def _process_cases(small, three_classes) -> list:
    """(X, y, builder) of a ϱ-tensor Gaussian process with free hyper-parameters: two classes
    with every hyper-parameter free (ϱTMV-RKM's builder), three with the noise and one width
    fixed and a linear view."""
    return [(*small[:2], RhoTMVRKM(random_seed=0).make_builder(["rbf"] * V, [None] * V,
                                                                 None, None)),
            (*three_classes[:2], ModelBuilder(
                None, ViewKernels(["rbf", "linear", "rbf"], [None, None, 0.05]),
                RhoTensorCombiner(None), GaussianLikelihood(1.0)))]


@pytest.mark.python_ops  # a few graph evaluations: gcc would be most of it
def test_process_evidence_map_is_a_stationary_point_of_the_graph(small, three_classes):
    """The ϱ-tensor Gaussian process with free hyper-parameters: the registered evidence
    maximiser (the bias at its maximum) is a stationary point of the graph's own log density,
    in its unconstrained coordinates (where a hyper-parameter at its prior's edge has no
    slope left)."""
    from bayesmv.inference.optimize import FlatLogp

    for X, y, builder in _process_cases(small, three_classes):
        fast = MultiViewClassifier(builder, inference="map", random_seed=0).fit(X, y)
        assert fast.idata_.posterior.attrs["solver"] == "process_evidence_map"
        flat = FlatLogp(fast.model_, jacobian=False)
        x = flat.from_point(_unconstrained_mode(fast))
        nearby = x + 0.01 * np.random.default_rng(0).standard_normal(x.size)
        assert np.abs(flat(x)[1]).max() < 1e-2 * np.abs(flat(nearby)[1]).max()


@pytest.mark.long  # the generic optimiser on a Gaussian-process graph: 60 s compiled
# a hang guard, not a budget: over 300 s on a slow machine (2026-12-01), 60 s on a fast one
@pytest.mark.timeout(900)
def test_process_evidence_map_is_no_lower_than_the_generic_optimiser(small, three_classes,
                                                                     monkeypatch):
    """The same point against L-BFGS-B on the same graph: its log density is no lower."""
    import bayesmv.inference.engines as engines

    for X, y, builder in _process_cases(small, three_classes):
        fast = MultiViewClassifier(builder, inference="map", random_seed=0).fit(X, y)
        with monkeypatch.context() as patch:
            patch.setattr(engines, "MAP_STRATEGIES", [
                s for s in engines.MAP_STRATEGIES if s is not engines._process_evidence_map])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                slow = MultiViewClassifier(builder, inference="map", n_init=1,
                                           random_seed=0).fit(X, y)
        assert slow.idata_.posterior.attrs["solver"] == "lbfgs"
        assert (fast.idata_.posterior.attrs["map_logp"]
                >= slow.idata_.posterior.attrs["map_logp"] - 1e-6)


def test_fixed_metric_and_view_weights_are_checked_against_the_features(small):
    X, y, _, _ = small
    for combiner, match in ((BlockMetricCombiner(metric=np.eye(3)), "metric must be finite"),
                            (BlockMetricCombiner(view_weights=[0.5, 0.5]), "view_weights"),
                            (BlockMetricCombiner(learn_w=True, view_weights=[1, 1, 1]),
                             "cannot be given with learn_w")):
        builder = ModelBuilder(None, NystromFeatures(8), combiner, GaussianLikelihood(1.0))
        with pytest.raises(ValueError, match=match):
            MultiViewClassifier(builder, random_seed=0).fit(X, y)
    builder = ModelBuilder(None, ViewRandomFeatures(4, ["rbf"] * V, [0.1] * V),
                           RhoTensorCombiner(0.5, decision_rule="paper"), GaussianLikelihood())
    with pytest.raises(ValueError, match="decision_rule must be one of"):
        MultiViewClassifier(builder, random_seed=0).fit(X, y)


def test_mvlsvm_preset_is_the_composed_estimator_with_its_builder(small):
    X, y, Xt, _ = small
    svm = MVLSVM(C=10.0, random_seed=0).fit(X, y)
    composed = MultiViewClassifier(svm.make_builder(len(y), C=10.0), inference="map",
                                   random_seed=0).fit(X, y)
    assert composed.idata_.posterior.attrs["solver"] == "svm_map"  # the registered strategy
    for name in ("beta", "bias", "f"):
        np.testing.assert_allclose(composed.idata_.posterior[name].values,
                                   svm.idata_.posterior[name].values, atol=1e-8)
    # with the fitted probability constant in the likelihood, the same probabilities: the
    # graph's landmark features on the new rows against MVL-SVM's own map
    calibrated = MultiViewClassifier(
        svm.make_builder(len(y), C=10.0, link_constant=svm.link_constant_), inference="map",
        random_seed=0).fit(X, y)
    assert svm.link_constant_ != pytest.approx(10.0 / (2 * len(y)))  # a real calibration
    np.testing.assert_allclose(calibrated.predict_proba(Xt), svm.predict_proba(Xt), atol=1e-8)


@pytest.mark.timeout(300)
@pytest.mark.python_ops  # the hybrid sampler runs in NumPy: 6 s, against 14 s with gcc
def test_m3lak_preset_is_the_composed_estimator_with_its_builder_and_hybrid(small):
    X, y, Xt, _ = small
    m3lak = M3LAK(latent_dim=2, n_frequencies=4, view_latent_dim=1, n_components=3, draws=15,
                  tune=15, chains=1, random_seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 15 draws do not converge; the draws are compared
        m3lak.fit(X, y)
        composed = MultiViewClassifier(m3lak.make_builder(), inference="hybrid", draws=15,
                                       tune=15, chains=1, random_seed=5,
                                       target_accept=m3lak.target_accept).fit(X, y)
        # a shared latent models the views: a constant column is left out, as M3LAK does
        padded = [X[0], np.column_stack([X[1], np.full(len(y), 2.0)]), *X[2:]]
        composed_padded = clone(composed).fit(padded, y)
    np.testing.assert_array_equal(composed.idata_.posterior["f"].values,
                                  m3lak.idata_.posterior["f"].values)
    np.testing.assert_array_equal(composed_padded.idata_.posterior["f"].values,
                                  m3lak.idata_.posterior["f"].values)
    assert composed_padded.n_features_in_ == composed.n_features_in_ + 1
    # and the same predictions: the graph's own f on the new rows at the same draws, with
    # the same draws of the test latent h* | x*
    assert composed.n_latent_draws == m3lak.n_latent_draws
    np.testing.assert_array_equal(composed.predict_proba(Xt), m3lak.predict_proba(Xt))


@pytest.mark.python_ops  # four small MAP fits: as fast as compiled code with a warm cache
def test_grid_search_tunes_a_pieces_parameter_through_the_builder(small):
    X, y, _, _ = small
    est = MultiViewClassifier(make("identity", "linear", "sum", "logistic"), inference="map",
                              view_sizes=[v.shape[1] for v in X], random_seed=0)
    assert est.get_params()["builder__combiner__prior_precision"] == 1.0
    search = GridSearchCV(est, {"builder__combiner__prior_precision": [0.1, 10.0]}, cv=2)
    search.fit(np.hstack(X), y)
    assert search.best_params_["builder__combiner__prior_precision"] in (0.1, 10.0)
    assert est.builder.combiner.prior_precision == 1.0  # the search works on clones


def test_one_builder_fits_two_data_sets_independently(small):
    X, y, _, _ = small
    features = LandmarkFeatures(6, random_seed=0)
    builder = ModelBuilder(None, features, SumCombiner(1.0, flat_bias=True),
                           LogisticLikelihood())
    a = MultiViewClassifier(builder, inference="map", random_seed=0).fit(X, y)
    b = MultiViewClassifier(builder, inference="map", random_seed=0).fit(
        [v[::-1] for v in X], y[::-1])
    # the component itself never changes: no fitted attribute, the same parameters
    assert not [name for name in vars(features) if name.endswith("_")]
    assert features.get_params() == LandmarkFeatures(6, random_seed=0).get_params()
    rows_a = a._fitted()["landmarks"].landmarks_[0]
    rows_b = b._fitted()["landmarks"].landmarks_[0]
    assert not np.array_equal(rows_a, rows_b)


def _buildable():
    out = []
    for cell in CELLS:
        try:
            make(*cell)
        except CompositionError:
            continue
        for inference in INFERENCES:
            out.append((cell, inference))
    return out


@pytest.mark.exhaustive
@pytest.mark.timeout(600)
@pytest.mark.parametrize("cell, inference", _buildable(),
                         ids=[" + ".join(c) + f" / {i}" for c, i in _buildable()])
def test_every_buildable_cell_fits_or_refuses_the_engine_before_fitting(cell, inference, small,
                                                                       tmp_path):
    try:
        check_fit(make(*cell), inference, small, save_to=tmp_path, pymc_tools=True)
    except ValueError as err:
        assert "does not apply" in str(err) or "full Hessian" in str(err), str(err)


def test_random_state_is_a_deprecated_alias_of_random_seed_in_components():
    from bayesmv.data import check_views

    views = [np.random.default_rng(0).normal(size=(30, 3)) for _ in range(2)]
    data = check_views(views)
    new = LandmarkFeatures(5, random_seed=4).fit_state(data)
    with pytest.warns(FutureWarning, match="use random_seed"):
        old = LandmarkFeatures(5, random_state=4).fit_state(data)
    np.testing.assert_array_equal(old.landmark_indices_, new.landmark_indices_)
    with pytest.warns(FutureWarning, match="use random_seed"):
        state = NystromFeatures(0.3, random_state=4).fit_state(data)
    np.testing.assert_array_equal(state.subset,
                                  NystromFeatures(0.3, random_seed=4).fit_state(data).subset)
    # random features: the same base, and one warning for one build
    old_rff = ViewRandomFeatures(4, ["rbf", "rbf"], [0.1, 0.1], random_state=4)
    new_rff = ViewRandomFeatures(4, ["rbf", "rbf"], [0.1, 0.1], random_seed=4)
    for a, b in zip(old_rff.draw_base([3, 3]), new_rff.draw_base([3, 3]), strict=True):
        np.testing.assert_array_equal(a, b)
    builder = ModelBuilder(None, old_rff, RhoTensorCombiner(0.5), GaussianLikelihood())
    with pytest.warns(FutureWarning, match="use random_seed") as record:
        builder.build(data, np.where(np.arange(30) % 2, 1.0, -1.0)[:, None])
    assert len([w for w in record if issubclass(w.category, FutureWarning)]) == 1


def _built(builder, X, y):
    from bayesmv.data import check_views, label_tasks

    classes, y_index = np.unique(y, return_inverse=True)
    return builder.build(check_views(X), label_tasks(y_index, len(classes)))


@pytest.mark.python_ops  # a few Hessian-vector products on small graphs
@pytest.mark.parametrize("features", ["linear", "landmarks"])
def test_cp_curvature_strategies_match_autodiff(features, small):
    """The CP combiner's closed-form Hessian diagonal against PyTensor's (the full Hessian
    by Hessian-vector products), and its two-view rotation tangents are flat directions of
    the log density (the gradient is orthogonal to them at any point)."""
    from bayesmv.inference.curvature import fast_diagonal, flat_directions
    from bayesmv.inference.engines import flat_logp
    from bayesmv.inference.optimize import full_hessian

    X, y, _, _ = small
    built = _built(make("identity", features, "CP", "logistic"), X[:2], y)
    flat = flat_logp(built, True)
    x = 0.3 * np.random.default_rng(0).standard_normal(flat.size)
    diag = fast_diagonal(built, flat)
    assert diag is not None
    np.testing.assert_allclose(diag(x), -np.diag(full_hessian(flat, x)), rtol=1e-8,
                               atol=1e-10)
    directions = flat_directions(built, flat, x)
    assert directions is not None and directions.shape[1] >= 1
    grad = flat(x)[1]
    np.testing.assert_allclose(grad @ directions, 0.0,
                               atol=1e-9 * np.abs(grad).sum() * np.abs(directions).max())
    # no strategy serves a sum combiner: the engine falls back to Hessian-vector products
    other = _built(make("identity", features, "sum", "logistic"), X, y)
    assert fast_diagonal(other, flat_logp(other, True)) is None


@pytest.mark.python_ops
def test_laplace_with_diagonal_curvature_on_any_composition(small):
    """``laplace_curvature="diagonal"``: each parameter's Laplace sd is 1/sqrt of the
    negative Hessian's diagonal at the mode (checked on the draws' spread), for a composition
    no strategy serves (the Hessian-vector-product diagonal) and for the CP one."""
    from bayesmv.inference.engines import flat_logp
    from bayesmv.inference.optimize import full_hessian

    X, y, Xt, _ = small
    for cell in (("identity", "linear", "sum", "logistic"),
                 ("identity", "linear", "CP", "logistic")):
        est = MultiViewClassifier(make(*cell), inference="laplace", laplace_curvature="diagonal",
                                  draws=1000, random_seed=0).fit(X, y)
        assert est.idata_.posterior.attrs["laplace_curvature"] == "diagonal"
        flat = flat_logp(est._training_build(), True)
        mode = flat.from_point({n: est.idata_.fit[n].values for n in flat.names
                                if n in est.idata_.fit})
        sd = 1.0 / np.sqrt(np.clip(-np.diag(full_hessian(flat, mode)), 1e-300, None))
        name = "beta" if "beta" in flat.names else "A_0"
        draws = est.idata_.posterior[name].values.reshape(1000, -1)
        # the sd of 1000 Gaussian draws is within 2.2 % of the truth (1 sd): 15 % is ~7 sd
        np.testing.assert_allclose(draws.std(axis=0), sd[flat.slices[name]], rtol=0.15)
        assert est.predict_proba(Xt).shape == (len(Xt[0]), 2)
    with pytest.raises(ValueError, match="laplace_curvature must be one of"):
        MultiViewClassifier(laplace_curvature="lowrank").fit(X, y)
