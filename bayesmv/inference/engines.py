"""Generic inference engines: each fits any built model that meets its condition.

An engine takes a :class:`~bayesmv.builder.BuiltModel` and returns an ``InferenceData``
whose ``posterior`` holds draws (one draw for a point estimate) of every free variable (the
samplers leave out per-row ones: :func:`traced_names`) and of the decision values ``f``,
plus the attributes that describe the fit.  Which engines apply is decided from the pieces
and the graph alone (:func:`why_not`), never from a preset's name:

========== ============================================================================
exact      the posterior is Gaussian (Gaussian likelihood with fixed noise, f linear in
           Gaussian random variables: checked on the graph's gradient): its mode is one
           Newton step from anywhere and its covariance the inverse negative Hessian, up
           to FULL_HESSIAN_MAX parameters; a registered strategy gives it in closed form
           at any size where one serves the pieces (a fixed block metric: one factor per
           task, :data:`EXACT_STRATEGIES`)
map        L-BFGS-B on the graph's log density from dispersed starts (a registered fast
           solver when one serves the pieces: the SVM solver for a hinge on fixed features,
           the closed-form mode of a Gaussian posterior, the alternating solver of a
           learned block metric)
laplace    a Gaussian at that mode with the exact (full) curvature up to FULL_HESSIAN_MAX
           parameters, else its exact diagonal (a closed form where a curvature strategy
           serves the pieces); not for the hinge, whose curvature is zero almost everywhere
nuts       NUTS through PyMC (or nutpie / NumPyro / BlackJAX) on the collapsed graph
gibbs      the augmented hinge Gibbs sampler (Polson & Scott 2011) for a hinge on fixed
           features combined by a sum with a fixed Gaussian prior
hybrid     M³LAK's Gibbs + HMC scheme: shared latent → random Fourier features → sum → hinge
========== ============================================================================
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import arviz as az
import numpy as np
from pymc.util import is_transformed_name
from scipy.special import expit
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from bayesmv.builder import BuiltModel
from bayesmv.components.base import FIXED, Identity
from bayesmv.components.combine import SumCombiner
from bayesmv.components.features import RandomFourierFeatures
from bayesmv.components.latent import SharedLatent
from bayesmv.components.likelihoods import GaussianLikelihood, HingeLikelihood
from bayesmv.components.linear import concatenated
from bayesmv.components.metric import BlockMetricCombiner
from bayesmv.inference.curvature import fast_diagonal, flat_directions
from bayesmv.inference.optimize import (
    FlatLogp,
    L1Penalty,
    LaplaceResult,
    TaskBlockGaussian,
    find_map,
    full_hessian,
    laplace_approximation,
    pareto_khat,
)
from bayesmv.inference.predict import DrawFunction

INFERENCES = ("auto", "exact", "map", "laplace", "nuts", "gibbs", "hybrid")
#: the order in which ``"auto"`` tries them: exact draws, then exact samplers, then NUTS
AUTO_ORDER = ("exact", "gibbs", "hybrid", "nuts")
#: the engines for a Gaussian-process graph (no explicit f; its hyper-parameters and bias
#: are the free variables): those that need no linearisation of f
GAUSSIAN_PROCESS_INFERENCES = ("exact", "map", "nuts")
#: a full Hessian (Laplace, exact) is formed up to this many parameters
FULL_HESSIAN_MAX = 3000
#: above this Pareto k̂ of its draws a Gaussian approximation is warned about (Vehtari et al.)
LAPLACE_KHAT_MAX = 0.7
#: curvature below this fraction of the largest is a flat direction of a Laplace
#: approximation (a factor model's near-symmetries), given zero variance
LAPLACE_FLAT_TOL = 1e-6
#: a Gaussian posterior's precision is positive definite: only curvature at rounding level is
#: flat (an unstandardised design's spectrum spans more than 1e6)
EXACT_FLAT_TOL = 1e-12
#: the Laplace engine's curvatures (see :func:`laplace_curvature`)
CURVATURES = ("auto", "full", "diagonal")


@dataclass
class EngineSettings:
    """What the engines read from the estimator (one place, so every engine sees the same)."""

    draws: int = 1000
    tune: int = 1000
    chains: int = 4
    cores: int | None = 1
    random_seed: int | None = None
    n_init: int = 3
    ensemble: int = 1
    max_iter: int = 2000
    tol: float = 1e-9
    target_accept: float = 0.9
    nuts_sampler: str = "pymc"
    progressbar: bool = False
    laplace_curvature: str = "auto"


# ------------------------------------------------------------------ conditions
def _free_names(built: BuiltModel) -> set[str]:
    return {rv.name for rv in built.model.free_RVs}


def _fixed_features_sum(built: BuiltModel) -> str | None:
    """Why ``f`` is not ``Φβᵀ (+ b)`` with Φ fixed data and β ~ N(0, v⁻¹I), v fixed."""
    b = built.builder
    rep, fmap, comb = b.pieces[:3]
    if not isinstance(rep, Identity):
        return f"its representation {type(rep).__name__} is random"
    # landmark features with Bayesian imputation: the missing blocks are random, and the
    # augmented hinge Gibbs sampler draws them (its spec handles mu_missing_k)
    if FIXED not in fmap.provides and getattr(fmap, "impute", None) != "bayes":
        return f"{type(fmap).__name__}'s features are random"
    if not isinstance(comb, SumCombiner) or comb.precision_prior is not None:
        return "it needs a SumCombiner with a fixed prior precision"
    extra = _free_names(built) - {"beta", "bias", "sigma", "log_noise_variance"}
    extra = {n for n in extra if not n.startswith("mu_missing_")}
    if extra:
        return f"the graph has other random variables ({sorted(extra)})"
    return None


def flat_logp(built: BuiltModel, jacobian: bool) -> FlatLogp:
    """The built model's compiled log density (compiled once per built model and flag)."""
    key = ("flat_logp", bool(jacobian))
    if key not in built.cache:
        built.cache[key] = FlatLogp(built.model, jacobian=jacobian)
    return built.cache[key]


