"""Diagnostic pictures of a fitted bayesmv classifier; every function returns its figure.

Trace and rank plots are ArviZ's (``az.plot_trace``, ``az.plot_rank``), drawn for the judged
quantities that look worst (largest R-hat first), never for rotation-invariant latents.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import xarray as xr

from bayesmv.diagnostics.convergence import (
    ConvergenceReport,
    check_convergence,
    table_row_draws,
    without_numba,
)
from bayesmv.diagnostics.ppc import PPCReport

__all__ = ["plot_decision_intervals", "plot_rank", "plot_reliability", "plot_trace",
           "plot_view_relevance"]


def _pyplot():
    import matplotlib.pyplot as plt

    return plt


#: draws below which decision-value bars show the range, not percentile intervals
_MIN_INTERVAL_DRAWS = 20


def _worst_quantities(report: ConvergenceReport, max_quantities: int) -> list[str]:
    table = report.table
    if not len(table):
        raise ValueError("no judged quantity varies across draws: "
                         + ("a MAP fit is no Markov chain (one point estimate or independent "
                            "modes), so there is nothing to trace"
                            if report.inference == "map" else "nothing to trace"))
    order = table.sort_values(["r_hat", "ess_bulk"], ascending=[False, True]).index
    return list(order[:max_quantities])


def _draws_of(fitted_or_idata, report: ConvergenceReport, labels: Sequence[str]) -> xr.Dataset:
    idata = getattr(fitted_or_idata, "idata_", fitted_or_idata)
    return xr.Dataset({label: table_row_draws(idata, report.locations, label)
                       for label in labels})


def _judged(fitted_or_idata, var_names, report, max_quantities):
    if report is None:
        report = check_convergence(fitted_or_idata, var_names)
    if not isinstance(max_quantities, int) or max_quantities < 1:
        raise ValueError(f"max_quantities must be a positive integer, got {max_quantities!r}")
    labels = _worst_quantities(report, max_quantities)
    return _draws_of(fitted_or_idata, report, labels), labels


def plot_trace(fitted_or_idata, var_names=None, *, max_quantities: int = 4,
               report: ConvergenceReport | None = None):
    """ArviZ trace plot (density and trace per chain) of the worst judged quantities.

    Parameters
    ----------
    fitted_or_idata : fitted estimator or arviz.InferenceData
    var_names : sequence of str, optional
        Variables to judge (default: the identifiable ones, as :func:`check_convergence`).
    max_quantities : int, default 4
        Scalar quantities drawn, largest R-hat first.
    report : ConvergenceReport, optional
        A report already computed on the same fit (saves recomputing it).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ValueError
        For a MAP fit (a point estimate or an ensemble of modes: nothing to trace).
    """
    import arviz as az

    data, _ = _judged(fitted_or_idata, var_names, report, max_quantities)
    with without_numba():
        axes = az.plot_trace(data, compact=False, figsize=(10, 1.9 * len(data.data_vars) + 0.6))
    fig = np.ravel(axes)[0].figure
    fig.suptitle("Trace of the judged quantities with the largest R-hat", y=1.0)
    fig.tight_layout()
    return fig


def plot_rank(fitted_or_idata, var_names=None, *, max_quantities: int = 4,
              report: ConvergenceReport | None = None):
    """ArviZ rank plot (rank histograms per chain) of the worst judged quantities.

    Uniform histograms mean the chains mix; a chain with its ranks piled up at one end
    explores a different region.  Parameters as :func:`plot_trace`.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import arviz as az

    data, labels = _judged(fitted_or_idata, var_names, report, max_quantities)
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(labels), figsize=(3.2 * len(labels) + 0.5, 2.8),
                             squeeze=False)
    with without_numba():
        az.plot_rank(data, ax=axes[0])
    fig.suptitle("Rank plots of the judged quantities with the largest R-hat")
    fig.tight_layout()
    return fig


