"""Bundled real data and synthetic multi-view classification problems.

* :func:`load_multiple_features` -- the UCI Multiple Features handwritten digits (six views,
  CC BY 4.0; see ``data/README-uci-multiple-features.md`` for attribution).
* :func:`load_breast_cancer_views` -- scikit-learn's Wisconsin diagnostic breast-cancer data
  as three views (the ten nucleus measurements' means, standard errors and worst values).
* :func:`make_nonlinear_latent` -- views driven by a shared latent variable whose label is a
  nonlinear function of it.
* :func:`make_lvm_classification` -- exact draws from the linear-Gaussian latent model that
  M3LAK assumes, with the ground truth returned for recovery checks.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

from bayesmv.params import renamed_argument

__all__ = [
    "BREAST_CANCER_VIEWS",
    "MULTIPLE_FEATURES_VIEWS",
    "load_breast_cancer_views",
    "load_multiple_features",
    "make_lvm_classification",
    "make_nonlinear_latent",
]

#: View names of the UCI Multiple Features data, in the default order.
MULTIPLE_FEATURES_VIEWS: tuple[str, ...] = ("fou", "fac", "kar", "pix", "zer", "mor")

#: View names of :func:`load_breast_cancer_views`, in order.
BREAST_CANCER_VIEWS: tuple[str, ...] = ("mean", "standard error", "worst")

_NONLINEARITIES = ("quadratic", "circle", "xor", "linear")

SeedLike = int | np.random.Generator | np.random.SeedSequence | None


@functools.cache
def _read_mfeat(view: str) -> tuple[np.ndarray, np.ndarray]:
    """Read one bundled view once per process; callers get copies."""
    source = resources.files(__name__).joinpath("data", f"mfeat-{view}.csv.gz")
    with source.open("rb") as fh:
        frame = pd.read_csv(fh, compression="gzip", header=0)
    values = frame.to_numpy(dtype=np.float64)
    # The last column is the digit label; the header row only holds column indices.
    features = np.ascontiguousarray(values[:, :-1])
    labels = values[:, -1].astype(np.int64)
    features.flags.writeable = False
    labels.flags.writeable = False
    return features, labels


def load_breast_cancer_views() -> tuple[list[np.ndarray], np.ndarray]:
    """scikit-learn's Wisconsin diagnostic breast-cancer data (569 samples) as three views.

    Each sample's ten cell-nucleus measurements (radius, texture, perimeter, ...) are given as
    their mean, standard error and worst value over the nuclei of the image: three views of
    10 features each (:data:`BREAST_CANCER_VIEWS`).  Labels are scikit-learn's (1 benign,
    0 malignant).  The data ship with scikit-learn; nothing is downloaded.

    Returns
    -------
    views : list of three (569, 10) arrays
    y : (569,) integer array
    """
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    width = data.data.shape[1] // len(BREAST_CANCER_VIEWS)
    views = [data.data[:, k * width:(k + 1) * width] for k in range(len(BREAST_CANCER_VIEWS))]
    return views, data.target


def load_multiple_features(
    classes: Sequence[int] | None = None,
    views: Sequence[str] | str | None = None,
    return_names: bool = False,
) -> tuple[list[np.ndarray], np.ndarray] | tuple[list[np.ndarray], np.ndarray, list[str]]:
    """Load the UCI Multiple Features handwritten-digit data (2000 samples, six views).

    Digits 0-9, 200 samples each, rows ordered by class. The views are

    ====  ==============================================  ========
    name  description                                     features
    ====  ==============================================  ========
    fou   Fourier coefficients of the character shapes    76
    fac   profile correlations                            216
    kar   Karhunen-Loeve coefficients                     64
    pix   pixel averages in 2 x 3 windows                 240
    zer   Zernike moments                                 47
    mor   morphological features                          6
    ====  ==============================================  ========

    Licence CC BY 4.0; cite Duin, R. (1998). Multiple Features. UCI Machine Learning Repository.
    https://doi.org/10.24432/C5HC70.

    Parameters
    ----------
    classes : sequence of int, optional
        Digits to keep (e.g. ``(3, 5)``); rows of other digits are dropped. Default: all ten.
    views : sequence of str or str, optional
        View names to return, in the given order. Default: all six in the order above.
    return_names : bool, default False
        Also return the list of view names.

    Returns
    -------
    views : list of ndarray
        One float64 array of shape ``(n_samples, D_v)`` per view (fresh copies).
    y : ndarray of int64, shape (n_samples,)
        Digit labels 0-9 (the original digits, not re-indexed).
    view_names : list of str
        Only when ``return_names`` is True.
    """
    if views is None:
        names = list(MULTIPLE_FEATURES_VIEWS)
    else:
        names = [views] if isinstance(views, str) else list(views)
        unknown = [v for v in names if v not in MULTIPLE_FEATURES_VIEWS]
        if unknown:
            raise ValueError(
                f"views: unknown view names {unknown}; choose from {list(MULTIPLE_FEATURES_VIEWS)}"
            )
        if not names:
            raise ValueError("views: at least one view is needed")
        if len(set(names)) != len(names):
            raise ValueError(f"views: duplicate view names in {names}")

    loaded = [_read_mfeat(v) for v in names]
    y = loaded[0][1]
    for name, (_, labels) in zip(names, loaded, strict=True):
        if not np.array_equal(labels, y):
            raise RuntimeError(
                f"bundled view {name!r} has labels that do not align with the others"
            )

    if classes is None:
        keep = np.ones(y.shape[0], dtype=bool)
    else:
        wanted = np.asarray(list(classes))
        if wanted.size == 0:
            raise ValueError("classes: at least one digit is needed")
        if not np.issubdtype(wanted.dtype, np.integer) or not np.isin(wanted, np.arange(10)).all():
            raise ValueError(f"classes: digits must be integers in 0..9, got {list(classes)}")
        keep = np.isin(y, wanted)

    out_views = [np.array(features[keep], order="C") for features, _ in loaded]
    out_y = np.array(y[keep])
    if return_names:
        return out_views, out_y, names
    return out_views, out_y


def _check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_view_dims(view_dims: Any) -> tuple[int, ...]:
    if isinstance(view_dims, str) or not isinstance(view_dims, Sequence | np.ndarray):
        raise ValueError(f"view_dims must be a sequence of positive integers, got {view_dims!r}")
    dims = tuple(_check_positive_int(d, "view_dims entries") for d in view_dims)
    if not dims:
        raise ValueError("view_dims must name at least one view")
    return dims


def _check_nonnegative(value: Any, name: str) -> float:
    value = float(value)
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


def make_nonlinear_latent(
    n_samples: int = 1000,
    view_dims: Sequence[int] = (100, 50),
    latent_dim: int = 2,
    view_latent_dim: int = 2,
    nonlinearity: str = "quadratic",
    noise: float = 0.5,
    label_noise: float = 0.3,
    random_seed: SeedLike = None,
    random_state: SeedLike = None,
) -> tuple[list[np.ndarray], np.ndarray]:
    """Multi-view data from a shared latent variable with a nonlinear class boundary.

    For each sample a shared latent ``z ~ N(0, I_latent_dim)`` and, per view, a private latent
    ``u_v ~ N(0, I_view_latent_dim)`` are drawn, and

    ``x_v = A_v z + B_v u_v + noise * eps_v``,  ``eps_v ~ N(0, I)``,

    where ``A_v`` and ``B_v`` have standard normal entries divided by ``sqrt(latent_dim)`` and
    ``sqrt(view_latent_dim)``. With ``e ~ N(0, 1)``, the label is 1 when

    * ``"quadratic"``: ``z1 + z2**2 - 1 + label_noise * e > 0`` (a parabola; about 43 % ones),
    * ``"circle"``: ``z1**2 + z2**2 - 1.4 + label_noise * e > 0`` (outside a circle; 1.4 is close
      to the median 2 ln 2 of a chi-square with 2 degrees of freedom, so about balanced),
    * ``"xor"``: ``z1 * z2 + label_noise * e > 0`` (same-sign quadrants; balanced),
    * ``"linear"``: ``z1 + z2 + label_noise * e > 0`` (a linear control; balanced),

    and 0 otherwise. Only ``z1, z2`` enter the label; further shared dimensions are nuisance.

    Parameters
    ----------
    n_samples : int, default 1000
        Number of samples.
    view_dims : sequence of int, default (100, 50)
        Number of features of each view.
    latent_dim : int, default 2
        Dimension of the shared latent ``z`` (at least 2).
    view_latent_dim : int, default 2
        Dimension of each view's private latent ``u_v`` (0 for none).
    nonlinearity : {"quadratic", "circle", "xor", "linear"}, default "quadratic"
        Class boundary in ``(z1, z2)``.
    noise : float, default 0.5
        Standard deviation of the feature noise.
    label_noise : float, default 0.3
        Standard deviation of the noise added to the decision function.
    random_seed : int, numpy Generator, SeedSequence or None
        Seed or generator (a Generator is used, and advanced, in place).
    random_state : int, numpy Generator, SeedSequence or None
        Deprecated alias of ``random_seed`` (the estimators' name for a seed).

    Returns
    -------
    views : list of ndarray
        One float64 array of shape ``(n_samples, D_v)`` per view.
    y : ndarray of int64, shape (n_samples,)
        Labels in {0, 1}.
    """
    n_samples = _check_positive_int(n_samples, "n_samples")
    dims = _check_view_dims(view_dims)
    latent_dim = _check_positive_int(latent_dim, "latent_dim", minimum=2)
    view_latent_dim = _check_positive_int(view_latent_dim, "view_latent_dim", minimum=0)
    noise = _check_nonnegative(noise, "noise")
    label_noise = _check_nonnegative(label_noise, "label_noise")
    if nonlinearity not in _NONLINEARITIES:
        raise ValueError(f"nonlinearity must be one of {_NONLINEARITIES}, got {nonlinearity!r}")
    rng = np.random.default_rng(renamed_argument("make_nonlinear_latent", "random_seed",
                                                 random_seed, "random_state", random_state))

    z = rng.standard_normal((n_samples, latent_dim))
    views = []
    for d in dims:
        A = rng.standard_normal((d, latent_dim)) / np.sqrt(latent_dim)
        x = z @ A.T + noise * rng.standard_normal((n_samples, d))
        if view_latent_dim:
            B = rng.standard_normal((d, view_latent_dim)) / np.sqrt(view_latent_dim)
            x += rng.standard_normal((n_samples, view_latent_dim)) @ B.T
        views.append(np.ascontiguousarray(x))

    z1, z2 = z[:, 0], z[:, 1]
    score = {
        "quadratic": lambda: z1 + z2**2 - 1.0,
        "circle": lambda: z1**2 + z2**2 - 1.4,
        "xor": lambda: z1 * z2,
        "linear": lambda: z1 + z2,
    }[nonlinearity]()
    score = score + label_noise * rng.standard_normal(n_samples)
    return views, (score > 0).astype(np.int64)


def make_lvm_classification(
    n_samples: int = 200,
    view_dims: Sequence[int] = (6, 4),
    latent_dim: int = 2,
    view_latent_dim: int = 1,
    tau: float | Sequence[float] = (4.0, 9.0),
    random_seed: SeedLike = None,
    random_state: SeedLike = None,
) -> tuple[list[np.ndarray], np.ndarray, dict[str, Any]]:
    """Exact draws from the M3LAK linear-Gaussian latent-variable model.

    For each sample ``h ~ N(0, I_m)`` (``m = latent_dim``) is shared by all views, each view has a
    private ``u_v ~ N(0, I_K)`` (``K = view_latent_dim``), and

    ``x_v = W_v h + V_v u_v + eps_v``,  ``eps_v ~ N(0, tau_v^{-1} I)``,

    with ``W_v`` (``D_v x m``) and ``V_v`` (``D_v x K``) having standard normal entries. The label
    is ``y = 1`` if ``h_1 > 0`` else 0, so the classes are separable in ``h``.

    Parameters
    ----------
    n_samples : int, default 200
        Number of samples.
    view_dims : sequence of int, default (6, 4)
        Number of features ``D_v`` of each view.
    latent_dim : int, default 2
        Dimension ``m`` of the shared latent ``h``.
    view_latent_dim : int, default 1
        Dimension ``K`` of each private latent ``u_v`` (0 for none).
    tau : float or sequence of float, default (4.0, 9.0)
        Noise precision of each view (a scalar applies to every view).
    random_seed : int, numpy Generator, SeedSequence or None
        Seed or generator (a Generator is used, and advanced, in place).
    random_state : int, numpy Generator, SeedSequence or None
        Deprecated alias of ``random_seed`` (the estimators' name for a seed).

    Returns
    -------
    views : list of ndarray
        One float64 array of shape ``(n_samples, D_v)`` per view.
    y : ndarray of int64, shape (n_samples,)
        Labels in {0, 1}.
    truth : dict
        ``"tau"`` (ndarray, one per view), ``"W"`` (list of ``(D_v, m)`` arrays), ``"V"`` (list
        of ``(D_v, K)`` arrays), ``"H"`` (``(n_samples, m)``) and ``"U"`` (list of
        ``(n_samples, K)`` private latents).
    """
    n_samples = _check_positive_int(n_samples, "n_samples")
    dims = _check_view_dims(view_dims)
    latent_dim = _check_positive_int(latent_dim, "latent_dim")
    view_latent_dim = _check_positive_int(view_latent_dim, "view_latent_dim", minimum=0)
    try:
        taus = np.broadcast_to(np.asarray(tau, dtype=np.float64), (len(dims),)).copy()
    except ValueError:
        raise ValueError(
            f"tau must be a scalar or one value per view ({len(dims)}), got {tau!r}"
        ) from None
    if not np.all(np.isfinite(taus) & (taus > 0)):
        raise ValueError(f"tau must be positive and finite, got {tau!r}")
    rng = np.random.default_rng(renamed_argument("make_lvm_classification", "random_seed",
                                                 random_seed, "random_state", random_state))

    H = rng.standard_normal((n_samples, latent_dim))
    views, Ws, Vs, Us = [], [], [], []
    for d, t in zip(dims, taus, strict=True):
        W = rng.standard_normal((d, latent_dim))
        V = rng.standard_normal((d, view_latent_dim))
        U = rng.standard_normal((n_samples, view_latent_dim))
        x = H @ W.T + U @ V.T + rng.standard_normal((n_samples, d)) / np.sqrt(t)
        views.append(np.ascontiguousarray(x))
        Ws.append(W)
        Vs.append(V)
        Us.append(U)
    y = (H[:, 0] > 0).astype(np.int64)
    truth = {"tau": taus, "W": Ws, "V": Vs, "H": H, "U": Us}
    return views, y, truth
