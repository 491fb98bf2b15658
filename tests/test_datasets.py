"""Bundled UCI Multiple Features data and the synthetic generators."""

from importlib import resources

import numpy as np
import pytest

from bayesmv.data import check_views
from bayesmv.datasets import (
    MULTIPLE_FEATURES_VIEWS,
    load_multiple_features,
    make_lvm_classification,
    make_nonlinear_latent,
)

MFEAT_SIZES = {"fou": 76, "fac": 216, "kar": 64, "pix": 240, "zer": 47, "mor": 6}


# ------------------------------------------------------------- Multiple Features
def test_multiple_features_shapes_and_labels():
    views, y, names = load_multiple_features(return_names=True)
    assert names == list(MULTIPLE_FEATURES_VIEWS) == ["fou", "fac", "kar", "pix", "zer", "mor"]
    assert [v.shape for v in views] == [(2000, MFEAT_SIZES[n]) for n in names]
    assert all(v.dtype == np.float64 and np.isfinite(v).all() for v in views)
    assert y.shape == (2000,) and np.issubdtype(y.dtype, np.integer)
    np.testing.assert_array_equal(np.bincount(y), np.full(10, 200))
    # rows are ordered by class
    assert np.all(np.diff(y) >= 0)
    data = check_views(views, view_names=names)
    assert data.view_sizes == tuple(MFEAT_SIZES[n] for n in names)
    assert not data.has_missing


def test_multiple_features_known_values():
    # first and last rows of mfeat-mor.csv
    (mor,), y = load_multiple_features(views="mor")
    np.testing.assert_allclose(mor[0], [1, 0, 0, 133.15, 1.3117, 1620.2])
    np.testing.assert_allclose(mor[-1], [1, 1, 1, 133.92, 1.5646, 3808])
    assert y[0] == 0 and y[-1] == 9


def test_multiple_features_filters():
    views, y, names = load_multiple_features(
        classes=(3, 5), views=("pix", "fou"), return_names=True
    )
    assert names == ["pix", "fou"]
    assert [v.shape for v in views] == [(400, 240), (400, 76)]
    assert set(np.unique(y)) == {3, 5}
    full, y_full = load_multiple_features(views=["pix"])
    np.testing.assert_array_equal(views[0], full[0][np.isin(y_full, (3, 5))])


def test_multiple_features_returns_fresh_copies():
    (first,), _ = load_multiple_features(views=["mor"])
    first[:] = -1.0
    (second,), _ = load_multiple_features(views=["mor"])
    assert second[0, 3] == pytest.approx(133.15)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"views": ["fou", "abc"]}, r"unknown view names \['abc'\]"),
        ({"views": []}, "at least one view"),
        ({"views": ["fou", "fou"]}, "duplicate view names"),
        ({"classes": [3, 11]}, r"digits must be integers in 0\.\.9"),
        ({"classes": []}, "at least one digit"),
    ],
)
def test_multiple_features_bad_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        load_multiple_features(**kwargs)


def test_attribution_shipped():
    data_dir = resources.files("bayesmv.datasets").joinpath("data")
    readme = data_dir.joinpath("README-uci-multiple-features.md").read_text(encoding="utf-8")
    assert "CC BY 4.0" in readme and "10.24432/C5HC70" in readme
    assert not any(p.name.endswith((".pkl", ".pickle")) for p in data_dir.iterdir())


# ----------------------------------------------------------------- nonlinear latent
@pytest.mark.parametrize("nonlinearity", ["quadratic", "circle", "xor", "linear"])
def test_nonlinear_latent_balanced_and_shaped(nonlinearity):
    views, y = make_nonlinear_latent(
        n_samples=2000, view_dims=(10, 7, 3), nonlinearity=nonlinearity, random_seed=0
    )
    assert [v.shape for v in views] == [(2000, 10), (2000, 7), (2000, 3)]
    assert set(np.unique(y)) == {0, 1}
    assert 0.35 < y.mean() < 0.65


def test_nonlinear_latent_reproducible():
    a_views, a_y = make_nonlinear_latent(n_samples=50, random_seed=3)
    b_views, b_y = make_nonlinear_latent(n_samples=50, random_seed=3)
    c_views, c_y = make_nonlinear_latent(n_samples=50, random_seed=4)
    for a, b, c in zip(a_views, b_views, c_views, strict=True):
        np.testing.assert_array_equal(a, b)
        assert not np.allclose(a, c)
    np.testing.assert_array_equal(a_y, b_y)
    d_views, _ = make_nonlinear_latent(n_samples=50, random_seed=np.random.default_rng(3))
    np.testing.assert_array_equal(d_views[0], a_views[0])


