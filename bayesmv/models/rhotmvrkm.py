"""ϱTMV-RKM (Houthuys & Suykens): tensor-based restricted kernel machines, solved exactly.

The paper's linear system (eq. 12) is τ times the posterior-mean equations of a Gaussian
process on the ±1 targets (:mod:`bayesmv.components.tensor`), so MAP is the
posterior mean and the Laplace approximation is exact.  The fit is the closed form built from
the graph's pieces (one Cholesky factor shared by every one-vs-rest or output-code task); the
``pm.Model`` of the same graph is available from :meth:`RhoTMVRKM.build_model`, and its
density is what chooses ϱ, λ and the kernel widths (type-II maximum likelihood).
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
from scipy.special import log_expit

from bayesmv.builder import BuiltModel, ModelBuilder
from bayesmv.components.base import Identity
from bayesmv.components.kernels import KERNELS, ViewKernels, ViewRandomFeatures
from bayesmv.components.likelihoods import (
    GaussianLikelihood,
    class_probabilities,
    log_expected_sigmoid,
)
from bayesmv.components.tensor import (
    RhoTensorCombiner,
    combine_kernels,
    feature_design,
    tau_of,
)
from bayesmv.data import MultiViewData, ViewStandardizer, label_tasks
from bayesmv.inference.conjugate import FeaturePosterior, KernelPosterior
from bayesmv.inference.evidence import LOG_LAM_RANGE, RhoTensorEvidence
from bayesmv.models.base import MultiViewClassifier, register
from bayesmv.params import check_positive


def output_codes(n_classes: int, multiclass: str) -> np.ndarray:
    """±1 code matrix (n_classes, n_tasks): one-vs-all, or minimum output coding (binary
    digits of the class index, ⌈log₂ n_classes⌉ outputs)."""
    if n_classes == 2:
        return np.array([[-1.0], [1.0]])
    if multiclass == "ova":
        return label_tasks(np.arange(n_classes), n_classes)
    n_bits = int(np.ceil(np.log2(n_classes)))
    bits = (np.arange(n_classes)[:, None] >> np.arange(n_bits)[None, :]) & 1
    return 2.0 * bits - 1.0


@register
class RhoTMVRKM(MultiViewClassifier):
    """ϱ-tensor multi-view restricted kernel machine (Houthuys & Suykens), exact and Bayesian.

    Parameters
    ----------
    rho : float in [0, 1] or None
        ϱ: 0 is MV-RKM (per-view weights, late fusion), 1 is TMV-RKM (tensor product of the
        views, early fusion).  None: chosen by the marginal likelihood.
    lam : float > 0 or None
        λ, the least-squares regularisation (the noise variance ``λ/τ²`` on the targets'
        scale).  None: chosen by the marginal likelihood.
    eta : float > 0, default 1.0
        η: the prior covariance of the decision values is ``K_ϱ/(η τ²)``.  The decision
        values depend on λ and η only through ``λη``; η also sets the prior's scale, which
        the marginal likelihood needs, so it stays fixed.
    kernel : {"rbf", "linear"} or one per view
    gamma : float, "scale", None, or one per view
        RBF width in ``exp(-γ ||x - x'||²)``.  ``"scale"``: ``1 / (D_v · Var(X_v))`` as in
        scikit-learn (``1/D_v`` for standardised views).  None: chosen by the marginal
        likelihood.
    decision_rule : {"add", "mean"}
        ``"add"`` (paper eq. 15): ``(1/η) Σ_k α_k [(1-ϱ) Σ_v K_v + ϱ Π_v K_v](x, x_k) + b``;
        ``"mean"`` (eq. 17): ``(1/η) Σ_k α_k (1/V) Σ_v K_v(x, x_k) + b``.
    inference : {"map", "laplace"}
        Both are exact (the posterior is Gaussian) and give the same decision values.
        ``"laplace"`` also keeps the posterior covariance: ``idata_`` holds exact joint draws
        of the training decision values and ``predict_proba`` averages over the posterior.
        ``"map"`` gives plug-in probabilities.
    multiclass : {"ova", "moc"}
        One-vs-all outputs, or minimum output coding (⌈log₂ n_classes⌉ outputs).
    n_features : int or None
        None: exact kernels (O(N³)).  An integer M: random Fourier features, M frequencies per
        RBF view and M for the product term (drawn jointly), so fit and predict grow linearly
        in N.
    random_seed : int or None
        Seeds the random features, the marginal-likelihood subsample and the Laplace draws.
    laplace_draws : int, default 200
        Joint posterior draws stored in ``idata_`` by ``inference="laplace"``.
    ml_max_samples : int, default 2000
        The marginal likelihood costs O(N³) per evaluation; above this many training rows
        the hyper-parameters are chosen on a random subsample of this size (exact kernels).
    view_sizes : sequence of int or None
        Widths of the views when X is one concatenated array.
    standardize : bool, default True
        Standardise each view on the training rows.

    Attributes
    ----------
    rho_, lam_, gamma_ : the hyper-parameters used (given or chosen); ``gamma_`` has one entry
        per view (None for linear views).
    evidence_ : dict
        The marginal-likelihood search: free parameters, -log evidence, iterations, seconds,
        rows used, and the parameters that ended on the search range's edge (``at_bounds``:
        the evidence still rises beyond it, e.g. λ → 0 when the labels can be interpolated).
    idata_ : arviz.InferenceData
        ``posterior``: the model's decision values ``f = g + b`` at the training points
        (one draw for MAP, exact draws for Laplace), ``b`` and the hyper-parameters;
        ``fit``: what prediction needs (dual weights and training views, or feature weights).

    Notes
    -----
    ``predict`` follows the paper's decision rule (sign, largest one-vs-all value, or nearest
    output code).  ``predict_proba`` is the Gaussian model's posterior predictive: the
    likelihood normalised over the two targets, ``p(y=+1 | h) = sigmoid(2h τ²/λ)`` with
    ``h = g(x) + b``, averaged over the posterior of h.  For ϱ < 1 the paper's rules weigh the
    kernel part by τ against the bias (eq. 15 uses b where the training system has τb), so
    the argmax of ``predict_proba`` can differ from ``predict`` near the boundary.
    Missing views are not supported: a row with a missing view is an error.
    """

    def __init__(
        self,
        rho: float | None = None,
        lam: float | None = None,
        eta: float = 1.0,
        kernel: str | Sequence[str] = "rbf",
        gamma: float | str | Sequence[float | str | None] | None = None,
        decision_rule: str = "add",
        inference: str = "map",
        multiclass: str = "ova",
        n_features: int | None = None,
        random_seed: int | None = None,
        laplace_draws: int = 200,
        ml_max_samples: int = 2000,
        view_sizes: tuple[int, ...] | None = None,
        standardize: bool = True,
    ) -> None:
        self.rho = rho
        self.lam = lam
        self.eta = eta
        self.kernel = kernel
        self.gamma = gamma
        self.decision_rule = decision_rule
        self.inference = inference
        self.multiclass = multiclass
        self.n_features = n_features
        self.random_seed = random_seed
        self.laplace_draws = laplace_draws
        self.ml_max_samples = ml_max_samples
        self.view_sizes = view_sizes
        self.standardize = standardize

    # --------------------------------------------------------------- checks
    def _validate_params(self) -> None:
        if self.rho is not None and (isinstance(self.rho, bool)
                                     or not isinstance(self.rho, numbers.Real)
                                     or not 0.0 <= self.rho <= 1.0):
            raise ValueError(f"rho must lie in [0, 1] or be None, got {self.rho!r}")
        check_positive("lam", self.lam, allow_none=True)
        check_positive("eta", self.eta)
        for name, value, options in (("decision_rule", self.decision_rule, ("add", "mean")),
                                     ("inference", self.inference, ("map", "laplace")),
                                     ("multiclass", self.multiclass, ("ova", "moc"))):
            if value not in options:
                raise ValueError(f"{name} must be one of {options}, got {value!r}")
        for name in ("laplace_draws", "ml_max_samples") + (
                ("n_features",) if self.n_features is not None else ()):
            check_positive(name, getattr(self, name), integer=True)
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
                     rho: float | None = None, lam: float | None = None) -> ModelBuilder:
        """The model graph: views → per-view kernels → ϱ-tensor combiner → least squares.

        ``None`` for ``rho``, ``lam`` or a gamma leaves that hyper-parameter free (flat prior
        on its unconstrained scale), so the graph's density is the marginal likelihood.
        """
        if self.n_features is None:
            feature_map = ViewKernels(kernels, gammas)
        else:
            feature_map = ViewRandomFeatures(self.n_features, kernels, gammas,
                                             random_state=self.random_seed)
        sigma = None if lam is None else float(np.sqrt(lam))
        return ModelBuilder(Identity(), feature_map, RhoTensorCombiner(rho, self.eta),
                            GaussianLikelihood(sigma=sigma,
                                               variance_range=tuple(np.exp(LOG_LAM_RANGE))))

    def build_model(self, X, y) -> BuiltModel:
        """Validate and standardise (X, y) and build the ``pm.Model`` (nothing is fitted).

        Hyper-parameters given to the estimator are fixed in the graph; those left None are
        free variables, so ``pm.find_MAP`` or ``pm.sample`` on it work on the marginal model.
        """
        data, Y, _, _, kernels, gammas, _ = self._prepare_fit(X, y)
        built = self.make_builder(kernels, gammas, self.rho, self.lam).build(data, Y)
        return built

    # ------------------------------------------------------------------ fit
    def _prepare_fit(self, X, y):
        self._validate_params()
        data, classes, y_index = self._validate_training_data(X, y)
        self._reject_missing(data, "X")
        kernels, gammas = self._per_view(data.n_views)
        standardizer = ViewStandardizer().fit(data) if self.standardize else None
        if standardizer is not None:
            data = standardizer.transform(data)
        gammas = [1.0 / (X.shape[1] * max(float(X.var()), 1e-300)) if g == "scale" else g
                  for g, X in zip(gammas, data.views, strict=True)]
        gammas = [None if k == "linear" else g for k, g in zip(kernels, gammas, strict=True)]
        codes = output_codes(len(classes), self.multiclass)
        Y = codes[y_index]
        return data, Y, classes, codes, kernels, gammas, standardizer

    def _choose_hyperparameters(self, data, Y, kernels, gammas) -> tuple[list, float, float,
                                                                         dict]:
        free = ([g for k, g in zip(kernels, gammas, strict=True) if k == "rbf" and g is None]
                or self.rho is None or self.lam is None)
        if not free:
            return gammas, float(self.lam), float(self.rho), {"free": []}
        views = data.views
        if data.n_samples > self.ml_max_samples:
            rng = np.random.default_rng(np.random.SeedSequence([self._seed(), 1]))
            rows = np.sort(rng.choice(data.n_samples, self.ml_max_samples, replace=False))
            views, Y = [X[rows] for X in views], Y[rows]
        result = RhoTensorEvidence(views, kernels, Y, self.eta, gammas, self.lam,
                                   self.rho).maximise()
        info = {"free": list(result.free), "neg_log_evidence": result.neg_log_evidence,
                "n_iterations": result.n_iterations, "seconds": result.seconds,
                "n_samples": result.n_samples, "at_bounds": list(result.at_bounds)}
        return result.gammas, result.lam, result.rho, info

    def _seed(self) -> int:
        return 0 if self.random_seed is None else int(self.random_seed)

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
        data, Y, classes, codes, kernels, gammas, standardizer = self._prepare_fit(X, y)
        gammas, lam, rho, evidence = self._choose_hyperparameters(data, Y, kernels, gammas)
        tau = tau_of(rho, data.n_views)
        rng = np.random.default_rng(np.random.SeedSequence([self._seed(), 2]))
        fitted = {"rho": rho, "lam": lam, "gammas": gammas, "kernels": kernels, "tau": tau}
        if self.n_features is None:
            fit_group, f_train, b_train = self._fit_exact(data.views, Y, fitted, rng)
        else:
            fit_group, f_train, b_train = self._fit_features(data.views, Y, fitted, rng)
        idata = self._make_idata(f_train, b_train, fitted, fit_group, data, Y)
        idata.posterior.attrs["fit_seconds"] = time.perf_counter() - start
        idata.posterior.attrs["selection_seconds"] = float(evidence.get("seconds", 0.0))
        # fitted state only now, in one step: a failure above leaves a previous fit untouched
        self._commit(classes_=classes, codes_=codes,
                     layout_=data.layout,
                     standardizer_=standardizer, rho_=rho, lam_=lam, gamma_=gammas,
                     kernels_=kernels, evidence_=evidence, idata_=idata,
                     n_features_in_=int(sum(data.view_sizes)),
                     _cache={"posterior": fitted["posterior"]} if "posterior" in fitted else {})
        return self

    def _fit_exact(self, views, Y, fitted, rng):
        rho, lam, tau = fitted["rho"], fitted["lam"], fitted["tau"]
        feature_map = ViewKernels(fitted["kernels"], fitted["gammas"])
        K = combine_kernels(feature_map.grams(views, fitted["gammas"]), rho) / (self.eta * tau**2)
        noise = lam / tau**2
        post = KernelPosterior.fit(K, Y, noise, what="the combined kernel matrix plus λ")
        fitted["posterior"] = post  # predictions reuse this factorisation
        if self.inference == "laplace":
            g, b = post.draws(K, Y, noise, self.laplace_draws, rng)
            f_train = g + b[:, None, :]
        else:
            f_train, b = (Y - noise * post.weights)[None], post.bias[None]
        group = {"weights": (("sample", "task"), post.weights), "bias": ("task", post.bias)}
        for v, X in enumerate(views):
            group[f"X_train_{v}"] = (("sample", f"feature_{v}"), X)
        return group, f_train, b

    def _fit_features(self, views, Y, fitted, rng):
        rho, lam, tau = fitted["rho"], fitted["lam"], fitted["tau"]
        rff = ViewRandomFeatures(self.n_features, fitted["kernels"], fitted["gammas"],
                                 random_state=self.random_seed)
        per_view, joint = rff.blocks(views)
        Psi = feature_design(per_view, joint, rho, self.eta)
        post = FeaturePosterior.fit(Psi, Y, lam / tau**2)
        f_mean = Psi @ post.theta + post.bias
        alpha = tau * (Y - f_mean) / lam  # the paper's dual variables y ⊙ h
        group = {"coef": (("weight1", "task"), post.coef), "bias": ("task", post.bias)}
        for v, (B, E) in enumerate(zip(per_view, rff.base, strict=True)):
            group[f"u_{v}"] = ((f"block_{v}", "task"), B.T @ alpha)
            group[f"rff_base_{v}"] = (("frequency", f"feature_{v}"), E)
        group["u_product"] = (("block_product", "task"), joint.T @ alpha)
        if self.inference == "laplace":
            W = post.draws(self.laplace_draws, rng)
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
            "lam": np.full((1, n_draws), fitted["lam"]),
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
        return {"rho": self.rho_, "lam": self.lam_, "gamma": self.gamma_,
                "kernels": self.kernels_, "codes": self.codes_.tolist(),
                "evidence": self.evidence_}

    def _set_extra_state(self, state: dict[str, Any]) -> None:
        self.rho_, self.lam_ = float(state["rho"]), float(state["lam"])
        self.gamma_, self.kernels_ = state["gamma"], state["kernels"]
        self.codes_ = np.asarray(state["codes"], dtype=float)
        self.evidence_ = state["evidence"]
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
        return ViewRandomFeatures(self.n_features, self.kernels_, self.gamma_, base=base)

    def _paper_rule(self, views) -> np.ndarray:
        """The paper's decision values (eq. 15 or 17), one column per task."""
        fit, rho, V = self.idata_.fit, self.rho_, len(self.kernels_)
        bias = fit["bias"].values
        if self.n_features is None:
            alpha = fit["weights"].values / self.tau_  # the paper's y ⊙ h
            grams = ViewKernels(self.kernels_, self.gamma_).grams(views, self.gamma_,
                                                                  self._train_views())
            K = (combine_kernels(grams, rho) if self.decision_rule == "add"
                 else np.sum(grams, axis=0) / V)
            return K @ alpha / self.eta + bias
        per_view, joint = self._rff().blocks(views)
        u = [fit[f"u_{v}"].values for v in range(V)]
        sums = sum(B @ uv for B, uv in zip(per_view, u, strict=True))
        if self.decision_rule == "mean":
            return sums / (self.eta * V) + bias
        return ((1.0 - rho) * sums + rho * joint @ fit["u_product"].values) / self.eta + bias

    def _kernel_posterior(self) -> KernelPosterior:
        """The training system's factorisation (kept from ``fit``; recomputed once after
        loading)."""
        if "posterior" not in self._cache:
            views = self._train_views()
            grams = ViewKernels(self.kernels_, self.gamma_).grams(views, self.gamma_)
            K = combine_kernels(grams, self.rho_) / (self.eta * self.tau_**2)
            Y = self.idata_.observed_data["y_tasks"].values
            self._cache["posterior"] = KernelPosterior.fit(K, Y, self.lam_ / self.tau_**2)
        return self._cache["posterior"]

    def _model_predictive(self, views) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance of ``h = g(x) + b`` (variance 0 for a MAP fit)."""
        scale = 1.0 / (self.eta * self.tau_**2)
        laplace = self.inference == "laplace"
        if self.n_features is None:
            post = self._kernel_posterior()
            fm = ViewKernels(self.kernels_, self.gamma_)
            Kx = combine_kernels(fm.grams(views, self.gamma_, self._train_views()),
                                 self.rho_) * scale
            mean = post.mean(Kx) + post.bias
            if not laplace:
                return mean, np.zeros(len(mean))
            diag = [np.ones(len(X)) if k == "rbf" else np.sum(X**2, axis=1)
                    for k, X in zip(self.kernels_, views, strict=True)]
            k_diag = ((1 - self.rho_) * np.sum(diag, axis=0)
                      + self.rho_ * np.prod(diag, axis=0)) * scale
            return mean, post.variance(Kx, k_diag)
        per_view, joint = self._rff().blocks(views)
        Psi = feature_design(per_view, joint, self.rho_, self.eta)
        coef = self.idata_.fit["coef"].values
        mean = Psi @ coef[:-1] + coef[-1]
        if not laplace:
            return mean, np.zeros(len(mean))
        post = FeaturePosterior(chol=self.idata_.fit["chol"].values, coef=coef)
        return mean, post.variance(Psi)

    def decision_function(self, X) -> np.ndarray:
        """The paper's decision values (``decision_rule``).

        Shape (n_samples,) for two classes (positive favours ``classes_[1]``); otherwise
        (n_samples, n_outputs): one column per class ("ova") or per code bit ("moc").
        """
        self._check_fitted()
        f = self._paper_rule(self._test_views(X))
        return f[:, 0] if f.shape[1] == 1 else f

    def predict(self, X) -> np.ndarray:
        """Class by the paper's rule: sign, largest one-vs-all value or nearest output code."""
        self._check_fitted()
        f = self._paper_rule(self._test_views(X))
        return self.classes_[np.argmax(f @ self.codes_.T, axis=1)]

    def predict_proba(self, X) -> np.ndarray:
        """Posterior predictive class probabilities of the Gaussian model (see Notes)."""
        self._check_fitted()
        mean, var = self._model_predictive(self._test_views(X))
        scale = 2.0 * self.tau_**2 / self.lam_
        return self._combine_outputs(
            lambda sign: log_expected_sigmoid(sign * mean, var[:, None], scale))

    def _combine_outputs(self, log_prob) -> np.ndarray:
        """Class probabilities from the outputs' ``log_prob(±1)`` = log p(bit = ±1), shape
        (..., n_outputs): one-vs-all scores normalised, or output codes, where
        p(class) ∝ Π_l p_l(bit_l) over the class's codeword."""
        log_p = log_prob(1.0)
        if log_p.shape[-1] > 1 and self.multiclass == "moc":
            log_p = log_p @ (self.codes_.T > 0) + log_prob(-1.0) @ (self.codes_.T < 0)
        return class_probabilities(log_p)

    # ------------------------------------------------------------ diagnostics
    def _decision_draws(self, X) -> np.ndarray:
        """Draws of the Gaussian model's decision value ``h = g(x) + b`` at X:
        (n_draws, n_samples, n_tasks).

        ``inference="laplace"``: ``laplace_draws`` per-point marginal draws from the exact
        Gaussian predictive ``N(mean_i, var_i)`` of each row (independent across rows, so
        they are not joint draws of the function); ``"map"``: the posterior mean as one
        draw.  This is the model's h, whose mean is not the paper's decision rule
        (``decision_function``) for ϱ < 1 (see Notes).
        """
        self._check_fitted()
        mean, var = self._model_predictive(self._test_views(X))
        if self.inference != "laplace":
            return mean[None]
        rng = np.random.default_rng(np.random.SeedSequence([self._seed(), 3]))
        z = rng.standard_normal((self.laplace_draws,) + mean.shape)
        return mean + np.sqrt(np.maximum(var, 0.0))[:, None] * z

    def _class_probability_draws(self, X) -> np.ndarray:
        """Per draw of h (:meth:`_decision_draws`), the Gaussian likelihood normalised over
        the targets, ``sigmoid(2τ²h/λ)``, combined over outputs as ``predict_proba`` does:
        (n_draws, n_samples, n_classes).  Their mean approximates ``predict_proba`` (which
        integrates h exactly); for a MAP fit it is ``predict_proba`` itself."""
        h = self._decision_draws(X)
        scale = 2.0 * self.tau_**2 / self.lam_
        return self._combine_outputs(lambda sign: log_expit(sign * scale * h))

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
                     f"tensor product), lambda = {self.lam_:.3g}",
            "bars": ["gamma", "gamma_x_dim"],
            "description": {
                "gamma": "RBF width in exp(-gamma ||x - x'||^2) (NaN: linear kernel)",
                "gamma_x_dim": "gamma times the view's width (1 = sklearn's 'scale' on "
                               "standardised views)",
                "sum_weight": "weight 1 - rho of the view's own kernel in the sum",
                "rho": "weight of the product of all views' kernels",
            }})
        return frame
