"""``MultiViewClassifier``: fit any composition of the builder's pieces.

The estimator is thin: it validates and standardises the views, builds the graph with the
user's :class:`~bayesmv.ModelBuilder`, hands it to a generic engine from
:mod:`bayesmv.inference.engines` (``inference=``), and predicts by evaluating the graph's own
``f`` on the new rows at the posterior draws (:class:`~bayesmv.inference.predict.GraphPredictor`),
so no piece of the model is written a second time for prediction.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pymc as pm
import xarray as xr
from scipy.special import log_expit
from sklearn.base import clone

from bayesmv.builder import BuiltModel, ModelBuilder
from bayesmv.components import LinearFeatures, LogisticLikelihood, SumCombiner
from bayesmv.components.likelihoods import (
    GaussianLikelihood,
    HingeLikelihood,
    log_expected_sigmoid,
    log_hinge_probability,
    multiclass_log_probabilities,
    task_codes,
)
from bayesmv.components.linear import to_dense
from bayesmv.data import MultiViewData, ViewStandardizer, check_complete_views
from bayesmv.inference import engines, selection
from bayesmv.inference.predict import (
    GaussianProcessPredictor,
    GraphPredictor,
    prediction_rng,
    with_input_draws,
)
from bayesmv.inference.sample import check_nuts_sampler
from bayesmv.models.base import BaseMultiViewClassifier, register, thinned_draws
from bayesmv.params import check_ensemble, check_positive


def default_builder() -> ModelBuilder:
    """Bayesian logistic regression on the concatenated views: linear features, one
    ``N(0, 1)`` weight vector, a flat bias and the logistic likelihood."""
    return ModelBuilder(None, LinearFeatures(), SumCombiner(prior_precision=1.0, flat_bias=True),
                        LogisticLikelihood())


def _posterior_directions(built: BuiltModel) -> tuple[dict, dict[str, np.ndarray]]:
    """The exact Gaussian posterior (the engine's, computed once per built model) as points of
    the free variables, which is all a predictor reads: its mean, and the mean moved by each
    of its K marginal directions (the columns of its covariance factor; for a task-separable
    posterior every task's k-th column at once, which the closed-form predictive, reading one
    task at a time, may combine), stacked once, ``{name: (K, *shape)}``.  Held as full named
    points (``f`` at every training row too) and stacked again at every prediction, they took
    643 MB and a predict_proba peak of 944 MB on the ten UCI digits' block metric; now 373 MB
    (the factor itself) and 375 MB."""
    flat, posterior = engines.exact_posterior(built)
    to_free = engines.point_function(built, free_only=True)
    mean = to_free(flat.to_point(posterior.mean))
    directions = posterior.marginal_directions()
    moved = {name: np.empty((len(directions), *np.shape(value))) for name, value in mean.items()}
    for k, direction in enumerate(directions):
        for name, value in to_free(flat.to_point(posterior.mean + direction)).items():
            moved[name][k] = value
    return mean, moved


#: builder parameters with more numbers than this (a criterion's learned metric, one
#: (n, n) block per task) are saved as arrays of the InferenceData's ``constant_data``, not
#: as JSON text in its attributes
JSON_ARRAY_MAX = 10_000
#: prefix of those arrays' names in ``constant_data`` (and of the reference left in the JSON)
BUILDER_ARRAY_PREFIX = "builder_param__"


def large_array_params(builder: ModelBuilder) -> dict[str, np.ndarray]:
    """The builder's array parameters above :data:`JSON_ARRAY_MAX` numbers, by deep name."""
    return {key: value for key, value in builder.get_params(deep=True).items()
            if isinstance(value, np.ndarray) and value.size > JSON_ARRAY_MAX}


def clone_replacing(estimator: Any, replacements: dict[str, Any]) -> Any:
    """``sklearn.base.clone`` with the parameters named in ``replacements`` (deep names, as
    ``get_params(deep=True)`` gives them) set to the given values, which are not copied.
    Cloning deep-copies every array; a criterion's learned metric (390 MB on the ten UCI
    digits) would be copied only to be replaced by a reference.  Like ``clone`` for the
    package's pieces, which define no ``__sklearn_clone__`` or metadata routing."""
    params = estimator.get_params(deep=False)
    unknown = {key.split("__")[0] for key in replacements} - set(params)
    if unknown:
        raise ValueError(f"{type(estimator).__name__} has no parameter {sorted(unknown)}")
    out = {}
    for name, value in params.items():
        inner = {key.removeprefix(f"{name}__"): v for key, v in replacements.items()
                 if key.startswith(f"{name}__")}
        if name in replacements:
            if inner:
                raise ValueError(f"{name!r} is replaced whole and in part: {sorted(inner)}")
            out[name] = replacements[name]
        elif inner:
            out[name] = clone_replacing(value, inner)
        else:
            out[name] = clone(value, safe=False)
    return type(estimator)(**out)


def criterion_attrs(info: dict[str, Any]) -> dict[str, Any]:
    """A criterion's search description as ``posterior.attrs`` (numbers and strings, which
    netCDF stores): each key prefixed ``criterion_``, lists joined by commas."""
    out = {}
    for key, value in info.items():
        name = "criterion" if key == "criterion" else f"criterion_{key}"
        if value is None:
            continue
        out[name] = ",".join(map(str, value)) if isinstance(value, list | tuple) else value
    return out


#: new rows per Gaussian-process prediction graph, whose covariance over the training rows
#: and these is formed whole: (N + rows)² numbers per view
GP_PREDICTION_ROWS = 1000


def _closed_form_predictive(inference: str, n_classes: int, likelihood) -> bool:
    """Whether the class probabilities integrate the exact Gaussian predictive of each task's
    ``f`` in closed form: exact inference, and two classes or per-task probabilities
    normalised (the one-hot rule couples the tasks at each draw)."""
    return inference == "exact" and (n_classes == 2 or likelihood.multiclass == "normalised")


@register
class MultiViewClassifier(BaseMultiViewClassifier):
    """A multi-view classifier made of any composition of the builder's pieces.

    Parameters
    ----------
    builder : ModelBuilder or None
        The model: representation → feature map → combiner → likelihood.  None is Bayesian
        logistic regression on the concatenated views (:func:`default_builder`).
    inference : {"auto", "exact", "map", "laplace", "nuts", "gibbs", "hybrid"}, default "auto"
        The engine (see :mod:`bayesmv.inference.engines`).  ``"auto"`` takes the first that
        applies of exact, gibbs, hybrid and nuts; the one used is ``inference_`` and
        ``idata_.posterior.attrs["inference"]``.
        ``inference="laplace"`` predicts with the linearised predictive
        ``f(θ̂) + J(θ̂)(θ_s − θ̂)`` in antithetic pairs (its mean is f at the mode exactly),
        where f depends on unconstrained variables only, else with f at the draws
        (``idata_.posterior.attrs["laplace_predictive"]`` says which).
        ``inference="exact"`` with two classes integrates the exact Gaussian predictive of
        ``f`` in closed form (see :meth:`predict_proba`); where the posterior is Gaussian,
        ``"map"`` finds its mode in closed form too (``attrs["solver"]`` is
        ``"gaussian_map"``).  A Gaussian-process graph (exact per-view kernels: no explicit
        ``f``, the process integrated out) fits with exact, map or nuts, and predicts by
        conditioning the process on the stored training rows at each posterior draw
        (:class:`~bayesmv.inference.predict.GaussianProcessPredictor`; a MAP fit's
        probabilities are plug-in).
    criterion : {None, "loo", "evidence", "heldout"}, default None
        How the pieces' free hyper-parameters (settings left None: a view's kernel width,
        ϱ, the noise, a hinge's C) are chosen.  None: they are variables of the graph,
        fitted by the engine with the rest.  Otherwise they are chosen first by that
        criterion on the training rows, by a strategy registered for the pieces
        (:mod:`bayesmv.inference.selection`), then fixed in ``builder_`` for the engine:
        ``"loo"`` / ``"evidence"``, the ϱ-tensor Gaussian process's exact leave-one-out
        predictive or its restricted marginal likelihood (``"loo"`` also sets the Gaussian
        likelihood's ``link_slope``, when not given, to the slope that calibrates the
        leave-one-out decision values it scored); ``"loo"`` also serves the block-metric
        combiner with a Gaussian likelihood of fixed noise: the metric and view weights,
        when learned, by the combiner's own objective (stopped by ``max_iter`` and
        ``tol``), fixed, so the engine's posterior of g is the exact Gaussian given them,
        and ``link_slope`` as above from the exact leave-one-out predictive given them
        (MVML's fit); ``"heldout"``, a hinge on fixed
        features: its C (when None) and its ``link_constant`` (when not given) by the
        stratified out-of-fold log-likelihood.  The choice is in
        ``idata_.posterior.attrs`` (``criterion_*``).
    draws, tune, chains : int
        Posterior draws per chain, tuning iterations and chains (samplers); ``draws`` is also
        the number of draws of the exact and Laplace posteriors.
    cores : int or None, default 1
        Processes for the chains.
    random_seed : int or None
        Seeds everything random in ``fit``: starts, chains, and every piece's ``random_seed``
        that is None (landmarks, subsets, random bases).
    view_sizes : sequence of int or None
        Column widths of the views when ``X`` is one concatenated array (one may be -1).
    standardize : bool, default True
        Standardise each view's columns with the training rows' mean and sd first; when a
        piece models the views themselves (``builder.models_views``, e.g. a
        :class:`~bayesmv.components.SharedLatent`), columns constant on the training rows
        are left out, as a Gaussian noise model would read them as noise-free features.
    n_init : int, default 3
        L-BFGS-B starts of the MAP (the best mode is kept).
    ensemble : int or None, default 1
        Independent MAP fits, each the best of ``n_init`` starts, kept as the draws of one
        chain (best first) and averaged by ``predict_proba``: an equally weighted mixture of
        modes (a deep ensemble).  None means one (unlike MVM, whose None is ten for the
        MAP).  ``inference="map"`` only; a MAP that a
        registered exact solver finds (a convex objective, e.g. the hinge on fixed features:
        libsvm) has one mode and keeps one draw.
    max_iter : int, default 2000
        L-BFGS-B iterations per start.
    tol : float, default 1e-9
        L-BFGS-B relative objective tolerance.
    target_accept : float, default 0.9
        NUTS / HMC target acceptance.
    nuts_sampler : {"pymc", "nutpie", "numpyro", "blackjax"}, default "pymc"
    max_predict_draws : int, default 200
        Evenly spaced posterior draws averaged by ``predict_proba``.
    n_latent_draws : int, default 16
        Draws of a shared latent's conditional ``h* | x*`` on new rows per posterior draw
        (the same draws for every row, so a row's prediction does not depend on the rows
        predicted with it); ignored without a shared latent, where ``f`` on new rows is a
        function of the posterior draw alone.
    progressbar : bool, default False
        Show PyMC's progress bar while sampling (as the presets' ``progressbar``).
    laplace_curvature : {"auto", "full", "diagonal"}, default "auto"
        Curvature of ``inference="laplace"``: the exact Hessian (every posterior correlation)
        or its exact diagonal (correlations dropped: marginal variances are the conditional
        ones, an underestimate), a closed form where a strategy serves the pieces (the CP
        interaction on fixed features), else Hessian-vector products.  "auto": full up to
        ``engines.FULL_HESSIAN_MAX`` parameters, diagonal beyond.

    Attributes
    ----------
    idata_ : arviz.InferenceData
        Posterior (``f`` at the training rows, every free variable and deterministic; the
        samplers leave out per-row variables such as a shared latent's ``H``, see
        :func:`~bayesmv.inference.engines.traced_names`), sampler statistics.
    model_ : pymc.Model
        The fitted graph, for PyMC's own tools (``pm.model_to_graphviz(est.model_)``).
    builder_ : ModelBuilder
        The builder as fitted (pieces' unset ``random_seed`` filled from ``random_seed``).
    inference_ : str
        The engine that ran.
    classes_ : ndarray

    Examples
    --------
    >>> from bayesmv import ModelBuilder, MultiViewClassifier
    >>> from bayesmv.components import (LandmarkFeatures, CPInteractionCombiner,
    ...                                 LogisticLikelihood)
    >>> builder = ModelBuilder(None, LandmarkFeatures(20), CPInteractionCombiner(rank=2),
    ...                        LogisticLikelihood())
    >>> clf = MultiViewClassifier(builder, inference="map", random_seed=0)
    """

    def __init__(self, builder: ModelBuilder | None = None, *, inference: str = "auto",
                 criterion: str | None = None, draws: int = 1000, tune: int = 1000,
                 chains: int = 4, cores: int | None = 1,
                 random_seed: int | None = None, view_sizes=None, standardize: bool = True,
                 n_init: int = 3, ensemble: int | None = 1, max_iter: int = 2000,
                 tol: float = 1e-9,
                 target_accept: float = 0.9,
                 nuts_sampler: str = "pymc", max_predict_draws: int = 200,
                 n_latent_draws: int = 16, progressbar: bool = False,
                 laplace_curvature: str = "auto") -> None:
        self.builder = builder
        self.inference = inference
        self.criterion = criterion
        self.draws = draws
        self.tune = tune
        self.chains = chains
        self.cores = cores
        self.random_seed = random_seed
        self.view_sizes = view_sizes
        self.standardize = standardize
        self.n_init = n_init
        self.ensemble = ensemble
        self.max_iter = max_iter
        self.tol = tol
        self.target_accept = target_accept
        self.nuts_sampler = nuts_sampler
        self.max_predict_draws = max_predict_draws
        self.n_latent_draws = n_latent_draws
        self.progressbar = progressbar
        self.laplace_curvature = laplace_curvature

    # ------------------------------------------------------------------ checks
    def _check_params(self) -> None:
        if self.builder is not None and not isinstance(self.builder, ModelBuilder):
            raise ValueError(f"builder must be a bayesmv.ModelBuilder or None, got "
                             f"{self.builder!r}")
        if self.inference not in engines.INFERENCES:
            raise ValueError(f"inference must be one of {engines.INFERENCES}, got "
                             f"{self.inference!r}")
        for name in ("draws", "chains", "n_init", "max_iter", "max_predict_draws",
                     "n_latent_draws"):
            check_positive(name, getattr(self, name), integer=True)
        check_ensemble(self.ensemble, self.inference)
        if not isinstance(self.tune, numbers.Integral) or self.tune < 0:
            raise ValueError(f"tune must be a non-negative integer, got {self.tune!r}")
        check_positive("tol", self.tol)
        if not 0 < float(self.target_accept) < 1:
            raise ValueError(f"target_accept must lie in (0, 1), got {self.target_accept!r}")
        check_nuts_sampler(self.nuts_sampler, require_installed=False)
        engines.check_laplace_curvature(self.laplace_curvature)
        selection.check_criterion(self.criterion)

    def _modes(self) -> int:
        return 1 if self.ensemble is None else int(self.ensemble)

    def _seeded_builder(self) -> ModelBuilder:
        """A copy of the builder whose pieces' unset ``random_seed`` come from
        ``random_seed`` (so a fit, and a reload, rebuild the same landmarks and bases)."""
        builder = clone(self.builder if self.builder is not None else default_builder())
        params = builder.get_params(deep=True)
        # a Generator seed advances when used: replace it by an integer drawn from it, so that
        # rebuilding the fitted state (after pickling, after load) draws the same again
        for key, value in params.items():
            if key.endswith(("random_seed", "random_state")) and isinstance(
                    value, np.random.Generator | np.random.RandomState | np.random.SeedSequence):
                rng = np.random.default_rng(value)
                builder.set_params(**{key: int(rng.integers(2**32))})
        params = builder.get_params(deep=True)
        keys = sorted(k for k, v in params.items() if k.endswith("random_seed") and v is None
                      and params.get(k[:-len("random_seed")] + "random_state") is None)
        seeds = np.random.SeedSequence(self.random_seed).generate_state(len(keys) + 1)[1:]
        builder.set_params(**{k: int(s) for k, s in zip(keys, seeds, strict=True)})
        return builder

    # ------------------------------------------------------------------ fit
    def fit(self, X, y) -> MultiViewClassifier:
        """Build the model on (X, y) and run the inference engine."""
        self._check_params()
        data, classes, y_index = self._validate_training_data(X, y)
        builder = self._seeded_builder()
        standardizer = (ViewStandardizer(drop_constant=builder.models_views).fit(data)
                        if self.standardize else None)
        train = standardizer.transform(data) if standardizer is not None else data
        codes = task_codes(builder.likelihood, len(classes))
        targets = codes[y_index]
        settings = engines.EngineSettings(
            draws=int(self.draws), tune=int(self.tune), chains=int(self.chains),
            cores=self.cores, random_seed=self.random_seed, n_init=int(self.n_init),
            ensemble=self._modes(), max_iter=int(self.max_iter), tol=float(self.tol),
            target_accept=float(self.target_accept), nuts_sampler=self.nuts_sampler,
            progressbar=bool(self.progressbar), laplace_curvature=self.laplace_curvature)
        start = time.perf_counter()
        chosen = {}
        if self.criterion is not None:
            choice = selection.select(builder, self.criterion, train, targets, y_index, codes,
                                      self.random_seed, settings)
            builder, chosen = choice.builder, criterion_attrs(choice.info)
        built = builder.build(train, targets)
        inference = engines.resolve(built, self.inference)
        idata, info = engines.fit(built, inference, settings)
        elapsed = time.perf_counter() - start
        if inference in ("nuts", "gibbs", "hybrid"):
            info["n_iterations"] = int(self.tune) + int(self.draws)
        info.update(chosen)
        info.update(fit_seconds=elapsed, requested_inference=self.inference,
                    model=" + ".join(type(p).__name__ for p in builder.pieces))
        for key, value in info.items():
            idata.posterior.attrs[key] = value
        training = {f"train_view_{v}": (("train_row", f"train_view_{v}_column"), to_dense(X_v))
                    for v, X_v in enumerate(train.views)}
        training["train_observed"] = (("train_row", "view"), train.observed.astype(np.int8))
        training["train_targets"] = (("train_row", "task"), targets)
        for key, value in large_array_params(builder).items():
            name = BUILDER_ARRAY_PREFIX + key
            training[name] = (tuple(f"{name}_dim_{i}" for i in range(value.ndim)), value)
        constants = xr.Dataset(training)
        if "constant_data" in idata.groups():
            idata.constant_data = xr.merge([idata.constant_data, constants],
                                           compat="override")
        else:
            idata.add_groups(constant_data=constants)
        self._commit(idata_=idata, classes_=classes, layout_=data.layout,
                     n_features_in_=int(sum(data.layout.view_sizes)),
                     standardizer_=standardizer, builder_=builder, inference_=inference,
                     _model=built.model, _fitted_context=built.context.state,
                     # what the closed-form predictive reads
                     _posterior_factor=(_posterior_directions(built) if _closed_form_predictive(
                         inference, len(classes), builder.likelihood) else None))
        return self

    @property
    def n_iter_(self) -> int:
        """Iterations run: L-BFGS-B iterations of the kept start (map, laplace), tuning
        iterations plus draws per chain (samplers), or 1 (exact, a solver strategy)."""
        self._check_fitted()
        attrs = self.idata_.posterior.attrs
        if "optimizer_iterations" in attrs:
            return max(1, int(attrs["optimizer_iterations"]))
        return max(1, int(attrs.get("n_iterations", 1)))

    # ------------------------------------------------------------ fitted state
    def _prediction_constants(self) -> set[str]:
        # the pieces' fitted state (landmarks, subsets, bases) is rebuilt from these on load
        return {n for n in self.idata_.constant_data.data_vars
                if n.startswith(("train_", BUILDER_ARRAY_PREFIX))}

    def _extra_state(self) -> dict[str, Any]:
        builder = self.builder_
        large = large_array_params(builder)
        if large:  # stored in constant_data at fit; the JSON names where
            builder = clone_replacing(builder, {key: BUILDER_ARRAY_PREFIX + key
                                                for key in large})
        return {"builder_": builder, "inference_": self.inference_}

    def _set_extra_state(self, state: dict[str, Any]) -> None:
        builder = state["builder_"]
        stored = {key: value for key, value in builder.get_params(deep=True).items()
                  if isinstance(value, str) and value.startswith(BUILDER_ARRAY_PREFIX)}
        builder.set_params(**{key: np.asarray(self.idata_.constant_data[name].values)
                              for key, name in stored.items()})
        self.builder_ = builder
        self.inference_ = state["inference_"]
        self.n_features_in_ = int(sum(self.layout_.view_sizes))

    def _training_data(self) -> tuple[MultiViewData, np.ndarray]:
        """The stored (standardised) training rows and their task targets."""
        const = self.idata_.constant_data
        names = list(self.layout_.view_names)
        views = tuple(np.asarray(const[f"train_view_{v}"].values) for v in range(len(names)))
        train = MultiViewData(views=views, view_names=tuple(names),
                              observed=np.asarray(const["train_observed"].values, dtype=bool))
        return train, np.asarray(const["train_targets"].values)

    def _training_build(self) -> BuiltModel:
        return self.builder_.build(*self._training_data())

    @property
    def model_(self) -> pm.Model:
        """The fitted ``pm.Model`` (rebuilt from the stored training rows after ``load``)."""
        self._check_fitted()
        if "_model" not in vars(self):
            built = self._training_build()
            vars(self).update(_model=built.model, _fitted_context=built.context.state)
        return vars(self)["_model"]

    def __getstate__(self) -> dict[str, Any]:
        # the graph (compiled PyTensor objects) is not copied or pickled; it is rebuilt from
        # the stored training rows when needed
        state = dict(super().__getstate__())  # a copy: the live estimator keeps its graph
        for cached in ("_model", "_fitted_context", "_posterior_factor"):
            state.pop(cached, None)
        return state

    def _fitted(self) -> dict[str, Any]:
        if "_fitted_context" not in vars(self):
            self.model_  # noqa: B018 - rebuilds the training state
        return vars(self)["_fitted_context"]

    # ------------------------------------------------------------ prediction
    def _noise_variance(self, draws: dict[str, np.ndarray], n_draws: int) -> np.ndarray:
        """The graph's noise variance per draw: σ² times the combiner's factor (the
        ϱ-tensor's 1/τ²)."""
        if "noise_variance" in draws:
            return np.asarray(draws["noise_variance"], dtype=float)
        lik = self.builder_.likelihood
        factor = float(self._fitted().get("noise_factor", 1.0))
        if lik.sigma is not None:
            return np.full(n_draws, float(lik.sigma) ** 2 * factor)
        if "sigma" in draws:
            return np.asarray(draws["sigma"], dtype=float) ** 2 * factor
        return np.exp(np.asarray(draws["log_noise_variance"], dtype=float)) * factor

    def _log_positive(self, f: np.ndarray, draws: dict[str, np.ndarray]) -> np.ndarray:
        """``log p(y_t = +1 | f)`` per draw, from the likelihood normalised over ±1 (or the
        likelihood's calibrated link)."""
        lik = self.builder_.likelihood
        if isinstance(lik, LogisticLikelihood):
            return log_expit(f)
        if isinstance(lik, HingeLikelihood):
            return log_hinge_probability(f, lik.probability_constant)
        if isinstance(lik, GaussianLikelihood):
            slope = lik.probability_slope(self._noise_variance(draws, f.shape[0]))
            return log_expit(np.reshape(slope, (-1, 1, 1)) * f)
        raise TypeError(f"no class probability for {type(lik).__name__}")

    def _gaussian_predictive(self, X) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance (n_samples, n_tasks) of the new rows' ``f`` under the exact
        Gaussian posterior (``inference="exact"``): ``f`` is linear in the weights, so it is
        Gaussian, with mean ``f`` at the posterior mean and variance ``diag(J Σ Jᵀ)``, where
        ``J Σ Jᵀ = Σ_k (J l_k)(J l_k)ᵀ`` over the columns l_k of Σ's factor (the one the
        engine draws from), each ``J l_k`` by forward-mode differentiation of the graph's
        own ``f``."""
        if vars(self).get("_posterior_factor") is None:  # after load: from the graph
            vars(self)["_posterior_factor"] = _posterior_directions(self._training_build())
        at_mode, directions = vars(self)["_posterior_factor"]
        processes = self._gaussian_processes(X)
        if processes is not None:
            # given the bias the process is Gaussian; the bias's exact posterior adds c² Var(b)
            _, targets = self._training_data()
            noise = self._noise_variance({}, 1)[0]
            n_directions = len(next(iter(directions.values()), ()))
            means, variances, var_b = [], [], None
            for process in processes:
                mean, var, coef = process.moments(at_mode, targets, noise)
                if var_b is None:  # the bias's variance: no new row enters it
                    b = process.process_mean(at_mode)
                    var_b = sum((process.process_mean({n: d[k] for n, d in directions.items()})
                                 - b) ** 2 for k in range(n_directions))
                means.append(mean)
                variances.append(var[:, None] + coef[:, None] ** 2 * var_b[None, :])
            return np.concatenate(means), np.concatenate(variances)
        T = self._codes().shape[1]
        predictor = GraphPredictor(self.builder_, self._fitted(), self._prepare(X), T)
        names = predictor.names
        columns = predictor.linearised(at_mode, {n: directions[n] for n in names})
        mean = predictor({n: np.asarray(at_mode[n])[None] for n in names})[0]
        return mean, np.sum((columns - mean) ** 2, axis=0)

    def _gaussian_processes(self, X) -> Iterator[GaussianProcessPredictor] | None:
        """Predictors of a Gaussian-process graph (no explicit ``f``) on consecutive blocks
        of at most ``GP_PREDICTION_ROWS`` of the rows X, made one at a time; None for a
        graph with ``f``."""
        if "f" in self.model_.named_vars:
            return None
        data, (train, _) = self._prepare(X), self._training_data()
        check_complete_views(data, "X", needs="A Gaussian process (exact per-view kernels)")
        T = self._codes().shape[1]
        return (GaussianProcessPredictor(self.builder_, self._fitted(), train,
                                         data.subset(slice(i, i + GP_PREDICTION_ROWS)), T)
                for i in range(0, data.n_samples, GP_PREDICTION_ROWS))

    def _process_draws_at(self, processes: Iterator[GaussianProcessPredictor]
                          ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """A Gaussian process's decision values on new rows per posterior draw, block by
        block: its mean given the draw's bias and hyper-parameters (the modes of a MAP fit:
        plug-in), plus a draw of the process's conditional spread (sampled and exact
        posteriors), with one standard normal per draw and task shared by every row: each
        row's draws have the right distribution, and a row's prediction depends neither on
        the other rows nor on the blocks."""
        post = self.idata_.posterior
        _, targets = self._training_data()
        blocks, draws = [], None
        for process in processes:
            if draws is None:  # one set of draws, and their noise, for every block
                wanted = list(process.names)
                wanted += [n for n in ("sigma", "log_noise_variance", "noise_variance")
                           if n in post]
                draws = thinned_draws(post, wanted, int(self.max_predict_draws))
                noise = self._noise_variance(draws, len(draws[process.names[0]]))
            rng = prediction_rng(self.random_seed)  # the same normals in every block
            f = []
            for s, noise_s in enumerate(noise):
                mean, var, _ = process.moments({n: draws[n][s] for n in process.names},
                                               targets, noise_s)
                if self.inference_ != "map":
                    mean = mean + np.sqrt(var)[:, None] * rng.standard_normal(mean.shape[1])
                f.append(mean)
            blocks.append(np.stack(f))
        return np.concatenate(blocks, axis=1), draws

    def _draws_at(self, X) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        processes = self._gaussian_processes(X)
        if processes is not None:
            return self._process_draws_at(processes)
        data = self._prepare(X)
        T = self._codes().shape[1]
        predictor = GraphPredictor(self.builder_, self._fitted(), data, T)
        wanted = list(predictor.names)
        post = self.idata_.posterior
        wanted += [n for n in ("sigma", "log_noise_variance", "noise_variance") if n in post]
        rng = prediction_rng(self.random_seed)
        if post.attrs.get("laplace_predictive") == "linearised":
            # antithetic pairs of the linearised predictive (its mean is f at the mode
            # exactly): half as many draws, each used with its reflection
            draws = with_input_draws(
                thinned_draws(post, wanted, -(-int(self.max_predict_draws) // 2)),
                predictor, int(self.n_latent_draws))
            fit = self.idata_.fit
            mode = {n: np.asarray(fit[n].values) for n in predictor.names}
            f = predictor.linearised(mode, {n: draws[n] for n in predictor.names}, rng,
                                     antithetic=True)
            return f, {n: np.concatenate([v, v]) for n, v in draws.items()}
        draws = with_input_draws(thinned_draws(post, wanted, int(self.max_predict_draws)),
                                 predictor, int(self.n_latent_draws))
        f = predictor({n: draws[n] for n in predictor.names}, rng)
        return f, draws

    def _log_task_probability_draws(self, X) -> tuple[np.ndarray, np.ndarray]:
        """``log p(y_t = ±1 | f)`` per draw (posterior draw × draw of a shared latent's
        ``h*``).  Every likelihood here is symmetric, ``p(-1 | f) = p(+1 | -f)``."""
        f, draws = self._draws_at(X)
        return self._log_positive(f, draws), self._log_positive(-f, draws)

    def _log_class_probability_draws(self, X) -> np.ndarray:
        """Log class probabilities per draw by the likelihood's ``multiclass`` rule
        (:func:`multiclass_log_probabilities`), ``[1 - p, p]`` for two classes."""
        return multiclass_log_probabilities(*self._log_task_probability_draws(X),
                                            self.builder_.likelihood.multiclass, axis=None,
                                            codes=self._codes())

    def _codes(self) -> np.ndarray:
        """The ±1 code matrix (n_classes, n_tasks) the tasks were fitted to."""
        return task_codes(self.builder_.likelihood, len(self.classes_))

    def _decision_draws(self, X) -> np.ndarray:
        return self._draws_at(X)[0]

    def _class_probability_draws(self, X) -> np.ndarray:
        return np.exp(self._log_class_probability_draws(X))

    def predict_log_proba(self, X) -> np.ndarray:
        """Log posterior-predictive class probabilities (n_samples, n_classes)."""
        rule = self.builder_.likelihood.multiclass
        if _closed_form_predictive(self.inference_, len(self.classes_), self.builder_.likelihood):
            # the Gaussian predictive of f integrated exactly, not over the stored draws
            mean, var = self._gaussian_predictive(X)
            slope = float(self.builder_.likelihood.probability_slope(
                self._noise_variance({}, 1))[0])
            return multiclass_log_probabilities(log_expected_sigmoid(mean, var, slope),
                                                log_expected_sigmoid(-mean, var, slope),
                                                rule, axis=None, codes=self._codes())
        return multiclass_log_probabilities(*self._log_task_probability_draws(X), rule,
                                            codes=self._codes())

    def predict_proba(self, X) -> np.ndarray:
        """Posterior-predictive class probabilities: per draw, the likelihood of each class's
        label (for more than two classes the one-hot label under the one-vs-rest tasks, the
        softmax of their log-odds), averaged over the posterior draws (the modes of a MAP
        fit) and the draws of a shared latent on the new rows; with the likelihood's
        ``multiclass="normalised"``, each task's averaged positive probability normalised
        over the classes.  ``inference="exact"`` (two classes, or the normalised rule): the
        Gaussian predictive of each task's ``f`` integrated exactly (quadrature, no
        Monte-Carlo error), ``E[sigmoid(s f*)]`` with ``s`` the Gaussian likelihood's slope
        (``link_slope`` or ``2/σ²``)."""
        return np.minimum(np.exp(self.predict_log_proba(X)), 1.0)

    def decision_function(self, X) -> np.ndarray:
        """Log-odds of the posterior-predictive probability of ``classes_[1]`` (binary), or the
        log class probabilities (multi-class): rows rank exactly as ``predict_proba``'s."""
        logp = self.predict_log_proba(X)
        if logp.shape[1] == 2:
            return logp[:, 1] - logp[:, 0]
        return logp
