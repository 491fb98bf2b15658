"""The hybrid sampler's pilot warm-up, which restarts chains left in a lower-density region."""

from __future__ import annotations

import arviz as az
import numpy as np
import pymc as pm
import pytest
from scipy import stats

from bayesmv import M3LAK
from bayesmv.datasets import make_nonlinear_latent
from bayesmv.diagnostics import check_convergence
from bayesmv.inference import restart
from bayesmv.inference.sample import ChainsSampled, chain_plan

#: the warm-up's thresholds scaled down fivefold (see ``short_pilot``): these tests check
#: which chain restarts from where, not how well a warm-up of that length mixes
SHORT_MIN_TUNE, SHORT_MIN_PILOT, SHORT_COMPARISON = 80, 40, 20

#: the shortest warm-up that runs a pilot, under ``short_pilot``
TINY = dict(latent_dim=2, n_frequencies=8, view_latent_dim=1, n_components=3, draws=20,
            tune=SHORT_MIN_TUNE, cores=1, progressbar=False)


@pytest.fixture
def short_pilot(monkeypatch):
    """The package's warm-up thresholds (400 iterations to run a pilot, a pilot of at least
    200 whose last 100 are compared) divided by five, so that a pilot and its restarts run
    in a few hundred sweeps of the toy model (35 s a test at the package's own thresholds)."""
    monkeypatch.setattr(restart, "MIN_TUNE", SHORT_MIN_TUNE)
    monkeypatch.setattr(restart, "MIN_PILOT", SHORT_MIN_PILOT)
    monkeypatch.setattr(restart, "COMPARISON_ITERATIONS", SHORT_COMPARISON)


@pytest.fixture(scope="module")
def toy():
    return make_nonlinear_latent(n_samples=40, view_dims=(5, 4), latent_dim=2,
                                 view_latent_dim=1, noise=0.3, random_seed=0)[:2]


def test_only_chains_far_below_the_best_restart_and_from_the_best():
    rng = np.random.default_rng(0)
    noise = rng.standard_normal((4, 400))
    # chains 1 and 3 lie three within-chain deviations below chain 2; chain 0 a third
    lp = noise + np.array([[-0.3], [-3.0], [0.0], [-3.0]])
    np.testing.assert_array_equal(restart.restart_sources(lp), [0, 2, 2, 2])
    # the rule reads differences in units of the chains' own spread: shift and scale free
    np.testing.assert_array_equal(restart.restart_sources(1e4 + 250.0 * lp), [0, 2, 2, 2])
    np.testing.assert_array_equal(restart.restart_sources(noise), [0, 1, 2, 3])
    np.testing.assert_array_equal(restart.restart_sources(lp, sds=5.0), [0, 1, 2, 3])
    # a chain at an impossible point restarts; with no finite chain nothing does
    lp[0, 3] = -np.inf
    np.testing.assert_array_equal(restart.restart_sources(lp), [2, 2, 2, 2])
    np.testing.assert_array_equal(restart.restart_sources(np.full((2, 3), np.nan)), [0, 1])


def test_value_points_are_the_transformed_values_the_density_reads():
    """The map from a trace's constrained draw to the value variables, checked through the
    model's log density (without Jacobian) against scipy's densities of the draw."""
    with pm.Model() as model:
        s = pm.HalfNormal("s", 2.0)
        p = pm.Beta("p", 2.0, 3.0)
        w = pm.Dirichlet("w", np.ones(3))
        x = pm.Normal("x", 1.0, s, shape=2)
    point = dict(zip(("s", "p", "w", "x"), pm.draw([s, p, w, x], random_seed=1), strict=True))
    values = restart.value_point_function(model)(point)
    assert set(values) == {v.name for v in model.value_vars}
    logp = model.compile_logp(jacobian=False)(values)
    expected = (stats.halfnorm(scale=2.0).logpdf(point["s"])
                + stats.beta(2.0, 3.0).logpdf(point["p"])
                + stats.dirichlet(np.ones(3)).logpdf(point["w"])
                + stats.norm(1.0, point["s"]).logpdf(point["x"]).sum())
    # PyMC's Beta log density and scipy's differ by ~3e-8 at the same point
    assert logp == pytest.approx(expected, rel=1e-6)


