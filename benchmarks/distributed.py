"""Scale-out benchmark: model selection and MCMC chains on a dask.distributed cluster.

1. A ϱTMV-RKM grid search (GridSearchCV) on UCI Multiple Features (all ten digits, six
   views), run four ways in the same process and splits: plain local (n_jobs=1, default BLAS
   threads), local with one BLAS thread, and under ``joblib.parallel_backend("dask")`` on a
   LocalCluster with 1 and with 2 single-threaded worker processes.  Two workloads: many light
   fits (N_train = 800) and fewer heavy ones (N_train = 1600).  The best parameters and every
   CV score must agree across the four runs.
2. M3LAK chains (hybrid sampler, digits 3 vs 5): sequential (cores=1), local processes
   (cores=2) and ``bayesmv.distributed.sample_chains`` on 2 Dask workers; the draws must be
   identical.

The machine has 2 cores, so 2 is the most any of these can gain.  Run under the CPU lock:
``flock /tmp/bayesmv-cpu.lock python benchmarks/distributed.py``.  Output:
benchmarks/results/distributed.txt.
"""

from __future__ import annotations

import logging
import os
import platform
import time
import warnings
from pathlib import Path

import joblib
import numpy as np
from distributed import Client, LocalCluster
from sklearn.model_selection import GridSearchCV, StratifiedKFold, train_test_split
from threadpoolctl import threadpool_limits

from bayesmv import M3LAK, RhoTMVRKM
from bayesmv.datasets import load_multiple_features
from bayesmv.distributed import sample_chains

OUT = Path(__file__).parent / "results" / "distributed.txt"
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


def _start_cluster(workers: int):
    cluster = LocalCluster(n_workers=workers, **CLUSTER)
    client = Client(cluster)
    client.run(lambda: __import__("bayesmv"))  # import once on the workers, before timing
    return cluster, client


def _fit_local(search, X, y, one_blas_thread: bool):
    search.set_params(n_jobs=1)
    if not one_blas_thread:
        return search.fit(X, y)
    with threadpool_limits(limits=1):
        return search.fit(X, y)


def _fit_on_dask(search, X, y):
    with joblib.parallel_backend("dask"):
        return search.fit(X, y)


def grid_benchmark(lines: list[str]) -> None:
    views, y = load_multiple_features()
    X = np.hstack(views)
    sizes = tuple(v.shape[1] for v in views)
    workloads = [
        ("light", 1000, 5, {"rho": [0.0, 0.25, 0.5, 0.75, 1.0], "lam": [1e-3, 1e-2, 1e-1, 1.0],
                            "gamma": ["scale", 0.005]}),
        ("heavy", 2000, 5, {"rho": [0.0, 0.5, 1.0], "lam": [1e-2, 1e-1], "gamma": ["scale"]}),
    ]
    lines.append("1. RhoTMVRKM GridSearchCV on UCI Multiple Features (10 digits, 6 views, "
                 "scores: accuracy and log loss)")
    header = (f"{'workload':<8} {'N_train':>7} {'fits':>5}  {'run':<28} {'wall s':>7} "
              f"{'ms/fit':>7} {'speed-up':>8}  same result")
    lines += [header, "-" * len(header)]
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
        }
        for workers in (1, 2):
            (cluster, client), start_s = _timed(_start_cluster, workers)
            try:
                runs[f"dask, {workers} worker(s)"] = _timed(
                    _fit_on_dask, _search(Xs, ys, sizes, grid, folds), Xs, ys)
            finally:
                client.close()
                cluster.close()
            lines.append(f"{'':<8} {'':>7} {'':>5}  (LocalCluster with {workers} worker(s) "
                         f"started in {start_s:.1f} s, not counted)")
        ref, ref_s = runs["local, n_jobs=1"]
        for label, (search, wall) in runs.items():
            same = (search.best_params_ == ref.best_params_ and all(
                np.allclose(search.cv_results_[k], ref.cv_results_[k], rtol=1e-9)
                for k in ("mean_test_accuracy", "mean_test_neg_log_loss")))
            lines.append(f"{name:<8} {int(n * (folds - 1) / folds):>7} {n_fits:>5}  {label:<28} "
                         f"{wall:>7.2f} {1000 * wall / n_fits:>7.1f} {ref_s / wall:>8.2f}  "
                         f"{'yes' if same else 'NO'}")
        lines.append(f"{'':<8} best: {ref.best_params_}, CV accuracy "
                     f"{ref.cv_results_['mean_test_accuracy'][ref.best_index_]:.4f}")
        print("\n".join(lines[-8:]), flush=True)


def chains_benchmark(lines: list[str]) -> None:
    views, y = load_multiple_features(classes=(3, 5))
    params = dict(latent_dim=10, n_features=50, draws=300, tune=300, chains=2, random_seed=0)
    lines += ["", "2. M3LAK chains (hybrid sampler, digits 3 vs 5, N = 400, 6 views, "
              "300 + 300 draws per chain, 2 chains)"]
    header = f"{'run':<40} {'wall s':>7} {'speed-up':>8}  draws identical to cores=1"
    lines += [header, "-" * len(header)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
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
        lines.append(f"{label:<40} {wall:>7.2f} {seq_s / wall:>8.2f}  {'yes' if same else 'NO'}")
    chain_s = dist.idata_.posterior.attrs["chain_seconds"]
    lines.append(f"(per-chain task time on the workers, model build and compilation included: "
                 f"{', '.join(f'{s:.1f}' for s in chain_s)} s; cluster start {start_s:.1f} s, "
                 "not counted)")
    print("\n".join(lines[-6:]), flush=True)


def main() -> None:
    lines = [f"bayesmv scale-out benchmark ({platform.machine()}, {os.cpu_count()} CPUs; "
             "LocalCluster workers: processes, 1 thread each, loopback)", ""]
    grid_benchmark(lines)
    chains_benchmark(lines)
    lines += ["", "ms/fit = wall / fits; speed-up against the first row of its block.  "
              "'same result': best parameters and mean CV scores (or all draws) equal to the "
              "reference run."]
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print(f"\nwritten to {OUT}")


if __name__ == "__main__":
    main()
