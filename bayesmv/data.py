"""Multi-view data layer: validation, labels and per-view standardisation.

Every estimator in :mod:`bayesmv` funnels its inputs through :func:`check_views` and
:func:`check_labels`, so that the models themselves only ever see a :class:`MultiViewData`
(float64, C-contiguous views with an explicit ``observed`` mask) and integer class indices.

A view is *missing* for a sample when that sample's whole row in the view is NaN; a row that is
only partly NaN is an error, because the models have no notion of missing individual features.

Sparse views (``scipy.sparse`` matrices, e.g. hashed indicator features) are accepted only where
a model asks for them (``check_views(..., allow_sparse=True)``); they are kept as CSR matrices,
never densified, cannot mark a missing view with NaN (an empty row plays that part for models
that read a view as ``x_v = 0``), and :class:`ViewStandardizer` leaves them unchanged.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.exceptions import DataConversionWarning, NotFittedError
from sklearn.preprocessing import StandardScaler, label_binarize
from sklearn.utils.multiclass import type_of_target

__all__ = [
    "MultiViewData",
    "ViewLayout",
    "ViewStandardizer",
    "check_labels",
    "check_views",
    "label_tasks",
]

# Error messages list offending row indices; beyond this many they would drown the message.
_MAX_LISTED = 10


def _list_indices(indices: np.ndarray) -> str:
    shown = [int(i) for i in indices[:_MAX_LISTED]]
    more = len(indices) - len(shown)
    return f"{shown}" + (f" and {more} more" if more > 0 else "")


def _default_names(n_views: int) -> tuple[str, ...]:
    return tuple(f"view{i}" for i in range(n_views))


def _check_names(names: Any, n_views: int, argument: str) -> tuple[str, ...]:
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise TypeError(
            f"{argument}: view_names must be a sequence of strings, got {type(names).__name__}"
        )
    names = tuple(names)
    if len(names) != n_views:
        raise ValueError(
            f"{argument}: view_names has {len(names)} names but there are {n_views} views"
        )
    if not all(isinstance(name, str) for name in names):
        raise TypeError(f"{argument}: view_names must all be strings, got {list(names)!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"{argument}: view_names must be unique, got {list(names)!r}")
    return names


def block_slices(sizes: Sequence[int]) -> list[slice]:
    """The slices of consecutive blocks of the given sizes (a view's columns in a
    concatenation, a variable's entries in a flat vector...)."""
    edges = np.cumsum((0, *sizes)).astype(int)
    return [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def _check_sizes(
    sizes: Any, argument: str, what: str = "view_sizes", allow_rest: bool = False
) -> tuple[int, ...]:
    """Positive integer widths; with ``allow_rest`` one entry may be -1 (see
    :func:`check_views`)."""
    if isinstance(sizes, str) or not isinstance(sizes, Sequence | np.ndarray):
        raise TypeError(
            f"{argument}: {what} must be a sequence of positive integers, got {sizes!r}"
        )
    sizes = tuple(sizes)
    if len(sizes) == 0:
        raise ValueError(f"{argument}: {what} is empty; at least one view is needed")
    bad = [
        s for s in sizes if isinstance(s, bool | np.bool_) or not isinstance(s, int | np.integer)
    ]
    n_rest = sum(1 for s in sizes if allow_rest and not bad and s == -1)
    if bad or n_rest > 1 or any(s <= 0 and not (allow_rest and s == -1) for s in sizes):
        rest = " (one of them may be -1)" if allow_rest else ""
        raise ValueError(
            f"{argument}: {what} must be positive integers{rest}, got {list(sizes)!r}"
        )
    return tuple(int(s) for s in sizes)


def _resolve_sizes(sizes: tuple[int, ...], n_cols: int, argument: str) -> tuple[int, ...]:
    """``view_sizes`` with its -1 entry (if any) replaced by the columns the others leave."""
    if -1 not in sizes:
        return sizes
    rest = n_cols - (sum(sizes) + 1)
    if rest < 1:
        raise ValueError(
            f"{argument} has {n_cols} feature(s), but view_sizes {list(sizes)} need at least "
            f"{sum(sizes) + 2} (the view sized -1 takes the columns the others leave, at least one)"
        )
    return tuple(rest if s == -1 else s for s in sizes)


@dataclass(frozen=True)
class ViewLayout:
    """What a fitted estimator remembers about the views it was trained on.

    Parameters
    ----------
    view_sizes : tuple of int
        Number of features ``D_v`` of each view.
    view_names : tuple of str
        Name of each view.
    """

    view_sizes: tuple[int, ...]
    view_names: tuple[str, ...]

    def __post_init__(self) -> None:
        sizes = _check_sizes(self.view_sizes, "ViewLayout")
        object.__setattr__(self, "view_sizes", sizes)
        object.__setattr__(
            self, "view_names", _check_names(self.view_names, len(sizes), "ViewLayout")
        )

    @property
    def n_views(self) -> int:
        """Number of views."""
        return len(self.view_sizes)

    def to_dict(self) -> dict[str, list]:
        """Return a JSON-serialisable representation.

        Returns
        -------
        dict
            ``{"view_sizes": [...], "view_names": [...]}``.
        """
        return {"view_sizes": list(self.view_sizes), "view_names": list(self.view_names)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ViewLayout:
        """Rebuild a layout from :meth:`to_dict` output.

        Parameters
        ----------
        d : mapping
            Mapping with keys ``"view_sizes"`` and ``"view_names"``.

        Returns
        -------
        ViewLayout
        """
        missing = {"view_sizes", "view_names"} - set(d)
        if missing:
            raise ValueError(f"ViewLayout.from_dict: missing keys {sorted(missing)}")
        return cls(view_sizes=tuple(d["view_sizes"]), view_names=tuple(d["view_names"]))


# eq=False: field-wise == on arrays is ambiguous, so identity comparison is the honest default.
@dataclass(frozen=True, eq=False)
class MultiViewData:
    """Validated multi-view data set; build it with :func:`check_views`.

    Parameters
    ----------
    views : tuple of ndarray or scipy.sparse.csr_matrix
        One float64, C-contiguous array of shape ``(n_samples, D_v)`` per view. A view that is
        missing for a sample has an all-NaN row.  Where a model allows it, a view may instead
        be a float64 CSR matrix (never NaN; see :func:`check_views` ``allow_sparse``).
    observed : ndarray of bool, shape (n_samples, n_views)
        True where the view is present for the sample.
    view_names : tuple of str
        Name of each view.
    """

    views: tuple[np.ndarray, ...]
    observed: np.ndarray
    view_names: tuple[str, ...]

    def __post_init__(self) -> None:
        # Only structural consistency here; content checks (NaN pattern, finiteness) are
        # check_views' job so that cheap internal construction stays cheap.
        views = tuple(self.views)
        object.__setattr__(self, "views", views)
        object.__setattr__(
            self, "view_names", _check_names(self.view_names, len(views), "MultiViewData")
        )
        if len(views) == 0:
            raise ValueError("MultiViewData: needs at least one view")
        for i, v in enumerate(views):
            if not (isinstance(v, np.ndarray) or sp.issparse(v)) or v.ndim != 2:
                raise ValueError(f"MultiViewData: view {i} must be a 2-D numpy array "
                                 "(or a scipy.sparse matrix)")
        n = views[0].shape[0]
        if any(v.shape[0] != n for v in views):
            raise ValueError(
                f"MultiViewData: views have different numbers of rows {[v.shape[0] for v in views]}"
            )
        observed = np.asarray(self.observed)
        if observed.dtype != np.bool_ or observed.shape != (n, len(views)):
            raise ValueError(
                f"MultiViewData: observed must be a bool array of shape {(n, len(views))}, "
                f"got {observed.dtype} {observed.shape}"
            )
        object.__setattr__(self, "observed", observed)

    def __repr__(self) -> str:
        return (
            f"MultiViewData(n_samples={self.n_samples}, view_sizes={self.view_sizes}, "
            f"view_names={self.view_names}, missing={int((~self.observed).sum())})"
        )

    @property
    def n_samples(self) -> int:
        """Number of samples (rows)."""
        return self.observed.shape[0]

    @property
    def n_views(self) -> int:
        """Number of views."""
        return len(self.views)

    @property
    def view_sizes(self) -> tuple[int, ...]:
        """Number of features of each view."""
        return tuple(v.shape[1] for v in self.views)

    @property
    def has_missing(self) -> bool:
        """Whether any view is missing for any sample."""
        return not bool(self.observed.all())

    @property
    def layout(self) -> ViewLayout:
        """The :class:`ViewLayout` (sizes and names) of these views."""
        return ViewLayout(self.view_sizes, self.view_names)

    def subset(self, index: slice | Sequence[int] | np.ndarray) -> MultiViewData:
        """Select rows.

        Parameters
        ----------
        index : slice, 1-D int array-like or 1-D bool mask of length n_samples
            Rows to keep (in the given order for integer indices).

        Returns
        -------
        MultiViewData
            New object; its arrays never share memory with this one.
        """
        if not isinstance(index, slice):
            index = np.asarray(index)
            if index.ndim != 1:
                raise ValueError(f"subset: index must be 1-D, got shape {index.shape}")
            if index.size == 0:
                index = index.astype(np.intp)
            if index.dtype == np.bool_:
                if index.shape[0] != self.n_samples:
                    raise ValueError(
                        f"subset: boolean mask has length {index.shape[0]}, "
                        f"but there are {self.n_samples} samples"
                    )
            elif not np.issubdtype(index.dtype, np.integer):
                raise TypeError(
                    f"subset: index must be a slice, a boolean mask or integers, got {index.dtype}"
                )
        # np.array copies, so a basic slice does not leave the subset aliasing this object.
        views = tuple(
            sp.csr_matrix(v[index], dtype=np.float64, copy=True)
            if sp.issparse(v)
            else np.array(v[index], dtype=np.float64, order="C")
            for v in self.views
        )
        return MultiViewData(views, np.array(self.observed[index], order="C"), self.view_names)

    def concatenated(self) -> np.ndarray:
        """Stack the views column-wise.

        Returns
        -------
        ndarray or scipy.sparse.csr_matrix of shape (n_samples, sum(view_sizes))
            NaN where a view is missing; CSR when any view is sparse.
        """
        if any(sp.issparse(v) for v in self.views):
            return sp.hstack(self.views, format="csr")
        return np.hstack(self.views)


def _view_label(i: int, names: Sequence[str] | None) -> str:
    return f"view {i} ({names[i]!r})" if names is not None else f"view {i}"


def _reject_sparse_and_series(x: Any, where: str, allow_sparse: bool = False) -> None:
    if sp.issparse(x) and not allow_sparse:
        raise TypeError(
            f"{where} is a sparse matrix, which is not supported here; "
            "densify it first (e.g. with .toarray())"
        )
    if isinstance(x, pd.Series):
        raise ValueError(f"{where} must be 2-D, got a pandas Series of shape {x.shape}")


def _to_sparse_view(v: Any, where: str, copy: bool) -> sp.csr_matrix:
    """One sparse view as a canonical float64 CSR matrix (finite values only)."""
    if v.ndim != 2:
        raise ValueError(f"{where} must be 2-D, got shape {v.shape}")
    if v.dtype.kind not in "biuf":
        raise ValueError(f"{where} has non-numeric dtype {v.dtype}")
    out = sp.csr_matrix(v, dtype=np.float64, copy=copy)
    out.sum_duplicates()  # canonical form; also sorts the indices
    if np.isnan(out.data).any():
        raise ValueError(
            f"{where} is sparse and contains NaN; a sparse view cannot mark missing rows with "
            "NaN (store the row empty, or densify the view)"
        )
    if np.isinf(out.data).any():
        raise ValueError(f"{where} contains infinite values")
    return out


def _to_float_view(v: Any, where: str, copy: bool, hint: str = "") -> np.ndarray:
    """Convert one view to a float64 C-contiguous 2-D array with clear errors.

    Hand-written rather than sklearn's ``check_array`` because its messages cannot name the view,
    and its finiteness keyword changed name between supported scikit-learn versions.
    """
    _reject_sparse_and_series(v, where)
    if isinstance(v, pd.DataFrame):
        bad = [
            str(c)
            for c, dt in v.dtypes.items()
            if not (pd.api.types.is_numeric_dtype(dt) or pd.api.types.is_bool_dtype(dt))
            or pd.api.types.is_complex_dtype(dt)
        ]
        if bad:
            raise ValueError(f"{where} has non-numeric columns {bad[:_MAX_LISTED]}")
        # na_value turns pandas' nullable NA into NaN so it goes through missing-row detection.
        arr = v.to_numpy(dtype=np.float64, na_value=np.nan)
        return np.array(arr, order="C", copy=True)
    if isinstance(v, str | bytes | Mapping) or v is None or np.isscalar(v):
        raise TypeError(f"{where} must be a 2-D array or DataFrame, got {type(v).__name__}")
    try:
        arr = np.asarray(v)
    except ValueError as exc:  # ragged nested lists
        raise ValueError(f"{where} could not be read as an array: {exc}") from exc
    if arr.ndim != 2:
        raise ValueError(f"{where} must be 2-D, got shape {arr.shape}{hint}")
    kind = arr.dtype.kind
    if kind == "O":
        try:
            arr = arr.astype(np.float64)
        except TypeError as exc:  # e.g. a dict among the values
            raise TypeError(f"{where} has non-numeric values (dtype object): {exc}") from exc
        except ValueError as exc:
            raise ValueError(f"{where} has non-numeric values (dtype object): {exc}") from exc
    elif kind == "c":
        raise _complex_error(where, arr.dtype)
    elif kind not in "biuf":
        raise ValueError(f"{where} has non-numeric dtype {arr.dtype}")
    if copy:
        return np.array(arr, dtype=np.float64, order="C", copy=True)
    return np.asarray(arr, dtype=np.float64, order="C")


def _complex_error(where: str, dtype: Any) -> ValueError:
    # scikit-learn's wording (its estimator checks match it)
    return ValueError(f"{where} has non-numeric dtype {dtype}: Complex data not supported")


def _is_row_list(X: Sequence[Any]) -> bool:
    """Whether a list or tuple holds rows of numbers (a nested-list matrix such as
    ``X.tolist()``) rather than one entry per view: a view is 2-D, so a list whose entries are
    all flat lists or tuples of scalars cannot be a list of views."""
    return len(X) > 0 and all(
        isinstance(row, list | tuple) and all(np.ndim(value) == 0 for value in row) for row in X
    )


def _split_single(
    X: Any,
    view_sizes: Sequence[int] | None,
    layout: ViewLayout | None,
    argument: str,
    allow_sparse: bool = False,
    estimator: str = "the model",
) -> list[Any]:
    """Split one 2-D array or DataFrame column-wise into views."""
    _reject_sparse_and_series(X, argument, allow_sparse)
    frame = isinstance(X, pd.DataFrame)
    sparse = sp.issparse(X)
    try:
        arr = X.tocsc() if sparse else X if frame else np.asarray(X)
    except ValueError as exc:  # ragged nested lists
        raise ValueError(f"{argument} could not be read as an array: {exc}") from exc
    if arr.ndim != 2:
        raise ValueError(
            f"{argument} must be 2-D (or a list of 2-D views), got shape {arr.shape}. Reshape "
            "your data either using array.reshape(-1, 1) if it has a single feature or "
            "array.reshape(1, -1) if it contains a single sample."
        )
    n_cols = arr.shape[1]
    # what is wrong with the whole array is said before how it fails to split into views
    if getattr(arr, "dtype", None) is not None and arr.dtype.kind == "c":
        raise _complex_error(argument, arr.dtype)
    if n_cols == 0:
        raise ValueError(
            f"{argument} has zero features: 0 feature(s) (shape=({arr.shape[0]}, 0)) while a "
            "minimum of 1 is required."
        )
    if layout is not None and sum(layout.view_sizes) != n_cols:
        # scikit-learn's wording (its estimator checks match it)
        raise ValueError(
            f"{argument} has {n_cols} features, but {estimator} is expecting "
            f"{sum(layout.view_sizes)} features as input (views of sizes {layout.view_sizes})"
        )
    if view_sizes is not None:
        sizes = _check_sizes(view_sizes, argument, allow_rest=True)
        sizes = _resolve_sizes(sizes, n_cols, argument)
        if sum(sizes) != n_cols:
            raise ValueError(
                f"{argument}: view_sizes sum to {sum(sizes)} but {argument} has {n_cols} columns"
            )
    elif layout is not None:
        sizes = layout.view_sizes
    else:
        sizes = (n_cols,)
    if sparse:  # column slices of CSC are cheap; each view goes back to CSR afterwards
        return [arr[:, cols].tocsr() for cols in block_slices(sizes)]
    if frame:
        return [arr.iloc[:, cols] for cols in block_slices(sizes)]
    return [arr[:, cols] for cols in block_slices(sizes)]


def check_views(
    X: Any,
    view_sizes: Sequence[int] | None = None,
    *,
    layout: ViewLayout | None = None,
    allow_missing: bool = True,
    argument: str = "X",
    view_names: Sequence[str] | None = None,
    allow_sparse: bool = False,
    estimator: str = "the model",
) -> MultiViewData:
    """Validate multi-view input and return it as :class:`MultiViewData`.

    Parameters
    ----------
    X : list or tuple of array-like / DataFrame, 2-D array-like / DataFrame, or MultiViewData
        Either one 2-D array per view (rows aligned by position; a DataFrame's index is
        ignored), or a single 2-D array split column-wise by ``view_sizes`` (or by
        ``layout.view_sizes``; with neither it is read as a single view), or an existing
        :class:`MultiViewData`, which is re-validated and returned unchanged when valid.
        A list or tuple is read as one entry per view, except a nested list of rows (every
        entry a flat list or tuple of numbers, e.g. ``X.tolist()``), which cannot be a list of
        views and is read as one 2-D array.
    view_sizes : sequence of int, optional
        Number of columns of each view when ``X`` is a single array. One entry may be -1 (as
        in ``numpy.reshape``): that view takes the columns the others leave, so
        ``view_sizes=(1, -1)`` is a two-view layout for any width from 2 up; the fitted
        layout records the resolved widths. With a list of views or a MultiViewData it must
        agree with the views' widths.
    layout : ViewLayout, optional
        Layout recorded at fit time; the number of views and each view's width must match.
        Its names are used when ``view_names`` is not given.
    allow_missing : bool, default True
        Whether a view may be missing (whole row NaN) for some samples.
    argument : str, default "X"
        Name of the argument, used in error messages.
    view_names : sequence of str, optional
        Names of the views; defaults to the layout's names, the MultiViewData's names, or
        ``"view0", "view1", ...``.
    allow_sparse : bool, default False
        Accept ``scipy.sparse`` views (or one sparse ``X`` split by ``view_sizes``), kept as
        float64 CSR matrices without densifying. Sparse views must not contain NaN, so they
        are never missing (an empty row is an all-zero view).
    estimator : str, default "the model"
        What the layout belongs to, in the message for a single array of the wrong width
        (``"X has 3 features, but MVM is expecting 4 features as input"``, scikit-learn's
        wording; estimators pass their class name).

    Returns
    -------
    MultiViewData
        Views copied to float64 C-contiguous arrays (CSR matrices for sparse views); the
        input is never modified.

    Raises
    ------
    TypeError
        For input of the wrong type (including sparse matrices unless ``allow_sparse``).
    ValueError
        For any other invalid input; the message names the argument and the view.
    """
    if view_sizes is not None:
        view_sizes = _check_sizes(view_sizes, argument, allow_rest=True)

    source: MultiViewData | None = None
    if isinstance(X, MultiViewData):
        source = X
        raw = list(X.views)
        if view_names is None:
            view_names = X.view_names
    elif isinstance(X, list | tuple) and not _is_row_list(X):
        raw = list(X)
    elif sp.issparse(X) or isinstance(X, list | tuple):  # sparse first: a dok_matrix is a dict
        raw = _split_single(X, view_sizes, layout, argument, allow_sparse, estimator)
    elif isinstance(X, str | bytes | Mapping) or not (
        isinstance(X, np.ndarray | pd.DataFrame | pd.Series) or hasattr(X, "__array__")
    ):
        raise TypeError(
            f"{argument} must be a list of 2-D views, a 2-D array or DataFrame with view_sizes, "
            f"or a MultiViewData; got {type(X).__name__}"
        )
    else:
        raw = _split_single(X, view_sizes, layout, argument, allow_sparse, estimator)

    n_views = len(raw)
    if n_views == 0:
        raise ValueError(f"{argument} has zero views; at least one view is needed")
    if layout is not None and n_views != layout.n_views:
        raise ValueError(
            f"{argument} has {n_views} views but the model was fitted on {layout.n_views}"
        )
    if view_names is None:
        view_names = layout.view_names if layout is not None else _default_names(n_views)
    names = _check_names(view_names, n_views, argument)

    # A nested list of numbers meant as one matrix lands here as 1-D "views"; say so.
    hint = " (a list or tuple is read as one array per view)" if isinstance(X, list | tuple) else ""
    views: list[np.ndarray] = []
    for i, v in enumerate(raw):
        where = f"{argument}: {_view_label(i, names)}"
        if allow_sparse and sp.issparse(v):
            arr = _to_sparse_view(v, where, copy=source is None)
        else:
            arr = _to_float_view(v, where, copy=source is None, hint=hint)
        if arr.shape[0] == 0:
            raise ValueError(f"{where} has zero samples")
        if arr.shape[1] == 0:
            raise ValueError(
                f"{where} has zero features (zero-width view): 0 feature(s) "
                f"(shape=({arr.shape[0]}, 0)) while a minimum of 1 is required."
            )
        if not sp.issparse(arr) and np.isinf(arr).any():
            raise ValueError(f"{where} contains infinite values")
        views.append(arr)

    n = views[0].shape[0]
    for i, arr in enumerate(views[1:], start=1):
        if arr.shape[0] != n:
            raise ValueError(
                f"{argument}: {_view_label(i, names)} has {arr.shape[0]} rows, "
                f"but {_view_label(0, names)} has {n}"
            )

    sizes = tuple(arr.shape[1] for arr in views)
    if view_sizes is not None and (
        len(view_sizes) != len(sizes)
        or any(want not in (got, -1) for want, got in zip(view_sizes, sizes, strict=True))
    ):
        raise ValueError(
            f"{argument}: view_sizes {tuple(view_sizes)} do not match the views' widths {sizes}"
        )
    if layout is not None:
        for i, (got, want) in enumerate(zip(sizes, layout.view_sizes, strict=True)):
            if got != want:
                raise ValueError(
                    f"{argument}: {_view_label(i, names)} has {got} features "
                    f"but the model was fitted with {want}"
                )

    observed = np.empty((n, n_views), dtype=bool)
    for i, arr in enumerate(views):
        if sp.issparse(arr):  # NaN-free by construction: always observed
            observed[:, i] = True
            continue
        nan = np.isnan(arr)
        row_all = nan.all(axis=1)
        partial = np.flatnonzero(nan.any(axis=1) & ~row_all)
        if partial.size:
            raise ValueError(
                f"{argument}: {_view_label(i, names)} has partially missing rows "
                f"(row indices {_list_indices(partial)}); a view is missing only when its "
                "whole row is NaN"
            )
        if row_all.any() and not allow_missing:
            raise ValueError(
                f"{argument}: {_view_label(i, names)} is missing (all-NaN row) for rows "
                f"{_list_indices(np.flatnonzero(row_all))}, but missing views are not allowed here"
            )
        observed[:, i] = ~row_all
    none_seen = np.flatnonzero(~observed.any(axis=1))
    if none_seen.size:
        raise ValueError(f"{argument}: samples {_list_indices(none_seen)} have every view missing")

    if source is not None:
        if not np.array_equal(source.observed, observed):
            raise ValueError(
                f"{argument}: the observed mask does not match the all-NaN rows of the views"
            )
        if names == source.view_names and all(
            a is b for a, b in zip(views, source.views, strict=True)
        ):
            return source
    return MultiViewData(tuple(views), observed, names)


def check_labels(y: Any, n_samples: int, *, argument: str = "y") -> tuple[np.ndarray, np.ndarray]:
    """Validate classification labels and encode them as class indices.

    Parameters
    ----------
    y : array-like of shape (n_samples,) or (n_samples, 1)
        Class labels of any sortable hashable type (ints, strings, bools, ...), as a list,
        numpy array or pandas Series (a column vector is raveled with a
        ``DataConversionWarning``, as in scikit-learn).
    n_samples : int
        Number of samples the labels must match.
    argument : str, default "y"
        Name of the argument, used in error messages.

    Returns
    -------
    classes_ : ndarray
        Sorted unique labels (``np.unique`` semantics).
    y_index : ndarray of int, shape (n_samples,)
        Index of each sample's label in ``classes_``.

    Raises
    ------
    TypeError
        For sparse input.
    ValueError
        For missing input (None), wrong length or shape, missing labels, continuous targets,
        an unknown label type or fewer than 2 classes.
    """
    if y is None:
        # a ValueError in scikit-learn's wording (its estimator checks match it)
        raise ValueError(
            f"{argument}: labels are required: this classifier requires y to be passed, but the "
            "target y is None"
        )
    if sp.issparse(y):
        raise TypeError(f"{argument}: sparse labels are not supported; pass a 1-D array")
    if isinstance(y, pd.DataFrame | pd.Series):
        y = y.to_numpy()
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        warnings.warn(
            f"A column-vector {argument} was passed when a 1d array was expected. Please change "
            f"the shape of {argument} to (n_samples,), for example using ravel().",
            DataConversionWarning,
            stacklevel=3,
        )
        arr = arr.ravel()
    if arr.ndim != 1:
        raise ValueError(
            f"{argument} must be 1-D (one label per sample), got shape {arr.shape}; "
            "multi-label and multi-output targets are not supported"
        )
    if arr.shape[0] != n_samples:
        raise ValueError(f"{argument} has {arr.shape[0]} labels but X has {n_samples} samples")
    missing = np.flatnonzero(pd.isna(arr))
    if missing.size:
        raise ValueError(
            f"{argument} contains missing labels (NaN/None) at indices {_list_indices(missing)}"
        )
    try:
        target_type = type_of_target(arr, input_name=argument)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{argument}: labels could not be interpreted: {exc}") from exc
    if target_type in ("continuous", "continuous-multioutput"):
        raise ValueError(
            f"{argument}: labels look continuous (non-integer floats); a classifier needs "
            "discrete class labels"
        )
    if target_type not in ("binary", "multiclass"):
        raise ValueError(
            f"{argument}: Unknown label type {target_type!r}; expected binary or multi-class "
            "labels (mixed label types, e.g. ints and strings, cannot be sorted; an object array "
            "must hold strings)"
        )
    try:
        classes, y_index = np.unique(arr, return_inverse=True)
    except TypeError as exc:  # e.g. objects without an ordering
        raise ValueError(f"{argument}: labels cannot be sorted: {exc}") from exc
    if classes.shape[0] < 2:
        raise ValueError(
            f"{argument} has only one class ({classes.tolist()[0]!r}); "
            "a classifier needs at least 2"
        )
    return classes, y_index.reshape(-1).astype(np.intp)


def label_tasks(y_index: np.ndarray, n_classes: int) -> np.ndarray:
    """Turn class indices into ±1 targets, one column per binary task.

    Parameters
    ----------
    y_index : ndarray of int, shape (n_samples,)
        Class indices in ``[0, n_classes)``, as returned by :func:`check_labels`.
    n_classes : int
        Number of classes (at least 2).

    Returns
    -------
    ndarray of float, shape (n_samples, T)
        For two classes ``T = 1`` and +1 means ``classes_[1]`` (scikit-learn's convention);
        otherwise ``T = n_classes`` one-vs-rest columns, +1 in column k for class k.
    """
    if isinstance(n_classes, bool) or not isinstance(n_classes, int | np.integer) or n_classes < 2:
        raise ValueError(f"label_tasks: n_classes must be an integer >= 2, got {n_classes!r}")
    y_index = np.asarray(y_index)
    if y_index.ndim != 1:
        raise ValueError(f"label_tasks: y_index must be 1-D, got shape {y_index.shape}")
    if y_index.size and (
        not np.issubdtype(y_index.dtype, np.integer)
        or y_index.min() < 0
        or y_index.max() >= n_classes
    ):
        raise ValueError(f"label_tasks: y_index must hold integers in [0, {n_classes})")
    tasks = label_binarize(y_index, classes=np.arange(n_classes), neg_label=-1, pos_label=1)
    return np.ascontiguousarray(tasks, dtype=np.float64)


def output_codes(n_classes: int, multiclass: str) -> np.ndarray:
    """±1 code matrix (n_classes, n_tasks): one-vs-all, or minimum output coding (binary
    digits of the class index, ⌈log₂ n_classes⌉ outputs)."""
    if n_classes == 2:
        return np.array([[-1.0], [1.0]])
    if multiclass == "ova":
        return label_tasks(np.arange(n_classes), n_classes)
    if multiclass != "moc":
        raise ValueError(f"output_codes: multiclass must be 'ova' or 'moc', got {multiclass!r}")
    n_bits = int(np.ceil(np.log2(n_classes)))
    bits = (np.arange(n_classes)[:, None] >> np.arange(n_bits)[None, :]) & 1
    return 2.0 * bits - 1.0


def check_complete_views(data: MultiViewData, argument: str = "X", needs: str = "MVML"
                         ) -> None:
    """Raise a ValueError naming the view when any view is missing for some sample.

    Kernels that compare whole views (MVML's, ``needs``: what says so in the message) need
    every view of every sample; the message says what to do instead.
    """
    if not data.has_missing:
        return
    missing = ~data.observed
    v = int(np.flatnonzero(missing.any(axis=0))[0])
    rows = np.flatnonzero(missing[:, v])
    shown = rows[:10].tolist()
    more = f" and {rows.size - 10} more" if rows.size > 10 else ""
    raise ValueError(
        f"{argument}: view {v} ({data.view_names[v]!r}) is missing (all-NaN row) for rows "
        f"{shown}{more}. {needs} needs every view of every sample (its kernels compare "
        "whole views): impute the missing rows first (e.g. sklearn.impute.SimpleImputer or "
        "KNNImputer on that view's columns, inside a Pipeline), drop those rows, or use "
        "bayesmv.M3LAK, which handles missing views natively.")


#: largest standardised deviation of a column that ``drop_constant`` treats as constant
_CONSTANT_TOLERANCE = 1e-8


class ViewStandardizer:
    """Standardise each view to zero mean and unit variance using its observed rows only.

    Missing (all-NaN) rows are ignored when fitting and stay NaN after transforming.
    Constant columns get scale 1, as in :class:`sklearn.preprocessing.StandardScaler`; with
    ``drop_constant=True`` the columns of a dense view that are constant (to rounding) on its
    observed training rows are left out of the transformed views instead (unless every
    column of the view is constant).
    Sparse views pass through unchanged (recorded as mean 0, scale 1): centring would densify
    them, and per-column scaling would inflate rare indicator features (a column seen in 0.1 %
    of the rows has standard deviation ≈ 0.03, so its ones would become ≈ 30).

    Attributes
    ----------
    mean_ : tuple of ndarray
        Per-view column means.
    scale_ : tuple of ndarray
        Per-view column standard deviations (1 for constant columns).
    layout_ : ViewLayout
        Layout of the views seen in :meth:`fit`.
    kept_ : tuple of ndarray of bool
        Per view, the columns that :meth:`transform` keeps (all of them unless
        ``drop_constant``).

    Parameters
    ----------
    drop_constant : bool, default False
        Leave out columns that are constant on the training rows.  A latent-variable model of
        a view reads such a column, exactly zero after centring, as a feature reproduced
        without noise, which inflates that view's noise precision.
    """

    def __init__(self, drop_constant: bool = False) -> None:
        self.drop_constant = drop_constant

    def fit(self, data: MultiViewData) -> ViewStandardizer:
        """Learn per-view means and scales.

        Parameters
        ----------
        data : MultiViewData
            Training views (anything :func:`check_views` accepts also works).

        Returns
        -------
        ViewStandardizer
            ``self``.
        """
        data = check_views(data, argument="data", allow_sparse=True)
        means, scales, kept = [], [], []
        for i, (view, name) in enumerate(zip(data.views, data.view_names, strict=True)):
            keep = np.ones(view.shape[1], dtype=bool)
            kept.append(keep)
            if sp.issparse(view):
                means.append(np.zeros(view.shape[1]))
                scales.append(np.ones(view.shape[1]))
                continue
            rows = data.observed[:, i]
            if not rows.any():
                raise ValueError(f"data: view {i} ({name!r}) has no observed rows to fit on")
            scaler = StandardScaler().fit(view[rows])
            means.append(np.asarray(scaler.mean_, dtype=np.float64))
            scales.append(np.asarray(scaler.scale_, dtype=np.float64))
            # constant up to rounding: StandardScaler keeps scale 1 for such a column, so its
            # standardised values stay at rounding level, where a varying column reaches ~1
            deviation = np.max(np.abs(view[rows] - scaler.mean_), axis=0) / scaler.scale_
            varies = deviation > _CONSTANT_TOLERANCE
            if self.drop_constant and varies.any():
                keep[:] = varies
        self.mean_ = tuple(means)
        self.scale_ = tuple(scales)
        self.kept_ = tuple(kept)
        self.layout_ = data.layout
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "mean_"):
            raise NotFittedError("This ViewStandardizer is not fitted yet; call fit first")

    def transform(self, data: MultiViewData) -> MultiViewData:
        """Standardise views with the fitted statistics.

        Parameters
        ----------
        data : MultiViewData
            Views with the fitted layout (anything :func:`check_views` accepts also works).

        Returns
        -------
        MultiViewData
            Standardised copy; missing rows stay NaN.
        """
        self._check_fitted()
        data = check_views(data, layout=self.layout_, argument="data", allow_sparse=True)
        views = tuple(
            v.copy() if sp.issparse(v) else np.ascontiguousarray(((v - m) / s)[:, keep])
            for v, m, s, keep in zip(data.views, self.mean_, self.scale_, self.kept_,
                                     strict=True)
        )
        return MultiViewData(views, data.observed.copy(), data.view_names)

    def fit_transform(self, data: MultiViewData) -> MultiViewData:
        """Fit, then transform the same data.

        Parameters
        ----------
        data : MultiViewData
            Training views.

        Returns
        -------
        MultiViewData
            Standardised copy.
        """
        return self.fit(data).transform(data)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable representation (plain lists of floats).

        Returns
        -------
        dict
            Keys ``"mean"``, ``"scale"``, ``"kept"`` (lists of per-view lists) and
            ``"layout"``.
        """
        self._check_fitted()
        return {
            "mean": [m.tolist() for m in self.mean_],
            "scale": [s.tolist() for s in self.scale_],
            "kept": [k.tolist() for k in self.kept_],
            "layout": self.layout_.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ViewStandardizer:
        """Rebuild a fitted standardiser from :meth:`to_dict` output.

        Parameters
        ----------
        d : mapping
            Output of :meth:`to_dict` (possibly after a JSON round trip).

        Returns
        -------
        ViewStandardizer
        """
        missing = {"mean", "scale", "layout"} - set(d)
        if missing:
            raise ValueError(f"ViewStandardizer.from_dict: missing keys {sorted(missing)}")
        layout = ViewLayout.from_dict(d["layout"])
        means = tuple(np.asarray(m, dtype=np.float64) for m in d["mean"])
        scales = tuple(np.asarray(s, dtype=np.float64) for s in d["scale"])
        shapes = [(m.shape, s.shape) for m, s in zip(means, scales, strict=False)]
        expected = [((size,), (size,)) for size in layout.view_sizes]
        if len(means) != len(scales) or shapes != expected:
            raise ValueError(
                "ViewStandardizer.from_dict: mean/scale shapes do not match the layout "
                f"{layout.view_sizes}"
            )
        if any(not np.all(np.isfinite(s) & (s > 0)) for s in scales):
            raise ValueError("ViewStandardizer.from_dict: scales must be positive and finite")
        # files written before columns could be left out keep every column
        kept = tuple(np.asarray(k, dtype=bool) for k in d.get(
            "kept", [[True] * size for size in layout.view_sizes]))
        if [k.shape for k in kept] != [(size,) for size in layout.view_sizes] or not all(
                k.any() for k in kept):
            raise ValueError("ViewStandardizer.from_dict: kept columns do not match the layout "
                             f"{layout.view_sizes}")
        obj = cls(drop_constant=not all(k.all() for k in kept))
        obj.mean_, obj.scale_, obj.kept_, obj.layout_ = means, scales, kept, layout
        return obj
