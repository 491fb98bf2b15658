"""Likelihoods of the targets given decision values ``f``: hinge (max-margin
pseudo-likelihood) and Gaussian (least squares).

The hinge pseudo-likelihood ``ℓ(y | f) = exp(-2C·max(0, 1 - y f))`` and its data augmentation
(Polson & Scott 2011): with ``a = C(1 - y f)``,

    ∫_0^∞ (2πλ)^{-1/2} exp(-(λ + a)² / (2λ)) dλ = exp(-2·max(a, 0)),

so the augmented joint density over (y, λ) has the pseudo-likelihood as its marginal.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from scipy import stats
from scipy.special import expit, log_expit, log_ndtr, log_softmax, logsumexp, softmax

from bayesmv.components.base import (
    DECISION,
    GAUSSIAN_PROCESS,
    BuildContext,
    Component,
    LatentGaussian,
)
from bayesmv.data import output_codes


def hinge_log_pseudolikelihood(f: np.ndarray, y: np.ndarray, C: float) -> np.ndarray:
    """``log ℓ(y | f) = -2C·max(0, 1 - y f)`` elementwise."""
    return -2.0 * C * np.maximum(0.0, 1.0 - y * f)


def augmented_log_density(lam: np.ndarray, f: np.ndarray, y: np.ndarray, C: float) -> np.ndarray:
    """Log of the augmented density ``(2πλ)^{-1/2} exp(-(λ + C(1 - y f))² / (2λ))``."""
    a = C * (1.0 - y * f)
    return -0.5 * np.log(2 * np.pi * lam) - (lam + a) ** 2 / (2.0 * lam)


def _hinge_log_odds(f: np.ndarray, C: float) -> np.ndarray:
    """``log ℓ(+1|f) - log ℓ(-1|f)`` of the hinge pseudo-likelihood.

    ``2C(1 ± f)`` may overflow to ∓inf; at most one of the two terms is nonzero outside
    ``|f| < 1``, so ``inf - inf`` cannot arise and the (log) sigmoid of ±inf is exact.
    """
    with np.errstate(over="ignore"):
        return (hinge_log_pseudolikelihood(f, 1.0, C)
                - hinge_log_pseudolikelihood(f, -1.0, C))


def hinge_probability(f: np.ndarray, C: float) -> np.ndarray:
    """``p(y = +1 | f)`` from the normalised pseudo-likelihood (Sollich 2002).

    ``ℓ(+1|f) / (ℓ(+1|f) + ℓ(-1|f)) = sigmoid(log ℓ(+1|f) - log ℓ(-1|f))``, evaluated by
    ``expit`` so that large ``|f|`` or ``C`` give exactly 0 or 1 without overflow warnings.
    """
    return expit(_hinge_log_odds(f, C))


def log_hinge_probability(f: np.ndarray, C: float) -> np.ndarray:
    """``log p(y = +1 | f)`` of :func:`hinge_probability`, finite where the probability
    underflows to 0."""
    return log_expit(_hinge_log_odds(f, C))


def hinge_decision_value(log_odds: np.ndarray, C: float) -> np.ndarray:
    """The decision value ``f`` whose :func:`hinge_probability` has the given log-odds.

    The hinge log-odds are ``2C·(f + clip(f, -1, 1))``, strictly increasing in ``f`` (slope
    4C inside the margin, 2C outside), so this inverse exists.  Applied to the log-odds of a
    posterior-averaged probability it gives the moderated decision value (MacKay 1992): the
    ``f`` a point without posterior uncertainty would need for the same probability, which
    ranks and signs rows exactly as that probability does.
    """
    u = np.asarray(log_odds, dtype=float) / (2.0 * C)  # f + clip(f, -1, 1)
    return np.where(np.abs(u) <= 2.0, 0.5 * u, u - np.sign(u))


def class_probabilities(log_p: np.ndarray, axis: int | None = None, *,
                        log: bool = False) -> np.ndarray:
    """Class probabilities from ``log p(y_t = +1 | ·)`` of one or more binary tasks.

    Parameters
    ----------
    log_p : ndarray (..., T)
        Log probabilities of the positive label of each task (last axis): one task is a
        binary problem, ``T > 1`` tasks are one-vs-rest scores.
    axis : int, optional
        An axis of posterior draws to average the probabilities over first (in log space).
    log : bool, default False
        Return the log-probabilities instead, accurate where a probability underflows
        (``log(1 - p)`` as ``log(-expm1(log p))``): what a cross-entropy needs.

    Returns
    -------
    ndarray (..., n_classes)
        ``[1 - p, p]`` for one task; otherwise the one-vs-rest scores normalised to sum to
        one.  Working with logs keeps the result a distribution when every task's
        probability underflows to 0 (a point far on the negative side of every one-vs-rest
        boundary), where ``p / p.sum()`` would be 0/0.
    """
    log_p = np.asarray(log_p, dtype=float)
    if axis is not None:
        log_p = log_mean_exp(log_p, axis=axis)
    if log_p.shape[-1] == 1:
        if log:
            with np.errstate(divide="ignore"):  # p = 1 exactly: log(1 - p) = -inf
                return np.concatenate([np.log(-np.expm1(log_p)), log_p], axis=-1)
        p = np.exp(log_p)
        return np.concatenate([1.0 - p, p], axis=-1)
    # -inf everywhere (possible only for |f| near the float limit) would make softmax NaN
    log_p = np.maximum(log_p, -np.finfo(float).max)
    return log_softmax(log_p, axis=-1) if log else softmax(log_p, axis=-1)


#: bound on clipped log-odds: a quarter of the float range leaves a softmax's own
#: subtraction room, and the clipped values still rank
LOG_ODDS_LIMIT = np.finfo(float).max / 4


def log_mean_exp(log_q: np.ndarray, axis: int = 0) -> np.ndarray:
    """``log mean(exp(log_q))`` along ``axis``: probabilities averaged over draws, in logs."""
    return logsumexp(log_q, axis=axis) - np.log(log_q.shape[axis])


def class_log_odds(log_p: np.ndarray) -> np.ndarray:
    """Log-odds of each class against the rest from log class probabilities (n, K).

    Two classes: (n,), ``classes_[1]`` against ``classes_[0]``; more: (n, K), each class
    against the others.  Clipped at ``±LOG_ODDS_LIMIT`` (a probability of exactly 1 has
    infinite log-odds).  Inverting a likelihood's link at these gives the moderated decision
    value (MacKay 1992), which ranks rows as the probabilities do.
    """
    log_p = np.asarray(log_p, dtype=float)
    if log_p.shape[1] == 2:
        log_odds = log_p[:, 1] - log_p[:, 0]
    else:
        with np.errstate(divide="ignore"):  # p = 1 exactly: log(1 - p) = -inf
            log_odds = log_p - np.log(-np.expm1(log_p))
    return np.clip(log_odds, -LOG_ODDS_LIMIT, LOG_ODDS_LIMIT)


def one_hot_probabilities(log_pos: np.ndarray, log_neg: np.ndarray, *,
                          log: bool = False) -> np.ndarray:
    """Class probabilities of one-vs-rest tasks as the likelihood of the one-hot label.

    The one-vs-rest model scores a training row of class k by the product of its tasks'
    likelihoods at the one-hot target: ``ℓ_k(+1) Π_{j≠k} ℓ_j(-1)``.  Normalised over the K
    admissible targets this is ``softmax_k(log ℓ_k(+1) - log ℓ_k(-1))``: the softmax of the
    tasks' log-odds.  Normalising the positive probabilities ``ℓ_k(+1)`` instead (as
    :func:`class_probabilities` does) ignores what the other tasks say about the row and is
    underconfident where every task is sure: with the hinge's margin probabilities (0.98 on
    the right side, 0.02 on the wrong one) and ten classes it gives 0.86, the one-hot
    likelihood 0.997.  For one task (two classes) both are ``[ℓ(-1), ℓ(+1)]``.

    Parameters
    ----------
    log_pos, log_neg : ndarray (..., T)
        ``log ℓ_t(±1)`` of each task (last axis), normalised per task, e.g. per posterior
        draw; average the result over draws afterwards.
    log : bool, default False
        Return the log-probabilities.

    Returns
    -------
    ndarray (..., n_classes)
    """
    # clipped: at the float limit a link's log-odds can be ±inf (or -inf - -inf), where the
    # softmax would be NaN
    log_pos = np.maximum(np.asarray(log_pos, dtype=float), -LOG_ODDS_LIMIT)
    log_neg = np.maximum(np.asarray(log_neg, dtype=float), -LOG_ODDS_LIMIT)
    if log_pos.shape[-1] == 1:
        logits = np.concatenate([log_neg, log_pos], axis=-1)
    else:
        logits = np.clip(log_pos - log_neg, -LOG_ODDS_LIMIT, LOG_ODDS_LIMIT)
    return log_softmax(logits, axis=-1) if log else softmax(logits, axis=-1)


def code_log_probabilities(log_pos: np.ndarray, log_neg: np.ndarray,
                           codes: np.ndarray) -> np.ndarray:
    """Class log-probabilities from independent output bits and a ±1 code matrix.

    ``p(class k) ∝ Π_l p_l(codes[k, l])`` with ``log p_l(±1)`` given (last axis: outputs),
    normalised over the classes (the rows of ``codes``, so codes no class uses get no
    mass).  With one-vs-rest codes this is :func:`one_hot_probabilities`.
    """
    log_pos = np.maximum(np.asarray(log_pos, dtype=float), -LOG_ODDS_LIMIT)
    log_neg = np.maximum(np.asarray(log_neg, dtype=float), -LOG_ODDS_LIMIT)
    log_p = log_pos @ (codes.T > 0) + log_neg @ (codes.T < 0)
    # -inf everywhere (possible only for log-odds near the float limit) would make the
    # result NaN; written out rather than scipy's log_softmax, whose per-call overhead
    # dominates the thousands of small calls of ϱTMV-RKM's slope fits
    log_p = np.maximum(log_p, -np.finfo(float).max)
    log_p = log_p - np.max(log_p, axis=-1, keepdims=True)
    return log_p - np.log(np.sum(np.exp(log_p), axis=-1, keepdims=True))


def output_log_bits(F: np.ndarray, var: np.ndarray | None,
                    slope: float) -> tuple[np.ndarray, np.ndarray]:
    """``log p_l(+1)`` and ``log p_l(-1)`` of each output bit,
    ``p_l(c) = E[sigmoid(c · slope · F_l)]`` over ``F_l ~ N(F, var)`` (``var`` None: the
    plug-in ``sigmoid(c · slope · F_l)``); shapes as ``F``.  See
    :func:`class_log_probabilities`."""
    if var is None:
        return log_expit(slope * F), log_expit(-slope * F)
    return (log_expected_sigmoid(F, var[:, None], slope),
            log_expected_sigmoid(-F, var[:, None], slope))


def class_log_probabilities(F: np.ndarray, var: np.ndarray | None, slope: float,
                            codes: np.ndarray) -> np.ndarray:
    """Class log-probabilities from decision values: independent calibrated output bits.

    Output l says bit ``c = ±1`` with probability ``p_l(c) = E[sigmoid(c · slope · F_l)]``
    over ``F_l ~ N(F, var)`` (``var`` None or 0: the plug-in ``sigmoid(c · slope · F_l)``),
    and ``p(class k) ∝ Π_l p_l(codes[k, l])``.  For plug-in values that is
    ``softmax((slope/2) · F @ codes.T)``: for one-vs-all the temperature-scaled softmax of
    the outputs, ``softmax(slope · F_k)``, for two classes ``sigmoid(slope · F)``.
    Normalised in log space, so a row whose every bit underflows still sums to one.

    Parameters
    ----------
    F : ndarray (..., n_samples, n_outputs)
    var : ndarray (n_samples,) or None
        Variance of each row's decision values (the same for every output).
    slope : float
    codes : ndarray (n_classes, n_outputs)
        The ±1 output codes (:func:`~bayesmv.data.output_codes`).
    """
    return code_log_probabilities(*output_log_bits(F, var, slope), codes)


#: how the tasks' probabilities become class probabilities (more than two classes); see
#: :func:`multiclass_log_probabilities`
MULTICLASS_RULES = ("one_hot", "normalised", "moc")


def task_codes(likelihood, n_classes: int) -> np.ndarray:
    """The ±1 code matrix (n_classes, n_tasks) of a likelihood's ``multiclass`` rule: one
    task for two classes; minimum output codes for ``"moc"``; else one task per class."""
    return output_codes(n_classes, "moc" if likelihood.multiclass == "moc" else "ova")


def check_multiclass_rule(likelihood) -> None:
    """Raise ValueError naming the likelihood when its ``multiclass`` rule is unknown."""
    if likelihood.multiclass not in MULTICLASS_RULES:
        raise ValueError(f"{type(likelihood).__name__}: multiclass must be one of "
                         f"{MULTICLASS_RULES}, got {likelihood.multiclass!r}")


def multiclass_log_probabilities(log_pos: np.ndarray, log_neg: np.ndarray, rule: str,
                                 axis: int | None = 0,
                                 codes: np.ndarray | None = None) -> np.ndarray:
    """Log class probabilities from the tasks' ``log ℓ_t(±1)`` per posterior draw.

    ``"one_hot"``: :func:`one_hot_probabilities` at each draw, averaged over the draws;
    ``"normalised"``: each task's positive probability averaged over the draws, then
    normalised over the classes (:func:`class_probabilities`); ``"moc"``: the likelihood of
    each class's minimum output code (``codes``, :func:`task_codes`) at each draw
    (:func:`code_log_probabilities`), averaged.  For one task (two classes) every rule is
    ``[p(-1), p(+1)]`` averaged.  ``axis=None``: per draw, no average.
    """
    if rule == "normalised" and np.shape(log_pos)[-1] > 1:
        return class_probabilities(log_pos, axis=axis, log=True)
    if rule == "moc" and np.shape(log_pos)[-1] > 1:
        log_q = code_log_probabilities(log_pos, log_neg, codes)
    else:
        log_q = one_hot_probabilities(log_pos, log_neg, log=True)
    return log_q if axis is None else log_mean_exp(log_q, axis=axis)


class HingeLikelihood(Component):
    """Max-margin hinge pseudo-likelihood ``exp(-2C·max(0, 1 - y f))``.

    Parameters
    ----------
    C : float or None, default 1.0
        The pseudo-likelihood's constant (the fit's density); None leaves it to a criterion,
        ``MultiViewClassifier(criterion="heldout")``, which chooses it before the fit.
    link_constant : float or None, default None
        The constant c of the class probability that prediction reads,
        ``p(+1 | f) = ℓ_c(+1|f) / (ℓ_c(+1|f) + ℓ_c(-1|f))`` (Sollich 2002); None: ``C``, the
        fit's own pseudo-likelihood normalised over ±1.  A calibration fitted outside the
        density (e.g. MVL-SVM's held-out ``link_constant_``) goes here; it does not change
        the fit.
    multiclass : {"one_hot", "normalised", "moc"}, default "one_hot"
        With more than two classes: one-vs-rest tasks whose probabilities make class
        probabilities by the one-hot label's likelihood or normalised, or minimum output
        codes, ⌈log₂ K⌉ tasks (:func:`task_codes`, :func:`multiclass_log_probabilities`).
    """

    consumes = (DECISION,)

    def __init__(self, C: float = 1.0, link_constant: float | None = None,
                 multiclass: str = "one_hot") -> None:
        self.C = C
        self.link_constant = link_constant
        self.multiclass = multiclass

    @property
    def probability_constant(self) -> float:
        """The c of the class probability: ``link_constant``, else ``C``."""
        return float(self.C if self.link_constant is None else self.link_constant)

    def build(self, ctx: BuildContext, f: pt.TensorVariable) -> None:
        check_multiclass_rule(self)
        if self.C is None:
            raise ValueError("HingeLikelihood(C=None) leaves the hinge's constant to a "
                             "criterion: fit with MultiViewClassifier(criterion='heldout'), "
                             "or give C")
        if ctx.predicting:
            return
        y = pm.Data("y_tasks", ctx.targets, dims=("sample", "task"))
        if ctx.augmented:
            lam = pm.HalfFlat("lam", shape=ctx.targets.shape, dims=("sample", "task"))
            a = self.C * (1.0 - y * f)
            pm.Potential("hinge_augmented",
                         pt.sum(-0.5 * pt.log(2 * np.pi * lam) - (lam + a) ** 2 / (2.0 * lam)))
        else:
            pm.Potential("hinge", -2.0 * self.C * pt.sum(pt.maximum(0.0, 1.0 - y * f)))

    def initial_values(self, ctx: BuildContext, rng=None) -> dict[str, np.ndarray]:
        return {"lam_log__": np.zeros(ctx.targets.shape)} if ctx.augmented else {}

    def log_likelihood(self, f: np.ndarray, y: np.ndarray) -> np.ndarray:
        return hinge_log_pseudolikelihood(f, y, self.C)

    def probability(self, f: np.ndarray) -> np.ndarray:
        return hinge_probability(f, self.probability_constant)


#: what a Gaussian-process graph built for prediction (on the training rows followed by the
#: new rows) records: the process's mean (one per task), its prior covariance over all its
#: rows, and the scale of ``g`` in the decision value
#: (:class:`~bayesmv.inference.predict.GaussianProcessPredictor`)
GP_MEAN, GP_COVARIANCE, GP_DECISION_SCALE = "gp_mean", "gp_covariance", "gp_decision_scale"


class GaussianLikelihood(Component):
    """Least squares: ``y ~ N(f, σ²)`` for every task column.

    Parameters
    ----------
    sigma : float or None
        Noise standard deviation when fixed; ``None`` makes the noise a free parameter.
    sigma_prior_scale : float
        With ``sigma=None`` and no ``variance_range``: scale of σ's half-normal prior.
    variance_range : (float, float) or None
        With ``sigma=None``: a flat prior on ``log σ²`` over this range instead (the variable
        ``log_noise_variance``), the non-informative choice for type-II maximum likelihood.
    link_slope : float or None, default None
        The slope s of the class probability that prediction reads, ``p(+1 | f) =
        sigmoid(s f)``; None: ``2/σ²`` (σ² the graph's noise variance, a combiner's factor
        included), the likelihood normalised over the targets ±1.  A calibration fitted
        outside the density (e.g. ϱTMV-RKM's or MVML's temperature ``slope_``) goes here; it
        does not change the fit.
    multiclass : {"one_hot", "normalised", "moc"}, default "one_hot"
        With more than two classes: one-vs-rest tasks whose probabilities make class
        probabilities by the one-hot label's likelihood or normalised, or minimum output
        codes, ⌈log₂ K⌉ tasks (:func:`task_codes`, :func:`multiclass_log_probabilities`).

    Notes
    -----
    When the combiner hands over a :class:`~bayesmv.components.base.LatentGaussian` with a
    prior covariance, the latent is integrated out (``y_t ~ N(b_t, K + σ² I)`` per task): the
    likelihood of a Gaussian process, so the graph's density is the marginal likelihood that
    chooses the hyper-parameters.  Its ``noise_factor`` scales σ².
    """

    consumes = (DECISION, GAUSSIAN_PROCESS)

    def __init__(self, sigma: float | None = 1.0, sigma_prior_scale: float = 1.0,
                 variance_range: tuple[float, float] | None = None,
                 link_slope: float | None = None, multiclass: str = "one_hot") -> None:
        self.sigma = sigma
        self.sigma_prior_scale = sigma_prior_scale
        self.variance_range = variance_range
        self.link_slope = link_slope
        self.multiclass = multiclass

    def probability_slope(self, noise_variance):
        """The s of the class probability ``sigmoid(s f)``: ``link_slope``, else ``2/σ²`` of
        the given noise variance (a number or one per draw)."""
        noise_variance = np.asarray(noise_variance, dtype=float)
        if self.link_slope is not None:
            return np.full(noise_variance.shape, float(self.link_slope))
        return 2.0 / noise_variance

    def _variance(self):
        if self.sigma is not None:
            return self.sigma**2
        if self.variance_range is not None:
            lo, hi = np.log(self.variance_range)
            return pt.exp(pm.Uniform("log_noise_variance", lo, hi))
        return pm.HalfNormal("sigma", self.sigma_prior_scale) ** 2

    def build(self, ctx: BuildContext, f) -> None:
        check_multiclass_rule(self)
        latent = f if isinstance(f, LatentGaussian) else LatentGaussian(f)
        if ctx.predicting:
            if latent.cov is not None:  # no explicit f: prediction conditions the process
                pm.Deterministic(GP_MEAN, pt.broadcast_to(pt.as_tensor(latent.mean),
                                                          (ctx.n_tasks,)))
                pm.Deterministic(GP_COVARIANCE, latent.cov)
                pm.Deterministic(GP_DECISION_SCALE, pt.as_tensor(latent.decision_scale))
            return
        variance = self._variance() * latent.noise_factor
        if isinstance(latent.noise_factor, int | float):
            ctx.state["noise_factor"] = float(latent.noise_factor)
        else:  # a function of random variables (a free ϱ): kept with the draws
            pm.Deterministic("noise_variance", variance)
        if latent.cov is None:
            pm.Normal("y_obs", mu=latent.mean, sigma=pt.sqrt(variance), observed=ctx.targets,
                      dims=("sample", "task"))
            return
        n = ctx.n_samples
        cov = latent.cov + variance * pt.eye(n)
        mean = pt.broadcast_to(pt.as_tensor(latent.mean), (ctx.n_tasks,))[:, None] * pt.ones(n)
        pm.MvNormal("y_obs", mu=mean, cov=cov, observed=ctx.targets.T, dims=("task", "sample"))

    def initial_values(self, ctx: BuildContext, rng=None) -> dict[str, np.ndarray]:
        if self.sigma is not None:
            return {}
        if self.variance_range is not None:
            return {"log_noise_variance_interval__": np.array(0.0)}
        return {"sigma_log__": np.array(0.0)}

    def log_likelihood(self, f: np.ndarray, y: np.ndarray, sigma: float | None = None
                       ) -> np.ndarray:
        s = self.sigma if sigma is None else sigma
        return stats.norm.logpdf(y, loc=f, scale=s)

    def probability(self, f: np.ndarray, sigma2: float) -> np.ndarray:
        """``p(y = +1 | f) = sigmoid(s f)`` (:meth:`probability_slope`); with no
        ``link_slope`` the likelihood normalised over the two targets ±1,
        ``N(1; f, σ²) / (N(1; f, σ²) + N(-1; f, σ²)) = sigmoid(2f/σ²)``."""
        return expit(self.probability_slope(sigma2) * np.asarray(f))


def _logistic_logp(value, f):
    # -softplus(-s f) with s = ±1 is exact for any f; pm.Bernoulli(logit_p=f) evaluates
    # log1p(-sigmoid(f)), which is -inf for y = 0 once f ≳ 37 (and its gradient NaN)
    return -pt.softplus(-(2.0 * value - 1.0) * f)


def _logistic_random(f, rng=None, size=None):
    return rng.binomial(1, expit(f), size=size)


class LogisticLikelihood(Component):
    """Bernoulli-logit likelihood of ±1 targets: ``p(y | f) = sigmoid(y f)`` for every task.

    Its negative log is the logit loss ``log(1 + exp(-y f))`` (the MVM paper's Eq. 12), so a
    Gaussian prior on the weights gives L2-penalised logistic regression at the mode.  The
    observed variable ``y_obs`` holds the 0/1 indicators of the positive class and is written
    with a softplus, stable for any ``f`` (``pm.Bernoulli(logit_p=f)`` overflows to -inf for
    a negative label at ``f`` ≳ 37, which stalls optimisers with NaN gradients).

    Parameters
    ----------
    multiclass : {"one_hot", "normalised", "moc"}, default "one_hot"
        With more than two classes: one-vs-rest tasks whose probabilities make class
        probabilities by the one-hot label's likelihood or normalised, or minimum output
        codes, ⌈log₂ K⌉ tasks (:func:`task_codes`, :func:`multiclass_log_probabilities`).
    """

    consumes = (DECISION,)

    def __init__(self, multiclass: str = "one_hot") -> None:
        self.multiclass = multiclass

    def build(self, ctx: BuildContext, f: pt.TensorVariable) -> None:
        check_multiclass_rule(self)
        if ctx.predicting:
            return
        positive = (np.asarray(ctx.targets) > 0).astype(np.int64)
        pm.CustomDist("y_obs", f, logp=_logistic_logp, random=_logistic_random,
                      observed=positive, dtype="int64", dims=("sample", "task"))

    def log_likelihood(self, f: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``log sigmoid(y f) = -log(1 + exp(-y f))`` elementwise (overflow-safe)."""
        return -np.logaddexp(0.0, -np.asarray(y) * np.asarray(f))

    @staticmethod
    def probability(f: np.ndarray) -> np.ndarray:
        """``p(y = +1 | f) = sigmoid(f)``."""
        return expit(np.asarray(f))


_GH_NODES, _GH_WEIGHTS = np.polynomial.hermite_e.hermegauss(64)
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(64)
#: the correction sigmoid(s h) - 1{h > 0} is below 4e-18 beyond |s h| = 40
_CORRECTION_HALF_WIDTH = 40.0


def expected_sigmoid(mean: np.ndarray, var: np.ndarray, scale: float) -> np.ndarray:
    """``E[sigmoid(scale · h)]`` for ``h ~ N(mean, var)``, elementwise, to ~1e-10.

    This is the posterior-averaged probability of a normalised Gaussian likelihood
    (``scale = 2/σ²``).  When the sigmoid is smooth on the scale of the posterior
    (``scale·sd < 1``) 64-node Gauss–Hermite is exact to rounding (its error grows with
    ``scale·sd``, the sigmoid's poles at ``±iπ/scale`` nearing the real line: 1e-7 at 3,
    4e-5 at 5); otherwise the
    integral is ``Φ(mean/sd)`` (the step's expectation) plus the expectation of the smooth
    correction ``sigmoid(s h) - 1{h > 0}``, integrated by Gauss–Legendre on each side of 0.
    """
    mean, var = np.broadcast_arrays(np.asarray(mean, float), np.asarray(var, float))
    sd = np.sqrt(np.maximum(var, 0.0))
    out = np.empty(mean.shape)
    point = sd == 0.0
    out[point] = expit(scale * mean[point])
    smooth = ~point & (scale * sd < 1.0)
    if smooth.any():
        h = mean[smooth][..., None] + sd[smooth][..., None] * _GH_NODES
        out[smooth] = expit(scale * h) @ _GH_WEIGHTS / np.sqrt(2 * np.pi)
    sharp = ~point & ~smooth
    if sharp.any():
        m, s = mean[sharp][..., None], sd[sharp][..., None]
        half = _CORRECTION_HALF_WIDTH / scale
        h = 0.5 * half * (_GL_NODES + 1.0)  # nodes on (0, half)
        density_pos = stats.norm.pdf(h, m, s)
        density_neg = stats.norm.pdf(-h, m, s)
        # sigmoid(s h) - 1 = -sigmoid(-s h) for h > 0; sigmoid(-s h) - 0 for h < 0
        correction = (expit(-scale * h) * (density_neg - density_pos)) @ _GL_WEIGHTS * 0.5 * half
        out[sharp] = stats.norm.cdf(mean[sharp] / sd[sharp]) + correction
    return np.clip(out, 0.0, 1.0)


def log_expected_sigmoid(mean: np.ndarray, var: np.ndarray, scale: float) -> np.ndarray:
    """``log E[sigmoid(scale · h)]``, stable where the probability underflows.

    Exact ``log sigmoid`` for a point mass; otherwise the log of :func:`expected_sigmoid`
    (accurate relative to its own size down to ~1e-300, since the step's expectation and the
    correction never cancel in the tails), and ``log Φ(mean/sd)`` where even that underflows.
    """
    mean, var = np.broadcast_arrays(np.asarray(mean, float), np.asarray(var, float))
    out = np.empty(mean.shape)
    point = var <= 0.0
    out[point] = -np.logaddexp(0.0, -scale * mean[point])
    p = expected_sigmoid(mean[~point], var[~point], scale)
    with np.errstate(divide="ignore"):
        logp = np.log(p)
    tail = p <= 0.0
    logp[tail] = log_ndtr(mean[~point][tail] / np.sqrt(var[~point][tail]))
    out[~point] = logp
    return out
