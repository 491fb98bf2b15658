"""ϱTMV-RKM (Houthuys & Suykens): tensor-based restricted kernel machines, solved exactly.

The paper's linear system (eq. 12) is τ times the posterior-mean equations of a Gaussian
process on the ±1 targets (:mod:`bayesmv.components.tensor`), so MAP is the
posterior mean and the Laplace approximation is exact.  The fit is the closed form built from
the graph's pieces (one Cholesky factor shared by every one-vs-rest or output-code task); the
``pm.Model`` of the same graph is available from :meth:`RhoTMVRKM.build_model`.  ϱ, λ and the
kernel widths are chosen by the exact leave-one-out cross-entropy of the calibrated
classifier with proper hyper-priors, or by the graph's density (type-II maximum likelihood);
see :mod:`bayesmv.inference.evidence`.
"""

from __future__ import annotations

import numbers
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
from scipy import linalg

from bayesmv.builder import BuiltModel, ModelBuilder
from bayesmv.components.base import Identity
from bayesmv.components.kernels import KERNELS, ViewKernels, ViewRandomFeatures
from bayesmv.components.likelihoods import (
    GaussianLikelihood,
    class_log_probabilities,
    output_log_bits,
)
from bayesmv.components.tensor import (
    RhoTensorCombiner,
    combine_kernels,
    feature_design,
    mix_sum_and_product,
    tau_of,
)
from bayesmv.data import MultiViewData, ViewStandardizer, output_codes
from bayesmv.inference.conjugate import FeaturePosterior, KernelPosterior
from bayesmv.inference.evidence import (
    LOG_LAM_RANGE,
    fit_slope,
    loo_decision_values,
    loo_pieces,
    loo_variance,
    own_kernel_rule,
    platt_targets,
)
from bayesmv.inference.selection import choose_process_hyperparameters, reference_widths
from bayesmv.models.base import BaseMultiViewClassifier, register
from bayesmv.models.fitted_graph import FittedGraphMixin
from bayesmv.params import check_positive


