"""MVL-SVM: multi-view landmark-based SVM (Zantedeschi, Emonet & Sebban, ECML 2018) as a
Bayesian model."""

from __future__ import annotations

import numbers
import time
from collections.abc import Callable
from typing import Any

import arviz as az
import numpy as np
import xarray as xr

from bayesmv.builder import BuiltModel, ModelBuilder
from bayesmv.components import HingeLikelihood, SumCombiner
from bayesmv.components.landmarks import (
    LandmarkFeatures,
    LandmarkMap,
    MissingBlocks,
    _check_gamma,
)
from bayesmv.components.likelihoods import (
    hinge_decision_value,
    hinge_log_pseudolikelihood,
    one_hot_probabilities,
)
from bayesmv.data import MultiViewData, ViewStandardizer, label_tasks
from bayesmv.diagnostics.convergence import check_convergence, warn_if_not_converged
from bayesmv.inference.svm import (
    HINGE_COST_GRID,
    N_QUADRATURE,
    fit_link_constant,
    fit_svm_map,
    held_out_link_fits,
    hinge_mixture_log_probabilities,
    out_of_fold_decision_values,
    run_hinge_gibbs,
)
from bayesmv.models.base import BaseMultiViewClassifier, register
from bayesmv.models.fitted_graph import FittedGraphMixin
from bayesmv.params import check_positive

_POSITIVE_INT = ("draws", "chains")
#: bound on draws × rows × tasks held at once at prediction time
_PREDICT_CHUNK = 4_000_000
#: candidates of ``C="auto"`` (:data:`~bayesmv.inference.svm.HINGE_COST_GRID`)
C_GRID = HINGE_COST_GRID
#: how the calibration went when a class has too few rows for stratified folds
_TOO_FEW_ROWS = "none (a class has fewer than 2 rows)"


