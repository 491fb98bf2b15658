"""ϱTMV-RKM benchmark: accuracy and cost on UCI Multiple Features, and the random-feature path.

Run ``python benchmarks/rhotmvrkm.py`` (about 10 minutes on 2 cores; ``--quick`` runs two
splits and a smaller large-N part).  Every comparison runs in this process on the same splits:

1. Fixed hyper-parameters: bayesmv's fit + predict against the bare computation (scikit-learn
   kernels plus ``numpy.linalg.solve`` of the paper's (N+1)-system with all ten one-vs-all
   right-hand sides, then eq. 15), same numbers, same accuracy.
2. Hyper-parameters by the marginal likelihood (no CV), with γ free per view or γ = 1/D_v
   ("scale"), against the 3-fold CV grid it replaces (ϱ × λ × a γ multiplier; one
   eigendecomposition per fold, ϱ and γ serves every λ and every one-vs-all task).
3. N = 20 000 synthetic multi-view rows: the random-feature path on all rows against the exact
   path on a 2 000-row subsample, same test set.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.model_selection import StratifiedKFold, StratifiedShuffleSplit
from sklearn.preprocessing import StandardScaler

from bayesmv import RhoTMVRKM
from bayesmv.datasets import load_multiple_features, make_nonlinear_latent


def standardise(views, tr, te):
    out_tr, out_te = [], []
    for X in views:
        sc = StandardScaler().fit(X[tr])
        out_tr.append(sc.transform(X[tr]))
        out_te.append(sc.transform(X[te]))
    return out_tr, out_te


def bare_fit_predict(Xtr, ytr, Xte, classes, gammas, rho, lam, eta=1.0):
    """The paper's algorithm in plain numpy: kernels, one solve, eq. 15."""
    V, N = len(Xtr), len(ytr)
    Ktr = [rbf_kernel(X, gamma=g) for X, g in zip(Xtr, gammas, strict=True)]
    tau = (1 - rho) * V + rho
    A = np.empty((N + 1, N + 1))
    A[:N, :N] = ((1 - rho) * np.sum(Ktr, axis=0) + rho * np.prod(Ktr, axis=0)) / eta
    A[np.arange(N), np.arange(N)] += lam
    A[:N, N], A[N, :N], A[N, N] = tau, 1.0, 0.0
    Y = np.where(ytr[:, None] == classes[None, :], 1.0, -1.0)
    sol = np.linalg.solve(A, np.vstack([tau * Y, np.zeros((1, len(classes)))]))
    Kte = [rbf_kernel(T, X, gamma=g) for T, X, g in zip(Xte, Xtr, gammas, strict=True)]
    F = ((1 - rho) * np.sum(Kte, axis=0) + rho * np.prod(Kte, axis=0)) @ sol[:N] / eta + sol[N]
    return classes[np.argmax(F, axis=1)]


def cv_grid(Xtr, ytr, classes, rhos, lams, multipliers, folds=3, seed=0):
    """3-fold CV over ϱ × λ × γ-multiplier; eigendecompositions shared across λ and tasks."""
    sizes = np.array([X.shape[1] for X in Xtr])
    V = len(Xtr)
    scores = {}
    for fit_rows, val_rows in StratifiedKFold(folds, shuffle=True,
                                              random_state=seed).split(Xtr[0], ytr):
        Y = np.where(ytr[fit_rows, None] == classes[None, :], 1.0, -1.0)
        for mult in multipliers:
            g = mult / sizes
            Kf = [rbf_kernel(X[fit_rows], gamma=gv) for X, gv in zip(Xtr, g, strict=True)]
            Kv = [rbf_kernel(X[val_rows], X[fit_rows], gamma=gv)
                  for X, gv in zip(Xtr, g, strict=True)]
            for rho in rhos:
                tau = (1 - rho) * V + rho
                K = (1 - rho) * np.sum(Kf, axis=0) + rho * np.prod(Kf, axis=0)
                Kvr = (1 - rho) * np.sum(Kv, axis=0) + rho * np.prod(Kv, axis=0)
                evals, Q = np.linalg.eigh(K)
                QtY, Qt1, KvQ = Q.T @ Y, Q.T.sum(axis=1), Kvr @ Q
                for lam in lams:
                    d = 1.0 / (evals + lam)  # (K + λI)⁻¹ = Q diag(d) Qᵀ, for every task
                    s = Qt1 @ (d * Qt1)
                    b = (Qt1 * d) @ QtY / s
                    coef = d[:, None] * (QtY - np.outer(Qt1, b))  # Qᵀ α / τ
                    F = tau * KvQ @ coef + b
                    acc = np.mean(classes[np.argmax(F, axis=1)] == ytr[val_rows])
                    key = (rho, lam, mult)
                    scores[key] = scores.get(key, 0.0) + acc / folds
    return max(scores, key=scores.get)


