"""Landmark similarity features (MVL-SVM, Zantedeschi et al. 2018) and missing-view imputation.

Each sample is compared, one view at a time, with ``L`` landmarks drawn from the training
rows::

    μ_L(x) = [k_v(x_v, l_{p,v})]_{v = 1..V, p = 1..L} ∈ R^{L·V},   k_v(a, b) = exp(-γ_v ||a - b||²)

(view-major: columns ``v·L .. (v+1)·L - 1`` hold view v).  The paper's RBF "radius √D_v" is
``γ_v = 1 / D_v``; it is also what the authors' code used (scikit-learn's ``rbf_kernel``
default).

Missing views (a whole row of NaN in a view) leave their similarity blocks unknown.  With
``P`` the L × LV matrix of the landmarks' own features (landmarks are complete rows):

* ``impute="landmarks"`` — the paper's eq. 11: ``r = argmin ||μ_obs - r P_obs||²``, then the
  missing blocks are ``r P_miss`` (observed blocks are kept as they are, so complete rows pass
  through unchanged).
* ``impute="bayes"`` — eq. 11 as a probabilistic model: ``μ = r P + ε`` with
  ``r ~ N(0, s² I_L)`` and ``ε ~ N(0, σ² I)``, (s², σ²) set by maximising the marginal
  likelihood of the observed blocks of the training rows (empirical Bayes).  The missing
  blocks are then Gaussian given the observed ones, ``N(m, Bᵀ B + σ² I)`` (see
  :class:`MissingBlocks`), its mean the ridge-regularised eq. 11 (the paper's least squares is
  the limit s² → ∞, σ² → 0).  In the model graph they are random variables, so a sampler
  treats them as unknowns (and the labels inform them) and predictions integrate over them.
* ``impute="zero"`` — similarity 0 (the no-imputation baseline: "far from every landmark").
* ``impute=None`` — missing views are an error.
"""

from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from scipy import linalg, optimize
from threadpoolctl import threadpool_limits

from bayesmv.components.base import (
    FIXED,
    VIEW_FEATURES,
    VIEWS,
    BuildContext,
    Component,
    ViewFeatures,
)
from bayesmv.components.kernels import view_gram
from bayesmv.components.linear import publish_view_features
from bayesmv.components.nystrom import RCOND, kernel_eigenbasis
from bayesmv.data import MultiViewData

IMPUTE_OPTIONS = ("landmarks", "bayes", "zero", None)
#: landmarks of ``n_landmarks="auto"`` (fewer when fewer rows have every view)
AUTO_LANDMARKS = 200
#: eq. 11's numerical rank cutoff (relative singular value).  RBF Gram matrices of landmarks
#: are singular to machine precision (a 6-feature view, 200 landmarks: smallest eigenvalue
#: 4e-16); lstsq's default cutoff (ε·max size) then fit rounding noise and imputed
#: similarities of 1e5 on the UCI digits, √ε gives the exact solution on the numerical range
_LSQ_RCOND = float(np.sqrt(np.finfo(float).eps))


@dataclass
class MissingBlocks:
    """``p(μ_miss | μ_obs)`` for the rows that share one missing-view pattern (``impute="bayes"``).

    ``μ_miss ~ N(mean, Bᵀ B + σ² I)`` row by row, where ``Bᵀ B = P_missᵀ A⁻¹ P_miss`` and
    ``A = I/s² + P_obs P_obsᵀ/σ²`` is the precision of the coefficients r given the observed
    blocks.

    Attributes
    ----------
    rows : ndarray of int, shape (n_k,)
        Rows (samples) with this pattern.
    columns : ndarray of int, shape (d_k,)
        Feature columns that are missing in these rows.
    mean : ndarray, shape (n_k, d_k)
        Conditional means (ridge-regularised eq. 11).
    factor : ndarray, shape (L, d_k)
        ``B``, a square root of the covariance's low-rank part.
    noise_var : float
        σ².
    """

    rows: np.ndarray
    columns: np.ndarray
    mean: np.ndarray
    factor: np.ndarray
    noise_var: float

    def covariance(self) -> np.ndarray:
        """Dense ``Bᵀ B + σ² I`` (d_k × d_k)."""
        cov = self.factor.T @ self.factor
        cov[np.diag_indices_from(cov)] += self.noise_var
        return cov

    def cov_times(self, W: np.ndarray) -> np.ndarray:
        """``(Bᵀ B + σ² I) W`` in O(L d_k) per column."""
        return self.factor.T @ (self.factor @ W) + self.noise_var * W

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """One draw per row, shape (n_k, d_k)."""
        n, d = self.mean.shape
        z = rng.standard_normal((n, self.factor.shape[0]))
        return (self.mean + z @ self.factor
                + np.sqrt(self.noise_var) * rng.standard_normal((n, d)))


