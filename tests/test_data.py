"""Validation, label handling and standardisation in bayesmv.data."""

import json
import re

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from sklearn.exceptions import NotFittedError

from bayesmv.data import (
    MultiViewData,
    ViewLayout,
    ViewStandardizer,
    check_labels,
    check_views,
    label_tasks,
)


@pytest.fixture
def views():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((20, 3)), rng.standard_normal((20, 5))]


def assert_same_data(a: MultiViewData, b: MultiViewData) -> None:
    assert a.view_names == b.view_names
    assert a.view_sizes == b.view_sizes
    np.testing.assert_array_equal(a.observed, b.observed)
    for va, vb in zip(a.views, b.views, strict=True):
        np.testing.assert_array_equal(va, vb)


# ----------------------------------------------------------------- accepted forms
def test_list_of_arrays(views):
    data = check_views(views)
    assert data.n_samples == 20
    assert data.n_views == 2
    assert data.view_sizes == (3, 5)
    assert data.view_names == ("view0", "view1")
    assert not data.has_missing
    assert data.observed.dtype == np.bool_ and data.observed.all()
    for v, orig in zip(data.views, views, strict=True):
        assert v.dtype == np.float64 and v.flags["C_CONTIGUOUS"]
        assert not np.shares_memory(v, orig)
        np.testing.assert_array_equal(v, orig)


def test_input_forms_agree(views):
    from_list = check_views(views)
    from_tuple = check_views(tuple(views))
    concatenated = np.hstack(views)
    from_single = check_views(concatenated, view_sizes=[3, 5])
    from_frames = check_views([pd.DataFrame(v) for v in views])
    from_frame = check_views(pd.DataFrame(concatenated), (3, 5))
    from_layout = check_views(concatenated, layout=ViewLayout((3, 5), ("view0", "view1")))
    from_ints = check_views([np.asarray(v * 100, dtype=np.int32) / 1 for v in views])
    for other in (from_tuple, from_single, from_frames, from_frame, from_layout):
        assert_same_data(from_list, other)
    assert from_ints.view_sizes == (3, 5)
    np.testing.assert_array_equal(from_list.concatenated(), concatenated)


def test_integer_bool_and_nested_list_views():
    data = check_views([np.arange(6, dtype=np.int8).reshape(3, 2), [[True], [False], [True]]])
    assert all(v.dtype == np.float64 for v in data.views)
    np.testing.assert_array_equal(data.views[1].ravel(), [1.0, 0.0, 1.0])


def test_single_array_without_sizes_is_one_view(views):
    data = check_views(views[0])
    assert data.n_views == 1 and data.view_sizes == (3,)


def test_nested_list_of_rows_is_one_array(views):
    # X.tolist() cannot be a list of views (a view is 2-D): it is read as numpy reads it
    concatenated = np.hstack(views)
    data = check_views(concatenated.tolist(), (3, 5))
    assert data.view_sizes == (3, 5)
    np.testing.assert_array_equal(data.concatenated(), concatenated)
    assert check_views([[1.0, 2.0, 3.0]]).view_sizes == (3,)
    with pytest.raises(ValueError, match="could not be read as an array"):
        check_views([[1.0, 2.0], [3.0]])


def test_view_size_minus_one_takes_the_remaining_columns(views):
    concatenated = np.hstack(views)
    data = check_views(concatenated, (3, -1))
    assert data.view_sizes == (3, 5)
    assert check_views(concatenated, (-1, 2, 1)).view_sizes == (5, 2, 1)
    assert check_views(views, (3, -1)).view_sizes == (3, 5)  # a list: checked, not resolved
    with pytest.raises(ValueError, match=r"view_sizes \(3, -1\) do not match"):
        check_views([views[0], views[0], views[1]], (3, -1))
    with pytest.raises(ValueError, match=r"X has 3 feature\(s\), but view_sizes \[3, -1\] need"):
        check_views(views[0], (3, -1))
    for bad in ((-1, -1), (2, -2), (0, -1)):
        with pytest.raises(ValueError, match=r"positive integers \(one of them may be -1\)"):
            check_views(concatenated, bad)
    with pytest.raises(ValueError, match="must be positive integers"):
        ViewLayout((3, -1), ("a", "b"))  # a fitted layout holds resolved widths


