"""PyTensor gets a real BLAS from ``import bayesmv`` on a plain pip install."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from threadpoolctl import ThreadpoolController

import bayesmv  # noqa: F401  (configures PyTensor's BLAS)
from bayesmv._runtime import blas_routine_names


def test_pytensor_links_a_blas_after_import():
    assert pytensor.config.blas__ldflags.strip(), "PyTensor has no BLAS configured"
    A, x = pt.matrix("A"), pt.vector("x")
    f = pytensor.function([A, x], [pt.dot(A, x), pt.grad((pt.dot(A, x) ** 2).sum(), A)])
    # with a BLAS the rewrites pick the C BLAS ops; without one they stay Python fallbacks
    ops = {type(node.op).__name__ for node in f.maker.fgraph.apply_nodes}
    assert {"CGemv", "CGer"} <= ops, ops
    rng = np.random.default_rng(0)
    a, v = rng.normal(size=(40, 30)), rng.normal(size=30)
    out, grad = f(a, v)
    np.testing.assert_allclose(out, a @ v, rtol=1e-12)
    np.testing.assert_allclose(grad, 2 * np.outer(a @ v, v), rtol=1e-12)


@pytest.mark.skipif(not os.environ.get("PYTEST_XDIST_WORKER"),
                    reason="the conftest limits BLAS threads in pytest-xdist workers only")
def test_every_blas_an_xdist_worker_loads_runs_the_workers_thread_count():
    # two workers each with a multi-threaded BLAS oversubscribe two cores; the libraries
    # loaded after the conftest (SciPy's OpenBLAS, PyTensor's) must get the setting too
    import scipy.linalg

    scipy.linalg.cho_factor(np.eye(3))
    A, x = pt.matrix("A"), pt.vector("x")
    pytensor.function([A, x], pt.dot(A, x))(np.eye(3), np.ones(3))  # loads PyTensor's BLAS
    expected = int(os.environ["OPENBLAS_NUM_THREADS"])
    threads = {lc.filepath: lc.num_threads
               for lc in ThreadpoolController().select(user_api="blas").lib_controllers}
    assert len(threads) >= 2 and set(threads.values()) == {expected}, threads


def test_import_prints_no_blas_warning():
    code = ("import warnings; warnings.simplefilter('error');"
            "import bayesmv, pytensor; print(pytensor.config.blas__ldflags[:2])")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert "BLAS" not in run.stderr and "blas" not in run.stderr.lower(), run.stderr


def test_user_blas_setting_is_kept():
    code = "import bayesmv, pytensor; print(repr(pytensor.config.blas__ldflags))"
    env = {"PYTENSOR_FLAGS": "blas__ldflags=-lmyblas", "PATH": ""}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "'-lmyblas'"


def test_routine_names_are_the_reference_blas():
    names = set(blas_routine_names())
    for routine in ("dgemm_", "sgemv_", "dger_", "ddot_", "zgerc_", "idamax_", "dtrsm_"):
        assert routine in names
    assert len(names) == len(blas_routine_names())


_FIT_AND_HASH = """
import hashlib, warnings
warnings.simplefilter("ignore")
from bayesmv import M3LAK
from bayesmv.datasets import make_nonlinear_latent
X, y = make_nonlinear_latent(n_samples=40, view_dims=(5, 4), latent_dim=2, view_latent_dim=1,
                             noise=0.3, random_seed=0)
est = M3LAK(latent_dim=2, n_frequencies=8, view_latent_dim=1, n_components=3, draws=15, tune=15,
            chains=2, cores=1, random_seed=4).fit(X, y)
print(hashlib.sha256(est.idata_.posterior["f"].values.tobytes()).hexdigest())
"""


@pytest.mark.slow
def test_draws_do_not_depend_on_the_blas_thread_count():
    """The same seed gives bit-identical draws with one or two BLAS threads (the thread count
    changes a multi-threaded BLAS's summation order, which MCMC would amplify)."""
    import os

    hashes = []
    for threads in ("1", "2"):
        env = dict(os.environ, OPENBLAS_NUM_THREADS=threads, OMP_NUM_THREADS=threads)
        run = subprocess.run([sys.executable, "-c", _FIT_AND_HASH], capture_output=True,
                             text=True, timeout=240, env=env)
        assert run.returncode == 0, run.stderr[-2000:]
        hashes.append(run.stdout.strip().splitlines()[-1])
    assert hashes[0] == hashes[1]
