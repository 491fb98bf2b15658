"""Scale out on a Dask cluster: MCMC chains as Dask tasks.

Model selection needs nothing from this module: every bayesmv estimator follows
scikit-learn's conventions (parameters only in the constructor, everything compiled in
``fit``), so ``GridSearchCV`` and ``cross_val_score`` run their fits on a
``dask.distributed`` cluster under ``joblib.parallel_backend("dask")`` unchanged.

:func:`sample_chains` spreads the chains of ONE fit over the cluster.  Chain i is a Dask task
that runs the estimator's own ``fit`` with the sampler restricted to that chain
(:func:`bayesmv.inference.sample.chain_plan`); the sampler gives chain i the same starting
point and the same random streams as in a local run, and the task runs with the client's BLAS
thread count (Dask's nanny starts workers with one; a multi-threaded BLAS rounds differently), so
the draws are identical to ``estimator.fit(X, y)`` with the same ``random_seed`` and
``chains`` when the workers have the same software and kind of CPU as the client.  The chains
are then concatenated along ``chain`` and handed back to ``fit`` on the client, which
post-processes them exactly as its own draws (convergence report, point estimates, ...).
The hybrid sampler's pilot compares all chains (:mod:`bayesmv.inference.restart`), so each
task runs the pilot for every chain before its own chain's warm-up and draws: with C chains a
task makes C pilots (four chains of the default 1000 + 2000 after a 500-iteration pilot: 5000
iterations a task instead of 3500).

Needs ``pip install 'bayesmv[dask]'``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import numbers
import os
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import arviz as az
import numpy as np
from sklearn.base import BaseEstimator, clone
from threadpoolctl import ThreadpoolController

from bayesmv.inference.sample import ChainsSampled, chain_plan

__all__ = ["relax_malloc_trimming", "sample_chains", "supports_chains"]

#: values of an ``inference`` parameter that mean MCMC
_MCMC_INFERENCE = ("nuts", "gibbs", "hybrid", "mcmc")
#: per-estimator attributes holding the time spent in the sampler
_TIMING_ATTRS = ("sampling_seconds", "fit_seconds")
#: read by BLAS libraries when they are loaded (PyTensor's BLAS loads during ``fit``)
_BLAS_ENV = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")


def _blas_threads() -> int | None:
    """This process's BLAS thread count (the largest over the loaded BLAS libraries)."""
    counts = [lc.num_threads for lc in ThreadpoolController().select(user_api="blas")
              .lib_controllers]
    return max(counts) if counts else None


@contextmanager
def _blas_threads_as(n: int | None) -> Iterator[None]:
    """Run with ``n`` BLAS threads, in the libraries loaded now and in those loaded inside.

    A multi-threaded BLAS sums in another order than a single-threaded one, and MCMC turns
    last-digit differences into different chains; Dask's nanny starts workers with one BLAS
    thread, so a chain task takes the client's count to reproduce the client's local run.
    """
    if n is None:
        yield
        return
    blas = ThreadpoolController().select(user_api="blas")
    loaded = {lc.filepath for lc in blas.lib_controllers}
    saved = {k: os.environ.get(k) for k in _BLAS_ENV}
    os.environ.update({k: str(n) for k in _BLAS_ENV})
    try:
        with blas.limit(limits=n):
            yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        before = saved["OPENBLAS_NUM_THREADS"] or saved["OMP_NUM_THREADS"]
        if before is not None and before.isdigit():
            # libraries loaded by this task keep the worker's own setting for later tasks
            for lc in ThreadpoolController().select(user_api="blas").lib_controllers:
                if lc.filepath not in loaded:
                    lc.set_num_threads(int(before))


