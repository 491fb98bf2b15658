"""Diagnostics: convergence on identifiable quantities, posterior predictive checks,
calibration, plots and HTML reports.

References are independent of the code under test: InferenceData with known properties,
ArviZ's own rhat / ess / mcse, scikit-learn's metrics, a bin-by-bin ECE written out here, a
conjugate Beta-Bernoulli model whose posterior is exact, data simulated from MVM's own
logistic model, and headless Chromium for the HTML reports.
"""

import base64
import io
import re
import shutil
import subprocess
import warnings

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
import pytest
from PIL import Image
from scipy import stats
from scipy.special import expit
from scipy.stats import binomtest
from sklearn.calibration import calibration_curve
from sklearn.metrics import brier_score_loss, log_loss

from bayesmv import M3LAK, MVLSVM, MVM, MVML, RhoTMVRKM
from bayesmv.cli import wilson_interval as cli_wilson
from bayesmv.data import check_views
from bayesmv.datasets import make_lvm_classification
from bayesmv.diagnostics import (
    ConvergenceWarning,
    calibration,
    check_convergence,
    inference_kind,
    plot_decision_intervals,
    plot_rank,
    plot_reliability,
    plot_trace,
    plot_view_relevance,
    posterior_predictive_check,
    summary,
    wilson_interval,
)
from bayesmv.diagnostics import report as write_report
from bayesmv.diagnostics.convergence import separated_states, warn_if_not_converged
from bayesmv.diagnostics.report import wall_time_summary
from bayesmv.models.base import BaseMultiViewClassifier


def _idata(f, diverging=None, **extra):
    post = {"f": f, **extra}
    stats = {"diverging": diverging} if diverging is not None else None
    return az.from_dict(posterior=post, sample_stats=stats,
                        dims={"f": ["sample", "task"]})


def test_independent_chains_pass():
    rng = np.random.default_rng(0)
    idata = _idata(rng.normal(size=(4, 500, 5, 1)), np.zeros((4, 500), bool),
                   tau=rng.gamma(5, size=(4, 500, 2)), H=rng.normal(size=(4, 500, 3)))
    report = check_convergence(idata)
    assert report.ok, report
    assert report.var_names == ("f", "tau")  # H is a rotation-invariant latent: not judged
    assert list(report.table.columns[:4]) == ["r_hat", "ess_bulk", "ess_tail", "mcse_mean"]
    assert len(report.table) == 5 + 2
    assert "ConvergenceReport [OK]" in repr(report) and "<b>" in report._repr_html_()


def test_disagreeing_chains_sticky_chains_and_divergences_fail():
    rng = np.random.default_rng(1)
    f = rng.normal(size=(2, 400, 3, 1))
    f[1] += 3.0  # the second chain sits elsewhere
    sticky = np.cumsum(rng.normal(size=(2, 400, 3, 1)), axis=1)  # random walks
    div = np.zeros((2, 400), bool)
    div[0, :7] = True
    bad_rhat = check_convergence(_idata(f))
    assert not bad_rhat.ok and any("R-hat" in w for w in bad_rhat.warnings)
    bad_ess = check_convergence(_idata(sticky))
    assert any("ess bulk" in w for w in bad_ess.warnings)
    with_div = check_convergence(_idata(rng.normal(size=(2, 400, 3, 1)), div))
    assert with_div.n_divergences == 7 and not with_div.ok
    with pytest.warns(ConvergenceWarning, match="7 divergent"):
        warn_if_not_converged(with_div)


def test_single_chain_is_reported_and_many_points_are_subsampled():
    rng = np.random.default_rng(2)
    report = check_convergence(_idata(rng.normal(size=(1, 300, 50, 1))), max_points=10)
    assert any("one chain" in w for w in report.warnings)
    assert len(report.table) == 10 and "10 evenly spaced" in report.note


# References are independent of the code under test: ArviZ's own rhat / ess / mcse,
# scikit-learn's metrics, a bin-by-bin ECE written out here, a conjugate Beta-Bernoulli model
# whose posterior is exact, and headless Chromium for the HTML.
@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _ar1(rng, chains, draws, size, phi, start=0.0):
    """AR(1) chains with stationary N(0, 1) marginals, started at ``start`` (per chain)."""
    x = np.empty((chains, draws, size))
    x[:, 0] = np.reshape(start, (-1, 1)) + rng.normal(size=(chains, size))
    for t in range(1, draws):
        x[:, t] = phi * x[:, t - 1] + np.sqrt(1 - phi**2) * rng.normal(size=(chains, size))
    return x


def _two_views(n, seed=0):
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=(n, 3)), rng.normal(size=(n, 2))]
    y = (X[0][:, 0] + X[1][:, 0] > 0).astype(int)
    return X, y


