"""MVM on all ten UCI digits: one seeded fit per split, scored by two multi-class rules.

"one-hot" (the default since stop 25): at each mode, the likelihood of each one-hot label
normalised over the classes (the softmax of the one-vs-rest log-odds), then averaged;
"positive normalised" (before): each task's positive probability averaged over the modes, then
normalised over the classes.  Splits: StratifiedShuffleSplit 80/20, seeds 100-104 (as
benchmarks/defaults.py); ``MVM(random_seed=0)``, so both rules score the same fits.

    python benchmarks/mvm_multiclass_rules.py          (about 8 minutes on 2 slow cores)
"""

from __future__ import annotations

import warnings

import numpy as np
from rhotmvrkm import scores, task_splits

from bayesmv import MVM
from bayesmv.components.likelihoods import class_probabilities

METRICS = ("acc", "brier", "ece", "log_loss")


def main() -> None:
    results: dict[str, list[dict]] = {"one-hot (default)": [], "positive normalised": []}
    for _, seed, Xtr, ytr, Xte, yte in task_splits(["digits10"], [100, 101, 102, 103, 104]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = MVM(random_seed=0).fit(Xtr, ytr)
        f = est._predictive_f(Xte)
        rules = {"one-hot (default)": est.predict_proba(Xte),
                 "positive normalised": class_probabilities(est._log_probability(f), axis=0)}
        for name, proba in rules.items():
            results[name].append(scores(yte, proba, est.classes_))
            cells = "  ".join(f"{m} {results[name][-1][m]:.4f}" for m in METRICS)
            print(f"seed {seed}  {name:20s} {cells}", flush=True)
    print("\nmeans over seeds 100-104")
    for name, rows in results.items():
        cells = "  ".join(f"{m} {np.mean([r[m] for r in rows]):.4f}" for m in METRICS)
        print(f"{name:20s} {cells}")


if __name__ == "__main__":
    main()
