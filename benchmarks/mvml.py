"""MVML (bayesmv) against scikit-multimodallearn's MVML on UCI Multiple Features.

Both implementations get the same kernels (RBF per view with γ_v = 1/D_v on views standardised
on the training rows — the reference applies one kernel parameter to every view, so its views
are pre-scaled by sqrt(γ_v)), the same Nyström subset (ours, moved to the first rows, which
the reference uses as its subset), the same λ = 0.1, η = 1 and the same splits.  Reference:
``multimodal.kernels.mvml.MVML(learn_A=1)`` (its defaults: 6 outer loops), wrapped in
scikit-learn's ``OneVsRestClassifier`` for 10 classes (it is binary only).  Both run with one
BLAS thread (on this 2-core machine two threads were slower for both), after one untimed
warm-up fit each.

Tasks
  1. digits 3 vs 5 (400 rows, stratified 50/50 splits): accuracy and fit time at Nyström
     5, 10, 15, 25 %, 5 splits each;
  1b. a binary task at 1000 training rows (digits 0-4 vs 5-9, 50/50, one split), the scale at
     which the reference's cost shows: 5, 10, 25 %;
  2. 3 vs 5 over a grid λ ∈ {0.01, 0.1, 1} × η ∈ {0.1, 1, 10} at 10 %, 5 splits:
     stability (min / mean / max accuracy) of each implementation;
  3. 10 classes (2000 rows, 50/50): ours at 5, 10, 25 %; the reference where it fits in a
     few minutes (5 % and 10 %, one split);
  4. our other variants (sparse, bayes, MVML_I, MVML_Cov, learned w) on 3 vs 5 at 10 %.

Run:  python benchmarks/mvml.py            (about 10 minutes on 2 cores)
      python benchmarks/mvml.py --quick    (fewer splits, fewer reference runs)
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.model_selection import StratifiedShuffleSplit
from sklearn.multiclass import OneVsRestClassifier
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from bayesmv import MVML
from bayesmv.datasets import load_multiple_features

RESULTS = Path(__file__).parent / "results" / "mvml.txt"


def splits(y, n_splits, seed=0):
    sss = StratifiedShuffleSplit(n_splits=n_splits, test_size=0.5, random_state=seed)
    return list(sss.split(np.zeros(len(y)), y))


def fit_ours(X, y, tr, te, nystrom, seed, **kw):
    start = time.perf_counter()
    clf = MVML(nystrom=nystrom, random_seed=seed, **kw).fit([v[tr] for v in X], y[tr])
    elapsed = time.perf_counter() - start
    acc = float(np.mean(clf.predict([v[te] for v in X]) == y[te]))
    return acc, elapsed, clf


def fit_reference(X, y, tr, te, nystrom, subset, alpha=0.1, metric_penalty=1.0):
    """The reference on the same kernels and subset; returns (accuracy, seconds) or None."""
    from multimodal.kernels.mvml import MVML as Ref

    scaled = []
    for v in X:
        sc = StandardScaler().fit(v[tr])
        scaled.append(sc.transform(v) * np.sqrt(1.0 / v.shape[1]))   # γ_v = 1/D_v with γ = 1
    Xc = np.hstack(scaled)
    views_ind = np.cumsum([0] + [v.shape[1] for v in X])
    order = np.concatenate([tr[subset], np.setdiff1d(tr, tr[subset], assume_unique=True)])

    class Reference(Ref):
        def fit(self, X_, y_):
            return super().fit(X_, y_, views_ind=views_ind)

    ref = Reference(lmbda=alpha, eta=metric_penalty, nystrom_param=nystrom, kernel="rbf",
                    kernel_params={"gamma": 1.0}, learn_A=1)
    if len(np.unique(y)) > 2:
        ref = OneVsRestClassifier(ref)
    start = time.perf_counter()
    try:
        ref.fit(Xc[order], y[order])
    except Exception as exc:  # the reference fails on some settings; record it
        return None, time.perf_counter() - start, type(exc).__name__
    elapsed = time.perf_counter() - start
    acc = float(np.mean(ref.predict(Xc[te]) == y[te]))
    return acc, elapsed, None


def fmt(values):
    values = np.asarray(values, dtype=float)
    return f"{values.mean():.3f} ± {values.std():.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.WARNING)            # the reference logs warnings on every fit
    warnings.filterwarnings("ignore")
    lines: list[str] = []

    def out(text=""):
        print(text, flush=True)
        lines.append(text)

    n_splits = 2 if args.quick else 5
    out("MVML: bayesmv vs scikit-multimodallearn 0.1.0 (same kernels, Nyström subset, λ, η, "
        "splits; one BLAS thread)")
    out(f"python benchmarks/mvml.py{' --quick' if args.quick else ''}")
    with threadpool_limits(limits=1, user_api="blas"):
        # ------------------------------------------------------------- 1. 3 vs 5
        X, y = load_multiple_features(classes=(3, 5))
        sp = splits(y, n_splits)
        # untimed warm-up of both (imports, first-call set-up)
        _, _, clf = fit_ours(X, y, *sp[0], 0.05, seed=0)
        fit_reference(X, y, *sp[0], 0.05, clf.nystrom_subset_)
        out("")
        out(f"1. Digits 3 vs 5, {len(sp[0][0])} train / {len(sp[0][1])} test rows, "
            f"{n_splits} splits, λ = 0.1, η = 1")
        out(f"{'Nyström':>8} | {'bayesmv acc':>15} {'fit s':>7} | {'reference acc':>15} "
            f"{'fit s':>7} | {'speed-up':>8}")
        for nys in (0.05, 0.10, 0.15, 0.25):
            a_o, t_o, a_r, t_r, fails = [], [], [], [], 0
            for k, (tr, te) in enumerate(sp):
                acc, sec, clf = fit_ours(X, y, tr, te, nys, seed=k)
                a_o.append(acc)
                t_o.append(sec)
                acc_r, sec_r, err = fit_reference(X, y, tr, te, nys, clf.nystrom_subset_)
                t_r.append(sec_r)
                if err is None:
                    a_r.append(acc_r)
                else:
                    fails += 1
            ref_acc = fmt(a_r) if a_r else "failed"
            out(f"{nys:>8.0%} | {fmt(a_o):>15} {np.mean(t_o):>7.3f} | {ref_acc:>15} "
                f"{np.mean(t_r):>7.3f} | {np.mean(t_r) / np.mean(t_o):>7.1f}x"
                + (f"  ({fails} reference fits raised)" if fails else ""))

        # ------------------------------------------------------------- 1b. larger binary
        X10, y10 = load_multiple_features()
        yb = (y10 >= 5).astype(int)
        tr, te = splits(yb, 1)[0]
        out("")
        out(f"1b. Digits 0-4 vs 5-9, {len(tr)} train / {len(te)} test rows (one split), "
            "λ = 0.1, η = 1")
        out(f"{'Nyström':>8} | {'bayesmv acc':>11} {'fit s':>7} | {'reference acc':>13} "
            f"{'fit s':>7} | {'speed-up':>8}")
        for nys in ((0.05, 0.10) if args.quick else (0.05, 0.10, 0.25)):
            acc, sec, clf = fit_ours(X10, yb, tr, te, nys, seed=0)
            a_r, t_r, err = fit_reference(X10, yb, tr, te, nys, clf.nystrom_subset_)
            ref = (f"{a_r:>13.3f} {t_r:>7.1f} | {t_r / sec:>7.1f}x" if err is None
                   else f"{'raised ' + err:>21} |")
            out(f"{nys:>8.0%} | {acc:>11.3f} {sec:>7.2f} | {ref}")

        # ------------------------------------------------------------- 2. stability grid
        out("")
        out(f"2. Stability on 3 vs 5 at 10 % Nyström: λ ∈ {{0.01, 0.1, 1}} × η ∈ "
            f"{{0.1, 1, 10}} × {n_splits} splits")
        out(f"{'λ':>6} {'η':>5} | {'bayesmv min/mean/max':>22} | {'reference min/mean/max':>24}")
        all_o, all_r = [], []
        for alpha in (0.01, 0.1, 1.0):
            for eta in (0.1, 1.0, 10.0):
                acc_o, acc_r = [], []
                for k, (tr, te) in enumerate(sp):
                    acc, _, clf = fit_ours(X, y, tr, te, 0.1, seed=k, alpha=alpha,
                                           metric_penalty=eta)
                    acc_o.append(acc)
                    a, _, err = fit_reference(X, y, tr, te, 0.1, clf.nystrom_subset_, alpha,
                                              eta)
                    acc_r.append(np.nan if err else a)
                all_o += acc_o
                all_r += acc_r
                r = np.asarray(acc_r)
                out(f"{alpha:>6} {eta:>5} | {min(acc_o):.3f} / {np.mean(acc_o):.3f} / "
                    f"{max(acc_o):.3f}    | {np.nanmin(r):.3f} / {np.nanmean(r):.3f} / "
                    f"{np.nanmax(r):.3f}" + (f" ({np.isnan(r).sum()} raised)"
                                             if np.isnan(r).any() else ""))
        out(f"{'all':>12} | {min(all_o):.3f} / {np.mean(all_o):.3f} / {max(all_o):.3f}    | "
            f"{np.nanmin(all_r):.3f} / {np.nanmean(all_r):.3f} / {np.nanmax(all_r):.3f}")

        # ------------------------------------------------------------- 3. 10 classes
        X, y = load_multiple_features()
        tr, te = splits(y, 1)[0]
        out("")
        out(f"3. Ten digits, {len(tr)} train / {len(te)} test rows (one split), one-vs-rest")
        out(f"{'Nyström':>8} | {'bayesmv acc':>11} {'fit s':>7} | {'reference acc':>13} "
            f"{'fit s':>7} | {'speed-up':>8}")
        ref_levels = (0.05,) if args.quick else (0.05, 0.10)
        for nys in (0.05, 0.10, 0.25):
            acc, sec, clf = fit_ours(X, y, tr, te, nys, seed=0)
            if nys in ref_levels:
                a_r, t_r, err = fit_reference(X, y, tr, te, nys, clf.nystrom_subset_)
                ref = (f"{a_r:>13.3f} {t_r:>7.1f} | {t_r / sec:>7.1f}x" if err is None
                       else f"{'raised ' + err:>21} |")
            else:
                ref = f"{'not run (too slow)':>21} |"
            out(f"{nys:>8.0%} | {acc:>11.3f} {sec:>7.2f} | {ref}")

        # ------------------------------------------------------------- 4. variants
        X, y = load_multiple_features(classes=(3, 5))
        out("")
        out(f"4. bayesmv variants on 3 vs 5 at 10 % Nyström ({n_splits} splits)")
        out(f"{'variant':>34} | {'accuracy':>15} {'fit s':>7} | views kept (sparse)")
        variants = [("full, paper (default)", {}),
                    ("full, bayes (EM on p(A|y))", {"objective": "bayes"}),
                    ("sparse, paper", {"learn_A": "sparse"}),
                    ("sparse, paper, η = 10", {"learn_A": "sparse", "metric_penalty": 10.0}),
                    ("sparse, bayes, η = 10", {"learn_A": "sparse", "metric_penalty": 10.0,
                                               "objective": "bayes"}),
                    ("identity (MVML_I)", {"learn_A": "identity"}),
                    ("cov (MVML_Cov)", {"learn_A": "cov"}),
                    ("full, learned w", {"learn_w": True})]
        for name, kw in variants:
            accs, secs, kept = [], [], []
            for k, (tr, te) in enumerate(sp):
                acc, sec, clf = fit_ours(X, y, tr, te, 0.1, seed=k, **kw)
                accs.append(acc)
                secs.append(sec)
                kept.append(int(np.sum(np.diag(clf.view_interactions_[0]) > 0)))
            extra = f"{kept} of 6" if kw.get("learn_A") == "sparse" else ""
            out(f"{name:>34} | {fmt(accs):>15} {np.mean(secs):>7.3f} | {extra}")

    if not args.quick:
        RESULTS.write_text("\n".join(lines) + "\n")
        print(f"\nwritten to {RESULTS}")


if __name__ == "__main__":
    main()
