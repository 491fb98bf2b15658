"""Scale-out: estimators ship to a Dask cluster and give the local answers there (model
selection under joblib's Dask back-end), MCMC chains run as Dask tasks reproduce the local
chains draw for draw, and the JAX NUTS back-ends sample a posterior known in closed form."""

import importlib.util
import os
import pickle
import platform
import sys
import warnings

import joblib
import numpy as np
import pymc as pm
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_validate
from threadpoolctl import threadpool_limits

from bayesmv import M3LAK, MVLSVM, MVM, MVML, RhoTMVRKM
from bayesmv.datasets import load_multiple_features, make_nonlinear_latent
from bayesmv.inference.sample import ChainsSampled, chain_plan, run_sampler

distributed = pytest.importorskip(
    "distributed", reason="dask.distributed is not installed (pip install 'bayesmv[dask]')")
from bayesmv.distributed import sample_chains  # noqa: E402

M3LAK_TINY = dict(latent_dim=2, n_frequencies=8, view_latent_dim=1, n_components=3, draws=25,
                  tune=25, chains=2)


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address=None)
    client = distributed.Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


@pytest.fixture(scope="module")
def digits():
    """Digits 3 vs 5 (160 rows), three views concatenated so that splitters can index X."""
    views, y = load_multiple_features(classes=(3, 5), views=("fou", "kar", "mor"))
    rows = np.random.default_rng(0).permutation(y.size)[:160]
    return np.hstack([v[rows] for v in views]), y[rows], tuple(v.shape[1] for v in views)


@pytest.fixture(scope="module")
def toy():
    return make_nonlinear_latent(n_samples=40, view_dims=(5, 4), latent_dim=2,
                                 view_latent_dim=1, noise=0.3, random_seed=0)


def _estimators(sizes):
    """One cheap configuration of every estimator (the MCMC ones with few draws)."""
    return [
        RhoTMVRKM(rho=0.5, alpha=0.1, gamma=0.05, view_sizes=sizes),
        MVML(alpha=0.1, nystrom=20, max_iter=20, random_seed=0, view_sizes=sizes),
        MVM(rank=2, ensemble=2, random_seed=0, view_sizes=sizes),
        MVLSVM(n_landmarks=20, C=10.0, random_seed=0, view_sizes=sizes),
        M3LAK(random_seed=0, view_sizes=sizes, **M3LAK_TINY),
    ]


@pytest.fixture(autouse=True)
def _few_draws_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # few draws: convergence warnings are expected
        yield


# ------------------------------------------------------------------ cheap to ship
def test_estimators_hold_only_parameters_and_pickle_fresh_and_fitted(digits):
    X, y, sizes = digits
    for est in _estimators(sizes):
        name = type(est).__name__
        # nothing but the constructor's parameters (no arrays, no compiled functions)
        assert set(vars(est)) == set(est.get_params(deep=False)), name
        blob = pickle.dumps(est)
        assert len(blob) < 2000, (name, len(blob))
        assert pickle.loads(blob).get_params() == est.get_params()
        if isinstance(est, M3LAK):
            est.set_params(draws=10, tune=10)
        fitted = est.fit(X[:80], y[:80])
        back = pickle.loads(pickle.dumps(fitted))
        np.testing.assert_array_equal(back.predict_proba(X[80:]),
                                      fitted.predict_proba(X[80:]), err_msg=name)
        # clone gives an unfitted copy with the same parameters
        assert not hasattr(clone(fitted), "idata_")


# ------------------------------------------------------------- model selection
# long: 36 fits locally and 36 on the cluster, 15 s of the default run (Dask is an extra)
@pytest.mark.long
def test_grid_search_on_dask_equals_local(client, digits):
    X, y, sizes = digits
    grid = {"rho": [0.0, 0.5, 1.0], "alpha": [0.01, 1.0]}
    cv = StratifiedKFold(3, shuffle=True, random_state=0)
    scoring = ["accuracy", "neg_log_loss"]

    def search():
        return GridSearchCV(RhoTMVRKM(gamma=0.05, view_sizes=sizes), grid, cv=cv,
                            scoring=scoring, refit="neg_log_loss", n_jobs=-1).fit(X, y)

    local = search()
    with distributed.get_task_stream(client) as stream, joblib.parallel_backend("dask"):
        remote = search()
    assert len(stream.data) > 0  # the fits really ran as tasks on the cluster
    assert remote.best_params_ == local.best_params_
    for key in ("mean_test_accuracy", "mean_test_neg_log_loss", "split0_test_neg_log_loss"):
        np.testing.assert_allclose(remote.cv_results_[key], local.cv_results_[key],
                                   rtol=1e-9, err_msg=key)
    np.testing.assert_allclose(remote.predict_proba(X), local.predict_proba(X), rtol=1e-9)


