"""PyMC's own tools work on the graph of every preset.

``pm.model_to_graphviz`` builds the graph's diagram (its DOT source; rendering would need the
graphviz binary, which is not required here) and ``pm.sample_prior_predictive`` draws every
free variable forward.  Both draw (the diagram evaluates shapes by drawing), so every prior
must be drawable: the flat priors are :class:`~bayesmv.components.base.WideFlat`, and the DP
mixture of M³LAK's frequencies draws per batch entry exactly as its log-density evaluates.

The draws are checked by distribution: the mixture's draws against its exact CDF (KS) with
batched and broadcast parameters, its log-density against one written here with SciPy, and
prior-predictive moments against the priors' known means and variances within Monte-Carlo
error.
"""

from __future__ import annotations

import copy
import tempfile
import warnings

import numpy as np
import pymc as pm
import pytest
from scipy import stats
from scipy.special import logsumexp

from bayesmv import M3LAK, MVLSVM, MVM, MVML, RhoTMVRKM
from bayesmv.components.base import FLAT_SCALE, WideFlat
from bayesmv.components.features import DiagonalNormalMixture
from bayesmv.datasets import make_nonlinear_latent

graphviz = pytest.importorskip("graphviz", reason="pip install 'bayesmv[test]'")

#: KS p-values below this fail (fixed seeds: each test is deterministic)
P_MIN = 1e-3
#: a Monte-Carlo mean must lie within this many standard errors of the exact value
Z_MAX = 4.0
N_SAMPLES = 60  # MVLSVM's default landmarks: every complete row up to 200
DRAWS = 200

# preset → (estimator with default parameters, {variable: dims} the prior must hold); every
# listed variable must also appear in the diagram
PRESETS = {
    "M3LAK": (M3LAK, {}, {"H": ("sample", "latent"), "Omega": ("frequency", "latent"),
                          "dp_weights": ("component",), "dp_mu": ("component", "latent"),
                          "dp_sigma2": ("component", "latent"), "beta": ("task", "feature"),
                          "f": ("sample", "task")}),
    "M3LAK-gaussian": (M3LAK, {"spectral": "gaussian"},
                       {"H": ("sample", "latent"), "Omega": ("frequency", "latent"),
                        "beta": ("task", "feature"), "f": ("sample", "task")}),
    "MVM": (MVM, {}, {"A_0": ("task", "z_0", "rank"), "A_1": ("task", "z_1", "rank"),
                      "f": ("sample", "task")}),
    "MVM-logistic": (MVM, {"loss": "logistic"},
                     {"A_0": ("task", "z_0", "rank"), "A_1": ("task", "z_1", "rank"),
                      "f": ("sample", "task")}),
    "MVML": (MVML, {}, {"A_chol": ("task", "metric_entry"), "g": ("task", "nystrom_feature"),
                        "f": ("sample", "task")}),
    "MVLSVM": (MVLSVM, {}, {"beta": ("task", "feature"), "bias": ("task",),
                            "f": ("sample", "task")}),
    "RhoTMVRKM": (RhoTMVRKM, {}, {"b": ("task",), "rho": (), "log_gamma_0": (),
                                  "log_gamma_1": (), "log_noise_variance": ()}),
}
#: the flat priors of each preset's graph (WideFlat stand-ins)
WIDE_FLAT = {"MVML": ("A_chol", "g"), "MVLSVM": ("bias",), "RhoTMVRKM": ("b",)}
#: dimension lengths the default parameters imply (M³LAK: m = 2, "auto" on views of 5 and 4,
#: M = 30 frequencies, 2M + 1 features, K = 20 components; MVLSVM: all 60 rows as landmarks,
#: per view; MVM: z_v = [x_v; 1], rank 8)
_M3LAK = {"latent": 2, "frequency": 30, "feature": 61}
LENGTHS = {"M3LAK": {**_M3LAK, "component": 20}, "M3LAK-gaussian": _M3LAK,
           "MVLSVM": {"feature": 2 * N_SAMPLES}, "MVM": {"z_0": 6, "z_1": 5, "rank": 8},
           "MVM-logistic": {"z_0": 6, "z_1": 5, "rank": 8}}
#: presets whose graph has an observed variable (the others' likelihood is a potential, such
#: as the hinge of M3LAK and of the default MVM's MAP)
OBSERVED = {"MVM-logistic": ("sample", "task"), "MVML": ("sample", "task"),
            "RhoTMVRKM": ("task", "sample")}


@pytest.fixture(scope="module")
def data():
    return make_nonlinear_latent(n_samples=N_SAMPLES, view_dims=(5, 4), latent_dim=2,
                                 view_latent_dim=1, noise=0.3, random_seed=0)