def test_sparse_dok_matrix_is_reported_as_sparse():
    # a dok_matrix is a dict subclass: it must still be named a sparse matrix
    with pytest.raises(TypeError, match="X is a sparse matrix"):
        check_views(sp.dok_matrix(np.ones((3, 2))))


def test_multiviewdata_is_validated_and_returned(views):
    data = check_views(views)
    assert check_views(data) is data
    assert check_views(data, layout=data.layout) is data
    renamed = check_views(data, view_names=["a", "b"])
    assert renamed.view_names == ("a", "b")
    bad = MultiViewData(data.views, np.zeros_like(data.observed), data.view_names)
    with pytest.raises(ValueError, match="observed mask does not match"):
        check_views(bad)


def test_view_names_argument_and_layout_names(views):
    data = check_views(views, view_names=["fou", "kar"])
    assert data.view_names == ("fou", "kar")
    layout = ViewLayout((3, 5), ("fou", "kar"))
    assert check_views(views, layout=layout).view_names == ("fou", "kar")
    with pytest.raises(ValueError, match="view_names has 1 names but there are 2 views"):
        check_views(views, view_names=["only"])
    with pytest.raises(ValueError, match="unique"):
        check_views(views, view_names=["a", "a"])


def test_nullable_pandas_dtypes_become_missing_rows():
    frame = pd.DataFrame({"a": pd.array([1, None, 3], dtype="Int64"), "b": [1.0, np.nan, 2.0]})
    data = check_views([frame, np.ones((3, 1))])
    np.testing.assert_array_equal(data.observed[:, 0], [True, False, True])


def test_input_not_mutated(views):
    originals = [v.copy() for v in views]
    frame = pd.DataFrame(np.hstack(views))
    frame_copy = frame.copy()
    data = check_views(views)
    data.views[0][:] = 0.0
    check_views(frame, view_sizes=(3, 5)).views[1][:] = 0.0
    for v, orig in zip(views, originals, strict=True):
        np.testing.assert_array_equal(v, orig)
    pd.testing.assert_frame_equal(frame, frame_copy)


# ------------------------------------------------------------------ missing views
def test_whole_row_nan_is_missing(views):
    views[1][[2, 5]] = np.nan
    data = check_views(views)
    assert data.has_missing
    np.testing.assert_array_equal(np.flatnonzero(~data.observed[:, 1]), [2, 5])
    assert data.observed[:, 0].all()
    assert np.isnan(data.concatenated()[2, 3:]).all()


def test_partial_nan_rows_are_an_error(views):
    views[1][3, 0] = np.nan
    views[1][7, 2] = np.nan
    views[1][9] = np.nan  # a whole missing row is fine and must not be listed
    msg = re.escape("X: view 1 ('view1') has partially missing rows (row indices [3, 7])")
    with pytest.raises(ValueError, match=msg):
        check_views(views)


def test_all_views_missing_for_a_sample(views):
    views[0][4] = np.nan
    views[1][4] = np.nan
    with pytest.raises(ValueError, match=re.escape("X: samples [4] have every view missing")):
        check_views(views)


def test_allow_missing_false_names_rows(views):
    views[0][[1, 6]] = np.nan
    with pytest.raises(
        ValueError, match=re.escape("view 0 ('view0') is missing (all-NaN row) for rows [1, 6]")
    ):
        check_views(views, allow_missing=False)
    views[0][[1, 6]] = 0.0
    assert not check_views(views, allow_missing=False).has_missing


