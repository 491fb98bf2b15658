"""Reliability of all five estimators (issue 8).

Bad input fails before any sampling or optimisation with a message naming the argument and
the view; a failed, interrupted or fault-injected ``fit`` leaves a previous fit exactly as it
was; fitted models round-trip through netCDF + JSON (no pickle) and refuse damaged files;
``random_seed`` reproduces fits in one process and across processes; missing views are
handled (M3LAK natively, MVL-SVM by imputation, MVM as x_v = 0) or refused with advice; and
the numerical corners (points on the margin in the λ step, huge C, singular matrices,
overflowing exponentials) give finite answers or say why not.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import arviz as az
import h5py
import numpy as np
import pytensor
import pytest
import xarray as xr
from scipy import linalg, stats
from sklearn.base import clone

import bayesmv
from bayesmv import M3LAK, MVLSVM, MVM, MVML, RhoTMVRKM
from bayesmv.components.likelihoods import (
    LogisticLikelihood,
    expected_sigmoid,
    hinge_probability,
    log_expected_sigmoid,
)
from bayesmv.data import MultiViewData, check_views, label_tasks
from bayesmv.inference.conjugate import NumericalWarning, cholesky_with_jitter
from bayesmv.inference.gibbs import BetaLambdaGibbs, beta_conditional, sample_lambda
from bayesmv.inference.sample import SamplingInterruptedWarning, run_sampler
from bayesmv.inference.spec import HybridSpec
from bayesmv.inference.svm import HingeGibbs

N = 30
NAMES = ("M3LAK", "RhoTMVRKM", "MVML", "MVM", "MVLSVM")


def make_estimator(name: str, seed: int = 0, **kw):
    """Tiny, fast settings of each estimator (M3LAK: one short chain)."""
    if name == "M3LAK":
        params = dict(latent_dim=2, n_frequencies=4, view_latent_dim=1, n_components=2, draws=15,
                      tune=15, chains=1, cores=1)
        return M3LAK(random_seed=seed, **{**params, **kw})
    if name == "RhoTMVRKM":
        return RhoTMVRKM(**{**dict(rho=0.5, alpha=0.1, gamma="scale", inference="laplace",
                                   draws=20, random_seed=seed), **kw})
    if name == "MVML":
        return MVML(**{**dict(nystrom=6, max_iter=5, random_seed=seed), **kw})
    if name == "MVM":
        return MVM(**{**dict(rank=2, inference="laplace", draws=20, random_seed=seed), **kw})
    return MVLSVM(**{**dict(n_landmarks=6, C=10.0, random_seed=seed), **kw})


def make_data(n: int = N, seed: int = 0):
    """Two views (3 and 2 features) and binary labels that depend on both."""
    rng = np.random.default_rng(seed)
    X = [rng.standard_normal((n, 3)), rng.standard_normal((n, 2))]
    y = (X[0][:, 0] + X[1][:, 0] > 0).astype(int)
    return X, y


def no_float_trouble():
    """Warnings filter: numpy's overflow / invalid-value / division warnings become errors
    (other RuntimeWarnings, e.g. a model's own diagnostics, stay warnings)."""
    warnings.filterwarnings("error", category=RuntimeWarning,
                            message=".*(overflow|invalid value|divide by zero)")


def quiet_fit(est, X, y):
    # tiny MCMC runs cannot meet the ESS thresholds: their ConvergenceWarning is expected
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y)


@pytest.fixture(scope="module")
def fitted():
    X, y = make_data()
    return {name: quiet_fit(make_estimator(name), X, y) for name in NAMES}


def snapshot(est) -> dict:
    return dict(vars(est))


def assert_unchanged(est, before: dict, X) -> None:
    """Every attribute is the very object it was (nothing replaced, added or removed)."""
    after = vars(est)
    assert after.keys() == before.keys()
    changed = [k for k in before if after[k] is not before[k]]
    assert not changed, f"attributes replaced by the failed fit: {changed}"
    np.testing.assert_array_equal(est.predict_proba(X), est.predict_proba(X))


# ------------------------------------------------------------------ 1. bad input
def _with(X, view, fn):
    out = [np.array(v, copy=True) for v in X]
    out[view] = fn(out[view])
    return out


def _set(value, row=2, col=0):
    def fn(v):
        v[row, col] = value
        return v
    return fn


# (case, builder(X, y) -> (X, y), exception, message fragment); every estimator, at fit
FIT_CASES = [
    ("row count", lambda X, y: ([X[0], X[1][:-1]], y), ValueError,
     r"X: view 1 \('view1'\) has 29 rows, but view 0 \('view0'\) has 30"),
    ("object array", lambda X, y: ([X[0], np.array([["a", "b"]] * N, dtype=object)], y),
     ValueError, r"X: view 1 \('view1'\) has non-numeric values \(dtype object\)"),
    ("string array", lambda X, y: ([X[0], np.full((N, 2), "x")], y), ValueError,
     r"X: view 1 \('view1'\) has non-numeric dtype"),
    ("inf", lambda X, y: (_with(X, 0, _set(np.inf)), y), ValueError,
     r"X: view 0 \('view0'\) contains infinite values"),
    ("-inf", lambda X, y: (_with(X, 1, _set(-np.inf)), y), ValueError,
     r"X: view 1 \('view1'\) contains infinite values"),
    ("partial NaN row", lambda X, y: (_with(X, 1, _set(np.nan)), y), ValueError,
     r"X: view 1 \('view1'\) has partially missing rows \(row indices \[2\]\)"),
    ("every view missing", lambda X, y: ([_set(np.nan, 4, slice(None))(X[0].copy()),
                                          _set(np.nan, 4, slice(None))(X[1].copy())], y),
     ValueError, r"X: samples \[4\] have every view missing"),
    ("empty view", lambda X, y: ([X[0], np.empty((N, 0))], y), ValueError,
     r"X: view 1 \('view1'\) has zero features"),
    ("zero rows", lambda X, y: ([X[0][:0], X[1][:0]], y[:0]), ValueError,
     r"X: view 0 \('view0'\) has zero samples"),
    ("zero views", lambda X, y: ([], y), ValueError, "X has zero views"),
    ("1-D view", lambda X, y: ([X[0], X[1][:, 0]], y), ValueError,
     r"X: view 1 \('view1'\) must be 2-D, got shape \(30,\)"),
    ("not an array", lambda X, y: ("views", y), TypeError, "X must be a list of 2-D views"),
    ("one class", lambda X, y: (X, np.zeros(N, int)), ValueError,
     r"y has only one class \(0\); a classifier needs at least 2"),
    ("label length", lambda X, y: (X, y[:-1]), ValueError, "y has 29 labels but X has 30 samples"),
    ("missing label", lambda X, y: (X, np.where(np.arange(N) == 3, np.nan, y)), ValueError,
     r"y contains missing labels \(NaN/None\) at indices \[3\]"),
    ("continuous labels", lambda X, y: (X, np.linspace(0, 1, N)), ValueError,
     "labels look continuous"),
    ("2-D labels", lambda X, y: (X, np.column_stack([y, y])), ValueError, "y must be 1-D"),
]

