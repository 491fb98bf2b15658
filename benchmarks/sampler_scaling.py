"""Cost per iteration and ESS per second of the decision values: hybrid vs NUTS.

Five views of dimensions (64, 144, 73, 128, 225) (the shape of the M3LAK paper's NUS-WIDE
table), labels from a nonlinear function of a shared latent, N = 1000 ... 10000, M3LAK's
defaults (``--paper-sizes``: the paper's m = 20, M = 100, as in the runs recorded before
2026-11-27).  Two chains run in parallel on the two cores; "s/iter" is wall
time per iteration of both chains, ESS is the bulk ESS of the training decision values f
(min and median over every training point; up to 1000 evenly spaced
points in the runs recorded before 2026-11-29, stop 55), and ESS/s divides it by the whole
sampling wall time, tuning included.  The paper's MATLAB code needed 27.7 s per iteration at
N = 10000.  NUTS samples the same posterior (the hinge itself, λ never introduced) through
nutpie when it is installed (``pip install "bayesmv[fast]"``), else through PyMC.

Run:  python benchmarks/sampler_scaling.py                 (hybrid at all sizes, NUTS at 1000)
      python benchmarks/sampler_scaling.py --sizes 1000 2000 --nuts-sizes 1000
      python benchmarks/sampler_scaling.py --sizes 1000 2000 --nuts-sizes --draws 1000 --tune 500
"""

from __future__ import annotations

import argparse
import warnings

from bayesmv import M3LAK
from bayesmv.datasets import make_nonlinear_latent
from bayesmv.diagnostics import ConvergenceWarning
from bayesmv.inference.sample import nutpie_available

VIEW_DIMS = (64, 144, 73, 128, 225)


#: the M3LAK paper's latent dimension and number of random frequencies
PAPER_SIZES = {"latent_dim": 20, "n_frequencies": 100}


def run(sampler: str, n: int, draws: int, tune: int, sizes: dict | None = None) -> tuple:
    X, y = make_nonlinear_latent(n_samples=n, view_dims=VIEW_DIMS, random_seed=0)
    # NUTS by nutpie when it is installed (compiled, no Python per gradient), else PyMC's
    nuts = "nutpie" if sampler == "nuts" and nutpie_available() else "pymc"
    est = M3LAK(inference=sampler, draws=draws, tune=tune, chains=2, cores=2, random_seed=0,
                nuts_sampler=nuts, **(sizes or {}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    seconds = est.sampling_time_
    table = est.convergence_.table.loc[lambda t: t.index.str.startswith("f[")]
    ess_min, ess_med = float(table["ess_bulk"].min()), float(table["ess_bulk"].median())
    name = "nutpie" if nuts == "nutpie" else sampler
    return (name, n, draws + tune, seconds / (draws + tune), ess_min, ess_med,
            ess_min / seconds, ess_med / seconds, float(table["r_hat"].max()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1000, 2000, 4000, 10000])
    parser.add_argument("--nuts-sizes", type=int, nargs="*", default=[1000])
    parser.add_argument("--draws", type=int, default=100)
    parser.add_argument("--nuts-draws", type=int, default=10)
    parser.add_argument("--tune", type=int, default=None, help="default: as many as draws")
    parser.add_argument("--paper-sizes", action="store_true",
                        help="m = 20, M = 100 (the paper's) instead of M3LAK's defaults")
    args = parser.parse_args()
    sizes = PAPER_SIZES if args.paper_sizes else None
    header = (f"{'sampler':<8}{'N':>7}{'iters':>7}{'s/iter':>9}{'ESS min':>9}{'ESS med':>9}"
              f"{'ESS/s min':>11}{'ESS/s med':>11}{'R-hat':>7}")
    print(header)
    print("-" * len(header))
    jobs = [("hybrid", n, args.draws) for n in args.sizes]
    jobs += [("nuts", n, args.nuts_draws) for n in args.nuts_sizes]
    for sampler, n, draws in jobs:
        tune = draws if args.tune is None or sampler == "nuts" else args.tune
        row = run(sampler, n, draws, tune, sizes)
        print(f"{row[0]:<8}{row[1]:>7}{row[2]:>7}{row[3]:>9.3f}{row[4]:>9.0f}{row[5]:>9.0f}"
              f"{row[6]:>11.3f}{row[7]:>11.3f}{row[8]:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
