"""Convergence checks on identifiable quantities (Vehtari et al. 2021 thresholds).

Latent factors (H, W, V, Ω, DP mixture components, MVM factors) are identified only up to
rotations, sign flips, rescalings and label switching, so their R-hat says little about whether
the predictions have converged: two chains can sit in mirror-image modes that predict the same.
The default judged quantities are those the likelihood pins down: the decision values ``f`` at
the training (probe) points, biases, noise precisions ``τ``, hyper-parameters (``v``, ``σ``,
``ϱ``, ``λ``, ``γ``, prior rates) and the log density ``lp`` when the sampler recorded it.

The table's numbers are ArviZ's ``az.summary(kind="diagnostics")`` columns (rank-normalised
split R-hat, bulk and tail ESS, Monte Carlo standard error of the mean), computed for all
entries at once by :mod:`bayesmv.diagnostics.chain_stats` (ArviZ's loop over entries cost
minutes on a ten-class fit) and tested against ArviZ's own.
"""

from __future__ import annotations

import contextlib
import html
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import arviz as az
import numpy as np
import pandas as pd
import xarray as xr
from arviz.labels import BaseLabeller

from bayesmv.diagnostics import chain_stats
from bayesmv.diagnostics.html_tables import frame_html

#: variables judged by default, in this order, when present in the posterior
IDENTIFIABLE = ("f", "b", "bias", "tau", "v", "sigma", "rho", "alpha", "lam", "gamma",
                "prior_rate")
#: log density from ``sample_stats``, judged by default when recorded
LOG_DENSITY = "lp"
#: the table's columns
COLUMNS = ["r_hat", "ess_bulk", "ess_tail", "mcse_mean"]
#: values of ``posterior.attrs["inference"]``
KINDS = ("mcmc", "laplace", "map")


class ConvergenceWarning(UserWarning):
    """Sampling diagnostics (R-hat, ESS, divergences) fell short of their thresholds."""


def inference_kind(fitted_or_idata) -> str:
    """How a fit was made: ``"mcmc"``, ``"laplace"`` or ``"map"``.

    Read from ``idata.posterior.attrs["inference"]``.  M3LAK records its sampler in
    ``attrs["sampler"]`` instead (always MCMC).  Without either attribute, one chain of one
    draw is a point estimate (``"map"``) and anything else is taken to be MCMC draws.
    """
    idata = getattr(fitted_or_idata, "idata_", fitted_or_idata)
    post = idata.posterior
    kind = post.attrs.get("inference")
    if kind is not None:
        kind = str(kind).lower()
        if kind in ("nuts", "gibbs", "hybrid"):
            return "mcmc"
        if kind == "exact":  # independent draws of a Gaussian posterior, as a Laplace fit's
            return "laplace"
        if kind not in KINDS:
            raise ValueError(f"posterior.attrs['inference'] is {kind!r}; expected one of {KINDS}")
        return kind
    if "sampler" in post.attrs:
        return "mcmc"
    if post.sizes.get("chain", 1) * post.sizes.get("draw", 1) == 1:
        return "map"
    return "mcmc"


def _join(names, limit: int = 12) -> str:
    names = list(names)
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f", … ({len(names) - limit} more)"