def _in_long_tier(cases, long: set) -> list:
    """The parametrize values with those in ``long`` marked for the long tier."""
    return [pytest.param(c, marks=pytest.mark.long) if c in long else c for c in cases]


#: MVM (two MAP fits a model) cross-validated locally and on Dask took 42 s of a cold-cache
#: run (the next slowest case 9 s), M3LAK 17 s (its chains run in their own processes
#: locally): they run with the long tier, which keeps the default run within its 10 minutes
_LONG_CV_CASES = {2, 4}


@pytest.mark.slow
@pytest.mark.parametrize("index", _in_long_tier(range(5), _LONG_CV_CASES),
                         ids=["RhoTMVRKM", "MVML", "MVM", "MVLSVM", "M3LAK"])
def test_every_estimator_cross_validates_on_dask(client, digits, index):
    """cross_validate under the Dask back-end: same scores, fitted estimators shipped back
    from the workers predict as the local ones (M3LAK's chains run sequentially there, as
    worker processes may not start processes, and still equal the local parallel chains)."""
    X, y, sizes = digits
    est = _estimators(sizes)[index]
    cv = StratifiedKFold(2, shuffle=True, random_state=1)
    local = cross_validate(est, X, y, cv=cv, scoring="neg_log_loss", return_estimator=True)
    with joblib.parallel_backend("dask"):
        remote = cross_validate(est, X, y, cv=cv, scoring="neg_log_loss", n_jobs=-1,
                                return_estimator=True)
    np.testing.assert_allclose(remote["test_score"], local["test_score"], rtol=1e-9)
    for a, b in zip(remote["estimator"], local["estimator"], strict=True):
        np.testing.assert_allclose(a.decision_function(X[:20]), b.decision_function(X[:20]),
                                   rtol=1e-9, atol=1e-12)


# -------------------------------------------------------------- chains as tasks
CHAIN_CASES = {
    # NUTS on this toy posterior takes deep trees: a few draws keep the test short
    "M3LAK-hybrid": lambda: M3LAK(inference="hybrid", random_seed=3, **M3LAK_TINY),
    "M3LAK-nuts": lambda: M3LAK(inference="nuts", random_seed=3,
                                **dict(M3LAK_TINY, draws=6, tune=6)),
    "MVM-nuts": lambda: MVM(inference="nuts", rank=2, draws=30, tune=30, chains=2,
                            random_seed=3),
}


#: NUTS on M3LAK's DP-mixture graph compiles its gradient in the test process and in each
#: Dask worker: 150-190 s with an empty compile cache (two fresh-cache runs), against under
#: 40 s for the other cases, so it runs with the long tier (the MVM case keeps NUTS here)
_LONG_CHAIN_CASES = {"M3LAK-nuts"}


@pytest.mark.slow
@pytest.mark.parametrize("case", _in_long_tier(CHAIN_CASES, _LONG_CHAIN_CASES))
def test_distributed_chains_equal_local_chains(client, toy, case):
    X, y = toy
    est = CHAIN_CASES[case]()
    local = clone(est).fit(X, y)       # default cores: two local processes, one per chain
    remote = sample_chains(est, X, y, client)
    a, b = remote.idata_.posterior, local.idata_.posterior
    assert list(a.chain.values) == [0, 1] and a.sizes["draw"] == est.draws
    assert set(a.data_vars) == set(b.data_vars)
    for name in b.data_vars:
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)
    # the chains differ from each other (distinct streams and starting points)
    assert not np.array_equal(a["f"].values[0], a["f"].values[1])
    # the merged fit is post-processed exactly as a local one
    assert remote.convergence_.var_names == local.convergence_.var_names
    head = [v[:5] for v in X]
    np.testing.assert_array_equal(remote.predict_proba(head), local.predict_proba(head))
    attrs = a.attrs
    assert attrs["distributed_seconds"] > 0 and len(attrs["chain_seconds"]) == 2