# (case, X builder, message fragment); every estimator, at predict / predict_proba /
# decision_function
PREDICT_CASES = [
    ("too few views", lambda X: [X[0]], "X has 1 views but the model was fitted on 2"),
    ("too many views", lambda X: [X[0], X[1], X[1]], "X has 3 views but the model was fitted on 2"),
    ("wrong width", lambda X: [X[0][:, :2], X[1]],
     r"X: view 0 \('view0'\) has 2 features but the model was fitted with 3"),
    ("wrong concatenated width", lambda X: np.hstack(X)[:, :4],
     r"X has 4 features, but \w+ is expecting 5 features as input \(views of sizes \(3, 2\)\)"),
    ("object array", lambda X: [X[0], np.array([["a", "b"]] * N, dtype=object)],
     r"X: view 1 \('view1'\) has non-numeric values"),
    ("inf", lambda X: _with(X, 1, _set(np.inf)), r"X: view 1 \('view1'\) contains infinite"),
    ("partial NaN row", lambda X: _with(X, 0, _set(np.nan, 5, 1)),
     r"X: view 0 \('view0'\) has partially missing rows \(row indices \[5\]\)"),
    ("zero rows", lambda X: [X[0][:0], X[1][:0]], r"X: view 0 \('view0'\) has zero samples"),
    ("row count", lambda X: [X[0], X[1][:-2]], r"view 1 \('view1'\) has 28 rows"),
]

# invalid hyper-parameters: (estimator, params, message fragment)
PARAM_CASES = [
    ("M3LAK", {"C": -1.0}, "C must be a positive finite number"),
    ("M3LAK", {"C": np.inf}, "C must be a positive finite number"),
    ("M3LAK", {"latent_dim": 0}, "latent_dim must be a positive integer"),
    ("M3LAK", {"n_frequencies": 0}, "n_frequencies must be a positive integer"),
    ("M3LAK", {"draws": 0}, "draws must be a positive integer"),
    ("M3LAK", {"cores": 0}, "cores must be None or a positive integer"),
    ("M3LAK", {"precision_prior": (1.0,)}, "precision_prior must be None or a pair"),
    ("M3LAK", {"v_prior": (1.0,)}, "v_prior must be None or a pair"),
    ("M3LAK", {"random_seed": -1}, "random_seed must be None or a non-negative integer"),
    ("M3LAK", {"sampler": "gibbs"}, "sampler must be"),
    ("RhoTMVRKM", {"rho": -0.1}, r"rho must lie in \[0, 1\]"),
    ("RhoTMVRKM", {"rho": 1.5}, r"rho must lie in \[0, 1\]"),
    ("RhoTMVRKM", {"alpha": -1.0}, "alpha must be a positive finite number"),
    ("RhoTMVRKM", {"eta": 0.0}, "eta must be a positive finite number"),
    ("RhoTMVRKM", {"gamma": -1.0}, "gamma of view 0 must be a positive number"),
    ("RhoTMVRKM", {"n_frequencies": 0}, "n_frequencies must be a positive integer"),
    ("RhoTMVRKM", {"random_seed": "a"}, "random_seed must be None or a non-negative integer"),
    ("MVML", {"alpha": -1.0}, "alpha must be a positive finite number"),
    ("MVML", {"metric_penalty": -1.0}, "metric_penalty must be a positive finite number"),
    ("MVML", {"nystrom": 0}, "nystrom must be a positive integer or a fraction"),
    ("MVML", {"nystrom": 1.5}, r"nystrom must be a fraction in \(0, 1\]"),
    ("MVML", {"nystrom": N + 1}, "nystrom=31 asks for more Nyström landmarks than the 30 training"),
    ("MVML", {"random_seed": -1}, "random_seed must be None or a non-negative integer"),
    ("MVM", {"rank": 0}, "rank must be a positive integer"),
    ("MVM", {"loss": "hinge", "C": -1.0, "inference": "map"}, "C must be a positive finite"),
    ("MVM", {"prior_scale": 0.0}, "prior_scale must be a positive finite number"),
    ("MVM", {"random_seed": -1}, "random_seed must be None or a non-negative integer"),
    ("MVM", {"loss": "hinge"}, "inference='laplace' needs a twice-differentiable likelihood"),
    ("MVLSVM", {"C": -1.0}, "C must be a positive finite number"),
    ("MVLSVM", {"n_landmarks": 0}, "n_landmarks must be a positive integer"),
    ("MVLSVM", {"n_landmarks": N + 1}, "n_landmarks=31 is more than the 30 training rows"),
    ("MVLSVM", {"gamma": -1.0}, "gamma must be positive"),
    ("MVLSVM", {"random_seed": 1.5}, "random_seed must be None or a non-negative integer"),
    ("MVLSVM", {"impute": "mean"}, "impute must be one of"),
]


@pytest.fixture
def no_heavy_work(monkeypatch):
    """Any sampler, optimiser or solver call fails the test: validation must come first."""
    def forbidden(*args, **kwargs):
        raise AssertionError("sampling / optimisation started before the input was validated")

    import bayesmv.models.m3lak as m3lak
    import bayesmv.models.mvlsvm as mvlsvm
    import bayesmv.models.mvml as mvml

    monkeypatch.setattr(m3lak.engines, "fit_sampler", forbidden)
    monkeypatch.setattr(RhoTMVRKM, "_choose_hyperparameters", forbidden)
    monkeypatch.setattr(RhoTMVRKM, "_fit_exact", forbidden)
    monkeypatch.setattr(mvml, "fit_block_metrics", forbidden)
    monkeypatch.setattr(MVM, "_run_inference", forbidden)
    monkeypatch.setattr(mvlsvm, "fit_svm_map", forbidden)
    monkeypatch.setattr(mvlsvm, "run_hinge_gibbs", forbidden)


@pytest.mark.parametrize("case", FIT_CASES, ids=[c[0] for c in FIT_CASES])
@pytest.mark.parametrize("name", NAMES)
def test_bad_training_input_fails_early_and_keeps_the_fit(fitted, no_heavy_work, name, case):
    _, build, exc, match = case
    est = fitted[name]
    X, y = make_data()
    before = snapshot(est)
    Xb, yb = build(X, y)
    with pytest.raises(exc, match=match):
        est.fit(Xb, yb)
    assert_unchanged(est, before, X)


@pytest.mark.parametrize("case", PREDICT_CASES, ids=[c[0] for c in PREDICT_CASES])
@pytest.mark.parametrize("name", NAMES)
def test_bad_prediction_input_is_refused(fitted, name, case):
    _, build, match = case
    est = fitted[name]
    X, _ = make_data()
    for method in ("predict", "predict_proba", "decision_function"):
        with pytest.raises(ValueError, match=match):
            getattr(est, method)(build(X))


@pytest.mark.parametrize("case", PARAM_CASES, ids=[f"{c[0]}-{c[1]}" for c in PARAM_CASES])
def test_invalid_hyper_parameters_fail_early_and_keep_the_fit(fitted, no_heavy_work, case):
    name, params, match = case
    est = fitted[name]
    X, y = make_data()
    before = snapshot(est)
    wrong = est.get_params()
    est.set_params(**params)
    try:
        with pytest.raises(ValueError, match=match):
            est.fit(X, y)
    finally:
        est.set_params(**wrong)
    assert_unchanged(est, before, X)


def test_view_sizes_that_do_not_add_up_are_refused(fitted, no_heavy_work):
    X, y = make_data()
    for name in NAMES:
        est = clone(fitted[name]).set_params(view_sizes=(3, 3))
        with pytest.raises(ValueError, match="X: view_sizes sum to 6 but X has 5 columns"):
            est.fit(np.hstack(X), y)


# -------------------------------------------------- fault injection and failed fits
def _raise(*args, **kwargs):
    raise RuntimeError("injected fault")