def untransformed_logp(built: BuiltModel) -> FlatLogp:
    """The compiled log density of a graph without constrained variables, where it makes no
    difference whether it includes the (absent) Jacobian: whichever is compiled already."""
    cached = built.cache.get(("flat_logp", False))
    return cached if cached is not None else flat_logp(built, True)


def _block_metric_exact(built: BuiltModel) -> Callable[[FlatLogp], LaplaceResult] | None:
    """Registered exact posterior: the block-metric combiner with a fixed metric (given, or
    the identity / covariance metric) of full rank, fixed view weights and a Gaussian
    likelihood with fixed noise.  Given A the tasks are independent a posteriori and each
    task's ``g`` is Gaussian with covariance ``σ² (ZᵀZ + 2σ²λA⁻¹)⁻¹``: its factor from one
    Cholesky per task (:func:`~bayesmv.inference.metric.fit_block_metrics`), so no Hessian
    is formed, at any size.  Returns the function computing it, or None."""
    b = built.builder
    comb, lik = b.combiner, b.likelihood
    if (not isinstance(comb, BlockMetricCombiner) or comb.learn_w
            or (comb.metric is None and comb.learn_A in ("full", "sparse"))
            or not isinstance(lik, GaussianLikelihood) or lik.sigma is None
            or _free_names(built) != {"g"}):  # a rank-deficient metric samples h instead
        return None

    def posterior(flat: FlatLogp) -> LaplaceResult:
        from bayesmv.inference.metric import fit_block_metrics

        ctx = built.context
        problem = comb.problem(ctx)
        T, n, V = ctx.n_tasks, problem.n, problem.n_views
        metric = comb.given_metric(T, n)
        if metric is None:  # the identity or covariance metric the graph holds
            metric = np.broadcast_to(ctx.state["fixed_metric"], (T, n, n))
        sigma = float(lik.sigma)
        fits = fit_block_metrics(problem, ctx.targets, alpha=float(comb._param("alpha")),
                                 metric_penalty=0.0, learn_A=comb.learn_A, learn_w=False,
                                 objective=comb.objective, noise_variance=sigma**2,
                                 max_iter=0, tol=0.0, metric=metric,
                                 view_weights=comb.given_view_weights(T, V))
        mean = flat.from_point({"g": np.stack([ft.g for ft in fits])})
        blocks = tuple((slice(t * n, (t + 1) * n), sigma * ft.cov_factor)
                       for t, ft in enumerate(fits))
        sd = np.concatenate([np.sqrt(np.sum(F**2, axis=1)) for _, F in blocks])
        return TaskBlockGaussian(mean, "full", sd, blocks=blocks)

    return posterior


#: registered exact posteriors, tried before the generic one (a full Hessian)
EXACT_STRATEGIES: list[Callable[[BuiltModel], Callable[[FlatLogp], LaplaceResult] | None]] = [
    _block_metric_exact]


def _exact_strategy(built: BuiltModel) -> Callable[[FlatLogp], LaplaceResult] | None:
    return next((p for p in (s(built) for s in EXACT_STRATEGIES) if p is not None), None)


