"""Estimator plumbing shared by every bayesmv model (scikit-learn conventions).

Constructors only store parameters; ``fit`` validates everything before any sampling starts
and only assigns fitted attributes (ending in ``_``) once it has succeeded, so a failed fit
never leaves a half-fitted model behind.  Fitted models save to one netCDF file (the
``InferenceData`` plus a JSON description in its attributes) and load without pickle.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import os
import uuid
import warnings
from pathlib import Path
from typing import Any

import arviz as az
import numpy as np
import pandas as pd
import xarray as xr
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import NotFittedError

from bayesmv.data import (
    MultiViewData,
    ViewLayout,
    ViewStandardizer,
    check_labels,
    check_views,
)
from bayesmv.diagnostics.convergence import inference_kind
from bayesmv.params import RenamedParameters, check_random_seed

#: attribute of ``idata.posterior`` holding the JSON description of a fitted estimator
MODEL_ATTR = "bayesmv_model"
#: attributes holding the SHA-256 digest of the saved content and the writing package version
DIGEST_ATTR = "bayesmv_sha256"
VERSION_ATTR = "bayesmv_version"
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


#: key that marks a model piece (a component or a builder) in a saved description
PIECE_KEY = "__bayesmv_piece__"


def _piece_classes() -> dict[str, type]:
    import bayesmv.components as components
    from bayesmv.builder import ModelBuilder

    out = {name: getattr(components, name) for name in components.__all__}
    out["ModelBuilder"] = ModelBuilder
    return out


def _json_default(value: Any) -> Any:
    """numpy scalars and arrays in parameters (e.g. from a GridSearchCV grid) as JSON; model
    pieces (components, builders) as their class name and parameters."""
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    name = type(value).__name__
    if hasattr(value, "get_params") and _piece_classes().get(name) is type(value):
        return {PIECE_KEY: name, "params": value.get_params(deep=False)}
    raise TypeError(f"parameter value {value!r} of type {type(value).__name__} cannot be "
                    "saved as JSON")


def _decode_piece(d: dict[str, Any]) -> Any:
    """``json.loads`` hook: rebuild the pieces :func:`_json_default` wrote (by name from the
    public components only: loading runs no other code)."""
    if PIECE_KEY not in d:
        return d
    cls = _piece_classes().get(d[PIECE_KEY])
    if cls is None:
        raise ValueError(f"unknown model piece {d[PIECE_KEY]!r}")
    upgrade = getattr(cls, "upgrade_params", dict)
    return cls(**upgrade(d["params"]))


def _labels_from_json(d: dict[str, Any]) -> np.ndarray:
    dtype = {"bool": bool, "int": np.int64, "float": float, "str": object}[d["kind"]]
    return np.asarray(d["values"], dtype=dtype)


class BaseMultiViewClassifier(RenamedParameters, ClassifierMixin, BaseEstimator):
    """Base class: input validation, standardisation, labels, save/load."""

    # ------------------------------------------------------ scikit-learn tags
    def _fit_is_random(self) -> bool:
        """Whether ``fit`` draws random numbers (starts, landmarks, features, chains) with
        these parameters; with ``random_seed=None`` such a fit is not reproducible."""
        return True

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = (getattr(self, "random_seed", None) is None
                                  and self._fit_is_random())
        if hasattr(type(self), "transform"):  # e.g. MVLSVM's landmark features
            from sklearn.utils import TransformerTags

            tags.transformer_tags = TransformerTags(preserves_dtype=["float64"])
        return tags

    def _expected_failed_checks(self) -> dict[str, str]:
        """``{check name: reason}`` for ``parametrize_with_checks(...,
        expected_failed_checks=lambda est: est._expected_failed_checks())``: the scikit-learn
        estimator checks (``sklearn.utils.estimator_checks``) these parameters are known to
        fail, each with why (none by default)."""
        return {}

    # ------------------------------------------------------------- fitting
    def _validate_training_data(self, X, y) -> tuple[MultiViewData, np.ndarray, np.ndarray]:
        # every estimator validates its data here before any heavy work: check the seed too
        check_random_seed(getattr(self, "random_seed", None))
        data = check_views(X, getattr(self, "view_sizes", None), argument="X")
        classes, y_index = check_labels(y, data.n_samples, argument="y")
        return data, classes, y_index

    def _check_fitted(self) -> None:
        if not hasattr(self, "idata_"):
            raise NotFittedError(f"This {type(self).__name__} instance is not fitted yet; "
                                 "call 'fit' with training data first.")

    def _commit(self, **fitted: Any) -> None:
        """Install a fit's state in one step.

        ``fit`` computes everything first and calls this last: one ``dict.update`` cannot be
        split by an exception or a Ctrl-C (Python handles signals between bytecodes), so the
        estimator holds either the previous fit or the new one, never a mixture.
        """
        vars(self).update(fitted)

    @property
    def interrupted_(self) -> bool:
        """Whether sampling was interrupted (Ctrl-C) and the fit holds only the draws made
        before it (``idata_.posterior.attrs["interrupted"]``; kept by ``save``/``load``)."""
        self._check_fitted()
        return bool(self.idata_.posterior.attrs.get("interrupted", 0))

    def _prepare(self, X) -> MultiViewData:
        """Validate prediction-time views against the training layout and standardise."""
        self._check_fitted()
        data = check_views(X, getattr(self, "view_sizes", None), layout=self.layout_,
                           argument="X", estimator=type(self).__name__)
        return self.standardizer_.transform(data) if self.standardizer_ is not None else data

    # ---------------------------------------------------------- prediction
    def predict(self, X) -> np.ndarray:
        """Most probable class under the posterior predictive distribution."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]

    def training_decision_values(self) -> xr.DataArray:
        """``f`` at the training points, one value per posterior draw (a MAP fit: one chain,
        one draw per mode kept): the identifiable quantity convergence is judged on."""
        self._check_fitted()
        return self.idata_.posterior["f"]

    # --------------------------------------------------- diagnostics protocol
    # bayesmv.diagnostics reads fits only through these methods, so every estimator gets the
    # same checks; the defaults treat the fit as one plug-in point (right for MAP fits) and
    # estimators with posterior draws override them.
    def _inference_kind(self) -> str:
        """``"mcmc"``, ``"laplace"`` or ``"map"`` (from ``idata_.posterior.attrs``)."""
        self._check_fitted()
        return inference_kind(self.idata_)

    def _decision_draws(self, X) -> np.ndarray:
        """Posterior draws of the decision values at ``X``: (n_draws, n_samples, n_tasks).

        Default: ``decision_function(X)`` as one draw (a plug-in point estimate).
        """
        f = np.asarray(self.decision_function(X), dtype=float)
        return f.reshape(1, f.shape[0], -1)

    def _class_probability_draws(self, X) -> np.ndarray:
        """Class probabilities per posterior draw: (n_draws, n_samples, n_classes).

        Each draw is the model's normalised likelihood at that draw's decision values, so
        labels replicated from it are the model's posterior predictive; the mean over draws is
        (close to) ``predict_proba(X)``.  Default: ``predict_proba(X)`` as one draw.
        """
        return np.asarray(self.predict_proba(X), dtype=float)[None]

    def view_relevance(self) -> pd.DataFrame:
        """How much the fitted model relies on each view: one row per view.

        Every numeric column is one relevance measure; ``attrs["description"]`` explains
        each, ``attrs["title"]`` heads the picture of
        :func:`bayesmv.diagnostics.plot_view_relevance`, optional ``attrs["bars"]`` lists the
        columns drawn as bars and ``attrs["heatmap"]`` = (title, columns) a view-by-column
        heat map.
        """
        raise NotImplementedError(f"{type(self).__name__} has no view-relevance summary; "
                                  "diagnostics reports leave that section out")

    # ----------------------------------------------------------- persistence
    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _set_extra_state(self, state: dict[str, Any]) -> None:
        pass

    def _prediction_constants(self) -> set[str]:
        """Names in ``idata_.constant_data`` that prediction or ``load`` read.

        Everything else there is training data that ``pm.sample`` copied from the model graph
        (the standardised training views, their features, the targets), which ``save`` writes
        only with ``include_training_data=True``.  Default: none.
        """
        return set()

    def save(self, path: str | Path, *, include_training_data: bool = False,
             max_draws: int | None = None) -> Path:
        """Write the fitted model to one compressed netCDF file (no pickle).

        The file is the ``InferenceData`` (``az.from_netcdf`` reads it too) with the
        estimator's parameters, class labels, view layout and standardisation in the JSON
        attribute ``posterior.attrs['bayesmv_model']``, the package version, and a SHA-256
        digest of every stored array, every attribute and that description, so a truncated or
        accidentally altered file is refused at load time instead of predicting wrongly.  The
        digest is not a signature: whoever can edit the file can recompute it, so it does not
        protect against deliberate tampering.  The file is written under a temporary name and
        then renamed, so an interrupted save never leaves a damaged file at ``path`` (an
        existing file there stays as it was).

        Parameters
        ----------
        path : str or Path
        include_training_data : bool, default False
            Also write the copies of the training data that the fit keeps only for reference
            (``constant_data`` from ``pm.sample``: the standardised training views, their
            features and the targets).  Whatever prediction needs is written either way: the
            training rows of an exact-kernel :class:`RhoTMVRKM`, the landmarks of
            :class:`MVLSVM` and :class:`MVML`, and the labels (``observed_data``).
        max_draws : int or None, default None
            Keep at most this many evenly spaced draws per chain (from the first to the last)
            of every posterior group (``posterior``, ``sample_stats``...); the kept draws keep
            their ``draw`` coordinates and ``posterior.attrs['saved_draws_of']`` records how
            many there were.  None keeps every draw, and the loaded model then predicts
            bit-identically; so does ``max_draws = max_predict_draws // chains``, the
            draws prediction averages over (see :func:`prediction_draws_per_chain`).  A model
            thinned further predicts from the kept draws only (as if it had been fitted with
            them), so Monte-Carlo averages such as ``predict_proba`` of :class:`M3LAK` or a
            Laplace :class:`MVM` change by their Monte-Carlo error.

        Returns
        -------
        Path
            ``path``.

        Notes
        -----
        Every numeric array of 16 KiB or more is stored with netCDF/HDF5 zlib compression
        (level 4, byte shuffle, one chunk per chain).  Posterior draws are full-precision
        floats and compress by only ~10%; ``max_draws`` is what makes a large MCMC fit
        small.
        """
        from bayesmv import __version__

        self._check_fitted()
        if max_draws is not None and (isinstance(max_draws, bool)
                                      or not isinstance(max_draws, numbers.Integral)
                                      or max_draws < 1):
            raise ValueError(f"max_draws must be a positive integer or None, got {max_draws!r}")
        path = Path(path)
        description = {
            "estimator": type(self).__name__,
            "bayesmv_version": __version__,
            "params": self.get_params(deep=False),
            "classes": _labels_to_json(self.classes_),
            "layout": self.layout_.to_dict(),
            "standardizer": (self.standardizer_.to_dict()
                             if self.standardizer_ is not None else None),
            "extra": self._extra_state(),
        }
        idata = _shallow_copy(self.idata_)
        if not include_training_data:
            _drop_training_data(idata, self._prediction_constants())
        if max_draws is not None:
            _thin_chains(idata, int(max_draws))
        text = json.dumps(description, default=_json_default)
        idata.posterior.attrs[MODEL_ATTR] = text
        idata.posterior.attrs[VERSION_ATTR] = __version__
        idata.posterior.attrs[DIGEST_ATTR] = _digest(idata, text)
        # a fresh name beside the target (same file system, so the rename is atomic)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")
        try:
            _write_netcdf(idata, tmp)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def load(cls, path: str | Path) -> BaseMultiViewClassifier:
        """Load a model written by :meth:`save`; it predicts exactly as before saving."""
        return load(path, expected=cls)