@dataclass
class ConvergenceReport:
    """Outcome of :func:`check_convergence`.

    Attributes
    ----------
    ok : bool
        Every judged quantity meets the thresholds, no draw is non-finite and there are no
        divergences (always True for a MAP fit, where no sampling diagnostics apply).
    table : pandas.DataFrame
        One row per judged scalar quantity (ArviZ labels such as ``f[12, 0]``): ``r_hat``,
        ``ess_bulk``, ``ess_tail``, ``mcse_mean``, plus ``variable``.  Empty for a MAP fit.
    n_divergences : int
        Divergent transitions after tuning.
    n_chains, n_draws : int
        Chains and draws per chain in the posterior.
    var_names : tuple of str
        The judged variables.
    warnings : list of str
        Plain sentences, one per problem, naming the quantity.
    note : str
        What was judged, what was not, and why.
    inference : str
        ``"mcmc"``, ``"laplace"`` or ``"map"``.
    r_hat_max, ess_min : float
        The thresholds applied (``ess_min`` is the total over chains).
    fixed : tuple of str
        Variables that are constant across draws (fixed or chosen hyper-parameters): nothing
        to judge.
    locations : dict
        Table label -> (group, variable, {dim: coordinate}) to find each judged quantity's
        draws (``idata[group][variable].sel(...)``); used by the trace and rank plots.
    """

    ok: bool
    table: pd.DataFrame
    n_divergences: int
    n_chains: int
    n_draws: int
    var_names: tuple[str, ...]
    warnings: list[str] = field(default_factory=list)
    note: str = ""
    inference: str = "mcmc"
    r_hat_max: float = 1.01
    ess_min: float = 100.0
    fixed: tuple[str, ...] = ()
    locations: dict = field(default_factory=dict, repr=False)

    @property
    def max_r_hat(self) -> float:
        return float(self.table["r_hat"].max()) if len(self.table) else float("nan")

    @property
    def min_ess_bulk(self) -> float:
        return float(self.table["ess_bulk"].min()) if len(self.table) else float("nan")

    @property
    def min_ess_tail(self) -> float:
        return float(self.table["ess_tail"].min()) if len(self.table) else float("nan")

    @property
    def by_variable(self) -> pd.DataFrame:
        """Worst value per judged variable: max R-hat, min ESS, max MCSE, and the count."""
        if not len(self.table):
            return pd.DataFrame(columns=["n", *COLUMNS])
        grouped = self.table.groupby("variable", sort=False)
        out = pd.DataFrame({
            "n": grouped.size(),
            "r_hat": grouped["r_hat"].max(),
            "ess_bulk": grouped["ess_bulk"].min(),
            "ess_tail": grouped["ess_tail"].min(),
            "mcse_mean": grouped["mcse_mean"].max(),
        })
        out.index.name = "variable"
        return out

    def summary_line(self) -> str:
        if self.inference == "map":
            return (f"{map_description(self.n_chains * self.n_draws)}: no sampling "
                    f"diagnostics apply to {', '.join(self.var_names) or 'its quantities'}")
        if self.inference == "laplace":
            return (f"{self.n_chains * self.n_draws} independent Laplace draws of "
                    f"{', '.join(self.var_names)} ({len(self.table)} quantities): min bulk ESS "
                    f"{self.min_ess_bulk:.0f}, min tail ESS {self.min_ess_tail:.0f} (estimates "
                    "of the number of draws, with noise)")
        chains = f"{self.n_chains} chain{'s' if self.n_chains != 1 else ''}"
        return (f"judged {', '.join(self.var_names)} ({len(self.table)} quantities, "
                f"{chains} x {self.n_draws} draws): max R-hat "
                f"{self.max_r_hat:.3f}, min bulk ESS {self.min_ess_bulk:.0f}, min tail ESS "
                f"{self.min_ess_tail:.0f}, divergences {self.n_divergences}")

    def __repr__(self) -> str:
        status = "OK" if self.ok else "PROBLEMS"
        lines = [f"ConvergenceReport [{status}] ({self.inference})", "  " + self.summary_line()]
        if self.note:
            lines.append("  " + self.note)
        lines += [f"  - {w}" for w in self.warnings]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        status = "OK" if self.ok else "PROBLEMS"
        colour = "#1a7f37" if self.ok else "#b42318"
        items = "".join(f"<li>{html.escape(w)}</li>" for w in self.warnings)
        parts = [f"<div class='bayesmv-convergence'><p><b><span style='color:{colour}'>"
                 f"ConvergenceReport: {status}</span></b> ({html.escape(self.inference)})<br>"
                 f"{html.escape(self.summary_line())}</p>",
                 f"<p><i>{html.escape(self.note)}</i></p>"]
        if items:
            parts.append(f"<ul>{items}</ul>")
        if len(self.table):
            parts.append(f"<p>Thresholds: R-hat &lt; {self.r_hat_max:g}, bulk and tail ESS "
                         f"&ge; {self.ess_min:.0f}. Worst value per variable:</p>")
            parts.append(frame_html(self.by_variable, float_format=lambda x: f"{x:.3g}"))
        parts.append("</div>")
        return "".join(parts)


