"""MVL-SVM on the UCI Multiple Features digits (2000 rows, 10 classes, 6 views).

1. Complete views, L in {10, 50, 200} landmarks: test accuracy of the MAP (the SVM) against
   LinearSVC (liblinear, hinge loss, same landmark features, its bias penalised) and an RBF SVC
   on the concatenated standardised views, on the same stratified 80/20 splits; C (and the RBF
   width) by 3-fold CV on the training part.  Fit times: the MAP solve against liblinear on
   the same features at the same C, and the estimator's whole fit (standardising, landmarks,
   features, solve).
2. The Gibbs posterior (Polson-Scott augmentation) at L in {10, 50}: accuracy, log loss,
   time and diagnostics next to the MAP.
3. Missing views: a fraction of the (sample, view) slots of the training and test rows
   removed at random (every row keeps one view); as in the paper's protocol the L landmark
   candidates stay complete (L random training rows keep every view).  Accuracy with eq. 11
   imputation, the probabilistic version (MAP), zero similarities (no imputation), and
   dropping the incomplete training rows (test rows then imputed by eq. 11).

Run:  python benchmarks/mvlsvm.py            (about 10 minutes on 2 cores)
      python benchmarks/mvlsvm.py --quick    (one split, shorter chains)
Writes benchmarks/results/mvlsvm.txt.
"""

from __future__ import annotations

import argparse
import io
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning as SkConvergenceWarning
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC, LinearSVC

from bayesmv import MVLSVM
from bayesmv.data import label_tasks
from bayesmv.datasets import load_multiple_features
from bayesmv.diagnostics import ConvergenceWarning
from bayesmv.inference.svm import fit_svm_map

C_GRID = (1e1, 1e2, 1e3, 1e4, 1e5)
LANDMARKS = (10, 50, 200)


def timed(fn, *args, repeats: int = 3) -> tuple[float, object]:
    """Median wall time of ``repeats`` calls ``fn(*args)``, and the last result."""
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn(*args)
        times.append(time.perf_counter() - start)
    return float(np.median(times)), out


def log_loss(proba: np.ndarray, y: np.ndarray) -> float:
    return float(-np.mean(np.log(np.clip(proba[np.arange(y.size), y], 1e-12, None))))


def drop_views(views, frac, rng, keep=()):
    n, V = views[0].shape[0], len(views)
    miss = rng.uniform(size=(n, V)) < frac
    none = miss.all(axis=1)
    miss[none, rng.integers(0, V, none.sum())] = False
    miss[np.asarray(keep, dtype=int)] = False
    return [np.where(miss[:, [v]], np.nan, X) for v, X in enumerate(views)], miss


def complete_views(views, y, sizes, seeds, out):
    print("1. Complete views: test accuracy and fit time (seconds, median of 3)", file=out)
    header = (f"{'split':>5} {'L':>4} {'C':>7} {'MVL-SVM':>8} {'LinSVC':>7} {'RBF SVC':>8} "
              f"{'MAP solve':>10} {'liblinear':>10} {'ratio':>6} {'MVL fit':>8} "
              f"{'LinSVC C':>9}")
    print(header + "\n" + "-" * len(header), file=out, flush=True)
    rows, chosen = [], {}
    for seed in seeds:
        split = train_test_split(*views, y, test_size=0.2, stratify=y, random_state=seed)
        Xtr, Xte = split[0:-2:2], split[1:-2:2]
        ytr, yte = split[-2], split[-1]
        N = ytr.size
        targets = label_tasks(ytr, 10)
        concat_tr, concat_te = np.hstack(Xtr), np.hstack(Xte)
        D = concat_tr.shape[1]
        rbf = GridSearchCV(make_pipeline(StandardScaler(), SVC()),
                           {"svc__C": [1, 10, 100],
                            "svc__gamma": [g / D for g in (0.3, 1, 3)]}, cv=3).fit(concat_tr, ytr)
        rbf_acc = rbf.score(concat_te, yte)
        for L in LANDMARKS:
            cv = GridSearchCV(MVLSVM(n_landmarks=L, random_seed=seed, view_sizes=sizes),
                              {"C": list(C_GRID)}, cv=3).fit(concat_tr, ytr)
            C = cv.best_params_["C"]
            chosen[(seed, L)] = C
            est = MVLSVM(n_landmarks=L, C=C, random_seed=seed)
            fit_s, est = timed(est.fit, Xtr, ytr)
            acc = est.score(Xte, yte)
            Ptr, Pte = est.transform(Xtr), est.transform(Xte)
            solve_s, _ = timed(fit_svm_map, Ptr, targets, C / N)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SkConvergenceWarning)
                lin_s, _ = timed(LinearSVC(C=C / N, loss="hinge", max_iter=10000).fit,
                                 Ptr, ytr)
                lin = GridSearchCV(LinearSVC(loss="hinge", max_iter=10000),
                                   {"C": [c / N for c in C_GRID]}, cv=3).fit(Ptr, ytr)
            lin_acc = lin.score(Pte, yte)
            rows.append((seed, L, C, acc, lin_acc, rbf_acc, solve_s, lin_s, fit_s))
            print(f"{seed:>5} {L:>4} {C:>7.0e} {acc:>8.4f} {lin_acc:>7.4f} {rbf_acc:>8.4f} "
                  f"{solve_s:>10.3f} {lin_s:>10.3f} {solve_s / lin_s:>6.2f} {fit_s:>8.3f} "
                  f"{lin.best_params_['C'] * N:>9.0e}", file=out, flush=True)
    print("-" * len(header), file=out)
    rows = np.array(rows, dtype=float)
    for L in LANDMARKS:
        r = rows[rows[:, 1] == L]
        print(f"{'mean':>5} {L:>4} {'':>7} {r[:, 3].mean():>8.4f} {r[:, 4].mean():>7.4f} "
              f"{r[:, 5].mean():>8.4f} {r[:, 6].mean():>10.3f} {r[:, 7].mean():>10.3f} "
              f"{(r[:, 6] / r[:, 7]).mean():>6.2f} {r[:, 8].mean():>8.3f}", file=out)
    print("ratio = MAP solve / liblinear on the same features at the same C/N; MVL fit = the "
          "whole MVLSVM.fit; LinSVC C = its own CV choice (x N).\n", file=out, flush=True)
    return chosen