def _not_gaussian(built: BuiltModel) -> str | None:
    """Why the posterior is not exactly Gaussian.

    It is when the likelihood is Gaussian with fixed noise and the log density is quadratic
    in the (unconstrained) free variables, i.e. ``f`` and the priors are linear-Gaussian in
    them: then the gradient is affine, which is checked exactly (to rounding) in a random
    direction: ``∇ log p(x + d) - ∇ log p(x) = H d``.
    """
    lik = built.builder.likelihood
    if not isinstance(lik, GaussianLikelihood) or lik.sigma is None:
        return f"it needs a GaussianLikelihood with fixed sigma, not {type(lik).__name__}" + (
            " with a free sigma" if isinstance(lik, GaussianLikelihood) else "")
    if _exact_strategy(built) is not None:
        return None
    model = built.model
    transformed = [v.name for v in model.value_vars if is_transformed_name(v.name)]
    if transformed:
        return f"the graph has constrained variables ({transformed})"
    flat = untransformed_logp(built)
    if flat.size > FULL_HESSIAN_MAX:
        return f"{flat.size} parameters (a full Hessian is formed up to {FULL_HESSIAN_MAX})"
    rng = np.random.default_rng(0)
    x, d = rng.standard_normal(flat.size), rng.standard_normal(flat.size)
    lhs = flat(x + d)[1] - flat(x)[1]
    rhs = flat.hvp(x, d)
    if not np.allclose(lhs, rhs, rtol=1e-6, atol=1e-8 * max(1.0, np.abs(rhs).max())):
        return "the decision values are not linear in the random variables"
    return None


def why_not(built: BuiltModel, inference: str) -> str | None:
    """``None`` when ``inference`` applies to ``built``, else a sentence saying why not."""
    b = built.builder
    rep, fmap, comb, lik = b.pieces
    names = " + ".join(type(p).__name__ for p in b.pieces)
    if "f" not in built.model.named_vars and inference not in GAUSSIAN_PROCESS_INFERENCES:
        return (f"{names} has no explicit decision values f (a Gaussian-process combiner): "
                f"{inference} does not apply; use one of {GAUSSIAN_PROCESS_INFERENCES} (the "
                "process is integrated out, and predictions condition it on the training "
                "rows)")
    if inference == "exact":
        reason = _not_gaussian(built)
        return None if reason is None else f"exact needs a Gaussian posterior ({names}: {reason})"
    if inference in ("map", "nuts"):
        return None
    if inference == "laplace":
        if isinstance(lik, HingeLikelihood):
            return ("laplace needs a smooth likelihood: the hinge pseudo-likelihood has zero "
                    "curvature almost everywhere; use map, gibbs or nuts")
        return None
    if inference == "gibbs":
        if not isinstance(lik, HingeLikelihood):
            return f"gibbs augments the hinge pseudo-likelihood; {names} has " \
                   f"{type(lik).__name__}"
        reason = _fixed_features_sum(built)
        return None if reason is None else f"gibbs needs fixed features ({names}: {reason})"
    if inference == "hybrid":
        ok = (isinstance(rep, SharedLatent) and isinstance(fmap, RandomFourierFeatures)
              and isinstance(comb, SumCombiner) and not comb.flat_bias
              and isinstance(lik, HingeLikelihood))
        return None if ok else ("hybrid is M³LAK's scheme: SharedLatent + "
                                "RandomFourierFeatures + SumCombiner (no flat bias: the "
                                "features carry a constant) + HingeLikelihood, "
                                f"not {names}")
    raise ValueError(f"inference must be one of {INFERENCES}, got {inference!r}")


def resolve(built: BuiltModel, inference: str) -> str:
    """The engine to run: ``inference`` itself (checked), or the first valid one for auto."""
    if inference == "auto":
        chosen = next((name for name in AUTO_ORDER if why_not(built, name) is None), None)
        if chosen is None:
            raise ValueError("inference='auto' does not apply: no engine fits this model "
                             f"({why_not(built, 'nuts')})")
        return chosen
    reason = why_not(built, inference)
    if reason is not None:
        raise ValueError(f"inference={inference!r} does not apply: {reason}")
    return inference


# ------------------------------------------------------------------ packaging
def point_function(built: BuiltModel, *, free_only: bool = False) -> Callable[[dict], dict]:
    """Compiled map from a point of value variables to every named variable (and ``f``), or
    with ``free_only`` to the free random variables alone (what a predictor reads, without
    ``f`` and the other deterministics at every training row), compiled once per built model
    and choice."""
    key = "free_point_function" if free_only else "point_function"
    if key in built.cache:
        return built.cache[key]
    model = built.model
    free = _free_names(built)
    outs = [o for o in model.unobserved_value_vars if not is_transformed_name(o.name)
            and (not free_only or o.name in free)]
    fn = model.compile_fn(outs, inputs=model.value_vars, point_fn=False)
    names = [o.name for o in outs]
    order = [v.name for v in model.value_vars]

    def evaluate(point: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(names, fn(*[point[n] for n in order]), strict=True))

    built.cache[key] = evaluate
    return evaluate


def draws_to_idata(built: BuiltModel, draws: list[dict[str, np.ndarray]]) -> az.InferenceData:
    """One chain of named draws as an ``InferenceData`` with the model's dims and coords."""
    model = built.model
    names = list(draws[0])
    posterior = {n: np.stack([d[n] for d in draws])[None] for n in names}
    dims = {n: list(model.named_vars_to_dims.get(n, ())) for n in names}
    coords = {k: np.asarray(v) for k, v in model.coords.items() if v is not None}
    return az.from_dict(posterior=posterior, dims=dims, coords=coords)