# ---------------------------------------------------------------- error messages
@pytest.mark.parametrize(
    ("make_x", "kwargs", "exc", "pattern"),
    [
        (
            lambda v: [v[0], v[1], v[1][:17]],
            {},
            ValueError,
            r"X: view 2 \('view2'\) has 17 rows, but view 0 \('view0'\) has 20",
        ),
        (
            lambda v: [v[0], np.arange(5.0)],
            {},
            ValueError,
            r"X: view 1 \('view1'\) must be 2-D, got shape \(5,\)",
        ),
        (
            lambda v: [v[0], pd.Series(np.arange(20.0))],
            {},
            ValueError,
            r"X: view 1 \('view1'\) must be 2-D",
        ),
        (
            lambda v: [np.where(np.arange(3) == 1, np.inf, v[0]), v[1]],
            {},
            ValueError,
            r"X: view 0 \('view0'\) contains infinite values",
        ),
        (
            lambda v: [v[0], -np.inf * np.ones((20, 2))],
            {},
            ValueError,
            r"X: view 1 \('view1'\) contains infinite values",
        ),
        (
            lambda v: np.hstack(v + [v[1][:, :4]]),
            {"view_sizes": [3, 5, 2]},
            ValueError,
            r"X: view_sizes sum to 10 but X has 12 columns",
        ),
        (
            lambda v: np.hstack(v),
            {"view_sizes": [3, 0, 5]},
            ValueError,
            r"X: view_sizes must be positive integers",
        ),
        (
            lambda v: np.hstack(v),
            {"view_sizes": [3.0, 5.0]},
            ValueError,
            r"X: view_sizes must be positive integers",
        ),
        (
            lambda v: v,
            {"view_sizes": [4, 4]},
            ValueError,
            r"X: view_sizes \(4, 4\) do not match the views' widths \(3, 5\)",
        ),
        (lambda v: [], {}, ValueError, r"X has zero views"),
        (lambda v: [v[0][:0], v[1][:0]], {}, ValueError, r"X: view 0 \('view0'\) has zero samples"),
        (
            lambda v: [v[0], v[1][:, :0]],
            {},
            ValueError,
            r"X: view 1 \('view1'\) has zero features \(zero-width view\)",
        ),
        (
            lambda v: [v[0], np.full((20, 2), "a")],
            {},
            ValueError,
            r"X: view 1 \('view1'\) has non-numeric dtype <U1",
        ),
        (
            lambda v: [v[0], np.full((20, 2), "a", dtype=object)],
            {},
            ValueError,
            r"X: view 1 \('view1'\) has non-numeric values \(dtype object\)",
        ),
        (
            lambda v: [pd.DataFrame({"a": ["x"] * 20, "b": 1.0}), v[1]],
            {},
            ValueError,
            r"X: view 0 \('view0'\) has non-numeric columns \['a'\]",
        ),
        (
            lambda v: [v[0], v[1] + 0j],
            {},
            ValueError,
            r"X: view 1 \('view1'\) has non-numeric dtype complex",
        ),
        (
            lambda v: [v[0], [[1.0, 2.0], [3.0]]],
            {},
            ValueError,
            r"X: view 1 \('view1'\) could not be read as an array",
        ),
        (
            lambda v: [np.arange(3.0)],
            {},
            ValueError,
            r"X: view 0 \('view0'\) must be 2-D, got shape \(3,\) \(a list or tuple is read as one",
        ),
        (
            lambda v: np.arange(5.0),
            {},
            ValueError,
            r"X must be 2-D \(or a list of 2-D views\), got shape \(5,\)",
        ),
        (lambda v: np.ones((2, 3, 4)), {}, ValueError, r"X must be 2-D .*got shape \(2, 3, 4\)"),
        (
            lambda v: pd.Series(np.arange(5.0)),
            {},
            ValueError,
            r"X must be 2-D, got a pandas Series",
        ),
        (
            lambda v: sp.csr_matrix(np.hstack(v)),
            {"view_sizes": [3, 5]},
            TypeError,
            r"X is a sparse matrix, which is not supported here; densify",
        ),
        (
            lambda v: [v[0], sp.csr_matrix(v[1])],
            {},
            TypeError,
            r"X: view 1 \('view1'\) is a sparse matrix, which is not supported here; densify",
        ),
        (lambda v: [v[0], {"a": 1}], {}, TypeError, r"X: view 1 \('view1'\) must be a 2-D array"),
        (lambda v: 5, {}, TypeError, r"X must be a list of 2-D views"),
        (lambda v: "abc", {}, TypeError, r"X must be a list of 2-D views"),
        (lambda v: {"a": v[0]}, {}, TypeError, r"X must be a list of 2-D views"),
    ],
)
def test_errors_name_argument_and_view(views, make_x, kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        check_views(make_x(views), **kwargs)


def test_argument_name_is_used(views):
    with pytest.raises(ValueError, match=r"^X_test: view 1 \('view1'\) contains infinite"):
        check_views([views[0], np.full((20, 2), np.inf)], argument="X_test")


def test_long_row_lists_are_truncated(views):
    views[1][:, 0] = np.nan
    with pytest.raises(ValueError, match=r"\[0, 1, 2, 3, 4, 5, 6, 7, 8, 9\] and 10 more"):
        check_views(views)


# -------------------------------------------------------------------- layout checks
def test_layout_checks(views):
    layout = check_views(views).layout
    assert layout == ViewLayout((3, 5), ("view0", "view1"))
    with pytest.raises(ValueError, match=r"^X has 3 views but the model was fitted on 2$"):
        check_views(views + [views[0]], layout=layout)
    with pytest.raises(
        ValueError, match=r"X: view 1 \('view1'\) has 7 features but the model was fitted with 5"
    ):
        check_views([views[0], np.ones((20, 7))], layout=layout)
    with pytest.raises(
        ValueError,
        match=r"X has 9 features, but the model is expecting 8 features as input \(views of "
        r"sizes \(3, 5\)\)",
    ):
        check_views(np.ones((4, 9)), layout=layout)
    with pytest.raises(
        ValueError, match=r"view 0 \('view0'\) has 4 features but the model was fitted with 3"
    ):
        check_views(np.ones((4, 8)), view_sizes=(4, 4), layout=layout)


def test_layout_round_trip_and_validation():
    layout = ViewLayout((3, 5), ("a", "b"))
    assert ViewLayout.from_dict(json.loads(json.dumps(layout.to_dict()))) == layout
    assert layout.n_views == 2
    with pytest.raises(ValueError, match="view_names has 1 names"):
        ViewLayout((3, 5), ("a",))
    with pytest.raises(ValueError, match="positive integers"):
        ViewLayout((3, -1), ("a", "b"))
    with pytest.raises(ValueError, match="missing keys"):
        ViewLayout.from_dict({"view_sizes": [1]})


# -------------------------------------------------------------------------- subset
def test_subset_forms(views):
    views[1][2] = np.nan
    data = check_views(views)
    idx = np.array([5, 2, 0])
    by_int = data.subset(idx)
    assert by_int.n_samples == 3
    np.testing.assert_array_equal(by_int.views[0], views[0][idx])
    np.testing.assert_array_equal(by_int.observed[:, 1], [True, False, True])
    mask = np.zeros(20, dtype=bool)
    mask[[0, 2, 5]] = True
    assert_same_data(data.subset(mask), data.subset([0, 2, 5]))
    sliced = data.subset(slice(0, 6))
    assert_same_data(sliced, data.subset(np.arange(6)))
    assert not np.shares_memory(sliced.views[0], data.views[0])
    assert all(v.flags["C_CONTIGUOUS"] for v in data.subset(slice(None, None, 2)).views)
    assert data.subset([]).n_samples == 0
    with pytest.raises(ValueError, match="boolean mask has length 3"):
        data.subset(np.ones(3, dtype=bool))
    with pytest.raises(TypeError, match="slice, a boolean mask or integers"):
        data.subset([0.5, 1.0])


def test_multiviewdata_structure_checks(views):
    with pytest.raises(ValueError, match="observed must be a bool array"):
        MultiViewData(tuple(views), np.ones((20, 2)), ("a", "b"))
    with pytest.raises(ValueError, match="different numbers of rows"):
        MultiViewData((views[0], views[1][:3]), np.ones((20, 2), dtype=bool), ("a", "b"))
    assert "n_samples=20" in repr(check_views(views))


# -------------------------------------------------------------------- hypothesis
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_random_view_splits_concatenate_back(data):
    n = data.draw(st.integers(1, 6), label="n")
    sizes = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=5), label="sizes")
    X = data.draw(
        hnp.arrays(np.float64, (n, sum(sizes)), elements=st.floats(-1e6, 1e6, width=64)), label="X"
    )
    mv = check_views(X, view_sizes=sizes)
    assert mv.view_sizes == tuple(sizes)
    np.testing.assert_array_equal(mv.concatenated(), X)
    np.testing.assert_array_equal(np.hstack(mv.views), X)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_random_missing_masks_are_recovered(data):
    n = data.draw(st.integers(1, 8), label="n")
    sizes = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=4), label="sizes")
    mask = data.draw(hnp.arrays(np.bool_, (n, len(sizes))), label="observed")
    # every sample needs at least one observed view
    mask[~mask.any(axis=1), 0] = True
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    raw = [rng.standard_normal((n, d)) for d in sizes]
    for v, col in zip(raw, mask.T, strict=True):
        v[~col] = np.nan
    mv = check_views(raw)
    np.testing.assert_array_equal(mv.observed, mask)
    assert mv.has_missing == (not mask.all())


