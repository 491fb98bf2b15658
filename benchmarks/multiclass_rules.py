"""MVM or M3LAK on all ten UCI digits: one seeded fit per split, scored by two multi-class rules.

"one-hot" (the default: MVM's since stop 25, M3LAK's since stop 47): at each posterior draw
(MVM: each mode), the likelihood of each one-hot label normalised over the classes (the
softmax of the one-vs-rest log-odds), then averaged; "positive normalised" (before): each
task's positive probability averaged over the draws, then normalised over the classes.
Splits: StratifiedShuffleSplit 80/20, seeds 100-104 (as benchmarks/defaults.py).  MVM is fitted
with ``random_seed=0`` (the recorded run), M3LAK with the split's seed (as defaults.py, whose
M3LAK rows are then the "one-hot" rows here); both rules score the same fits.

    python benchmarks/multiclass_rules.py                    # MVM, about 8 minutes on 2 cores
    python benchmarks/multiclass_rules.py --estimator M3LAK  # about 11 minutes a split
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from rhotmvrkm import scores, task_splits

from bayesmv import M3LAK, MVM
from bayesmv.components.likelihoods import class_probabilities, log_hinge_probability

METRICS = ("acc", "brier", "ece", "log_loss")
RULES = ("one-hot (default)", "positive normalised")


def _positive_log_probabilities(est, X) -> np.ndarray:
    """``log p(y_t = +1 | draw)`` of every task at every draw: (n_draws, n, T)."""
    if isinstance(est, M3LAK):
        f = est._latent_draw_f(X)  # (draws, h* draws, n, T)
        return log_hinge_probability(f.reshape(-1, *f.shape[-2:]), est.C)
    return est._log_probability(est._predictive_f(X))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--estimator", choices=("MVM", "M3LAK"), default="MVM")
    parser.add_argument("--seeds", nargs="+", type=int, default=[100, 101, 102, 103, 104])
    args = parser.parse_args()
    results: dict[str, list[dict]] = {name: [] for name in RULES}
    for _, seed, Xtr, ytr, Xte, yte in task_splits(["digits10"], args.seeds):
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = (M3LAK(random_seed=seed) if args.estimator == "M3LAK"
                   else MVM(random_seed=0)).fit(Xtr, ytr)
        fit_s = time.perf_counter() - start
        rules = dict(zip(RULES, (est.predict_proba(Xte), class_probabilities(
            _positive_log_probabilities(est, Xte), axis=0)), strict=True))
        for name, proba in rules.items():
            results[name].append(scores(yte, proba, est.classes_))
            cells = "  ".join(f"{m} {results[name][-1][m]:.4f}" for m in METRICS)
            print(f"seed {seed}  {name:20s} {cells}  fit {fit_s:.0f}s", flush=True)
    print(f"\n{args.estimator}: means over seeds {args.seeds}")
    for name, rows in results.items():
        cells = "  ".join(f"{m} {np.mean([r[m] for r in rows]):.4f}" for m in METRICS)
        print(f"{name:20s} {cells}")


if __name__ == "__main__":
    main()