def add_point_estimate(built: BuiltModel, idata: az.InferenceData,
                       point: dict[str, np.ndarray], kind: str) -> az.InferenceData:
    """Store a point estimate (named variables) as the ``fit`` group, with the model's dims;
    ``attrs["point_estimate"]`` says which (``"mode"``, ``"posterior mean"``...)."""
    import xarray as xr

    model = built.model
    data = {n: (tuple(model.named_vars_to_dims.get(n, ())) or
                tuple(f"{n}_dim_{i}" for i in range(np.ndim(v))), np.asarray(v))
            for n, v in point.items()}
    fit = xr.Dataset(data)
    coords = {k: np.asarray(v) for k, v in model.coords.items()
              if v is not None and k in fit.dims}
    fit = fit.assign_coords(coords)
    fit.attrs["point_estimate"] = kind
    idata.add_groups(fit=fit)
    return idata


def _starts(built: BuiltModel, settings: EngineSettings, n: int) -> list[dict]:
    seeds = np.random.SeedSequence(settings.random_seed).spawn(n)
    with threadpool_limits(limits=1, user_api="blas"):
        return [built.initial_values(np.random.default_rng(s)) for s in seeds]


# ------------------------------------------------------------------ engines
def svm_map_condition(built: BuiltModel) -> str | None:
    """Why the model is not a hinge on fixed features summed with a fixed Gaussian prior and a
    flat bias (whose MAP is a soft-margin SVM), or None when it is."""
    b = built.builder
    if not isinstance(b.likelihood, HingeLikelihood):
        return f"its likelihood is {type(b.likelihood).__name__}"
    why = _fixed_features_sum(built)
    if why is not None:
        return why
    if not b.combiner.flat_bias:
        return "its bias is not flat"
    if any(n.startswith("mu_missing_") for n in _free_names(built)):
        return "missing feature blocks are random variables"
    return None


def _svm_map(built: BuiltModel, settings: EngineSettings) -> dict[str, np.ndarray] | None:
    """Registered fast MAP: a hinge on fixed features with a flat bias is a soft-margin SVM
    (``min ½||θ||² + (2C/v) Σ hinge``), solved exactly by libsvm."""
    from bayesmv.inference.svm import fit_svm_map

    if svm_map_condition(built) is not None:
        return None
    b = built.builder
    comb, lik = b.combiner, b.likelihood
    Phi = fixed_design(built)
    v = float(comb.prior_precision)
    # with θ' = √v θ the objective ½v||θ||² + 2C Σ hinge(Φθ + b) is an SVM on Φ/√v, cost 2C
    theta, bias, _ = fit_svm_map(Phi / np.sqrt(v), built.context.targets, 2.0 * float(lik.C))
    return {"beta": theta / np.sqrt(v), "bias": bias}


def _metric_map(built: BuiltModel, settings: EngineSettings) -> dict[str, np.ndarray] | None:
    """Registered fast MAP: the block-metric combiner with a learned metric under the paper's
    objective and a Gaussian likelihood with fixed noise σ² is, per task,
    ``min ||y - Z g||²/(2σ²) + λ gᵀA⁻¹g + η||A||²_F``: the alternating solver of
    :func:`~bayesmv.inference.metric.fit_metric` (exact g-steps, metric updates) run to
    ``settings.tol`` (relative decrease of the objective) or ``settings.max_iter`` updates,
    on the objective multiplied by 2σ² (λ and η scaled by it).  Not the sparse metric: its
    proximal steps reach singular metrics, where the graph's Cholesky parameterisation has
    no finite density."""
    from bayesmv.inference.metric import fit_block_metrics

    b = built.builder
    comb, lik = b.combiner, b.likelihood
    if (not isinstance(comb, BlockMetricCombiner) or comb.objective != "paper"
            or comb.learn_A != "full" or comb.metric is not None
            or comb.learn_w or not isinstance(lik, GaussianLikelihood) or lik.sigma is None
            or _free_names(built) != {"A_chol", "g"}):
        return None
    fits = fit_block_metrics(comb.problem(built.context), built.context.targets,
                             alpha=float(comb._param("alpha")),
                             metric_penalty=float(comb._param("metric_penalty")),
                             learn_A="full", learn_w=False, objective="paper",
                             noise_variance=float(lik.sigma) ** 2,
                             max_iter=settings.max_iter, tol=settings.tol)
    return {"A_chol": np.stack([comb.pack_factor(fit.A) for fit in fits]),
            "g": np.stack([fit.g for fit in fits])}


