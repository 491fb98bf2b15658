"""MVML: multi-view metric learning in vector-valued kernel spaces (Huusari, Kadri & Capponi),
as a MAP fit of a model-graph with an exact Gaussian posterior for the weights."""

from __future__ import annotations

import numbers
import time
from typing import Any

import numpy as np
import xarray as xr

from bayesmv.builder import BuiltModel, ModelBuilder
from bayesmv.components.likelihoods import (
    GaussianLikelihood,
    class_probabilities,
    log_expected_sigmoid,
)
from bayesmv.components.metric import BlockMetricCombiner
from bayesmv.components.nystrom import (
    NystromFeatures,
    NystromState,
    check_complete_views,
    n_landmarks,
)
from bayesmv.data import MultiViewData, ViewStandardizer, label_tasks, output_codes
from bayesmv.inference.metric import (
    MetricProblem,
    block_norms,
    fit_block_metrics,
    loo_calibration_slope,
    single_blas_thread,
    task_predictive,
)
from bayesmv.models.base import BaseMultiViewClassifier, register
from bayesmv.models.fitted_graph import FittedGraphMixin
from bayesmv.params import check_positive, check_random_seed

__all__ = ["MVML"]

#: noise variance of the least-squares likelihood implied by the objective ||y - f||²
NOISE_VARIANCE = 0.5
#: κ = 2/σ²: the Gaussian likelihood normalised over the targets ±1 is σ(κf)
_SLOPE = 2.0 / NOISE_VARIANCE
#: ways to turn the predictive of f into probabilities (as RhoTMVRKM's ``calibration``)
CALIBRATIONS = ("temperature", "likelihood")


