"""Hyper-parameters chosen by a criterion before an engine runs.

A piece's setting left ``None`` (a view's kernel width, ϱ, the noise) is a free variable of
the graph, which the engines fit with everything else (the MAP maximises the density, NUTS
samples it).  A *criterion* chooses such settings first instead, from the training rows
alone, and fixes them in the builder the engine then fits.  Criteria are strategies
registered for the pieces they serve (:data:`CRITERION_STRATEGIES`), as the fast MAP solvers
are (:data:`~bayesmv.inference.engines.MAP_STRATEGIES`), so nothing here names a preset:

========== ============================================================================
loo        the ϱ-tensor Gaussian process (exact per-view kernels, ϱ-tensor combiner,
           Gaussian likelihood): the cross-entropy of the calibrated classifier on the
           exact leave-one-out decision values (Sundararajan & Keerthi 2001), one
           Cholesky factor per evaluation, plus weak hyper-priors; the slope that
           calibrates those values becomes the likelihood's ``link_slope`` unless given;
           also the block-metric combiner with a Gaussian likelihood of fixed noise: the
           metric (and view weights) learned by the combiner's own objective and fixed, the
           ``link_slope`` from the exact leave-one-out predictive given them
evidence   the same process: its restricted marginal likelihood (REML: the bias integrated
           out), closed form with its analytic gradient
heldout    a hinge on fixed features with a flat bias: the hinge's constant (when
           ``C=None``) from :data:`~bayesmv.inference.svm.HINGE_COST_GRID` and the
           probability's ``link_constant`` (unless given) by the held-out log-likelihood of
           Platt's targets at the stratified out-of-fold SVM decision values
========== ============================================================================

Free RBF widths are chosen as one common multiple of each view's reference width
:func:`reference_widths` (scikit-learn's ``"scale"``) by ``loo`` and per view by
``evidence``.  Beyond :data:`CRITERION_MAX_SAMPLES` training rows a criterion sees a seeded
random subset of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import clone

from bayesmv.builder import ModelBuilder
from bayesmv.components.likelihoods import (
    GaussianLikelihood,
    HingeLikelihood,
    class_log_probabilities,
)
from bayesmv.components.metric import BlockMetricCombiner
from bayesmv.data import MultiViewData, check_complete_views
from bayesmv.inference.engines import EngineSettings, fixed_design, svm_map_condition
from bayesmv.inference.evidence import (
    LOG_LAM_RANGE,
    LOG_SLOPE_RANGE,
    RhoTensorEvidence,
    RhoTensorLOO,
    is_rho_tensor_process,
    noise_prior_on_search_range,
)
from bayesmv.inference.metric import fit_block_metrics, loo_calibration_slope
from bayesmv.inference.svm import HINGE_COST_GRID, held_out_link_fits

#: the criteria a composed estimator can choose hyper-parameters by
CRITERIA = ("loo", "evidence", "heldout")

#: folds of the held-out criterion (fewer when a class has fewer rows)
HELDOUT_FOLDS = 5

#: training rows a criterion sees at most (a seeded random subset beyond)
CRITERION_MAX_SAMPLES = 2000


@dataclass
class Selection:
    """A criterion's choice: the builder with the chosen values fixed, and how it went."""

    builder: ModelBuilder
    info: dict[str, Any]


def reference_widths(views: Sequence[np.ndarray]) -> list[float]:
    """Each view's reference RBF width ``1 / (D_v · Var(X_v))`` (scikit-learn's
    ``gamma="scale"``), the unit a criterion's width multiplier is measured in."""
    return [1.0 / (X.shape[1] * max(float(X.var()), 1e-300)) for X in views]


def criterion_rows(n_samples: int, max_samples: int, seed: int | None) -> np.ndarray | None:
    """The sorted rows a criterion sees: None (all) up to ``max_samples``, else a random
    subset drawn from ``seed`` (None counts as 0, so an unseeded fit chooses the same)."""
    if n_samples <= max_samples:
        return None
    rng = np.random.default_rng(np.random.SeedSequence([0 if seed is None else int(seed), 1]))
    return np.sort(rng.choice(n_samples, max_samples, replace=False))