# -------------------------------------------------------------------------- labels
@pytest.mark.parametrize(
    ("y", "classes", "index"),
    [
        (["b", "a", "c", "a"], ["a", "b", "c"], [1, 0, 2, 0]),
        ([3, 1, 3, 1], [1, 3], [1, 0, 1, 0]),
        ([True, False, False, True], [False, True], [1, 0, 0, 1]),
        (np.array([2.0, 0.0, 1.0, 0.0]), [0.0, 1.0, 2.0], [2, 0, 1, 0]),
        (pd.Series(["x", "y", "y", "x"], index=[10, 11, 12, 13]), ["x", "y"], [0, 1, 1, 0]),
        (pd.Series(["x", "y", "y", "x"], dtype="category"), ["x", "y"], [0, 1, 1, 0]),
        # a column vector: test_check_labels_column_vector_warns
    ],
)
def test_check_labels_accepts(y, classes, index):
    got_classes, got_index = check_labels(y, 4)
    assert list(got_classes) == classes
    np.testing.assert_array_equal(got_index, index)
    assert np.issubdtype(got_index.dtype, np.integer)
    np.testing.assert_array_equal(got_classes[got_index], np.asarray(y).ravel())


@pytest.mark.parametrize(
    ("y", "exc", "pattern"),
    [
        ([0, 1, 0], ValueError, r"^y has 3 labels but X has 4 samples$"),
        ([0, 1, np.nan, 1], ValueError, r"y contains missing labels \(NaN/None\) at indices \[2\]"),
        (["a", None, "b", "a"], ValueError, r"y contains missing labels .* \[1\]"),
        ([0.5, 1.5, 0.2, 3.3], ValueError, r"y: labels look continuous"),
        ([1, 1, 1, 1], ValueError, r"y has only one class \(1\); a classifier needs at least 2"),
        (
            np.zeros((4, 2)),
            ValueError,
            r"y must be 1-D \(one label per sample\), got shape \(4, 2\)",
        ),
        (
            np.array([1, "a", 1, "a"], dtype=object),
            ValueError,
            r"y: Unknown label type 'unknown'",
        ),
        (None, ValueError, r"y: labels are required: this classifier requires y to be passed"),
        (sp.csr_matrix(np.ones((4, 1))), TypeError, r"y: sparse labels are not supported"),
    ],
)
def test_check_labels_rejects(y, exc, pattern):
    with pytest.raises(exc, match=pattern):
        check_labels(y, 4)