def _raise_on_call(k):
    """A replacement for a method that works k - 1 times, then raises."""
    def install(monkeypatch, owner, attr):
        original = getattr(owner, attr)
        calls = {"n": 0}

        def wrapper(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] >= k:
                raise RuntimeError("injected fault")
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, attr, wrapper)
    return install


# (estimator, owner, attribute, when): a fault inside the sampler / optimiser / solver, and
# one after the inference, while the result is assembled (the last chance to half-update)
FAULTS = [
    ("M3LAK", "bayesmv.inference.hmc.LatentHMC", "step", 8),
    ("M3LAK", "bayesmv.models.m3lak", "check_convergence", 1),
    ("RhoTMVRKM", "bayesmv.models.rhotmvrkm.KernelPosterior", "draws", 1),
    ("RhoTMVRKM", "bayesmv.models.rhotmvrkm.RhoTMVRKM", "_make_idata", 1),
    ("MVML", "bayesmv.models.mvml", "fit_block_metrics", 1),
    ("MVML", "bayesmv.models.mvml.MVML", "_make_idata", 1),
    ("MVM", "bayesmv.inference.optimize.FlatLogp", "__call__", 5),
    ("MVM", "bayesmv.models.mvm.MVM", "_factors_from_idata", 1),
    ("MVLSVM", "bayesmv.models.mvlsvm", "fit_svm_map", 1),
    ("MVLSVM", "bayesmv.models.mvlsvm.MVLSVM", "_landmark_dataset", 1),
]


def _resolve(dotted: str):
    import importlib

    try:
        return importlib.import_module(dotted)
    except ImportError:
        module, _, attr = dotted.rpartition(".")
        return getattr(importlib.import_module(module), attr)


@pytest.mark.parametrize("fault", FAULTS, ids=[f"{f[0]}-{f[2]}" for f in FAULTS])
def test_fault_mid_fit_leaves_the_previous_fit_intact(fitted, monkeypatch, fault):
    name, owner, attr, k = fault
    owner = _resolve(owner)
    assert hasattr(owner, attr), f"{owner} has no {attr}: the fault is injected nowhere"
    est = fitted[name]
    X, y = make_data()
    X2, y2 = make_data(n=24, seed=5)
    proba = est.predict_proba(X)
    before = snapshot(est)
    _raise_on_call(k)(monkeypatch, owner, attr)
    with pytest.raises(RuntimeError, match="injected fault"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X2, y2)
    monkeypatch.undo()
    assert_unchanged(est, before, X)
    np.testing.assert_array_equal(est.predict_proba(X), proba)


def test_a_failed_fit_of_a_fresh_estimator_leaves_it_unfitted(monkeypatch):
    import bayesmv.models.mvlsvm as mvlsvm

    X, y = make_data()
    est = make_estimator("MVLSVM")
    monkeypatch.setattr(mvlsvm, "fit_svm_map", _raise)
    with pytest.raises(RuntimeError):
        est.fit(X, y)
    assert not [k for k in vars(est) if k.endswith("_")]


# -------------------------------------------------------------- 7. interrupted fits
@pytest.fixture
def real_sigint():
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is not Python's default KeyboardInterrupt handler here")


def _ctrl_c_at(monkeypatch, owner, attr, k):
    """Deliver a real SIGINT to this process at the k-th call of ``owner.attr`` (the user's
    Ctrl-C; Python raises KeyboardInterrupt wherever the main thread happens to be)."""
    original = getattr(owner, attr)
    calls = {"n": 0}

    def wrapper(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == k:
            signal.raise_signal(signal.SIGINT)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, attr, wrapper)
    return calls


def _nuts_class():
    from pymc.step_methods.hmc.nuts import NUTS
    return NUTS


# (estimator, extra params, step class, its method): the three MCMC paths; chains run one
# after the other in this process so that the signal reaches the sampling loop
MCMC = [
    ("M3LAK", dict(draws=20, tune=10, chains=2, cores=1), BetaLambdaGibbs, "step"),
    ("MVM", dict(inference="nuts", draws=20, tune=10, chains=2, cores=1), None, "step"),
    ("MVLSVM", dict(inference="gibbs", draws=20, tune=10, chains=2, cores=1), HingeGibbs, "step"),
]


@pytest.mark.parametrize("case", MCMC, ids=[c[0] for c in MCMC])
def test_ctrl_c_after_some_draws_keeps_them_and_flags_the_fit(monkeypatch, tmp_path,
                                                             real_sigint, case):
    name, params, step_cls, attr = case
    step_cls = step_cls or _nuts_class()
    X, y = make_data()
    est = make_estimator(name, **params)
    # chain 0: 10 tuning + 20 draws; Ctrl-C at its 25th iteration (15th draw)
    calls = _ctrl_c_at(monkeypatch, step_cls, attr, 25)
    with pytest.warns(SamplingInterruptedWarning, match=r"1 chain\(s\) x 14 draws of the 2 x 20"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            warnings.simplefilter("always", SamplingInterruptedWarning)
            est.fit(X, y)
    # one Ctrl-C ends the run: the second chain stops at its first iteration
    assert calls["n"] <= 26
    assert est.interrupted_
    post = est.idata_.posterior
    assert (post.sizes["chain"], post.sizes["draw"]) == (1, 14)
    assert post.attrs["interrupted"] == 1 and post.attrs["draws_requested"] == 20
    proba = est.predict_proba(X)
    assert np.all(np.isfinite(proba)) and np.allclose(proba.sum(axis=1), 1.0)
    loaded = bayesmv.load(est.save(tmp_path / "interrupted.nc"))
    assert loaded.interrupted_
    np.testing.assert_array_equal(loaded.predict_proba(X), proba)


@pytest.mark.parametrize("case", MCMC, ids=[c[0] for c in MCMC])
def test_ctrl_c_before_any_draw_raises_and_keeps_the_fit(fitted, monkeypatch, real_sigint,
                                                         case):
    name, params, step_cls, attr = case
    step_cls = step_cls or _nuts_class()
    est = fitted[name]
    X, y = make_data()
    before = snapshot(est)
    wrong = est.get_params()
    est.set_params(**params)
    _ctrl_c_at(monkeypatch, step_cls, attr, 4)  # still tuning
    try:
        with pytest.raises(KeyboardInterrupt), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X, y)
    finally:
        est.set_params(**wrong)
    monkeypatch.undo()
    assert_unchanged(est, before, X)
    assert not est.interrupted_


def test_complete_fits_are_not_flagged(fitted):
    assert not any(fitted[name].interrupted_ for name in NAMES)


# ------------------------------------------------------------------ 3. persistence
@pytest.mark.parametrize("name", NAMES)
def test_save_load_predicts_identically_and_carries_the_version(fitted, tmp_path, name):
    est = fitted[name]
    X, _ = make_data()
    Xt, _ = make_data(n=12, seed=9)
    path = est.save(tmp_path / f"{name}.nc")
    loaded = bayesmv.load(path)
    assert type(loaded) is type(est)
    assert loaded.get_params() == est.get_params()
    for method in ("predict", "predict_proba", "decision_function"):
        for data in (X, Xt):
            np.testing.assert_array_equal(getattr(loaded, method)(data),
                                          getattr(est, method)(data))
    raw = az.from_netcdf(str(path))
    assert raw.posterior.attrs["bayesmv_version"] == bayesmv.__version__
    assert json.loads(raw.posterior.attrs["bayesmv_model"])["bayesmv_version"] == \
        bayesmv.__version__
    assert loaded.saved_with_version_ == bayesmv.__version__
    assert [p.name for p in tmp_path.iterdir()] == [f"{name}.nc"]  # no temporary left