def _judged_dataset(idata, var_names) -> tuple[xr.Dataset, tuple[str, ...]]:
    post = idata.posterior
    has_lp = "sample_stats" in idata.groups() and LOG_DENSITY in idata.sample_stats
    if var_names is None:
        names = [v for v in IDENTIFIABLE if v in post]
        if has_lp:
            names.append(LOG_DENSITY)
    else:
        names = [var_names] if isinstance(var_names, str) else list(var_names)
        unknown = [v for v in names if v not in post and not (v == LOG_DENSITY and has_lp)]
        if unknown:
            raise ValueError(f"var_names {unknown} are not in the posterior; it holds "
                             f"{sorted(post.data_vars)}")
    data = {v: (idata.sample_stats[v] if v == LOG_DENSITY and v not in post else post[v])
            for v in names}
    return xr.Dataset(data), tuple(names)


def check_convergence(fitted_or_idata, var_names=None, *, r_hat_max: float = 1.01,
                      ess_min_per_chain: float = 100.0,
                      max_points: int | None = None) -> ConvergenceReport:
    """Judge convergence of a fitted estimator (``idata_``) or an ``InferenceData``.

    Parameters
    ----------
    fitted_or_idata : estimator with ``idata_`` or arviz.InferenceData
    var_names : str or sequence of str, optional
        Quantities to judge; by default the identifiable ones present (``f``, biases, ``τ``,
        hyper-parameters, and ``lp`` from ``sample_stats``).  Rotation-invariant latents
        (H, W, V, Ω, DP components, MVM factors) are never judged by default.
    r_hat_max : float, default 1.01
        Largest acceptable rank-normalised split R-hat (Vehtari et al. 2021).
    ess_min_per_chain : float, default 100
        Smallest acceptable bulk and tail ESS per chain (Vehtari et al. 2021).
    max_points : int or None, default None
        Judge ``f`` at this many evenly spaced training points at most; ``None`` judges every
        one (10 000 values of 2 chains x 2000 draws take about 13 s on 2 cores).

    Returns
    -------
    ConvergenceReport
        For a MAP fit (one point estimate, or an ensemble of modes) the report is ``ok`` with
        an empty table and a note that no sampling diagnostics apply.  For a Laplace fit the
        draws are independent, so R-hat is ~1 and the ESS ~ the number of draws by
        construction: the table measures
        Monte Carlo precision only, not the quality of the Gaussian approximation.
    """
    if not (np.isfinite(r_hat_max) and r_hat_max > 1.0):
        raise ValueError(f"r_hat_max must be a number above 1, got {r_hat_max!r}")
    if not (np.isfinite(ess_min_per_chain) and ess_min_per_chain > 0):
        raise ValueError(f"ess_min_per_chain must be positive, got {ess_min_per_chain!r}")
    if max_points is not None and (not isinstance(max_points, int) or max_points < 1):
        raise ValueError(f"max_points must be a positive integer or None, got {max_points!r}")
    idata = getattr(fitted_or_idata, "idata_", fitted_or_idata)
    kind = inference_kind(idata)
    post = idata.posterior
    n_chains, n_draws = int(post.sizes["chain"]), int(post.sizes["draw"])
    ess_min = ess_min_per_chain * n_chains
    default = var_names is None
    selected, names = _judged_dataset(idata, var_names)
    n_div = 0
    if "sample_stats" in idata.groups() and "diverging" in idata.sample_stats:
        n_div = int(np.asarray(idata.sample_stats["diverging"]).sum())
    others = [v for v in idata.posterior.data_vars if v not in names]
    if kind == "map":
        note = (f"{map_description(n_chains * n_draws)}: no sampling diagnostics apply "
                "(R-hat, ESS and divergences need draws from one posterior; independent "
                "optimisations are not a Markov chain); judge it by its optimiser's "
                "convergence and by the predictive checks. " + _note(default, names, others))
        return ConvergenceReport(ok=True, table=_empty_table(), n_divergences=0,
                                 n_chains=n_chains, n_draws=n_draws, var_names=names,
                                 note=note, inference=kind, r_hat_max=r_hat_max,
                                 ess_min=ess_min)
    extras: list[str] = _restart_note(post)
    if max_points is not None and "f" in selected and "sample" in selected["f"].dims \
            and selected["f"].sizes["sample"] > max_points:
        n = selected["f"].sizes["sample"]
        keep = np.linspace(0, n - 1, max_points).round().astype(int)
        selected = selected.isel(sample=keep)
        extras.append(f"f judged at {max_points} evenly spaced training points.")

    # entries constant across draws (fixed or chosen hyper-parameters, a linear view's NaN γ)
    # have nothing to judge; ArviZ would report NaN for them
    problems: list[str] = []
    fixed, judged, constant = [], [], {}
    for v in names:
        values = np.asarray(selected[v].values, dtype=float)
        first = values[:1, :1]
        same = np.all((values == first) | (np.isnan(values) & np.isnan(first)), axis=(0, 1))
        if np.all(same):
            fixed.append(v)
            if kind == "mcmc" and values.size > 1 and n_chains * n_draws > 1:
                problems.append(f"{v} takes the same value in every draw of every chain: the "
                                "sampler did not move (or, if it is a fixed constant, leave it "
                                "out with var_names).")
            continue
        bad = ~np.isfinite(values) & ~same
        if bad.any():
            problems.append(f"{v} has non-finite draws ({int(bad.sum())} of {values.size} "
                            "values): the sampler diverged or a value overflowed.")
        judged.append(v)
        constant[v] = np.ravel(same)
    note = _note(default, judged, others)
    if fixed:
        extras.append(f"Constant across draws (fixed or chosen, not sampled): {', '.join(fixed)}.")


    table, locations = _empty_table(), {}
    if judged:
        table, locations = _diagnostics_table(idata, selected, judged)
        drop = np.concatenate([constant[v] for v in judged])
        if drop.any():
            extras.append(f"{int(drop.sum())} entries constant across draws are not judged "
                          f"({_join(table.index[drop], 5)}).")
            table = table[~drop]

    if kind == "laplace":
        # independent draws: ESS and R-hat measure nothing but their own estimation noise
        # (the smallest of 100 ESS estimates from 100 iid draws is ~15), so only the number
        # of draws is judged
        note = ("Laplace fit: the draws are independent draws from a Gaussian approximation, "
                "so there is nothing to converge (R-hat ~ 1 and ESS ~ the number of draws, "
                f"here {n_chains * n_draws}, up to estimation noise); the table measures Monte "
                "Carlo precision only, not how well the Gaussian approximates the posterior. "
                + note)
        if n_chains * n_draws < ess_min:
            problems.append(f"Only {n_chains * n_draws} Laplace draws (fewer than "
                            f"{ess_min:.0f}): Monte Carlo summaries of f are imprecise; draw "
                            "more.")
    else:
        if n_chains < 2:
            problems.append("Only one chain was run: R-hat cannot detect chains that disagree; "
                            "run at least 2 chains.")
        for v, rows in table.groupby("variable", sort=False):
            problems += _variable_problems(v, rows, r_hat_max, ess_min, ess_min_per_chain,
                                           n_chains, lambda label: table_row_draws(
                                               idata, locations, label).values)
    if n_div:
        problems.append(f"{n_div} divergent transitions after tuning: the sampler could not "
                        "follow the posterior's curvature there; raise target_accept or "
                        "reparameterise, and do not trust those regions.")
    note = " ".join([note, *extras])
    return ConvergenceReport(ok=not problems, table=table, n_divergences=n_div,
                             n_chains=n_chains, n_draws=n_draws, var_names=tuple(judged),
                             warnings=problems, note=note, inference=kind, r_hat_max=r_hat_max,
                             ess_min=ess_min, fixed=tuple(fixed),
                             locations={k: locations[k] for k in table.index})