def test_check_labels_column_vector_warns():
    from sklearn.exceptions import DataConversionWarning

    with pytest.warns(DataConversionWarning, match="column-vector y"):
        classes, index = check_labels(np.array([[0], [1], [1], [0]]), 4)
    np.testing.assert_array_equal(index, [0, 1, 1, 0])


def test_check_labels_argument_name():
    with pytest.raises(ValueError, match=r"^y_val has 2 labels"):
        check_labels([0, 1], 3, argument="y_val")


# --------------------------------------------------------------------- label tasks
def test_label_tasks_binary_follows_sklearn_convention():
    tasks = label_tasks(np.array([0, 1, 1, 0]), 2)
    assert tasks.shape == (4, 1) and tasks.dtype == np.float64
    np.testing.assert_array_equal(tasks[:, 0], [-1, 1, 1, -1])
    np.testing.assert_array_equal(label_tasks(np.array([0, 0]), 2), [[-1.0], [-1.0]])


def test_label_tasks_multiclass_one_vs_rest():
    tasks = label_tasks(np.array([2, 0, 1, 0]), 3)
    expected = np.array([[-1, -1, 1], [1, -1, -1], [-1, 1, -1], [1, -1, -1]], dtype=float)
    np.testing.assert_array_equal(tasks, expected)
    assert label_tasks(np.array([0, 0]), 3).shape == (2, 3)