def _interval_value(x, lower: float, upper: float) -> np.ndarray:
    """The unconstrained value PyMC gives ``x`` of a ``Uniform(lower, upper)`` variable; an
    ``x`` on the interval's edge (a search range closed where the prior's support is open)
    goes to ±30, within ``e⁻³⁰`` of the interval's width from the edge."""
    with np.errstate(divide="ignore"):
        value = np.log(x - lower) - np.log(upper - x)
    return np.clip(np.asarray(value, dtype=float), -30.0, 30.0)


#: logit ϱ's search range where ϱ ~ Uniform(0, 1) is free: the prior's whole support to
#: double precision (ϱ = 1 - 1e-13 at its edge), so an optimum at ϱ → 1 is the graph's
_RHO_PRIOR_LOGIT_RANGE = (-30.0, 30.0)


def _process_evidence_map(built: BuiltModel, settings: EngineSettings
                          ) -> dict[str, np.ndarray] | None:
    """Registered fast MAP: the ϱ-tensor Gaussian process (exact per-view kernels, the
    ϱ-tensor combiner, a Gaussian likelihood) with free hyper-parameters under the graph's
    flat priors (log γ_v, log noise variance, ϱ uniform on their ranges) and its wide flat
    bias.  The graph's density is the process's marginal likelihood, so its mode maximises
    the evidence with the bias at its maximum:
    :class:`~bayesmv.inference.evidence.RhoTensorEvidence` (``restricted=False``: closed
    form and analytic gradient, one Cholesky factor per evaluation) by L-BFGS-B from
    ``settings.n_init`` starts (the evidence has several modes), then the bias at its
    generalised least-squares value.  (ϱTMV-RKM's ``criterion="evidence"``
    integrates the bias out instead: REML.)"""
    from bayesmv.components.kernels import GAMMA_RANGE
    from bayesmv.inference.evidence import (
        RhoTensorEvidence,
        is_rho_tensor_process,
        noise_prior_on_search_range,
    )

    if not is_rho_tensor_process(built.builder):
        return None
    _, fmap, comb, lik = built.builder.pieces
    data = built.context.data
    kinds, gammas = fmap.view_settings(data.n_views)
    free_gamma = {f"log_gamma_{v}" for v, (k, g) in enumerate(zip(kinds, gammas, strict=True))
                  if k == "rbf" and g is None}
    free_noise = lik.sigma is None
    expected = ({"b"} | free_gamma | ({"rho"} if comb.rho is None else set())
                | ({"log_noise_variance"} if free_noise else set()))
    # the search's ranges must be the priors' supports
    if (_free_names(built) != expected or len(expected) == 1
            or not noise_prior_on_search_range(lik)):
        return None
    evidence = RhoTensorEvidence(
        data.views, kinds, built.context.targets, float(comb.eta), gammas,
        None if free_noise else float(lik.sigma) ** 2, comb.rho, restricted=False,
        logit_rho_range=_RHO_PRIOR_LOGIT_RANGE)
    # the evidence's coordinates (log γ_v, log λ, logit ϱ) and the graph's interval values
    intervals = [(f"log_gamma_{v}", np.log(np.asarray(GAMMA_RANGE) / data.views[v].shape[1]))
                 for v in evidence.free_gamma]
    intervals += ([("log_noise_variance", np.log(np.asarray(lik.variance_range)))]
                  if free_noise else [])
    intervals += [("rho", None)] if comb.rho is None else []

    def to_z(start: dict) -> np.ndarray:  # the MAP engine's own dispersed starts
        return np.array([start[f"{name}_interval__"] if bounds is None else
                         bounds[0] + (bounds[1] - bounds[0]) * expit(start[f"{name}_interval__"])
                         for name, bounds in intervals], dtype=float)

    result = evidence.maximise(max_iter=settings.max_iter,
                               starts=[to_z(p) for p in _starts(built, settings, settings.n_init)])
    point = {"b": evidence.bias(result.z)}
    for (name, bounds), z in zip(intervals, result.z, strict=True):
        point[f"{name}_interval__"] = (np.clip(z, *_RHO_PRIOR_LOGIT_RANGE) if bounds is None
                                       else _interval_value(z, *bounds))
    return point


def gaussian_mode(flat: FlatLogp) -> tuple[np.ndarray, np.ndarray]:
    """The mode (and mean) of a Gaussian posterior and its log density's Hessian: the log
    density is quadratic, so its Hessian is the same everywhere and one Newton step from any
    point reaches the mode."""
    x0 = np.zeros(flat.size)
    _, grad = flat(x0)
    with threadpool_limits(limits=1, user_api="blas"):
        H = full_hessian(flat, x0)
        return x0 - np.linalg.solve(H, grad), H