def choose_process_hyperparameters(
        views: Sequence[np.ndarray], kernels: Sequence[str], gammas: Sequence[float | None],
        Y: np.ndarray, y_index: np.ndarray, codes: np.ndarray, *, eta: float,
        alpha: float | None, rho: float | None, criterion: str, rule: str,
        max_samples: int = CRITERION_MAX_SAMPLES, seed: int | None = None
        ) -> tuple[list[float | None], float, float, dict[str, Any]]:
    """The ϱ-tensor process's free hyper-parameters chosen by ``criterion``.

    Parameters
    ----------
    views : list of ndarray
        Standardised training views.
    kernels, gammas : per view, ``"rbf"`` / ``"linear"`` and the width (None: free).
    Y : ndarray (N, T)
        ±1 targets, one column per output code; ``codes`` (n_classes, T) the code matrix and
        ``y_index`` (N,) each row's class.
    eta : float
        The paper's η.
    alpha, rho : float or None
        The noise variance λ and ϱ when fixed; None to choose.
    criterion : {"loo", "evidence"}
    rule : {"add", "mean", "model"}
        The decision rule whose leave-one-out values ``"loo"`` scores.
    max_samples, seed : see :func:`criterion_rows`.

    Returns
    -------
    (gammas, alpha, rho, info): the widths, λ and ϱ, and a dict describing the search
    (``criterion``, ``free``, ``at_bounds``, ``seconds``, ``n_samples``; ``loo`` adds its
    ``slope`` at the choice).
    """
    free = ([g for k, g in zip(kernels, gammas, strict=True) if k == "rbf" and g is None]
            or rho is None or alpha is None)
    if not free:
        return list(gammas), float(alpha), float(rho), {"criterion": None, "free": []}
    rows = criterion_rows(len(Y), max_samples, seed)
    if rows is not None:
        views, Y, y_index = [X[rows] for X in views], Y[rows], y_index[rows]
    if criterion == "evidence":
        result = RhoTensorEvidence(views, kernels, Y, eta, gammas, alpha, rho).maximise()
        info = {"criterion": "evidence", "free": list(result.free),
                "neg_log_evidence": result.neg_log_evidence,
                "n_iterations": result.n_iterations, "seconds": result.seconds,
                "n_samples": result.n_samples, "at_bounds": list(result.at_bounds)}
        return result.gammas, result.alpha, result.rho, info
    loo = RhoTensorLOO(views, kernels, Y, y_index, len(codes),
                       lambda F, t: class_log_probabilities(F, None, t, codes), eta,
                       gammas, reference_widths(views), alpha, rho, rule).minimise()
    info = {"criterion": "loo", "free": list(loo.free), "value": loo.criterion,
            "cross_entropy": loo.cross_entropy, "width": loo.width, "slope": loo.slope,
            "n_evaluations": loo.n_evaluations, "seconds": loo.seconds,
            "n_samples": loo.n_samples, "at_bounds": list(loo.at_bounds)}
    return loo.gammas, loo.alpha, loo.rho, info


def _process_criterion(builder: ModelBuilder, criterion: str, train: MultiViewData,
                       targets: np.ndarray, y_index: np.ndarray, codes: np.ndarray,
                       seed: int | None, settings: EngineSettings) -> Selection | None:
    """``loo`` / ``evidence`` for exact per-view kernels, the ϱ-tensor combiner and a
    Gaussian likelihood whose free noise has the log-uniform prior on the criteria's range."""
    if criterion not in ("loo", "evidence") or not is_rho_tensor_process(builder):
        return None
    _, fmap, comb, lik = builder.pieces
    if not noise_prior_on_search_range(lik):
        raise ValueError(
            f"criterion={criterion!r}: GaussianLikelihood's free noise is chosen on the "
            f"criteria's range; give variance_range={tuple(np.exp(LOG_LAM_RANGE))} "
            f"(got {lik.variance_range!r}) or a fixed sigma")
    check_complete_views(train, needs=f"criterion={criterion!r} with ViewKernels")
    kinds, gammas = fmap.view_settings(train.n_views)
    alpha = None if lik.sigma is None else float(lik.sigma) ** 2
    rule = "add" if comb.decision_rule == "add" else "model"
    chosen, alpha, rho, info = choose_process_hyperparameters(
        train.views, kinds, gammas, targets, y_index, codes, eta=float(comb.eta), alpha=alpha,
        rho=comb.rho, criterion=criterion, rule=rule, max_samples=CRITERION_MAX_SAMPLES,
        seed=seed)
    builder = clone(builder)
    builder.set_params(feature_map__gamma=[None if g is None else float(g) for g in chosen],
                       feature_map__kernel=list(kinds), feature_map__kernels=None,
                       feature_map__gammas=None, combiner__rho=float(rho),
                       likelihood__sigma=float(np.sqrt(alpha)))
    if criterion == "loo" and lik.link_slope is None and info["criterion"] is not None:
        slope = info["slope"]
        if info["n_samples"] < len(targets):  # chosen on a subset: the slope from every row
            loo = RhoTensorLOO(train.views, kinds, targets, y_index, len(codes),
                               lambda F, t: class_log_probabilities(F, None, t, codes),
                               float(comb.eta), chosen, reference_widths(train.views), alpha,
                               rho, rule)
            slope = loo.evaluate(None, alpha, rho)["slope"]
        builder.set_params(likelihood__link_slope=float(slope))
    return Selection(builder, info)


