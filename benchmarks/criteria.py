"""Presets' default fits against the composed estimator choosing by a registered criterion.

ϱTMV-RKM chooses its widths, ϱ and λ (and its temperature slope) by the exact leave-one-out
criterion inside ``fit``; MVL-SVM its hinge cost C and its probability's constant by the
stratified out-of-fold log-likelihood; MVML its metric by its objective and its temperature
slope by the exact leave-one-out predictive given the metric.  The composed estimator does
the same through the criterion strategies of :mod:`bayesmv.inference.selection`, starting
from the preset's builder with those settings left free::

    MultiViewClassifier(RhoTMVRKM().make_builder(kernels, [None] * V, None, None,
                                                 decision_rule="add"),
                        inference="map", criterion="loo", random_seed=s)
    MultiViewClassifier(MVLSVM(random_seed=s).make_builder(N), inference="map",
                        criterion="heldout", random_seed=s)
    MultiViewClassifier(MVML(random_seed=s).make_builder(), inference="exact",
                        criterion="loo", random_seed=s, max_iter=100, tol=1e-4)

MVML's composed fit takes the exact engine's posterior from the strategy registered for a
fixed block metric (one factor per task, no Hessian); a composition an engine refuses would
print the engine's reason in its row.

Printed per split: both fits' seconds (the composed one builds and compiles the graph), the
largest difference of their test probabilities (the same fit: rounding only) and the
composed fit's test accuracy.

Run:  python benchmarks/criteria.py                          (about 3 minutes on 2 cores)
      python benchmarks/criteria.py --tasks 3v5 --seeds 100
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from rhotmvrkm import OTHER_TASKS, TASKS, scores, task_splits

from bayesmv import MVLSVM, MVML, MultiViewClassifier, RhoTMVRKM


def timed(estimator, X, y):
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        estimator.fit(X, y)
    return estimator, time.perf_counter() - start


def pairs(seed: int, n_views: int, n_rows: int):
    """(name, preset, composed) of each preset whose default selection a criterion serves."""
    yield ("RhoTMVRKM", RhoTMVRKM(random_seed=seed),
           MultiViewClassifier(RhoTMVRKM().make_builder(["rbf"] * n_views, [None] * n_views,
                                                        None, None, decision_rule="add"),
                               inference="map", criterion="loo", random_seed=seed))
    yield ("MVLSVM", MVLSVM(random_seed=seed),
           MultiViewClassifier(MVLSVM(random_seed=seed).make_builder(n_rows), inference="map",
                               criterion="heldout", random_seed=seed))
    mvml = MVML(random_seed=seed)
    yield ("MVML", mvml,
           MultiViewClassifier(mvml.make_builder(), inference="exact", criterion="loo",
                               random_seed=seed, max_iter=mvml.max_iter, tol=mvml.tol))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["3v5", "digits10", "breast-cancer"],
                        choices=TASKS + OTHER_TASKS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[100, 101])
    args = parser.parse_args()
    print(f"{'task':14s} {'seed':>4s}  {'preset':10s} {'preset s':>8s} {'composed s':>10s} "
          f"{'max |dp|':>9s} {'acc':>7s}  criterion")
    for task, seed, X, y, Xt, yt in task_splits(args.tasks, args.seeds):
        for name, preset, composed in pairs(seed, len(X), len(y)):
            preset, s_preset = timed(preset, X, y)
            try:
                composed, s_composed = timed(composed, X, y)
            except ValueError as err:  # the exact engine's size limit
                reason = str(err).rsplit(": ", 1)[-1][:-1]  # the engine's own words
                print(f"{task:14s} {seed:4d}  {name:10s} {s_preset:8.2f}  composed refused: "
                      f"{reason}", flush=True)
                continue
            proba = composed.predict_proba(Xt)
            gap = float(np.max(np.abs(proba - preset.predict_proba(Xt))))
            acc = scores(yt, proba, composed.classes_)["acc"]
            print(f"{task:14s} {seed:4d}  {name:10s} {s_preset:8.2f} {s_composed:10.2f} "
                  f"{gap:9.1e} {acc:7.4f}  {composed.idata_.posterior.attrs['criterion']}",
                  flush=True)


if __name__ == "__main__":
    main()