def test_nonlinear_latent_without_private_latents_or_noise():
    views, y = make_nonlinear_latent(
        n_samples=30, view_dims=(4,), latent_dim=2, view_latent_dim=0, noise=0.0, random_seed=1
    )
    # x = A z exactly, so the view has rank latent_dim
    assert np.linalg.matrix_rank(views[0]) == 2


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"nonlinearity": "cubic"}, "nonlinearity must be one of"),
        ({"latent_dim": 1}, "latent_dim must be an integer >= 2"),
        ({"n_samples": 0}, "n_samples must be an integer >= 1"),
        ({"view_dims": ()}, "at least one view"),
        ({"view_dims": (3, 0)}, "view_dims entries must be an integer >= 1"),
        ({"noise": -1.0}, "noise must be a finite number >= 0"),
    ],
)
def test_nonlinear_latent_bad_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        make_nonlinear_latent(**kwargs)


# --------------------------------------------------------------------- LVM (M3LAK)
def test_lvm_truth_and_shapes():
    views, y, truth = make_lvm_classification(
        n_samples=300,
        view_dims=(6, 4, 5),
        latent_dim=3,
        view_latent_dim=2,
        tau=(4.0, 9.0, 1.0),
        random_seed=0,
    )
    assert [v.shape for v in views] == [(300, 6), (300, 4), (300, 5)]
    np.testing.assert_array_equal(truth["tau"], [4.0, 9.0, 1.0])
    assert truth["H"].shape == (300, 3)
    assert [w.shape for w in truth["W"]] == [(6, 3), (4, 3), (5, 3)]
    assert [v.shape for v in truth["V"]] == [(6, 2), (4, 2), (5, 2)]
    np.testing.assert_array_equal(y, (truth["H"][:, 0] > 0).astype(int))
    for x, W, V, U, tau in zip(
        views, truth["W"], truth["V"], truth["U"], truth["tau"], strict=True
    ):
        residual = x - truth["H"] @ W.T - U @ V.T
        # the residual is the N(0, 1/tau) noise
        assert residual.var() == pytest.approx(1.0 / tau, rel=0.15)


def test_lvm_defaults_and_reproducibility():
    views, y, truth = make_lvm_classification(random_seed=5)
    assert [v.shape for v in views] == [(200, 6), (200, 4)]
    assert truth["V"][0].shape == (6, 1)
    assert 0.3 < y.mean() < 0.7
    again, y2, _ = make_lvm_classification(random_seed=5)
    other, _, _ = make_lvm_classification(random_seed=6)
    np.testing.assert_array_equal(views[1], again[1])
    np.testing.assert_array_equal(y, y2)
    assert not np.allclose(views[1], other[1])


def test_lvm_scalar_tau_and_errors():
    _, _, truth = make_lvm_classification(view_dims=(2, 2, 2), tau=2.0, random_seed=0)
    np.testing.assert_array_equal(truth["tau"], [2.0, 2.0, 2.0])
    with pytest.raises(ValueError, match="one value per view"):
        make_lvm_classification(tau=(1.0, 2.0, 3.0))
    with pytest.raises(ValueError, match="positive and finite"):
        make_lvm_classification(tau=(1.0, 0.0))


def test_breast_cancer_views_are_scikit_learns_means_errors_and_worst_values():
    from sklearn.datasets import load_breast_cancer

    from bayesmv.datasets import BREAST_CANCER_VIEWS, load_breast_cancer_views

    views, y = load_breast_cancer_views()
    reference = load_breast_cancer()
    assert [v.shape for v in views] == [(569, 10)] * 3
    np.testing.assert_array_equal(np.hstack(views), reference.data)
    np.testing.assert_array_equal(y, reference.target)
    names = reference.feature_names
    assert all(n.startswith("mean ") for n in names[:10])
    assert all(n.endswith(" error") for n in names[10:20])
    assert all(n.startswith("worst ") for n in names[20:])
    assert BREAST_CANCER_VIEWS == ("mean", "standard error", "worst")