def uci_part(n_splits: int) -> None:
    views, y = load_multiple_features()
    classes = np.unique(y)
    splits = StratifiedShuffleSplit(n_splits, test_size=0.2, random_state=0).split(views[0], y)
    rows = []
    fixed = dict(rho=0.5, lam=1e-3, gamma="scale")
    print(f"UCI Multiple Features, 10 classes, 6 views, N_train = 1600, {n_splits} splits\n")
    print("seed | fixed: acc  fit+pred s  bare acc  bare s  ratio | ML(all) acc  sel s  rho "
          "| ML(ρ,λ; γ=scale) acc  sel s | CV grid acc  s")
    for seed, (tr, te) in enumerate(splits):
        Xtr, Xte = standardise(views, tr, te)
        sizes = [X.shape[1] for X in Xtr]
        # 1. fixed hyper-parameters: the package against the bare computation
        t0 = time.perf_counter()
        est = RhoTMVRKM(**fixed, standardize=False).fit(Xtr, y[tr])
        pred = est.predict(Xte)
        t_pkg = time.perf_counter() - t0
        t0 = time.perf_counter()
        pred_bare = bare_fit_predict(Xtr, y[tr], Xte, classes, [1.0 / d for d in sizes],
                                     fixed["rho"], fixed["lam"])
        t_bare = time.perf_counter() - t0
        # 2. marginal likelihood, γ free per view and γ = 1/D_v
        ml = RhoTMVRKM(standardize=False).fit(Xtr, y[tr])
        ml_scale = RhoTMVRKM(gamma="scale", standardize=False).fit(Xtr, y[tr])
        # the CV grid it replaces (and the refit with the chosen values)
        t0 = time.perf_counter()
        rho, lam, mult = cv_grid(Xtr, y[tr], classes, rhos=(0, 0.25, 0.5, 0.75, 1.0),
                                 lams=(1e-4, 1e-3, 1e-2, 1e-1, 1.0),
                                 multipliers=(0.3, 1.0, 3.0))
        t_cv = time.perf_counter() - t0
        pred_cv = bare_fit_predict(Xtr, y[tr], Xte, classes, [mult / d for d in sizes], rho, lam)
        row = dict(acc=np.mean(pred == y[te]), t=t_pkg, acc_bare=np.mean(pred_bare == y[te]),
                   t_bare=t_bare, acc_ml=np.mean(ml.predict(Xte) == y[te]),
                   t_ml=ml.evidence_["seconds"], rho_ml=ml.rho_,
                   acc_mls=np.mean(ml_scale.predict(Xte) == y[te]),
                   t_mls=ml_scale.evidence_["seconds"], acc_cv=np.mean(pred_cv == y[te]),
                   t_cv=t_cv)
        rows.append(row)
        print(f"{seed:4d} | {row['acc']:.4f} {t_pkg:6.2f} {row['acc_bare']:.4f} {t_bare:6.2f} "
              f"{t_pkg / t_bare:5.2f} | {row['acc_ml']:.4f} {row['t_ml']:6.1f} "
              f"{row['rho_ml']:.2f} | {row['acc_mls']:.4f} {row['t_mls']:6.1f} | "
              f"{row['acc_cv']:.4f} {t_cv:6.1f}  (CV chose ϱ={rho}, λ={lam}, γ×{mult})",
              flush=True)
        print(f"       ML(all): λ={ml.lam_:.2g}, γ·D_v={np.round(np.array(ml.gamma_) * sizes, 3)}"
              f" | ML(scale): ϱ={ml_scale.rho_:.3f}, λ={ml_scale.lam_:.2g}", flush=True)
    mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
    print(f"mean | {mean['acc']:.4f} {mean['t']:6.2f} {mean['acc_bare']:.4f} "
          f"{mean['t_bare']:6.2f} {mean['t'] / mean['t_bare']:5.2f} | {mean['acc_ml']:.4f} "
          f"{mean['t_ml']:6.1f}      | {mean['acc_mls']:.4f} {mean['t_mls']:6.1f} | "
          f"{mean['acc_cv']:.4f} {mean['t_cv']:6.1f}\n")


def large_part(n_total: int, n_features: tuple[int, ...]) -> None:
    X, y = make_nonlinear_latent(n_samples=n_total + 2000, view_dims=(50, 30, 20),
                                 latent_dim=4, nonlinearity="circle", noise=0.5,
                                 label_noise=0.2, random_state=0)
    Xtr, Xte = [x[:n_total] for x in X], [x[n_total:] for x in X]
    ytr, yte = y[:n_total], y[n_total:]
    print(f"Synthetic circle task, 3 views (50, 30, 20), N_train = {n_total}, 2000 test rows")
    rng = np.random.default_rng(0)
    for n_sub in (2000, 4000):
        sub = np.sort(rng.choice(n_total, n_sub, replace=False))
        t0 = time.perf_counter()
        exact = RhoTMVRKM(random_seed=0).fit([x[sub] for x in Xtr], ytr[sub])
        acc = np.mean(exact.predict(Xte) == yte)
        print(f"  exact kernels on a {n_sub}-row subsample: acc {acc:.4f}, fit + predict "
              f"{time.perf_counter() - t0:.1f} s (of which selection "
              f"{exact.evidence_['seconds']:.1f} s; ϱ={exact.rho_:.2f}, λ={exact.lam_:.2g})",
              flush=True)
    hyper = dict(rho=exact.rho_, lam=exact.lam_, gamma=exact.gamma_)
    for M in n_features:
        t0 = time.perf_counter()
        rff = RhoTMVRKM(n_features=M, random_seed=0, **hyper).fit(Xtr, ytr)
        t_fit = time.perf_counter() - t0
        acc = np.mean(rff.predict(Xte) == yte)
        print(f"  random features (M = {M}) on all {n_total} rows, the 4000-row fit's "
              f"hyper-parameters: acc {acc:.4f}, fit {t_fit:.1f} s, predict "
              f"{time.perf_counter() - t0 - t_fit:.2f} s", flush=True)
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two splits, N = 5000")
    args = parser.parse_args()
    uci_part(2 if args.quick else 5)
    large_part(5000 if args.quick else 20000, (200, 800))


if __name__ == "__main__":
    main()