def test_a_restarted_chain_continues_from_the_best_chains_last_state(toy, monkeypatch,
                                                                      short_pilot):
    X, y = toy
    spy = {}

    def forced(model, posterior, to_values, thin=restart.COMPARISON_THIN):
        lp = np.zeros((posterior.sizes["chain"], 4))
        lp[:, ::2] += 1.0
        lp[1] -= 10.0  # chain 1 far below the others
        spy["draws"] = {n: posterior[n].values.copy() for n in posterior.data_vars}
        return lp

    last_points = restart.last_points

    def spy_points(posterior, to_values, sources):
        spy["starts"] = last_points(posterior, to_values, sources)
        return spy["starts"]

    monkeypatch.setattr(restart, "chain_log_densities", forced)
    monkeypatch.setattr(restart, "last_points", spy_points)
    est = M3LAK(chains=3, random_seed=4, **TINY).fit(X, y)
    post = est.idata_.posterior
    np.testing.assert_array_equal(post.attrs["warmup_restart_from"], [0, 0, 2])
    assert post.attrs["warmup_restarts"] == 1
    # the pilot comes before the whole warm-up, which PyMC records as usual
    assert post.attrs["pilot_iterations"] == restart.pilot_length(TINY["tune"]) == SHORT_MIN_PILOT
    assert post.attrs["tuning_steps"] == TINY["tune"]
    first, second, third = spy["starts"]
    for name in first:
        np.testing.assert_array_equal(second[name], first[name], err_msg=name)
    # chain 2 keeps its own last state: the trace's H of chain 2, last comparison draw
    np.testing.assert_allclose(third["H"], spy["draws"]["H"][2, -1])
    # and the restarted chains then draw with their own streams
    assert not np.array_equal(post["f"].values[0], post["f"].values[1])


def test_a_chain_alone_is_that_chain_of_the_full_run_through_a_restart(toy, monkeypatch,
                                                                        short_pilot):
    """The pilot runs every chain in any process, so a chain run alone (as on a worker)
    takes the same restart decision and equals that chain of a full run."""
    X, y = toy
    monkeypatch.setattr(restart, "RESTART_SDS", -np.inf)  # every chain from the best
    params = dict(TINY, chains=3, random_seed=9)
    full = M3LAK(**params).fit(X, y).idata_.posterior
    assert len(set(full.attrs["warmup_restart_from"].tolist())) == 1
    with pytest.raises(ChainsSampled) as alone, chain_plan(chain_ids=[1]):
        M3LAK(**params).fit(X, y)
    one = alone.value.idata.posterior
    np.testing.assert_array_equal(one.attrs["warmup_restart_from"],
                                  full.attrs["warmup_restart_from"])
    for name in full.data_vars:
        np.testing.assert_array_equal(one[name].values[0], full[name].values[1], err_msg=name)


def test_a_short_warm_up_or_one_chain_runs_no_pilot(toy, short_pilot):
    X, y = toy
    for params in (dict(TINY, tune=restart.MIN_TUNE - 1, chains=2),
                   dict(TINY, chains=1)):
        post = M3LAK(random_seed=0, **params).fit(X, y).idata_.posterior
        np.testing.assert_array_equal(post.attrs["warmup_restart_from"],
                                      np.arange(params["chains"]))
        assert post.attrs["pilot_iterations"] == 0
        assert post.attrs["tuning_steps"] == params["tune"]


def test_the_convergence_report_says_which_chains_restarted():
    rng = np.random.default_rng(0)
    idata = az.from_dict(posterior={"f": rng.standard_normal((3, 200, 4))},
                         dims={"f": ["sample"]})
    assert "restarted" not in check_convergence(idata).note
    idata.posterior.attrs["warmup_restart_from"] = np.array([0, 0, 2])
    note = check_convergence(idata).note
    assert "chain(s) 1 from 0 restarted" in note and "2 from" not in note