def gibbs_section(views, y, chosen, draws, out):
    print(f"2. Gibbs posterior (split 0, {draws} + {draws} draws x 2 chains in parallel) "
          "next to the MAP, at the CV choice of C and at C = 100", file=out)
    header = (f"{'L':>4} {'C':>7} {'inference':>9} {'acc':>7} {'log loss':>9} {'fit s':>7} "
              f"{'max R-hat':>10} {'min ESS':>8} {'median ESS':>11}")
    print(header + "\n" + "-" * len(header), file=out, flush=True)
    split = train_test_split(*views, y, test_size=0.2, stratify=y, random_state=0)
    Xtr, Xte = split[0:-2:2], split[1:-2:2]
    ytr, yte = split[-2], split[-1]
    for L in (10, 50):
        for C in sorted({chosen[(0, L)], 1e2}, reverse=True):
            for inference in ("map", "gibbs"):
                est = MVLSVM(n_landmarks=L, C=C, inference=inference, draws=draws,
                             tune=draws, chains=2, random_seed=0)
                start = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    est.fit(Xtr, ytr)
                seconds = time.perf_counter() - start
                proba = est.predict_proba(Xte)
                acc = float(np.mean(est.classes_[proba.argmax(1)] == yte))
                table = est.convergence_.table
                diag = (f"{table['r_hat'].max():>10.3f} {table['ess_bulk'].min():>8.0f} "
                        f"{table['ess_bulk'].median():>11.0f}" if len(table) else "")
                print(f"{L:>4} {C:>7.0e} {inference:>9} {acc:>7.4f} "
                      f"{log_loss(proba, np.searchsorted(est.classes_, yte)):>9.4f} "
                      f"{seconds:>7.1f} {diag}", file=out, flush=True)
    print("Diagnostics on f (at <= 1000 points x tasks), the biases and lp.  Probabilities: "
          "the normalised hinge pseudo-likelihood exp(-(C/N) hinge), posterior-averaged.\n",
          file=out, flush=True)


def missing_section(views, y, chosen, L, repeats, out):
    C = chosen[(0, L)]
    print(f"3. Missing views (split 0, L = {L}, C = {C:.0e}, mean of {repeats} draws of the "
          "missing slots)", file=out)
    header = (f"{'missing':>7} {'actual':>7} {'complete':>9} {'eq. 11':>8} {'bayes':>8} "
              f"{'zero':>8} {'drop rows':>10}")
    print(header + "\n" + "-" * len(header), file=out, flush=True)
    split = train_test_split(*views, y, test_size=0.2, stratify=y, random_state=0)
    Xtr, Xte = split[0:-2:2], split[1:-2:2]
    ytr, yte = split[-2], split[-1]
    for frac in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5):
        res = []
        for rep in range(repeats):
            rng = np.random.default_rng(100 + rep)
            keep = rng.choice(ytr.size, L, replace=False)
            Mtr, miss = drop_views(Xtr, frac, rng, keep=keep)
            Mte, miss_te = drop_views(Xte, frac, rng)
            accs = [MVLSVM(n_landmarks=L, C=C, impute=imp, random_seed=rep).fit(Mtr, ytr)
                    .score(Mte, yte) for imp in ("landmarks", "bayes", "zero")]
            complete = ~miss.any(axis=1)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # fewer complete rows than L
                dropped = MVLSVM(n_landmarks=L, C=C, random_seed=rep).fit(
                    [x[complete] for x in Mtr], ytr[complete]).score(Mte, yte)
            actual = (miss.sum() + miss_te.sum()) / (miss.size + miss_te.size)
            res.append([actual, complete.sum(), *accs, dropped])
        r = np.mean(res, axis=0)
        print(f"{frac:>7.1f} {r[0]:>7.3f} {r[1]:>9.0f} {r[2]:>8.4f} {r[3]:>8.4f} {r[4]:>8.4f} "
              f"{r[5]:>10.4f}", file=out, flush=True)
    print("actual = missing fraction of all slots; complete = complete training rows (of "
          f"{ytr.size}; {L} kept complete as landmark candidates).", file=out, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--output", default=str(Path(__file__).parent / "results" / "mvlsvm.txt"))
    args = parser.parse_args()
    splits = 1 if args.quick else args.splits
    views, y = load_multiple_features()
    sizes = tuple(v.shape[1] for v in views)

    class Tee(io.StringIO):
        def write(self, s):
            print(s, end="")
            return super().write(s)

    out = Tee()
    start = time.perf_counter()
    print(f"MVL-SVM benchmark: UCI Multiple Features, N = 2000, views {sizes}, "
          f"{splits} stratified 80/20 split(s)\n", file=out)
    chosen = complete_views(views, y, sizes, range(splits), out)
    gibbs_section(views, y, chosen, 150 if args.quick else 500, out)
    missing_section(views, y, chosen, 200, 1 if args.quick else 3, out)
    print(f"\ntotal {time.perf_counter() - start:.0f} s", file=out)
    if not args.quick:
        Path(args.output).write_text(out.getvalue())


if __name__ == "__main__":
    main()
