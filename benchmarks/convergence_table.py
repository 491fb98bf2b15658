"""The convergence table's cost: ``bayesmv.diagnostics.chain_stats`` beside ArviZ's
``az.summary(kind="diagnostics")`` on the same draws, in one process.

``check_convergence`` judges every training decision value ``f`` (and ``tau``) of a fit.  Its
table holds ArviZ's columns (rank-normalised split R-hat, bulk and tail ESS, MCSE of the
mean); ArviZ computes them one entry at a time, ``chain_stats`` for all entries at once.
The draws here are AR(1) chains (lag-one correlation 0.9) of the shapes M3LAK's defaults
give: the README's digits 3 vs 5 with 4 chains, 1600 training rows with 2 chains, and ten
classes at 1600 rows.  Printed per shape: both times and the largest relative difference
over the table (rounding only).

Run:  python benchmarks/convergence_table.py              (about 30 s on 2 cores)
      python benchmarks/convergence_table.py --ten-class  (adds the ten-class shape: ~3 min)
"""

from __future__ import annotations

import argparse
import time
import warnings

import arviz as az
import numpy as np
from scipy import signal

from bayesmv.diagnostics import chain_stats
from bayesmv.diagnostics.convergence import without_numba

SHAPES = {"digits 3 vs 5, 4 chains": (4, 2000, 306), "1600 rows, 2 chains": (2, 2000, 1606)}
TEN_CLASS = {"ten classes, 1600 rows, 2 chains": (2, 2000, 16006)}


def ar1(rng: np.random.Generator, chains: int, draws: int, quantities: int,
        rho: float = 0.9) -> np.ndarray:
    noise = rng.standard_normal((chains, draws, quantities))
    return signal.lfilter([1.0], [1.0, -rho], noise, axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ten-class", action="store_true")
    args = parser.parse_args()
    shapes = SHAPES | (TEN_CLASS if args.ten_class else {})
    rng = np.random.default_rng(0)
    print(f"{'shape':34s} {'(chains, draws, values)':>24s} {'chain_stats s':>13s} "
          f"{'ArviZ s':>8s} {'speed-up':>8s} {'max rel. diff':>13s}")
    for name, shape in shapes.items():
        x = ar1(rng, *shape)
        start = time.perf_counter()
        ours = chain_stats.diagnostics(x)
        t_ours = time.perf_counter() - start
        start = time.perf_counter()
        with without_numba(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            table = az.summary({"x": x}, kind="diagnostics", round_to="none")
        t_arviz = time.perf_counter() - start
        diff = max(float(np.max(np.abs(ours[c] / table[c].to_numpy(float) - 1.0)))
                   for c in chain_stats.COLUMNS)
        print(f"{name:34s} {str(shape):>24s} {t_ours:13.2f} {t_arviz:8.2f} "
              f"{t_arviz / t_ours:7.1f}x {diff:13.1e}")


if __name__ == "__main__":
    main()