def test_mvlsvm_gibbs_chains_on_dask_and_a_drawn_seed(client, digits):
    X, y, sizes = digits
    est = MVLSVM(n_landmarks=15, C=10.0, inference="gibbs", draws=40, tune=20, chains=3,
                 view_sizes=sizes)
    remote = sample_chains(est, X, y, client)
    assert est.random_seed is None                # the input estimator is untouched
    seed = remote.random_seed                     # drawn once, shared by every chain
    local = clone(est).set_params(random_seed=seed).fit(X, y)
    assert remote.idata_.posterior.sizes["chain"] == 3
    for name in ("beta", "bias", "f"):
        np.testing.assert_array_equal(remote.idata_.posterior[name].values,
                                      local.idata_.posterior[name].values, err_msg=name)


def _task_blas_threads(n):
    from bayesmv.distributed import _blas_threads, _blas_threads_as
    before = _blas_threads()
    with _blas_threads_as(n):
        inside = _blas_threads()
    return before, inside, _blas_threads()


def test_chain_tasks_use_the_clients_blas_threads(client):
    """Multi-threaded BLAS sums in another order, and MCMC amplifies the last digits: a chain
    task runs with the client's BLAS thread count (Dask's nanny gives workers one thread)
    and gives the worker its own setting back afterwards."""
    from bayesmv.distributed import _blas_threads
    with threadpool_limits(limits=2, user_api="blas"):  # a count the nanny's 1 is not
        n = _blas_threads()
    assert n == 2
    for before, inside, after in client.gather([client.submit(_task_blas_threads, n, pure=False)
                                                for _ in range(2)]):
        assert before == after == 1 and inside == n


def _mmapped_arrays_of_array_churn(relax: bool) -> int:
    """How many of 200 mid-sized arrays glibc served with a fresh mmap, read from the
    allocator itself (``mallinfo2().hblks``): page-fault counters are zero in some
    sandboxes, the allocator's own count is not."""
    import ctypes

    from bayesmv.distributed import _relaxed_malloc

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                     "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    if not hasattr(libc, "mallinfo2"):
        pytest.skip("glibc older than 2.33 has no mallinfo2")
    libc.mallinfo2.restype = MallInfo2

    def churn() -> int:
        mmapped = 0
        for _ in range(200):
            before = libc.mallinfo2().hblks
            a = np.ones(64 * 1024)  # 512 KiB: above glibc's frozen 128 KiB mmap threshold
            mmapped += libc.mallinfo2().hblks > before
            del a
        return mmapped

    if not relax:
        return churn()
    with _relaxed_malloc():
        return churn()


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="the allocator setting is glibc's (Linux); elsewhere it does nothing")
@pytest.mark.long  # restarts the cluster's workers: 11 s of the default run
def test_chain_tasks_undo_the_workers_malloc_trimming(client):
    """Dask's nanny sets MALLOC_TRIM_THRESHOLD_, which freezes glibc's mmap threshold at
    128 KiB: every mid-sized array is a fresh mmap that page-faults on first touch (a chain
    ran 1.7× slower on a worker).  Inside a chain task the arrays come from the heap again,
    and the worker's own setting is back afterwards."""
    if not all(client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_")).values()):
        pytest.skip("this Dask no longer starts workers with MALLOC_TRIM_THRESHOLD_")
    # fresh workers: a heap that earlier tasks left with free chunks of 512 KiB or more serves
    # the churn's arrays from those chunks, without mmap, whatever the threshold
    client.restart()
    plain, relaxed, again = (client.submit(_mmapped_arrays_of_array_churn, r, pure=False).result()
                             for r in (False, True, False))
    # hblks counts the whole process's mmapped blocks: the worker's own threads may free one
    # while the churn runs, so allow a few either way
    assert plain >= 180
    assert relaxed <= 5
    assert again >= 180


def test_a_chain_alone_is_that_chain_of_the_full_run(toy):
    """The per-chain streams: the last chain run alone (as on a worker) equals that chain of
    a sequential three-chain run (no tuning state leaks from one chain into the next)."""
    X, y = toy
    params = dict(M3LAK_TINY, chains=3, cores=1, random_seed=9)
    full = M3LAK(**params).fit(X, y).idata_.posterior
    with pytest.raises(ChainsSampled) as alone, chain_plan(chain_ids=[2]):
        M3LAK(**params).fit(X, y)
    one = alone.value.idata.posterior
    assert list(one.chain.values) == [2]
    for name in full.data_vars:
        np.testing.assert_array_equal(one[name].values[0], full[name].values[2], err_msg=name)


def test_sample_chains_refuses_what_draws_no_chains(client, toy):
    X, y = toy
    with pytest.raises(TypeError, match="draws no MCMC chains"):
        sample_chains(RhoTMVRKM(), X, y, client)
    with pytest.raises(ValueError, match="inference='map'"):
        sample_chains(MVM(), X, y, client)
    with pytest.raises(ValueError, match="nuts_sampler='numpyro'"):
        sample_chains(M3LAK(inference="nuts", nuts_sampler="numpyro"), X, y, client)
    with pytest.raises(ValueError, match="chains must be a positive integer"):
        sample_chains(M3LAK(), X, y, client, chains=0)
    with pytest.raises(TypeError, match="Client"):
        sample_chains(M3LAK(), X, y, client=None)


# ------------------------------------------------------------------ JAX samplers
class _LinearGaussian:
    """Bayesian linear regression with a known noise: the posterior is Gaussian in closed
    form (stands in for a BuiltModel: ``run_sampler`` needs ``model`` and starting points)."""

    def __init__(self, n=60, p=3, seed=0):
        rng = np.random.default_rng(seed)
        self.Phi = rng.normal(size=(n, p))
        self.y = self.Phi @ np.array([1.0, -0.5, 0.25]) + 0.5 * rng.normal(size=n)
        self.prec_prior, self.sigma = 1.0, 0.5
        with pm.Model() as self.model:
            w = pm.Normal("w", 0.0, 1.0, shape=p)
            pm.Normal("obs", self.Phi @ w, self.sigma, observed=self.y)

    def initial_values(self, rng):
        return {"w": rng.normal(size=self.Phi.shape[1])}

    def posterior(self):
        prec = self.prec_prior * np.eye(self.Phi.shape[1]) + self.Phi.T @ self.Phi / self.sigma**2
        cov = np.linalg.inv(prec)
        return cov @ self.Phi.T @ self.y / self.sigma**2, np.sqrt(np.diag(cov))


def _need(*modules):
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not installed: "
                              "the JAX samplers are optional (pip install 'bayesmv[jax]')")