@pytest.mark.parametrize("name", NAMES)
def test_damaged_or_altered_files_are_refused(fitted, tmp_path, name):
    est = fitted[name]
    path = est.save(tmp_path / "model.nc")
    data = path.read_bytes()

    truncated = tmp_path / "truncated.nc"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="could not be read as a netCDF model file"):
        bayesmv.load(truncated)

    def altered(edit) -> Path:
        copy = tmp_path / "altered.nc"
        copy.write_bytes(data)
        with h5py.File(copy, "r+") as f:
            edit(f)
        return copy

    def nudge_f(f):
        values = f["posterior"]["f"][...]
        values.flat[0] += 1e-9
        f["posterior"]["f"][...] = values

    def edit_description(f):
        text = f["posterior"].attrs["bayesmv_model"]
        assert '"random_seed": 0' in text
        f["posterior"].attrs["bayesmv_model"] = text.replace('"random_seed": 0',
                                                             '"random_seed": 1')

    def edit_attribute(f):
        f["posterior"].attrs["created_at"] = "yesterday"

    def drop_observed(f):
        del f["observed_data"]

    for edit in (nudge_f, edit_description, edit_attribute, drop_observed):
        with pytest.raises(ValueError, match="failed its integrity check"):
            bayesmv.load(altered(edit))
    # the untouched file still loads
    np.testing.assert_array_equal(bayesmv.load(path).predict_proba(make_data()[0]),
                                  est.predict_proba(make_data()[0]))


def test_load_never_unpickles(fitted, tmp_path, monkeypatch):
    paths = {name: fitted[name].save(tmp_path / f"{name}.nc") for name in NAMES}
    compiledir = Path(pytensor.config.compiledir).resolve()
    unpickle_file = pickle.load

    def refuse(*args, **kwargs):
        raise AssertionError("load used pickle")

    def refuse_but_pytensors_cache(file, *args, **kwargs):
        # PyTensor reads the keys of its compiled C modules (its own files on this machine)
        # whenever it compiles one that is new to the process; refusing those leaves its
        # cache broken for every later test in this worker
        name = getattr(file, "name", None)
        if isinstance(name, str | os.PathLike) and compiledir in Path(name).resolve().parents:
            return unpickle_file(file, *args, **kwargs)
        raise AssertionError(f"load used pickle on {name if name is not None else file!r}")

    monkeypatch.setattr(pickle, "load", refuse_but_pytensors_cache)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    X, _ = make_data()
    for name, path in paths.items():
        np.testing.assert_array_equal(bayesmv.load(path).predict(X), fitted[name].predict(X))


def test_an_interrupted_save_keeps_the_previous_file(fitted, tmp_path, monkeypatch):
    est = fitted["MVML"]
    path = est.save(tmp_path / "model.nc")
    original = path.read_bytes()

    def half_write(self, filename, *args, **kwargs):
        Path(filename).write_bytes(b"\x89HDF\r\n")  # a torn write...
        raise KeyboardInterrupt                       # ...cut short by Ctrl-C

    monkeypatch.setattr(xr.Dataset, "to_netcdf", half_write)
    with pytest.raises(KeyboardInterrupt):
        est.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == original
    assert [p.name for p in tmp_path.iterdir()] == ["model.nc"]
    bayesmv.load(path)


def test_numpy_scalar_parameters_save(tmp_path):
    # GridSearchCV grids built with np.arange hand numpy integers to the estimator
    X, y = make_data()
    est = MVLSVM(n_landmarks=np.int64(5), C=np.float64(10.0), random_seed=np.int64(3)).fit(X, y)
    loaded = bayesmv.load(est.save(tmp_path / "m.nc"))
    assert loaded.n_landmarks == 5 and loaded.random_seed == 3
    np.testing.assert_array_equal(loaded.predict_proba(X), est.predict_proba(X))


# ------------------------------------------------ 3b. lean, compressed, thinned files
@pytest.fixture(scope="module")
def mcmc_fitted():
    """Two-chain MCMC fits (pm.sample copies the graph's training data into constant_data)."""
    X, y = make_data()
    settings = {"M3LAK": dict(chains=2, draws=21, tune=10),
                "MVLSVM": dict(inference="gibbs", chains=2, draws=21, tune=10, cores=1),
                "MVM": dict(inference="nuts", chains=2, draws=21, tune=20, cores=1)}
    return {name: quiet_fit(make_estimator(name, **kw), X, y) for name, kw in settings.items()}


def _standardised_views(X) -> list[np.ndarray]:
    """The training views as the estimators see them: each column centred and divided by its
    population standard deviation (scikit-learn's StandardScaler)."""
    return [(v - v.mean(axis=0)) / v.std(axis=0) for v in X]