@register
class MVLSVM(FittedGraphMixin, BaseMultiViewClassifier):
    """Multi-view landmark-based SVM with a Bayesian reading and missing-view imputation.

    Each view of a sample is compared with ``L`` landmarks (training rows with every view)
    through an RBF similarity; a linear classifier on the ``L·V`` similarities,
    ``f(x) = θᵀ μ_L(x) + b``, minimises the paper's ``½||θ||² + (C/N) Σ_n max(0, 1 - y_n f_n)``
    with the bias unpenalised.  As a Bayesian model: ``θ ~ N(0, I)``, a flat prior
    on ``b`` and the pseudo-likelihood ``exp(-(C/N)·hinge)`` — the builder's
    ``HingeLikelihood`` with its constant ``C/(2N)`` — so the MAP is the SVM solution and the
    Polson–Scott augmentation gives an exact Gibbs sampler.  Multi-class problems are
    one-vs-rest (one θ and b per class).  By default (``whiten=True``) each view's
    similarities are first multiplied by ``K_v⁺ᐟ²``, the inverse square root of the
    landmarks' own Gram matrix, so that ``θ ~ N(0, I)`` makes each view's part of f the
    Gaussian process with the Nyström kernel ``k_v(x, L) K_v⁺ k_v(L, x')`` and the MAP the SVM
    with the sum of the views' Nyström kernels; ``whiten=False`` is the paper's classifier.

    Class probabilities are the normalised hinge likelihood (Sollich 2002),
    ``p(y = +1 | f) = sigmoid(2c·(f + clip(f, -1, 1)))``, whose constant c ``fit`` learns from
    held-out decision values (calibration, see Notes) instead of keeping the
    pseudo-likelihood's ``C/(2N)``, which says nothing about how often a decision is right.

    Parameters
    ----------
    n_landmarks : int or "auto", default "auto"
        Number L of landmarks, drawn uniformly from the training rows that have every view.
        More than the number of training rows is a ValueError; when fewer rows than L have
        every view, all of them are used (with a warning).  ``"auto"``: 200, or every row
        with every view when there are fewer.  Against the former default 50, on the UCI
        digits (six views, splits other than the benchmark's) 100–200 landmarks were 0.5–1.5
        points more accurate on 10 classes and on 0–4 vs 5–9 and no worse on pairs, at
        about 1 s per fit.
    C : float or "auto", default "auto"
        The paper's cost c of the averaged hinge loss (scikit-learn's ``SVC(C=C/N)``).  The
        paper tuned it over 1e-3 … 1e4.  With the 1/N scaling a small C regularises hard at
        any realistic N: on UCI digit pairs (N = 300, 50 landmarks) C = 1 gave 94–96 %
        accuracy on 3 vs 5 and 1 vs 7, C = 100 gave 98–99 % (scikit-learn's RBF SVC: 99 %).
        ``"auto"`` chooses it inside ``fit`` from ``C_GRID`` (10, 100, 1000, 10 000) by the
        held-out log-likelihood of the calibrated probabilities on the calibration folds
        (``calibration_cv``; see Notes): the criterion the probabilities are fitted by, on
        decision values of rows each candidate's SVM did not see.  The chosen value is
        ``C_``; a Gibbs fit samples with it.
    gamma : None, float or sequence of float
        RBF precision γ_v of ``exp(-γ_v ||x_v - l_v||²)`` per view; None is the paper's
        radius √D_v (γ_v = 1/D_v, on standardised views when ``standardize``).
    inference : {"map", "gibbs"}, default "map"
        ``"map"``: the SVM solution (libsvm's SMO on the shared linear Gram matrix: the exact
        unpenalised-bias SVM).  ``"gibbs"``: the full posterior by the augmented Gibbs sampler
        (λ | f, then (θ, b) | λ, then unknown similarity blocks) inside ``pm.sample``.
    draws, tune, chains : int
        Gibbs draws kept and discarded per chain, and the number of chains.
    impute : {"landmarks", "bayes", "zero", None}, default "landmarks"
        Missing views (a whole row of NaN in a view), in training and at prediction:
        ``"landmarks"`` — the paper's eq. 11 (least squares on the landmark projections);
        ``"bayes"`` — the missing similarity blocks are unknowns with the Gaussian prior of
        eq. 11 read probabilistically (``μ = rP + ε``, variances by empirical Bayes):
        sampled jointly with θ under ``"gibbs"``, set to their conditional mean (a ridge
        eq. 11) for the ``"map"`` fit, and integrated out in ``predict_proba``;
        ``"zero"`` — similarity 0 (the no-imputation baseline); None — an error.
    random_seed : int or None
        Seed of the landmark draw and the sampler: the same seed gives the same fit.
    cores : int or None
        Processes for the Gibbs chains (one per chain up to the CPU count when None).
    tol : float, default 1e-4
        libsvm's stopping tolerance for the MAP.
    progressbar : bool, default False
        Show PyMC's progress bar (Gibbs).
    view_sizes : sequence of int or None
        When X is one 2-D array, the widths of its consecutive views (for scikit-learn's
        splitters, ``GridSearchCV``, ``cross_val_score``); one may be -1, the columns the
        others leave (:func:`bayesmv.data.check_views`).
    standardize : bool, default True
        Standardise each view on the observed training rows before the similarities.
    whiten : bool, default True
        Whiten each view's similarities by ``K_v⁺ᐟ²`` (see above; eigenvalues of ``K_v`` below
        1e-10 of the largest are dropped).  Raw similarities penalise ``θᵀθ``, i.e. fit the
        kernel ``Σ_v μ_v μ_vᵀ`` (each view's Gram matrix squared, through the landmarks),
        which over-weights the directions that many landmarks share.  On UCI digit tasks
        (five 80/20 splits, seeds 200-204, not the benchmark's) whitening lowered the Brier
        score on 3 vs 5 from 0.0228 to 0.0151 (accuracy 0.965 → 0.973), on ten digits from
        0.0227 to 0.0154 and on 0–4 vs 5–9 from 0.0115 to 0.0092, was equal or better on the
        other pairs, and on breast cancer as three views 0.968 / 0.0230 against 0.970 / 0.0216.
    calibration_cv : int or None, default 5
        Folds of the cross-validation that calibrates the MAP's probabilities:
        ``StratifiedKFold(calibration_cv, shuffle=True, random_state=random_seed)``, with
        fewer folds when a class has fewer rows and none below two rows per class.  A Gibbs
        fit calibrates by PSIS-LOO instead whenever this is not None.  None keeps the
        pseudo-likelihood's constant ``C/(2N)``.

    Attributes
    ----------
    classes_ : ndarray
        Class labels.
    idata_ : arviz.InferenceData
        ``posterior``: ``beta`` (θ, task × feature), ``bias``, ``f`` at the training points —
        one chain × one draw for the MAP; ``constant_data``: the landmarks.
    feature_map_ : LandmarkMap
        The fitted landmark map (``transform`` is its features).
    landmark_indices_ : ndarray of int
        Training rows used as landmarks.
    convergence_ : ConvergenceReport
        Diagnostics on ``f`` and the biases (a MAP's report is empty and ``ok``).
    link_constant_ : float
        The calibrated constant c of ``predict_proba``'s hinge probability.
    C_ : float
        The hinge cost used: ``C``, or the one ``C="auto"`` chose.
    builder_, model_ :
        The fitted model as a :class:`~bayesmv.ModelBuilder` (``make_builder`` with what the
        fit chose fixed) and its ``pm.Model`` on the training rows, for PyMC's own tools
        (:class:`~bayesmv.models.fitted_graph.FittedGraphMixin`).

    Notes
    -----
    *Calibration.*  The pseudo-likelihood's strength per sample is C/N, so its normalised
    probabilities are close to uniform when C/N ≪ 1 (Brier 0.249 on the digits 3 vs 5 at
    C = 1, where scikit-learn's Platt-scaled SVC has 0.014) and overconfident when C/N is
    large.  ``fit`` therefore learns the constant c of the probability from decision values of
    rows that the fit did not see, by maximising their log-likelihood under Platt's smoothed
    targets ``(N₊ + 1)/(N₊ + 2)`` and ``1/(N₋ + 2)`` (Platt 1999), one c shared by all
    one-vs-rest tasks:

    - MAP: out-of-fold decision values, as scikit-learn's ``CalibratedClassifierCV`` with
      ``ensemble=False`` — the SVM is refitted on ``calibration_cv`` stratified folds
      (landmarks and imputation prior, which do not see labels, are the full fit's), each
      held-out row keeps its fold's decision value (integrated over its unknown blocks under
      ``impute="bayes"``), and the model itself is the fit on all rows;
    - Gibbs: each training row's leave-one-out posterior predictive by Pareto-smoothed
      importance sampling (Vehtari et al. 2017) of the draws, whose weights are the inverse
      pseudo-likelihood of the row (no refits).

    The calibrated probability is the hinge likelihood with only c changed, so a MAP's
    decision boundary stays the SVM's (``f = 0``) and, for one-vs-rest, the shared c keeps
    the largest ``f`` the most probable class.  ``decision_function`` is the moderated
    decision value: the ``f`` whose calibrated probability is the posterior-averaged one
    (for a MAP and rows with every feature known, ``f`` itself), so it ranks and signs rows
    exactly as ``predict_proba`` and ``predict`` do.

    *Mixing.*  The Gibbs sampler is exact, but the augmentation pins each training point's f
    near its current value with a precision that grows with C/N, so mixing slows as C/N
    grows: on the UCI digits (N = 1600) 500 draws give R-hat ≤ 1.1 at C = 100 and R-hat ≈ 2
    at the cross-validated C = 1e4 (``benchmarks/mvlsvm.py``); the diagnostics in
    ``convergence_`` say so.  Under ``impute="bayes"`` the MAP fit uses the blocks'
    conditional means: a joint MAP over θ and the unknown blocks would let the labels move
    each block to wherever its row clears the margin, so incomplete rows would stop costing
    anything.

    Examples
    --------
    >>> from bayesmv import MVLSVM
    >>> from bayesmv.datasets import load_multiple_features
    >>> views, y = load_multiple_features()
    >>> est = MVLSVM(n_landmarks=50, random_seed=0).fit(views, y)  # doctest: +SKIP
    """

    def __init__(
        self,
        n_landmarks: int | str = "auto",
        C: float | str = "auto",
        gamma: Any = None,
        inference: str = "map",
        draws: int = 500,
        tune: int = 500,
        chains: int = 2,
        impute: str | None = "landmarks",
        random_seed: int | None = None,
        cores: int | None = None,
        tol: float = 1e-4,
        progressbar: bool = False,
        view_sizes: tuple[int, ...] | None = None,
        standardize: bool = True,
        calibration_cv: int | None = 5,
        whiten: bool = True,
    ) -> None:
        self.n_landmarks = n_landmarks
        self.C = C
        self.gamma = gamma
        self.inference = inference
        self.draws = draws
        self.tune = tune
        self.chains = chains
        self.impute = impute
        self.random_seed = random_seed
        self.cores = cores
        self.tol = tol
        self.progressbar = progressbar
        self.view_sizes = view_sizes
        self.standardize = standardize
        self.calibration_cv = calibration_cv
        self.whiten = whiten

    # --------------------------------------------------------------- checks
    def _validate_params(self) -> None:
        check_positive("tol", self.tol)
        if isinstance(self.C, str):
            if self.C != "auto":
                raise ValueError(f"C must be a positive number or 'auto', got {self.C!r}")
            if self.calibration_cv is None:
                raise ValueError("C='auto' chooses C on the calibration folds; with "
                                 "calibration_cv=None give C as a number")
        else:
            check_positive("C", self.C)
        for name in _POSITIVE_INT:
            check_positive(name, getattr(self, name), integer=True)
        if not isinstance(self.tune, numbers.Integral) or isinstance(self.tune, bool) \
                or self.tune < 0:
            raise ValueError(f"tune must be a non-negative integer, got {self.tune!r}")
        check_positive("cores", self.cores, integer=True, allow_none=True)
        if self.calibration_cv is not None and (
                isinstance(self.calibration_cv, bool)
                or not isinstance(self.calibration_cv, numbers.Integral)
                or self.calibration_cv < 2):
            raise ValueError("calibration_cv must be None or an integer >= 2, got "
                             f"{self.calibration_cv!r}")
        if not isinstance(self.whiten, bool | np.bool_):
            raise ValueError(f"whiten must be True or False, got {self.whiten!r}")
        if self.inference not in ("map", "gibbs"):
            raise ValueError(f"inference must be 'map' or 'gibbs', got {self.inference!r}")
        self._landmark_map().validate()  # n_landmarks and impute
        if self.gamma is not None and not isinstance(self.gamma, numbers.Real | list | tuple
                                                     | np.ndarray):
            raise ValueError(f"gamma must be None, a positive number or one per view, "
                             f"got {self.gamma!r}")

    # ------------------------------------------------------------- builder
    def _landmark_map(self, random_seed: Any = None, n_landmarks: int | None = None,
                      indices: np.ndarray | None = None) -> LandmarkFeatures:
        L = self.n_landmarks if n_landmarks is None else n_landmarks
        return LandmarkFeatures(L, self.gamma, self.impute, random_seed=random_seed,
                                indices=indices, whiten=bool(self.whiten))

    def _seeds(self) -> tuple[int, int]:
        """Integer seeds of the landmark draw and of the sampler.  Integers, not generators,
        so that the builder's landmark piece (``make_builder``) draws the landmarks ``fit``
        draws in any estimator that fits it (a generator would be advanced, or replaced by
        an integer drawn from it, on the way)."""
        landmarks, sampler = np.random.SeedSequence(self.random_seed).spawn(2)
        return int(landmarks.generate_state(1)[0]), int(sampler.generate_state(1)[0])

    def make_builder(self, n_samples: int, feature_map: LandmarkMap | None = None,
                     C: float | None = None, link_constant: float | None = None
                     ) -> ModelBuilder:
        """The model graph: landmarks → θ ~ N(0, I) with a flat bias → hinge ``exp(-(C/N)·…)``.

        Parameters
        ----------
        n_samples : int
            N, the number of training rows (the pseudo-likelihood's exponent is C/N).
        feature_map : LandmarkMap, optional
            A fitted landmark map whose landmarks the builder's piece takes (``indices``); by
            default the piece draws them at build time.
        C : float, optional
            The hinge cost; by default ``C``.  With ``C="auto"`` (and no C here) the hinge's
            constant is left None for the composed estimator's
            ``MultiViewClassifier(criterion="heldout")`` to choose as ``fit`` does.
        link_constant : float, optional
            The probability's constant (a fitted model's ``link_constant_``); by default the
            pseudo-likelihood's own, ``C/(2N)``.
        """
        if feature_map is None:
            piece = self._landmark_map(random_seed=self._seeds()[0])
        else:
            piece = self._landmark_map(n_landmarks=feature_map.n_landmarks_,
                                       indices=feature_map.landmark_indices_)
        if C is None and not isinstance(self.C, str):
            C = self.C
        return ModelBuilder(None, piece, SumCombiner(prior_precision=1.0, flat_bias=True),
                            HingeLikelihood(None if C is None else C / (2.0 * n_samples),
                                            link_constant))

    def _fitted_builder(self) -> ModelBuilder:
        return self.make_builder(int(self.idata_.observed_data["y"].size), self.feature_map_,
                                 self.C_, self.link_constant_)

    def _prepare_training(self, X, y):
        self._validate_params()
        data, classes, y_index = self._validate_training_data(X, y)
        _check_gamma(self.gamma, data.view_sizes)
        L = self._landmark_map().resolved_n_landmarks(data)
        if L > data.n_samples:
            raise ValueError(f"n_landmarks={self.n_landmarks} is more than the {data.n_samples} "
                             f"training rows; give at most {data.n_samples}")
        self._landmark_map(n_landmarks=L).check_imputable(data, "X")
        standardizer = ViewStandardizer().fit(data) if self.standardize else None
        if standardizer is not None:
            data = standardizer.transform(data)
        targets = label_tasks(y_index, len(classes))
        fmap = self._landmark_map(random_seed=self._seeds()[0], n_landmarks=L).fit_state(data)
        return data, classes, y_index, standardizer, targets, fmap

    def build_model(self, X, y, *, augmented: bool = False) -> BuiltModel:
        """Validate and standardise (X, y), draw the landmarks and build the ``pm.Model``.

        The landmarks are those ``fit`` draws with the same ``random_seed``, and so is C
        (``C="auto"`` runs ``fit``'s choice).  ``augmented`` keeps the hinge's λ explicit (the
        joint the Gibbs steps are derived from).
        """
        data, classes, y_index, standardizer, targets, fmap = self._prepare_training(X, y)
        C = self.C
        if C == "auto":
            C = self._choose_C(fmap, *_features(fmap, data), targets, y_index)[0]
        built = self.make_builder(data.n_samples, fmap, C).build(data, targets,
                                                                 augmented=augmented)
        built.classes, built.y_index, built.standardizer = classes, y_index, standardizer
        return built

    # ------------------------------------------------------------------ fit
    def fit(self, X, y) -> MVLSVM:
        """Fit on training views ``X`` and labels ``y``, then calibrate the probabilities.

        Parameters
        ----------
        X : list of array-like (one (n_samples, D_v) array per view), or one 2-D array with
            ``view_sizes``.  A view is missing for a sample when its whole row is NaN.
        y : array-like of shape (n_samples,)
            Class labels.

        Returns
        -------
        self
        """
        data, classes, y_index, standardizer, targets, fmap = self._prepare_training(X, y)
        N = data.n_samples
        C, link, how, selection = self.C, None, "none", None
        if self.inference == "map" or C == "auto":
            Phi, blocks = _features(fmap, data)
        start = time.perf_counter()
        if C == "auto":  # a MAP keeps the winner's link; a Gibbs fit calibrates its draws
            C, link, how, selection = self._choose_C(fmap, Phi, blocks, targets, y_index)
        select_seconds = time.perf_counter() - start
        start = time.perf_counter()
        if self.inference == "map":
            theta, bias, _ = fit_svm_map(Phi, targets, C / N, tol=self.tol)
            f = Phi @ theta.T + bias
            idata = az.from_dict(
                posterior={"beta": theta[None, None], "bias": bias[None, None],
                           "f": f[None, None]},
                coords={"task": np.arange(targets.shape[1]),
                        "feature": np.arange(theta.shape[1]), "sample": np.arange(N)},
                dims={"beta": ["task", "feature"], "bias": ["task"], "f": ["sample", "task"]})
        else:
            built = self.make_builder(N, fmap, C).build(data, targets)
            idata = run_hinge_gibbs(built, draws=self.draws, tune=self.tune, chains=self.chains,
                                    cores=self.cores, random_seed=self._seeds()[1],
                                    trace_vars=["beta", "bias", "f"],
                                    progressbar=self.progressbar)
        elapsed = time.perf_counter() - start
        start = time.perf_counter()
        if self.calibration_cv is not None and (self.inference == "gibbs" or selection is None):
            held_out, how = (self._leave_one_out(idata, targets, C) if self.inference == "gibbs"
                             else self._out_of_fold(fmap, Phi, blocks, targets, y_index, C))
            link = None if held_out is None else fit_link_constant(*held_out,
                                                                   targets=targets)[0]
        if link is None:  # uncalibrated, or a class with fewer than 2 rows
            link = C / (2.0 * N)
        idata.posterior.attrs["inference"] = self.inference  # "map" or "gibbs"
        idata.posterior.attrs["sampling_seconds"] = elapsed
        idata.posterior.attrs["calibration"] = how
        idata.posterior.attrs["calibration_seconds"] = time.perf_counter() - start
        if selection is not None:
            idata.posterior.attrs["C_grid"] = np.asarray(C_GRID)
            idata.posterior.attrs["C_grid_heldout_nll"] = selection
            idata.posterior.attrs["C_selection_seconds"] = select_seconds
        idata.add_groups(observed_data=xr.Dataset({"y": ("sample", y_index),
                                                   "y_tasks": (("sample", "task"), targets)}))
        constants = self._landmark_dataset(fmap, N).assign(link_constant=((), link),
                                                            C=((), float(C)))
        if "constant_data" in idata:  # pm.sample stored the graph's data there
            constants = xr.merge([idata.constant_data, constants], join="outer")
            del idata.constant_data
        idata.add_groups(constant_data=constants)
        convergence = check_convergence(idata)
        # fitted state only now, in one step: a failure above leaves a previous fit intact
        self._commit(classes_=classes, layout_=data.layout,
                     standardizer_=standardizer, idata_=idata, feature_map_=fmap,
                     n_features_in_=int(sum(data.view_sizes)), convergence_=convergence,
                     _graph_inputs=(data, targets), _model=None)
        warn_if_not_converged(convergence)
        return self

    def _choose_C(self, fmap: LandmarkMap, Phi: np.ndarray, blocks: list[MissingBlocks],
                  targets: np.ndarray, y_index: np.ndarray
                  ) -> tuple[float, float | None, str, np.ndarray]:
        """``C="auto"``: the candidate of ``C_GRID`` whose out-of-fold decision values, with
        their own fitted link constant, give the held-out rows the highest log-likelihood of
        Platt's targets.  Returns (C, its link constant, how, the negative log-likelihood per
        candidate); with fewer than 2 rows in a class, the grid's 100 and no link."""
        folds = self._calibration_folds(y_index)
        if folds is None:
            return 100.0, None, _TOO_FEW_ROWS, np.full(len(C_GRID), np.nan)
        links, losses = held_out_link_fits(Phi, targets, y_index, C_GRID, folds,
                                           self.random_seed, tol=self.tol,
                                           spread=_block_spread(fmap, blocks, len(targets)))
        best = int(np.argmin(losses))
        return C_GRID[best], links[best], f"{folds}-fold out-of-fold", np.asarray(losses)

    def _calibration_folds(self, y_index: np.ndarray) -> int | None:
        """Stratified folds of the held-out calibration: ``calibration_cv``, fewer when a
        class has fewer rows, None below 2."""
        folds = min(int(self.calibration_cv), int(np.bincount(y_index).min()))
        return folds if folds >= 2 else None

    def _out_of_fold(self, fmap: LandmarkMap, Phi: np.ndarray, blocks: list[MissingBlocks],
                     targets: np.ndarray, y_index: np.ndarray, C: float
                     ) -> tuple[tuple | None, str]:
        """Each training row's decision value (and spread over its unknown blocks) from the
        SVM fitted on the stratified folds that leave it out: ``((f, sd, log_w), how)``."""
        folds = self._calibration_folds(y_index)
        if folds is None:
            return None, _TOO_FEW_ROWS
        f, sd = out_of_fold_decision_values(Phi, targets, y_index, C, folds, self.random_seed,
                                            tol=self.tol,
                                            spread=_block_spread(fmap, blocks, len(targets)))
        return (f, sd, np.zeros((1, 1, 1))), f"{folds}-fold out-of-fold"

    def _leave_one_out(self, idata: az.InferenceData, targets: np.ndarray, C: float
                       ) -> tuple[tuple, str]:
        """The training decision draws with each row's PSIS-LOO log weights (draws, rows, 1):
        the importance ratio of leaving row n out is ``1 / ℓ(y_n | f_n)``."""
        N, T = targets.shape
        f = idata.posterior["f"].values.reshape(-1, N, T)
        log_ratio = -hinge_log_pseudolikelihood(f, targets, C / (2.0 * N)).sum(axis=2)
        log_w, _ = az.psislw(log_ratio.T)
        return (f, None, log_w.T[:, :, None]), "PSIS-LOO"

    @staticmethod
    def _landmark_dataset(fmap: LandmarkMap, n_train: int) -> xr.Dataset:
        data = {"landmark_indices": ("landmark", fmap.landmark_indices_),
                "gamma": ("view", fmap.gamma_), "n_train": ((), n_train),
                "whiten": ((), int(fmap.whiten))}
        for v, lm in enumerate(fmap.landmarks_):
            data[f"landmarks_{v}"] = (("landmark", f"view{v}_dim"), lm)
        if fmap.impute == "bayes":
            data["imputation_prior"] = ("imputation_param",
                                        np.array([fmap.coef_var_, fmap.noise_var_]))
        return xr.Dataset(data)

    def _prediction_constants(self) -> set[str]:
        # the landmark piece and the calibrated link; a Gibbs fit's graph data (the training
        # rows' landmark features) is training data
        names = set(map(str, self._landmark_dataset(self.feature_map_, self.n_train_).data_vars))
        return names | {"link_constant", "C"}

    def _set_extra_state(self, state: dict[str, Any]) -> None:
        const = self.idata_.constant_data
        n_views = int(const["gamma"].size)
        prior = ((float(x) for x in const["imputation_prior"].values) if self.impute == "bayes"
                 else (None, None))
        # a fit saved before whitening existed has no flag: its similarities were raw
        whiten = bool(const["whiten"]) if "whiten" in const else False
        self.feature_map_ = LandmarkMap(
            const["landmark_indices"].values,
            tuple(const[f"landmarks_{v}"].values for v in range(n_views)),
            const["gamma"].values, self.impute, *prior, whiten=whiten)
        self.convergence_ = check_convergence(self.idata_)

    # ------------------------------------------------------------ fitted info
    @property
    def landmark_indices_(self) -> np.ndarray:
        self._check_fitted()
        return self.feature_map_.landmark_indices_

    @property
    def n_train_(self) -> int:
        self._check_fitted()
        return int(self.idata_.constant_data["n_train"])

    @property
    def C_(self) -> float:
        """The hinge cost of the fit: ``C``, or the candidate ``C="auto"`` chose."""
        self._check_fitted()
        const = self.idata_.constant_data
        return float(const["C"]) if "C" in const else float(self.C)

    @property
    def link_constant_(self) -> float:
        """The calibrated constant c of the hinge probability ``predict_proba`` uses
        (``C/(2N)``, the pseudo-likelihood's own, when ``calibration_cv=None``)."""
        self._check_fitted()
        return float(self.idata_.constant_data["link_constant"])

    @property
    def sampling_time_(self) -> float:
        """Wall-clock seconds of the MAP solve or of ``pm.sample`` (features and calibration
        excluded)."""
        self._check_fitted()
        return float(self.idata_.posterior.attrs["sampling_seconds"])

    # ----------------------------------------------------------- prediction
    def _test_features(self, X) -> tuple[np.ndarray, list[MissingBlocks]]:
        data = self._prepare(X)  # first: it raises NotFittedError before any fitted state is read
        return _features(self.feature_map_, data)

    def transform(self, X) -> np.ndarray:
        """Landmark features of X, (n_samples, L·V), missing blocks imputed (``impute``),
        whitened when ``whiten``."""
        return self._test_features(X)[0]

    def fit_transform(self, X, y) -> np.ndarray:
        """``fit(X, y)``, then the landmark features of ``X`` (scikit-learn's transformer
        API)."""
        return self.fit(X, y).transform(X)

    def _weights(self) -> tuple[np.ndarray, np.ndarray]:
        post = self.idata_.posterior
        beta = post["beta"].values
        bias = post["bias"].values
        return beta.reshape((-1,) + beta.shape[2:]), bias.reshape(-1, bias.shape[-1])

    def _log_predictive(self, X) -> tuple[np.ndarray, np.ndarray]:
        """``log p(y_t = +1)`` and ``log p(y_t = -1)`` at X, (n_samples, n_tasks): the
        calibrated hinge probability averaged over the posterior draws and the unknown blocks."""
        Phi, blocks = self._test_features(X)
        beta, bias = self._weights()
        D, T = bias.shape
        n = Phi.shape[0]
        sd = _block_sd(blocks, self.feature_map_.whitened(beta), n)
        log_w = np.full((D, 1, 1), -np.log(D))
        log_pos, log_neg = np.empty((n, T)), np.empty((n, T))
        step = max(1, _PREDICT_CHUNK // max(1, D * T * (N_QUADRATURE if blocks else 1)))
        for lo in range(0, n, step):
            rows = slice(lo, lo + step)
            f = np.einsum("np,dtp->dnt", Phi[rows], beta) + bias[:, None, :]
            log_pos[rows], log_neg[rows] = hinge_mixture_log_probabilities(
                f, None if sd is None else sd[:, rows], log_w, self.link_constant_)
        return log_pos, log_neg

    def decision_function(self, X) -> np.ndarray:
        """Moderated decision values: the ``f`` whose calibrated hinge probability is
        ``predict_proba``'s (see Notes).

        For a MAP fit and rows whose features are all known (every view, or an imputation
        other than ``"bayes"``) this is the SVM's ``f = θᵀ μ_L(x) + b``; otherwise it is the
        posterior-averaged probability expressed on the scale of f, so rows are ranked and
        signed as ``predict_proba`` and ``predict`` rank and label them.  The posterior draws
        of f itself are ``_decision_draws``.

        Shape (n_samples,) for binary problems (positive favours ``classes_[1]``), else
        (n_samples, n_classes).
        """
        log_pos, log_neg = self._log_predictive(X)
        f = hinge_decision_value(log_pos - log_neg, self.link_constant_)
        return f[:, 0] if f.shape[1] == 1 else f

    def predict_proba(self, X) -> np.ndarray:
        """Posterior-averaged class probabilities from the calibrated hinge likelihood.

        ``p(y = +1 | f) = ℓ(+1|f) / (ℓ(+1|f) + ℓ(-1|f))`` (Sollich 2002) with
        ``ℓ(y|f) = exp(-2c·max(0, 1 - y f))`` and c the calibrated ``link_constant_`` (see
        Notes), averaged over posterior draws and, under ``impute="bayes"``, over the unknown
        similarity blocks of X (Gauss–Hermite on f).  More than two classes: the likelihood
        of the one-hot label under the one-vs-rest tasks, ``ℓ_k(+1) Π_{j≠k} ℓ_j(-1)``
        normalised over the classes (the softmax of the tasks' log-odds,
        :func:`~bayesmv.components.likelihoods.one_hot_probabilities`), of the averaged task
        probabilities.
        """
        return one_hot_probabilities(*self._log_predictive(X))

    def _decision_draws(self, X) -> np.ndarray:
        """Posterior draws of ``f`` at X, unknown blocks at their conditional means:
        (n_draws, n_samples, n_tasks); one draw for a MAP fit."""
        Phi, _ = self._test_features(X)
        beta, bias = self._weights()
        return np.einsum("np,dtp->dnt", Phi, beta) + bias[:, None, :]


def _features(fmap: LandmarkMap, data: MultiViewData
              ) -> tuple[np.ndarray, list[MissingBlocks]]:
    """Landmark features of ``data`` (missing blocks at their imputation / conditional mean)
    and, under ``impute="bayes"``, the Gaussian blocks (of similarities, before whitening)
    whose uncertainty predictions integrate."""
    if fmap.impute == "bayes" and data.has_missing:
        M = fmap.similarities(data)
        blocks = fmap.fill_conditional_means(M, data.observed)
        return fmap.whitened(M), blocks
    return fmap.transform(data), []


def _block_spread(fmap: LandmarkMap, blocks: list[MissingBlocks], n: int
                  ) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
    """The sd of held-out decision values over their unknown blocks, ``spread(theta, rows)``
    (:func:`_block_sd` of the fold's weights), or None when no block is unknown."""
    if not blocks:
        return None
    return lambda theta, rows: _block_sd(blocks, fmap.whitened(theta[None]), n)[0, rows]


def _block_sd(blocks: list[MissingBlocks], beta: np.ndarray, n: int) -> np.ndarray | None:
    """Standard deviation of f that the unknown blocks leave, per draw of the weights of the
    similarities (draws, tasks, features; ``LandmarkMap.whitened`` maps the features' weights
    to them): (draws, n, tasks); None without unknown blocks."""
    if not blocks:
        return None
    sd = np.zeros((beta.shape[0], n, beta.shape[1]))
    for blk in blocks:
        theta = beta[:, :, blk.columns]                          # (D, T, d)
        low_rank = np.einsum("ld,ktd->ktl", blk.factor, theta)
        var = np.sum(low_rank**2, axis=2) + blk.noise_var * np.sum(theta**2, axis=2)
        sd[:, blk.rows, :] = np.sqrt(var)[:, None, :]
    return sd