# ------------------------------------------------------------ convergence table
def test_table_holds_arvizs_own_numbers():
    rng = np.random.default_rng(3)
    idata = _idata(_ar1(rng, 3, 300, 4, 0.8)[..., None], tau=rng.gamma(3.0, size=(3, 300, 2)))
    rep = check_convergence(idata)
    post = idata.posterior
    reference = {"r_hat": az.rhat(post, method="rank"), "ess_bulk": az.ess(post, method="bulk"),
                 "ess_tail": az.ess(post, method="tail"), "mcse_mean": az.mcse(post, method="mean")}
    assert len(rep.table) == 6 and set(rep.locations) == set(rep.table.index)
    for label, (group, var, sel) in rep.locations.items():
        assert group == "posterior"
        for column, ds in reference.items():
            assert rep.table.loc[label, column] == pytest.approx(float(ds[var].sel(sel)),
                                                                 rel=1e-12)
    worst = rep.by_variable
    assert worst.loc["f", "r_hat"] == rep.table.loc[rep.table.variable == "f", "r_hat"].max()


def test_object_coordinates_are_located_as_nutpie_writes_them():
    """nutpie's traces carry coordinates as Python objects (plain ``str``, no ``.item()``):
    the report still locates every row, with the coordinate values as given."""
    rng = np.random.default_rng(4)
    f = rng.normal(size=(2, 200, 3, 1))
    names = np.array(["a", "b", "c"], dtype=object)
    idata = az.from_dict(posterior={"f": f}, dims={"f": ["sample", "task"]},
                         coords={"sample": names, "task": np.array(["t"], dtype=object)})
    rep = check_convergence(idata)
    assert sorted(sel["sample"] for _, _, sel in rep.locations.values()) == ["a", "b", "c"]
    for _, var, sel in rep.locations.values():
        assert type(sel["sample"]) is str and var == "f"


def test_default_judges_identifiable_quantities_only_and_says_so():
    rng = np.random.default_rng(4)
    C, S = 4, 1000
    post = {"f": rng.normal(size=(C, S, 5, 1)), "tau": rng.gamma(4.0, size=(C, S, 2)),
            "v": rng.gamma(4.0, size=(C, S)), "rho": rng.beta(2, 2, size=(C, S)),
            "H": rng.normal(size=(C, S, 5, 2)), "W_0": rng.normal(size=(C, S, 3, 2)),
            "Omega": rng.normal(size=(C, S, 4, 2)), "A_0": rng.normal(size=(C, S, 3, 2))}
    # a rotation-invariant latent whose chains disagree must not spoil the verdict
    post["H"][1] += 5.0
    idata = az.from_dict(posterior=post, dims={"f": ["sample", "task"]},
                         sample_stats={"lp": rng.normal(size=(C, S)),
                                       "diverging": np.zeros((C, S), bool)})
    rep = check_convergence(idata)
    assert rep.ok, rep
    assert rep.var_names == ("f", "tau", "v", "rho", "lp")
    assert rep.locations["lp"][0] == "sample_stats"
    assert set(rep.table["variable"]) == {"f", "tau", "v", "rho", "lp"}
    assert "are not judged" in rep.note
    for latent in ("H", "W_0", "Omega", "A_0"):
        assert latent in rep.note
    # asked for explicitly, the latent is judged and fails
    forced = check_convergence(idata, var_names=["H"])
    assert not forced.ok and any(w.startswith("R-hat of H") for w in forced.warnings)


def test_thresholds_are_adjustable_and_validated():
    rng = np.random.default_rng(5)
    idata = _idata(_ar1(rng, 2, 400, 3, 0.97)[..., None])
    assert not check_convergence(idata).ok
    loose = check_convergence(idata, r_hat_max=1.5, ess_min_per_chain=2)
    assert loose.ok, loose
    assert loose.r_hat_max == 1.5 and loose.ess_min == 4
    with pytest.raises(ValueError, match="r_hat_max"):
        check_convergence(idata, r_hat_max=0.9)
    with pytest.raises(ValueError, match="not in the posterior"):
        check_convergence(idata, var_names=["nope"])


def test_badly_initialised_chains_are_flagged_naming_the_quantity():
    rng = np.random.default_rng(6)
    # chains started at +6 and -6, relaxing slowly (AR(0.95)) to the same target
    f = _ar1(rng, 2, 300, 3, 0.95, start=[6.0, -6.0])[..., None]
    rep = check_convergence(_idata(f, tau=rng.gamma(5.0, size=(2, 300, 2))))
    assert not rep.ok
    assert any(w.startswith("R-hat of f is above 1.01") and "f[" in w for w in rep.warnings)
    assert not any("of tau" in w for w in rep.warnings)
    # chains still relaxing from their starts: running longer is the remedy, not a mode
    assert all("separate states" not in w for w in rep.warnings)