def _gaussian_map(built: BuiltModel, settings: EngineSettings) -> dict[str, np.ndarray] | None:
    """Registered fast MAP: where the posterior is Gaussian (:func:`_not_gaussian`), its
    mode in closed form (:func:`gaussian_mode`), the exact engine's posterior mean."""
    if not isinstance(built.builder.likelihood, GaussianLikelihood) or _not_gaussian(built):
        return None
    if _exact_strategy(built) is not None:
        flat, posterior = exact_posterior(built)
        return flat.to_point(posterior.mean)
    flat = untransformed_logp(built)
    return flat.to_point(gaussian_mode(flat)[0])


MAP_STRATEGIES: list[Callable[[BuiltModel, EngineSettings], dict | None]] = [
    _svm_map, _gaussian_map, _metric_map, _process_evidence_map]


def fixed_design(built: BuiltModel) -> np.ndarray:
    """The fixed features Φ = [φ_1, …, φ_V] as one dense array (n, Σ d_v)."""
    return concatenated(built.context.state["view_feature_arrays"])


def fit_map(built: BuiltModel, settings: EngineSettings, *, jacobian: bool = False,
            l1: L1Penalty | None = None, point_group: bool = True
            ) -> tuple[az.InferenceData, dict[str, Any], FlatLogp, Any]:
    """The posterior mode: a registered strategy's, else the best of ``n_init`` L-BFGS-B runs
    (exact L1 where ``l1`` names Laplace-prior terms).

    ``settings.ensemble > 1`` (L-BFGS-B only: a registered strategy's objective has one
    mode) runs that many independent fits, each the best of its own ``n_init`` starts, and
    keeps them all as the draws of one chain, best first: an equally weighted mixture of
    point masses at the modes (a deep ensemble, Lakshminarayanan, Pritzel & Blundell 2017).
    On a multi-modal posterior it averages the predictions of several modes where the best
    single mode commits to one.

    Returns the modes as an ``InferenceData`` (with the ``fit`` group, the best mode, when
    ``point_group``), the fit's attributes, the compiled log density and the best mode's
    vector.
    """
    to_named = point_function(built)
    flat = flat_logp(built, jacobian)
    x, info = _strategy_map(built, settings, flat) if l1 is None else (None, None)
    found = [x]
    if x is None:
        modes = settings.ensemble
        found, info = _lbfgs_modes(settings, flat, l1, _starts(built, settings,
                                                             settings.n_init * modes), modes)
        x = found[0]
    info["map_jacobian"] = int(jacobian)
    points = [to_named(flat.to_point(m)) for m in found]
    idata = draws_to_idata(built, points)
    if point_group:
        add_point_estimate(built, idata, points[0], "mode")
    return idata, info, flat, x


def _strategy_map(built: BuiltModel, settings: EngineSettings, flat: FlatLogp
                  ) -> tuple[np.ndarray | None, dict[str, Any] | None]:
    """The mode from the first registered strategy that serves the pieces, if any."""
    for strategy in MAP_STRATEGIES:
        point = strategy(built, settings)
        if point is not None:
            x = flat.from_point({**_starts(built, settings, 1)[0], **point})
            return x, {"inference": "map", "solver": strategy.__name__.strip("_"),
                       "map_logp": flat.logp(x)}
    return None, None


def _lbfgs_modes(settings: EngineSettings, flat: FlatLogp, l1: L1Penalty | None,
                 starts: list[dict], modes: int) -> tuple[list[np.ndarray], dict[str, Any]]:
    """L-BFGS-B from every start; ``modes`` consecutive groups of starts each keep their best
    run.  Returns the kept modes, best first, and the best one's attributes."""
    trials = []
    for start in starts:
        # one BLAS thread: numpy's and PyTensor's pools fight on 2 cores
        with threadpool_limits(limits=1, user_api="blas"):
            trials.append(find_map(flat, flat.from_point(start), l1=l1,
                                   max_iter=settings.max_iter, tol=settings.tol))
    size = len(starts) // modes
    kept = [max(trials[i * size:(i + 1) * size], key=lambda t: t.logp) for i in range(modes)]
    kept.sort(key=lambda t: -t.logp)
    best = kept[0]
    stopped = [t for t in kept if t.hit_max_iter]
    if stopped:
        warnings.warn(f"L-BFGS-B stopped at max_iter={settings.max_iter} before converging "
                      f"({stopped[0].message}); increase max_iter or loosen tol.",
                      ConvergenceWarning, stacklevel=4)
    info = {"inference": "map", "solver": "lbfgs",
            "restart_logps": np.asarray([t.logp for t in trials]),
            "optimizer_iterations": best.n_iter, "optimizer_evaluations": best.n_evals,
            "optimizer_message": best.message, "optimizer_success": int(best.success),
            "map_logp": best.logp}
    if modes > 1:
        info["mode_logps"] = np.asarray([t.logp for t in kept])
    return [t.x for t in kept], info