def _stored_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every dataset in the HDF5 file, by its full path."""
    out: dict[str, np.ndarray] = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            out[name] = obj[...]

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return out


def _holds_training_views(path: Path, X) -> list[str]:
    """Names of the stored arrays that are a standardised training view."""
    views = _standardised_views(X)
    return [name for name, a in _stored_arrays(path).items() for v in views
            if a.shape == v.shape and a.dtype.kind == "f" and np.allclose(a, v, rtol=1e-12)]


@pytest.mark.parametrize("name", NAMES + ("MVLSVM-gibbs", "MVM-nuts", "M3LAK-2chains"))
@pytest.mark.parametrize("include", [False, True])
def test_lean_and_full_saves_predict_identically_and_keep_views_only_where_needed(
        fitted, mcmc_fitted, tmp_path, name, include):
    est = mcmc_fitted[name.split("-")[0]] if "-" in name else fitted[name]
    X, _ = make_data()
    Xt, _ = make_data(n=12, seed=9)
    path = est.save(tmp_path / "model.nc", include_training_data=include)
    loaded = bayesmv.load(path)
    for method in ("predict", "predict_proba", "decision_function"):
        for data in (X, Xt):
            np.testing.assert_array_equal(getattr(loaded, method)(data),
                                          getattr(est, method)(data))
    stored = _holds_training_views(path, X)
    if name == "RhoTMVRKM":
        # the exact-kernel model predicts from k(x, X_train): its rows are kept either way
        assert sorted(stored) == ["fit/X_train_0", "fit/X_train_1"]
    elif include and name.startswith("M3LAK"):
        assert sorted(stored) == ["constant_data/X_0", "constant_data/X_1"]
    else:
        assert stored == []
    if include:  # everything the fit holds is in the file
        raw = az.from_netcdf(str(path))
        for group in est.idata_.groups():
            assert set(raw[group].data_vars) == set(est.idata_[group].data_vars), group


def test_lean_save_compresses_and_is_smaller_than_an_uncompressed_full_save(tmp_path):
    X, y = make_data(n=60)
    est = quiet_fit(make_estimator("M3LAK", chains=2, draws=300, tune=10), X, y)
    lean = est.save(tmp_path / "lean.nc")
    # baselines written by ArviZ without compression: the fit's whole InferenceData (the old
    # file's content, training views included) and the lean file's own content
    full = tmp_path / "full_uncompressed.nc"
    est.idata_.to_netcdf(str(full), compress=False)
    same = az.from_netcdf(str(lean))
    same.load()
    for group in same.groups():
        for var in same[group].variables.values():
            var.encoding = {}  # the lean file's compression settings must not carry over
    same_uncompressed = tmp_path / "lean_uncompressed.nc"
    same.to_netcdf(str(same_uncompressed), compress=False)
    size = lean.stat().st_size
    assert size < same_uncompressed.stat().st_size < full.stat().st_size
    with h5py.File(lean, "r") as f:
        draws = f["posterior"]["f"]  # 2 chains × 300 draws × 60 rows of float64
        assert draws.compression == "gzip" and draws.shuffle
        assert draws.id.get_storage_size() < 0.95 * draws.size * draws.dtype.itemsize
    # thinning is what makes a long MCMC run small: 10 of 300 draws per chain
    thin = est.save(tmp_path / "thin.nc", max_draws=10)
    assert thin.stat().st_size < size / 3


def test_max_draws_keeps_evenly_spaced_draws_of_every_chain(mcmc_fitted, tmp_path):
    est = mcmc_fitted["MVLSVM"]  # 2 chains × 21 draws
    Xt, _ = make_data(n=12, seed=9)
    path = est.save(tmp_path / "thin.nc", max_draws=5)
    raw = az.from_netcdf(str(path))
    # 5 of draws 0..20, evenly spaced from the first to the last: a step of 20/4 = 5
    kept = [0, 5, 10, 15, 20]
    for group in ("posterior", "sample_stats"):
        assert dict(raw[group].sizes)["chain"] == 2 and raw[group].sizes["draw"] == 5
        np.testing.assert_array_equal(raw[group]["draw"].values, kept)
        for var in raw[group].data_vars:
            if var in est.idata_[group]:
                np.testing.assert_array_equal(raw[group][var].values,
                                              est.idata_[group][var].values[:, kept])
    assert raw.posterior.attrs["saved_draws_of"] == 21
    # the thinned model predicts from its kept draws: the normalised hinge likelihood
    # exp(-2c max(0, 1 - y f)) averaged over those draws, written out here, with the
    # calibrated constant c of the fit (from all its draws), which the file keeps
    loaded = bayesmv.load(path)
    assert loaded.link_constant_ == est.link_constant_
    Phi = est.transform(Xt)
    beta = est.idata_.posterior["beta"].values[:, kept, 0].reshape(-1, Phi.shape[1])
    bias = est.idata_.posterior["bias"].values[:, kept, 0].reshape(-1)
    f = Phi @ beta.T + bias                       # (rows, kept draws)
    c = 2.0 * est.link_constant_
    # ℓ(+1)/(ℓ(+1) + ℓ(-1)) as the sigmoid of the log-odds: both ℓ underflow for a large c
    log_odds = -c * (np.maximum(0.0, 1.0 - f) - np.maximum(0.0, 1.0 + f))
    p = (1.0 / (1.0 + np.exp(-log_odds))).mean(axis=1)
    np.testing.assert_allclose(loaded.predict_proba(Xt)[:, 1], p, rtol=1e-12)
    # one draw: the last (the chain's most converged); as many as there are: no thinning
    one = az.from_netcdf(str(est.save(tmp_path / "one.nc", max_draws=1)))
    np.testing.assert_array_equal(one.posterior["draw"].values, [20])
    everything = bayesmv.load(est.save(tmp_path / "all.nc", max_draws=21))
    np.testing.assert_array_equal(everything.predict_proba(Xt), est.predict_proba(Xt))
    assert "saved_draws_of" not in everything.idata_.posterior.attrs
    for bad in (0, -3, 2.5, True, "10"):
        with pytest.raises(ValueError, match="max_draws must be a positive integer"):
            est.save(tmp_path / "bad.nc", max_draws=bad)


def test_a_thinned_m3lak_predicts_from_the_kept_draws(mcmc_fitted, tmp_path):
    import copy

    est = mcmc_fitted["M3LAK"]
    Xt, _ = make_data(n=12, seed=9)
    loaded = bayesmv.load(est.save(tmp_path / "thin.nc", max_draws=4))
    assert loaded.idata_.posterior.sizes["draw"] == 4
    kept = loaded.idata_.posterior["draw"].values
    np.testing.assert_array_equal(kept, [0, 6, 13, 20])  # floor(i · 20/3)
    reduced = copy.copy(est)
    reduced.idata_ = est.idata_.isel(draw=kept)
    np.testing.assert_array_equal(loaded.predict_proba(Xt), reduced.predict_proba(Xt))
    np.testing.assert_array_equal(loaded.decision_function(Xt), reduced.decision_function(Xt))


def test_saving_the_draws_prediction_uses_predicts_identically(mcmc_fitted, tmp_path):
    """Prediction averages over ``max_predict_draws // chains`` evenly spaced draws of every
    chain, the draws ``save(max_draws=...)`` keeps: such a file predicts exactly as the fit
    (what the ``bayesmv`` command saves)."""
    import copy

    est = copy.copy(mcmc_fitted["M3LAK"]).set_params(max_predict_draws=8)  # 2 chains × 21
    Xt, _ = make_data(n=12, seed=9)
    loaded = bayesmv.load(est.save(tmp_path / "thin.nc", max_draws=4))
    assert loaded.idata_.posterior.sizes["draw"] == 4
    np.testing.assert_array_equal(loaded.predict_proba(Xt), est.predict_proba(Xt))
    np.testing.assert_array_equal(loaded.decision_function(Xt), est.decision_function(Xt))
    # with more draws per chain the predictions average over more of them and differ
    wider = bayesmv.load(est.save(tmp_path / "wider.nc", max_draws=8))
    assert not np.array_equal(wider.predict_proba(Xt), est.predict_proba(Xt))


def test_include_training_data_stores_the_standardised_training_views(fitted, tmp_path):
    X, _ = make_data()
    est = fitted["M3LAK"]
    full = az.from_netcdf(str(est.save(tmp_path / "full.nc", include_training_data=True)))
    for v, view in enumerate(_standardised_views(X)):
        np.testing.assert_allclose(full.constant_data[f"X_{v}"].values, view, rtol=1e-12)
    lean = az.from_netcdf(str(est.save(tmp_path / "lean.nc")))
    assert "constant_data" not in lean.groups()
    assert set(lean.posterior.data_vars) == set(est.idata_.posterior.data_vars)


def test_the_digest_detects_accidents_not_attacks(fitted, tmp_path):
    """The SHA-256 is unkeyed: it refuses a file changed without updating it (a damaged
    file), but an attacker who edits the weights and re-runs the digest gets a file that
    loads and predicts whatever they chose."""
    from bayesmv.models.base import DIGEST_ATTR, MODEL_ATTR, _digest

    est = fitted["MVLSVM"]
    X, _ = make_data()
    path = est.save(tmp_path / "model.nc")

    def tampered(recompute: bool) -> Path:
        idata = az.from_netcdf(str(path))
        idata.load()
        post = idata.posterior
        post["beta"] = -post["beta"]  # flip the classifier
        post["bias"] = -post["bias"]
        if recompute:
            post.attrs[DIGEST_ATTR] = _digest(idata, post.attrs[MODEL_ATTR])
        out = tmp_path / f"tampered_{recompute}.nc"
        idata.to_netcdf(str(out))
        return out

    with pytest.raises(ValueError, match="failed its integrity check"):
        bayesmv.load(tampered(recompute=False))
    forged = bayesmv.load(tampered(recompute=True))  # accepted: the digest is no signature
    np.testing.assert_allclose(forged.decision_function(X), -est.decision_function(X),
                               rtol=1e-12, atol=1e-12)
    assert np.all(forged.predict(X) != est.predict(X))


# --------------------------------------------------------------- 4. reproducibility
def _fingerprints() -> dict[str, list[str]]:
    """Hashes of each estimator's predictions and stored draws for fixed seeds (run both in
    this process and in a fresh interpreter)."""
    import hashlib

    X, y = make_data()
    Xt, _ = make_data(n=10, seed=4)
    out = {}
    for name in NAMES:
        est = quiet_fit(make_estimator(name, seed=11), X, y)
        f = np.ascontiguousarray(est.idata_.posterior["f"].values)
        out[name] = [hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
                     for a in (est.predict_proba(Xt), est.decision_function(Xt), f)]
    return out


@pytest.mark.slow
def test_same_seed_same_results_in_one_process_and_across_processes():
    here = _fingerprints()
    assert here == _fingerprints()
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import test_reliability as t; "
            "print('FINGERPRINTS' + json.dumps(t._fingerprints()))")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    proc = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [s for s in proc.stdout.splitlines() if s.startswith("FINGERPRINTS")][-1]
    assert json.loads(line[len("FINGERPRINTS"):]) == here


@pytest.mark.parametrize("name", NAMES)
def test_different_seeds_give_different_draws(fitted, name):
    X, y = make_data()
    other = quiet_fit(make_estimator(name, seed=1), X, y)
    est = fitted[name]
    if name == "MVML":  # a MAP fit: the seed draws the Nyström subset
        assert not np.array_equal(other.nystrom_subset_, est.nystrom_subset_)
    else:  # MCMC, Laplace or (MVL-SVM) landmark draws
        assert not np.array_equal(other.idata_.posterior["f"].values,
                                  est.idata_.posterior["f"].values)
    if name == "MVLSVM":
        assert not np.array_equal(other.landmark_indices_, est.landmark_indices_)


def test_different_seeds_give_different_mcmc_draws():
    X, y = make_data()
    params = dict(inference="gibbs", draws=10, tune=5, chains=1)
    a = quiet_fit(make_estimator("MVLSVM", seed=0, **params), X, y)
    b = quiet_fit(make_estimator("MVLSVM", seed=0, **params), X, y)
    c = quiet_fit(make_estimator("MVLSVM", seed=2, **params), X, y)
    np.testing.assert_array_equal(a.idata_.posterior["beta"].values,
                                  b.idata_.posterior["beta"].values)
    assert not np.array_equal(a.idata_.posterior["beta"].values, c.idata_.posterior["beta"].values)


# ------------------------------------------------------------------ 5. missing views
def _mask(X, view, rows):
    out = [v.copy() for v in X]
    out[view][rows] = np.nan
    return out


@pytest.mark.parametrize("name", ["M3LAK", "MVM", "MVLSVM"])
def test_missing_views_are_handled_in_training_and_prediction(name):
    X, y = make_data()
    Xm = _mask(_mask(X, 1, slice(0, 6)), 0, slice(20, 24))
    est = quiet_fit(make_estimator(name), Xm, y)
    for data in (Xm, X):
        proba = est.predict_proba(data)
        assert np.all(np.isfinite(proba)) and np.allclose(proba.sum(axis=1), 1.0)
        assert np.all(np.isfinite(est.decision_function(data)))


@pytest.mark.parametrize("name,advice", [("RhoTMVRKM", "drop or impute those rows, or use M3LAK "
                                                       "or MVLSVM"),
                                         ("MVML", "impute the missing rows first")])
def test_models_without_missing_view_support_say_what_to_do(fitted, name, advice):
    X, y = make_data()
    Xm = _mask(X, 1, [3, 7])
    pattern = r"X: view 1 \('view1'\) is missing \(all-NaN row\) for rows \[3, 7\]"
    with pytest.raises(ValueError, match=pattern) as info:
        clone(fitted[name]).fit(Xm, y)
    assert advice in str(info.value)
    for method in ("predict", "predict_proba", "decision_function"):
        with pytest.raises(ValueError, match=pattern):
            getattr(fitted[name], method)(Xm)


def _m3lak_point(built, rng):
    """A random point of the collapsed graph (value space) away from the initial values."""
    point = built.model.initial_point()
    start = built.initial_values(rng)
    for k, v in point.items():
        v = np.asarray(start.get(k, v), dtype=float)
        point[k] = v + 0.3 * rng.standard_normal(v.shape)
    return point


@pytest.mark.python_ops  # evaluates graphs a few times: gcc would be most of it
def test_m3lak_missing_view_drops_exactly_its_likelihood_term():
    """The graph's log density with view 1 missing for some rows is the complete-data log
    density minus exactly log N(x_1n | W_1 h_n, V_1 V_1ᵀ + τ_1⁻¹ I) of those rows, computed here
    with dense covariances (no Woodbury)."""
    X, y = make_data()
    est = make_estimator("M3LAK")
    rows = np.array([1, 4, 9, 16])
    full = est.build_model(X, y)
    X_std = [np.asarray(v) for v in full.context.data.views]
    missing = [X_std[0], X_std[1].copy()]
    missing[1][rows] = np.nan
    targets = label_tasks(full.y_index, 2)
    built = est.make_builder().build(check_views(missing), targets)
    point = _m3lak_point(full, np.random.default_rng(3))
    logp_full = full.model.compile_logp()(point)
    logp_missing = built.model.compile_logp()(point)
    W, V, tau = point["W_1"], point["V_1"], np.exp(point["tau_log__"][1])
    cov = V @ V.T + np.eye(V.shape[0]) / tau
    term = sum(stats.multivariate_normal(W @ point["H"][n], cov).logpdf(X_std[1][n])
               for n in rows)
    assert logp_full - logp_missing == pytest.approx(term, rel=1e-9, abs=1e-8)


# M3LAK's hybrid sampler runs in NumPy; its graph is compiled for a few evaluations only
@pytest.mark.python_ops
def test_m3lak_values_behind_a_missing_view_cannot_influence_the_fit():
    """Fill the missing rows with wild values (bypassing the NaN convention): the model's
    density, the sampler's data and the posterior draws are exactly those of the NaN data."""
    X, y = make_data()
    rows = np.arange(5)
    nan_views = _mask(X, 1, rows)
    data = check_views(nan_views)
    observed = data.observed.copy()
    garbage = [v.copy() for v in data.views]
    garbage[1][rows] = 1e6 * np.random.default_rng(0).standard_normal((rows.size, 2))
    data_garbage = MultiViewData(tuple(garbage), observed, data.view_names)
    est = make_estimator("M3LAK", draws=8, tune=4)
    targets = label_tasks(y, 2)
    built_nan = est.make_builder().build(data, targets)
    built_garbage = est.make_builder().build(data_garbage, targets)
    point = _m3lak_point(built_nan, np.random.default_rng(1))
    assert built_nan.model.compile_logp()(point) == built_garbage.model.compile_logp()(point)
    for a, b in zip(HybridSpec.from_built(built_nan).views,
                    HybridSpec.from_built(built_garbage).views, strict=True):
        np.testing.assert_array_equal(a, b)
    kw = dict(sampler="hybrid", draws=8, tune=4, chains=1, cores=1, random_seed=5,
              trace_vars=["f", "beta", "tau"], progressbar=False)
    a = run_sampler(built_nan, **kw).posterior
    b = run_sampler(built_garbage, **kw).posterior
    for name in ("f", "beta", "tau"):
        np.testing.assert_array_equal(a[name].values, b[name].values)
        assert np.all(np.isfinite(a[name].values))