def prediction_draws_per_chain(limit: int, n_chains: int) -> int:
    """How many draws of each chain prediction keeps when it may use ``limit`` in all."""
    return max(1, limit // n_chains)


def thinned_draws(posterior: xr.Dataset, names: list[str], limit: int
                  ) -> dict[str, np.ndarray]:
    """The same evenly spaced draws of every chain, :func:`prediction_draws_per_chain` of
    each, chains stacked: ``{name: array (n_kept, *shape)}``, the same draws for every name.

    They are the draws ``save(max_draws=prediction_draws_per_chain(limit, chains))`` keeps,
    so a model saved that way predicts exactly as the fitted one.
    """
    n_chains, n_draws = posterior.sizes["chain"], posterior.sizes["draw"]
    keep = _evenly_spaced(n_draws, prediction_draws_per_chain(limit, n_chains))
    return {n: posterior[n].values[:, keep].reshape((n_chains * len(keep),)
                                                    + posterior[n].shape[2:])
            for n in names}


#: netCDF/HDF5 compression of every stored numeric array (zlib level 4 with byte shuffle:
#: shuffling groups the floats' sign/exponent bytes, which is most of what compresses)
COMPRESSION = {"zlib": True, "complevel": 4, "shuffle": True}
#: upper bound on one HDF5 chunk (HDF5 allows < 4 GiB; one chunk per chain stays below this
#: for any realistic fit, larger arrays are split further along their leading axes)
_MAX_CHUNK_BYTES = 1 << 28
#: arrays below this size are stored contiguous and uncompressed: a chunked layout's index
#: costs more than zlib saves on a few KiB of full-precision draws (measured: files of the
#: small test fits grew by up to 15% with a 1 KiB threshold and shrank from 16 KiB)
_MIN_COMPRESSED_BYTES = 16 * 1024


def _shallow_copy(idata: az.InferenceData) -> az.InferenceData:
    """A new InferenceData whose groups are shallow copies (own attributes and variable
    lists, shared arrays): ``save`` edits those, never the fitted ``idata_``'s arrays."""
    out = az.InferenceData(**{g: idata[g].copy(deep=False) for g in idata.groups()})
    out.attrs.update(idata.attrs)
    return out


def _drop_training_data(idata: az.InferenceData, keep: set[str]) -> None:
    """Remove the ``constant_data`` variables not named in ``keep`` (training data that
    prediction does not read), and the group when nothing is left."""
    if "constant_data" not in idata.groups():
        return
    const = idata.constant_data
    kept = const.drop_vars([n for n in map(str, const.data_vars) if n not in keep])
    if kept.data_vars:
        # coordinates only the dropped variables used go too
        used = {d for var in kept.data_vars.values() for d in var.dims}
        idata.constant_data = kept.drop_vars([c for c in map(str, kept.coords)
                                              if not set(kept[c].dims) <= used])
    else:
        del idata.constant_data


def _evenly_spaced(n: int, k: int) -> np.ndarray:
    """``min(k, n)`` distinct indices of ``range(n)`` as evenly spaced as integers allow,
    the first and last included (the last alone for ``k = 1``: the most converged draw)."""
    if k >= n:
        return np.arange(n)
    if k == 1:
        return np.array([n - 1])
    # floor(i (n-1) / (k-1)): consecutive indices differ by ⌊step⌋ or ⌈step⌉, step ≥ 1
    return np.arange(k) * (n - 1) // (k - 1)


def _thin_chains(idata: az.InferenceData, max_draws: int) -> None:
    """Keep at most ``max_draws`` evenly spaced draws per chain in every group that holds
    posterior draws (prior groups have their own draws and are left alone)."""
    n_draws = idata.posterior.sizes.get("draw", 1)
    if max_draws >= n_draws:
        return
    keep = _evenly_spaced(n_draws, max_draws)
    for group in idata.groups():
        ds = idata[group]
        if "prior" in group or ds.sizes.get("draw") != n_draws or "chain" not in ds.dims:
            continue
        setattr(idata, group, ds.isel(draw=keep))
    # a re-saved thinned model keeps the count its fit had
    idata.posterior.attrs.setdefault("saved_draws_of", int(n_draws))


def _encoding(ds: xr.Dataset) -> dict[str, dict[str, Any]]:
    """Compression settings for every numeric array of a group worth compressing."""
    out = {}
    for name, var in ds.variables.items():
        if var.dtype.kind not in "biuf" or var.ndim == 0 or var.nbytes < _MIN_COMPRESSED_BYTES:
            continue
        # one chunk per chain: big chunks compress better than HDF5's default small ones
        chunks = list(var.shape)
        lead = 1 if var.dims[0] == "chain" else 0
        for axis in range(var.ndim):
            if axis < lead or int(np.prod(chunks)) * var.dtype.itemsize > _MAX_CHUNK_BYTES:
                chunks[axis] = 1
        out[str(name)] = {**COMPRESSION, "chunksizes": tuple(max(1, c) for c in chunks)}
    return out


def _write_netcdf(idata: az.InferenceData, path: Path) -> None:
    """Write every group as a compressed netCDF group (the layout of
    ``InferenceData.to_netcdf``, which ``az.from_netcdf`` reads)."""
    mode = "w"
    if idata.attrs:
        xr.Dataset(attrs=dict(idata.attrs)).to_netcdf(path, mode=mode, engine="h5netcdf")
        mode = "a"
    for group in idata.groups():
        ds = idata[group]
        # encodings a loaded file carried (its chunking, its filters) must not leak in
        ds = ds.copy(deep=False)
        for var in ds.variables.values():
            var.encoding = {}
        ds.to_netcdf(path, mode=mode, engine="h5netcdf", group=group,
                     encoding=_encoding(ds))
        mode = "a"


def _canonical_attrs(attrs: dict) -> str:
    """Attributes in a form that survives a netCDF round trip (which turns a one-element list
    into a scalar and Python numbers into numpy ones)."""
    items = sorted((str(k), np.atleast_1d(np.asarray(v)).ravel().tolist())
                   for k, v in attrs.items() if k not in (MODEL_ATTR, DIGEST_ATTR))
    return repr(items)


def _digest(idata: az.InferenceData, description: str) -> str:
    """SHA-256 over the description, every array (name, dtype, shape, bytes) of every group
    and every attribute (of the groups and of their arrays)."""
    h = hashlib.sha256(description.encode())
    if idata.attrs:  # files written so far carry none: their digests stay as they were
        h.update(f"/attrs/{_canonical_attrs(dict(idata.attrs))}".encode())
    for group in sorted(idata.groups()):
        ds = idata[group]
        h.update(f"{group}/attrs/{_canonical_attrs(ds.attrs)}".encode())
        for name in sorted(map(str, ds.variables)):
            h.update(f"{group}/{name}/attrs/{_canonical_attrs(ds[name].attrs)}".encode())
            values = np.ascontiguousarray(ds[name].values)
            if values.dtype.kind in "OUS":
                values = np.asarray(values.astype(str))
                h.update(f"{group}/{name}/{values.tolist()!r}".encode())
                continue
            h.update(f"{group}/{name}/{values.dtype.str}/{values.shape}".encode())
            h.update(values.tobytes())
    return h.hexdigest()


def load(path: str | Path, expected: type | None = None) -> BaseMultiViewClassifier:
    """Load any fitted bayesmv estimator saved with ``save``.

    Only netCDF arrays and JSON are read (no pickle: loading cannot run code).  A file that
    is not a bayesmv model, is truncated, or whose arrays or description were altered after
    saving raises a ``ValueError`` that says so.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such model file: {path}")
    try:
        idata = az.from_netcdf(str(path))
        idata.load()
    except Exception as exc:  # h5netcdf/h5py raise OSError, KeyError, ValueError...
        raise ValueError(f"{path} could not be read as a netCDF model file (truncated or not a "
                         f"bayesmv file?): {type(exc).__name__}: {exc}") from exc
    attrs = idata.posterior.attrs if "posterior" in idata.groups() else {}
    if MODEL_ATTR not in attrs:
        raise ValueError(f"{path} holds no bayesmv model description (attribute "
                         f"'{MODEL_ATTR}' is missing); was it written by an estimator's save()?")
    text = attrs.pop(MODEL_ATTR)
    digest = attrs.pop(DIGEST_ATTR, None)
    if digest is None or digest != _digest(idata, text):
        attrs.pop(VERSION_ATTR, None)
        raise ValueError(f"{path} failed its integrity check: its arrays, attributes or model "
                         "description differ from what was saved (the file was altered or "
                         "damaged)")
    attrs.pop(VERSION_ATTR, None)
    try:
        description = json.loads(text, object_hook=_decode_piece)
        cls = _REGISTRY[description["estimator"]]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: the model description is not valid ({exc!r})") from exc
    if expected is not None and not issubclass(cls, expected):
        raise TypeError(f"{path} holds a {cls.__name__}, not a {expected.__name__}")
    from bayesmv import __version__

    saved_version = description.get("bayesmv_version")
    try:
        est = cls(**cls.upgrade_params(description["params"]))
        est.classes_ = _labels_from_json(description["classes"])
        est.layout_ = ViewLayout.from_dict(description["layout"])
        est.standardizer_ = (ViewStandardizer.from_dict(description["standardizer"])
                             if description["standardizer"] is not None else None)
        est.idata_ = idata
        est.saved_with_version_ = saved_version
        est._set_extra_state(description["extra"])
    except Exception as exc:
        raise ValueError(f"{path}: a {description['estimator']} saved by bayesmv "
                         f"{saved_version} cannot be restored by bayesmv {__version__} "
                         f"({type(exc).__name__}: {exc})") from exc
    if saved_version != __version__:
        warnings.warn(f"{path} was saved by bayesmv {saved_version}; this is {__version__}",
                      UserWarning, stacklevel=2)
    return est
