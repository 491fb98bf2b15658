"""Does M3LAK's posterior converge, and along which directions does it not?

On the README's split (UCI digits 3 vs 5, ``train_test_split(test_size=0.25, stratify=y,
random_state=0)``), fits ``M3LAK(chains=4, random_seed=s)`` (``--set chains=2`` for the
estimator's own two) for each seed and prints, per fit,
the rank-normalised split R-hat and bulk / tail ESS (Vehtari et al. 2021) of every training
decision value ``f`` and of ``tau``, the wall time, the
minimum bulk ESS of f per second, and the test accuracy, Brier score and ECE; then, for the
diagnosis, the chain means, R-hat and ESS of global summaries that a slow direction would
show: ||β||, ||Ω||, Ω's top singular value (the bandwidth along the most discriminative
latent direction), the mean |f|, the slowest decision value and its within-chain
correlation with the two bandwidths, the log noise precision and log ||W_v|| of each view (with
the slowest value's correlation with each), the latent column whose bandwidth differs most
between chains with that column's ARD precision in each view, and the number of occupied DP
components.  Beside f's smallest ESS it prints the median, and the
largest R-hat that a sampler which has converged, with that autocorrelation, would still show
among as many quantities by chance (``rhat_noise_floor``): a max R-hat near that floor asks
for more effective draws, one far above it for a slow direction.

    python benchmarks/m3lak_convergence.py                   # seeds 0 1 2, defaults
    python benchmarks/m3lak_convergence.py --seeds 0 --draws 300 --tune 300
    python benchmarks/m3lak_convergence.py --seeds 0 --set latent_dim=10 b_tau=1
    python benchmarks/m3lak_convergence.py --task breast-cancer    # a second real data set
    python benchmarks/m3lak_convergence.py --task breast-cancer --seeds 2 --warmup

``--warmup`` keeps the tuning iterations and prints, per chain, ||Ω|| and the hinge's log
pseudo-likelihood of the training rows averaged over ten consecutive blocks of the tuning
iterations and ten of the draws: whether each chain reached the region its draws come from
before the draws began (a chain that arrives late shows as a trend in its first blocks).

``--task``: the tasks of ``benchmarks/accuracy.py``.  ``digits-AvB``: any UCI pair, the
same 75/25 split.  ``breast-cancer``: scikit-learn's bundled Wisconsin diagnostic breast-cancer
data as three views of each sample's ten cell-nucleus measurements (their means, standard
errors and worst values), the same 75/25 stratified split.  ``sk-digits-AvB``: two of
scikit-learn's 8 x 8 handwritten digits (not the UCI set), the left and right halves of each
image as two views of 32 pixels, the same 75/25 split: real data no sampler default was
chosen on.
``synthetic-{quadratic,circle,xor}``: ``make_nonlinear_latent(n_samples=1000, view_dims=(100,
50), random_seed=0)``, a 70/30 stratified split.  ``synthetic-wide-2`` and ``synthetic-wide-3``:
views wider than the training rows (see :func:`wide_views`), a 75/25 split.  Every split is
stratified, with ``random_state=0`` unless ``--split-seed`` says otherwise; ``--train-rows N``
keeps N training rows instead of the task's fraction (``digits-3v5 --train-rows 150``: the
216- and 240-feature views are wider than the rows).
"""

from __future__ import annotations

import argparse
import re
import time
import warnings
from contextlib import nullcontext

import arviz as az
import numpy as np
import xarray as xr
from accuracy import tasks as accuracy_tasks
from accuracy import uci_pair
from rhotmvrkm import task_data
from scipy import signal
from sklearn.model_selection import train_test_split

from bayesmv import M3LAK
from bayesmv.components.likelihoods import hinge_log_pseudolikelihood
from bayesmv.diagnostics.ppc import calibration
from bayesmv.inference.sample import keep_warmup


def _summary(name: str, x: np.ndarray) -> str:
    ds = xr.Dataset({"x": (("chain", "draw"), x)})
    return (f"  {name:<22} chain means {np.array2string(x.mean(axis=1), precision=3)}  "
            f"R-hat {float(az.rhat(ds)['x']):.3f}  ESS {float(az.ess(ds)['x']):.0f}")