def _hinge_heldout(builder: ModelBuilder, criterion: str, train: MultiViewData,
                   targets: np.ndarray, y_index: np.ndarray, codes: np.ndarray,
                   seed: int | None, settings: EngineSettings) -> Selection | None:
    """``heldout`` for a hinge on fixed features summed with a fixed Gaussian prior and a
    flat bias (the MAP is an SVM): the hinge's constant and the probability's constant."""
    lik = builder.likelihood
    if criterion != "heldout" or not isinstance(lik, HingeLikelihood):
        return None
    if lik.C is not None and lik.link_constant is not None:  # nothing left to choose
        return Selection(clone(builder), {"criterion": None, "free": []})
    probe = clone(builder)
    if lik.C is None:  # the features do not depend on the hinge's constant
        probe.set_params(likelihood__C=1.0)
    built = probe.build(train, targets)
    why = svm_map_condition(built)
    if why is not None:
        raise ValueError(f"criterion='heldout' needs a hinge on fixed features with a flat "
                         f"bias (an SVM), but {why}")
    folds = min(HELDOUT_FOLDS, int(np.bincount(y_index).min()))
    if folds < 2:
        raise ValueError("criterion='heldout': a class has fewer than 2 training rows, so no "
                         "stratified folds exist; give HingeLikelihood's C and link_constant")
    N = len(targets)
    Phi = fixed_design(built) / np.sqrt(float(builder.combiner.prior_precision))
    # a total cost c is the per-row cost c/N of the SVM (HingeLikelihood C = c/(2N))
    costs = HINGE_COST_GRID if lik.C is None else (2.0 * N * float(lik.C),)
    start = time.perf_counter()
    links, losses = held_out_link_fits(Phi, targets, y_index, costs, folds, seed)
    best = int(np.argmin(losses))
    chosen = clone(builder)
    chosen.set_params(likelihood__C=float(costs[best]) / (2.0 * N))
    if lik.link_constant is None:
        chosen.set_params(likelihood__link_constant=float(links[best]))
    info = {"criterion": "heldout", "free": (["C"] if lik.C is None else []) + (
                ["link_constant"] if lik.link_constant is None else []),
            "total_costs": [float(c) for c in costs], "heldout_nll": losses,
            "folds": folds, "seconds": time.perf_counter() - start, "n_samples": N,
            "at_bounds": ["C"] if lik.C is None and best in (0, len(costs) - 1) else []}
    return Selection(chosen, info)


