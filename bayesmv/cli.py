"""Command-line entry point: the package's main job on bundled real data.

``bayesmv`` (or ``python -m bayesmv``) fits :class:`bayesmv.M3LAK` on the bundled UCI Multiple
Features digits (by default 3 vs 5: 400 rows, six views), scores it on a held-out stratified
quarter next to a tuned RBF SVC, reports convergence, writes the fitted model to netCDF and,
next to it, one self-contained HTML diagnostics report (:func:`bayesmv.diagnostics.report`).
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from scipy.stats import norm
from sklearn.base import clone
from sklearn.calibration import CalibratedClassifierCV
from sklearn.metrics import accuracy_score, brier_score_loss, log_loss
from sklearn.model_selection import GridSearchCV, StratifiedKFold, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from bayesmv.data import check_views
from bayesmv.datasets import load_multiple_features
from bayesmv.diagnostics.convergence import SAMPLING_DIAGNOSTICS, ConvergenceWarning
from bayesmv.diagnostics.report import report as write_html_report
from bayesmv.diagnostics.report import wall_time_summary
from bayesmv.models.base import prediction_draws_per_chain
from bayesmv.models.m3lak import M3LAK

__all__ = ["MAIN_CHAINS", "QUICK", "build_parser", "main", "parse_args", "run", "wilson_interval"]

# ArviZ announces its refactor with a FutureWarning that says nothing about this run.  The
# message starts with a newline, hence the leading \s*.  (The announcement itself is raised when
# arviz is first imported, which happens in bayesmv/__init__.py before this module runs, so
# this filter covers re-imports only; the import-time one must be filtered there.)
_ARVIZ_REFACTOR = r"\s*ArviZ is undergoing a major refactor"

#: settings of ``--quick``: a real fit in about 52 s on two cores.  With 2 x (500 + 2000)
#: draws after the sampler's 250-iteration pilot, seeds 0, 1, 2 (split and sampler): max R-hat
#: of f and τ 1.004 / 1.006 / 1.005, min bulk ESS 1148 / 354 / 388, 51-53 s in all
#: (2026-11-30, stop 63, with the DP mixture's collapsed scans; stop 62 without them
#: 1.005 / 1.011 / 1.006, 1020 / 470 / 898, 47-51 s; before the pilot 1.005 / 1.009 / 1.006,
#: 990 / 256 / 926, 41-44 s; on tuning seeds 13 and 14 1.010 / 157 and 1.009 / 432;
#: 2026-11-29, before τ's interweaving move: seeds 0-2 1.011 / 1.008 / 1.008,
#: 530 / 338 / 905, 38-39 s; seed 13 1.072 / 22).  Chosen on seeds 11 and 12: 2 x 2000
#: gave 1.007 / 1.006 and ESS 757 / 834, 4 x 1000 1.014 / 1.007 and 543 / 980.  With 2 x 1000
#: the run took 26-28 s, but seed 0 gave R-hat 1.027 and a min bulk ESS of 92
QUICK: dict[str, int | str] = {"draws": 2000, "tune": 500, "chains": 2, "n_frequencies": 30,
                               "latent_dim": "auto"}
_TUNED = tuple(QUICK)
#: chains of the full run: R-hat compares chains, and Vehtari et al. (2021) ask for at least
#: four.  With the estimator's two, the largest of 300 decision values' R-hats crosses 1.01
#: by chance (seed 0: 1.010, flagged); with four, seeds 0-2 gave 1.0052 / 1.0065 / 1.0049
#: in 113-148 s a fit (``benchmarks/m3lak_convergence.py``, the same split and fit)
MAIN_CHAINS = 4

_TEST_SIZE = 0.25
_NAME_WIDTH = 22
_LINE_WIDTH = 100
_SVC_GRID = {"svc__C": [0.1, 1.0, 10.0, 100.0], "svc__gamma": ["scale", 1e-4, 1e-3, 1e-2]}


# ------------------------------------------------------------------ arguments
def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _nonnegative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text}")
    return value


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity masks
        return os.cpu_count() or 1


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``bayesmv`` command."""
    defaults = M3LAK().get_params()
    parser = argparse.ArgumentParser(
        prog="bayesmv",
        description="Fit M3LAK on the bundled UCI Multiple Features digits (one digit pair), "
                    "score it on a held-out stratified 25 % next to a tuned RBF SVC, report "
                    "convergence, save the fitted model as netCDF and write an HTML "
                    "diagnostics report next to it.",
    )
    parser.add_argument("--quick", action="store_true",
                        help="short real fit: " + ", ".join(f"{k}={v}" for k, v in QUICK.items())
                        + " (options given explicitly still win)")
    parser.add_argument("--draws", type=_positive_int, default=None,
                        help=f"posterior draws per chain (default {defaults['draws']})")
    parser.add_argument("--tune", type=_nonnegative_int, default=None,
                        help=f"tuning iterations per chain (default {defaults['tune']})")
    parser.add_argument("--chains", type=_positive_int, default=None,
                        help=f"number of chains (default {MAIN_CHAINS}; the estimator's "
                             f"own default is {defaults['chains']})")
    parser.add_argument("--cores", type=_positive_int, default=None,
                        help="processes running chains in parallel (default: one per chain, "
                             "up to the CPUs this process may use)")
    parser.add_argument("--latent-dim", type=_positive_int, default=None,
                        help=f"shared latent dimension (default {defaults['latent_dim']})")
    parser.add_argument("--n-frequencies", type=_positive_int, default=None,
                        help=f"random Fourier frequencies (default {defaults['n_frequencies']})")
    # the flag's name before M3LAK's n_features became n_frequencies, kept as a hidden alias
    parser.add_argument("--n-features", type=_positive_int, default=None,
                        dest="n_frequencies", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the split, the sampler and the baseline (default 0)")
    parser.add_argument("--digits", type=int, nargs=2, metavar=("A", "B"), default=[3, 5],
                        choices=range(10), help="the two digits to tell apart (default 3 5)")
    parser.add_argument("--sampler", choices=("hybrid", "nuts"), default="hybrid",
                        help="hybrid Gibbs + HMC (default) or NUTS on the collapsed posterior")
    parser.add_argument("--output", type=Path, default=None, metavar="PATH",
                        help="netCDF file to write (default bayesmv-output/m3lak-uci-AvB.nc); "
                             "the HTML report goes next to it as <name>-report.html")
    parser.add_argument("--no-progress", action="store_true",
                        help="hide PyMC's progress bar")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse ``argv`` and resolve the ``--quick`` preset and the default output path.

    Every sampler setting left out takes the ``--quick`` value when ``--quick`` is given and
    the M3LAK default otherwise, so ``--quick --draws 400`` changes only the draws.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.digits[0] == args.digits[1]:
        parser.error(f"--digits needs two different digits, got {args.digits[0]} twice")
    defaults = M3LAK().get_params()
    preset = QUICK if args.quick else {**{k: defaults[k] for k in _TUNED},
                                       "chains": MAIN_CHAINS}
    for name in _TUNED:
        if getattr(args, name) is None:
            setattr(args, name, preset[name])
    if args.cores is None:
        # PyMC's own default assumes half the CPUs are hyper-threads, which runs two chains
        # one after the other on a two-core machine: twice the wall time for the same draws
        args.cores = min(args.chains, _usable_cpus())
    args.digits = tuple(sorted(args.digits))
    if args.output is None:
        a, b = args.digits
        args.output = Path("bayesmv-output") / f"m3lak-uci-{a}v{b}.nc"
    return args


# -------------------------------------------------------------------- metrics
def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion.

    Parameters
    ----------
    successes : int
        Number of successes (here: correctly classified test rows).
    n : int
        Number of trials (test rows); must be positive.
    confidence : float, default 0.95
        Coverage of the interval.

    Returns
    -------
    lower, upper : float
        Interval bounds, within [0, 1].
    """
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n >= 1, got {successes} of {n}")
    z = float(norm.ppf(0.5 + confidence / 2))
    p = successes / n
    denom = 1 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denom
    half = z / denom * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    # clip only the last-ulp rounding at 0 and 1
    return max(0.0, centre - half), min(1.0, centre + half)


def _scores(y_true: np.ndarray, proba: np.ndarray, classes: np.ndarray) -> dict[str, Any]:
    pred = classes[np.argmax(proba, axis=1)]
    correct = int(np.sum(pred == y_true))
    return {
        "accuracy": accuracy_score(y_true, pred),
        "correct": correct,
        "n": len(y_true),
        "wilson": wilson_interval(correct, len(y_true)),
        # binary task: the Brier score of the positive class (classes[1]) probability
        "brier": brier_score_loss((y_true == classes[1]).astype(int), proba[:, 1]),
        "log_loss": log_loss(y_true, proba, labels=classes),
    }


# ----------------------------------------------------------------- reporting
class _Report:
    """Aligned ``name: value`` lines under section headers, flushed as they come.

    Flushing matters because the progress bar writes to stderr between sections.
    """

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def header(self, title: str) -> None:
        print(f"\n{title}\n{'-' * len(title)}", file=self.out, flush=True)

    def line(self, name: str, value: Any, indent: int = 2) -> None:
        label = " " * indent + name
        print(f"{label:<{_NAME_WIDTH}}: {value}", file=self.out, flush=True)

    def long_line(self, name: str, value: str, indent: int = 2) -> None:
        """A ``line`` whose value wraps under itself rather than running off the screen."""
        label = " " * indent + name
        print(textwrap.fill(value, width=_LINE_WIDTH, initial_indent=f"{label:<{_NAME_WIDTH}}: ",
                            subsequent_indent=" " * (_NAME_WIDTH + 2)), file=self.out, flush=True)

    def text(self, text: str, indent: int = 2) -> None:
        for row in text.splitlines():
            print(" " * indent + row, file=self.out, flush=True)

    def scores(self, s: dict[str, Any], brier_note: str = "") -> None:
        lo, hi = s["wilson"]
        self.line("accuracy", f"{s['accuracy']:.4f} ({s['correct']}/{s['n']} correct), "
                              f"95 % Wilson CI [{lo:.4f}, {hi:.4f}]")
        self.line("Brier score", f"{s['brier']:.4f}{brier_note}")
        self.line("log-loss", f"{s['log_loss']:.4f}")


# ---------------------------------------------------------------------- job
@dataclass
class JobResult:
    """What one run produced (for tests and for callers embedding the job)."""

    estimator: M3LAK
    X_test: list[np.ndarray]
    y_test: np.ndarray
    proba: np.ndarray
    scores: dict[str, Any]
    baseline_scores: dict[str, Any]
    output: Path
    convergence_warnings: list[str] = field(default_factory=list)
    html_report: Path | None = None


def _svc_baseline(X_train: np.ndarray, y_train: np.ndarray,
                  seed: int) -> tuple[Any, Any, dict[str, Any]]:
    """RBF SVC on standardised concatenated views, C and gamma by 3-fold CV on train.

    Returns the tuned SVC (its ``predict`` follows the decision function, as
    ``SVC(probability=True).predict`` does), the same SVC with Platt-scaled probabilities
    and the chosen parameters.
    """
    pipe = make_pipeline(StandardScaler(), SVC(kernel="rbf"))
    # n_jobs=1: the grid is tiny, and worker processes would only compete with PyMC's
    search = GridSearchCV(pipe, _SVC_GRID, scoring="accuracy", n_jobs=1,
                          cv=StratifiedKFold(3, shuffle=True, random_state=seed))
    search.fit(X_train, y_train)
    # What SVC(probability=True) did (Platt scaling on 5-fold cross-validated decision values,
    # final SVC on all rows), spelled the way scikit-learn >= 1.9 asks for: probability=True is
    # deprecated there.  Choosing C and gamma without it keeps the grid search cheap.
    platt = CalibratedClassifierCV(clone(search.best_estimator_), method="sigmoid",
                                   ensemble=False,
                                   cv=StratifiedKFold(5, shuffle=True, random_state=seed))
    return search.best_estimator_, platt.fit(X_train, y_train), search.best_params_


def run(args: argparse.Namespace, out: TextIO | None = None) -> JobResult:
    """Run the main job with parsed arguments, writing the report to ``out`` (stdout)."""
    out = sys.stdout if out is None else out
    report = _Report(out)
    started = time.perf_counter()
    a, b = args.digits

    views, y, names = load_multiple_features(classes=args.digits, return_names=True)
    split = train_test_split(*views, y, test_size=_TEST_SIZE, stratify=y,
                             random_state=args.seed)
    X_train, X_test = split[0:-2:2], split[1:-2:2]
    y_train, y_test = split[-2], split[-1]

    print(f"bayesmv: M3LAK on UCI Multiple Features, digits {a} vs {b}", file=out, flush=True)
    report.header("Data")
    report.line("dataset", "UCI Multiple Features (bundled, CC BY 4.0)")
    report.line("rows", f"{len(y)} (train {len(y_train)}, test {len(y_test)}; stratified "
                        f"{100 - 100 * _TEST_SIZE:.0f}/{100 * _TEST_SIZE:.0f}, seed {args.seed})")
    report.line("classes", ", ".join(f"digit {c}: {int(np.sum(y == c))}" for c in args.digits))
    report.line("views", f"{len(views)} ({sum(v.shape[1] for v in views)} features in all)")
    for name, view in zip(names, views, strict=True):
        report.line(name, f"{view.shape[1]} features", indent=4)

    est = M3LAK(latent_dim=args.latent_dim, n_frequencies=args.n_frequencies,
                inference=args.sampler, draws=args.draws, tune=args.tune, chains=args.chains,
                cores=args.cores, random_seed=args.seed, progressbar=not args.no_progress)
    report.header("Fit")
    report.line("model", "M3LAK (shared latent + DP-mixture random Fourier features, hinge)")
    report.line("sampler", args.sampler)
    report.line("draws / tune", f"{args.draws} / {args.tune} per chain")
    report.line("chains / cores", f"{args.chains} / {args.cores}")
    m, K = est._latent().dims([view.shape[1] for view in X_train], len(y_train))
    report.line("latent_dim", f"{m} (auto)" if args.latent_dim == "auto" else m)
    report.line("view_latent_dim", f"{K} (auto)")
    report.line("n_frequencies", args.n_frequencies)
    report.line("seed", args.seed)

    fit_started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.filterwarnings("ignore", message=_ARVIZ_REFACTOR, category=FutureWarning)
        # "always": a second run in the same process (tests, notebooks) must still report it
        warnings.simplefilter("always", ConvergenceWarning)
        # named views: the model, its idata_ coordinates, the saved file and the report then
        # say "fou", "fac", ... rather than "view0", "view1", ...
        est.fit(check_views(list(X_train), view_names=names), y_train)
    fit_seconds = time.perf_counter() - fit_started
    convergence_warnings = [str(w.message) for w in caught
                            if issubclass(w.category, ConvergenceWarning)]
    for w in caught:
        # record=True swallows everything; only ConvergenceWarning goes into the report
        if not issubclass(w.category, ConvergenceWarning):
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    report.long_line("fit time", wall_time_summary(est.idata_, fit_seconds)
                     or f"{fit_seconds:.1f} s")

    proba = est.predict_proba(X_test)
    scores = _scores(y_test, proba, est.classes_)
    report.header(f"Test set ({len(y_test)} rows): M3LAK")
    report.scores(scores, brier_note=f" (probability of digit {est.classes_[1]})")

    concat_train, concat_test = np.hstack(X_train), np.hstack(X_test)
    svc, platt, best = _svc_baseline(concat_train, y_train, args.seed)
    baseline_scores = _scores(y_test, platt.predict_proba(concat_test), platt.classes_)
    svc_pred = svc.predict(concat_test)
    svc_correct = int(np.sum(svc_pred == y_test))
    baseline_scores.update(accuracy=accuracy_score(y_test, svc_pred), correct=svc_correct,
                           wilson=wilson_interval(svc_correct, len(y_test)))
    report.header("Baseline: RBF SVC on concatenated standardised views")
    report.line("C, gamma (3-fold CV)", f"{best['svc__C']:g}, {best['svc__gamma']}")
    report.scores(baseline_scores, brier_note=" (Platt-scaled probabilities)")

    report.header("Convergence")
    report.text(repr(est.convergence_))
    for message in convergence_warnings:
        if message.startswith(SAMPLING_DIAGNOSTICS):
            # the report just printed lists these same problems: say it, do not repeat them
            message = "raised: the fit did not converge (the problems listed above)"
        report.long_line("ConvergenceWarning", message)

    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    # only the draws the predictions use: the loaded model predicts exactly as this one,
    # from a file a twentieth the size
    est.save(output, max_draws=prediction_draws_per_chain(
        est.max_predict_draws, est.idata_.posterior.sizes["chain"]))
    html_report = output.with_name(output.stem + "-report.html")
    lo, hi = baseline_scores["wilson"]
    report_started = time.perf_counter()
    write_html_report(
        est, list(X_test), y_test, html_report, fit_seconds=fit_seconds, proba=proba,
        title=f"bayesmv: M3LAK on UCI Multiple Features, digits {a} vs {b}",
        extra={"split": f"train {len(y_train)}, test {len(y_test)} (stratified, seed "
                        f"{args.seed})",
               "baseline RBF SVC accuracy": f"{baseline_scores['accuracy']:.4f} (95 % Wilson "
                                            f"[{lo:.4f}, {hi:.4f}])",
               "baseline Brier / log-loss": f"{baseline_scores['brier']:.4f} / "
                                            f"{baseline_scores['log_loss']:.4f}"})
    report_seconds = time.perf_counter() - report_started
    report.header("Output")
    report.line("fitted model", f"{output} (load with bayesmv.load)")
    report.long_line("HTML report", f"{html_report} (convergence, predictive checks, "
                                    f"calibration; written in {report_seconds:.1f} s)")
    report.line("total time", f"{time.perf_counter() - started:.1f} s")
    return JobResult(estimator=est, X_test=list(X_test), y_test=y_test, proba=proba,
                     scores=scores, baseline_scores=baseline_scores, output=output,
                     convergence_warnings=convergence_warnings, html_report=html_report)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bayesmv`` console script; returns the exit status."""
    warnings.filterwarnings("ignore", message=_ARVIZ_REFACTOR, category=FutureWarning)
    args = parse_args(argv)
    run(args)
    return 0
