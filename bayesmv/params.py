"""Checks of estimator and component hyper-parameters, one wording per kind of check.

Estimators call these in ``fit`` before any heavy work, so a bad value fails early with a
message naming the parameter.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np


def check_positive(name: str, value: Any, *, integer: bool = False,
                   allow_none: bool = False, allow_auto: bool = False) -> None:
    """Raise ValueError unless ``value`` is a positive finite number (``integer``: a positive
    integer), or ``None`` when ``allow_none``, or the string ``"auto"`` when ``allow_auto``.
    Booleans are refused although Python counts them as integers."""
    if (value is None and allow_none) or (allow_auto and isinstance(value, str)
                                          and value == "auto"):
        return
    if integer:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            what = "None or a positive integer" if allow_none else "a positive integer"
            raise ValueError(f"{name} must be {what}"
                             + (" or 'auto'" if allow_auto else "") + f", got {value!r}")
        return
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not np.isfinite(value) or value <= 0):
        raise ValueError(f"{name} must be a positive finite number"
                         + (" or None" if allow_none else "") + f", got {value!r}")


def check_ensemble(ensemble: Any, inference: str) -> None:
    """``ensemble``: None or a positive integer, and more than one MAP fit only with
    ``inference="map"`` (MVM, MultiViewClassifier)."""
    if ensemble is None:
        return
    check_positive("ensemble", ensemble, integer=True)
    if ensemble > 1 and inference != "map":
        raise ValueError(f"ensemble={ensemble} averages several MAP fits; it needs "
                         f"inference='map', got inference={inference!r} (leave ensemble=None)")


def check_random_seed(value: Any, name: str = "random_seed") -> None:
    """Raise ValueError unless ``value`` is None or a non-negative integer (a seed that
    :class:`numpy.random.SeedSequence` accepts)."""
    if value is None:
        return
    if (isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral)
            or value < 0):
        raise ValueError(f"{name} must be None or a non-negative integer, got {value!r}")