def test_chains_in_separate_states_are_told_apart_from_slow_ones():
    """Chains that each sit steady around their own value (a second mode, as when M3LAK's
    views share a weak latent direction differently per chain) get a different remedy from
    chains that are still relaxing: running longer does not cross a mode."""
    rng = np.random.default_rng(7)
    f = rng.normal(size=(4, 400, 3, 1))
    tau = 1.0 + 0.01 * _ar1(rng, 4, 400, 2, 0.9)
    tau[[1, 2], :, 1] += 0.08  # two chains against two, 8 within-chain sds apart
    rep = check_convergence(_idata(f, tau=tau))
    message = next(w for w in rep.warnings if w.startswith("R-hat of tau"))
    assert "tau[1]" in message and "separate states" in message
    assert "8 within-chain sds apart" in message
    # the measure itself: steady chains apart; one drifting chain, or chains close, are not
    steady = np.stack([np.zeros(100), np.ones(100)]) + 0.01 * rng.normal(size=(2, 100))
    assert separated_states(steady) == pytest.approx(100, rel=0.2)
    drifting = np.stack([np.linspace(0, 1, 100), np.linspace(0, 1, 100) + 0.5])
    assert separated_states(drifting) is None
    assert separated_states(rng.normal(size=(2, 100))) is None


def test_a_sampler_that_never_moved_is_flagged():
    f = np.ones((2, 100, 4, 1))
    rep = check_convergence(_idata(f))
    assert not rep.ok and any("did not move" in w for w in rep.warnings)


def test_short_real_run_is_flagged():
    X, y = _two_views(40)
    with pytest.warns(ConvergenceWarning):
        short = M3LAK(latent_dim=2, n_frequencies=5, draws=15, tune=0, chains=2, cores=1,
                      random_seed=0).fit(X, y)
    rep = check_convergence(short)
    assert inference_kind(short) == "mcmc"  # M3LAK records attrs["sampler"]
    assert not rep.ok and rep.var_names[:2] == ("f", "tau")
    assert any(w.startswith(("R-hat of f", "Bulk effective sample size (ess bulk) of f"))
               for w in rep.warnings)


@pytest.mark.long
@pytest.mark.timeout(600)
def test_long_run_on_an_easy_problem_passes():
    X, y = _two_views(40)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        # 2 × 4000: with two chains (four split halves) R-hat's own noise at an ESS of ~450
        # reached 1.012 for τ (seed 0 of four; the others ≤ 1.003), so draw enough to judge
        long = M3LAK(latent_dim=2, n_frequencies=5, spectral="gaussian", draws=4000, tune=200,
                     chains=2, cores=2, random_seed=0).fit(X, y)
    rep = check_convergence(long)
    assert rep.ok, rep
    assert rep.min_ess_bulk >= 200 and rep.max_r_hat < 1.01


def test_map_and_laplace_fits_say_what_applies():
    X, y = _two_views(60, seed=1)
    kw = dict(rho=0.5, alpha=0.5, gamma="scale")
    rep = check_convergence(RhoTMVRKM(**kw).fit(X, y))
    assert rep.ok and rep.inference == "map" and len(rep.table) == 0
    assert "no sampling diagnostics apply" in rep.note and "MAP" in repr(rep)
    lap = RhoTMVRKM(inference="laplace", draws=400, random_seed=0, **kw).fit(X, y)
    rep = check_convergence(lap)
    assert rep.ok, rep
    assert rep.inference == "laplace" and "independent" in rep.note
    assert {"rho", "alpha", "gamma"} <= set(rep.fixed) and rep.var_names == ("f", "b")
    # independent draws: ArviZ's ESS estimates scatter around the number of draws
    assert 300 < rep.table["ess_bulk"].median() < 550
    few = RhoTMVRKM(inference="laplace", draws=50, random_seed=0, **kw).fit(X, y)
    rep = check_convergence(few)
    assert not rep.ok and any("Only 50 Laplace draws" in w for w in rep.warnings)


