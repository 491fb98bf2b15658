"""Diagnostics for fitted bayesmv models: convergence, posterior predictive checks,
calibration, pictures and one-file HTML reports.

They work on every estimator (MCMC, Laplace and MAP fits alike) through a small protocol of
:class:`bayesmv.models.base.BaseMultiViewClassifier`: ``_class_probability_draws``,
``_decision_draws``, ``view_relevance`` and the kind of fit in
``idata_.posterior.attrs["inference"]``.
"""

from bayesmv.diagnostics.convergence import (
    ConvergenceReport,
    ConvergenceWarning,
    check_convergence,
    inference_kind,
    summary,
)
from bayesmv.diagnostics.plots import (
    plot_decision_intervals,
    plot_rank,
    plot_reliability,
    plot_trace,
    plot_view_relevance,
)
from bayesmv.diagnostics.ppc import Calibration, PPCReport, calibration, posterior_predictive_check
from bayesmv.diagnostics.report import report, wilson_interval

__all__ = [
    "Calibration",
    "ConvergenceReport",
    "ConvergenceWarning",
    "PPCReport",
    "calibration",
    "check_convergence",
    "inference_kind",
    "plot_decision_intervals",
    "plot_rank",
    "plot_reliability",
    "plot_trace",
    "plot_view_relevance",
    "posterior_predictive_check",
    "report",
    "summary",
    "wilson_interval",
]