def _block_metric_loo(builder: ModelBuilder, criterion: str, train: MultiViewData,
                      targets: np.ndarray, y_index: np.ndarray, codes: np.ndarray,
                      seed: int | None, settings: EngineSettings) -> Selection | None:
    """``loo`` for the block-metric combiner with a Gaussian likelihood of fixed noise: the
    metric and the view weights, when learned, by the combiner's own objective (its solver,
    stopped by ``settings.max_iter`` and ``settings.tol``), fixed, so the engine's posterior
    of g is the exact Gaussian given them; and the likelihood's ``link_slope``, when not
    given, by the cross-entropy of the exact leave-one-out predictive (no refits)."""
    comb, lik = builder.combiner, builder.likelihood
    if (criterion != "loo" or not isinstance(comb, BlockMetricCombiner)
            or not isinstance(lik, GaussianLikelihood)):
        return None
    if lik.sigma is None:
        raise ValueError("criterion='loo' with BlockMetricCombiner learns the metric at a "
                         "fixed noise: give GaussianLikelihood a sigma (the published "
                         "objective's is sqrt(0.5))")
    learns_metric = comb.learn_A in ("full", "sparse") and comb.metric is None
    free = (["metric"] if learns_metric else []) + (["view_weights"] if comb.learn_w else []) + (
        ["link_slope"] if lik.link_slope is None else [])
    if not free:
        return Selection(clone(builder), {"criterion": None, "free": []})
    start = time.perf_counter()
    comb.check_params()
    # the features do not depend on the metric: build the cheap identity-metric graph for them
    # (a learned metric's graph carries n(n+1)/2 free entries per task)
    probe = clone(builder)
    probe.set_params(combiner__learn_A="identity", combiner__learn_w=False,
                     combiner__metric=None, combiner__view_weights=None)
    problem = comb.problem(probe.build(train, targets).context)
    T, V = targets.shape[1], problem.n_views
    noise = float(lik.sigma) ** 2
    fits = fit_block_metrics(
        problem, targets, alpha=float(comb._param("alpha")),
        metric_penalty=float(comb._param("metric_penalty")), learn_A=comb.learn_A,
        learn_w=bool(comb.learn_w), objective=comb.objective, noise_variance=noise,
        max_iter=int(settings.max_iter), tol=float(settings.tol),
        metric=comb.given_metric(T, problem.n), view_weights=comb.given_view_weights(T, V))
    chosen = clone(builder)
    if learns_metric:
        chosen.set_params(combiner__metric=np.stack([ft.A for ft in fits]))
    if comb.learn_w:
        chosen.set_params(combiner__learn_w=False,
                          combiner__view_weights=np.stack([ft.w for ft in fits]))
    info: dict[str, Any] = {"criterion": "loo", "free": free,
                            "metric_iterations": [int(ft.n_iter) for ft in fits],
                            "metric_converged": [bool(ft.converged) for ft in fits]}
    if lik.link_slope is None:
        slope = loo_calibration_slope(problem, fits, targets, y_index, codes, lik.multiclass,
                                      noise)
        chosen.set_params(likelihood__link_slope=float(slope))
        info["slope"] = float(slope)
        info["at_bounds"] = (["link_slope"] if np.any(np.isclose(
            np.log(slope), LOG_SLOPE_RANGE, atol=0.05)) else [])
    else:
        info["at_bounds"] = []
    info.update(seconds=time.perf_counter() - start, n_samples=len(targets))
    return Selection(chosen, info)


#: the registered criterion strategies, tried in order: each returns a :class:`Selection`
#: for the pieces it serves, else None
CRITERION_STRATEGIES: list[Callable[..., Selection | None]] = [
    _process_criterion, _hinge_heldout, _block_metric_loo]


def check_criterion(criterion: Any) -> None:
    """Raise ValueError unless ``criterion`` is None or one of :data:`CRITERIA`."""
    if criterion is not None and criterion not in CRITERIA:
        raise ValueError(f"criterion must be None or one of {CRITERIA}, got {criterion!r}")


def select(builder: ModelBuilder, criterion: str, train: MultiViewData, targets: np.ndarray,
           y_index: np.ndarray, codes: np.ndarray, seed: int | None = None,
           settings: EngineSettings | None = None) -> Selection:
    """The builder with its free hyper-parameters chosen by ``criterion`` on the training
    rows ``train`` (standardised as the fit sees them) with task ``targets``, their classes
    ``y_index`` and the likelihood's code matrix ``codes``, by the first registered
    strategy that serves the pieces (an iterative one stops by ``settings``' ``max_iter``
    and ``tol``)."""
    check_criterion(criterion)
    settings = EngineSettings() if settings is None else settings
    for strategy in CRITERION_STRATEGIES:
        chosen = strategy(builder, criterion, train, targets, y_index, codes, seed, settings)
        if chosen is not None:
            return chosen
    names = " + ".join(type(p).__name__ for p in builder.pieces)
    raise ValueError(
        f"criterion={criterion!r} has no strategy for {names}: 'loo' and 'evidence' serve "
        "exact per-view kernels (ViewKernels) + RhoTensorCombiner + GaussianLikelihood, "
        "'loo' also a BlockMetricCombiner with a GaussianLikelihood, "
        "'heldout' a HingeLikelihood on fixed features with a SumCombiner; leave "
        "criterion=None to fit the free hyper-parameters with the engine (e.g. "
        "inference='map' or 'nuts')")


__all__ = ["CRITERIA", "CRITERION_MAX_SAMPLES", "CRITERION_STRATEGIES", "HELDOUT_FOLDS",
           "Selection", "check_criterion", "choose_process_hyperparameters", "criterion_rows",
           "reference_widths", "select"]