def test_summary_is_arviz_for_draws_and_clean_point_values_for_map():
    X, y = _two_views(60, seed=1)
    kw = dict(rho=0.5, alpha=0.5, gamma="scale")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no shape warning, no NaN-column RuntimeWarning
        point = RhoTMVRKM(**kw).fit(X, y)
        table = summary(point)
        lap = RhoTMVRKM(inference="laplace", draws=200, random_seed=0, **kw).fit(X, y)
        lap_table = summary(lap)
    post = point.idata_.posterior
    assert table.attrs["inference"] == "map" and list(table.columns) == ["map"]
    assert not table.isna().any().any()
    assert table.loc["f[7, 0]", "map"] == float(post["f"].sel(sample=7, task=0).item())
    assert table.loc["gamma[view1]", "map"] == float(post["gamma"].sel(view="view1").item())
    assert len(table) == sum(post[v].size for v in ("f", "b", "rho", "alpha", "gamma"))
    assert list(summary(point, "rho").index) == ["rho"]
    # Laplace: independent draws, so mean, sd and HDI (ArviZ's own numbers)
    assert lap_table.attrs["inference"] == "laplace"
    assert list(lap_table.columns) == ["mean", "sd", "hdi_3%", "hdi_97%"]
    np.testing.assert_array_equal(
        lap_table.to_numpy(), az.summary(lap.idata_, var_names=["f", "b", "rho", "alpha", "gamma"],
                                         kind="stats").to_numpy())
    with pytest.raises(ValueError, match="not in the posterior"):
        summary(point, ["nope"])


def test_summary_of_mcmc_is_az_summary_of_the_identifiable_quantities():
    rng = np.random.default_rng(3)
    idata = _idata(rng.normal(size=(2, 100, 5, 1)), tau=rng.gamma(3.0, size=(2, 100, 2)),
                   W=rng.normal(size=(2, 100, 4, 3)))
    table = summary(idata)
    assert table.attrs["inference"] == "mcmc"
    expected = az.summary(idata, var_names=["f", "tau"])
    assert list(table.index) == list(expected.index)  # W, a latent, is left out
    np.testing.assert_array_equal(table.to_numpy(), expected.to_numpy())


def test_wall_time_summary_nests_the_recorded_timings():
    idata = _idata(np.zeros((2, 5, 3, 1)))
    assert wall_time_summary(idata) is None
    assert wall_time_summary(idata, 2.5) == "2.5 s whole fit"
    idata.posterior.attrs.update(sampling_seconds=11.87, sampling_time=4.63)
    line = wall_time_summary(idata, 13.7)
    assert line == ("13.7 s whole fit = 11.9 s in pm.sample (4.6 s tuning and drawing, 7.2 s "
                    "compiling, starting the chain processes and collecting the draws) + 1.8 s "
                    "the rest of fit (validation, model build, diagnostics)")
    point = _idata(np.zeros((1, 1, 3, 1)))
    point.posterior.attrs.update(fit_seconds=0.25, selection_seconds=0.125)
    assert wall_time_summary(point) == ("0.25 s in inference (0.12 s of it choosing "
                                        "hyper-parameters by marginal likelihood)")


