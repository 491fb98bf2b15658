"""Decision values on new rows from the graph's own expression of ``f``.

Prediction does not re-implement any piece: the builder builds the graph once more on the
new rows, with what the pieces fitted on the training rows (``BuildContext.fitted``) and no
likelihood, and its ``f`` is compiled as a function of the global random variables, which
are then fed the posterior draws.  Per-row random variables (a shared latent's ``h``) are
not global: on new rows the representation writes them as a draw from their exact
conditional given the global variables, driven by standard-normal inputs that the predictor
feeds (``ctx.state["prediction_inputs"]``).
"""

from __future__ import annotations

import numpy as np
import pytensor
from pytensor.gradient import Rop
from pytensor.graph.replace import clone_replace

try:  # PyTensor >= 2.31
    from pytensor.graph.traversal import ancestors
except ImportError:  # pragma: no cover - older PyTensor
    from pytensor.graph.basic import ancestors

from bayesmv.builder import ModelBuilder
from bayesmv.components.likelihoods import GP_COVARIANCE, GP_DECISION_SCALE, GP_MEAN
from bayesmv.components.linear import to_dense
from bayesmv.data import MultiViewData
from bayesmv.inference.conjugate import KernelPosterior


def of_free_variables(model, outputs: list) -> tuple[list, list]:
    """Placeholders for a model's free random variables (named as they are) and ``outputs``
    rewritten in terms of them: what a function of posterior draws is compiled from."""
    rvs = list(model.free_RVs)
    holders = [rv.type(name=rv.name) for rv in rvs]
    return holders, clone_replace(outputs, replace=dict(zip(rvs, holders, strict=True)))


class DrawFunction:
    """``f`` of a model as a compiled function of draws of its free random variables.

    Parameters
    ----------
    model : pymc.Model
        A graph with a deterministic ``f``.
    extra : dict, optional
        Further inputs of ``f`` (name → variable) that the caller feeds standard normals,
        e.g. the noise of a shared latent's conditional on new rows.
    """

    def __init__(self, model, extra: dict | None = None) -> None:
        rvs = list(model.free_RVs)
        self._holders, (self._f,) = of_free_variables(model, [model["f"]])
        self._extra = dict(extra or {})
        transformed = {rv.name for rv in rvs if model.rvs_to_transforms.get(rv) is not None}
        inputs = set(ancestors([self._f]))
        #: indices (into ``names``) of the free variables f depends on
        self._used = [i for i, h in enumerate(self._holders) if h in inputs]
        #: whether f depends on no constrained variable: then a Gaussian over the free
        #: variables (the Laplace approximation) is one over f's inputs themselves
        self.linearisable = not any(self._holders[i].name in transformed for i in self._used)
        self.names = [rv.name for rv in rvs]
        self.extra = {name: tuple(int(d) for d in var.type.shape)
                      for name, var in self._extra.items()}
        self._fn = pytensor.function(self._holders + list(self._extra.values()), self._f,
                                     on_unused_input="ignore")
        self._jvp_fn = None

    def _args(self, draws: dict[str, np.ndarray], s: int) -> list[np.ndarray]:
        return [np.asarray(draws[n][s], dtype=float) for n in self.names]

    def __call__(self, draws: dict[str, np.ndarray], rng: np.random.Generator | None = None
                 ) -> np.ndarray:
        """``f`` (S, n, T) at S draws: ``draws[name]`` has shape (S, *shape) for every free
        variable; ``rng`` drives the extra inputs (a shared latent's ``h`` on new rows)."""
        S = len(next(iter(draws.values())))
        rng = np.random.default_rng(0) if rng is None else rng
        out = []
        for s in range(S):
            noise = [rng.standard_normal(shape) for shape in self.extra.values()]
            out.append(self._fn(*self._args(draws, s), *noise))
        return np.stack(out)

    def linearised(self, mode: dict[str, np.ndarray], draws: dict[str, np.ndarray],
                   rng: np.random.Generator | None = None, antithetic: bool = False
                   ) -> np.ndarray:
        """The linearised predictive ``f(θ̂) + J(θ̂)(θ_s − θ̂)`` at S draws (MacKay 1992; Immer,
        Korzepa & Bauer 2021), J·δ by forward-mode differentiation of the graph's own ``f``.

        Under a Gaussian posterior over θ (Laplace) these are Gaussian with mean ``f(θ̂)``
        and variance ``J Σ Jᵀ``, whereas ``f`` itself at wide draws is dominated by products of
        their perturbations.  ``antithetic`` also returns ``f(θ̂) − J δ_s`` (the reflection
        ``2θ̂ − θ_s``, an equally likely Gaussian draw) after the S direct values, so the
        2S values average to ``f(θ̂)`` exactly.  Returns (S, n, T) or (2S, n, T).
        """
        if self._jvp_fn is None:
            used = [self._holders[i] for i in self._used]
            tangents = [h.type(name=f"d_{h.name}") for h in used]
            jvp = Rop(self._f, used, tangents)
            self._jvp_fn = pytensor.function(
                self._holders + tangents + list(self._extra.values()), [self._f, jvp],
                on_unused_input="ignore")
        S = len(next(iter(draws.values())))
        rng = np.random.default_rng(0) if rng is None else rng
        at_mode = [np.asarray(mode[n], dtype=float) for n in self.names]
        direct, reflected = [], []
        for s in range(S):
            args = self._args(draws, s)
            delta = [args[i] - at_mode[i] for i in self._used]
            noise = [rng.standard_normal(shape) for shape in self.extra.values()]
            f0, step = self._jvp_fn(*at_mode, *delta, *noise)
            direct.append(f0 + step)
            reflected.append(f0 - step)
        return np.stack(direct + reflected if antithetic else direct)