def _within_chain_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Correlation of two (chain, draw) series after removing each chain's mean: which
    global quantity a slow decision value moves with."""
    a = (a - a.mean(axis=1, keepdims=True)).ravel()
    b = (b - b.mean(axis=1, keepdims=True)).ravel()
    return float(np.corrcoef(a, b)[0, 1])


def print_column_bandwidths(post: xr.Dataset) -> None:
    """The latent column whose bandwidth ``||Ω_{:j}||`` differs most between chains, with
    each view's log ARD precision of that column: on the synthetic tasks the chains put a
    large bandwidth on different weakly loaded columns (a column is not rotation-invariant,
    so this is a diagnosis, not a convergence check)."""
    spread = np.sqrt(np.sum(post["Omega"].values ** 2, axis=-2))  # (chain, draw, m)
    rhats = az.rhat(xr.Dataset({"x": (("chain", "draw", "column"), spread)}))["x"].values
    j = int(np.nanargmax(rhats))
    print(_summary(f"||Omega_:{j}|| (column)", spread[..., j]))
    log_r = np.log(post["r"].values[..., j])  # (chain, draw, view)
    for v in range(log_r.shape[-1]):
        print(f"    log r of view {v}, column {j}: chain means "
              f"{np.array2string(log_r[..., v].mean(axis=1), precision=2)}")


def print_chain_paths(est: M3LAK, blocks: int = 10) -> None:
    """Per chain, ||Ω|| and the training rows' hinge log pseudo-likelihood averaged over
    ``blocks`` consecutive blocks of the tuning iterations, then of the draws."""
    idata = est.idata_
    targets = idata.observed_data["y_tasks"].values
    for group in ("warmup_posterior", "posterior"):
        post = idata[group]
        omega = np.sqrt(np.sum(post["Omega"].values ** 2, axis=(-1, -2)))
        loglik = hinge_log_pseudolikelihood(post["f"].values, targets, est.C).sum(axis=(-1, -2))
        spans = np.array_split(np.arange(omega.shape[1]), blocks)  # iterations of each block
        print(f"  {group}: {omega.shape[1]} iterations in {blocks} blocks")
        for c in range(omega.shape[0]):
            print(f"    chain {c} ||Omega||  " + " ".join(f"{omega[c, b].mean():6.1f}"
                                                        for b in spans))
            print("            log lik  " + " ".join(f"{loglik[c, b].mean():6.1f}"
                                                      for b in spans))


def rhat_noise_floor(ess: float, chains: int, draws: int, n_quantities: int,
                     reps: int = 4, seed: int = 0) -> float:
    """Mean over ``reps`` of the largest rank-normalised split R-hat among ``n_quantities``
    independent stationary AR(1) chains whose bulk ESS is ``ess``: the max R-hat a sampler that
    has converged, with this autocorrelation, still shows by chance.  A measured max R-hat
    well above it points to a slow direction; one near it only to too few effective draws."""
    rng = np.random.default_rng(seed)
    frac = min(ess / (chains * draws), 1.0)
    rho = (1.0 - frac) / (1.0 + frac)  # the AR(1) coefficient of an ESS fraction
    out = []
    for _ in range(reps):
        start = rng.standard_normal((chains, 1, n_quantities))  # stationary N(0, 1)
        noise = rng.standard_normal((chains, draws, n_quantities)) * np.sqrt(1.0 - rho**2)
        rest = signal.lfilter([1.0], [1.0, -rho], noise[:, 1:], axis=1, zi=rho * start)[0]
        x = np.concatenate([start, rest], axis=1)
        out.append(float(az.rhat(xr.Dataset({"x": (("chain", "draw", "q"), x)}))["x"].max()))
    return float(np.mean(out))


def _slug(name: str) -> str:
    """The command-line name of a task of ``benchmarks/accuracy.py``: "UCI 3 vs 5" is
    ``digits-3v5``, "breast cancer" ``breast-cancer``, "synthetic xor" ``synthetic-xor``."""
    if name.startswith("UCI "):
        return "digits-" + name.removeprefix("UCI ").replace(" vs ", "v")
    return name.replace(" ", "-")


#: the tasks with views wider than their training rows: (rows, view widths, latent factors,
#: loading scale, data seed)
WIDE_TASKS = {"synthetic-wide-2": (400, (1000, 1500), 3, 0.3, 101),
              "synthetic-wide-3": (500, (500, 2000, 100), 4, 0.25, 102)}


def wide_views(rows: int, widths: tuple[int, ...], factors: int, scale: float, seed: int
               ) -> tuple[list[np.ndarray], np.ndarray]:
    """Views wider than the rows, few signal directions: ``x_v = scale · z A_v + ε`` with
    ``z ~ N(0, I_factors)``, standard normal ``A_v`` and ``ε``; label ``z₁² + z₂ > 1``.  Most
    of M3LAK's latent columns have nothing to explain but the views' noise."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(rows, factors))
    y = (z[:, 0] ** 2 + z[:, 1] > 1).astype(int)
    views = [z @ rng.normal(size=(factors, d)) * scale + rng.normal(size=(rows, d))
             for d in widths]
    return views, y


