import os
import warnings
from contextlib import nullcontext

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

# the variables bayesmv.distributed._BLAS_ENV sets for a Dask chain task; not imported from
# there: importing bayesmv here would import PyTensor before its compile cache is chosen
_BLAS_THREAD_ENV = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")


def _one_thread_per_worker() -> None:
    """One BLAS and OpenMP thread in each xdist worker, in every library it loads.

    Two workers on two cores, each with a multi-threaded BLAS, oversubscribe the cores, and
    OpenBLAS threads spin while they wait: a scikit-learn check of RhoTMVRKM took 37 s in
    the suite against 0.8 s alone.  ``threadpool_limits`` reaches only the libraries loaded
    when it is called (NumPy's, here); SciPy's OpenBLAS and PyTensor's BLAS load later and
    read these variables when they do (set before any test module imports them); a value
    the user set wins.  Tests that need another thread count set it themselves, in a
    subprocess or a ``threadpool_limits`` block.
    """
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for name in _BLAS_THREAD_ENV:
            os.environ.setdefault(name, "1")


_one_thread_per_worker()


def _compile_cache_per_worker() -> None:
    """Give each xdist worker its own PyTensor compile cache, compiled without debug symbols.

    PyTensor compiles C modules under a lock on its cache directory, so two workers sharing
    one cache compile one module at a time, and each compilation first rescans the whole
    cache.  With an empty cache (a fresh install) the suite took 19 min on two slow cores
    (9 min with a warm cache); with one cache per worker, 17 min.  PyTensor always asks gcc
    for debug symbols; ``-g0`` drops them, which changes no generated instruction and takes
    a quarter off each compilation (1.36 s against 1.78 s a module, on the suite's own
    modules).  Set before PyTensor is imported: the cache directory is fixed at import.  A
    cache or compiler setting already in ``PYTENSOR_FLAGS`` wins.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    flags = os.environ.get("PYTENSOR_FLAGS", "")
    if not worker or "compiledir" in flags:
        return
    fmt = ("compiledir_%(short_platform)s-%(processor)s-%(python_version)s-"
           f"%(python_bitwidth)s-pytest-{worker}")
    ours = [f"compiledir_format={fmt}"]
    if "gcc__cxxflags" not in flags:
        ours.append("gcc__cxxflags=-g0")
    os.environ["PYTENSOR_FLAGS"] = ",".join(filter(None, [flags, *ours]))


_compile_cache_per_worker()

warnings.filterwarnings("ignore", message=r"\s*ArviZ is undergoing a major refactor")


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def pytest_collection_modifyitems(config, items):
    """Long-running tests first: the two workers (``-n 2``) then take the short ones as they
    free up and finish together, instead of one worker starting a two-minute test last."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None
               and item.get_closest_marker("long") is None)


def pytest_configure(config):
    """The libraries already loaded (NumPy's BLAS) get the one thread of
    ``_one_thread_per_worker`` too; the limit stays in force for the process."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        threadpool_limits(limits=1)


def _ops_for(item):
    """PyTensor's Python implementations of each op (its ``py`` linker) for a test marked
    ``python_ops``, else the default compiled C.

    Those tests build large graphs (exact Hessians, many small models, one per hypothesis
    example) and evaluate each a few times.  From an empty compile cache, as on a fresh
    machine, gcc is nearly all of their time: ``test_conditionals.py`` took 75 s compiled and
    14 s in Python, MVM's exact-Hessian tests 112 s and 17 s, MVM's property test 67 s and
    15 s.  The math is the same (PyTensor tests its Python and C implementations of every op
    against each other); sampling-heavy tests stay compiled, where Python would be slower.
    """
    if item.get_closest_marker("python_ops") is None:
        return nullcontext()
    import pytensor

    return pytensor.config.change_flags(linker="py")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    with _ops_for(item):  # module fixtures compile here
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with _ops_for(item):
        return (yield)


@pytest.fixture(scope="module", params=[1, 2], ids=["one-view-latent", "two-view-latents"])
def small_hybrid_model(request):
    """A small M3LAK graph (two views, one row missing a view, 1 or 2 view-specific latent
    columns) at a random point: ``(point, joint log density without Jacobian, HybridSpec)``,
    for checking the hybrid sampler's collapsed targets against the model's joint density."""
    from bayesmv import M3LAK  # here, not at the top: see _compile_cache_per_worker
    from bayesmv.datasets import make_lvm_classification
    from bayesmv.inference.spec import HybridSpec

    X, y, _ = make_lvm_classification(n_samples=15, view_dims=(4, 3), latent_dim=2,
                                      view_latent_dim=1, random_seed=0)
    X[1][[2, 5]] = np.nan  # a row that misses a view drops out of that view's term
    est = M3LAK(latent_dim=3, n_frequencies=3, view_latent_dim=request.param, n_components=3,
                C=0.8)
    built = est.build_model(X, y)
    rng = np.random.default_rng(3)
    point = built.initial_values(rng)
    point["beta"] = rng.normal(size=point["beta"].shape)
    point["H"] = rng.normal(size=point["H"].shape)
    point["Omega"] = rng.normal(size=point["Omega"].shape)
    point["tau_log__"] = rng.normal(0.5, 0.3, size=point["tau_log__"].shape)
    for key in [k for k in point if k.startswith(("W_", "V_"))]:
        point[key] = rng.normal(scale=0.7, size=point[key].shape)
    return point, built.model.compile_logp(jacobian=False), HybridSpec.from_built(built)


def _central_gradient(f, x: np.ndarray, step: float = 1e-6) -> np.ndarray:
    """Central differences ``(f(x + h e_i) - f(x - h e_i)) / 2h`` of a scalar function, for
    every entry of x (any shape)."""
    x = np.asarray(x, dtype=float)
    grad = np.empty_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = step
        grad[i] = (f(x + e) - f(x - e)) / (2 * step)
    return grad


@pytest.fixture
def central_gradient():
    """:func:`_central_gradient`: a finite-difference reference for analytic gradients."""
    return _central_gradient