# ------------------------------------------------------------------ calibration
def _ece_reference(outcome, p, n_bins):
    """Σ_b (n_b/n)|mean outcome - mean p| over right-closed equal-width bins."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    total = 0.0
    for b in range(n_bins):
        in_bin = (p > edges[b]) & (p <= edges[b + 1]) if b else (p <= edges[1])
        if in_bin.any():
            total += in_bin.sum() * abs(outcome[in_bin].mean() - p[in_bin].mean())
    return total / len(p)


def test_binary_calibration_equals_sklearn():
    rng = np.random.default_rng(7)
    p = rng.beta(2.0, 2.0, 500)
    y = np.where(rng.random(500) < p**1.5, "b", "a")  # miscalibrated on purpose
    classes = np.array(["a", "b"])
    proba = np.column_stack([1 - p, p])
    cal = calibration(y, proba, classes, n_bins=8)
    assert cal.brier == pytest.approx(brier_score_loss(y == "b", p), rel=1e-12)
    assert cal.log_loss == pytest.approx(log_loss(y, proba, labels=classes), rel=1e-12)
    prob_true, prob_pred = calibration_curve(y == "b", p, n_bins=8)
    np.testing.assert_allclose(cal.reliability["prob_true"], prob_true, rtol=1e-12)
    np.testing.assert_allclose(cal.reliability["prob_pred"], prob_pred, rtol=1e-12)
    assert cal.reliability["count"].sum() == 500
    assert cal.ece == pytest.approx(_ece_reference((y == "b").astype(float), p, 8), rel=1e-12)
    assert cal.ece > 0.02


def test_multiclass_calibration_equals_sklearn():
    rng = np.random.default_rng(8)
    logits = rng.normal(scale=2.0, size=(400, 3))
    proba = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    y = np.array([rng.choice(3, p=q) for q in proba]) + 10
    classes = np.array([10, 11, 12])
    cal = calibration(y, proba, classes)
    assert cal.brier == pytest.approx(brier_score_loss(y, proba, labels=classes), rel=1e-12)
    assert cal.log_loss == pytest.approx(log_loss(y, proba, labels=classes), rel=1e-12)
    top = proba.argmax(axis=1)
    correct = (classes[top] == y).astype(float)
    assert cal.ece == pytest.approx(_ece_reference(correct, proba.max(axis=1), 10), rel=1e-12)
    with pytest.raises(ValueError, match="not fitted on"):
        calibration(np.full(400, 99), proba, classes)


# ------------------------------------------------------- posterior predictive
class _FixedProbabilities(BaseMultiViewClassifier):
    """Returns given per-draw class probabilities (no model): to check the PPC arithmetic."""

    def __init__(self, q=None):
        self.q = q

    def fit(self, X=None, y=None):
        self.classes_ = np.arange(self.q.shape[2])
        self.idata_ = az.from_dict(posterior={"f": np.zeros((1, 1, self.q.shape[1], 1))})
        return self

    def _class_probability_draws(self, X):
        return self.q

    def predict_proba(self, X):
        return self.q.mean(axis=0)


class _BetaBernoulli(BaseMultiViewClassifier):
    """Labels iid Bernoulli(θ) with θ ~ Beta(a, b); X is ignored.  The posterior is exact.

    ``fixed_theta`` replaces the posterior by a point mass (a misspecified, overconfident
    model) to show that the check can fail.
    """

    def __init__(self, a=1.0, b=1.0, n_draws=400, random_seed=0, fixed_theta=None):
        self.a, self.b, self.n_draws = a, b, n_draws
        self.random_seed, self.fixed_theta = random_seed, fixed_theta

    def fit(self, X, y):
        y = np.asarray(y)
        k, n = int(y.sum()), len(y)
        rng = np.random.default_rng(self.random_seed)
        self.theta_ = (rng.beta(self.a + k, self.b + n - k, self.n_draws)
                       if self.fixed_theta is None else np.full(self.n_draws, self.fixed_theta))
        self.classes_ = np.array([0, 1])
        self.idata_ = az.from_dict(posterior={"theta": self.theta_[None]})
        return self

    def _class_probability_draws(self, X):
        t = np.broadcast_to(self.theta_[:, None, None], (self.n_draws, len(X), 1))
        return np.concatenate([1.0 - t, t], axis=2)

    def predict_proba(self, X):
        return self._class_probability_draws(X).mean(axis=0)


def test_ppc_arithmetic_on_known_probabilities():
    n = 200
    # certain predictions: every replication equals the prediction
    q = np.zeros((1, n, 2))
    q[0, :150, 1] = q[0, 150:, 0] = 1.0
    est = _FixedProbabilities(q).fit()
    y = np.r_[np.ones(120, int), np.zeros(30, int), np.zeros(50, int)]  # 30 errors
    rep = posterior_predictive_check(est, np.zeros((n, 1)), y, n_replications=50)
    s = rep.statistics
    assert rep.accuracy == pytest.approx(170 / 200)
    assert s.loc["accuracy", "observed"] == pytest.approx(0.85)
    assert s.loc["accuracy", "rep_mean"] == 1.0 and s.loc["accuracy", "p_value"] == 1.0
    assert s.loc["balance[1]", "rep_mean"] == pytest.approx(0.75)
    assert s.loc["balance[1]", "observed"] == pytest.approx(0.6)
    # class 0: 30 of its 80 rows are predicted 1; replications never err
    assert s.loc["error[0]", "observed"] == pytest.approx(30 / 80)
    assert s.loc["error[0]", "p_value"] == 0.0 and s.loc["error[0]", "p_value_mid"] == 0.0
    assert s.loc["error[1]", "observed"] == 0.0 and s.loc["error[1]", "p_value"] == 1.0
    assert s.loc["error[1]", "p_value_mid"] == 0.5  # always a tie
    assert not rep.ok and any(w.startswith("accuracy") for w in rep.warnings)
    # uncertain predictions: replicated labels follow q
    q = np.tile([[0.3, 0.7]], (1, n, 1))
    rep = posterior_predictive_check(_FixedProbabilities(q).fit(), np.zeros((n, 1)),
                                     np.ones(n, int), n_replications=4000, random_seed=1)
    frac = (rep.y_rep == 1).mean(axis=1)
    assert frac.mean() == pytest.approx(0.7, abs=0.005)
    assert frac.std() == pytest.approx(np.sqrt(0.21 / n), rel=0.1)
    assert rep.statistics.loc["balance[1]", "p_value"] == pytest.approx(
        stats.binom(n, 0.7).sf(n - 1), abs=0.002)


def test_ppc_reuses_the_callers_probabilities_and_predicts_once():
    q = np.random.default_rng(2).dirichlet([1.0, 1.0, 1.0], size=(5, 40))
    est = _FixedProbabilities(q).fit()
    calls = []
    est.predict_proba = lambda X: calls.append(X) or q.mean(axis=0)
    y = np.arange(40) % 3
    rep = posterior_predictive_check(est, None, y, n_replications=20)
    assert len(calls) == 1  # predict() would have been a second pass
    np.testing.assert_array_equal(rep.y_pred, np.argmax(q.mean(axis=0), axis=1))
    given = posterior_predictive_check(est, None, y, n_replications=20, proba=q.mean(axis=0))
    assert len(calls) == 1
    assert given.statistics.equals(rep.statistics)
    with pytest.raises(ValueError, match="proba must have shape"):
        posterior_predictive_check(est, None, y, proba=q.mean(axis=0)[:, :2])


def test_ppc_pvalues_uniform_under_an_exact_posterior_and_not_when_misspecified():
    rng = np.random.default_rng(9)
    good, bad = [], []
    for r in range(250):
        theta = rng.beta(1.0, 1.0)  # the truth is drawn from the model's own prior
        y_train = (rng.random(30) < theta).astype(int)
        y_test = (rng.random(40) < theta).astype(int)
        X_test = np.zeros((40, 1))
        for out, fixed in ((good, None), (bad, 0.5)):
            est = _BetaBernoulli(random_seed=r, fixed_theta=fixed).fit(None, y_train)
            rep = posterior_predictive_check(est, X_test, y_test, n_replications=400,
                                             random_seed=r)
            out.append(rep.statistics.loc["balance[1]", "p_value_mid"])
    good, bad = np.array(good), np.array(bad)
    assert abs(good.mean() - 0.5) < 0.05
    assert stats.kstest(good, "uniform").statistic < 0.1
    # an overconfident model (θ = 0.5 whatever the data) piles its p-values up at 0 and 1
    assert stats.kstest(bad, "uniform").statistic > 0.2
    assert np.mean((bad < 0.025) | (bad > 0.975)) > 0.3


# long: eight Laplace fits and 16 000 replications, 27-53 s (warm and empty compile cache);
# the exact-posterior check above keeps a calibrated-p-value test in the default run
@pytest.mark.long
def test_ppc_pvalues_roughly_uniform_for_data_from_the_fitted_family():
    """Rank-1 two-view MVM with a logistic likelihood: the truth's factors are drawn from the
    model's N(0, 1) prior, labels from its Bernoulli-logit likelihood; Laplace fit."""
    pvalues = {"accuracy": [], "balance[1]": [], "error[0]": [], "error[1]": []}
    for r in range(8):
        rng = np.random.default_rng(100 + r)
        factors = [rng.normal(size=3), rng.normal(size=3)]

        def simulate(n, rng=rng, factors=factors):
            X = [rng.normal(size=(n, 2)) for _ in range(2)]
            f = np.prod([np.column_stack([x, np.ones(n)]) @ a
                         for x, a in zip(X, factors, strict=True)], axis=0)
            return X, (rng.random(n) < expit(f)).astype(int)

        X_train, y_train = simulate(200)
        X_test, y_test = simulate(500)
        with warnings.catch_warnings():
            # MVM warns when PSIS rates its Laplace approximation as rough; the check below
            # is loose enough for that
            warnings.filterwarnings("ignore", message="The Laplace approximation",
                                    category=RuntimeWarning)
            est = MVM(rank=1, loss="logistic", prior_scale=1.0, inference="laplace",
                      draws=200, standardize=False, random_seed=r).fit(X_train, y_train)
        for c in range(5):  # five held-out chunks per fit
            rows = slice(100 * c, 100 * (c + 1))
            rep = posterior_predictive_check(est, [x[rows] for x in X_test], y_test[rows],
                                             n_replications=400, random_seed=r)
            for name, values in pvalues.items():
                values.append(rep.statistics.loc[name, "p_value_mid"])
    pooled = np.concatenate([np.asarray(v) for v in pvalues.values()])
    assert abs(pooled.mean() - 0.5) < 0.1
    assert stats.kstest(pooled, "uniform").statistic < 0.2
    for name, values in pvalues.items():
        assert 0.3 < np.mean(values) < 0.7, name


