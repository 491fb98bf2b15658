"""Scale-out benchmark: model selection and MCMC chains on a dask.distributed cluster.

1. A ϱTMV-RKM grid search (GridSearchCV) on UCI Multiple Features (all ten digits, six
   views), run five ways in the same process and splits: plain local (n_jobs=1, default BLAS
   threads), local with one BLAS thread, local on 2 loky processes (n_jobs=2), and under
   ``joblib.parallel_backend("dask")`` on a LocalCluster with 1 worker process x 2 threads
   and with 2 worker processes x 1 thread (Dask's nanny gives each one BLAS thread).  Two
   workloads: many light fits (N_train = 800) and fewer heavy ones (N_train = 1600).  The
   best parameters and the mean CV scores must agree across the runs.
   joblib runs a search with a single slot in the calling process (no Dask), so the 1-worker
   cluster has 2 threads; the Dask overhead is the idle slot time (2 x wall minus the
   workers' busy time, from the task stream), per fit.
2. M3LAK chains (hybrid sampler, digits 3 vs 5): sequential (cores=1), local processes
   (cores=2) and ``bayesmv.distributed.sample_chains`` on 2 Dask workers; the draws must be
   identical.

The machine has 2 cores, so 2 is the most any of these can gain.  Run under the CPU lock:
``flock /tmp/bayesmv-cpu.lock python benchmarks/distributed.py | tee
benchmarks/results/distributed.txt``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this file's folder heads sys.path and this file (distributed.py) would
# shadow the dask.distributed package; the working tree's bayesmv goes first instead of an
# installed copy.  Dask's worker processes inherit this sys.path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import logging  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import joblib  # noqa: E402
import numpy as np  # noqa: E402
from distributed import Client, LocalCluster, get_task_stream  # noqa: E402
from sklearn.model_selection import GridSearchCV, StratifiedKFold, train_test_split  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from bayesmv import M3LAK, RhoTMVRKM  # noqa: E402
from bayesmv.datasets import load_multiple_features  # noqa: E402
from bayesmv.distributed import relax_malloc_trimming, sample_chains  # noqa: E402

CLUSTER = dict(threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
               silence_logs=logging.ERROR)


def _search(X, y, sizes, grid, folds):
    cv = StratifiedKFold(folds, shuffle=True, random_state=0)
    return GridSearchCV(RhoTMVRKM(view_sizes=sizes), grid, cv=cv,
                        scoring=["accuracy", "neg_log_loss"], refit="neg_log_loss", n_jobs=-1)


def _timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def _start_cluster(workers: int, threads: int = 1, relax_malloc: bool = False):
    cluster = LocalCluster(n_workers=workers, **dict(CLUSTER, threads_per_worker=threads))
    client = Client(cluster)
    client.run(lambda: __import__("bayesmv"))  # import once on the workers, before timing
    if relax_malloc:
        client.run(relax_malloc_trimming)
    return cluster, client


def _fit_local(search, X, y, one_blas_thread: bool, n_jobs: int = 1):
    search.set_params(n_jobs=n_jobs)
    if not one_blas_thread:
        return search.fit(X, y)
    with threadpool_limits(limits=1):
        return search.fit(X, y)


def _fit_on_dask(search, X, y, client):
    """The search under joblib's Dask back-end, and the workers' busy seconds."""
    with get_task_stream(client) as stream, joblib.parallel_backend("dask"):
        search.fit(X, y)
    busy = sum(s["stop"] - s["start"] for task in stream.data for s in task["startstops"]
               if s["action"] == "compute")
    return search, busy


def _emit(lines: list[str], *new: str) -> None:
    lines.extend(new)
    print("\n".join(new), flush=True)


def grid_benchmark(lines: list[str]) -> None:
    views, y = load_multiple_features()
    X = np.hstack(views)
    sizes = tuple(v.shape[1] for v in views)
    workloads = [
        ("light", 1000, 5, {"rho": [0.0, 0.25, 0.5, 0.75, 1.0], "alpha": [1e-3, 1e-2, 1e-1, 1.0],
                            "gamma": ["scale"]}),
        ("heavy", 2000, 5, {"rho": [0.0, 0.5, 1.0], "alpha": [1e-2, 1e-1], "gamma": ["scale"]}),
    ]
    header = (f"{'workload':<8} {'N_train':>7} {'fits':>5}  {'run':<36} {'wall s':>7} "
              f"{'ms/fit':>7} {'x n_jobs1':>8} {'x 1 thr':>8}  same result")
    _emit(lines, "1. RhoTMVRKM GridSearchCV on UCI Multiple Features (10 digits, 6 views, "
          "5-fold CV, scores: accuracy and log loss)", header, "-" * len(header))
    # start loky's two worker processes (and import bayesmv there) outside the timings, as
    # the Dask clusters are started outside them
    joblib.Parallel(n_jobs=2)(joblib.delayed(__import__)("bayesmv") for _ in range(4))
    for name, n, folds, grid in workloads:
        if n < y.size:
            Xs, _, ys, _ = train_test_split(X, y, train_size=n, stratify=y, random_state=0)
        else:
            Xs, ys = X, y
        n_fits = folds * int(np.prod([len(v) for v in grid.values()]))
        runs = {
            "local, n_jobs=1": _timed(_fit_local, _search(Xs, ys, sizes, grid, folds), Xs, ys,
                                      False),
            "local, n_jobs=1, 1 BLAS thr": _timed(_fit_local, _search(Xs, ys, sizes, grid,
                                                                      folds), Xs, ys, True),
            "local, n_jobs=2 (loky)": _timed(_fit_local, _search(Xs, ys, sizes, grid, folds),
                                             Xs, ys, False, 2),
        }
        # joblib runs a search with one slot (1 worker x 1 thread) in the calling process,
        # without Dask, so the 1-worker cluster gets 2 threads (each fit single-threaded BLAS)
        busy, starts = {}, {}
        for workers, threads, relax in ((1, 2, False), (2, 1, False), (2, 1, True)):
            label = f"dask, {workers} worker(s) x {threads} thr" + (", relaxed" if relax else "")
            (cluster, client), starts[label] = _timed(_start_cluster, workers, threads, relax)
            try:
                (search, busy[label]), wall = _timed(
                    _fit_on_dask, _search(Xs, ys, sizes, grid, folds), Xs, ys, client)
                runs[label] = (search, wall)
            finally:
                client.close()
                cluster.close()
        ref, ref_s = runs["local, n_jobs=1"]
        one_s = runs["local, n_jobs=1, 1 BLAS thr"][1]
        for label, (search, wall) in runs.items():
            same = (search.best_params_ == ref.best_params_ and all(
                np.allclose(search.cv_results_[k], ref.cv_results_[k], rtol=1e-9)
                for k in ("mean_test_accuracy", "mean_test_neg_log_loss")))
            _emit(lines, f"{name:<8} {int(n * (folds - 1) / folds):>7} {n_fits:>5}  "
                  f"{label:<36} {wall:>7.2f} {1000 * wall / n_fits:>7.1f} {ref_s / wall:>8.2f} "
                  f"{one_s / wall:>8.2f}  {'yes' if same else 'NO'}")
        for label, seconds in busy.items():
            # two task slots: idle slot time (scheduling, transfers, the last straggling task)
            idle = 2 * runs[label][1] - seconds
            _emit(lines, f"{'':<8} {label}: workers busy {1000 * seconds / n_fits:.1f} ms/fit "
                  f"(local 1 thread: {1000 * one_s / n_fits:.1f}), idle slot time "
                  f"{1000 * idle / n_fits:.1f} ms/fit; cluster start {starts[label]:.1f} s "
                  "(not counted)")
        _emit(lines,
              f"{'':<8} best: {ref.best_params_}, CV accuracy "
              f"{ref.cv_results_['mean_test_accuracy'][ref.best_index_]:.4f}")


def chains_benchmark(lines: list[str]) -> None:
    views, y = load_multiple_features(classes=(3, 5))
    params = dict(latent_dim=10, n_frequencies=50, draws=300, tune=300, chains=2, random_seed=0)
    header = f"{'run':<40} {'wall s':>7} {'speed-up':>8}  draws identical to cores=1"
    _emit(lines, "", "2. M3LAK chains (hybrid sampler, digits 3 vs 5, N = 400, 6 views, "
          "300 + 300 draws per chain, 2 chains)", header, "-" * len(header))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # warm-up: imports and PyTensor's compilation cache, so no row pays them alone
        M3LAK(**dict(params, draws=5, tune=5, cores=1)).fit(views, y)
        seq, seq_s = _timed(M3LAK(cores=1, **params).fit, views, y)
        par, par_s = _timed(M3LAK(cores=2, **params).fit, views, y)
        (cluster, client), start_s = _timed(_start_cluster, 2)
        try:
            dist, dist_s = _timed(sample_chains, M3LAK(**params), views, y, client)
        finally:
            client.close()
            cluster.close()
    ref = seq.idata_.posterior
    for label, est, wall in [("local, sequential (cores=1)", seq, seq_s),
                             ("local, one process per chain (cores=2)", par, par_s),
                             ("sample_chains on 2 Dask workers", dist, dist_s)]:
        post = est.idata_.posterior
        same = all(np.array_equal(post[v].values, ref[v].values) for v in ref.data_vars)
        _emit(lines, f"{label:<40} {wall:>7.2f} {seq_s / wall:>8.2f}  "
              f"{'yes' if same else 'NO'}")
    chain_s = dist.idata_.posterior.attrs["chain_seconds"]
    _emit(lines, f"(per-chain task time on the workers, model build and compilation included: "
          f"{', '.join(f'{s:.1f}' for s in chain_s)} s; cluster start {start_s:.1f} s, "
          "not counted)")


def main() -> None:
    lines: list[str] = []
    _emit(lines, f"bayesmv scale-out benchmark ({platform.machine()}, {os.cpu_count()} CPUs; "
          "LocalCluster: worker processes on loopback, threads as labelled)", "")
    grid_benchmark(lines)
    chains_benchmark(lines)
    _emit(lines, "", "ms/fit = wall / fits; 'x n_jobs1' and 'x 1 thr': speed-up against the "
          "local n_jobs=1 run with default / one BLAS thread(s); chains: against cores=1.  "
          "'same result': best parameters and mean CV scores (or all draws) equal to the "
          "reference run.  'relaxed': client.run(relax_malloc_trimming) on the workers (Dask "
          "starts them with MALLOC_TRIM_THRESHOLD_=65536, which makes every array above 128 KiB "
          "a fresh mmap); sample_chains does this per chain task by itself.")


if __name__ == "__main__":
    main()