def _restart_note(post) -> list[str]:
    """A sentence when some chains restarted from another chain after the hybrid sampler's
    pilot (:mod:`bayesmv.inference.restart`): R-hat then compares chains that share a
    start."""
    sources = np.atleast_1d(post.attrs.get("warmup_restart_from", []))
    moved = [(c, int(s)) for c, s in enumerate(sources) if int(s) != c]
    if not moved:
        return []
    names = ", ".join(f"{c} from {s}" for c, s in moved)
    return [f"After the pilot warm-up, chain(s) {names} restarted from a chain whose log "
            "density was higher by more than one within-chain standard deviation; R-hat "
            "compares chains that share that start, and the lower state they left is not "
            "judged."]


def map_description(n_modes: int) -> str:
    """How a MAP fit is named in reports: one point estimate, or an ensemble of modes."""
    if n_modes == 1:
        return "MAP fit (one point estimate)"
    return f"MAP ensemble ({n_modes} modes, equally weighted)"


def summary(fitted_or_idata, var_names=None, **kwargs) -> pd.DataFrame:
    """Posterior summary of a fit, sensible for every kind of fit (MCMC, Laplace, MAP).

    For MCMC fits this is ``az.summary(idata, var_names=...)``.  Laplace draws are
    independent draws of one "chain", where ESS and R-hat measure nothing (ArviZ would also
    warn that one chain is too few), so their default is ``kind="stats"``: mean, sd and HDI.
    A MAP fit keeps its point estimate as a posterior of one chain of one draw (an ensemble:
    one draw per mode, best first), on which ``az.summary`` warns about the shape and fills
    MCSE, ESS and R-hat with NaN or meaningless values; its summary here is the column
    ``map`` of the best mode's values, with ArviZ's row labels, and for an ensemble also the
    ``mean``, ``sd``, ``min`` and ``max`` over its modes.

    Parameters
    ----------
    fitted_or_idata : fitted estimator (its ``idata_``) or arviz.InferenceData
    var_names : str or sequence of str, optional
        Posterior variables to summarise.  Default: the identifiable ones present (decision
        values ``f``, biases, ``τ``, hyper-parameters; see :func:`check_convergence`), not
        the rotation-invariant latents, which can run to thousands of entries and whose
        summaries mean little.
    **kwargs
        Passed to ``az.summary`` (fits with draws only), e.g. ``kind="stats"``,
        ``hdi_prob=0.9``.

    Returns
    -------
    pandas.DataFrame
        One row per scalar quantity; ``attrs["inference"]`` is the kind of fit.
    """
    from arviz.labels import BaseLabeller
    from arviz.sel_utils import xarray_var_iter

    idata = getattr(fitted_or_idata, "idata_", fitted_or_idata)
    post = idata.posterior
    kind = inference_kind(idata)
    if var_names is None:
        names = [v for v in IDENTIFIABLE if v in post] or list(post.data_vars)
    else:
        names = [var_names] if isinstance(var_names, str) else list(var_names)
        unknown = [v for v in names if v not in post]
        if unknown:
            raise ValueError(f"var_names {unknown} are not in the posterior; it holds "
                             f"{sorted(post.data_vars)}")
    if kind != "map":
        if kind == "laplace":
            kwargs.setdefault("kind", "stats")
        with without_numba():
            table = az.summary(idata, var_names=names, **kwargs)
    else:
        point = post[names].isel(chain=0, draw=0)
        labeller = BaseLabeller()
        labels, values = [], []
        for var, sel, isel, value in xarray_var_iter(point, combined=True):
            labels.append(labeller.make_label_flat(var, sel, isel))
            values.append(float(value))
        table = pd.DataFrame({"map": values}, index=labels)
        if post.sizes["chain"] * post.sizes["draw"] > 1:  # an ensemble of modes
            modes = post[names].stack(mode=("chain", "draw"))
            for column, reduce, kw in (("mean", "mean", {}), ("sd", "std", {"ddof": 1}),
                                       ("min", "min", {}), ("max", "max", {})):
                stat = getattr(modes, reduce)("mode", **kw)  # sd as ArviZ's: ddof 1
                table[column] = [float(v) for *_, v in xarray_var_iter(stat, combined=True)]
    table.attrs["inference"] = kind
    return table


