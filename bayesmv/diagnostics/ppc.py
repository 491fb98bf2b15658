"""Posterior predictive checks and calibration of a fitted bayesmv classifier.

Replicated labels are drawn from the model's own normalised likelihood at each posterior draw
(for hinge models ``p(y|f) ∝ exp(-2C·max(0, 1 - y f))`` over ``y ∈ {±1}``; for least squares
the Gaussian normalised over the targets ±1; for the logistic model the sigmoid), through the
estimator's ``_class_probability_draws``.  A test statistic whose observed value is extreme
among its replications (a Bayesian p-value near 0 or 1) is something the model does not
reproduce.  Calibration (Brier score, log-loss, expected calibration error, reliability curve)
is computed on ``predict_proba`` with scikit-learn.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sklearn.calibration import calibration_curve
from sklearn.metrics import brier_score_loss, log_loss

from bayesmv.diagnostics.html_tables import frame_html
from bayesmv.params import renamed_argument

#: a p-value outside [EXTREME, 1 - EXTREME] is reported
EXTREME = 0.025


@dataclass
class Calibration:
    """Calibration of predicted probabilities against labels.

    Attributes
    ----------
    brier : float
        ``sklearn.metrics.brier_score_loss`` (binary: of ``classes[1]``'s probability;
        multi-class: the multi-class Brier score, a sum over classes).
    log_loss : float
        ``sklearn.metrics.log_loss``.
    ece : float
        Expected calibration error over the reliability curve's bins:
        ``Σ_b (n_b / n) |observed_b - predicted_b|``.
    reliability : pandas.DataFrame
        One row per non-empty bin: ``prob_pred`` and ``prob_true`` exactly as
        ``sklearn.calibration.calibration_curve(strategy="uniform")`` returns them, and
        ``count``.
    target : str
        What the curve is about: the probability of ``classes[1]`` (binary) or the top-label
        confidence (multi-class: predicted probability of the predicted class vs. whether it
        was right).
    n_bins : int
    """

    brier: float
    log_loss: float
    ece: float
    reliability: pd.DataFrame
    target: str
    n_bins: int

    def as_series(self) -> pd.Series:
        return pd.Series({"Brier score": self.brier, "log-loss": self.log_loss,
                          f"ECE ({self.n_bins} bins)": self.ece})


def _label_indices(y, classes: np.ndarray, n: int) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != n:
        raise ValueError(f"y must be 1-D with one label per row of X ({n}), got shape {y.shape}")
    index = {c: i for i, c in enumerate(classes.tolist())}
    try:
        return np.array([index[c] for c in y.tolist()], dtype=np.intp)
    except KeyError as exc:
        raise ValueError(f"y holds the label {exc.args[0]!r}, which the model was not fitted "
                         f"on (classes_ = {classes.tolist()})") from None


def calibration(y, proba: np.ndarray, classes, n_bins: int = 10) -> Calibration:
    """Brier score, log-loss, expected calibration error and reliability curve.

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        True labels (values of ``classes``).
    proba : ndarray of shape (n_samples, n_classes)
        Predicted probabilities, columns in the order of ``classes``.
    classes : array-like
        The class labels (an estimator's ``classes_``).
    n_bins : int, default 10
        Equal-width probability bins of the reliability curve and the ECE.
    """
    classes = np.asarray(classes)
    proba = np.asarray(proba, dtype=float)
    if proba.ndim != 2 or proba.shape[1] != len(classes):
        raise ValueError(f"proba must have shape (n_samples, {len(classes)}), got {proba.shape}")
    if not isinstance(n_bins, int | np.integer) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    idx = _label_indices(y, classes, len(proba))
    y = classes[idx]
    if len(classes) == 2:
        brier = brier_score_loss(idx == 1, proba[:, 1])
        outcome, predicted = (idx == 1).astype(float), proba[:, 1]
        target = f"probability of class {classes.tolist()[1]}"
    else:
        brier = brier_score_loss(y, proba, labels=classes)
        top = np.argmax(proba, axis=1)
        outcome, predicted = (top == idx).astype(float), proba[np.arange(len(idx)), top]
        target = "top-label confidence (probability of the predicted class)"
    loss = log_loss(y, proba, labels=classes)
    predicted = np.clip(predicted, 0.0, 1.0)
    prob_true, prob_pred = calibration_curve(outcome, predicted, n_bins=n_bins,
                                             strategy="uniform")
    # the bins of calibration_curve(strategy="uniform"), to count the rows in each
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    counts = np.bincount(np.searchsorted(edges[1:-1], predicted), minlength=n_bins)
    counts = counts[counts > 0]
    ece = float(np.sum(counts * np.abs(prob_true - prob_pred)) / len(predicted))
    reliability = pd.DataFrame({"prob_pred": prob_pred, "prob_true": prob_true,
                                "count": counts})
    return Calibration(brier=float(brier), log_loss=float(loss), ece=ece,
                       reliability=reliability, target=target, n_bins=n_bins)


@dataclass
class PPCReport:
    """Outcome of :func:`posterior_predictive_check`.

    Attributes
    ----------
    statistics : pandas.DataFrame
        One row per test statistic T: ``observed`` T(y), the mean and sd of T over the
        replications, ``p_value`` = P(T(y_rep) ≥ T(y)) and ``p_value_mid`` = P(T(y_rep) >
        T(y)) + ½ P(T(y_rep) = T(y)) (the statistics are discrete; the mid-p value is the
        one that is uniform when the model is right), and ``n_valid`` (replications where T
        is defined).
    calibration : Calibration
        Brier score, log-loss, ECE and the reliability curve of ``predict_proba``.
    accuracy : float
        Accuracy of ``predict`` on (X, y).
    n_samples, n_draws, n_replications : int
        Rows checked, posterior draws available, labels replicated.
    classes : ndarray
    warnings : list of str
        Statistics with extreme p-values, as sentences.
    y_rep : ndarray of shape (n_replications, n_samples)
        The replicated labels.
    y_pred : ndarray of shape (n_samples,)
        The estimator's predictions (``predict(X)``), on which ``accuracy`` is computed.
    """

    statistics: pd.DataFrame
    calibration: Calibration
    accuracy: float
    n_samples: int
    n_draws: int
    n_replications: int
    classes: np.ndarray
    warnings: list[str] = field(default_factory=list)
    y_rep: np.ndarray | None = field(default=None, repr=False)
    y_pred: np.ndarray | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        """No statistic has an extreme p-value."""
        return not self.warnings

    def __repr__(self) -> str:
        c = self.calibration
        lines = [f"PPCReport [{'OK' if self.ok else 'CHECK'}] {self.n_samples} rows, "
                 f"{self.n_replications} replications from {self.n_draws} posterior draws",
                 f"  accuracy {self.accuracy:.4f}; Brier {c.brier:.4f}, log-loss "
                 f"{c.log_loss:.4f}, ECE {c.ece:.4f}"]
        table = self.statistics[["observed", "rep_mean", "rep_sd", "p_value", "p_value_mid"]]
        lines += ["  " + row for row in table.to_string(float_format="{:.3f}".format)
                  .splitlines()]
        lines += [f"  - {w}" for w in self.warnings]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        c = self.calibration
        items = "".join(f"<li>{html.escape(w)}</li>" for w in self.warnings)
        return (f"<div class='bayesmv-ppc'><p><b>PPCReport: {'OK' if self.ok else 'CHECK'}</b>"
                f" ({self.n_samples} rows, {self.n_replications} replications from "
                f"{self.n_draws} posterior draws)</p>"
                + frame_html(self.statistics, float_format=lambda x: f"{x:.3f}")
                + (f"<ul>{items}</ul>" if items else "")
                + f"<p>Calibration of {html.escape(c.target)}:</p>"
                + frame_html(c.as_series().to_frame("value"),
                             float_format=lambda x: f"{x:.4f}")
                + "</div>")


def _statistics(labels: np.ndarray, pred: np.ndarray, n_classes: int) -> dict[str, np.ndarray]:
    """Test statistics of label indices ``labels`` (..., n) given fixed predictions (n,)."""
    out = {"accuracy": np.mean(labels == pred, axis=-1)}
    for k in range(n_classes):
        is_k = labels == k
        count = is_k.sum(axis=-1)
        out[f"balance[{k}]"] = count / labels.shape[-1]
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"error[{k}]"] = np.where(count > 0,
                                          np.sum(is_k & (pred != k), axis=-1) / count, np.nan)
    return out


def posterior_predictive_check(estimator, X, y, *, n_replications: int = 1000,
                               n_bins: int = 10,
                               random_seed: int | np.random.Generator | None = 0,
                               proba: np.ndarray | None = None,
                               random_state: int | np.random.Generator | None = None
                               ) -> PPCReport:
    """Posterior predictive check and calibration of a fitted classifier on (X, y).

    For each replication r a posterior draw s (cycling through the draws) gives class
    probabilities ``q_s`` (the model's normalised likelihood, from
    ``estimator._class_probability_draws``) and labels ``y_rep ~ Categorical(q_s)``.  Test
    statistics, with the model's predictions ``ŷ = estimator.predict(X)`` held fixed:

    - ``accuracy``: the fraction of rows where the label equals ŷ;
    - ``balance[c]``: the fraction of rows labelled c;
    - ``error[c]``: the fraction of rows labelled c that ŷ gets wrong.

    Parameters
    ----------
    estimator : fitted bayesmv classifier
    X : views as the estimator accepts them
    y : array-like of shape (n_samples,)
    n_replications : int, default 1000
        Replicated label vectors (at least one per posterior draw is not required: a MAP fit
        has one draw, an ensemble one per mode, and is replicated from them in turn).
    n_bins : int, default 10
        Bins of the reliability curve and the expected calibration error.
    random_seed : int, Generator or None, default 0
        Seed of the replications.
    proba : ndarray of shape (n_samples, n_classes), optional
        ``estimator.predict_proba(X)``, when the caller has it already (for M3LAK computing it
        is a pass over every posterior draw); by default it is computed here.
    random_state : int, Generator or None
        Deprecated alias of ``random_seed``.

    Returns
    -------
    PPCReport
    """
    if not isinstance(n_replications, int | np.integer) or n_replications < 1:
        raise ValueError(f"n_replications must be a positive integer, got {n_replications!r}")
    classes = np.asarray(estimator.classes_)
    q = np.asarray(estimator._class_probability_draws(X), dtype=float)
    if q.ndim != 3 or q.shape[2] != len(classes):
        raise ValueError(f"{type(estimator).__name__}._class_probability_draws returned shape "
                         f"{q.shape}; expected (n_draws, n_samples, {len(classes)})")
    if not np.allclose(q.sum(axis=2), 1.0, atol=1e-6) or np.any(q < 0):
        raise ValueError("class probability draws must be non-negative and sum to 1 per row")
    S, n, K = q.shape
    idx = _label_indices(y, classes, n)
    proba = np.asarray(estimator.predict_proba(X) if proba is None else proba, dtype=float)
    if proba.shape != (n, K):
        raise ValueError(f"proba must have shape {(n, K)} (predict_proba of X), got "
                         f"{proba.shape}")
    if _predicts_by_argmax(estimator):
        # the same labels predict(X) would give, without computing predict_proba(X) again
        # (for M3LAK that is a pass over every posterior draw)
        pred_labels = classes[np.argmax(proba, axis=1)]
    else:
        pred_labels = np.asarray(estimator.predict(X))
    pred = _label_indices(pred_labels, classes, n)

    rng = np.random.default_rng(renamed_argument("posterior_predictive_check", "random_seed",
                                                 random_seed, "random_state", random_state))
    R = int(n_replications)
    draw_of = np.arange(R) % S
    # Categorical draws by inverse CDF: y_rep = #{k : u > cumsum_k}
    cdf = np.cumsum(q, axis=2)
    cdf[..., -1] = 1.0
    y_rep = np.empty((R, n), dtype=np.intp)
    step = max(1, 2_000_000 // max(1, n * K))
    for lo in range(0, R, step):
        sl = slice(lo, min(R, lo + step))
        u = rng.random((sl.stop - sl.start, n, 1))
        y_rep[sl] = np.sum(u > cdf[draw_of[sl]], axis=2)
    y_rep = np.minimum(y_rep, K - 1)

    observed = _statistics(idx, pred, K)
    replicated = _statistics(y_rep, pred, K)
    rows = {}
    for name, t_obs in observed.items():
        t_rep = replicated[name]
        valid = np.isfinite(t_rep)
        tr = t_rep[valid]
        if not np.isfinite(t_obs) or not len(tr):
            rows[name] = (float(t_obs), np.nan, np.nan, np.nan, np.nan, int(valid.sum()))
            continue
        tol = 1e-12
        greater, equal = np.mean(tr > t_obs + tol), np.mean(np.abs(tr - t_obs) <= tol)
        rows[name] = (float(t_obs), float(tr.mean()), float(tr.std()), float(greater + equal),
                      float(greater + 0.5 * equal), int(valid.sum()))
    stats = pd.DataFrame.from_dict(
        rows, orient="index",
        columns=["observed", "rep_mean", "rep_sd", "p_value", "p_value_mid", "n_valid"])
    stats.index = [_readable(name, classes) for name in stats.index]
    stats.index.name = "statistic"

    messages = []
    for name, row in stats.iterrows():
        p = row["p_value_mid"]
        if np.isfinite(p) and (p < EXTREME or p > 1 - EXTREME):
            side = "higher" if p < 0.5 else "lower"
            messages.append(f"{name}: observed {row['observed']:.3f} is {side} than the model "
                            f"replicates ({row['rep_mean']:.3f} ± {row['rep_sd']:.3f}; mid "
                            f"p-value {p:.3f}).")
    return PPCReport(statistics=stats, calibration=calibration(classes[idx], proba, classes,
                                                               n_bins),
                     accuracy=float(np.mean(pred == idx)), n_samples=n, n_draws=S,
                     n_replications=R, classes=classes, warnings=messages,
                     y_rep=classes[y_rep], y_pred=pred_labels)


def _predicts_by_argmax(estimator) -> bool:
    """Whether ``predict`` is the base class's ``classes_[argmax(predict_proba)]``."""
    from bayesmv.models.base import BaseMultiViewClassifier

    predict = getattr(type(estimator), "predict", None)
    return predict is BaseMultiViewClassifier.predict


def _readable(name: str, classes: np.ndarray) -> str:
    if "[" not in name:
        return name
    stem, k = name[:-1].split("[")
    return f"{stem}[{classes[int(k)]}]"