def test_m3lak_prediction_with_a_missing_view_uses_the_other_views_only(fitted):
    """p(h* | x*) for a sample without view 1 is the Gaussian posterior given view 0 alone:
    precision I + W_0ᵀ Ψ_0⁻¹ W_0, mean P⁻¹ W_0ᵀ Ψ_0⁻¹ x_0 (dense inverse here)."""
    from bayesmv.components.latent import SharedLatent

    est = fitted["M3LAK"]
    X, _ = make_data()
    Xm = _mask(X, 1, [0, 1, 2])
    data = est._prepare(Xm)
    draw = est._draws()[-1]
    mean, chols, pattern = SharedLatent(est.latent_dim, est.view_latent_dim).latent_posterior(
        draw, data)
    W, V, tau = draw["W_0"], draw["V_0"], draw["tau"][0]
    Psi_inv = np.linalg.inv(V @ V.T + np.eye(V.shape[0]) / tau)
    P = np.eye(W.shape[1]) + W.T @ Psi_inv @ W
    for n in (0, 1, 2):
        expected = np.linalg.solve(P, W.T @ Psi_inv @ data.views[0][n])
        np.testing.assert_allclose(mean[n], expected, rtol=1e-9, atol=1e-12)
        L = chols[pattern[n]]
        np.testing.assert_allclose(L @ L.T, P, rtol=1e-9)