def _check_gamma(gamma: Any, view_sizes: tuple[int, ...]) -> np.ndarray:
    V = len(view_sizes)
    if gamma is None:
        return 1.0 / np.asarray(view_sizes, dtype=float)
    if isinstance(gamma, numbers.Real) and not isinstance(gamma, bool):
        values = np.full(V, float(gamma))
    else:
        try:
            values = np.asarray(gamma, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"gamma must be None, a positive number or one positive number "
                             f"per view, got {gamma!r}") from None
        if values.size != V:
            raise ValueError(f"gamma has {values.size} values but there are {V} views")
    if not np.all(np.isfinite(values) & (values > 0)):
        raise ValueError(f"gamma must be positive and finite, got {gamma!r}")
    return values


def _check_imputable(impute: str | None, data: MultiViewData, argument: str = "X") -> None:
    """Raise ValueError when ``data`` has missing views and ``impute`` is None."""
    if impute is None and data.has_missing:
        views = [data.view_names[v] for v in np.flatnonzero(~data.observed.all(axis=0))]
        raise ValueError(f"{argument}: views {views} are missing for some samples but "
                         "impute=None; use impute='landmarks' (the paper's least squares "
                         "on the landmarks), 'bayes' or 'zero', or drop those samples")


class LandmarkMap:
    """A fitted landmark map: what :meth:`LandmarkFeatures.fit_state` learns from the
    training rows, and everything prediction needs again.

    Parameters
    ----------
    landmark_indices : array of int, shape (L,)
        Training rows used as landmarks.
    landmarks : tuple of ndarray
        The landmarks' views, (L, D_v) each.
    gamma : array, shape (V,)
        RBF precision per view.
    impute : {"landmarks", "bayes", "zero", None}
        How missing similarity blocks are filled.
    coef_var, noise_var : float or None
        s² and σ² of the probabilistic eq. 11 (``impute="bayes"``; see
        :meth:`fit_imputation_prior`).
    whiten : bool, default False
        Features are each view's similarities times ``K_v⁺ᐟ²``, the symmetric inverse square
        root of the landmarks' own RBF Gram matrix ``K_v`` (eigenvalues below
        ``RCOND · max`` dropped): a ``N(0, I)`` prior on their weights is then the Gaussian
        process with the Nyström kernel ``k_v(x, L) K_v⁺ k_v(L, x')``, and an L2 penalty is
        its RKHS norm, where raw similarities penalise ``θᵀθ`` (a kernel ``K²``).

    Attributes
    ----------
    landmark_indices_, landmarks_, gamma_, coef_var_, noise_var_
        The parameters above.
    projections_ : ndarray, shape (L, L·V)
        ``P``: the landmarks' own similarities (raw, whatever ``whiten``).
    whiteners_ : list of ndarray (L, L) or None
        ``K_v⁺ᐟ²`` per view when ``whiten``.
    """

    def __init__(self, landmark_indices: np.ndarray, landmarks: tuple[np.ndarray, ...],
                 gamma: np.ndarray, impute: str | None, coef_var: float | None = None,
                 noise_var: float | None = None, whiten: bool = False) -> None:
        self.landmark_indices_ = np.asarray(landmark_indices, dtype=np.int64)
        self.landmarks_ = tuple(np.ascontiguousarray(X, dtype=float) for X in landmarks)
        self.gamma_ = np.asarray(gamma, dtype=float)
        self.impute = impute
        self.coef_var_, self.noise_var_ = coef_var, noise_var
        complete = np.ones((len(self.landmark_indices_), len(self.landmarks_)), dtype=bool)
        self.projections_ = self._similarity_blocks(self.landmarks_, complete)
        self.whiten = bool(whiten)
        self.whiteners_ = None
        if self.whiten:
            L = self.n_landmarks_
            # one thread: the same factor (and so the same predictions after loading, where
            # it is recomputed) whatever the BLAS thread count
            with threadpool_limits(limits=1, user_api="blas"):
                self.whiteners_ = []
                for v in range(self.n_views_):
                    s, V = kernel_eigenbasis(self.projections_[:, v * L:(v + 1) * L], RCOND,
                                             f"view {v}'s landmarks")
                    self.whiteners_.append((V / np.sqrt(s)) @ V.T)

    def whitened(self, M: np.ndarray) -> np.ndarray:
        """The features of similarities ``M`` (n, L·V): ``M`` itself, or each view's block
        times its whitener (``whiten``).  Linear, so it applies to draws of unknown blocks
        and, as ``whitened(θ)``, maps weights of the features to weights of the raw
        similarities (the whiteners are symmetric)."""
        if not self.whiten:
            return M
        L = self.n_landmarks_
        out = np.empty_like(M)
        for v, Wv in enumerate(self.whiteners_):
            out[..., v * L:(v + 1) * L] = M[..., v * L:(v + 1) * L] @ Wv
        return out

    @property
    def n_landmarks_(self) -> int:
        return int(self.landmark_indices_.size)

    @property
    def n_views_(self) -> int:
        return len(self.landmarks_)

    def _columns(self, views: np.ndarray) -> np.ndarray:
        """Feature columns of the given views (bool mask over views, or indices)."""
        L = self.n_landmarks_
        views = np.flatnonzero(views) if np.asarray(views).dtype == bool else np.asarray(views)
        return (views[:, None] * L + np.arange(L)[None, :]).reshape(-1)

    # --------------------------------------------------------------- features
    def _similarity_blocks(self, views: tuple[np.ndarray, ...], observed: np.ndarray
                           ) -> np.ndarray:
        n, L = observed.shape[0], self.n_landmarks_
        out = np.full((n, L * len(views)), np.nan)
        for v, (X, lm, g) in enumerate(zip(views, self.landmarks_, self.gamma_, strict=True)):
            rows = observed[:, v]
            out[rows, v * L:(v + 1) * L] = view_gram("rbf", X[rows], lm, g)
        return out

    def similarities(self, data: MultiViewData) -> np.ndarray:
        """Raw landmark features (n, L·V); NaN in the blocks of missing views."""
        if data.n_views != self.n_views_:
            raise ValueError(f"data has {data.n_views} views, the landmarks {self.n_views_}")
        return self._similarity_blocks(data.views, data.observed)

    def transform(self, data: MultiViewData) -> np.ndarray:
        """Landmark features (n, L·V) with missing blocks imputed (``impute``), whitened
        when ``whiten``."""
        return self.whitened(self.imputed_similarities(data))

    def imputed_similarities(self, data: MultiViewData) -> np.ndarray:
        """Similarities (n, L·V) with missing blocks imputed (``impute``), never whitened."""
        M = self.similarities(data)
        if not data.has_missing:
            return M
        _check_imputable(self.impute, data)
        if self.impute == "zero":
            return np.nan_to_num(M, nan=0.0)
        if self.impute == "landmarks":
            return self.least_squares_impute(M, data.observed)
        self.fill_conditional_means(M, data.observed)
        return M

    def fill_conditional_means(self, M: np.ndarray, observed: np.ndarray
                               ) -> list[MissingBlocks]:
        """Set the missing blocks of ``M`` (in place) to their conditional means under the
        probabilistic eq. 11 and return those Gaussian blocks (:meth:`missing_blocks`)."""
        blocks = self.missing_blocks(M, observed)
        for blk in blocks:
            M[blk.rows[:, None], blk.columns[None, :]] = blk.mean
        return blocks

    def _patterns(self, observed: np.ndarray):
        """Yield (observed-view mask, rows) for each missing-view pattern present."""
        patterns, inverse = np.unique(observed, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        for k, mask in enumerate(patterns):
            yield mask, np.flatnonzero(inverse == k)

    def least_squares_impute(self, M: np.ndarray, observed: np.ndarray,
                             rcond: float = _LSQ_RCOND) -> np.ndarray:
        """The paper's eq. 11, row by row (batched per missing-view pattern).

        ``r = argmin_r ||μ_obs - r P_obs||²`` (the minimum-norm solution; singular values of
        ``P_obs`` below ``rcond`` times the largest count as zero) over the observed blocks,
        then the missing blocks are set to ``r P_miss``; observed blocks are left untouched.
        """
        M = M.copy()
        P = self.projections_
        with threadpool_limits(limits=1, user_api="blas"):
            for mask, rows in self._patterns(observed):
                if mask.all():
                    continue
                obs, miss = self._columns(mask), self._columns(~mask)
                Po = P[:, obs]
                g, U = linalg.eigh(Po @ Po.T)  # squared singular values of P_obs
                keep = g > rcond**2 * g.max()
                coef = (M[np.ix_(rows, obs)] @ Po.T @ U[:, keep]) / g[keep]
                M[np.ix_(rows, miss)] = coef @ (U[:, keep].T @ P[:, miss])
        return M

    # ---------------------------------------------- probabilistic imputation
    def _pattern_statistics(self, M: np.ndarray, observed: np.ndarray) -> list[tuple]:
        P = self.projections_
        stats = []
        with threadpool_limits(limits=1, user_api="blas"):
            for mask, rows in self._patterns(observed):
                obs = self._columns(mask)
                Po = P[:, obs]
                g, U = linalg.eigh(Po @ Po.T)
                Mo = M[np.ix_(rows, obs)]
                q2 = np.sum((Mo @ Po.T @ U) ** 2, axis=0)
                stats.append((rows.size, obs.size, np.maximum(g, 0.0), q2, float(np.sum(Mo**2))))
        return stats

    def imputation_log_likelihood(self, M: np.ndarray, observed: np.ndarray, coef_var: float,
                                  noise_var: float) -> float:
        """``Σ_n log N(μ_obs,n | 0, s² P_obsᵀ P_obs + σ² I)`` over the observed blocks.

        Evaluated in O(L) per pattern from eigenvalues of ``P_obs P_obsᵀ`` (Woodbury and the
        matrix-determinant lemma).
        """
        return -0.5 * self._neg2_loglik(self._pattern_statistics(M, observed),
                                        np.log([coef_var, noise_var]))

    def _neg2_loglik(self, stats: list[tuple], log_params: np.ndarray) -> float:
        s2, sig2 = np.exp(log_params)
        L = self.n_landmarks_
        total = 0.0
        for n, d, g, q2, sq in stats:
            denom = sig2 + s2 * g
            logdet = (d - L) * np.log(sig2) + np.sum(np.log(denom))
            quad = (sq - np.sum(s2 * q2 / denom)) / sig2
            total += n * (logdet + d * np.log(2 * np.pi)) + quad
        return float(total)

    def fit_imputation_prior(self, M: np.ndarray, observed: np.ndarray) -> tuple[float, float]:
        """Empirical Bayes (s², σ²): maximise the marginal likelihood of the observed blocks."""
        stats = self._pattern_statistics(M, observed)
        res = optimize.minimize(lambda p: self._neg2_loglik(stats, p), x0=np.log([1.0, 1e-2]),
                                method="L-BFGS-B", bounds=[(-25.0, 25.0), (-25.0, 5.0)])
        s2, sig2 = np.exp(res.x)
        return float(s2), float(sig2)

    def missing_blocks(self, M: np.ndarray, observed: np.ndarray, coef_var: float | None = None,
                       noise_var: float | None = None) -> list[MissingBlocks]:
        """Gaussian ``p(μ_miss | μ_obs)`` per missing-view pattern (see :class:`MissingBlocks`).

        ``coef_var`` and ``noise_var`` default to the fitted ``coef_var_`` and ``noise_var_``.
        """
        s2 = self.coef_var_ if coef_var is None else coef_var
        sig2 = self.noise_var_ if noise_var is None else noise_var
        P = self.projections_
        out = []
        with threadpool_limits(limits=1, user_api="blas"):
            for mask, rows in self._patterns(observed):
                if mask.all():
                    continue
                obs, miss = self._columns(mask), self._columns(~mask)
                Po, Pm = P[:, obs], P[:, miss]
                # σ²A = P_o P_oᵀ + (σ²/s²) I = U diag(g + ρ) Uᵀ: an eigendecomposition, not a
                # Cholesky factor, as landmark Gram matrices are numerically singular and
                # ρ = σ²/s² may be tiny
                g, U = linalg.eigh(Po @ Po.T)
                inv_sqrt = 1.0 / np.sqrt(np.maximum(g, 0.0) + sig2 / s2)
                coef = M[np.ix_(rows, obs)] @ Po.T @ U * inv_sqrt**2     # (n_k, L), U basis
                UPm = U.T @ Pm
                out.append(MissingBlocks(rows=rows, columns=miss, mean=coef @ UPm,
                                         factor=np.sqrt(sig2) * inv_sqrt[:, None] * UPm,
                                         noise_var=float(sig2)))
        return out


class LandmarkFeatures(Component):
    """Per-view RBF similarities to landmarks drawn uniformly from the complete training rows.

    A specification: :meth:`fit_state` (and ``build``) return the fitted
    :class:`LandmarkMap` and leave the component unchanged, so one component serves any
    number of data sets.

    Parameters
    ----------
    n_landmarks : int or "auto", default 50
        Number L of landmarks; the feature vector has L·V entries.  When fewer training rows
        have every view, all of them are used (with a warning), as scikit-learn's Nystroem
        does when asked for more components than samples.  ``"auto"``: 200 (``AUTO_LANDMARKS``)
        or every complete row when there are fewer, without a warning.
    gamma : None, float or sequence of float
        RBF precision ``γ_v`` of ``exp(-γ_v ||a - b||²)``: None gives the paper's radius
        √D_v (``γ_v = 1/D_v``); one number for every view, or one per view.
    impute : {"landmarks", "bayes", "zero", None}, default "landmarks"
        How missing similarity blocks are filled (see the module notes).
    random_seed : int, numpy Generator or None
        Seed of the landmark draw.
    indices : array of int or None
        Use these training rows (each with every view) as the landmarks instead of drawing
        them (``n_landmarks`` is then their number), e.g. to rebuild a fitted map.
    random_state : int, numpy Generator or None
        Deprecated alias of ``random_seed``.
    whiten : bool, default False
        Multiply each view's similarities by ``K_v⁺ᐟ²`` (the landmarks' own Gram matrix), so
        that the combiner's Gaussian prior on the weights is the RKHS norm of the Nyström
        kernel (see :class:`LandmarkMap`); False keeps the paper's raw similarities.
    """

    consumes = (VIEWS,)
    produces = VIEW_FEATURES
    RENAMED = {"random_seed": "random_state"}

    @property
    def provides(self) -> frozenset[str]:  # type: ignore[override]
        """Fixed data, except under ``impute="bayes"``, whose missing blocks are random."""
        return frozenset() if self.impute == "bayes" else frozenset({FIXED})

    def __init__(self, n_landmarks: int = 50, gamma: Any = None, impute: str | None = "landmarks",
                 random_seed: Any = None, indices: Any = None,
                 random_state: Any = None, whiten: bool = False) -> None:
        self.n_landmarks = n_landmarks
        self.gamma = gamma
        self.impute = impute
        self.random_seed = random_seed
        self.indices = indices
        self.random_state = random_state
        self.whiten = whiten

    # ------------------------------------------------------------------ fitting
    def validate(self) -> None:
        """Check the parameters (cheap; called before any work)."""
        n = self.n_landmarks
        if isinstance(n, str) and n == "auto":
            pass
        elif not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
            raise ValueError(f"n_landmarks must be a positive integer or 'auto', got {n!r}")
        if self.impute not in IMPUTE_OPTIONS:
            raise ValueError(f"impute must be one of {IMPUTE_OPTIONS}, got {self.impute!r}")

    def check_imputable(self, data: MultiViewData, argument: str = "X") -> None:
        """Raise ValueError when ``data`` has missing views and ``impute`` is None."""
        _check_imputable(self.impute, data, argument)

    def fit_state(self, data: MultiViewData) -> LandmarkMap:
        """Draw the landmarks from the complete rows of ``data`` (or take ``indices``), fit
        the imputer, and return the fitted :class:`LandmarkMap` (the component is not
        changed)."""
        self.validate()
        self._warn_renamed()
        gamma = _check_gamma(self.gamma, data.view_sizes)
        complete = np.flatnonzero(data.observed.all(axis=1))
        if self.indices is not None:
            indices = np.asarray(self.indices, dtype=np.int64).reshape(-1)
            if indices.size == 0 or not np.all(np.isin(indices, complete)):
                raise ValueError("indices must be training rows with every view observed, "
                                 f"at most {data.n_samples - 1}")
        else:
            if complete.size == 0:
                raise ValueError("no training row has every view, but landmarks must be "
                                 "complete rows (their similarity blocks anchor the "
                                 "imputation)")
            L = self.resolved_n_landmarks(data)
            if complete.size < L:
                warnings.warn(f"n_landmarks={L} but only {complete.size} training rows have "
                              f"every view; using all {complete.size} of them as landmarks",
                              UserWarning, stacklevel=2)
                L = complete.size
            rng = np.random.default_rng(self._param("random_seed"))
            indices = np.sort(rng.choice(complete, size=L, replace=False))
        fitted = LandmarkMap(indices, tuple(X[indices] for X in data.views), gamma,
                             self.impute, whiten=self.whiten)
        if self.impute == "bayes":
            M = fitted.similarities(data)
            fitted.coef_var_, fitted.noise_var_ = fitted.fit_imputation_prior(M, data.observed)
        return fitted

    def fit(self, data: MultiViewData) -> LandmarkMap:
        """Deprecated: :meth:`fit_state` (which this returns; the component is no longer
        changed)."""
        warnings.warn("LandmarkFeatures.fit is deprecated; use fit_state, which returns the "
                      "fitted LandmarkMap (transform, similarities, landmark_indices_, ...) "
                      "and leaves the component unchanged", FutureWarning, stacklevel=2)
        return self.fit_state(data)

    def resolved_n_landmarks(self, data: MultiViewData) -> int:
        """L for ``data``: the number of ``indices``, ``n_landmarks``, or ``"auto"``'s
        min(200, rows with every view)."""
        if self.indices is not None:
            return int(np.asarray(self.indices).size)
        if isinstance(self.n_landmarks, str):
            complete = int(np.count_nonzero(data.observed.all(axis=1)))
            return max(1, min(AUTO_LANDMARKS, complete))
        return int(self.n_landmarks)

    # ------------------------------------------------------------------ graph
    def build(self, ctx: BuildContext, data: MultiViewData) -> ViewFeatures:
        """Add the landmark features to the model: one block of L similarities per view.

        The fitted :class:`LandmarkMap` (:meth:`fit_state` on the training rows) is kept in
        the built model (``ctx.state["landmarks"]``); the component itself does not change.
        The features are fixed data, except the missing blocks under ``impute="bayes"``: those
        are random variables ``mu_missing_k`` (one per missing-view pattern k) with the
        Gaussian prior of :meth:`LandmarkMap.missing_blocks`; on new rows their prior means
        fill them in.
        """
        fitted = ctx.fitted_state("landmarks", lambda: self.fit_state(data))
        L, V = fitted.n_landmarks_, fitted.n_views_
        ctx.add_coord("landmark", L)
        ctx.add_coord("feature", L * V)
        ctx.state["landmark_indices"] = fitted.landmark_indices_
        if ctx.predicting or fitted.impute != "bayes" or not data.has_missing:
            ctx.state["missing_blocks"] = []
            M = fitted.imputed_similarities(data)
        else:
            M = fitted.similarities(data)
            ctx.state["missing_blocks"] = fitted.missing_blocks(M, data.observed)
            M = np.nan_to_num(M, nan=0.0)
        # the (raw) similarities are the data, unknown blocks the random variables; whitening
        # is a fixed linear map after them
        ctx.state["similarities"] = M
        tensor = pt.as_tensor(pm.Data("landmark_features", M, dims=("sample", "feature")))
        for k, blk in enumerate(ctx.state["missing_blocks"]):
            mu = pm.MvNormal(f"mu_missing_{k}", mu=blk.mean, cov=blk.covariance(),
                             shape=blk.mean.shape)
            tensor = pt.set_subtensor(tensor[blk.rows[:, None], blk.columns[None, :]], mu)
        blocks_ = [tensor[:, v * L:(v + 1) * L] for v in range(V)]
        if fitted.whiten:
            blocks_ = [block @ Wv for block, Wv in zip(blocks_, fitted.whiteners_, strict=True)]
        Phi = fitted.whitened(M)
        return publish_view_features(ctx, blocks_, [Phi[:, v * L:(v + 1) * L] for v in range(V)])

    def initial_values(self, ctx: BuildContext, rng: np.random.Generator
                       ) -> dict[str, np.ndarray]:
        """Missing blocks (``impute="bayes"``) start at one draw from their prior."""
        return {f"mu_missing_{k}": blk.sample(rng)
                for k, blk in enumerate(ctx.state.get("missing_blocks", []))}
