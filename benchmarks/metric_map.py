"""The composed MAP of a learned block metric: MVML's solver against L-BFGS-B, one graph.

``MultiViewClassifier(MVML().make_builder(), inference="map")`` learns the block metric (and
the weights g) by the graph's posterior mode.  The MAP engine runs the registered metric solver
(MVML's alternating exact g-steps and metric updates, to the engine's ``tol`` and
``max_iter``) where it serves the pieces; here the same fit is run a second time with that
strategy removed, so the engine's generic L-BFGS-B (best of ``n_init`` dispersed starts) works
on the same compiled log density.  Printed per split: fit seconds, the log density reached
(higher is better: both maximise the same function) and test accuracy; then the means.

Tasks: UCI digit pairs and breast cancer as three views, 80/20 stratified splits
(``benchmarks/rhotmvrkm.py``'s ``task_splits``).

Run:  python benchmarks/metric_map.py                      (about 5 minutes on 2 cores)
      python benchmarks/metric_map.py --tasks 3v5 --seeds 100
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from rhotmvrkm import OTHER_TASKS, TASKS, scores, task_splits

import bayesmv.inference.engines as engines
from bayesmv import MVML, MultiViewClassifier


def fit(X, y, Xt, yt, strategies) -> dict:
    saved = list(engines.MAP_STRATEGIES)
    engines.MAP_STRATEGIES[:] = strategies
    try:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # L-BFGS-B's max_iter warning is reported below
            est = MultiViewClassifier(MVML().make_builder(), inference="map",
                                      random_seed=0).fit(X, y)
        seconds = time.perf_counter() - start
    finally:
        engines.MAP_STRATEGIES[:] = saved
    attrs = est.idata_.posterior.attrs
    return {"solver": attrs["solver"], "s": seconds, "logp": float(attrs["map_logp"]),
            "acc": scores(yt, est.predict_proba(Xt), est.classes_)["acc"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["3v5", "1v7", "6v9", "breast-cancer"],
                        choices=TASKS + OTHER_TASKS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[100, 101])
    args = parser.parse_args()
    generic = [s for s in engines.MAP_STRATEGIES if s is not engines._metric_map]
    rows = []
    print(f"{'task':14s} seed  solver        s   log density  accuracy")
    for task, seed, X, y, Xt, yt in task_splits(args.tasks, args.seeds):
        for strategies in (list(engines.MAP_STRATEGIES), generic):
            row = {"task": task, "seed": seed, **fit(X, y, Xt, yt, strategies)}
            rows.append(row)
            print(f"{task:14s} {seed:4d}  {row['solver']:10s} {row['s']:6.1f} "
                  f"{row['logp']:13.2f}  {row['acc']:.4f}", flush=True)
    print("\nmeans over the splits")
    for solver in ("metric_map", "lbfgs"):
        part = [r for r in rows if r["solver"] == solver]
        print(f"{solver:10s} s {np.mean([r['s'] for r in part]):6.1f}  "
              f"accuracy {np.mean([r['acc'] for r in part]):.4f}")
    pairs = zip(rows[0::2], rows[1::2], strict=True)
    print("log density higher with the metric solver on "
          f"{sum(a['logp'] > b['logp'] for a, b in pairs)} of {len(rows) // 2} splits")


if __name__ == "__main__":
    main()