# ------------------------------------------------- protocol, relevance, pictures
@pytest.fixture(scope="module")
def lvm_fit():
    """M3LAK on two views from its own latent-variable model plus a pure-noise third view."""
    views, y, _ = make_lvm_classification(140, (6, 4), latent_dim=2, random_seed=0)
    views.append(np.random.default_rng(1).normal(size=(140, 5)))
    X_train, X_test = [v[:90] for v in views], [v[90:] for v in views]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = M3LAK(latent_dim=2, n_frequencies=10, draws=100, tune=100, chains=2, cores=1,
                    random_seed=0).fit(X_train, y[:90])
    return est, X_test, y[90:]


def test_m3lak_draws_average_to_its_predictions(lvm_fit):
    est, X, _ = lvm_fit
    q = est._class_probability_draws(X)
    assert q.shape == (200, 50, 2)
    np.testing.assert_allclose(q.sum(axis=2), 1.0)
    np.testing.assert_allclose(q.mean(axis=0), est.predict_proba(X), rtol=1e-12)
    f = est._decision_draws(X)
    assert f.shape == (200, 50, 1)
    # decision_function is the moderated value: the f whose normalised hinge probability
    # sigmoid(2C (f + clip(f, -1, 1))) is predict_proba's (not the mean of the draws of f)
    dec = est.decision_function(X)
    np.testing.assert_allclose(expit(2 * est.C * (dec + np.clip(dec, -1, 1))),
                               est.predict_proba(X)[:, 1], rtol=1e-9)