def plot_reliability(ppc: PPCReport, ax=None):
    """Reliability diagram: observed frequency against predicted probability per bin.

    Parameters
    ----------
    ppc : PPCReport
        From :func:`bayesmv.diagnostics.posterior_predictive_check`.
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = _pyplot()
    if ax is None:
        fig, ax = plt.subplots(figsize=(4.6, 4.2))
    else:
        fig = ax.figure
    cal = ppc.calibration
    rel = cal.reliability
    ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1, label="perfect")
    sizes = 20 + 280 * rel["count"] / max(1, rel["count"].max())
    ax.plot(rel["prob_pred"], rel["prob_true"], color="C0", linewidth=1)
    ax.scatter(rel["prob_pred"], rel["prob_true"], s=sizes, color="C0", zorder=3,
               label="bins (area ~ rows)")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(f"predicted {cal.target}")
    ax.set_ylabel("observed frequency")
    ax.set_title(f"Reliability: ECE {cal.ece:.3f}, Brier {cal.brier:.3f}", fontsize=10)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return fig


def plot_decision_intervals(estimator, X, y=None, *, max_samples: int = 200,
                            max_tasks: int = 4):
    """Posterior intervals of the decision value for each row of ``X``.

    Rows are sorted by their posterior mean; bars are the central 50 % (thick) and 95 %
    (thin) intervals of the estimator's decision-value draws (``_decision_draws``), coloured
    by the true label when ``y`` is given.  A one-draw (MAP) fit shows its point values, and
    a fit of fewer than :data:`_MIN_INTERVAL_DRAWS` draws (a MAP ensemble's modes) their
    mean and range: percentiles of a handful of values are not intervals.

    Parameters
    ----------
    estimator : fitted bayesmv classifier
    X : views as the estimator accepts them
    y : array-like, optional
        True labels (colour).
    max_samples : int, default 200
        At most this many rows (evenly spaced in the sorted order) are drawn.
    max_tasks : int, default 4
        One-vs-rest panels drawn for multi-class fits.

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = _pyplot()
    draws = np.asarray(estimator._decision_draws(X), dtype=float)
    S, n, T = draws.shape
    classes = np.asarray(estimator.classes_)
    y = None if y is None else np.asarray(y)
    tasks = list(range(min(T, max_tasks)))
    fig, axes = plt.subplots(len(tasks), 1, figsize=(8, 2.8 * len(tasks) + 0.4),
                             squeeze=False)
    for t, ax in zip(tasks, axes[:, 0], strict=True):
        d = draws[:, :, t]
        mean = d.mean(axis=0)
        order = np.argsort(mean, kind="stable")
        if n > max_samples:
            order = order[np.linspace(0, n - 1, max_samples).round().astype(int)]
        x = np.arange(len(order))
        if T == 1:
            positive, label_pos, label_neg = classes[1], f"{classes[1]}", f"{classes[0]}"
        else:
            positive, label_pos, label_neg = classes[t], f"{classes[t]}", "other"
        colours = np.full(len(order), "C7", dtype=object)
        if y is not None:
            colours = np.where(y[order] == positive, "C1", "C0")
        if S >= _MIN_INTERVAL_DRAWS:
            lo95, lo50, hi50, hi95 = np.percentile(d[:, order], [2.5, 25, 75, 97.5], axis=0)
            ax.vlines(x, lo95, hi95, colors=colours, linewidth=0.8, alpha=0.7)
            ax.vlines(x, lo50, hi50, colors=colours, linewidth=2.6)
        elif S > 1:
            ax.vlines(x, d[:, order].min(axis=0), d[:, order].max(axis=0), colors=colours,
                      linewidth=1.6)
        ax.scatter(x, mean[order], c=colours, s=8, zorder=3)
        ax.axhline(0.0, color="0.4", linewidth=0.8)
        if y is not None:
            ax.scatter([], [], c="C1", s=12, label=f"true {label_pos}")
            ax.scatter([], [], c="C0", s=12, label=f"true {label_neg}")
            ax.legend(loc="upper left", fontsize=8)
        what = ("posterior mean, 50 % and 95 % intervals" if S >= _MIN_INTERVAL_DRAWS
                else f"mean and range of {S} draws" if S > 1 else "point estimate (one draw)")
        head = "decision value" if T == 1 else f"decision value, {label_pos} vs rest"
        ax.set_title(f"{head}: {what}", fontsize=10)
        ax.set_xlabel("rows, sorted by posterior mean" if n <= max_samples
                      else f"{len(order)} of {n} rows, sorted by posterior mean")
        ax.set_ylabel("f")
    fig.tight_layout()
    return fig


def plot_view_relevance(estimator_or_frame):
    """The model's view-relevance picture (``estimator.view_relevance()``).

    One horizontal bar panel per relevance column (``attrs["bars"]``, default: every numeric
    column) and, when the frame names one in ``attrs["heatmap"]``, a view-by-column heat map.
    A column of positive values spanning more than two powers of ten is drawn on a log scale.

    Parameters
    ----------
    estimator_or_frame : fitted estimator or the DataFrame its ``view_relevance`` returned

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    NotImplementedError
        When the estimator has no view-relevance summary.
    """
    plt = _pyplot()
    df = (estimator_or_frame if isinstance(estimator_or_frame, pd.DataFrame)
          else estimator_or_frame.view_relevance())
    heat_title, heat_cols = df.attrs.get("heatmap", (None, []))
    numeric = [c for c in df.columns if pd.api.types.is_numeric_dtype(df[c])]
    bars = list(df.attrs.get("bars", [c for c in numeric if c not in heat_cols]))
    descriptions = df.attrs.get("description", {})
    n_panels = len(bars) + (1 if heat_cols else 0)
    if not n_panels:
        raise ValueError("the view-relevance frame has no numeric column to draw")
    views = [str(v) for v in df.index]
    height = 0.35 * len(views) + 1.6
    widths = [1.0] * len(bars) + ([max(1.2, 0.35 * len(heat_cols))] if heat_cols else [])
    fig, axes = plt.subplots(1, n_panels, figsize=(min(16, 3.3 * sum(widths) + 1), height),
                             squeeze=False, gridspec_kw={"width_ratios": widths})
    y = np.arange(len(views))
    for ax, col in zip(axes[0], bars, strict=False):
        values = df[col].to_numpy(dtype=float)
        log = _wants_log_scale(values)
        if log:
            # bars need a finite left edge on a log axis: start them a little below the
            # smallest value, so that every view's bar is visible
            left = 10 ** np.floor(np.log10(np.nanmin(values)) - 0.5)
            ax.barh(y, values - left, left=left, color="C0")
            ax.set_xscale("log")
            ax.set_xlim(left=left)
        else:
            ax.barh(y, np.nan_to_num(values), color="C0")
        ax.set_yticks(y, views if ax is axes[0, 0] else [""] * len(views))
        ax.invert_yaxis()
        ax.set_title(f"{col} (log scale)" if log else col, fontsize=10)
        if col in descriptions:
            ax.set_xlabel(_wrap(descriptions[col], 38), fontsize=7)
    if heat_cols:
        ax = axes[0, -1]
        M = df[list(heat_cols)].to_numpy(dtype=float)
        im = ax.imshow(M, aspect="auto", cmap="viridis")
        ax.set_yticks(y, views if not bars else [""] * len(views))
        ax.set_xticks(np.arange(len(heat_cols)), [str(c) for c in heat_cols], rotation=90,
                      fontsize=7)
        ax.set_title(_wrap(heat_title or "", 40), fontsize=9)
        fig.colorbar(im, ax=ax, shrink=0.8)
    title = df.attrs.get("title")
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def _wants_log_scale(values: np.ndarray, decades: float = 2.0) -> bool:
    """Whether positive values span more than ``decades`` powers of ten, so that on a linear
    axis the largest would flatten the others to nothing (M3LAK's τ of a near-noiseless view
    can be 1e7 next to values near 1)."""
    finite = values[np.isfinite(values)]
    if len(finite) < 2 or np.any(finite <= 0):
        return False
    return bool(np.log10(finite.max() / finite.min()) > decades)


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))