def _empty_table() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=float) for c in COLUMNS}
                        | {"variable": pd.Series(dtype=object)})


@contextlib.contextmanager
def without_numba():
    """Run ArviZ's statistics in NumPy rather than Numba for the duration of the block.

    ArviZ JIT-compiles its KDE and variance helpers on first use when Numba is installed,
    which costs seconds per process (up to ~6 s for the trace plot's densities) and buys
    nothing on a few hundred draws; the flag is ArviZ's own and is restored afterwards.
    """
    flag = az.Numba.numba_flag
    az.Numba.numba_flag = False
    try:
        yield
    finally:
        az.Numba.numba_flag = flag


def _note(default: bool, judged, others: list[str]) -> str:
    """What was judged and what was not (the first sentences end in "are not judged.": MVM's
    report keeps only what follows)."""
    names = ", ".join(judged) or "none"
    if not default:
        return (f"Judged on the requested quantities: {names}; the other posterior variables "
                f"({_join(others) or 'none'}) are not judged.")
    if not others:
        return (f"Judged on identifiable quantities: {names}; rotation-invariant latents (H, W, "
                "V, Ω, DP components, MVM factors) are not judged.")
    return (f"Judged on identifiable quantities: {names}. Latents and weights such as H, W, V, "
            "Ω, DP components and MVM factors are identified only up to rotations, sign flips "
            "or relabelling and reach the predictions only through f, so these "
            f"({_join(others)}) are not judged.")


