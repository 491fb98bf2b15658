"""One self-contained HTML report of a fitted bayesmv classifier on held-out data.

The file has no scripts and no external resources: styles are inline and every figure is a
base64-encoded PNG, so it can be mailed, archived or opened offline.
"""

from __future__ import annotations

import base64
import datetime
import html
import io
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import binomtest
from sklearn.metrics import confusion_matrix

from bayesmv.diagnostics.convergence import ConvergenceReport, check_convergence
from bayesmv.diagnostics.html_tables import frame_html, scrollable
from bayesmv.diagnostics.ppc import posterior_predictive_check
from bayesmv.params import renamed_argument

__all__ = ["report", "wall_time_summary", "wilson_interval"]

# Everything must fit a 1280 px window: the page is at most 1100 px wide, long cells wrap,
# and a table wider than the page scrolls inside its own box (scrollable) instead.
_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:2em auto;
max-width:1100px;padding:0 1em;color:#1f2328;line-height:1.45}
h1{font-size:1.6em;margin-bottom:0.2em} h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;
margin-top:1.8em} .muted{color:#59636e;font-size:.9em}
table.bayesmv-table{border-collapse:collapse;margin:.6em 0;font-size:.9em}
table.bayesmv-table th,table.bayesmv-table td{border:1px solid #d0d7de;padding:3px 8px;
text-align:right;font-variant-numeric:tabular-nums} table.bayesmv-table th{background:#f6f8fa}
table.kv th,table.kv td{text-align:left;vertical-align:top} table.kv th{white-space:nowrap}
table.kv td{overflow-wrap:anywhere}
ul.params{columns:15em auto;column-gap:2em;list-style:none;padding:0;margin:.4em 0;
font-size:.9em} ul.params li{break-inside:avoid;overflow-wrap:anywhere}
ul.params code{color:#59636e}
.summary{display:grid;grid-template-columns:repeat(auto-fit,minmax(13em,1fr));gap:1em}
.card{border:1px solid #d0d7de;border-radius:6px;padding:.6em 1em}
.ok{color:#1a7f37;font-weight:600} .bad{color:#b42318;font-weight:600}
figure{margin:1em 0} figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.85em;color:#59636e} .error{color:#b42318}
"""


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (scipy's ``binomtest``)."""
    ci = binomtest(int(successes), int(n)).proportion_ci(confidence_level=confidence,
                                                         method="wilson")
    return float(ci.low), float(ci.high)


def _figure_html(fig, caption: str) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    try:
        # the figures lay themselves out (tight_layout); bbox_inches="tight" would draw each
        # one a second time to measure it, a third of the report's plotting time
        fig.savefig(buf, format="png", dpi=80)
    finally:
        plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return (f"<figure><img alt='{html.escape(caption, quote=True)}' "
            f"src='data:image/png;base64,{data}'><figcaption>{html.escape(caption)}"
            "</figcaption></figure>")


def _try_figure(make, caption: str, failures: list[str]) -> str:
    try:
        return _figure_html(make(), caption)
    except NotImplementedError as exc:
        return f"<p class='muted'>{html.escape(str(exc))}</p>"
    except Exception as exc:  # a broken picture must not cost the user the whole report
        message = f"{caption}: could not be drawn ({type(exc).__name__}: {exc})"
        failures.append(message)
        warnings.warn(f"bayesmv report: {message}", RuntimeWarning, stacklevel=3)
        return f"<p class='error'>{html.escape(message)}</p>"


def _kv_table(rows: dict[str, Any]) -> str:
    body = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_fmt(v))}</td></tr>"
                   for k, v in rows.items())
    return scrollable(f"<table class='bayesmv-table kv'>{body}</table>")


def _params_list(params: dict[str, Any]) -> str:
    # a few dozen short name = value pairs: in columns they take a few lines, not a page
    items = "".join(f"<li><code>{html.escape(str(k))}</code> = {html.escape(_fmt(v))}</li>"
                    for k, v in params.items())
    return f"<ul class='params'>{items}</ul>"


def _fmt(v: Any) -> str:
    if isinstance(v, float | np.floating):
        return f"{v:.4g}"
    if isinstance(v, np.ndarray):
        return np.array2string(v, precision=4, threshold=20)
    return str(v)


def _seconds(attrs, key: str) -> float | None:
    value = attrs.get(key)
    if isinstance(value, int | float | np.number) and np.isfinite(value):
        return float(value)
    return None


def _s(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds >= 1 else f"{seconds:.2f} s"


def wall_time_summary(idata, fit_seconds: float | None = None) -> str | None:
    """One line on where a fit's wall time went, from the timings in ``posterior.attrs``.

    The models record the wall time of their inference call (``sampling_seconds``: the
    ``pm.sample`` call or a MAP solve; ``fit_seconds``: the whole inference), PyMC records
    its sampling loop (``sampling_time``: tuning and drawing only), and
    :func:`bayesmv.distributed.sample_chains` the time on the cluster
    (``distributed_seconds``, ``chain_seconds``).  They nest, so they are shown as one
    breakdown rather than as separate figures that look like rival measurements.

    Parameters
    ----------
    idata : arviz.InferenceData
    fit_seconds : float, optional
        Wall time of the whole ``fit`` call, measured by the caller.

    Returns
    -------
    str or None
        e.g. ``"13.7 s whole fit = 11.9 s in pm.sample (4.6 s tuning and drawing, 7.3 s
        compiling, starting the chain processes and collecting the draws) + 1.8 s the rest of
        fit (validation, model build, diagnostics)"``; None when nothing was recorded.
    """
    attrs = idata.posterior.attrs
    drawing = _seconds(attrs, "sampling_time")  # PyMC's: its tuning + draw loop only
    distributed = _seconds(attrs, "distributed_seconds")
    if distributed is not None:
        chains = attrs.get("chain_seconds")
        per_chain = ""
        if chains is not None and np.size(chains):
            per_chain = (" (each chain task, model build and compilation included: "
                         + ", ".join(_s(float(c)) for c in np.ravel(chains)) + ")")
        inner = f"{_s(distributed)} sampling the chains as Dask tasks{per_chain}"
        call = distributed
    else:
        call = _seconds(attrs, "sampling_seconds")
        if call is None:
            call = _seconds(attrs, "fit_seconds")
        if call is None:
            return f"{_s(fit_seconds)} whole fit" if fit_seconds is not None else None
        if drawing is not None and drawing <= call:
            inner = (f"{_s(call)} in pm.sample ({_s(drawing)} tuning and drawing, "
                     f"{_s(call - drawing)} compiling, starting the chain processes and "
                     "collecting the draws)")
        else:
            selection = _seconds(attrs, "selection_seconds")
            of_which = (f" ({_s(selection)} of it choosing hyper-parameters by marginal "
                        "likelihood)" if selection else "")
            inner = f"{_s(call)} in inference{of_which}"
    if fit_seconds is None:
        return inner
    if fit_seconds >= call:
        return (f"{_s(fit_seconds)} whole fit = {inner} + {_s(fit_seconds - call)} the rest "
                "of fit (validation, model build, diagnostics)")
    return f"{_s(fit_seconds)} whole fit; {inner}"


def _training_summary(est) -> dict[str, Any]:
    idata = est.idata_
    rows: dict[str, Any] = {}
    if "observed_data" in idata.groups() and "y" in idata.observed_data:
        y_index = np.asarray(idata.observed_data["y"].values).astype(int)
        rows["training rows"] = len(y_index)
        counts = np.bincount(y_index, minlength=len(est.classes_))
        rows["training classes"] = ", ".join(f"{c}: {k}" for c, k in
                                             zip(est.classes_.tolist(), counts, strict=True))
    elif "f" in idata.posterior and "sample" in idata.posterior["f"].dims:
        rows["training rows"] = int(idata.posterior["f"].sizes["sample"])
    layout = getattr(est, "layout_", None)
    if layout is not None:
        rows["views"] = ", ".join(f"{name} ({size})" for name, size in
                                  zip(layout.view_names, layout.view_sizes, strict=True))
    return rows


def report(estimator, X_test, y_test, path: str | Path, *, title: str | None = None,
           extra: dict[str, Any] | None = None, fit_seconds: float | None = None,
           proba: np.ndarray | None = None, n_replications: int = 1000,
           random_seed: int | None = 0, random_state: int | None = None) -> Path:
    """Write one self-contained HTML report of a fitted classifier on test data.

    Sections: summary; data (training and test); fit settings and timings; convergence
    (table, warnings, trace and rank plots of the judged quantities); test accuracy with a
    95 % Wilson interval, confusion matrix; posterior predictive check and calibration
    (reliability diagram); posterior intervals of the decision values; view relevance (when
    the model has one).

    Parameters
    ----------
    estimator : fitted bayesmv classifier
    X_test : views as the estimator accepts them
    y_test : array-like of shape (n_samples,)
    path : str or Path
        The HTML file to write (its folder is created).
    title : str, optional
    extra : dict, optional
        More ``name: value`` lines for the fit section (e.g. a baseline's score).
    fit_seconds : float, optional
        Wall time of the whole ``fit`` call, when the caller measured it: the fit section
        then splits it into model building and inference (:func:`wall_time_summary`).
    proba : ndarray of shape (n_samples, n_classes), optional
        ``estimator.predict_proba(X_test)``, when the caller has it already (saves computing
        it again).
    n_replications : int, default 1000
        Replicated label vectors of the posterior predictive check.
    random_seed : int or None, default 0
        Seed of the replications.
    random_state : int or None
        Deprecated alias of ``random_seed``.

    Returns
    -------
    Path
        The file written.
    """
    from bayesmv import __version__
    from bayesmv.diagnostics.plots import (
        plot_decision_intervals,
        plot_rank,
        plot_reliability,
        plot_trace,
        plot_view_relevance,
    )

    started = time.perf_counter()
    estimator._check_fitted()
    path = Path(path)
    name = type(estimator).__name__
    title = title or f"bayesmv report: {name}"
    y_test = np.asarray(y_test)
    conv = getattr(estimator, "convergence_", None)
    if not isinstance(conv, ConvergenceReport):  # fits without one, and loaded models
        conv = check_convergence(estimator)
    kind = conv.inference
    ppc = posterior_predictive_check(estimator, X_test, y_test, n_replications=n_replications,
                                     random_seed=renamed_argument(
                                         "report", "random_seed", random_seed, "random_state",
                                         random_state), proba=proba)
    n = len(y_test)
    pred = ppc.y_pred  # the predictions the check already made
    correct = int(np.sum(pred == y_test))
    lo, hi = wilson_interval(correct, n)
    failures: list[str] = []
    esc = html.escape

    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
             f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
             f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{esc(title)}</h1><p class='muted'>{esc(name)}, {esc(kind)} fit; written "
             f"{datetime.datetime.now().isoformat(timespec='seconds')} by bayesmv "
             f"{esc(__version__)}</p>"]

    conv_class = "ok" if conv.ok else "bad"
    ppc_class = "ok" if ppc.ok else "bad"
    parts.append(
        "<div class='summary'>"
        f"<div class='card'>Test accuracy<br><b>{correct / n:.4f}</b> ({correct}/{n})<br>"
        f"<span class='muted'>95 % Wilson interval [{lo:.4f}, {hi:.4f}]</span></div>"
        f"<div class='card'>Convergence<br><span class='{conv_class}'>"
        f"{'OK' if conv.ok else 'PROBLEMS'}</span><br><span class='muted'>"
        f"{len(conv.warnings)} warning(s); {esc(kind)}</span></div>"
        f"<div class='card'>Posterior predictive check<br><span class='{ppc_class}'>"
        f"{'OK' if ppc.ok else 'CHECK'}</span><br><span class='muted'>"
        f"{len(ppc.warnings)} extreme p-value(s)</span></div>"
        f"<div class='card'>Calibration<br>Brier {ppc.calibration.brier:.4f}<br>"
        f"log-loss {ppc.calibration.log_loss:.4f}, ECE {ppc.calibration.ece:.4f}</div></div>")

    # -------------------------------------------------------------- data
    test_counts = {str(c): int(np.sum(y_test == c)) for c in estimator.classes_.tolist()}
    data_rows = _training_summary(estimator)
    data_rows["test rows"] = n
    data_rows["test classes"] = ", ".join(f"{c}: {k}" for c, k in test_counts.items())
    parts.append("<h2>Data</h2>" + _kv_table(data_rows))

    # --------------------------------------------------------------- fit
    fit_rows: dict[str, Any] = {"estimator": name, "inference": kind}
    wall = wall_time_summary(estimator.idata_, fit_seconds)
    if wall is not None:
        fit_rows["wall time"] = wall
    fit_rows.update(extra or {})
    parts.append("<h2>Fit</h2>" + _kv_table(fit_rows) + "<p>Parameters:</p>"
                 + _params_list(estimator.get_params(deep=False)))

    # ------------------------------------------------------- convergence
    parts.append("<h2>Convergence</h2>" + conv._repr_html_())
    if kind != "map" and len(conv.table):
        parts.append(_try_figure(lambda: plot_trace(estimator, report=conv),
                                 "Trace of the judged quantities with the largest R-hat",
                                 failures))
        if kind == "mcmc":
            parts.append(_try_figure(lambda: plot_rank(estimator, report=conv),
                                     "Rank plots (uniform histograms: the chains mix)",
                                     failures))

    # ---------------------------------------------------------- accuracy
    cm = pd.DataFrame(confusion_matrix(y_test, pred, labels=estimator.classes_),
                      index=[f"true {c}" for c in estimator.classes_.tolist()],
                      columns=[f"predicted {c}" for c in estimator.classes_.tolist()])
    parts.append(
        f"<h2>Test performance</h2><p>Accuracy <b>{correct / n:.4f}</b> ({correct} of {n} "
        f"rows), 95 % Wilson interval [{lo:.4f}, {hi:.4f}].</p>"
        + frame_html(cm))

    # --------------------------------------------------- PPC, calibration
    parts.append(
        "<h2>Posterior predictive check and calibration</h2>"
        "<p>Labels replicated from the model's normalised likelihood at each posterior draw; "
        "p-value = P(T(y<sub>rep</sub>) &ge; T(y)) with the model's predictions held fixed "
        "(mid p-value: ties counted half). Values near 0 or 1 flag what the model does not "
        "reproduce.</p>" + ppc._repr_html_())
    parts.append(_try_figure(lambda: plot_reliability(ppc), "Reliability diagram", failures))
    parts.append("<h2>Decision values</h2>")
    parts.append(_try_figure(lambda: plot_decision_intervals(estimator, X_test, y_test),
                             "Posterior intervals of the decision value per test row",
                             failures))

    # ---------------------------------------------------- view relevance
    parts.append("<h2>View relevance</h2>")
    try:
        relevance = estimator.view_relevance()
    except NotImplementedError as exc:
        parts.append(f"<p class='muted'>{esc(str(exc))}</p>")
    else:
        descriptions = relevance.attrs.get("description", {})
        if relevance.attrs.get("title"):
            parts.append(f"<p>{esc(relevance.attrs['title'])}</p>")
        heat_title, heat_cols = relevance.attrs.get("heatmap", (None, []))
        shown = relevance.drop(columns=list(heat_cols))
        # three significant digits are plenty for a relevance, and keep the columns narrow
        parts.append(frame_html(shown, float_format=lambda x: f"{x:.3g}"))
        if descriptions:
            parts.append("<ul>" + "".join(f"<li><b>{esc(str(k))}</b>: {esc(str(v))}</li>"
                                          for k, v in descriptions.items()) + "</ul>")
        if len(heat_cols):
            # one column per latent dimension would overflow the page: the heat map shows them
            parts.append(f"<p class='muted'>{esc(heat_title or 'Further columns')} "
                         f"({esc(', '.join(map(str, heat_cols[:1])))} … "
                         f"{esc(str(heat_cols[-1]))}): in the heat map below, and in "
                         "<code>view_relevance()</code>.</p>")
        parts.append(_try_figure(lambda: plot_view_relevance(relevance), "View relevance",
                                 failures))

    parts.append(f"<p class='muted'>Report written in {time.perf_counter() - started:.1f} s."
                 "</p></body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(parts), encoding="utf-8")
    return path