def test_label_tasks_rejects_bad_input():
    with pytest.raises(ValueError, match="n_classes must be an integer >= 2"):
        label_tasks(np.array([0, 0]), 1)
    with pytest.raises(ValueError, match=r"y_index must hold integers in \[0, 3\)"):
        label_tasks(np.array([0, 3]), 3)


# -------------------------------------------------------------------- standardiser
def test_standardizer_ignores_missing_rows(views):
    views[1][[0, 3]] = np.nan
    views[0][:, 1] = 7.0  # constant column: scale 1
    data = check_views(views)
    st_ = ViewStandardizer().fit(data)
    observed_rows = views[1][data.observed[:, 1]]
    np.testing.assert_allclose(st_.mean_[1], observed_rows.mean(axis=0))
    np.testing.assert_allclose(st_.scale_[1], observed_rows.std(axis=0))
    assert st_.scale_[0][1] == 1.0
    out = st_.transform(data)
    np.testing.assert_array_equal(out.observed, data.observed)
    assert np.isnan(out.views[1][[0, 3]]).all()
    np.testing.assert_allclose(out.views[1][data.observed[:, 1]].mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(out.views[1][data.observed[:, 1]].std(axis=0), 1.0)
    np.testing.assert_array_equal(out.views[0][:, 1], 0.0)
    assert_same_data(out, ViewStandardizer().fit_transform(data))


def test_standardizer_round_trip(views):
    data = check_views(views, view_names=["a", "b"])
    fitted = ViewStandardizer().fit(data)
    text = json.dumps(fitted.to_dict())
    restored = ViewStandardizer.from_dict(json.loads(text))
    for a, b in zip(fitted.mean_ + fitted.scale_, restored.mean_ + restored.scale_, strict=True):
        np.testing.assert_array_equal(a, b)
    assert_same_data(fitted.transform(data), restored.transform(data))


def test_standardizer_drops_constant_columns_only_when_asked(views):
    views[0][:, 1] = 7.0
    views[1][:, 0] = 3.0
    # constant up to rounding: StandardScaler keeps scale 1 and leaves it at ~1e-16
    views[1][:, 2] = 0.1 + np.arange(len(views[1])) % 2 * 1e-17
    data = check_views(views)
    kept = ViewStandardizer().fit_transform(data)
    assert [v.shape[1] for v in kept.views] == [v.shape[1] for v in views]
    dropping = ViewStandardizer(drop_constant=True).fit(data)
    out = dropping.transform(data)
    assert [v.shape[1] for v in out.views] == [views[0].shape[1] - 1, views[1].shape[1] - 2]
    # the kept columns are those of the plain standardisation, in order
    np.testing.assert_array_equal(out.views[0], np.delete(kept.views[0], 1, axis=1))
    np.testing.assert_array_equal(out.views[1], np.delete(kept.views[1], [0, 2], axis=1))
    restored = ViewStandardizer.from_dict(json.loads(json.dumps(dropping.to_dict())))
    assert_same_data(restored.transform(data), out)
    # a view with no varying column keeps its columns (dropping them would leave it empty)
    views[1][:] = 1.0
    all_constant = ViewStandardizer(drop_constant=True).fit(check_views(views))
    assert all_constant.kept_[1].all() and not all_constant.kept_[0].all()
    # a file written before ``kept`` existed keeps every column
    legacy = ViewStandardizer().fit(data).to_dict()
    del legacy["kept"]
    assert all(k.all() for k in ViewStandardizer.from_dict(legacy).kept_)


def test_standardizer_errors(views):
    with pytest.raises(NotFittedError):
        ViewStandardizer().transform(check_views(views))
    with pytest.raises(NotFittedError):
        ViewStandardizer().to_dict()
    fitted = ViewStandardizer().fit(check_views(views))
    with pytest.raises(
        ValueError, match=r"view 1 \('view1'\) has 4 features but the model was fitted with 5"
    ):
        fitted.transform(check_views([views[0], views[1][:, :4]]))
    d = fitted.to_dict()
    d["scale"][0] = d["scale"][0][:2]
    with pytest.raises(ValueError, match="do not match the layout"):
        ViewStandardizer.from_dict(d)
    never_seen = [views[0], np.full((20, 5), np.nan)]
    with pytest.raises(ValueError, match=r"view 1 \('view1'\) has no observed rows"):
        ViewStandardizer().fit(check_views(never_seen))