def supports_chains(estimator: BaseEstimator) -> tuple[bool, str]:
    """Whether :func:`sample_chains` can spread this estimator's chains, and if not why."""
    params = estimator.get_params(deep=False)
    name = type(estimator).__name__
    if "chains" not in params or "random_seed" not in params:
        return False, (f"{name} draws no MCMC chains (it has no 'chains'/'random_seed' "
                       "parameters); fit it directly, or run many fits on the cluster with "
                       "GridSearchCV / cross_val_score under joblib.parallel_backend('dask')")
    inference = params.get("inference")
    if inference is not None and inference not in _MCMC_INFERENCE:
        return False, (f"{name}(inference={inference!r}) draws no MCMC chains; "
                       f"use inference in {[i for i in _MCMC_INFERENCE if i != 'mcmc']} "
                       "where the estimator offers it")
    uses_nuts = params.get("sampler") == "nuts" or inference == "nuts"
    nuts_sampler = params.get("nuts_sampler", "pymc")
    if uses_nuts and nuts_sampler != "pymc":
        return False, (f"nuts_sampler={nuts_sampler!r} runs all chains in one program (on one "
                       "accelerator for the JAX back-ends) and cannot run one chain on its own "
                       "reproducibly; use nuts_sampler='pymc' to spread chains over workers")
    return True, ""


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: glibc's static defaults, which apply once any MALLOC_*_ variable is set
_GLIBC_TRIM_DEFAULT = _GLIBC_MMAP_DEFAULT = 128 * 1024


def _mallopt(param: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(param, value))
    except (OSError, AttributeError):  # not glibc (macOS, Windows, musl): nothing to relax
        return False


def relax_malloc_trimming(mmap_threshold: int = 32 * 2**20) -> bool:
    """Let glibc keep freed memory in this process, as it does by default; for Dask workers.

    Dask's nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536`` (memory goes back to the
    OS quickly).  Setting that variable also freezes glibc's mmap threshold at 128 KiB, so
    every NumPy array above 128 KiB is a fresh ``mmap`` with page faults on first touch: the
    samplers' many mid-sized temporaries made a chain 1.7-1.9× slower on a worker than in a
    plain process (measured, ``benchmarks/distributed.py``).  Run it on the workers once,
    ``client.run(relax_malloc_trimming)``, before a grid search; :func:`sample_chains` does it
    for the duration of each chain task by itself.  Returns False where the C library is not
    glibc (nothing to do).
    """
    return (_mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold))
            and _mallopt(_M_TRIM_THRESHOLD, 2 * int(mmap_threshold)))


@contextmanager
def _relaxed_malloc() -> Iterator[None]:
    """:func:`relax_malloc_trimming` for a block; the worker's own setting afterwards."""
    fixed = any(k in os.environ for k in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_",
                                          "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"))
    if not fixed or not relax_malloc_trimming():
        yield  # glibc's dynamic thresholds already apply (or not glibc)
        return
    try:
        yield
    finally:
        def env(name: str, default: int) -> int:
            value = os.environ.get(name, "")
            return int(value) if value.isdigit() else default

        _mallopt(_M_MMAP_THRESHOLD, env("MALLOC_MMAP_THRESHOLD_", _GLIBC_MMAP_DEFAULT))
        _mallopt(_M_TRIM_THRESHOLD, env("MALLOC_TRIM_THRESHOLD_", _GLIBC_TRIM_DEFAULT))


def _sample_one_chain(estimator: BaseEstimator, X: Any, y: Any, chain: int,
                      blas_threads: int | None = None) -> az.InferenceData:
    """Dask task: chain ``chain`` of ``estimator.fit(X, y)``, raw draws only."""
    est = clone(estimator)
    start = time.perf_counter()
    with warnings.catch_warnings():
        # one chain cannot be judged (R-hat); the merged fit is judged on the client
        warnings.simplefilter("ignore")
        try:
            with (_blas_threads_as(blas_threads), _relaxed_malloc(),
                  chain_plan(chain_ids=[chain])):
                est.fit(X, y)
        except ChainsSampled as done:
            idata = done.idata
            idata.posterior.attrs["chain_seconds"] = time.perf_counter() - start
            return idata
    raise TypeError(f"{type(estimator).__name__}.fit finished without drawing MCMC chains "
                    "through bayesmv's sampler, so its chains cannot be spread over workers")


