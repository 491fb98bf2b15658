"""Accuracy and calibration of M3LAK against an RBF SVC (and a linear SVM) on the same splits.

Tasks: UCI Multiple Features binary pairs (bundled real data, six views), scikit-learn's
breast-cancer data as three views (means, standard errors and worst values) and synthetic
two-view tasks whose label is a nonlinear function of a shared latent
(x_v = A_v z + B_v u_v + noise, D = (100, 50); see ``make_nonlinear_latent``).
Baselines see the concatenated, standardised views; C and gamma are chosen by 3-fold CV on
the training part; their probabilities come from Platt scaling on the training part.

Run:  python benchmarks/accuracy.py            (about 20 minutes on 2 cores)
      python benchmarks/accuracy.py --quick    (one split per task, fewer draws)
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.calibration import CalibratedClassifierCV
from sklearn.metrics import brier_score_loss
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC, LinearSVC

from bayesmv import M3LAK
from bayesmv.datasets import (
    load_breast_cancer_views,
    load_multiple_features,
    make_nonlinear_latent,
)
from bayesmv.diagnostics import ConvergenceWarning


def uci_pair(negative: int, positive: int):
    """The UCI Multiple Features digits ``negative`` against ``positive`` (label 1): the six
    views, the labels and the test fraction of every UCI pair task here."""
    X, y = load_multiple_features(classes=(negative, positive))
    return X, (y == positive).astype(int), 0.25


def tasks(quick: bool):
    for negative, positive in [(3, 5), (1, 7), (6, 9)]:
        yield f"UCI {negative} vs {positive}", *uci_pair(negative, positive)
    # a second real data set: each sample's ten nucleus measurements as three views (their
    # means, standard errors and worst values), bundled with scikit-learn
    yield "breast cancer", *load_breast_cancer_views(), 0.25
    for shape in ["quadratic", "circle", "xor"]:
        X, y = make_nonlinear_latent(n_samples=1000, view_dims=(100, 50),
                                     nonlinearity=shape, random_seed=0)
        yield f"synthetic {shape}", X, y, 0.3


def rbf_svc(X_train, y_train):
    pipe = make_pipeline(StandardScaler(), SVC())
    n_features = X_train.shape[1]
    grid = {"svc__C": [0.1, 1, 10, 100],
            "svc__gamma": [g / n_features for g in (0.1, 0.3, 1, 3, 10)]}
    best = GridSearchCV(pipe, grid, cv=3).fit(X_train, y_train).best_estimator_
    calibrated = CalibratedClassifierCV(best, method="sigmoid", cv=3).fit(X_train, y_train)
    return best, calibrated


def linear_svm(X_train, y_train):
    pipe = make_pipeline(StandardScaler(), LinearSVC(max_iter=20000))
    return GridSearchCV(pipe, {"linearsvc__C": [0.001, 0.01, 0.1, 1, 10]}, cv=3).fit(
        X_train, y_train)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--tasks", nargs="+", default=None, metavar="NAME",
                        help="only the tasks whose name contains one of these, e.g. cancer")
    args = parser.parse_args()
    seeds = 1 if args.quick else args.seeds
    draws = 150 if args.quick else args.draws
    header = (f"{'task':<20}{'seed':>5}{'M3LAK acc':>11}{'RBF SVC':>9}{'linear':>8}"
              f"{'M3LAK Brier':>13}{'SVC Brier':>11}{'fit s':>8}{'R-hat':>7}{'ESS':>6}")
    print(header)
    print("-" * len(header))
    rows = []
    for name, X, y, test_size in tasks(args.quick):
        if args.tasks and not any(t in name for t in args.tasks):
            continue
        for seed in range(seeds):
            idx_train, idx_test = train_test_split(np.arange(len(y)), test_size=test_size,
                                                   stratify=y, random_state=seed)
            X_train = [x[idx_train] for x in X]
            X_test = [x[idx_test] for x in X]
            est = M3LAK(draws=draws, tune=draws, chains=2, cores=2, random_seed=seed)
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                est.fit(X_train, y[idx_train])
            fit_s = time.perf_counter() - start
            proba = est.predict_proba(X_test)[:, 1]
            acc = float(np.mean((proba > 0.5) == y[idx_test]))
            C_train, C_test = np.hstack(X_train), np.hstack(X_test)
            svc, calibrated = rbf_svc(C_train, y[idx_train])
            lin = linear_svm(C_train, y[idx_train])
            row = (name, seed, acc, svc.score(C_test, y[idx_test]),
                   lin.score(C_test, y[idx_test]), brier_score_loss(y[idx_test], proba),
                   brier_score_loss(y[idx_test], calibrated.predict_proba(C_test)[:, 1]),
                   fit_s, est.convergence_.max_r_hat, est.convergence_.min_ess_bulk)
            rows.append(row)
            print(f"{row[0]:<20}{row[1]:>5}{row[2]:>11.3f}{row[3]:>9.3f}{row[4]:>8.3f}"
                  f"{row[5]:>13.4f}{row[6]:>11.4f}{row[7]:>8.1f}{row[8]:>7.2f}{row[9]:>6.0f}",
                  flush=True)
    print("-" * len(header))
    for name in dict.fromkeys(r[0] for r in rows):
        sel = np.array([r[2:8] for r in rows if r[0] == name], dtype=float)
        mean = sel.mean(axis=0)
        print(f"{name + ' (mean)':<25}{mean[0]:>11.3f}{mean[1]:>9.3f}{mean[2]:>8.3f}"
              f"{mean[3]:>13.4f}{mean[4]:>11.4f}{mean[5]:>8.1f}")


if __name__ == "__main__":
    main()