def load_task(name: str) -> tuple[list[np.ndarray], np.ndarray, float]:
    """The views, labels and test fraction of a task of ``benchmarks/accuracy.py`` by its
    command-line name (see the module docstring)."""
    for task, views, y, test_size in accuracy_tasks(quick=False):
        if _slug(task) == name:
            return views, y, test_size
    if name in WIDE_TASKS:
        return *wide_views(*WIDE_TASKS[name]), 0.25
    pair = digit_pair(name)
    if pair is not None:
        return uci_pair(*pair)
    pair = digit_pair(name, prefix="sk-digits")
    if pair is not None:
        return (*image_halves_pair(*pair), 0.25)
    raise ValueError(f"unknown task {name!r}")


def image_halves_pair(negative: int, positive: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Two of scikit-learn's 8 x 8 handwritten digits (not the UCI Multiple Features set) as
    two views, the left and right halves of each image (32 pixels each)."""
    views, y = task_data("sk-digits")
    keep = np.isin(y, (negative, positive))
    return [v[keep] for v in views], (y[keep] == positive).astype(int)


def digit_pair(name: str, prefix: str = "digits") -> tuple[int, int] | None:
    """The two digits of a task ``digits-AvB`` (``sk-digits-AvB`` with that prefix; A the
    negative class), or None."""
    pair = re.fullmatch(re.escape(prefix) + r"-(\d)v(\d)", name)
    if pair is None or pair[1] == pair[2]:
        return None
    return int(pair[1]), int(pair[2])


def task_name(text: str) -> str:
    """``--task``'s type: a task of ``benchmarks/accuracy.py``, any UCI pair ``digits-AvB`` or
    any pair of scikit-learn's 8 x 8 digits ``sk-digits-AvB``."""
    if (text in TASKS or digit_pair(text) is not None
            or digit_pair(text, prefix="sk-digits") is not None):
        return text
    raise argparse.ArgumentTypeError(f"unknown task {text!r}: one of {', '.join(TASKS)}, "
                                     "digits-AvB or sk-digits-AvB (A, B two different digits)")


TASKS = tuple(_slug(task) for task, *_ in accuracy_tasks(quick=False)) + tuple(WIDE_TASKS)


def parse_settings(items: list[str]) -> dict:
    out = {}
    for item in items:
        name, _, text = item.partition("=")
        try:
            out[name] = int(text)
        except ValueError:
            try:
                out[name] = float(text)
            except ValueError:
                out[name] = text
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--draws", type=int, default=None, help="default: the estimator's")
    parser.add_argument("--tune", type=int, default=None, help="default: the estimator's")
    parser.add_argument("--set", nargs="+", default=[], metavar="NAME=VALUE",
                        help="other M3LAK parameters (numbers or strings), e.g. latent_dim=10")
    parser.add_argument("--task", type=task_name, default="digits-3v5",
                        help=f"one of {', '.join(TASKS)} or any UCI pair digits-AvB")
    parser.add_argument("--split-seed", type=int, default=0,
                        help="random_state of the stratified train/test split (default 0)")
    parser.add_argument("--train-rows", type=int, default=None,
                        help="training rows (default: the task's split fraction)")
    parser.add_argument("--warmup", action="store_true",
                        help="keep the tuning iterations and print each chain's path")
    args = parser.parse_args()
    views, y, test_size = load_task(args.task)
    print(f"# task {args.task}: views of {[v.shape[1] for v in views]} features, {len(y)} rows, "
          f"split seed {args.split_seed}"
          + ("" if args.train_rows is None else f", {args.train_rows} training rows"))
    sizes = ({"test_size": test_size} if args.train_rows is None
             else {"train_size": args.train_rows})
    split = train_test_split(*views, y, stratify=y, random_state=args.split_seed, **sizes)
    X_train, X_test, y_train, y_test = split[0:-2:2], split[1:-2:2], split[-2], split[-1]
    extra = {k: v for k, v in (("draws", args.draws), ("tune", args.tune)) if v is not None}
    extra.update(parse_settings(args.set))
    print("seed | f: max R-hat, min bulk ESS, min tail ESS | tau: same | wall s | "
          "min bulk ESS/s of f | accuracy | Brier | ECE | f: median bulk ESS, max R-hat of a "
          "converged sampler at that ESS (noise floor)")
    for seed in args.seeds:
        start = time.perf_counter()
        with warnings.catch_warnings(), keep_warmup() if args.warmup else nullcontext():
            warnings.simplefilter("ignore")
            # four chains unless --set says otherwise (e.g. chains=2, the estimator's own)
            est = M3LAK(**{"chains": 4, "random_seed": seed, **extra}).fit(X_train, y_train)
        wall = time.perf_counter() - start
        post = est.idata_.posterior
        row = []
        for name in ("f", "tau"):
            ds = post[[name]]
            bulk = az.ess(ds, method="bulk")[name]
            row += [float(az.rhat(ds, method="rank")[name].max()), float(bulk.min()),
                    float(az.ess(ds, method="tail")[name].min())]
            if name == "f":
                f_bulk = bulk.values.ravel()
                median_ess, n_f = float(np.median(f_bulk)), int(f_bulk.size)
        floor = rhat_noise_floor(median_ess, post.sizes["chain"], post.sizes["draw"], n_f)
        cal = calibration(y_test, est.predict_proba(X_test), est.classes_)
        print(f"{seed} | {row[0]:.4f} {row[1]:.0f} {row[2]:.0f} | {row[3]:.4f} {row[4]:.0f} "
              f"{row[5]:.0f} | {wall:.0f} | {row[1] / wall:.2f} | "
              f"{est.score(X_test, y_test):.3f} | {cal.brier:.4f} | {cal.ece:.4f} | "
              f"{median_ess:.0f} {floor:.3f}")
        sources = post.attrs.get("warmup_restart_from")
        if sources is not None:
            print(f"  chains restarted after the pilot (the chain each continued from): "
                  f"{np.atleast_1d(sources).tolist()}")
        print(_summary("||beta||", np.sqrt(np.sum(post["beta"].values ** 2, axis=(-1, -2)))))
        omega = np.sqrt(np.sum(post["Omega"].values ** 2, axis=(-1, -2)))
        # the bandwidth along the most discriminative latent direction (invariant to the
        # latent rotations the sampler makes, unlike any one column of Omega)
        top_sv = np.linalg.svd(post["Omega"].values, compute_uv=False)[..., 0]
        print(_summary("||Omega||", omega))
        print(_summary("top singular value Omega", top_sv))
        print(_summary("mean |f|", np.abs(post["f"].values).mean(axis=(-1, -2))))
        f = post["f"].values.reshape(post.sizes["chain"], post.sizes["draw"], -1)
        slowest = int(np.argmin(f_bulk))
        print(_summary(f"f of the slowest value ({slowest})", f[..., slowest]))
        print(f"    its correlation (within chains) with ||Omega|| "
              f"{_within_chain_correlation(f[..., slowest], omega):+.2f}, with the top "
              f"singular value {_within_chain_correlation(f[..., slowest], top_sv):+.2f}")
        for v in range(post["tau"].shape[-1]):
            print(_summary(f"log tau_{v}", np.log(post["tau"].values[..., v])))
            log_w = 0.5 * np.log(np.sum(post[f"W_{v}"].values ** 2, axis=(-1, -2)))
            corr = _within_chain_correlation(f[..., slowest], log_w)
            print(_summary(f"log ||W_{v}||", log_w) + f"  corr. with the slowest f {corr:+.2f}")
        print_column_bandwidths(post)
        stats = est.idata_.sample_stats
        if "n_active_components" in stats:
            print(_summary("occupied DP components",
                           stats["n_active_components"].values.astype(float)))
        if args.warmup:
            print_chain_paths(est)


if __name__ == "__main__":
    main()