def test_mvlsvm_imputes_missing_similarity_blocks_by_least_squares_on_the_landmarks(fitted):
    """The paper's eq. 11, written here with numpy's lstsq: the known blocks of a row are
    regressed on the landmarks' own similarity blocks, the missing block is r P_missing."""
    est = fitted["MVLSVM"]
    X, _ = make_data()
    Xm = _mask(X, 1, [2])
    fmap = est.feature_map_
    L = len(fmap.landmark_indices_)
    data = est._prepare(Xm)
    mu0 = np.exp(-fmap.gamma_[0] * ((data.views[0][2] - fmap.landmarks_[0]) ** 2).sum(1))
    P = [np.exp(-fmap.gamma_[v] * ((fmap.landmarks_[v][:, None] - fmap.landmarks_[v][None])
                                   ** 2).sum(-1)) for v in range(2)]
    r = np.linalg.lstsq(P[0].T, mu0, rcond=np.sqrt(np.finfo(float).eps))[0]
    features = fmap.imputed_similarities(data)[2]  # est.transform whitens them (whiten=True)
    np.testing.assert_allclose(features[:L], mu0, rtol=1e-12)
    np.testing.assert_allclose(features[L:], r @ P[1], rtol=1e-6, atol=1e-8)


# ------------------------------------------------------------ 6. numerical edge cases
def _ks(samples, cdf) -> float:
    return stats.kstest(samples, cdf).pvalue


def test_lambda_step_on_the_margin_and_near_it():
    """a = C(1 - y f) = 0 exactly (y f = 1) and |a| tiny on either side of the sampler's
    switch to the a → 0 limit: λ ~ GIG(1/2, 1, a²), i.e. λ⁻¹ ~ InverseGaussian(1/|a|, 1),
    whose a → 0 limit is Gamma(1/2, rate 1/2)."""
    from bayesmv.inference import gibbs

    rng = np.random.default_rng(0)
    C, f = 3.0, np.ones(20000)
    a_exact = C * (1.0 - 1.0 * f)
    assert np.all(a_exact == 0.0)
    limit = stats.gamma(0.5, scale=2.0).cdf
    lam = sample_lambda(a_exact, rng)
    assert np.all(np.isfinite(lam)) and np.all(lam >= gibbs._LAMBDA_FLOOR)
    assert _ks(lam, limit) > 1e-3
    edge = gibbs._TINY_MARGIN
    for a in (1e-300, 1e-14, -1e-12, edge * (1 - 1e-9), edge, edge * (1 + 1e-9), 1e-8, -1e-6):
        lam = sample_lambda(np.full(20000, a), rng)
        assert np.all(np.isfinite(lam)) and np.all(lam > 0)
        assert _ks(lam, limit) > 1e-3, a  # GIG(1/2, 1, a²) differs from the limit by O(|a|)
    for a in (1e-6, 1e-3, 0.5, 4.0):
        inv = 1.0 / sample_lambda(np.full(20000, a), rng)
        assert _ks(inv, stats.invgauss(1.0 / a, scale=1.0).cdf) > 1e-3, a
    # the two sides of the switch are one distribution
    below = sample_lambda(np.full(20000, edge * 0.999), rng)
    above = sample_lambda(np.full(20000, edge * 1.001), rng)
    assert stats.ks_2samp(below, above).pvalue > 1e-3


def test_lambda_step_with_huge_c():
    """Huge a = C(1 - y f): λ⁻¹ has mean 1/a and variance 1/a³; every draw finite."""
    rng = np.random.default_rng(1)
    for a in (1e4, 1e8, 1e12):
        inv = 1.0 / sample_lambda(np.full(20000, a), rng)
        assert np.all(np.isfinite(inv)) and np.all(inv > 0)
        z = (inv.mean() - 1.0 / a) / np.sqrt(a**-3 / inv.size)
        assert abs(z) < 5, a
        assert inv.std() == pytest.approx(a**-1.5, rel=0.05)
    for a in (1e100, 1e300):  # relative sd a^(-1/2) is below rounding: λ = a to working precision
        lam = sample_lambda(np.full(1000, a), rng)
        np.testing.assert_allclose(lam, a, rtol=1e-12)


def test_beta_conditional_with_huge_c_and_points_on_the_margin():
    """β | λ stays finite and equals the dense solution when C is huge and every point sits
    exactly on the margin (λ from the a → 0 limit, some at the floor)."""
    rng = np.random.default_rng(2)
    n, p = 40, 5
    Phi = rng.standard_normal((n, p))
    y = np.sign(rng.standard_normal(n))
    C = 1e6
    lam = sample_lambda(np.zeros(n), rng)
    lam[:3] = 1e-12
    mean, chol = beta_conditional(Phi, y, lam, C, 1.0)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(chol))
    prec = C**2 * Phi.T @ (Phi / lam[:, None]) + np.eye(p)
    lin = Phi.T @ (C * (1 + C / lam) * y)
    # condition number ~1e24: judge the solve by its backward error, as any solver would be
    residual = np.linalg.norm(prec @ mean - lin)
    assert residual <= 1e-12 * np.linalg.norm(prec, 2) * np.linalg.norm(mean)
    np.testing.assert_allclose(chol @ chol.T, prec, rtol=1e-12)


@pytest.mark.parametrize("name,params", [("M3LAK", dict(C=1e6)),
                                         ("MVM", dict(loss="hinge", C=1e8, inference="map")),
                                         ("MVLSVM", dict(C=1e12)),
                                         ("MVLSVM", dict(C=1e8, inference="gibbs", draws=20,
                                                         tune=10, chains=1))])
def test_huge_c_gives_finite_fits(name, params):
    X, y = make_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short chains: convergence warnings
        no_float_trouble()  # but no overflow / invalid value
        est = make_estimator(name, **params).fit(X, y)
        for data in (X, [10.0 * v for v in X]):
            proba = est.predict_proba(data)
            assert np.all(np.isfinite(est.decision_function(data)))
            assert np.all((proba >= 0) & (proba <= 1)) and np.allclose(proba.sum(axis=1), 1)
    assert np.all(np.isfinite(est.idata_.posterior["f"].values))