def test_m3lak_view_relevance_finds_the_noise_view(lvm_fit):
    est, _, _ = lvm_fit
    rel = est.view_relevance()
    assert list(rel.index) == ["view0", "view1", "view2"]
    assert rel.loc["view2", "shared_fraction"] < 0.05
    assert rel.loc[["view0", "view1"], "shared_fraction"].min() > 0.4
    assert rel.loc["view2", "ard_total"] < 0.1 * rel.loc[["view0", "view1"], "ard_total"].min()
    # ARD columns are ordered draw by draw by total relevance
    ard = rel[["ard_1", "ard_2"]].sum()
    assert ard["ard_1"] >= ard["ard_2"]
    fig = plot_view_relevance(est)
    assert len(fig.axes) == 5  # three bar panels, the heat map and its colour bar
    # one view's τ at 1e7 would flatten the others to nothing: that panel goes logarithmic
    narrow, wide = rel.copy(), rel.copy()
    narrow["tau"] = np.linspace(1.0, 50.0, len(rel))
    wide.loc["view2", "tau"] = 1.4e7
    assert plot_view_relevance(narrow).axes[1].get_xscale() == "linear"
    tau_axis = plot_view_relevance(wide).axes[1]
    assert tau_axis.get_xscale() == "log" and tau_axis.get_title() == "tau (log scale)"
    assert 0 < tau_axis.get_xlim()[0] < wide["tau"].min()  # every bar starts inside the axis
    plt.close("all")


def test_rhotmvrkm_draws_follow_its_gaussian_predictive():
    X, y = _two_views(80, seed=2)
    X_new, _ = _two_views(30, seed=3)
    kw = dict(rho=0.3, alpha=0.4, gamma="scale")
    m = RhoTMVRKM(**kw).fit(X, y)
    np.testing.assert_allclose(m._class_probability_draws(X_new)[0], m.predict_proba(X_new),
                               rtol=1e-12)
    lap = RhoTMVRKM(inference="laplace", draws=2000, random_seed=0, **kw).fit(X, y)
    q = lap._class_probability_draws(X_new)
    assert q.shape == (2000, 30, 2)
    # Monte Carlo average of sigmoid(2τ²h/λ) over the draws vs predict_proba's quadrature
    mc_sd = q[:, :, 1].std(axis=0) / np.sqrt(2000)
    assert np.all(np.abs(q[:, :, 1].mean(axis=0) - lap.predict_proba(X_new)[:, 1])
                  < 4 * mc_sd + 1e-12)
    rel = lap.view_relevance()
    np.testing.assert_allclose(rel["gamma"], lap.gamma_)
    np.testing.assert_allclose(rel["gamma_x_dim"], np.array(lap.gamma_) * [3, 2])
    assert (rel["rho"] == lap.rho_).all()


def test_default_protocol_is_one_plug_in_draw_and_no_relevance():
    q = np.tile([[0.2, 0.8]], (1, 10, 1))
    est = _FixedProbabilities(q).fit()
    np.testing.assert_array_equal(BaseMultiViewClassifier._class_probability_draws(est, None), q)
    with pytest.raises(NotImplementedError, match="no view-relevance summary"):
        est.view_relevance()


def test_trace_and_rank_plots_show_the_worst_judged_quantities(lvm_fit):
    est, X, y = lvm_fit
    rep = check_convergence(est)
    fig = plot_trace(est, max_quantities=3, report=rep)
    assert len(fig.axes) == 6
    worst = list(rep.table.sort_values("r_hat", ascending=False).index[:3])
    assert {ax.get_title() for ax in fig.axes} == set(worst)
    fig = plot_rank(est, max_quantities=2)
    assert len(fig.axes) == 2
    with pytest.raises(ValueError, match="MAP"):
        plot_trace(MVML(nystrom=10, random_seed=0).fit(*_two_views(40)))