@register
class RhoTMVRKM(FittedGraphMixin, BaseMultiViewClassifier):
    """ϱ-tensor multi-view restricted kernel machine (Houthuys & Suykens), exact and Bayesian.

    Parameters
    ----------
    rho : float in [0, 1] or None
        ϱ: 0 is MV-RKM (per-view weights, late fusion), 1 is TMV-RKM (tensor product of the
        views, early fusion).  None: chosen by ``criterion``.
    alpha : float > 0 or None
        λ, the least-squares regularisation (the noise variance ``λ/τ²`` on the targets'
        scale).  None: chosen by ``criterion``.
    eta : float > 0, default 1.0
        η: the prior covariance of the decision values is ``K_ϱ/(η τ²)``.  The decision
        values depend on λ and η only through ``λη``; η also sets the prior's scale, which
        the marginal likelihood needs, so it stays fixed.
    kernel : {"rbf", "linear"} or one per view
    gamma : float, "scale", None, or one per view
        RBF width in ``exp(-γ ||x - x'||²)``.  ``"scale"``: ``1 / (D_v · Var(X_v))`` as in
        scikit-learn (``1/D_v`` for standardised views).  None: chosen by ``criterion``:
        ``"loo"`` gives every such view ``m`` times its ``"scale"`` width with one common
        multiplier m; ``"evidence"`` chooses one γ per view.
    criterion : {"loo", "evidence"}, default "loo"
        How the hyper-parameters left None are chosen (no cross-validation either way).
        ``"loo"``: the exact leave-one-out cross-entropy of the calibrated probabilities
        (no refits: one Cholesky factor per evaluation serves every output) plus weak proper
        hyper-priors ``ϱ ~ Beta(1.1, 1.1)``, ``λη/(λη + τ) ~ Beta(1.5, 1.5)`` (the noise
        share of the targets' prior variance) and ``log m ~ N(0, 3²)``, which decide only
        where the cross-entropy is flat and keep the choice off the search range's edges
        (λ ∈ [1e-8, 1e3], m ∈ [1e-4, 1e2], logit ϱ ∈ [-10, 10]).
        ``"evidence"``: the restricted marginal likelihood of the Gaussian model (type-II
        maximum likelihood with flat priors); on ±1 targets it tends to interpolate
        (λ at its lower bound 1e-8), so its choices predict worse.
        :mod:`bayesmv.inference.evidence` has both.
    calibration : {"temperature", "likelihood"}, default "temperature"
        Where ``predict_proba`` comes from.  ``"temperature"``: each output's decision value
        F (``decision_function``'s, the paper's rule) gives ``p(+1) = sigmoid(s·F)``, combined
        over outputs as in :func:`class_log_probabilities`, with one slope s > 0 fitted to
        the exact leave-one-out decision values of the training rows against Platt's
        smoothed targets (temperature scaling on leave-one-out values: no held-out data,
        no refits).  ``"likelihood"``: the Gaussian model's own predictive, the likelihood of
        each class's ±1 target vector at ``h = g(x) + b`` normalised over the classes (two
        classes: ``sigmoid(2h τ²/λ)``); with a small λ it is nearly 0/1 (overconfident).
    decision_rule : {"add", "mean"}
        ``"add"`` (paper eq. 15): ``(1/η) Σ_k α_k [(1-ϱ) Σ_v K_v + ϱ Π_v K_v](x, x_k) + b``;
        ``"mean"`` (eq. 17): ``(1/η) Σ_k α_k (1/V) Σ_v K_v(x, x_k) + b``.
    inference : {"map", "laplace"}
        Both are exact (the posterior is Gaussian) and give the same decision values.
        ``"laplace"`` also keeps the posterior covariance: ``idata_`` holds exact joint draws
        of the training decision values and ``predict_proba`` averages each output's bit
        probability over the posterior (of eq. 15's ``τg + b`` with
        ``calibration="temperature"``, whose slope is then fitted to the leave-one-out
        posterior predictive; eq. 17's values are not a quantity of the model, so ``"mean"``
        with ``"laplace"`` needs ``calibration="likelihood"``).
        ``"map"`` gives plug-in probabilities.
    multiclass : {"ova", "moc"}
        One-vs-all outputs, or minimum output coding (⌈log₂ n_classes⌉ outputs).
    n_frequencies : int or None
        None: exact kernels (O(N³)).  An integer M: random Fourier features, M frequencies per
        RBF view and M for the product term (drawn jointly), so fit and predict grow linearly
        in N; the hyper-parameters are still chosen with exact kernels (see
        ``ml_max_samples``), the calibration slope on the random-feature fit itself.
    random_seed : int or None
        Seeds the random features, the selection subsample and the Laplace draws.
    draws : int, default 200
        Joint posterior draws stored in ``idata_`` by ``inference="laplace"`` (the
        estimators' common name for posterior draws).
    ml_max_samples : int, default 2000
        Either criterion costs O(N³) per evaluation; above this many training rows the
        hyper-parameters are chosen on a random subsample of this size (exact kernels).
    view_sizes : sequence of int or None
        Widths of the views when X is one concatenated array; one may be -1, the columns the
        others leave (:func:`bayesmv.data.check_views`).
    standardize : bool, default True
        Standardise each view on the training rows.
    lam, n_features, laplace_draws : float, int or None, default None
        Deprecated aliases of ``alpha``, ``n_frequencies`` and ``draws``; when given they take
        precedence, with a ``FutureWarning``.

    Attributes
    ----------
    rho_, alpha_, gamma_ : the hyper-parameters used (given or chosen); ``gamma_`` has one entry
        per view (None for linear views).
    slope_ : float or None
        The calibration slope s (None with ``calibration="likelihood"``).
    selection_ : dict
        How the hyper-parameters were chosen: ``criterion``, the free parameters, the
        criterion's value, evaluations, seconds, rows used, and the parameters that ended on
        the search range's edge (``at_bounds``; for the evidence typically ``alpha``: it
        still rises as α → 0 when the labels can be interpolated).  Models fitted before
        the rename of ``lam`` to ``alpha`` list ``lam``.  ``evidence_`` is the same dict.
    idata_ : arviz.InferenceData
        ``posterior``: the model's decision values ``f = g + b`` at the training points
        (one draw for MAP, exact draws for Laplace), ``b`` and the hyper-parameters;
        ``fit``: what prediction needs (dual weights and training views, or feature weights)
        and, with ``calibration="temperature"``, the exact leave-one-out decision values the
        slope was fitted to (``f_loo``; Laplace: also their variances ``f_loo_var``).
    builder_, model_ :
        The fitted model as a :class:`~bayesmv.ModelBuilder` (``make_builder`` with what the
        fit chose fixed) and its ``pm.Model`` on the training rows, for PyMC's own tools
        (:class:`~bayesmv.models.fitted_graph.FittedGraphMixin`).

    Notes
    -----
    ``predict`` is the most probable class under ``predict_proba``.  With
    ``calibration="temperature"`` that is the paper's rule for two classes and one-vs-all
    (the sign, or the largest one-vs-all value, of ``decision_function``), and for two classes
    ``predict_proba[:, 1]`` increases with ``decision_function`` (for ``inference="laplace"``
    its moderated value).  For output codes it is the class whose code bits are jointly most
    probable.  With ``calibration="likelihood"``
    the probabilities come from the Gaussian model's ``h``, which for ϱ < 1 weighs the kernel
    part against the bias differently from the paper's rules (eq. 15 uses b where the
    training system has τb), so ``predict`` can differ from the paper's rule near the
    boundary.  Missing views are not supported: a row with a missing view is an error.
    """

    def __init__(
        self,
        rho: float | None = None,
        alpha: float | None = None,
        eta: float = 1.0,
        kernel: str | Sequence[str] = "rbf",
        gamma: float | str | Sequence[float | str | None] | None = None,
        criterion: str = "loo",
        calibration: str = "temperature",
        decision_rule: str = "add",
        inference: str = "map",
        multiclass: str = "ova",
        n_frequencies: int | None = None,
        random_seed: int | None = None,
        draws: int = 200,
        ml_max_samples: int = 2000,
        view_sizes: tuple[int, ...] | None = None,
        standardize: bool = True,
        lam: float | None = None,
        n_features: int | None = None,
        laplace_draws: int | None = None,
    ) -> None:
        self.rho = rho
        self.alpha = alpha
        self.eta = eta
        self.kernel = kernel
        self.gamma = gamma
        self.criterion = criterion
        self.calibration = calibration
        self.decision_rule = decision_rule
        self.inference = inference
        self.multiclass = multiclass
        self.n_frequencies = n_frequencies
        self.random_seed = random_seed
        self.draws = draws
        self.ml_max_samples = ml_max_samples
        self.view_sizes = view_sizes
        self.standardize = standardize
        self.lam = lam
        self.n_features = n_features
        self.laplace_draws = laplace_draws

    RENAMED = {"alpha": "lam", "n_frequencies": "n_features", "draws": "laplace_draws"}

    @property
    def lam_(self) -> float:
        """Deprecated alias of ``alpha_`` (read-only)."""
        warnings.warn("RhoTMVRKM.lam_ is deprecated; use alpha_, the same value under its new "
                      "name", FutureWarning, stacklevel=2)
        return self.alpha_

    # --------------------------------------------------------------- checks
    def _validate_params(self) -> None:
        self._warn_renamed(stacklevel=5)
        if self.rho is not None and (isinstance(self.rho, bool)
                                     or not isinstance(self.rho, numbers.Real)
                                     or not 0.0 <= self.rho <= 1.0):
            raise ValueError(f"rho must lie in [0, 1] or be None, got {self.rho!r}")
        check_positive(self._param_name("alpha"), self._param("alpha"), allow_none=True)
        check_positive("eta", self.eta)
        for name, value, options in (("criterion", self.criterion, ("loo", "evidence")),
                                     ("calibration", self.calibration,
                                      ("temperature", "likelihood")),
                                     ("decision_rule", self.decision_rule, ("add", "mean")),
                                     ("inference", self.inference, ("map", "laplace")),
                                     ("multiclass", self.multiclass, ("ova", "moc"))):
            if value not in options:
                raise ValueError(f"{name} must be one of {options}, got {value!r}")
        if (self.inference == "laplace" and self.decision_rule == "mean"
                and self.calibration == "temperature"):
            raise ValueError("inference='laplace' averages the calibrated probabilities over "
                             "the posterior of the decision values, and eq. 17's values "
                             "(decision_rule='mean') are not a quantity of the model: use "
                             "decision_rule='add', inference='map' or "
                             "calibration='likelihood'")
        if self._param("n_frequencies") is not None:
            check_positive(self._param_name("n_frequencies"), self._param("n_frequencies"),
                           integer=True)
        check_positive(self._param_name("draws"), self._param("draws"), integer=True)
        check_positive("ml_max_samples", self.ml_max_samples, integer=True)
        if self.ml_max_samples < 10:
            raise ValueError(f"ml_max_samples must be at least 10, got {self.ml_max_samples}")

    def _per_view(self, n_views: int) -> tuple[list[str], list[Any]]:
        kernels = [self.kernel] * n_views if isinstance(self.kernel, str) else list(self.kernel)
        if len(kernels) != n_views:
            raise ValueError(f"kernel has {len(kernels)} entries but X has {n_views} views")
        for v, k in enumerate(kernels):
            if k not in KERNELS:
                raise ValueError(f"kernel of view {v} must be one of {KERNELS}, got {k!r}")
        gammas = (list(self.gamma) if isinstance(self.gamma, list | tuple | np.ndarray)
                  else [self.gamma] * n_views)
        if len(gammas) != n_views:
            raise ValueError(f"gamma has {len(gammas)} entries but X has {n_views} views")
        for v, g in enumerate(gammas):
            if g is None or g == "scale":
                continue
            if (isinstance(g, bool) or not isinstance(g, numbers.Real) or not np.isfinite(g)
                    or g <= 0):
                raise ValueError(f"gamma of view {v} must be a positive number, 'scale' or "
                                 f"None, got {g!r}")
        return kernels, gammas

    @staticmethod
    def _reject_missing(data: MultiViewData, argument: str) -> None:
        if not data.has_missing:
            return
        v = int(np.flatnonzero(~data.observed.all(axis=0))[0])
        rows = np.flatnonzero(~data.observed[:, v])[:10].tolist()
        raise ValueError(
            f"{argument}: view {v} ({data.view_names[v]!r}) is missing (all-NaN row) for rows "
            f"{rows}; RhoTMVRKM needs every view of every sample: drop or impute those rows, "
            "or use M3LAK or MVLSVM, which handle missing views")

    # ------------------------------------------------------------- builder
    def make_builder(self, kernels: Sequence[str], gammas: Sequence[float | None],
                     rho: float | None = None, alpha: float | None = None, *,
                     decision_rule: str = "model", link_slope: float | None = None
                     ) -> ModelBuilder:
        """The model graph: views → per-view kernels → ϱ-tensor combiner → least squares.

        ``None`` for ``rho``, ``alpha`` or a gamma leaves that hyper-parameter free (flat prior
        on its unconstrained scale), so the graph's density is the marginal likelihood.
        ``decision_rule`` (the combiner's: ``"model"``, ``g + b``, or ``"add"``, the paper's
        ``τg + b``) and ``link_slope`` (a fitted model's ``slope_``) make the graph's
        probabilities ``predict_proba``'s: with ``calibration="temperature"``, pass
        ``decision_rule="add"`` and ``link_slope=slope_``.
        """
        if self._param("n_frequencies") is None:
            feature_map = ViewKernels(kernels, gammas)
        else:
            feature_map = ViewRandomFeatures(self._param("n_frequencies"), kernels, gammas,
                                             random_seed=self.random_seed)
        sigma = None if alpha is None else float(np.sqrt(alpha))
        return ModelBuilder(Identity(), feature_map,
                            RhoTensorCombiner(rho, self.eta, decision_rule),
                            GaussianLikelihood(sigma=sigma,
                                               variance_range=tuple(np.exp(LOG_LAM_RANGE)),
                                               link_slope=link_slope,
                                               multiclass=("moc" if self.multiclass == "moc"
                                                           else "one_hot")))

    def _fitted_builder(self) -> ModelBuilder:
        # the graph's rule: the paper's τg + b with the temperature slope, or the model's own
        # g + b; eq. 17's rule (decision_rule="mean") is a read-out the graph does not hold
        paper = self.calibration == "temperature" and self.decision_rule == "add"
        return self.make_builder(self.kernels_, self.gamma_, self.rho_, self.alpha_,
                                 decision_rule="add" if paper else "model",
                                 link_slope=self.slope_ if paper else None)

    def build_model(self, X, y) -> BuiltModel:
        """Validate and standardise (X, y) and build the ``pm.Model`` (nothing is fitted).

        Hyper-parameters given to the estimator are fixed in the graph; those left None are
        free variables, so ``pm.find_MAP`` or ``pm.sample`` on it work on the marginal model.
        """
        prepared = self._prepare_fit(X, y)
        built = self.make_builder(prepared["kernels"], prepared["gammas"], self.rho,
                                  self._param("alpha")).build(prepared["data"], prepared["Y"])
        return built

    # ------------------------------------------------------------------ fit
    def _prepare_fit(self, X, y) -> dict[str, Any]:
        self._validate_params()
        data, classes, y_index = self._validate_training_data(X, y)
        self._reject_missing(data, "X")
        kernels, gammas = self._per_view(data.n_views)
        standardizer = ViewStandardizer().fit(data) if self.standardize else None
        if standardizer is not None:
            data = standardizer.transform(data)
        gammas = [sc if g == "scale" else g
                  for g, sc in zip(gammas, reference_widths(data.views), strict=True)]
        gammas = [None if k == "linear" else g for k, g in zip(kernels, gammas, strict=True)]
        codes = output_codes(len(classes), self.multiclass)
        return {"data": data, "Y": codes[y_index], "y_index": y_index, "classes": classes,
                "codes": codes, "kernels": kernels, "gammas": gammas,
                "standardizer": standardizer}

    def _choose_hyperparameters(self, prepared: dict[str, Any]) -> tuple[list, float, float,
                                                                          dict]:
        return choose_process_hyperparameters(
            prepared["data"].views, prepared["kernels"], prepared["gammas"], prepared["Y"],
            prepared["y_index"], prepared["codes"], eta=self.eta, alpha=self._param("alpha"),
            rho=self.rho, criterion=self.criterion, rule=self.decision_rule,
            max_samples=self.ml_max_samples, seed=self._seed())

    def _seed(self) -> int:
        return 0 if self.random_seed is None else int(self.random_seed)

    def _fit_is_random(self) -> bool:
        # exact kernels draw nothing unseeded (the subsample and Laplace draws use seed 0)
        return self._param("n_frequencies") is not None

    def fit(self, X, y) -> RhoTMVRKM:
        """Fit on training views ``X`` and labels ``y``.

        Parameters
        ----------
        X : list of array-like (one (n_samples, D_v) array per view), or one 2-D array with
            ``view_sizes``.
        y : array-like of shape (n_samples,)

        Returns
        -------
        self
        """
        start = time.perf_counter()
        prepared = self._prepare_fit(X, y)
        data, Y, codes = prepared["data"], prepared["Y"], prepared["codes"]
        gammas, alpha, rho, selection = self._choose_hyperparameters(prepared)
        tau = tau_of(rho, data.n_views)
        rng = np.random.default_rng(np.random.SeedSequence([self._seed(), 2]))
        fitted = {"rho": rho, "alpha": alpha, "gammas": gammas, "kernels": prepared["kernels"],
                  "tau": tau}
        if self._param("n_frequencies") is None:
            fit_group, f_train, b_train = self._fit_exact(data.views, Y, fitted, rng)
        else:
            fit_group, f_train, b_train = self._fit_features(data.views, Y, fitted, rng)
        slope = None
        if self.calibration == "temperature":
            F_loo, var_loo = fitted["loo"]
            usable = np.all(np.isfinite(F_loo), axis=1)
            if var_loo is not None:
                usable &= np.isfinite(var_loo)
                fit_group["f_loo_var"] = ("sample", var_loo)
            fit_group["f_loo"] = (("sample", "task"), F_loo)
            var = None if var_loo is None else var_loo[usable]
            targets = platt_targets(prepared["y_index"], len(prepared["classes"]))[usable]
            slope, _ = fit_slope(
                lambda t: class_log_probabilities(F_loo[usable], var, t, codes), targets)
        idata = self._make_idata(f_train, b_train, fitted, fit_group, data, Y)
        idata.posterior.attrs["fit_seconds"] = time.perf_counter() - start
        idata.posterior.attrs["selection_seconds"] = float(selection.get("seconds", 0.0))
        # fitted state only now, in one step: a failure above leaves a previous fit untouched
        self._commit(classes_=prepared["classes"], codes_=codes, layout_=data.layout,
                     standardizer_=prepared["standardizer"], rho_=rho, alpha_=alpha,
                     gamma_=gammas, kernels_=prepared["kernels"], slope_=slope,
                     selection_=selection, idata_=idata,
                     n_features_in_=int(sum(data.view_sizes)),
                     _cache={"posterior": fitted["posterior"]} if "posterior" in fitted else {},
                     _graph_inputs=(data, Y), _model=None)
        return self

    @property
    def evidence_(self) -> dict:
        """The same dict as ``selection_`` (its name before ``criterion`` existed)."""
        return self.selection_

    def _fit_exact(self, views, Y, fitted, rng):
        rho, alpha, tau = fitted["rho"], fitted["alpha"], fitted["tau"]
        grams = ViewKernels(fitted["kernels"], fitted["gammas"]).grams(views, fitted["gammas"])
        K = combine_kernels(grams, rho) / (self.eta * tau**2)
        noise = alpha / tau**2
        post = KernelPosterior.fit(K, Y, noise, what="the combined kernel matrix plus λ")
        fitted["posterior"] = post  # predictions reuse this factorisation
        if self.calibration == "temperature":
            G = None if self.decision_rule == "add" else (
                np.sum(grams, axis=0) / (len(grams) * self.eta * tau))
            fitted["loo"] = self._loo(loo_pieces(post, Y, noise, G, tau), noise, tau)
        if self.inference == "laplace":
            g, b = post.draws(K, Y, noise, self._param("draws"), rng)
            f_train = g + b[:, None, :]
        else:
            f_train, b = (Y - noise * post.weights)[None], post.bias[None]
        group = {"weights": (("sample", "task"), post.weights), "bias": ("task", post.bias)}
        for v, X in enumerate(views):
            group[f"X_train_{v}"] = (("sample", f"feature_{v}"), X)
        return group, f_train, b

    def _loo(self, pieces: dict[str, Any], noise: float, tau: float):
        """Leave-one-out decision values of the rule at the training rows and (Laplace)
        their posterior variances; NaN where rounding left ``P_ii ≤ 0`` (a row the fit
        interpolates, such as a duplicate at a tiny λ)."""
        P_diag, u = pieces["P_diag"], pieces["u"]
        bad = ~(P_diag > 0)
        safe = np.where(bad, 1.0, P_diag)
        F_loo = loo_decision_values(pieces["F"], pieces["W"], safe, pieces["GP_diag"], u)
        F_loo[bad] = np.nan
        if self.inference != "laplace":
            return F_loo, None
        var = loo_variance(safe, u, pieces["ones_precision"], noise, tau)
        var[bad] = np.nan
        return F_loo, var

    def _fit_features(self, views, Y, fitted, rng):
        rho, alpha, tau = fitted["rho"], fitted["alpha"], fitted["tau"]
        rff = ViewRandomFeatures(self._param("n_frequencies"), fitted["kernels"], fitted["gammas"],
                                 random_seed=self.random_seed)
        base = rff.draw_base([X.shape[1] for X in views])
        per_view, joint = rff.blocks(views, base)
        Psi = feature_design(per_view, joint, rho, self.eta)
        noise = alpha / tau**2
        post = FeaturePosterior.fit(Psi, Y, noise)
        f_mean = Psi @ post.theta + post.bias
        dual = tau * (Y - f_mean) / alpha  # the paper's dual variables y ⊙ h
        if self.calibration == "temperature":
            # the same leave-one-out pieces in the primal: P = (I - H)/σ² with the hat matrix
            # H = Ψ̃ A⁻¹ Ψ̃ᵀ / σ² (Ψ̃ = [Ψ, 1]), u = the bias row of A⁻¹Ψ̃ᵀ/σ², 1ᵀC⁻¹1 = L_bb²
            Psi1 = np.concatenate([Psi, np.ones((len(Psi), 1))], axis=1)
            Z = linalg.solve_triangular(post.chol, Psi1.T, lower=True)
            L_bb = post.chol[-1, -1]
            P_diag = (1.0 - np.sum(Z**2, axis=0) / noise) / noise
            u = Z[-1] / (L_bb * noise)
            W = (Y - f_mean) / noise
            if self.decision_rule == "add":
                F, GP_diag = own_kernel_rule(Y, post.bias, W, P_diag, u, noise, tau)
            else:  # eq. 17's kernel c·R Rᵀ on the views' own blocks
                R, c = np.concatenate(per_view, axis=1), 1.0 / (len(views) * self.eta * tau)
                PR = (R - Psi1 @ linalg.cho_solve((post.chol, True), Psi1.T @ R) / noise) / noise
                F, GP_diag = c * R @ (R.T @ W) + post.bias, c * np.einsum("ij,ij->i", R, PR)
            fitted["loo"] = self._loo({"F": F, "W": W, "P_diag": P_diag, "GP_diag": GP_diag,
                                       "u": u, "ones_precision": L_bb**2}, noise, tau)
        group = {"coef": (("weight1", "task"), post.coef), "bias": ("task", post.bias)}
        for v, (B, E) in enumerate(zip(per_view, base, strict=True)):
            group[f"u_{v}"] = ((f"block_{v}", "task"), B.T @ dual)
            group[f"rff_base_{v}"] = (("frequency", f"feature_{v}"), E)
        group["u_product"] = (("block_product", "task"), joint.T @ dual)
        if self.inference == "laplace":
            W = post.draws(self._param("draws"), rng)
            f_train = np.einsum("np,spt->snt", Psi, W[:, :-1]) + W[:, None, -1]
            b = W[:, -1]
            group["chol"] = (("weight1", "weight1_"), post.chol)
        else:
            f_train, b = f_mean[None], post.bias[None]
        return group, f_train, b

    def _make_idata(self, f_train, b_train, fitted, fit_group, data, Y):
        import arviz as az

        n_draws = f_train.shape[0]
        gamma = np.array([np.nan if g is None else g for g in fitted["gammas"]])
        posterior = {
            "f": f_train[None], "b": b_train[None],
            "rho": np.full((1, n_draws), fitted["rho"]),
            "alpha": np.full((1, n_draws), fitted["alpha"]),
            "gamma": np.broadcast_to(gamma, (1, n_draws, len(gamma))).copy(),
        }
        idata = az.from_dict(posterior=posterior,
                             dims={"f": ["sample", "task"], "b": ["task"], "gamma": ["view"]},
                             coords={"view": list(data.view_names)})
        idata.add_groups(fit=xr.Dataset(fit_group),
                         observed_data=xr.Dataset({"y_tasks": (("sample", "task"), Y)}))
        idata.posterior.attrs["inference"] = self.inference
        return idata

    # ----------------------------------------------------------- persistence
    def _extra_state(self) -> dict[str, Any]:
        # JSON writes a float's shortest repr, which reads back bit-identically
        return {"rho": self.rho_, "alpha": self.alpha_, "gamma": self.gamma_,
                "kernels": self.kernels_, "codes": self.codes_.tolist(),
                "slope": self.slope_, "selection": self.selection_}

    def _set_extra_state(self, state: dict[str, Any]) -> None:
        self.rho_ = float(state["rho"])
        # files saved before the rename of lam to alpha hold "lam"
        self.alpha_ = float(state["alpha"] if "alpha" in state else state["lam"])
        self.gamma_, self.kernels_ = state["gamma"], state["kernels"]
        self.codes_ = np.asarray(state["codes"], dtype=float)
        self.slope_ = None if state["slope"] is None else float(state["slope"])
        self.selection_ = state["selection"]
        self._cache = {}

    # ----------------------------------------------------------- prediction
    @property
    def tau_(self) -> float:
        return tau_of(self.rho_, len(self.kernels_))

    def _test_views(self, X) -> list[np.ndarray]:
        data = self._prepare(X)
        self._reject_missing(data, "X")
        return list(data.views)

    def _train_views(self) -> list[np.ndarray]:
        fit = self.idata_.fit
        return [fit[f"X_train_{v}"].values for v in range(len(self.kernels_))]

    def _rff(self) -> ViewRandomFeatures:
        fit = self.idata_.fit
        base = [fit[f"rff_base_{v}"].values for v in range(len(self.kernels_))]
        return ViewRandomFeatures(self._param("n_frequencies"), self.kernels_, self.gamma_,
                                  base=base)

    def _paper_rule(self, views) -> np.ndarray:
        """The paper's decision values (eq. 15 or 17), one column per task."""
        fit, rho, V = self.idata_.fit, self.rho_, len(self.kernels_)
        bias = fit["bias"].values
        if self._param("n_frequencies") is None:
            dual = fit["weights"].values / self.tau_  # the paper's y ⊙ h
            grams = ViewKernels(self.kernels_, self.gamma_).grams(views, self.gamma_,
                                                                  self._train_views())
            K = (combine_kernels(grams, rho) if self.decision_rule == "add"
                 else np.sum(grams, axis=0) / V)
            return K @ dual / self.eta + bias
        per_view, joint = self._rff().blocks(views)
        u = [fit[f"u_{v}"].values for v in range(V)]
        sums = sum(B @ uv for B, uv in zip(per_view, u, strict=True))
        if self.decision_rule == "mean":
            return sums / (self.eta * V) + bias
        return mix_sum_and_product(sums, joint @ fit["u_product"].values, rho) / self.eta + bias

    def _kernel_posterior(self) -> KernelPosterior:
        """The training system's factorisation (kept from ``fit``; recomputed once after
        loading)."""
        if "posterior" not in self._cache:
            views = self._train_views()
            grams = ViewKernels(self.kernels_, self.gamma_).grams(views, self.gamma_)
            K = combine_kernels(grams, self.rho_) / (self.eta * self.tau_**2)
            Y = self.idata_.observed_data["y_tasks"].values
            self._cache["posterior"] = KernelPosterior.fit(K, Y, self.alpha_ / self.tau_**2)
        return self._cache["posterior"]

    def _model_predictive(self, views, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean of ``h = g(x) + b`` and variance of ``scale·g(x) + b`` (variance 0
        for a MAP fit)."""
        kernel_scale = 1.0 / (self.eta * self.tau_**2)
        laplace = self.inference == "laplace"
        if self._param("n_frequencies") is None:
            post = self._kernel_posterior()
            fm = ViewKernels(self.kernels_, self.gamma_)
            Kx = combine_kernels(fm.grams(views, self.gamma_, self._train_views()),
                                 self.rho_) * kernel_scale
            mean = post.mean(Kx) + post.bias
            if not laplace:
                return mean, np.zeros(len(mean))
            diag = [np.ones(len(X)) if k == "rbf" else np.sum(X**2, axis=1)
                    for k, X in zip(self.kernels_, views, strict=True)]
            k_diag = combine_kernels(diag, self.rho_) * kernel_scale  # the ϱ rule, elementwise
            return mean, post.variance(Kx, k_diag, scale)
        per_view, joint = self._rff().blocks(views)
        Psi = feature_design(per_view, joint, self.rho_, self.eta)
        coef = self.idata_.fit["coef"].values
        mean = Psi @ coef[:-1] + coef[-1]
        if not laplace:
            return mean, np.zeros(len(mean))
        post = FeaturePosterior(chol=self.idata_.fit["chol"].values, coef=coef)
        return mean, post.variance(Psi, scale)

    def _probability_inputs(self, views) -> tuple[np.ndarray, np.ndarray, float]:
        """What ``predict_proba`` turns into probabilities: the decision values' posterior
        mean (n_samples, n_outputs) and variance (n_samples,), and the slope s in
        ``sigmoid(s·F)``.  ``calibration="temperature"``: the paper's rule (eq. 15's
        ``τg + b`` has the posterior variance) and the fitted slope; ``"likelihood"``: the
        model's ``h = g + b`` and ``2τ²/λ``."""
        if self.calibration == "likelihood":
            return *self._model_predictive(views), self._slope()
        mean = self._paper_rule(views)
        if self.inference != "laplace":
            return mean, np.zeros(len(mean)), self._slope()
        return mean, self._model_predictive(views, scale=self.tau_)[1], self._slope()

    def _slope(self) -> float:
        """s in ``sigmoid(s·F)``: the fitted slope, or the Gaussian likelihood's ``2τ²/λ``."""
        return self.slope_ if self.slope_ is not None else 2.0 * self.tau_**2 / self.alpha_

    def decision_distribution(self, X) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation of the decision values ``predict_proba`` is
        built on (the paper's rule with ``calibration="temperature"``, the model's
        ``h = g(x) + b`` with ``"likelihood"``).

        Returns
        -------
        mean, std : ndarray of shape (n_samples, n_outputs)
            The std is that of the exact Gaussian posterior (``inference="laplace"``; the
            same for every output) or 0 (``"map"``).
        """
        self._check_fitted()
        mean, var, _ = self._probability_inputs(self._test_views(X))
        std = np.sqrt(np.maximum(var, 0.0))[:, None]
        return mean, np.broadcast_to(std, mean.shape).copy()

    def decision_function(self, X) -> np.ndarray:
        """Decision values: the paper's (``decision_rule``) for ``inference="map"``; for
        ``"laplace"`` the moderated value of each output, the ``F`` whose
        ``sigmoid(s·F)`` is the output's posterior-averaged bit probability.

        The averaged probability is not a function of the posterior mean alone (the
        posterior variance differs from row to row), so ranking rows by that mean could
        disagree with ``predict_proba``.  The moderated value (MacKay 1992) is
        ``(log p(+1) - log p(-1))/s`` of the same averaged bits ``predict_proba`` combines,
        so for two classes it ranks rows as ``predict_proba[:, 1]`` does, and its sign (the
        largest one-vs-all value; for output codes, each bit) gives ``predict``'s class.  It
        is on the scale of the decision values ``predict_proba`` is built on (with
        ``calibration="likelihood"``, the model's ``h``).  The posterior mean is
        :meth:`decision_distribution`.

        Shape (n_samples,) for two classes (positive favours ``classes_[1]``); otherwise
        (n_samples, n_outputs): one column per class ("ova") or per code bit ("moc").
        """
        self._check_fitted()
        views = self._test_views(X)
        if self.inference != "laplace":
            f = self._paper_rule(views)
        else:
            mean, var, slope = self._probability_inputs(views)
            log_pos, log_neg = output_log_bits(mean, var, slope)
            f = (log_pos - log_neg) / slope
        return f[:, 0] if f.shape[1] == 1 else f

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities (``calibration``; see the class Notes): shape
        (n_samples, n_classes), columns in the order of ``classes_``."""
        self._check_fitted()
        mean, var, slope = self._probability_inputs(self._test_views(X))
        return np.exp(class_log_probabilities(mean, var, slope, self.codes_))

    # ------------------------------------------------------------ diagnostics
    def _decision_draws(self, X) -> np.ndarray:
        """Draws of the decision values ``predict_proba`` is built on (the paper's rule with
        ``calibration="temperature"``, the model's ``h = g(x) + b`` with ``"likelihood"``):
        (n_draws, n_samples, n_tasks).

        ``inference="laplace"``: ``draws`` per-point marginal draws from the exact
        Gaussian posterior ``N(mean_i, var_i)`` of each row (independent across rows, so
        they are not joint draws of the function); ``"map"``: the posterior mean as one
        draw.
        """
        self._check_fitted()
        mean, var, _ = self._probability_inputs(self._test_views(X))
        if self.inference != "laplace":
            return mean[None]
        rng = np.random.default_rng(np.random.SeedSequence([self._seed(), 3]))
        z = rng.standard_normal((self._param("draws"),) + mean.shape)
        return mean + np.sqrt(np.maximum(var, 0.0))[:, None] * z

    def _class_probability_draws(self, X) -> np.ndarray:
        """Per draw of the decision values (:meth:`_decision_draws`), the probabilities
        ``predict_proba`` gives a point value, ``sigmoid(s·F)`` combined over outputs:
        (n_draws, n_samples, n_classes).  Their mean approximates ``predict_proba``, which
        averages each output's bit probability over its posterior exactly (for two classes
        that is the class probability; with more, the classes combine the averaged bits);
        for a MAP fit it is ``predict_proba`` itself."""
        return np.exp(class_log_probabilities(self._decision_draws(X), None, self._slope(),
                                              self.codes_))

    def view_relevance(self) -> pd.DataFrame:
        """Per view: its kernel, width γ and ``γ·D_v``, and the weight ϱ of the tensor term.

        On standardised views ``γ·D_v = 1`` is scikit-learn's ``gamma="scale"``; much smaller
        values make the view's kernel nearly constant (the view hardly matters), much larger
        ones make it a near-identity (the view only memorises).  ϱ is shared by all views:
        each view's kernel enters the sum with weight ``1 - ϱ`` and the product of all
        views with weight ϱ.
        """
        self._check_fitted()
        gamma = np.array([np.nan if g is None else float(g) for g in self.gamma_])
        sizes = np.asarray(self.layout_.view_sizes, dtype=float)
        frame = pd.DataFrame({"kernel": list(self.kernels_), "gamma": gamma,
                              "gamma_x_dim": gamma * sizes,
                              "sum_weight": np.full(len(sizes), 1.0 - self.rho_),
                              "rho": np.full(len(sizes), self.rho_)},
                             index=pd.Index(self.layout_.view_names, name="view"))
        frame.attrs.update({
            "title": f"RhoTMVRKM: rho = {self.rho_:.3g} (0: sum of the view kernels, 1: their "
                     f"tensor product), lambda = {self.alpha_:.3g}",
            "bars": ["gamma", "gamma_x_dim"],
            "description": {
                "gamma": "RBF width in exp(-gamma ||x - x'||^2) (NaN: linear kernel)",
                "gamma_x_dim": "gamma times the view's width (1 = sklearn's 'scale' on "
                               "standardised views)",
                "sum_weight": "weight 1 - rho of the view's own kernel in the sum",
                "rho": "weight of the product of all views' kernels",
            }})
        return frame