class GraphPredictor(DrawFunction):
    """``f`` on new rows as a compiled function of posterior draws.

    Parameters
    ----------
    builder : ModelBuilder
    fitted : dict
        The training build's ``context.state``.
    data : MultiViewData
        The new rows (validated and standardised as the training rows were).
    n_tasks : int
    """

    def __init__(self, builder: ModelBuilder, fitted: dict, data: MultiViewData,
                 n_tasks: int) -> None:
        built = builder.build(data, None, fitted=fitted, n_outputs=n_tasks)
        super().__init__(built.model, built.context.state.get("prediction_inputs", {}))


class GaussianProcessPredictor:
    """Decision values on new rows of a Gaussian-process model: a combiner that hands the
    likelihood a prior covariance instead of an explicit ``f`` (exact per-view kernels).

    The builder builds the graph once more on the training rows followed by the new rows, and
    the process's covariance over all of them (the graph's own expression, which the
    likelihood records as ``GP_COVARIANCE``, with the decision value's scale of ``g``) is
    compiled as a function of the free variables.  At a posterior point the new rows' decision
    values ``b + s·g*`` are Gaussian given the training targets and the bias b: mean
    ``b + s k*ᵀC⁻¹(y - b)``, variance ``s²(k** - k*ᵀC⁻¹k*)``, ``C = K + σ²I``
    (:class:`~bayesmv.inference.conjugate.KernelPosterior`).

    Parameters
    ----------
    builder : ModelBuilder
    fitted : dict
        The training build's ``context.state``.
    train, new : MultiViewData
        The training rows and the new rows (standardised as the training rows were).
    n_tasks : int
    """

    def __init__(self, builder: ModelBuilder, fitted: dict, train: MultiViewData,
                 new: MultiViewData, n_tasks: int) -> None:
        both = MultiViewData(
            views=tuple(np.vstack([to_dense(a), to_dense(b)])
                        for a, b in zip(train.views, new.views, strict=True)),
            view_names=train.view_names, observed=np.vstack([train.observed, new.observed]))
        model = builder.build(both, None, fitted=fitted, n_outputs=n_tasks).model
        holders, (mean, *outputs) = of_free_variables(
            model, [model[GP_MEAN], model[GP_COVARIANCE], model[GP_DECISION_SCALE]])
        self._mean_fn = pytensor.function(holders, mean, on_unused_input="ignore")
        self._fn = pytensor.function(holders, outputs, on_unused_input="ignore")
        inputs = set(ancestors(outputs))
        #: the free variables the covariance depends on (the process's mean is not one)
        self._covariance_inputs = [h.name for h in holders if h in inputs]
        self.names = [h.name for h in holders]
        self.n_train = train.n_samples
        self._factor: tuple | None = None

    def _args(self, point: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(point[n], dtype=float) for n in self.names]

    def process_mean(self, point: dict[str, np.ndarray]) -> np.ndarray:
        """The process's mean b (T,) at a posterior point (named free variables)."""
        return np.asarray(self._mean_fn(*self._args(point)), dtype=float)

    def moments(self, point: dict[str, np.ndarray], targets: np.ndarray,
                noise_variance: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """At one posterior point (named free variables): the new rows' decision values'
        mean (m, T) and variance (m,) given the process's mean b there, and the coefficient
        c (m,) of b in that mean (a Gaussian b adds ``c² Var(b)``).  The training system is
        factorised once per value of the covariance's inputs and the noise."""
        key = (float(noise_variance),
               *(np.asarray(point[n], dtype=float).tobytes() for n in self._covariance_inputs))
        if self._factor is None or self._factor[0] != key:
            cov, scale = self._fn(*self._args(point))
            n = self.n_train
            posterior = KernelPosterior.fit(cov[:n, :n], targets, float(noise_variance),
                                            what="the Gaussian process's covariance plus noise")
            self._factor = (key, posterior, cov[n:, :n], np.diag(cov)[n:], float(scale))
        _, posterior, cross, diagonal, scale = self._factor
        bias = self.process_mean(point)
        mean = bias + scale * posterior.mean(cross, bias)
        variance = scale**2 * posterior.latent_variance(cross, diagonal)
        return mean, variance, 1.0 - scale * cross @ posterior.ones_solve


def prediction_rng(random_seed: int | None) -> np.random.Generator:
    """The generator of a prediction's Monte-Carlo inputs (a shared latent's ``h*``): fixed
    even without a ``random_seed``, so a prediction does not change from call to call."""
    seed = np.random.SeedSequence(0 if random_seed is None else random_seed).spawn(3)[2]
    return np.random.default_rng(seed)


def with_input_draws(draws: dict[str, np.ndarray], predictor: DrawFunction,
                     n_input_draws: int) -> dict[str, np.ndarray]:
    """Each posterior draw repeated ``n_input_draws`` times in a row where ``f`` on new rows
    has Monte-Carlo inputs (``predictor.extra``: a shared latent's conditional ``h* | x*``),
    so the predictor draws them that many times per posterior draw; unchanged where it has
    none (one evaluation per draw is then exact)."""
    if not predictor.extra or n_input_draws == 1:
        return draws
    return {name: np.repeat(value, n_input_draws, axis=0) for name, value in draws.items()}