def test_reliability_and_interval_pictures():
    X, y = _two_views(120, seed=4)
    y3 = np.digitize(X[0][:, 0] + X[1][:, 0], [-0.5, 0.5])
    est = RhoTMVRKM(rho=0.5, alpha=0.5, gamma="scale", inference="laplace",
                    random_seed=0).fit([x[:80] for x in X], y3[:80])
    rep = posterior_predictive_check(est, [x[80:] for x in X], y3[80:])
    assert len(plot_reliability(rep).axes) == 1
    fig = plot_decision_intervals(est, [x[80:] for x in X], y3[80:])
    assert len(fig.axes) == 3  # one panel per one-vs-rest task


# --------------------------------------------------------------------- reports
def _fit_small(name):
    X, y = _two_views(100, seed=5)
    X_train, X_test = [x[:60] for x in X], [x[60:] for x in X]
    est = {
        "RhoTMVRKM": lambda: RhoTMVRKM(rho=0.5, alpha=0.5, gamma="scale", inference="laplace",
                                       draws=100, random_seed=0),
        "MVML": lambda: MVML(nystrom=20, random_seed=0),
        "MVM": lambda: MVM(rank=2, inference="laplace", draws=100, random_seed=0),
        "MVLSVM": lambda: MVLSVM(n_landmarks=10, C=100.0, inference="gibbs", draws=200,
                                 tune=100, chains=2, cores=1, random_seed=0),
    }[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X_train, y[:60])
    return est, X_test, y[60:]


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _open_in_chromium(path, tmp_path) -> tuple[str, str]:
    browser = _chromium()
    run = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={tmp_path / 'chromium-profile'}",
         "--enable-logging=stderr", "--v=0", "--dump-dom", path.resolve().as_uri()],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout, run.stderr


@pytest.mark.parametrize("name", ["M3LAK", "RhoTMVRKM", "MVML", "MVM", "MVLSVM"])
def test_report_for_each_estimator_opens_in_a_browser(name, lvm_fit, tmp_path):
    est, X_test, y_test = lvm_fit if name == "M3LAK" else _fit_small(name)
    with warnings.catch_warnings():
        # a figure that could not be drawn is an error here
        warnings.filterwarnings("error", message="bayesmv report", category=RuntimeWarning)
        path = write_report(est, X_test, y_test, tmp_path / "sub" / f"{name}.html")
    text = path.read_text(encoding="utf-8")
    for section in ("Data", "Fit", "Convergence", "Test performance",
                    "Posterior predictive check and calibration", "Decision values",
                    "View relevance"):
        assert f"<h2>{section}</h2>" in text
    assert "could not be drawn" not in text and "<script" not in text
    assert not re.search(r"(src|href)=['\"](?!data:)", text)  # self-contained
    correct = int(np.sum(est.predict(X_test) == y_test))
    ci = binomtest(correct, len(y_test)).proportion_ci(method="wilson")
    assert f"[{ci.low:.4f}, {ci.high:.4f}]" in text
    kind = inference_kind(est)
    assert f"{kind} fit" in text
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", text)
    try:
        est.view_relevance()
        has_relevance = True
    except NotImplementedError:
        has_relevance = False
    # reliability, decision intervals (+ trace, + rank, + view relevance)
    expected = 2 + (kind != "map") + (kind == "mcmc") + has_relevance
    assert len(images) == expected
    for data in images:
        Image.open(io.BytesIO(base64.b64decode(data))).verify()
    if _chromium() is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium): the "
                    "report was written and checked, but not opened in a browser")
    dom, log = _open_in_chromium(path, tmp_path)
    assert f"bayesmv report: {name}" in dom and dom.count("<img") == len(images)
    console = [line for line in log.splitlines() if ":CONSOLE" in line]
    assert not console, console


def test_report_names_views_and_keeps_tables_inside_the_page(tmp_path):
    X, y = _two_views(100, seed=5)
    X_train = check_views([x[:60] for x in X], view_names=["shape", "colour"])
    est = RhoTMVRKM(rho=0.5, alpha=0.5, gamma="scale", random_seed=0).fit(X_train, y[:60])
    assert list(est.idata_.posterior["gamma"].coords["view"].values) == ["shape", "colour"]
    path = write_report(est, [x[60:] for x in X], y[60:], tmp_path / "r.html", fit_seconds=0.5)
    text = path.read_text(encoding="utf-8")
    assert "shape (3), colour (2)" in text
    assert "0.50 s whole fit" in text
    # every table sits in a box that scrolls sideways rather than widening the page
    tables = re.findall(r"<table", text)
    wrapped = re.findall(r"<div class='bayesmv-scroll'[^>]*>\s*<table", text)
    assert len(tables) == len(wrapped) >= 4


def test_wilson_interval_agrees_with_the_cli_formula():
    for k, n in ((0, 10), (7, 10), (97, 100), (100, 100)):
        assert wilson_interval(k, n) == pytest.approx(cli_wilson(k, n), abs=1e-12)