@pytest.fixture(scope="module", params=list(PRESETS))
def built(request, data):
    cls, params, variables = PRESETS[request.param]
    est = cls(**params)
    X, y = data
    model = est.build_model(X, y).model
    with warnings.catch_warnings():
        # PyMC ignores potentials (the hinge, M³LAK's view likelihoods, MVML's penalties)
        # when drawing forward, and says so
        warnings.filterwarnings("ignore", "The effect of Potentials", UserWarning)
        prior = pm.sample_prior_predictive(draws=DRAWS, model=model, random_seed=11)
    return request.param, est, model, variables, prior


def test_graphviz_builds_and_names_the_main_variables(built):
    name, _, model, variables, _ = built
    diagram = pm.model_to_graphviz(model)
    assert isinstance(diagram, graphviz.Digraph)
    for var in variables:
        assert f'[label="{var}\n~\n' in diagram.source, (name, var)
    if name in OBSERVED:
        assert '[label="y_obs\n~\n' in diagram.source
    # the flat priors' stand-ins say what they are
    for var in WIDE_FLAT.get(name, ()):
        assert f'[label="{var}\n~\nWide_flat"' in diagram.source, (name, var)
    if name == "M3LAK":
        assert '[label="Omega\n~\nDiagonal_normal_mixture"' in diagram.source


def test_prior_predictive_has_the_variables_with_their_shapes_and_is_finite(built):
    name, _, model, variables, prior = built
    for var, dims in variables.items():
        draws = prior.prior[var]
        assert draws.dims == ("chain", "draw", *dims), (name, var)
        expected = (1, DRAWS, *(len(model.coords[d]) for d in dims))
        assert draws.shape == expected, (name, var)
        assert np.all(np.isfinite(draws.values)), (name, var)
    if name in OBSERVED:
        y = prior.prior_predictive["y_obs"]
        assert y.dims == ("chain", "draw", *OBSERVED[name])
        assert y.shape == (1, DRAWS, *(len(model.coords[d]) for d in OBSERVED[name]))
        assert np.all(np.isfinite(y.values))
    for dim, length in {"sample": N_SAMPLES, "task": 1, **LENGTHS.get(name, {})}.items():
        if dim in model.coords:
            assert len(model.coords[dim]) == length, (name, dim)


def _assert_mean(per_draw: np.ndarray, expected: float) -> None:
    """The mean over independent prior draws lies within Z_MAX standard errors of ``expected``."""
    se = per_draw.std(ddof=1) / np.sqrt(per_draw.size)
    assert abs(per_draw.mean() - expected) < Z_MAX * se, (per_draw.mean(), expected, se)


def test_prior_draws_have_the_priors_mean_and_variance(built):
    """One prior variable per preset with a known law; statistics are averaged within a draw
    first, so that the draws averaged over are independent."""
    name, est, model, _, prior = built
    post = prior.prior
    if name.startswith("M3LAK"):
        beta = post["beta"].values[0].reshape(DRAWS, -1)                # N(0, 1/v)
        _assert_mean(beta.mean(axis=1), 0.0)
        _assert_mean((beta**2).mean(axis=1), 1.0 / est.prior_precision)
        omega = post["Omega"].values[0].reshape(DRAWS, -1)
        m = len(model.coords["latent"])
        # Gaussian: N(0, bandwidth²/m); DP mixture: E[σ²](1 + 1/κ₀) with E[σ²] =
        # bandwidth²/m
        var = est.bandwidth**2 / m * (1.0 if est.spectral == "gaussian"
                                      else 1.0 + 1.0 / est.kappa0)
        _assert_mean(omega.mean(axis=1), 0.0)
        _assert_mean((omega**2).mean(axis=1), var)
    if name == "M3LAK":
        sticks = post["dp_sticks"].values[0].reshape(DRAWS, -1)          # Beta(1, α)
        _assert_mean(sticks.mean(axis=1), 1.0 / (1.0 + est.concentration))
    if name in ("MVM", "MVM-logistic"):
        A = post["A_0"].values[0].reshape(DRAWS, -1)                    # N(0, prior_scale²)
        _assert_mean(A.mean(axis=1), 0.0)
        _assert_mean((A**2).mean(axis=1), est.prior_scale**2)
    if name == "MVLSVM":
        theta = post["beta"].values[0].reshape(DRAWS, -1)               # N(0, 1)
        _assert_mean((theta**2).mean(axis=1), 1.0)
        _assert_mean(post["bias"].values.ravel() ** 2, FLAT_SCALE**2)  # the wide stand-in
    if name == "MVML":
        A_chol = post["A_chol"].values[0].reshape(DRAWS, -1)
        _assert_mean((A_chol**2).mean(axis=1), FLAT_SCALE**2)
    if name == "RhoTMVRKM":
        rho = post["rho"].values.ravel()                                # U(0, 1)
        _assert_mean(rho, 0.5)
        _assert_mean((rho - 0.5) ** 2, 1.0 / 12.0)