def draw_rng(settings: EngineSettings) -> np.random.Generator:
    """The generator of a Gaussian posterior's draws (exact, Laplace), from the seed alone:
    the same draws for a preset and for the composed estimator with its builder."""
    return np.random.default_rng(np.random.SeedSequence(settings.random_seed).spawn(2)[1])


def _gaussian_draws(built: BuiltModel, flat: FlatLogp, mode: np.ndarray,
                    settings: EngineSettings, info: dict[str, Any],
                    curvature: str = "full", linearise: bool = False,
                    gaussian: LaplaceResult | None = None) -> az.InferenceData:
    """Draws of a Gaussian at ``mode`` as the posterior (the exact engine's, where it is the
    posterior, and the Laplace engine's).  ``linearise``: ``f`` at the draws is the
    linearised predictive (:meth:`~bayesmv.inference.predict.DrawFunction.linearised`)
    where ``f`` depends on unconstrained variables only (``info["laplace_predictive"]``)."""
    lap, X, khat = gaussian_at_mode(built, flat, mode, settings.draws, draw_rng(settings),
                                    curvature, gaussian=gaussian)
    to_named = point_function(built)
    info.update(laplace_flat_directions=lap.n_clipped, laplace_curvature=lap.curvature)
    if khat is not None:
        info["laplace_khat"] = khat
    points = [to_named(flat.to_point(x)) for x in X]
    at_mode = to_named(flat.to_point(mode))
    if linearise:
        fn = DrawFunction(built.model)
        info["laplace_predictive"] = "linearised" if fn.linearisable else "sampled"
        if fn.linearisable:
            stacked = {n: np.stack([p[n] for p in points]) for n in fn.names}
            for p, f in zip(points, fn.linearised(at_mode, stacked), strict=True):
                p["f"] = f
    idata = draws_to_idata(built, points)
    return add_point_estimate(built, idata, at_mode, "mode")


def check_laplace_curvature(value: Any) -> None:
    """Raise ValueError unless ``value`` is one of :data:`CURVATURES`."""
    if value not in CURVATURES:
        raise ValueError(f"laplace_curvature must be one of {CURVATURES}, got {value!r}")


def laplace_curvature(curvature: str, n_parameters: int, full_max: int = FULL_HESSIAN_MAX
                      ) -> str:
    """``"auto"``: the full Hessian up to ``full_max`` parameters, else its diagonal."""
    if curvature == "auto":
        return "full" if n_parameters <= full_max else "diagonal"
    if curvature == "full" and n_parameters > FULL_HESSIAN_MAX:
        raise ValueError(f"{n_parameters} parameters: a full Hessian is formed up to "
                         f"{FULL_HESSIAN_MAX}; use laplace_curvature='diagonal', "
                         "inference='map' or 'nuts'")
    return curvature


def full_gaussian(built: BuiltModel, flat: FlatLogp, mode: np.ndarray,
                  flat_tol: float = LAPLACE_FLAT_TOL, hessian: np.ndarray | None = None
                  ) -> LaplaceResult:
    """The Gaussian at ``mode`` with the exact full curvature (the full Laplace
    approximation; the exact engine's posterior with ``flat_tol=EXACT_FLAT_TOL`` and the
    Hessian its Newton step formed), exact symmetries' flat directions left out."""
    with threadpool_limits(limits=1, user_api="blas"):
        return laplace_approximation(flat, mode, curvature="full", flat_tol=flat_tol,
                                     null_directions=flat_directions(built, flat, mode),
                                     hessian=hessian)


def exact_posterior(built: BuiltModel) -> tuple[FlatLogp, LaplaceResult]:
    """The compiled log density and the exact Gaussian posterior of a model whose posterior
    is Gaussian (:func:`_not_gaussian`): its mode and full covariance factor (computed once
    per built model: the exact engine's draws and its predictive read the same)."""
    if "exact_posterior" not in built.cache:
        flat = untransformed_logp(built)
        strategy = _exact_strategy(built)
        if strategy is not None:
            built.cache["exact_posterior"] = (flat, strategy(flat))
        else:
            mode, hessian = gaussian_mode(flat)
            built.cache["exact_posterior"] = (
                flat, full_gaussian(built, flat, mode, EXACT_FLAT_TOL, hessian))
    return built.cache["exact_posterior"]


