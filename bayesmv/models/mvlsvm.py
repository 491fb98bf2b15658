"""MVL-SVM: multi-view landmark-based SVM (Zantedeschi, Emonet & Sebban, ECML 2018) as a
Bayesian model."""

from __future__ import annotations

import numbers
import time
from typing import Any

import arviz as az
import numpy as np
import xarray as xr
from scipy.special import logsumexp

from bayesmv.builder import BuiltModel, ModelBuilder
from bayesmv.components import HingeLikelihood, SumCombiner
from bayesmv.components.landmarks import LandmarkFeatures, _check_gamma
from bayesmv.components.likelihoods import class_probabilities, log_hinge_probability
from bayesmv.data import MultiViewData, ViewStandardizer, label_tasks
from bayesmv.diagnostics.convergence import check_convergence, warn_if_not_converged
from bayesmv.inference.svm import fit_svm_map, run_hinge_gibbs
from bayesmv.models.base import MultiViewClassifier, register
from bayesmv.params import check_positive

_POSITIVE_INT = ("draws", "chains")
#: Gauss–Hermite nodes for E[p(y | f)] over f ~ N(m, s²) (unknown similarity blocks)
_N_QUADRATURE = 24
#: bound on draws × rows × tasks held at once at prediction time
_PREDICT_CHUNK = 4_000_000


