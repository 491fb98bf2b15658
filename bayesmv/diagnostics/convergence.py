"""Convergence checks on identifiable quantities (Vehtari et al. 2021 thresholds).

Latent factors (H, W, Ω, DP components) are identified only up to rotations, sign flips and
label switching, so their R-hat says little about whether predictions have converged.  The
default judged quantities are the decision values ``f`` at the training points, the view noise
precisions ``τ`` and, when learned, the prior precision ``v``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import arviz as az
import numpy as np
import pandas as pd

#: variables judged by default, when present in the posterior
IDENTIFIABLE = ("f", "tau", "v")


class ConvergenceWarning(UserWarning):
    """Sampling diagnostics (R-hat, ESS, divergences) fell short of their thresholds."""


@dataclass
class ConvergenceReport:
    """Outcome of :func:`check_convergence`.

    Attributes
    ----------
    ok : bool
        Every judged quantity meets the thresholds and there are no divergences.
    table : pandas.DataFrame
        One row per scalar quantity: ``r_hat``, ``ess_bulk``, ``ess_tail``, ``mcse_mean``.
    n_divergences : int
        Divergent transitions after tuning.
    warnings : list of str
        Plain sentences describing each problem.
    """

    ok: bool
    table: pd.DataFrame
    n_divergences: int
    n_chains: int
    n_draws: int
    var_names: tuple[str, ...]
    warnings: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def max_r_hat(self) -> float:
        return float(self.table["r_hat"].max()) if len(self.table) else float("nan")

    @property
    def min_ess_bulk(self) -> float:
        return float(self.table["ess_bulk"].min()) if len(self.table) else float("nan")

    @property
    def min_ess_tail(self) -> float:
        return float(self.table["ess_tail"].min()) if len(self.table) else float("nan")

    def summary_line(self) -> str:
        return (f"judged {', '.join(self.var_names)} ({len(self.table)} quantities, "
                f"{self.n_chains} chains x {self.n_draws} draws): max R-hat "
                f"{self.max_r_hat:.3f}, min bulk ESS {self.min_ess_bulk:.0f}, min tail ESS "
                f"{self.min_ess_tail:.0f}, divergences {self.n_divergences}")

    def __repr__(self) -> str:
        status = "OK" if self.ok else "PROBLEMS"
        lines = [f"ConvergenceReport [{status}]", "  " + self.summary_line()]
        if self.note:
            lines.append("  " + self.note)
        lines += [f"  - {w}" for w in self.warnings]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        items = "".join(f"<li>{w}</li>" for w in self.warnings)
        return (f"<b>ConvergenceReport: {'OK' if self.ok else 'PROBLEMS'}</b><br>"
                f"{self.summary_line()}<br><i>{self.note}</i><ul>{items}</ul>"
                + self.table.describe().to_html())


def check_convergence(fitted_or_idata, var_names=None, *, r_hat_max: float = 1.01,
                      ess_min_per_chain: float = 100.0,
                      max_points: int | None = 1000) -> ConvergenceReport:
    """Judge convergence of a fitted estimator (``idata_``) or an ``InferenceData``.

    Parameters
    ----------
    fitted_or_idata : estimator with ``idata_`` or arviz.InferenceData
    var_names : sequence of str, optional
        Quantities to judge; by default the identifiable ones present (``f``, ``τ``, ``v``).
    r_hat_max : float
        Largest acceptable rank-normalised split R-hat.
    ess_min_per_chain : float
        Smallest acceptable bulk and tail ESS per chain.
    max_points : int or None
        Judge ``f`` at this many evenly spaced training points at most (ArviZ needs ~3 ms
        per quantity; ``None`` judges all of them).
    """
    idata = getattr(fitted_or_idata, "idata_", fitted_or_idata)
    post = idata.posterior
    if var_names is None:
        var_names = [v for v in IDENTIFIABLE if v in post]
    var_names = tuple(var_names)
    n_chains, n_draws = int(post.sizes["chain"]), int(post.sizes["draw"])
    coords = {}
    if max_points is not None and "f" in var_names and post["f"].sizes["sample"] > max_points:
        n = post["f"].sizes["sample"]
        coords = {"sample": post["f"]["sample"].values[np.linspace(0, n - 1, max_points)
                                                         .round().astype(int)]}
    selected = post[list(var_names)]
    if coords:
        selected = selected.sel(coords)
    summary = az.summary(selected, kind="diagnostics")
    table = summary[["r_hat", "ess_bulk", "ess_tail", "mcse_mean"]].astype(float)
    n_div = 0
    if "sample_stats" in idata and "diverging" in idata.sample_stats:
        n_div = int(np.asarray(idata.sample_stats["diverging"]).sum())
    problems: list[str] = []
    ess_min = ess_min_per_chain * n_chains
    if n_chains < 2:
        problems.append("Only one chain was run: R-hat cannot detect chains that disagree; "
                        "run at least 2 chains.")
    bad_r = table.index[table["r_hat"] > r_hat_max]
    if len(bad_r):
        problems.append(f"{len(bad_r)} of {len(table)} quantities have R-hat above "
                        f"{r_hat_max} (worst {table['r_hat'].max():.3f}, at {bad_r[0]}).")
    for kind in ("ess_bulk", "ess_tail"):
        low = table.index[table[kind] < ess_min]
        if len(low):
            problems.append(f"{len(low)} of {len(table)} quantities have {kind.replace('_', ' ')}"
                            f" below {ess_min:.0f} ({ess_min_per_chain:.0f} per chain; lowest "
                            f"{table[kind].min():.0f}): draw more or thin less.")
    if n_div:
        problems.append(f"{n_div} divergent transitions after tuning.")
    note = ("Judged on identifiable quantities; rotation-invariant latents (H, W, V, Ω, DP "
            "components) are not judged.")
    if coords:
        note += f" f judged at {max_points} evenly spaced training points."
    return ConvergenceReport(ok=not problems, table=table, n_divergences=n_div,
                             n_chains=n_chains, n_draws=n_draws, var_names=var_names,
                             warnings=problems, note=note)


def warn_if_not_converged(report: ConvergenceReport) -> None:
    """Emit one :class:`ConvergenceWarning` summarising the report's problems."""
    if not report.ok:
        warnings.warn("Sampling diagnostics: " + " ".join(report.warnings),
                      ConvergenceWarning, stacklevel=3)
