"""Diagnostics for fitted bayesmv models."""

from bayesmv.diagnostics.convergence import (
    ConvergenceReport,
    ConvergenceWarning,
    check_convergence,
)

__all__ = ["ConvergenceReport", "ConvergenceWarning", "check_convergence"]