@register
class MVLSVM(MultiViewClassifier):
    """Multi-view landmark-based SVM with a Bayesian reading and missing-view imputation.

    Each view of a sample is compared with ``L`` landmarks (training rows with every view)
    through an RBF similarity; a linear classifier on the ``L·V`` similarities,
    ``f(x) = θᵀ μ_L(x) + b``, minimises the paper's ``½||θ||² + (C/N) Σ_n max(0, 1 - y_n f_n)``
    with the bias unpenalised.  As a Bayesian model: ``θ ~ N(0, I)``, a flat prior
    on ``b`` and the pseudo-likelihood ``exp(-(C/N)·hinge)`` — the builder's
    ``HingeLikelihood`` with its constant ``C/(2N)`` — so the MAP is the SVM solution and the
    Polson–Scott augmentation gives an exact Gibbs sampler.  Multi-class problems are
    one-vs-rest (one θ and b per class).

    Parameters
    ----------
    n_landmarks : int, default 50
        Number L of landmarks, drawn uniformly from the training rows that have every view.
        More than the number of training rows is a ValueError; when fewer rows than L have
        every view, all of them are used (with a warning).
    C : float, default 1.0
        The paper's cost c of the averaged hinge loss (scikit-learn's ``SVC(C=C/N)``).  The
        paper tuned it over 1e-3 … 1e4; with the 1/N scaling, moderate N usually wants
        C ≥ 100.
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
        splitters, ``GridSearchCV``, ``cross_val_score``).
    standardize : bool, default True
        Standardise each view on the observed training rows before the similarities.

    Attributes
    ----------
    classes_ : ndarray
        Class labels.
    idata_ : arviz.InferenceData
        ``posterior``: ``beta`` (θ, task × feature), ``bias``, ``f`` at the training points —
        one chain × one draw for the MAP; ``constant_data``: the landmarks.
    feature_map_ : LandmarkFeatures
        The fitted landmark piece (``transform`` is its features).
    landmark_indices_ : ndarray of int
        Training rows used as landmarks.
    convergence_ : ConvergenceReport
        Diagnostics on ``f`` and the biases (a MAP's report is empty and ``ok``).

    Notes
    -----
    The pseudo-likelihood's strength per sample is C/N, so ``predict_proba`` is close to
    uniform when C/N ≪ 1 (the classes are still ranked correctly) and sharp when C/N ≳ 1.
    The Gibbs sampler is exact, but the augmentation pins each training point's f near its
    current value with a precision that grows with C/N, so mixing slows as C/N grows: on the
    UCI digits (N = 1600) 500 draws give R-hat ≤ 1.1 at C = 100 and R-hat ≈ 2 at the
    cross-validated C = 1e4 (``benchmarks/mvlsvm.py``); the diagnostics in ``convergence_``
    say so.  Under ``impute="bayes"`` the MAP fit uses the blocks' conditional means: a joint
    MAP over θ and the unknown blocks would let the labels move each block to wherever its
    row clears the margin, so incomplete rows would stop costing anything.

    Examples
    --------
    >>> from bayesmv import MVLSVM
    >>> from bayesmv.datasets import load_multiple_features
    >>> views, y = load_multiple_features()
    >>> est = MVLSVM(n_landmarks=50, C=1e3, random_seed=0).fit(views, y)  # doctest: +SKIP
    """

    def __init__(
        self,
        n_landmarks: int = 50,
        C: float = 1.0,
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

    # --------------------------------------------------------------- checks
    def _validate_params(self) -> None:
        for name in ("C", "tol"):
            check_positive(name, getattr(self, name))
        for name in _POSITIVE_INT:
            check_positive(name, getattr(self, name), integer=True)
        if not isinstance(self.tune, numbers.Integral) or isinstance(self.tune, bool) \
                or self.tune < 0:
            raise ValueError(f"tune must be a non-negative integer, got {self.tune!r}")
        check_positive("cores", self.cores, integer=True, allow_none=True)
        if self.inference not in ("map", "gibbs"):
            raise ValueError(f"inference must be 'map' or 'gibbs', got {self.inference!r}")
        self._landmark_map().validate()  # n_landmarks and impute
        if self.gamma is not None and not isinstance(self.gamma, numbers.Real | list | tuple
                                                     | np.ndarray):
            raise ValueError(f"gamma must be None, a positive number or one per view, "
                             f"got {self.gamma!r}")

    # ------------------------------------------------------------- builder
    def _landmark_map(self, random_state: Any = None) -> LandmarkFeatures:
        return LandmarkFeatures(self.n_landmarks, self.gamma, self.impute,
                                random_state=random_state)

    def _seeds(self) -> tuple[np.random.Generator, int]:
        landmarks, sampler = np.random.SeedSequence(self.random_seed).spawn(2)
        return np.random.default_rng(landmarks), int(sampler.generate_state(1)[0])

    def make_builder(self, n_samples: int, feature_map: LandmarkFeatures | None = None
                     ) -> ModelBuilder:
        """The model graph: landmarks → θ ~ N(0, I) with a flat bias → hinge ``exp(-(C/N)·…)``.

        Parameters
        ----------
        n_samples : int
            N, the number of training rows (the pseudo-likelihood's exponent is C/N).
        feature_map : LandmarkFeatures, optional
            A fitted landmark piece to reuse; by default a fresh one is fitted at build time.
        """
        if feature_map is None:
            feature_map = self._landmark_map(random_state=self._seeds()[0])
        return ModelBuilder(None, feature_map, SumCombiner(prior_precision=1.0, flat_bias=True),
                            HingeLikelihood(self.C / (2.0 * n_samples)))

    def _prepare_training(self, X, y):
        self._validate_params()
        data, classes, y_index = self._validate_training_data(X, y)
        _check_gamma(self.gamma, data.view_sizes)
        if self.n_landmarks > data.n_samples:
            raise ValueError(f"n_landmarks={self.n_landmarks} is more than the {data.n_samples} "
                             f"training rows; give at most {data.n_samples}")
        self._landmark_map().check_imputable(data, "X")
        standardizer = ViewStandardizer().fit(data) if self.standardize else None
        if standardizer is not None:
            data = standardizer.transform(data)
        targets = label_tasks(y_index, len(classes))
        fmap = self._landmark_map(random_state=self._seeds()[0]).fit(data)
        return data, classes, y_index, standardizer, targets, fmap

    def build_model(self, X, y, *, augmented: bool = False) -> BuiltModel:
        """Validate and standardise (X, y), draw the landmarks and build the ``pm.Model``.

        The landmarks are those ``fit`` draws with the same ``random_seed``.  ``augmented``
        keeps the hinge's λ explicit (the joint the Gibbs steps are derived from).
        """
        data, classes, y_index, standardizer, targets, fmap = self._prepare_training(X, y)
        built = self.make_builder(data.n_samples, fmap).build(data, targets, augmented=augmented)
        built.classes, built.y_index, built.standardizer = classes, y_index, standardizer
        return built

    # ------------------------------------------------------------------ fit
    def fit(self, X, y) -> MVLSVM:
        """Fit on training views ``X`` and labels ``y``.

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
        start = time.perf_counter()
        if self.inference == "map":
            Phi = fmap.transform(data)
            theta, bias, _ = fit_svm_map(Phi, targets, self.C / N, tol=self.tol)
            f = Phi @ theta.T + bias
            idata = az.from_dict(
                posterior={"beta": theta[None, None], "bias": bias[None, None],
                           "f": f[None, None]},
                coords={"task": np.arange(targets.shape[1]),
                        "feature": np.arange(theta.shape[1]), "sample": np.arange(N)},
                dims={"beta": ["task", "feature"], "bias": ["task"], "f": ["sample", "task"]})
        else:
            built = self.make_builder(N, fmap).build(data, targets)
            idata = run_hinge_gibbs(built, draws=self.draws, tune=self.tune, chains=self.chains,
                                    cores=self.cores, random_seed=self._seeds()[1],
                                    trace_vars=["beta", "bias", "f"],
                                    progressbar=self.progressbar)
        elapsed = time.perf_counter() - start
        idata.posterior.attrs["inference"] = "map" if self.inference == "map" else "mcmc"
        idata.posterior.attrs["sampling_seconds"] = elapsed
        idata.add_groups(observed_data=xr.Dataset({"y": ("sample", y_index),
                                                   "y_tasks": (("sample", "task"), targets)}))
        landmarks = self._landmark_dataset(fmap, N)
        if "constant_data" in idata:  # pm.sample stored the graph's data there
            landmarks = xr.merge([idata.constant_data, landmarks], join="outer")
            del idata.constant_data
        idata.add_groups(constant_data=landmarks)
        convergence = self._judge(idata)
        # fitted state only now, in one step: a failure above leaves a previous fit intact
        self._commit(classes_=classes, layout_=data.layout,
                     standardizer_=standardizer, idata_=idata, feature_map_=fmap,
                     n_features_in_=int(sum(data.view_sizes)), convergence_=convergence)
        warn_if_not_converged(convergence)
        return self

    @staticmethod
    def _judge(idata: az.InferenceData):
        # f at ≤ 1000 quantities in all: ArviZ needs ~2 ms each, and 10 tasks × 1000 points
        # took 19 s, longer than the sampler
        n_tasks = int(idata.posterior.sizes["task"])
        return check_convergence(idata, max_points=max(1, 1000 // n_tasks))

    @staticmethod
    def _landmark_dataset(fmap: LandmarkFeatures, n_train: int) -> xr.Dataset:
        data = {"landmark_indices": ("landmark", fmap.landmark_indices_),
                "gamma": ("view", fmap.gamma_), "n_train": ((), n_train)}
        for v, lm in enumerate(fmap.landmarks_):
            data[f"landmarks_{v}"] = (("landmark", f"view{v}_dim"), lm)
        if fmap.impute == "bayes":
            data["imputation_prior"] = ("imputation_param",
                                        np.array([fmap.coef_var_, fmap.noise_var_]))
        return xr.Dataset(data)

    def _prediction_constants(self) -> set[str]:
        # the landmark piece; a Gibbs fit's graph data (the training rows' landmark features)
        # is training data
        return set(map(str, self._landmark_dataset(self.feature_map_, self.n_train_).data_vars))

    def _set_extra_state(self, state: dict[str, Any]) -> None:
        const = self.idata_.constant_data
        fmap = self._landmark_map()
        n_views = int(const["gamma"].size)
        fmap.set_landmarks(const["landmark_indices"].values,
                           tuple(const[f"landmarks_{v}"].values for v in range(n_views)),
                           const["gamma"].values)
        if self.impute == "bayes":
            fmap.coef_var_, fmap.noise_var_ = (float(x) for x in const["imputation_prior"].values)
        self.feature_map_ = fmap
        self.convergence_ = self._judge(self.idata_)

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
    def sampling_time_(self) -> float:
        """Wall-clock seconds of the MAP solve or of ``pm.sample`` (features excluded)."""
        self._check_fitted()
        return float(self.idata_.posterior.attrs["sampling_seconds"])

    # ----------------------------------------------------------- prediction
    def _test_features(self, X) -> tuple[np.ndarray, list]:
        """Features at X (missing blocks at their imputation / conditional mean) and, under
        ``impute="bayes"``, the Gaussian blocks whose uncertainty predictions integrate."""
        data: MultiViewData = self._prepare(X)
        fmap = self.feature_map_
        if self.impute == "bayes" and data.has_missing:
            M = fmap.similarities(data)
            blocks = fmap.missing_blocks(M, data.observed)
            for blk in blocks:
                M[blk.rows[:, None], blk.columns[None, :]] = blk.mean
            return M, blocks
        return fmap.transform(data), []

    def transform(self, X) -> np.ndarray:
        """Landmark features of X, (n_samples, L·V), missing blocks imputed (``impute``)."""
        return self._test_features(X)[0]

    def _weights(self) -> tuple[np.ndarray, np.ndarray]:
        post = self.idata_.posterior
        beta = post["beta"].values
        bias = post["bias"].values
        return beta.reshape((-1,) + beta.shape[2:]), bias.reshape(-1, bias.shape[-1])

    def decision_function(self, X) -> np.ndarray:
        """Posterior mean of ``f`` (exact: f is linear in θ, b and the unknown blocks).

        Shape (n_samples,) for binary problems (positive favours ``classes_[1]``), else
        (n_samples, n_classes).
        """
        Phi, _ = self._test_features(X)
        beta, bias = self._weights()
        f = Phi @ beta.mean(axis=0).T + bias.mean(axis=0)
        return f[:, 0] if f.shape[1] == 1 else f

    def predict_proba(self, X) -> np.ndarray:
        """Posterior-averaged class probabilities from the normalised hinge likelihood.

        ``p(y = +1 | f) = ℓ(+1|f) / (ℓ(+1|f) + ℓ(-1|f))`` (Sollich 2002) with
        ``ℓ(y|f) = exp(-(C/N)·max(0, 1 - y f))``, averaged over posterior draws and, under
        ``impute="bayes"``, over the unknown similarity blocks of X (Gauss–Hermite on f);
        one-vs-rest scores are renormalised to sum to one (in log space, so that scores that
        all underflow to 0 still give a distribution).
        """
        Phi, blocks = self._test_features(X)
        beta, bias = self._weights()
        c = self.C / (2.0 * self.n_train_)
        D, T = bias.shape
        n = Phi.shape[0]
        sd = np.zeros((D, n, T))
        for blk in blocks:
            theta = beta[:, :, blk.columns]                          # (D, T, d)
            low_rank = np.einsum("ld,ktd->ktl", blk.factor, theta)
            var = np.sum(low_rank**2, axis=2) + blk.noise_var * np.sum(theta**2, axis=2)
            sd[:, blk.rows, :] = np.sqrt(var)[:, None, :]
        nodes, weights = np.polynomial.hermite.hermgauss(_N_QUADRATURE)
        log_p = np.zeros((n, T))
        step = max(1, _PREDICT_CHUNK // max(1, D * T * (_N_QUADRATURE if blocks else 1)))
        for lo in range(0, n, step):
            rows = slice(lo, lo + step)
            f = np.einsum("np,dtp->dnt", Phi[rows], beta) + bias[:, None, :]
            if blocks:
                g = f[..., None] + np.sqrt(2.0) * sd[:, rows, :, None] * nodes
                lp = logsumexp(log_hinge_probability(g, c), b=weights / np.sqrt(np.pi), axis=-1)
            else:
                lp = log_hinge_probability(f, c)
            log_p[rows] = logsumexp(lp, axis=0) - np.log(D)
        return class_probabilities(log_p)