@pytest.mark.parametrize("nuts_sampler", [
    pytest.param("numpyro", marks=_need("jax", "numpyro")),
    pytest.param("blackjax", marks=_need("jax", "blackjax")),
])
def test_jax_nuts_samples_the_closed_form_posterior(nuts_sampler):
    built = _LinearGaussian()
    draws = 1000
    idata = run_sampler(built, sampler="nuts", draws=draws, tune=300, chains=2, cores=1,
                        random_seed=4, trace_vars=["w"], progressbar=False,
                        nuts_sampler=nuts_sampler)
    w = idata.posterior["w"].values.reshape(-1, 3)
    mean, sd = built.posterior()
    # Monte Carlo error of the mean is sd/sqrt(ESS); ESS ~ draws for this easy target
    np.testing.assert_allclose(w.mean(axis=0), mean, atol=5 * sd.max() / np.sqrt(draws))
    np.testing.assert_allclose(w.std(axis=0), sd, rtol=0.1)
    again = run_sampler(built, sampler="nuts", draws=draws, tune=300, chains=2, cores=1,
                        random_seed=4, trace_vars=["w"], progressbar=False,
                        nuts_sampler=nuts_sampler)
    np.testing.assert_array_equal(again.posterior["w"].values, idata.posterior["w"].values)


@_need("jax", "numpyro")
def test_m3lak_fits_with_numpyro(toy):
    X, y = toy
    est = M3LAK(inference="nuts", nuts_sampler="numpyro", random_seed=1,
                **dict(M3LAK_TINY, draws=20, tune=20)).fit(X, y)
    assert est.idata_.posterior["f"].shape == (2, 20, 40, 1)
    assert list(est.idata_.observed_data["y"].values) == list(y)
    assert est.score(X, y) > 0.7


@_need("jax", "blackjax")
def test_mvm_fits_with_a_jax_sampler(toy):
    X, y = toy
    est = MVM(rank=2, inference="nuts", nuts_sampler="blackjax", draws=30, tune=30, chains=2,
              random_seed=1).fit(X, y)
    assert est.idata_.posterior["f"].shape[:2] == (2, 30)
    assert est.score(X, y) > 0.7


def test_unknown_or_missing_nuts_sampler_is_reported():
    for est in (M3LAK(inference="nuts", nuts_sampler="stan"),
                MVM(inference="nuts", nuts_sampler="stan")):
        with pytest.raises(ValueError, match="nuts_sampler must be one of"):
            est.fit([np.zeros((4, 2))], [0, 1, 0, 1])
    if importlib.util.find_spec("numpyro") is None:
        with pytest.raises(ImportError, match=r"bayesmv\[jax\]"):
            M3LAK(inference="nuts", nuts_sampler="numpyro").fit([np.zeros((4, 2))], [0, 1, 0, 1])