def _diagnostics_table(idata, selected: xr.Dataset, names: list[str]
                       ) -> tuple[pd.DataFrame, dict]:
    """The table's columns for every entry of the judged variables, one row each with
    ArviZ's row label (``f[3, 1]``: coordinate values in C order), and where each label
    lives: ``{label: (group, variable, {dim: coordinate})}``."""
    labeller = BaseLabeller()
    labels, locations, columns = [], {}, []
    for v in names:
        da = selected[v]
        group = "posterior" if v in idata.posterior else "sample_stats"
        dims = da.dims[2:]
        # Python values whatever the dtype (nutpie's coordinates are object arrays of str)
        coords = [da[d].values.tolist() for d in dims]
        for ix in np.ndindex(*da.shape[2:]):
            sel = {d: c[i] for d, c, i in zip(dims, coords, ix, strict=True)}
            label = labeller.make_label_flat(v, sel, dict(zip(dims, ix, strict=True)))
            labels.append(label)
            locations[label] = (group, v, sel)
        values = np.asarray(da.values, dtype=float)
        columns.append(chain_stats.diagnostics(values.reshape(*values.shape[:2], -1)))
    table = pd.DataFrame({c: np.concatenate([col[c] for col in columns]) for c in COLUMNS},
                         index=pd.Index(labels))
    table["variable"] = [label.split("[", 1)[0] for label in labels]
    return table, locations


#: chains whose means lie this many pooled within-chain sds apart, each chain steady, sit in
#: separate states (:func:`separated_states`)
SEPARATED_GAP = 4.0