def gaussian_at_mode(built: BuiltModel, flat: FlatLogp, mode: np.ndarray, draws: int,
                     rng: np.random.Generator, curvature: str = "full",
                     gaussian: LaplaceResult | None = None
                     ) -> tuple[LaplaceResult, np.ndarray, float | None]:
    """The Laplace approximation at ``mode`` with ``curvature`` ("full" or "diagonal"),
    ``draws`` value-space draws of it and their Pareto k̂ against the log density.

    The curvature strategies registered for the pieces (:mod:`bayesmv.inference.curvature`)
    give a closed-form diagonal and the flat directions of exact symmetries; without one
    the diagonal comes from Hessian-vector products.  ``gaussian``: the exact posterior,
    whose draws need no k̂ (None): their importance ratios are constant, and evaluating the
    log density at every draw cost a factorisation of the process's covariance per draw
    (1000 of them) for a Gaussian-process model."""
    if gaussian is not None:
        X, _ = gaussian.sample(draws, rng)
        return gaussian, X, None
    if curvature == "full":
        lap = full_gaussian(built, flat, mode)
    else:
        with threadpool_limits(limits=1, user_api="blas"):
            lap = laplace_approximation(flat, mode, curvature="diagonal",
                                        neg_hessian_diagonal=fast_diagonal(built, flat))
    X, log_q = lap.sample(draws, rng)
    return lap, X, pareto_khat([flat.logp(x) for x in X], log_q)


def fit_laplace(built: BuiltModel, settings: EngineSettings
                ) -> tuple[az.InferenceData, dict[str, Any]]:
    """A Gaussian at the mode of the unconstrained log density: the full curvature, or its
    diagonal (``settings.laplace_curvature``; "auto" takes the diagonal beyond
    ``FULL_HESSIAN_MAX`` parameters)."""
    _, info, flat, mode = fit_map(built, settings, jacobian=True)
    info["inference"] = "laplace"
    curvature = laplace_curvature(settings.laplace_curvature, flat.size)
    idata = _gaussian_draws(built, flat, mode, settings, info, curvature, linearise=True)
    warn_if_poor_laplace(info["laplace_khat"], stacklevel=3)
    return idata, info


def warn_if_poor_laplace(khat: float, stacklevel: int, reason: str = "") -> None:
    """The one warning for a Laplace approximation whose draws fit the log density poorly
    (Pareto k̂ above :data:`LAPLACE_KHAT_MAX`); ``reason``: why, for a particular model."""
    if khat > LAPLACE_KHAT_MAX:
        warnings.warn(
            f"The Laplace approximation fits the posterior poorly (Pareto k-hat {khat:.2f} > "
            f"{LAPLACE_KHAT_MAX} for its draws against the log density): treat its uncertainty "
            f"as rough and check its predictions on held-out data.{reason}  For the full "
            "posterior use inference='nuts'.", RuntimeWarning, stacklevel=stacklevel + 1)


def fit_exact(built: BuiltModel, settings: EngineSettings
              ) -> tuple[az.InferenceData, dict[str, Any]]:
    """The exact Gaussian posterior: the log density is quadratic, so one Newton step from
    any point reaches the mode (also the posterior mean, stored as the ``fit`` group) and the
    Laplace approximation there is the posterior."""
    flat, posterior = exact_posterior(built)
    info = {"inference": "exact", "map_logp": flat.logp(posterior.mean)}
    return _gaussian_draws(built, flat, posterior.mean, settings, info,
                           gaussian=posterior), info


def traced_names(built: BuiltModel) -> list[str]:
    """What a sampler keeps: every free variable but the per-row ones (dims starting with
    ``"sample"``: a shared latent's ``H``, the hinge augmentation's ``lam``), whose number
    grows with the rows and which prediction on new rows does not read (it draws a new
    row's latent from its conditional), and every deterministic (``f``, the DP weights)."""
    model = built.model
    dims = model.named_vars_to_dims
    free = [rv.name for rv in model.free_RVs if (dims.get(rv.name) or (None,))[0] != "sample"]
    return free + [d.name for d in model.deterministics]


def fit_sampler(built: BuiltModel, settings: EngineSettings, inference: str
                ) -> tuple[az.InferenceData, dict[str, Any]]:
    """MCMC: NUTS, the hybrid scheme or the augmented hinge Gibbs sampler, keeping
    :func:`traced_names`."""
    trace = traced_names(built)
    common = dict(draws=settings.draws, tune=settings.tune, chains=settings.chains,
                  cores=settings.cores, random_seed=settings.random_seed, trace_vars=trace,
                  progressbar=settings.progressbar)
    if inference == "gibbs":
        from bayesmv.inference.svm import run_hinge_gibbs

        idata = run_hinge_gibbs(built, **common)
    else:
        from bayesmv.inference.sample import run_sampler

        idata = run_sampler(built, sampler="nuts" if inference == "nuts" else "hybrid",
                            target_accept=settings.target_accept,
                            nuts_sampler=settings.nuts_sampler, **common)
    return idata, {"inference": inference}


def fit(built: BuiltModel, inference: str, settings: EngineSettings
        ) -> tuple[az.InferenceData, dict[str, Any]]:
    """Run the engine ``inference`` (``resolve`` it first) on ``built``."""
    if inference == "map":
        idata, info, _, _ = fit_map(built, settings)
        return idata, info
    if inference == "laplace":
        return fit_laplace(built, settings)
    if inference == "exact":
        return fit_exact(built, settings)
    return fit_sampler(built, settings, inference)