def _check_client(client: Any) -> None:
    if not all(hasattr(client, a) for a in ("submit", "gather", "scatter")):
        raise TypeError(f"client must be a dask.distributed.Client, got {type(client).__name__}")


def sample_chains(
    estimator: BaseEstimator,
    X: Any,
    y: Any,
    client: Any,
    chains: int | None = None,
) -> BaseEstimator:
    """Fit ``estimator`` with its MCMC chains running as tasks on a Dask cluster.

    Parameters
    ----------
    estimator : bayesmv estimator
        An MCMC estimator (``M3LAK`` with either sampler and ``nuts_sampler="pymc"``,
        ``MVLSVM(inference="gibbs")``, ``MVM(inference="nuts")``).  It is not modified: a
        clone is fitted and returned.
    X, y : training views and labels, as for ``estimator.fit``.  They are sent to the
        workers once (``client.scatter``).
    client : dask.distributed.Client
    chains : int, optional
        Number of chains; the estimator's ``chains`` parameter when None.

    Returns
    -------
    estimator
        A fitted clone whose ``idata_`` holds all chains (concatenated along ``chain``),
        equal to ``clone(estimator).set_params(chains=chains).fit(X, y)``: same draws, same
        post-processing.  With ``random_seed=None`` a seed is drawn here and stored in the
        clone's ``random_seed``, so the run can be repeated.  ``idata_.posterior.attrs``
        gains ``distributed_seconds`` (wall time of the distributed sampling) and
        ``chain_seconds`` (per task, model build and compilation included); the estimator's
        own sampling-time attribute holds ``distributed_seconds``.

    Raises
    ------
    TypeError, ValueError
        For an estimator or setting that draws no chains (MAP, Laplace, closed form), or a
        NUTS back-end that cannot run chains one at a time (nutpie, numpyro, blackjax).
    """
    _check_client(client)
    ok, reason = supports_chains(estimator)
    if not ok:
        raise (TypeError if "'chains'" in reason else ValueError)(reason)
    n_chains = estimator.get_params()["chains"] if chains is None else chains
    if (not isinstance(n_chains, numbers.Integral) or isinstance(n_chains, bool)
            or n_chains < 1):
        raise ValueError(f"chains must be a positive integer, got {n_chains!r}")
    est = clone(estimator).set_params(chains=int(n_chains))
    if est.random_seed is None:
        # every worker must derive its chain's streams from the same seed
        est.set_params(random_seed=int(np.random.default_rng().integers(2**32)))

    start = time.perf_counter()
    X_remote, y_remote = client.scatter([X, y], broadcast=True)
    token = uuid.uuid4().hex[:8]
    threads = _blas_threads()
    futures = [client.submit(_sample_one_chain, est, X_remote, y_remote, i, threads,
                             pure=False, key=f"bayesmv-chain-{i}-{token}")
               for i in range(n_chains)]
    try:
        parts = client.gather(futures)
    except BaseException:
        client.cancel(futures)  # one chain failed: do not leave the others running
        raise
    del futures, X_remote, y_remote  # release the scattered data on the workers
    wall = time.perf_counter() - start

    parts = sorted(parts, key=lambda idata: int(idata.posterior.chain.values[0]))
    merged = az.concat(*parts, dim="chain", reset_dim=False) if len(parts) > 1 else parts[0]
    chain_seconds = [float(p.posterior.attrs.get("chain_seconds", np.nan)) for p in parts]
    with chain_plan(replay=merged):
        est.fit(X, y)
    attrs = est.idata_.posterior.attrs
    attrs.pop("previous_created_at", None)
    for key in _TIMING_ATTRS:
        if key in attrs:
            attrs[key] = wall
    attrs["distributed_seconds"] = wall
    attrs["chain_seconds"] = chain_seconds
    return est