def separated_states(draws: np.ndarray, gap: float = SEPARATED_GAP) -> float | None:
    """How far apart the chains' means are, in pooled within-chain sds, when the chains sit
    in separate states; else None.

    ``draws`` is (chain, draw).  Separate states: the largest difference of chain means is
    above ``gap`` within-chain sds and every chain is steady, its two halves' means closer
    than a quarter of that difference.  Chains still relaxing from their starts fail the
    second test (their halves differ), so this tells a posterior whose modes the sampler
    does not cross from a warm-up too short, for which running longer is the remedy.
    """
    draws = np.asarray(draws, dtype=float)
    n_chains, n = draws.shape
    if n_chains < 2 or n < 4:
        return None
    sd = float(np.sqrt(np.mean(np.var(draws, axis=1))))
    means = draws.mean(axis=1)
    spread = float(means.max() - means.min())
    if not sd > 0 or spread <= gap * sd:
        return None
    # each chain's halves as split R-hat takes them (chain_stats._split: C first, C last)
    halves = chain_stats._split(draws[None])[0].mean(axis=1)
    drift = np.abs(halves[:n_chains] - halves[n_chains:])
    return spread / sd if float(drift.max()) < spread / 4.0 else None


def table_row_draws(idata, locations: dict, label: str) -> xr.DataArray:
    """The (chain, draw) draws of one row of the convergence table, found through the
    report's ``locations`` (its other coordinates dropped)."""
    group, var, sel = locations[label]
    da = idata[group][var].sel(sel) if sel else idata[group][var]
    return da.drop_vars([c for c in da.coords if c not in ("chain", "draw")])


def _variable_problems(v: str, rows: pd.DataFrame, r_hat_max: float, ess_min: float,
                       per_chain: float, n_chains: int,
                       draws_of: Callable[[str], np.ndarray] | None = None) -> list[str]:
    """Plain sentences for one variable's rows of the table (``draws_of(label)``: that row's
    (chain, draw) values, to say whether chains that disagree sit in separate states)."""
    out = []
    m = len(rows)
    where = "" if m == 1 else " for {k} of " + str(m) + " values"

    def worst(column: str, largest: bool) -> tuple[str, float]:
        label = rows[column].idxmax() if largest else rows[column].idxmin()
        return label, float(rows.loc[label, column])

    high = rows["r_hat"] > r_hat_max
    if high.any():
        label, value = worst("r_hat", True)
        apart = None if draws_of is None else separated_states(draws_of(label))
        advice = ("the chains disagree; run longer, or check how the chains were started."
                  if apart is None else
                  f"the chains sit in separate states there (each steady, their means "
                  f"{apart:.0f} within-chain sds apart): the posterior has modes the sampler "
                  "does not cross, so running longer will not reliably mix them; more chains "
                  "show how often each state occurs.")
        out.append(f"R-hat of {v} is above {r_hat_max:g}" + where.format(k=int(high.sum()))
                   + f" (worst {value:.3f}, at {label}): {advice}")
    what = f"{per_chain:.0f} per chain x {n_chains} chain{'s' if n_chains > 1 else ''}"
    for column, name, advice in (
            ("ess_bulk", "Bulk effective sample size (ess bulk)",
             "draw more iterations: the posterior mean and sd are imprecise."),
            ("ess_tail", "Tail effective sample size (ess tail)",
             "draw more iterations: the 5 % and 95 % quantiles are imprecise.")):
        low = rows[column] < ess_min
        if low.any():
            label, value = worst(column, False)
            out.append(f"{name} of {v} is below {ess_min:.0f} ({what})"
                       + where.format(k=int(low.sum()))
                       + f" (lowest {value:.0f}, at {label}): {advice}")
    return out


#: how the warning of :func:`warn_if_not_converged` begins
SAMPLING_DIAGNOSTICS = "Sampling diagnostics: "


def warn_if_not_converged(report: ConvergenceReport) -> None:
    """Emit one :class:`ConvergenceWarning` summarising the report's problems."""
    if not report.ok:
        shown = report.warnings[:3]
        more = len(report.warnings) - len(shown)
        tail = f" ({more} more: see the estimator's convergence_)" if more else ""
        warnings.warn(SAMPLING_DIAGNOSTICS + " ".join(shown) + tail,
                      ConvergenceWarning, stacklevel=3)
