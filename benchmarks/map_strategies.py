"""The MAP engine's registered solvers against its generic L-BFGS-B, on one graph each.

Two compositions whose mode a registered strategy finds:

* ``metric``: ``MultiViewClassifier(MVML().make_builder(), inference="map")``, a learned
  block metric (and weights g) by MVML's alternating solver (exact g-steps and metric updates,
  to the engine's ``tol`` and ``max_iter``);
* ``process``: ϱTMV-RKM's Gaussian process with every hyper-parameter free
  (``RhoTMVRKM().make_builder(["rbf"] * V, [None] * V, None, None)``), by the closed-form
  evidence with the bias at its maximum and its analytic gradient.

Each fit is run a second time with that strategy removed, so the engine's generic L-BFGS-B
(best of ``n_init`` dispersed starts) works on the same compiled log density.  Printed per
split: fit seconds, the log density reached (higher is better: both maximise the same
function) and test accuracy; then the means.

Tasks: UCI digit pairs and breast cancer as three views, 80/20 stratified splits
(``benchmarks/rhotmvrkm.py``'s ``task_splits``).

Run:  python benchmarks/map_strategies.py                   (about 20 minutes on 2 cores)
      python benchmarks/map_strategies.py --part metric --tasks 3v5 --seeds 100
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from rhotmvrkm import OTHER_TASKS, TASKS, scores, task_splits

import bayesmv.inference.engines as engines
from bayesmv import MVML, MultiViewClassifier, RhoTMVRKM

PARTS = {
    "metric": (lambda n_views: MVML().make_builder(), "_metric_map"),
    "process": (lambda n_views: RhoTMVRKM().make_builder(["rbf"] * n_views, [None] * n_views,
                                                        None, None), "_process_evidence_map"),
}


def fit(builder, X, y, Xt, yt, strategies) -> dict:
    saved = list(engines.MAP_STRATEGIES)
    engines.MAP_STRATEGIES[:] = strategies
    try:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # L-BFGS-B's max_iter warning is reported below
            est = MultiViewClassifier(builder, inference="map", random_seed=0).fit(X, y)
        seconds = time.perf_counter() - start
    finally:
        engines.MAP_STRATEGIES[:] = saved
    attrs = est.idata_.posterior.attrs
    return {"solver": attrs["solver"], "s": seconds, "logp": float(attrs["map_logp"]),
            "acc": scores(yt, est.predict_proba(Xt), est.classes_)["acc"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", nargs="+", default=list(PARTS), choices=list(PARTS))
    parser.add_argument("--tasks", nargs="+", default=None, choices=TASKS + OTHER_TASKS,
                        help="default: 3v5 1v7 6v9 breast-cancer (metric), 3v5 1v7 (process)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[100, 101])
    args = parser.parse_args()
    defaults = {"metric": ["3v5", "1v7", "6v9", "breast-cancer"], "process": ["3v5", "1v7"]}
    for part in args.part:
        make_builder, name = PARTS[part]
        generic = [s for s in engines.MAP_STRATEGIES if s.__name__ != name]
        rows = []
        print(f"\n{part}\n{'task':14s} seed  solver                   s   log density  accuracy")
        for task, seed, X, y, Xt, yt in task_splits(args.tasks or defaults[part], args.seeds):
            builder = make_builder(len(X))
            for strategies in (list(engines.MAP_STRATEGIES), generic):
                row = {"task": task, "seed": seed, **fit(builder, X, y, Xt, yt, strategies)}
                rows.append(row)
                print(f"{task:14s} {seed:4d}  {row['solver']:20s} {row['s']:6.1f} "
                      f"{row['logp']:13.2f}  {row['acc']:.4f}", flush=True)
        print("means over the splits")
        for solver in (name.strip("_"), "lbfgs"):
            part_rows = [r for r in rows if r["solver"] == solver]
            print(f"{solver:20s} s {np.mean([r['s'] for r in part_rows]):6.1f}  "
                  f"accuracy {np.mean([r['acc'] for r in part_rows]):.4f}")
        pairs = zip(rows[0::2], rows[1::2], strict=True)
        print(f"log density higher with {name.strip('_')} on "
              f"{sum(a['logp'] > b['logp'] for a, b in pairs)} of {len(rows) // 2} splits")


if __name__ == "__main__":
    main()