# ------------------------------------------------------------- a fitted preset's own graph
#: preset → (fast settings, the free variables of its fitted graph: what the fit did not fix,
#: the composed estimator's engine for it)
FITTED = {
    "RhoTMVRKM": ({}, {"b"}, "map"),        # ϱ, γ_v and λ chosen by the criterion, fixed
    "MVLSVM": ({}, {"beta", "bias"}, "map"),  # C and the probability's constant chosen
    "MVML": ({}, {"g"}, "exact"),             # the metric learned, fixed
    "MVM": ({"rank": 2, "ensemble": 2}, {"A_0", "A_1"}, "map"),
    "M3LAK": ({"draws": 10, "tune": 10, "chains": 1},
              {"H", "Omega", "V_0", "V_1", "W_0", "W_1", "beta", "dp_mu", "dp_sigma2",
               "dp_sticks", "r", "tau"}, "hybrid"),
}


@pytest.mark.parametrize("name", list(FITTED))
def test_a_fitted_preset_holds_its_graph_with_the_fits_choices_fixed(name, data):
    """``model_`` is ``builder_``'s graph on the training rows: PyMC's tools work on it, its
    free variables are the ones the fit did not choose, and the composed estimator's generic
    engine on ``builder_`` (an implementation independent of the preset's solver) predicts
    as the preset."""
    import bayesmv
    from bayesmv import MultiViewClassifier

    settings, free, inference = FITTED[name]
    X, y = data
    est = PRESETS[name][0](random_seed=0, **settings)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # M3LAK's few draws are flagged as unconverged
        est.fit(X, y)
    model = est.model_
    assert est.model_ is model  # built once
    assert {rv.name for rv in model.free_RVs} == free
    assert len(model.coords["sample"]) == N_SAMPLES
    assert isinstance(pm.model_to_graphviz(model), graphviz.Digraph)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The effect of Potentials", UserWarning)
        prior = pm.sample_prior_predictive(draws=5, model=model, random_seed=0)
    assert all(np.all(np.isfinite(prior.prior[v].values)) for v in free)
    if name == "M3LAK":  # the latent dimensions "auto" resolved to
        view_latent = model.initial_point()["V_0"].shape[-1]
        assert (len(model.coords["latent"]), view_latent) == est.latent_dims_
    extra = ({"n_init": est.n_init, "ensemble": settings["ensemble"], "max_iter": est.max_iter,
              "tol": est.tol} if name == "MVM" else
             {**{k: settings[k] for k in ("draws", "tune", "chains")},
              "target_accept": est.target_accept} if name == "M3LAK" else {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        composed = MultiViewClassifier(est.builder_, inference=inference, random_seed=0,
                                       **extra).fit(X, y)
    if name == "M3LAK":  # the same chain for the seed: the same draws
        np.testing.assert_array_equal(composed.idata_.posterior["f"].values,
                                      est.idata_.posterior["f"].values)
    else:
        np.testing.assert_allclose(composed.predict_proba(X), est.predict_proba(X),
                                   atol=1e-8)
    # a copy rebuilds the graph instead of copying it; a refit replaces it
    assert "_model" not in vars(copy.deepcopy(est))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit([Xv[:40] for Xv in X], y[:40])
    assert len(est.model_.coords["sample"]) == 40
    # a loaded model does not hold the training rows: it says so
    with tempfile.TemporaryDirectory() as tmp:
        est.save(f"{tmp}/m")
        loaded = bayesmv.load(f"{tmp}/m")
    with pytest.raises(AttributeError, match=f"model_ of this {name} is not available"):
        loaded.model_  # noqa: B018 - the property raises
    assert loaded.builder_.get_params(deep=True).keys() == est.builder_.get_params(
        deep=True).keys()


def test_the_mvm_regressor_holds_its_graph_too(data):
    """The regressor's graph: its factors and the Gaussian noise's sd are free, the targets
    (standardised) are the ones fitted; a pickled copy rebuilds it."""
    import pickle

    from bayesmv import MVMRegressor

    X, _ = data
    target = X[0][:, 0] - 2.0 * X[1][:, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the optimiser's iteration cap: not what is tested
        est = MVMRegressor(rank=2, random_seed=0, max_iter=200).fit(X, target)
    model = est.model_
    assert {rv.name for rv in model.free_RVs} == {"A_0", "A_1", "sigma"}
    observed = model.rvs_to_values[model["y_obs"]].data
    np.testing.assert_allclose(observed[:, 0], (target - target.mean()) / target.std())
    copy_ = pickle.loads(pickle.dumps(est))
    assert "_model" not in vars(copy_)
    assert {rv.name for rv in copy_.model_.free_RVs} == {"A_0", "A_1", "sigma"}


# ------------------------------------------------------------------ the DP mixture itself
def _mixture_logpdf(x, w, mu, sigma2):
    """Log density of one diagonal normal mixture at points x (n, m), with SciPy."""
    comp = stats.norm(mu[None], np.sqrt(sigma2[None])).logpdf(x[:, None, :]).sum(axis=-1)
    return logsumexp(comp + np.log(w)[None], axis=1)


def _projection_cdf(a, w, mu, sigma2):
    """CDF of aᵀω under the mixture: Σ_k w_k Φ((t - aᵀμ_k) / √(Σ_d a_d² σ²_kd))."""
    loc, scale = mu @ a, np.sqrt(sigma2 @ a**2)
    return lambda t: np.sum(w * stats.norm.cdf((np.asarray(t)[..., None] - loc) / scale), -1)


@pytest.fixture(scope="module")
def mixtures():
    """Three different mixtures (K = 3 components, m = 2 dimensions), one per batch entry."""
    rng = np.random.default_rng(3)
    w = rng.dirichlet(np.ones(3), size=3)
    mu = rng.normal(0.0, 2.0, size=(3, 3, 2))
    sigma2 = rng.gamma(2.0, 0.3, size=(3, 3, 2))
    return w, mu, sigma2


@pytest.mark.parametrize("broadcast", [False, True])
def test_dp_mixture_draws_follow_each_batch_entrys_mixture(mixtures, broadcast):
    """Batch entry j of a draw of shape (n, 3, m) follows mixture j: every coordinate and
    the projection on (1, -1) (which sees that coordinates share their component) against
    the exact CDFs.  With ``broadcast`` the weights are shared by the batch (shape (K,))."""
    w, mu, sigma2 = mixtures
    if broadcast:
        w = np.broadcast_to(w[0], w.shape)
    n = 4000
    weights = w[0] if broadcast else w
    draws = pm.draw(DiagonalNormalMixture.dist(weights, mu, sigma2, size=(n, 3)),
                    random_seed=5)
    assert draws.shape == (n, 3, 2)
    for j in range(3):
        for a in (np.array([1.0, 0.0]), np.array([0.0, 1.0]), np.array([1.0, -1.0])):
            cdf = _projection_cdf(a, w[j], mu[j], sigma2[j])
            assert stats.kstest(draws[:, j] @ a, cdf).pvalue > P_MIN, (j, a)


def test_dp_mixture_draws_without_size_take_the_parameters_batch(mixtures):
    w, mu, sigma2 = mixtures
    draws = pm.draw(DiagonalNormalMixture.dist(w[:1], mu, sigma2), draws=3000, random_seed=6)
    assert draws.shape == (3000, 3, 2)
    for j in range(3):
        cdf = _projection_cdf(np.array([1.0, 1.0]), w[0], mu[j], sigma2[j])
        assert stats.kstest(draws[:, j].sum(axis=1), cdf).pvalue > P_MIN, j


def test_dp_mixture_logp_is_the_batched_mixture_density(mixtures):
    """The log-density broadcasts the same batch: value (n, 3, m) → (n, 3), entry j under
    mixture j (and a shared weight vector broadcasts as in the draws)."""
    w, mu, sigma2 = mixtures
    x = np.random.default_rng(7).normal(0.0, 2.0, size=(5, 3, 2))
    for weights, w_of in ((w, lambda j: w[j]), (w[0], lambda j: w[0])):
        dist = DiagonalNormalMixture.dist(weights, mu, sigma2, size=(5, 3))
        logp = pm.logp(dist, x).eval()
        assert logp.shape == (5, 3)
        for j in range(3):
            np.testing.assert_allclose(logp[:, j], _mixture_logpdf(x[:, j], w_of(j), mu[j],
                                                                   sigma2[j]), rtol=1e-12)


def test_wide_flat_draws_and_log_density_are_one_normal():
    """WideFlat is N(0, scale²) up to its constant: draws by KS, log-density differences
    exactly, and it starts at zero like pm.Flat."""
    draws = pm.draw(WideFlat.dist(scale=2.5), draws=3000, random_seed=8)
    assert stats.kstest(draws, stats.norm(0.0, 2.5).cdf).pvalue > P_MIN
    x = np.array([-3.0, 0.0, 0.7, 40.0])
    logp = pm.logp(WideFlat.dist(scale=2.5, shape=4), x).eval()
    np.testing.assert_allclose(logp, stats.norm(0.0, 2.5).logpdf(x) - stats.norm(0.0, 2.5)
                               .logpdf(0.0), rtol=1e-14, atol=1e-14)
    with pm.Model() as model:
        WideFlat("b", shape=3)
    np.testing.assert_array_equal(model.initial_point()["b"], np.zeros(3))