@register
class MVML(FittedGraphMixin, BaseMultiViewClassifier):
    """Multi-view metric learning (MVML) with Nyström features, fitted by MAP, predicting with
    the exact Gaussian posterior of the weights.

    Each view gets a kernel, approximated on one random subset S of the training rows shared by
    all views (``U_v = K_v[:, S] W_v^{-1/2}``).  With ``Z = [w_1 U_1, …, w_V U_V]`` the model is

    ``y | g ~ N(Z g, ½)``,  ``g | A ~ N(0, A/(2λ))``,  A a PSD block metric between views,

    and the published objective (Huusari et al. 2018) is

    ``J(g, A) = ||y - Z g||² + λ gᵀA⁻¹g + η||A||²_F``.

    Fitting alternates the exact g-step ``(ZᵀZ + λA⁻¹) g = Zᵀy`` (solved through a Cholesky
    factor of A, never an inverse) with metric updates (``learn_A``) and, optionally,
    view-weight updates (``learn_w``).  Predictions use the Gaussian posterior of g given the
    fitted A: ``f* ~ N(z*ᵀ ḡ, ½ z*ᵀ (ZᵀZ + λA⁻¹)⁻¹ z*)``.  By default the probabilities are
    temperature-calibrated: ``p(y_t = +1) = E[σ(s f*)]`` with one slope s learned in
    ``fit`` from the exact leave-one-out predictive of the training rows (``calibration``).

    Parameters
    ----------
    alpha : float, default 0.1
        λ, the weight of ``gᵀA⁻¹g`` (prior precision scale of g).
    metric_penalty : float, default 1.0
        η, the weight of the metric penalty (Frobenius for ``"full"``, block norms for
        ``"sparse"``).  Unused by the fixed metrics.
    nystrom : float in (0, 1] or int, default 0.25
        Nyström subset size: a fraction of the training rows (``floor(nystrom · N)``) or a
        number of rows (at most N: more is a ValueError); the same rows for every view.
    learn_A : {"full", "sparse", "identity", "cov"}, default "full"
        ``"full"``: learn A by gradient steps ``A ← (1 - 2sη)A + sλ A⁻¹g gᵀA⁻¹`` with
        ``s < 1/(2η)``, Armijo-guarded (paper objective) or by EM (bayes objective);
        ``"sparse"``: learn A with the block group-lasso penalty ``η Σ_{u≤v} ||A_uv||_F``
        instead of ``η||A||²_F`` by proximal-gradient steps on ``min_g J`` (paper) or
        ``-log p(A | y)`` (bayes), projected onto the PSD cone; views whose blocks reach zero
        are dropped exactly (see ``view_interactions_``) and may come back;
        ``"identity"``: A = I (MVML_I); ``"cov"``: ``A_uv = U_uᵀU_v`` (MVML_Cov).
    learn_w : bool, default False
        Also learn the view weights w (on the probability simplex; uniform ``1/V`` otherwise).
        The paper's w-step is unconstrained least squares, under which the objective has no
        minimiser (scaling w up and g down lowers ``λgᵀA⁻¹g`` at the same fit); the simplex
        removes that direction.
    objective : {"paper", "bayes"}, default "paper"
        ``"paper"``: minimise the published objective J (no log-determinant of A).  The prior
        term ``λ gᵀA⁻¹g`` is then not a normalised Gaussian in g.
        ``"bayes"``: the proper model ``g | A ~ N(0, A/(2λ))``, whose density adds
        ``½ log det A``.  Its joint MAP over (g, A) does not exist (g = 0, A → 0 sends the
        density to +∞), so ``"bayes"`` maximises ``p(A | y)`` with g integrated out —
        ``-log p(A | y) = min_g J + ½ log det A + ½ log det(ZᵀZ + λA⁻¹) + const
        = min_g J + ½ log det(I + A ZᵀZ/λ) + const`` — by EM (full) or proximal gradient
        (sparse); g is then its exact Gaussian posterior given A.  For the fixed metrics the
        two objectives give the same g.
    kernel : str or sequence of str, default "rbf"
        Per-view kernel (any :func:`sklearn.metrics.pairwise.pairwise_kernels` name).
    gamma : float, sequence of float or None, default None
        Kernel parameter(s); None gives ``1/D_v`` per view.
    max_iter : int, default 100
        Maximum number of metric / weight updates (each followed by a g-step).
    tol : float, default 1e-4
        Stop when an iteration lowers the objective by less than ``tol`` times its value
        (every update is a descent step, so the objective never increases).
    random_seed : int or None
        Seeds the Nyström subset; the same seed gives the same fit.
    view_sizes : sequence of int or None
        When X is one 2-D array, the widths of its consecutive views; one may be -1, the
        columns the others leave (:func:`bayesmv.data.check_views`).
    standardize : bool, default True
        Standardise each view on the training rows first.
    calibration : {"temperature", "likelihood"}, default "temperature"
        How ``predict_proba`` turns the Gaussian predictive of each task's f* into
        probabilities: ``p(y_t = +1 | x*) = E[σ(s f*)]`` over ``f* ~ N(mean, std²)``
        (:meth:`decision_distribution`), one-vs-rest scores renormalised over the classes.
        ``"likelihood"``: s = κ = 2/σ² = 4, the least-squares likelihood normalised over the
        targets ±1; with ten one-vs-rest tasks it is badly under-confident (nine negative
        scores σ(-4) ≈ 0.018 take a seventh of the mass from a confident row).
        ``"temperature"``: one slope s > 0 (a temperature 1/s, shared by all tasks) fitted in
        ``fit`` by minimising the cross-entropy, against Platt's smoothed targets, of the
        exact leave-one-out predictive ``N(f₋ᵢ, v₋ᵢ)`` of every training row given the
        fitted metric and view weights (learned from all rows; :func:`loo_predictive`: no
        refits, no held-out data), with :func:`~bayesmv.inference.evidence.fit_slope` as
        for :class:`bayesmv.RhoTMVRKM`.
        Only the probabilities' sharpness changes: ``predict`` is the same either way.
    lmbda, eta : float or None, default None
        Deprecated aliases of ``alpha`` and ``metric_penalty``; when given they take
        precedence, with a ``FutureWarning``.

    Attributes
    ----------
    A_ : ndarray of shape (n_tasks, n, n)
        The learned (or fixed) metric of every one-vs-rest task (one task for two classes),
        symmetric positive semi-definite; n = Σ_v r_v Nyström features.
    g_ : ndarray of shape (n_tasks, n)
        Posterior mean of g given A (the MAP).
    w_ : ndarray of shape (n_tasks, n_views)
        View weights.
    view_interactions_ : ndarray of shape (n_tasks, n_views, n_views)
        Frobenius norms of the blocks ``A_uv``: which views and view pairs the metric uses
        (exact zeros for the views the sparse variant dropped).
    nystrom_subset_ : ndarray of int
        Training rows of the Nyström subset S.
    n_iter_ : ndarray of int, shape (n_tasks,)
        Metric / weight updates made per task.
    objective_history_ : list of ndarray
        Objective value after every g-step, per task (non-increasing).
    converged_ : ndarray of bool, shape (n_tasks,)
        Whether the objective criterion was met before ``max_iter``.
    idata_ : arviz.InferenceData
        One chain × one draw ("map"): ``f`` (training decision values), ``g``, ``w``, ``A``.
    slope_ : float or None
        The calibration slope s of ``calibration="temperature"`` (None with
        ``"likelihood"``, whose slope is κ = 4).
    builder_, model_ :
        The fitted model as a :class:`~bayesmv.ModelBuilder` (``make_builder`` with what the
        fit chose fixed) and its ``pm.Model`` on the training rows, for PyMC's own tools
        (:class:`~bayesmv.models.fitted_graph.FittedGraphMixin`).

    Notes
    -----
    Multi-class problems are one-vs-rest: an independent metric, g and w per class.  Missing
    views are not supported (the kernels compare whole views): ``fit`` and ``predict`` raise
    a ValueError naming the view and suggesting imputation or :class:`bayesmv.M3LAK`.

    The paper objective is jointly convex in (g, A) and its infimum is approached with A
    collapsing onto the direction of g, so the learned metric depends on the iteration path
    (the paper's algorithm, which this follows: A₀ = blockdiag(U_vᵀU_v), one gradient step per
    iteration with the step of scikit-multimodallearn, every step checked to lower J).
    Compared with scikit-multimodallearn's ``MVML``, whose inner loop also accepts steps
    that raise J and inverts A by pseudo-inverses with condition-number heuristics, the
    decision values agree to ~1e-9 while its A stays well conditioned (tests/test_mvml.py);
    afterwards its A loses symmetry and its accuracy collapses, ours does not
    (benchmarks/mvml.py).

    Examples
    --------
    >>> from bayesmv import MVML
    >>> from bayesmv.datasets import load_multiple_features
    >>> X, y = load_multiple_features(classes=(3, 5))
    >>> clf = MVML(nystrom=0.1, random_seed=0).fit([v[::2] for v in X], y[::2])
    >>> clf.predict_proba([v[1::2] for v in X]).shape
    (200, 2)
    """

    def __init__(
        self,
        alpha: float = 0.1,
        metric_penalty: float = 1.0,
        nystrom: float | int = 0.25,
        learn_A: str = "full",
        learn_w: bool = False,
        objective: str = "paper",
        kernel: str | tuple[str, ...] = "rbf",
        gamma: float | tuple[float, ...] | None = None,
        max_iter: int = 100,
        tol: float = 1e-4,
        random_seed: int | None = None,
        view_sizes: tuple[int, ...] | None = None,
        standardize: bool = True,
        calibration: str = "temperature",
        lmbda: float | None = None,
        eta: float | None = None,
    ) -> None:
        self.alpha = alpha
        self.metric_penalty = metric_penalty
        self.nystrom = nystrom
        self.learn_A = learn_A
        self.learn_w = learn_w
        self.objective = objective
        self.kernel = kernel
        self.gamma = gamma
        self.max_iter = max_iter
        self.tol = tol
        self.random_seed = random_seed
        self.view_sizes = view_sizes
        self.standardize = standardize
        self.calibration = calibration
        self.lmbda = lmbda
        self.eta = eta

    # --------------------------------------------------------------- checks
    RENAMED = {"alpha": "lmbda", "metric_penalty": "eta"}

    def _combiner(self) -> BlockMetricCombiner:
        return BlockMetricCombiner(self._param("alpha"), self._param("metric_penalty"),
                                   self.learn_A, self.learn_w, self.objective)

    def _nystrom(self) -> NystromFeatures:
        return NystromFeatures(self.nystrom, self.kernel, self.gamma,
                               random_seed=self.random_seed)

    def _validate_params(self) -> None:
        for name in self.RENAMED:  # named as the user set them, before the combiner checks
            check_positive(self._param_name(name), self._param(name))
        self._warn_renamed(stacklevel=4)
        self._combiner().check_params()
        n_landmarks(self.nystrom, 10**9)  # validates the type/range of nystrom
        if (isinstance(self.max_iter, bool) or not isinstance(self.max_iter, numbers.Integral)
                or self.max_iter < 0):
            raise ValueError(f"max_iter must be a non-negative integer, got {self.max_iter!r}")
        if (isinstance(self.tol, bool) or not isinstance(self.tol, numbers.Real)
                or not np.isfinite(self.tol) or self.tol < 0):
            raise ValueError(f"tol must be a non-negative finite number, got {self.tol!r}")
        if self.calibration not in CALIBRATIONS:
            raise ValueError(f"calibration must be one of {CALIBRATIONS}, got "
                             f"{self.calibration!r}")
        check_random_seed(self.random_seed)

    # ------------------------------------------------------------- builder
    def make_builder(self, *, metric=None, view_weights=None,
                     link_slope: float | None = None) -> ModelBuilder:
        """The model graph: views → Nyström features → block metric → least squares.

        A fitted model's ``metric=A_``, ``view_weights=w_`` and ``link_slope=slope_`` fix the
        metric and view weights it learned and its probabilities' calibration slope, so the
        graph's exact posterior and predictive are the fitted model's; with more than two
        classes the likelihood's ``multiclass="normalised"`` is MVML's rule (each task's
        probability normalised over the classes).
        """
        combiner = self._combiner()
        if metric is not None or view_weights is not None:
            combiner.set_params(metric=metric, view_weights=view_weights,
                                learn_w=self.learn_w and view_weights is None)
        return ModelBuilder(None, self._nystrom(), combiner,
                            GaussianLikelihood(sigma=float(np.sqrt(NOISE_VARIANCE)),
                                               link_slope=link_slope,
                                               multiclass="normalised"))

    def _fitted_builder(self) -> ModelBuilder:
        return self.make_builder(metric=self.A_, view_weights=self.w_ if self.learn_w else None,
                                 link_slope=self.slope_)

    def _prepare_training(self, X, y) -> tuple[MultiViewData, np.ndarray, np.ndarray,
                                                ViewStandardizer | None]:
        self._validate_params()
        data, classes, y_index = self._validate_training_data(X, y)
        self._nystrom().check_params(data.n_views)  # the part that needs the view count
        if (isinstance(self.nystrom, numbers.Integral) and not isinstance(self.nystrom, bool)
                and self.nystrom > data.n_samples):
            raise ValueError(f"nystrom={self.nystrom} asks for more Nyström landmarks than the "
                             f"{data.n_samples} training rows; give at most {data.n_samples} "
                             "or a fraction in (0, 1]")
        check_complete_views(data, "X")
        standardizer = ViewStandardizer().fit(data) if self.standardize else None
        if standardizer is not None:
            data = standardizer.transform(data)
        return data, classes, y_index, standardizer

    def build_model(self, X, y) -> BuiltModel:
        """Validate and standardise (X, y) and build the ``pm.Model`` without fitting it.

        Its log-density is minus the objective :meth:`fit` minimises (``objective="paper"``),
        or the proper joint density whose A-marginal :meth:`fit` maximises (``"bayes"``).
        """
        data, classes, y_index, standardizer = self._prepare_training(X, y)
        built = self.make_builder().build(data, label_tasks(y_index, len(classes)))
        built.classes, built.y_index, built.standardizer = classes, y_index, standardizer
        return built

    # ------------------------------------------------------------------ fit
    def fit(self, X, y) -> MVML:
        """Fit the metric(s), weights and view weights on training views ``X`` and labels ``y``.

        Parameters
        ----------
        X : list of array-like (one (n_samples, D_v) array per view), or one 2-D array with
            ``view_sizes``.  Every view must be present for every sample.
        y : array-like of shape (n_samples,)
            Class labels; more than two classes are fitted one-vs-rest.

        Returns
        -------
        self
        """
        data, classes, y_index, standardizer = self._prepare_training(X, y)
        targets = label_tasks(y_index, len(classes))
        start = time.perf_counter()
        with single_blas_thread():
            state = self._nystrom().fit_state(data)
            problem = MetricProblem(state.transform(data), state.block_sizes)
        fits = fit_block_metrics(
            problem, targets, alpha=float(self._param("alpha")),
            metric_penalty=float(self._param("metric_penalty")), learn_A=self.learn_A,
            learn_w=bool(self.learn_w), objective=self.objective, noise_variance=NOISE_VARIANCE,
            max_iter=int(self.max_iter), tol=float(self.tol))
        # the slope of the likelihood's multi-class rule, "normalised" (make_builder)
        slope = (loo_calibration_slope(problem, fits, targets, y_index,
                                       output_codes(len(classes), "ova"), "normalised",
                                       NOISE_VARIANCE)
                 if self.calibration == "temperature" else None)
        elapsed = time.perf_counter() - start

        idata = self._make_idata(fits, state, data, y_index, targets, elapsed)
        # fitted state only now, in one step: a failure above leaves a previous fit intact
        self._restore(state, [ft.cov_factor for ft in fits], idata, classes_=classes,
                      layout_=data.layout,
                      standardizer_=standardizer, n_features_in_=int(sum(data.view_sizes)),
                      idata_=idata, n_iter_=np.array([ft.n_iter for ft in fits]),
                      objective_history_=[np.asarray(ft.objective) for ft in fits],
                      converged_=np.array([ft.converged for ft in fits]), fit_time_=elapsed,
                      slope_=slope, _graph_inputs=(data, targets), _model=None)
        return self

    def _make_idata(self, fits, state: NystromState, data: MultiViewData, y_index, targets,
                    elapsed: float):
        import arviz as az

        n, T = state.n_features, targets.shape[1]
        # built from xarray directly: az.from_dict's checks cost more than a small fit
        coords = {"chain": [0], "draw": [0], "sample": np.arange(data.n_samples),
                  "task": np.arange(T), "view": list(data.view_names),
                  "nystrom_feature": np.arange(n), "nystrom_feature_b": np.arange(n)}
        cd = ("chain", "draw")
        posterior = xr.Dataset(
            {"f": (cd + ("sample", "task"), np.stack([ft.f for ft in fits], axis=1)[None, None]),
             "g": (cd + ("task", "nystrom_feature"), np.stack([ft.g for ft in fits])[None, None]),
             "w": (cd + ("task", "view"), np.stack([ft.w for ft in fits])[None, None]),
             "A": (cd + ("task", "nystrom_feature", "nystrom_feature_b"),
                   np.stack([ft.A for ft in fits])[None, None])},
            coords=coords)
        posterior.attrs.update({
            "inference": "map", "model": "MVML", "objective": self.objective,
            "learn_A": self.learn_A, "fit_seconds": float(elapsed),
            "n_iter": [int(ft.n_iter) for ft in fits],
            "converged": [int(ft.converged) for ft in fits]})
        rank = max(ft.cov_factor.shape[1] for ft in fits)
        cov = np.zeros((T, n, rank))
        for t, ft in enumerate(fits):
            cov[t, :, :ft.cov_factor.shape[1]] = ft.cov_factor
        const = {"nystrom_subset": (("landmark",), state.subset),
                 "g_cov_factor": (("task", "nystrom_feature", "cov_rank"), cov)}
        for v in range(len(state.landmarks)):
            const[f"landmarks_{v}"] = (("landmark", f"view{v}_feature"), state.landmarks[v])
            const[f"whitener_{v}"] = (("landmark", f"view{v}_nystrom"), state.whiteners[v])
            const[f"eigenvalues_{v}"] = ((f"view{v}_nystrom",), state.eigenvalues[v])
        observed = xr.Dataset({"y": ("sample", y_index),
                               "y_tasks": (("sample", "task"), targets)})
        return az.InferenceData(posterior=posterior, constant_data=xr.Dataset(const),
                                observed_data=observed)

    # ------------------------------------------------------------ fitted state
    def _restore(self, state: NystromState, cov_factors: list[np.ndarray], idata=None,
                 **fitted: Any) -> None:
        """Install the prediction state read from ``idata`` (default ``idata_``) together with
        ``fitted``, all in one step."""
        post = (self.idata_ if idata is None else idata).posterior
        A = np.asarray(post["A"].values[0, 0])
        self._commit(_state=state, _cov_factors=cov_factors, A_=A,
                     g_=np.asarray(post["g"].values[0, 0]), w_=np.asarray(post["w"].values[0, 0]),
                     nystrom_subset_=state.subset.copy(),
                     view_interactions_=np.stack([block_norms(a, state.block_sizes) for a in A]),
                     **fitted)

    def _extra_state(self) -> dict[str, Any]:
        return {"kernels": list(self._state.kernels), "gammas": list(self._state.gammas),
                "n_iter": self.n_iter_.tolist(), "converged": self.converged_.tolist(),
                "objective_history": [h.tolist() for h in self.objective_history_],
                "fit_time": float(self.fit_time_), "slope": self.slope_}

    def _prediction_constants(self) -> set[str]:
        # MVML builds its constant_data itself (no graph data): the Nyström landmarks,
        # whiteners and covariance factors, all read by prediction
        return set(map(str, self.idata_.constant_data.data_vars))

    def _set_extra_state(self, extra: dict[str, Any]) -> None:
        const = self.idata_.constant_data
        V = len(self.layout_.view_sizes)
        state = NystromState(
            subset=np.asarray(const["nystrom_subset"].values, dtype=np.intp),
            landmarks=[np.asarray(const[f"landmarks_{v}"].values) for v in range(V)],
            whiteners=[np.asarray(const[f"whitener_{v}"].values) for v in range(V)],
            kernels=list(extra["kernels"]), gammas=list(extra["gammas"]),
            eigenvalues=[np.asarray(const[f"eigenvalues_{v}"].values) for v in range(V)])
        cov = np.asarray(const["g_cov_factor"].values)
        self.n_iter_ = np.asarray(extra["n_iter"], dtype=int)
        self.converged_ = np.asarray(extra["converged"], dtype=bool)
        self.objective_history_ = [np.asarray(h) for h in extra["objective_history"]]
        self.fit_time_ = float(extra["fit_time"])
        # JSON writes a float's shortest repr, which reads back bit-identically; files saved
        # before calibration existed have no slope (κ, as calibration="likelihood")
        self.slope_ = None if extra.get("slope") is None else float(extra["slope"])
        self._restore(state, [cov[t] for t in range(cov.shape[0])])

    # ----------------------------------------------------------- prediction
    def decision_distribution(self, X) -> tuple[np.ndarray, np.ndarray]:
        """Gaussian posterior predictive of the decision value given the fitted metric.

        Returns
        -------
        mean, std : ndarray of shape (n_samples, n_tasks)
            ``f* | y, A ~ N(mean, std²)`` per one-vs-rest task (one task for two classes).
        """
        data = self._prepare(X)
        check_complete_views(data, "X")
        U = self._state.transform(data)
        sizes = self._state.block_sizes
        mean = np.empty((data.n_samples, len(self.g_)))
        var = np.empty_like(mean)
        for t in range(len(self.g_)):
            mean[:, t], var[:, t] = task_predictive(U, sizes, self.w_[t], self.g_[t],
                                                    self._cov_factors[t], NOISE_VARIANCE)
        return mean, np.sqrt(var)

    def _slope(self) -> float:
        """s in ``σ(s f)``: the fitted calibration slope, or the likelihood's κ = 4."""
        slope = getattr(self, "slope_", None)
        return _SLOPE if slope is None else slope

    def _log_predictive(self, X) -> tuple[np.ndarray, np.ndarray]:
        """``log p(y_t = ±1 | x*)``, (n_samples, n_tasks): ``σ(±s f)`` averaged over the
        Gaussian posterior of f* (s: the calibration slope, or κ)."""
        mean, std = self.decision_distribution(X)
        slope = self._slope()
        return (log_expected_sigmoid(mean, std**2, slope),
                log_expected_sigmoid(-mean, std**2, slope))

    def decision_function(self, X) -> np.ndarray:
        """Moderated decision values: ``logit(p)/s`` of ``predict_proba``'s task probability
        p, with s the slope in ``σ(s f)`` (``slope_`` with ``calibration="temperature"``,
        ``κ = 2/σ² = 4`` with ``"likelihood"``).

        This is the decision value a row without posterior uncertainty would need for the same
        probability (MacKay 1992's moderated output).  The posterior mean of f alone
        (``decision_distribution``) ranks rows differently from the probability wherever
        their posterior variances differ; the moderated value ranks them exactly as
        ``predict_proba`` does and has the sign of the posterior mean (σ is symmetric), hence
        of ``predict``'s class.

        Shape (n_samples,) for two classes (positive favours ``classes_[1]``), else
        (n_samples, n_classes).
        """
        log_pos, log_neg = self._log_predictive(X)
        f = (log_pos - log_neg) / self._slope()
        return f[:, 0] if f.shape[1] == 1 else f

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities: ``p(y_t = +1 | f) = σ(s f)`` averaged over the Gaussian
        posterior of f* (:func:`~bayesmv.components.likelihoods.log_expected_sigmoid`, as
        ϱTMV-RKM); one-vs-rest scores renormalised to sum to one (in log space, so that
        scores that all underflow still give a distribution).

        ``calibration="temperature"`` (default): s is ``slope_``, the temperature-scaling
        slope fitted in ``fit`` to the exact leave-one-out predictive of the training rows;
        ``"likelihood"``: s = κ = 2/σ² = 4, the normalised Gaussian likelihood
        ``σ(2f/σ²)``."""
        return class_probabilities(self._log_predictive(X)[0])

    def _decision_draws(self, X) -> np.ndarray:
        """The posterior mean of f at X as one draw (n_draws = 1, n_samples, n_tasks): the
        decision value itself, not the moderated ``decision_function``."""
        return self.decision_distribution(X)[0][None]
