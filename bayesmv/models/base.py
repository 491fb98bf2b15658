"""Estimator plumbing shared by every bayesmv model (scikit-learn conventions).

Constructors only store parameters; ``fit`` validates everything before any sampling starts
and only assigns fitted attributes (ending in ``_``) once it has succeeded, so a failed fit
never leaves a half-fitted model behind.  Fitted models save to one netCDF file (the
``InferenceData`` plus a JSON description in its attributes) and load without pickle.
"""

from __future__ import annotations

import json
import numbers
from pathlib import Path
from typing import Any

import arviz as az
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import NotFittedError

from bayesmv.data import (
    MultiViewData,
    ViewLayout,
    ViewStandardizer,
    check_labels,
    check_views,
)

#: attribute of ``idata.posterior`` holding the JSON description of a fitted estimator
MODEL_ATTR = "bayesmv_model"
_REGISTRY: dict[str, type] = {}


def register(cls: type) -> type:
    """Class decorator: make an estimator loadable by name from a saved file."""
    _REGISTRY[cls.__name__] = cls
    return cls


def _labels_to_json(classes: np.ndarray) -> dict[str, Any]:
    values = classes.tolist()
    if all(isinstance(c, bool | np.bool_) for c in values):
        kind = "bool"
    elif all(isinstance(c, numbers.Integral) for c in values):
        kind = "int"
    elif all(isinstance(c, numbers.Real) for c in values):
        kind = "float"
    elif all(isinstance(c, str) for c in values):
        kind = "str"
    else:
        raise TypeError("only int, float, bool or str class labels can be saved; got "
                        f"{sorted({type(c).__name__ for c in values})}")
    return {"kind": kind, "values": values}


def _labels_from_json(d: dict[str, Any]) -> np.ndarray:
    dtype = {"bool": bool, "int": np.int64, "float": float, "str": object}[d["kind"]]
    return np.asarray(d["values"], dtype=dtype)


class MultiViewClassifier(ClassifierMixin, BaseEstimator):
    """Base class: input validation, standardisation, labels, save/load."""

    # ------------------------------------------------------------- fitting
    def _validate_training_data(self, X, y) -> tuple[MultiViewData, np.ndarray, np.ndarray]:
        data = check_views(X, getattr(self, "view_sizes", None), argument="X")
        classes, y_index = check_labels(y, data.n_samples, argument="y")
        return data, classes, y_index

    def _check_fitted(self) -> None:
        if not hasattr(self, "idata_"):
            raise NotFittedError(f"This {type(self).__name__} instance is not fitted yet; "
                                 "call 'fit' with training data first.")

    def _prepare(self, X) -> MultiViewData:
        """Validate prediction-time views against the training layout and standardise."""
        self._check_fitted()
        data = check_views(X, getattr(self, "view_sizes", None), layout=self.layout_,
                           argument="X")
        return self.standardizer_.transform(data) if self.standardizer_ is not None else data

    # ---------------------------------------------------------- prediction
    def predict(self, X) -> np.ndarray:
        """Most probable class under the posterior predictive distribution."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]

    # ----------------------------------------------------------- persistence
    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _set_extra_state(self, state: dict[str, Any]) -> None:
        pass

    def save(self, path: str | Path) -> Path:
        """Write the fitted model to one netCDF file (no pickle).

        The file is the ``InferenceData`` (``az.from_netcdf`` reads it too) with the
        estimator's parameters, class labels, view layout and standardisation in the JSON
        attribute ``posterior.attrs['bayesmv_model']``.
        """
        self._check_fitted()
        path = Path(path)
        description = {
            "estimator": type(self).__name__,
            "params": self.get_params(deep=False),
            "classes": _labels_to_json(self.classes_),
            "layout": self.layout_.to_dict(),
            "standardizer": (self.standardizer_.to_dict()
                             if self.standardizer_ is not None else None),
            "extra": self._extra_state(),
        }
        idata = self.idata_.copy()
        idata.posterior.attrs[MODEL_ATTR] = json.dumps(description)
        idata.to_netcdf(str(path))
        return path

    @classmethod
    def load(cls, path: str | Path) -> MultiViewClassifier:
        """Load a model written by :meth:`save`; it predicts exactly as before saving."""
        return load(path, expected=cls)


def load(path: str | Path, expected: type | None = None) -> MultiViewClassifier:
    """Load any fitted bayesmv estimator saved with ``save``."""
    idata = az.from_netcdf(str(path))
    idata.load()
    try:
        description = json.loads(idata.posterior.attrs[MODEL_ATTR])
    except KeyError:
        raise ValueError(f"{path} holds an InferenceData but no bayesmv model description "
                         f"(attribute '{MODEL_ATTR}' is missing)") from None
    del idata.posterior.attrs[MODEL_ATTR]
    cls = _REGISTRY[description["estimator"]]
    if expected is not None and not issubclass(cls, expected):
        raise TypeError(f"{path} holds a {cls.__name__}, not a {expected.__name__}")
    est = cls(**description["params"])
    est.classes_ = _labels_from_json(description["classes"])
    est.layout_ = ViewLayout.from_dict(description["layout"])
    est.standardizer_ = (ViewStandardizer.from_dict(description["standardizer"])
                         if description["standardizer"] is not None else None)
    est.idata_ = idata
    est._set_extra_state(description["extra"])
    return est
