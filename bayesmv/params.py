"""Checks of estimator and component hyper-parameters, one wording per kind of check.

Estimators call these in ``fit`` before any heavy work, so a bad value fails early with a
message naming the parameter.
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any, ClassVar

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


def renamed_argument(owner: str, new: str, value: Any, old: str, old_value: Any,
                     stacklevel: int = 3) -> Any:
    """The effective value of a function argument renamed from ``old`` to ``new``:
    ``old_value`` (with a ``FutureWarning``) when the deprecated name was given, else
    ``value``.  Estimators and components use :class:`RenamedParameters` instead."""
    if old_value is None:
        return value
    warn_renamed(owner, old, new, stacklevel)
    return old_value


def warn_renamed(owner: str, old: str, new: str, stacklevel: int) -> None:
    """The ``FutureWarning`` of a deprecated alias, one wording for estimators, components
    and functions."""
    warnings.warn(f"{owner}({old}=...) is deprecated; use {new}=..., the same parameter under "
                  "its new name", FutureWarning, stacklevel=stacklevel + 1)


def check_random_seed(value: Any, name: str = "random_seed") -> None:
    """Raise ValueError unless ``value`` is None or a non-negative integer (a seed that
    :class:`numpy.random.SeedSequence` accepts)."""
    if value is None:
        return
    if (isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral)
            or value < 0):
        raise ValueError(f"{name} must be None or a non-negative integer, got {value!r}")


class RenamedParameters:
    """Deprecated aliases of renamed parameters, one definition for estimators and components.

    A class lists ``RENAMED = {new name: old name}``; the old name stays an ``__init__``
    parameter (default None, stored under its own name, as ``get_params`` and ``clone``
    require) and, when given, takes precedence with a ``FutureWarning``
    (:meth:`_warn_renamed`, once per fit or build).  Code reads a renamed parameter through
    :meth:`_param` only.
    """

    RENAMED: ClassVar[dict[str, str]] = {}

    def _param(self, name: str) -> Any:
        """The effective value of parameter ``name``: its deprecated alias when that is given."""
        return getattr(self, self._param_name(name))

    def _param_name(self, name: str) -> str:
        """The name the user set parameter ``name``'s value under (for error messages)."""
        old = self.RENAMED.get(name)
        return old if old is not None and getattr(self, old, None) is not None else name

    def _warn_renamed(self, stacklevel: int = 3) -> None:
        """One ``FutureWarning`` per deprecated alias that is given."""
        for new, old in self.RENAMED.items():
            if getattr(self, old, None) is not None:
                warn_renamed(type(self).__name__, old, new, stacklevel)

    @classmethod
    def upgrade_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """Saved ``get_params()`` of an older version with the new names: an old name that
        was saved without its new one (written before the rename) moves to the new name, so
        loading such a file warns of nothing."""
        out = dict(params)
        for new, old in cls.RENAMED.items():
            if old in out and new not in out:
                out[new] = out.pop(old)
        return out