def test_cholesky_jitter_warns_and_never_returns_nan():
    rng = np.random.default_rng(0)
    B = rng.standard_normal((6, 2))
    singular = B @ B.T  # rank 2
    with pytest.warns(NumericalWarning, match="my matrix is numerically singular"):
        L = cholesky_with_jitter(singular, "my matrix")
    assert np.all(np.isfinite(L))
    jitter = np.diag(L @ L.T - singular).mean() / np.mean(np.diag(singular))
    assert 0 < jitter <= 1e-4
    np.testing.assert_allclose(L @ L.T, singular + jitter * np.mean(np.diag(singular))
                               * np.eye(6), atol=1e-9)
    indefinite = np.diag([1.0, 1.0, -1.0])
    with pytest.raises(linalg.LinAlgError, match="other matrix is not positive definite"):
        cholesky_with_jitter(indefinite, "other matrix")


@pytest.mark.parametrize("inference", ["map", "laplace"])
def test_rhotmvrkm_nearly_singular_kernel_is_jittered_with_a_warning(inference):
    """Every row twice and λ ≈ 0: K + λI is singular; the factor gets jitter and says so,
    and the fit still interpolates the (consistent) labels."""
    X, y = make_data(n=15)
    dup = [np.vstack([v, v]) for v in X]
    yd = np.concatenate([y, y])
    est = RhoTMVRKM(rho=0.5, alpha=1e-300, gamma="scale", inference=inference, draws=10)
    with pytest.warns(NumericalWarning, match="numerically singular"):
        est.fit(dup, yd)
        proba = est.predict_proba(X)
    assert np.all(np.isfinite(est.idata_.posterior["f"].values))
    assert np.all(np.isfinite(proba))
    np.testing.assert_array_equal(est.predict(X), y)


def test_mvml_singular_nystrom_block_is_reduced_to_its_numerical_rank():
    """A Nyström subset holding duplicated rows makes W = K[S, S] singular: the whitener
    keeps its numerical range, so U_S U_Sᵀ still reproduces K[S, S] and nothing is NaN."""
    X, y = make_data(n=10)
    dup = [np.vstack([v, v, v]) for v in X]
    yd = np.concatenate([y, y, y])
    clf = MVML(nystrom=30, max_iter=5, random_seed=0).fit(dup, yd)  # every row in S
    state = clf._state
    assert all(size <= 10 for size in state.block_sizes)  # rank 10 of 30
    data = clf.standardizer_.transform(check_views(dup))
    features = state.transform(data)
    for v, (lo, hi) in enumerate(zip(np.cumsum((0,) + state.block_sizes)[:-1],
                                     np.cumsum(state.block_sizes), strict=True)):
        K = np.exp(-((data.views[v][:, None] - data.views[v][None]) ** 2).sum(-1)
                   / data.views[v].shape[1])
        U = features[:, lo:hi]
        np.testing.assert_allclose(U @ U.T, K, atol=1e-6)
    for out in (clf.decision_function(X), clf.predict_proba(X), clf.A_, clf.g_):
        assert np.all(np.isfinite(out))


def test_mvm_laplace_with_constant_features_and_duplicated_rows_is_finite():
    X, y = make_data(n=12)
    dup = [np.vstack([np.column_stack([v, np.ones(12)])] * 2) for v in X]
    yd = np.concatenate([y, y])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # separable data: the Laplace fit warns (k-hat)
        no_float_trouble()
        est = make_estimator("MVM").fit(dup, yd)
        proba = est.predict_proba(dup)
    assert np.all(np.isfinite(est.idata_.posterior["f"].values)) and np.all(np.isfinite(proba))


def test_probabilities_do_not_overflow_at_large_decision_values():
    f = np.array([-1e300, -1e3, -40.0, -1.0, 0.0, 1.0, 40.0, 1e3, 1e300])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow warning fails the test
        for C in (1.0, 1e3, 1e150):
            p = hinge_probability(f, C)
            assert np.all((p >= 0) & (p <= 1))
            np.testing.assert_allclose(p + hinge_probability(-f, C), 1.0, rtol=0, atol=1e-15)
            assert p[0] == 0.0 and p[-1] == 1.0 and p[4] == 0.5
        # ℓ(+1|½) / (ℓ(+1|½) + ℓ(-1|½)) = e⁻¹ / (e⁻¹ + e⁻³) at C = 1
        np.testing.assert_allclose(hinge_probability(np.array([0.5]), 1.0),
                                   np.exp(-1) / (np.exp(-1) + np.exp(-3)))
        q = LogisticLikelihood.probability(f)
        assert q[0] == 0.0 and q[-1] == 1.0
        assert np.all(np.isfinite(LogisticLikelihood().log_likelihood(f, np.ones_like(f))))
        m = np.array([-1e3, 1e3])
        np.testing.assert_allclose(expected_sigmoid(m, np.ones(2), 2.0), [0.0, 1.0], atol=1e-300)
        assert np.all(np.isfinite(log_expected_sigmoid(m, np.ones(2), 2.0)))
        assert log_expected_sigmoid(m, np.ones(2), 2.0)[0] < -1e5


@pytest.mark.parametrize("name", NAMES)
def test_predictions_far_from_the_data_are_finite_without_overflow(fitted, name):
    """Test points 1e4 standard deviations out push |f| (and 2C|f|) far beyond where exp
    overflows: the probabilities are still exact 0/1 values, never NaN or a warning."""
    est = fitted[name]
    X, _ = make_data()
    far = [1e4 * v for v in X]
    with warnings.catch_warnings():
        no_float_trouble()
        proba = est.predict_proba(far)
        dec = est.decision_function(far)
    assert np.all(np.isfinite(dec)) and np.all(np.isfinite(proba))
    assert np.all((proba >= 0) & (proba <= 1)) and np.allclose(proba.sum(axis=1), 1.0)


@pytest.mark.parametrize("name,params", [("M3LAK", dict(C=1e4)), ("RhoTMVRKM", {}),
                                         ("MVML", {}), ("MVM", dict(inference="map")),
                                         ("MVLSVM", dict(C=1e6))])
def test_one_vs_rest_probabilities_stay_a_distribution_when_every_score_underflows(name,
                                                                                 params):
    """Three classes, test points far out: every one-vs-rest probability can underflow to
    0 together (p / p.sum() would be 0/0); the scores are normalised in log space instead."""
    rng = np.random.default_rng(3)
    X, _ = make_data(n=36, seed=3)
    y = np.digitize(X[0][:, 0] + 0.5 * X[1][:, 0], [-0.4, 0.4])
    est = quiet_fit(make_estimator(name, **params), X, y)
    far = [1e4 * rng.standard_normal((8, 3)), 1e4 * rng.standard_normal((8, 2))]
    with warnings.catch_warnings():
        no_float_trouble()
        for data in (X, far):
            proba = est.predict_proba(data)
            assert proba.shape == (len(data[0]), 3)
            assert np.all(np.isfinite(proba)) and np.all((proba >= 0) & (proba <= 1))
            np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)
            assert np.all(np.isfinite(est.decision_function(data)))
    if name == "M3LAK":
        # a 15-draw chain at C = 1e4 (a hard margin) is not a fit: its training accuracy
        # ranged 0.31-0.69 over seeds; what matters here is that its scores are not constant
        assert np.ptp(est.decision_function(X), axis=0).min() > 0
    else:  # the fit learned something: above the most frequent class's share (0.39)
        assert est.score(X, y) > np.bincount(y).max() / len(y)
