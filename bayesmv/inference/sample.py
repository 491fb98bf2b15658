"""Running the samplers: the hybrid Gibbs + HMC scheme, or NUTS, inside ``pm.sample``."""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import arviz as az
import numpy as np
import pymc as pm
import pytensor
from threadpoolctl import threadpool_limits

from bayesmv.builder import BuiltModel
from bayesmv.inference import restart
from bayesmv.inference.gibbs import BetaLambdaGibbs, DPMixtureGibbs, LatentVariableGibbs
from bayesmv.inference.group_moves import (
    BandwidthTransportMove,
    LatentRotationMove,
    LatentScaleMove,
)
from bayesmv.inference.hmc import CoefficientHMC, FrequencyHMC, LatentHMC
from bayesmv.inference.interweave import NoiseInterweavingMove
from bayesmv.inference.spec import HybridSpec

#: views whose τ the interweaving move updates each sweep (drawn at random when there are
#: more): on the UCI digits' six views, all six cost 25 % more time a sweep and did not
#: change f's mixing there.  The move starts halfway through tuning: run from the first
#: iteration, it left a chain of ``bayesmv --quick`` (2 × (500 + 2000)) still drifting in
#: bandwidth through its draws on seeds 2, 13 and 14 (min bulk ESS of f 24 / 40 / 71; from
#: halfway, 926 / 157 / 432)
INTERWEAVE_VIEWS_PER_SWEEP = 3

#: scans of the DP mixture's assignments with its sticks and components integrated out in
#: each sweep (:class:`DPMixtureGibbs`'s ``collapsed_sweeps``; see :func:`hybrid_steps`)
DP_COLLAPSED_SWEEPS = 2


def hybrid_steps(built: BuiltModel, target_accept: float = 0.8, tune: int = 0) -> list:
    """The paper's sampler (Alg. 1) as PyMC step methods, in the paper's order, plus exact moves
    along the directions its blocks barely move.

    β and λ (exact Gibbs) → Ω (HMC given λ with β integrated out, then β redrawn) → H (HMC,
    λ and U integrated out) → β and each latent column's bandwidth with λ integrated out
    (:class:`CoefficientHMC`) → larger steps of a column's bandwidth with β transported along
    (:class:`~bayesmv.inference.group_moves.BandwidthTransportMove`) → DP mixture
    (blocked Gibbs, with collapsed scans of its assignments) → τ with U integrated out,
    then U, W, V, r, τ (exact Gibbs; on a view wider than its rows τ and r with W, V
    integrated out, then W, V) → τ with H carried along (:class:`NoiseInterweavingMove`),
    then two moves along directions the likelihood does not see: each latent column's scale
    (:class:`LatentScaleMove`) and rotations of pairs of latent columns
    (:class:`LatentRotationMove`).

    ``CoefficientHMC`` undoes the β ↔ λ coupling of the augmentation (the height of f beyond
    the margin is otherwise its slowest direction).  With one view-specific latent column
    (the default) it doubled the 5 % quantile of f's bulk ESS over the training rows on the
    UCI digits 3 vs 5 (4 chains of 500 + 2000, six seeds: 1353-2359 against 961-1143) and
    its tail ESS, for 12 % more time a sweep.  ``BandwidthTransportMove`` follows the
    bandwidth of the columns f is most sensitive to, which ``CoefficientHMC`` moves only by a
    random walk of small steps (its metric is whitened at a reference near the current
    bandwidth): on the breast-cancer views (seeds 0-2, 4 chains of 500 + 2000) f's smallest
    bulk ESS went from 857 / 82 / 385 to 1084 / 942 / 1208, with every f and τ converged.
    :class:`~bayesmv.inference.group_moves.FrequencyScaleMove` (the bandwidth with β held) is
    available but not in this list: it did not raise the smallest ESS of f.
    :class:`~bayesmv.inference.interweave.NoiseInterweavingMove` draws each view's τ with H
    carried along (the non-centred half of an interweaving, after the centred draw of
    ``LatentVariableGibbs``), at most :data:`INTERWEAVE_VIEWS_PER_SWEEP` views a sweep, from
    halfway through tuning: where one view is explained almost exactly by the shared latent
    (the breast-cancer views' "worst" values) its τ's bulk ESS went from 584 to 1803 and f's
    from R-hat 1.0488 / min bulk ESS 57 to 1.0049 / 593 (tuning seed 13, 4 × (1000 + 2000)),
    for about 10 % more time a sweep.
    :class:`~bayesmv.inference.group_moves.LoadingScaleMove` (each view's loading column with
    its ARD precision along ``r ‖w‖² = const``) is available but not in this list: it mixed
    the ARD funnel of the 5-feature ``mor`` view (digits 3 vs 5, 2 chains: its τ from R-hat
    1.044 / bulk ESS 37 to 1.012 / 592) but on twelve fits no default was chosen on it
    converged the same nine and not the other three, lowered f's smallest bulk ESS on
    breast cancer's seeds 0-2 (910 / 166 / 751 against 1043 / 782 / 909), and cost about
    15 % of a sweep.  The DP mixture's assignments are scanned twice a sweep with the
    sticks and the components integrated out (:data:`DP_COLLAPSED_SWEEPS`) before the sticks
    and the components are drawn given them: the number of occupied components then moves
    by single frequencies instead of waiting for a prior draw of an empty component near
    one.  On the twenty held-out fits of ``docs/benchmarks.md``'s "Convergence" part
    (eighteen UCI digit pairs, 3 vs 5's and breast cancer's second splits, seed 0,
    4 × (1000 + 2000)),
    18 of 20 converged with the scans against 16 of 20 without: 5 vs 6 (f's smallest bulk
    ESS 127 → 2735) and 3 vs 5's second split (τ's R-hat 1.0127 → 1.0078) now converge, and
    every fit that converged before still does, for 8-15 % more time a fit.
    Not among the steps:
    :class:`~bayesmv.inference.latent_column.LatentColumnHMC` (a shared latent column with its
    ARD precisions in every view, the loadings on it integrated out). It raised τ's smallest
    bulk ESS on scikit-learn's digits 3 vs 5 from 225 to 384 but tripled the fit's time
    (516 s against 165 s), which is a loss per second.
    :class:`~bayesmv.inference.collapsed_views.CollapsedViewsHMC` (the whole shared latent with
    the view latents and every τ, all views' loadings integrated out): on the same digits, one
    chain of 300 + 3000 draws (seed 1), τ's bulk ESS went from 112 / 92 to 155 / 100 for about
    twice the time a sweep (its step size settles near 0.02, so it runs its 32 leapfrog steps).
    :class:`BetaLambdaGibbs`'s global rescaling of Ω given λ (``rescale=False`` here): λ pins
    every decision value, so it barely moved the bandwidth, which ``CoefficientHMC`` now
    moves per column under the hinge itself; dropping it saves two double-precision feature
    evaluations a sweep.
    """
    spec = HybridSpec.from_built(built)
    model = built.model
    value = {v.name: v for v in model.value_vars}
    n_views = spec.n_views
    beta_vars = [value["beta"]] + ([value["v_log__"]] if spec.precision_prior else [])
    steps = [
        BetaLambdaGibbs(beta_vars, spec, rescale=False, model=model),
        FrequencyHMC([value["Omega"], value["beta"]], spec, n_tune=tune,
                     target_accept=target_accept, model=model),
        LatentHMC([value["H"]], spec, target_accept=target_accept, model=model),
        CoefficientHMC([value["beta"]], spec, n_tune=tune, target_accept=target_accept,
                       model=model),
        BandwidthTransportMove([value["Omega"]], spec, n_tune=tune, model=model),
    ]
    if spec.is_dp:
        steps.append(DPMixtureGibbs(
            [value["dp_sticks_logodds__"], value["dp_sigma2_log__"], value["dp_mu"]], spec,
            collapsed_sweeps=DP_COLLAPSED_SWEEPS, model=model))
    lvm = [value[f"{w}_{v}"] for v in range(n_views) for w in ("W", "V")]
    steps.append(LatentVariableGibbs(lvm + [value["tau_log__"], value["r_log__"]], spec,
                                     model=model))
    # τ's non-centred half of the interweaving; it also writes H
    steps.append(NoiseInterweavingMove([value["tau_log__"]], spec,
                                       views_per_step=INTERWEAVE_VIEWS_PER_SWEEP,
                                       idle_tuning=tune // 2, model=model))
    # it also writes H, W, r, Ω and the spectral parameters (a move along a group orbit)
    steps.append(LatentScaleMove([value["H"]], spec, model=model))
    steps.append(LatentRotationMove([value["H"]], spec, model=model))
    covered = {v.name for s in steps for v in s.vars}
    missing = set(value) - covered
    if missing:
        raise RuntimeError(f"hybrid sampler has no step for {sorted(missing)}")
    return steps


#: NUTS implementations PyMC can drive; the last two are its JAX back-ends (GPU capable)
NUTS_SAMPLERS = ("pymc", "nutpie", "numpyro", "blackjax")
JAX_SAMPLERS = ("numpyro", "blackjax")
_NEEDS = {"pymc": (), "nutpie": ("nutpie",), "numpyro": ("jax", "numpyro"),
          "blackjax": ("jax", "blackjax")}
_EXTRA = {"nutpie": "fast", "numpyro": "jax", "blackjax": "jax"}


def nutpie_available() -> bool:
    return importlib.util.find_spec("nutpie") is not None


def nuts_sampler_available(name: str) -> bool:
    """Whether the packages behind ``nuts_sampler=name`` are installed."""
    return all(importlib.util.find_spec(m) is not None for m in _NEEDS[name])


def check_nuts_sampler(name: str, *, require_installed: bool = True) -> None:
    """Raise ValueError for an unknown ``nuts_sampler`` and ImportError for a missing one."""
    if name not in NUTS_SAMPLERS:
        raise ValueError(f"nuts_sampler must be one of {NUTS_SAMPLERS}, got {name!r}")
    if require_installed and not nuts_sampler_available(name):
        missing = [m for m in _NEEDS[name] if importlib.util.find_spec(m) is None]
        raise ImportError(f"nuts_sampler={name!r} needs {', '.join(missing)}: "
                          f"pip install 'bayesmv[{_EXTRA[name]}]'")


# ----------------------------------------------------------------- chain plans
@dataclass(frozen=True)
class _ChainPlan:
    chain_ids: tuple[int, ...] | None = None
    replay: az.InferenceData | None = None


_PLAN: ContextVar[_ChainPlan | None] = ContextVar("bayesmv_chain_plan", default=None)
_KEEP_WARMUP: ContextVar[bool] = ContextVar("bayesmv_keep_warmup", default=False)


class ChainsSampled(BaseException):  # noqa: N818 - a signal, not an error
    """Raised by the sampler under ``chain_plan(chain_ids=...)`` to carry the raw draws of
    those chains out of an estimator's ``fit`` (whose post-processing needs all chains).

    A ``BaseException`` so that an estimator's own ``except Exception`` cannot swallow it.
    """

    def __init__(self, idata: az.InferenceData) -> None:
        super().__init__("chains sampled")
        self.idata = idata


@contextmanager
def chain_plan(*, chain_ids: Sequence[int] | None = None,
               replay: az.InferenceData | None = None) -> Iterator[None]:
    """Run only some chains of the next fit, or make it use draws sampled elsewhere.

    Used by :func:`bayesmv.distributed.sample_chains`; estimators need no change because
    every MCMC path goes through :func:`sample_pymc`.

    * ``chain_ids``: the next sampler call runs only these (consecutive) chains of the
      ``chains`` the estimator asks for, each exactly as in a run of all chains, and raises
      :class:`ChainsSampled` with their draws (chain coordinate = their ids).
    * ``replay``: the next sampler call returns these draws (all chains) instead of sampling,
      so ``fit`` post-processes them as it would its own.
    """
    if (chain_ids is None) == (replay is None):
        raise ValueError("give exactly one of chain_ids and replay")
    ids = None if chain_ids is None else tuple(int(i) for i in chain_ids)
    if ids is not None and (not ids or ids != tuple(range(ids[0], ids[0] + len(ids)))
                            or ids[0] < 0):
        raise ValueError(f"chain_ids must be consecutive non-negative integers, got {ids}")
    token = _PLAN.set(_ChainPlan(ids, replay))
    try:
        yield
    finally:
        _PLAN.reset(token)


def chain_seeds(random_seed: int | None, chains: int
                ) -> tuple[list[np.random.SeedSequence], int]:
    """Per-chain seeds of the initial points, and the seed of the sampler's streams.

    Chain i's initial point uses the i-th child of ``SeedSequence(random_seed)``; chain i's
    step methods use the i-th child of ``SeedSequence(sample_seed)`` (PyMC spawns one child
    per chain).  Neither depends on which other chains run in the same process.
    """
    seeds = np.random.SeedSequence(random_seed).spawn(chains + 1)
    return seeds[:chains], int(seeds[-1].generate_state(1)[0])


def _relabel_chains(idata: az.InferenceData, ids: Sequence[int]) -> az.InferenceData:
    for group in idata.groups():
        ds = getattr(idata, group)
        if "chain" in ds.dims:
            setattr(idata, group, ds.assign_coords(chain=np.asarray(ids)))
    return idata


def _check_replay(idata: az.InferenceData, chains: int, draws: int,
                  var_names: Sequence[str] | None) -> az.InferenceData:
    post = idata.posterior
    if post.sizes.get("chain") != chains or post.sizes.get("draw") != draws:
        raise ValueError(f"replayed draws have {post.sizes.get('chain')} chains x "
                         f"{post.sizes.get('draw')} draws; this fit asks for {chains} x {draws}")
    missing = sorted(set(var_names or ()) - set(map(str, post.data_vars)))
    if missing:
        raise ValueError(f"replayed draws lack the variables {missing}")
    return idata


class SamplingInterruptedWarning(UserWarning):
    """Sampling stopped early (Ctrl-C): the fit holds only the draws made so far."""


def _stop_later_chains_after_interrupt(iterations: int):
    """``pm.sample`` callback for chains run one after the other.

    PyMC catches the ``KeyboardInterrupt`` of Ctrl-C, ends the running chain and starts the
    next one, so stopping a run would take one Ctrl-C per chain.  A chain that begins while
    the previous one ended before its last draw is stopped at once (PyMC then keeps the
    draws it has), so one Ctrl-C ends the whole run.
    """
    state = {"chain": None, "complete": True}

    def callback(trace, draw) -> None:
        if draw.chain != state["chain"] and not state["complete"]:
            raise KeyboardInterrupt
        # not draw.is_last: PyMC computes it as ``i == draws`` inside ``for i in range(draws)``,
        # so it is never true and every chain after the first was stopped at once
        state["chain"], state["complete"] = draw.chain, draw.draw_idx == iterations - 1

    return callback


def _flag_if_interrupted(idata: az.InferenceData, chains: int, draws: int
                         ) -> az.InferenceData:
    """Mark a run that kept fewer chains or draws than asked for (an interrupted run).

    ``posterior.attrs["interrupted"]`` becomes 1 (with the chains and draws requested) and a
    :class:`SamplingInterruptedWarning` says what was kept.
    """
    post = idata.posterior
    kept_chains, kept_draws = int(post.sizes.get("chain", 0)), int(post.sizes.get("draw", 0))
    if kept_chains >= chains and kept_draws >= draws:
        return idata
    post.attrs.update(interrupted=1, chains_requested=int(chains), draws_requested=int(draws))
    warnings.warn(f"sampling was interrupted: the fit keeps {kept_chains} chain(s) x "
                  f"{kept_draws} draws of the {chains} x {draws} requested and is flagged "
                  "(estimator.interrupted_, idata_.posterior.attrs['interrupted']); fit again "
                  "for the full posterior", SamplingInterruptedWarning, stacklevel=4)
    return idata


@contextmanager
def keep_warmup() -> Iterator[None]:
    """Keep the tuning iterations of the fits run inside: every MCMC fit's ``idata_`` then
    also holds ``warmup_posterior`` and ``warmup_sample_stats`` (PyMC's
    ``discard_tuned_samples=False``).

    For diagnosis: whether and when each chain reached the region its draws come from.
    Convergence diagnostics and predictions still use the posterior draws only.  The hybrid
    sampler's pilot warm-up (:mod:`bayesmv.inference.restart`) is not kept.

    Examples
    --------
    >>> from bayesmv.inference.sample import keep_warmup
    >>> with keep_warmup():                                   # doctest: +SKIP
    ...     est.fit(X, y)
    >>> est.idata_.warmup_posterior                           # doctest: +SKIP
    """
    token = _KEEP_WARMUP.set(True)
    try:
        yield
    finally:
        _KEEP_WARMUP.reset(token)


def _sample_interruptible(**kwargs) -> az.InferenceData:
    """``pm.sample`` that turns Ctrl-C into a flagged partial result or a KeyboardInterrupt.

    With some posterior draws made, the result keeps them and is flagged
    (:func:`_flag_if_interrupted`); with none (stopped while tuning), KeyboardInterrupt is
    raised again, so the estimator's ``fit`` stops and a previous fit stays as it was.
    """
    sequential = kwargs.get("chains", 1) == 1 or kwargs.get("cores") == 1
    if sequential and kwargs.get("callback") is None:
        kwargs["callback"] = _stop_later_chains_after_interrupt(
            kwargs["draws"] + kwargs.get("tune", 0))
    kwargs.setdefault("discard_tuned_samples", not _KEEP_WARMUP.get())
    try:
        idata = pm.sample(**kwargs)
    except ValueError as exc:
        # PyMC's message when every chain stopped (Ctrl-C) before its first kept draw
        if "Not enough samples" in str(exc):
            raise KeyboardInterrupt("sampling was interrupted before any posterior draw; "
                                    "nothing was fitted") from exc
        raise
    return _flag_if_interrupted(idata, kwargs.get("chains", 1), kwargs["draws"])


def _in_daemon() -> bool:
    # Dask workers (and multiprocessing pools) are daemonic processes, which may not start
    # child processes: pm.sample's one-process-per-chain would fail there
    return multiprocessing.current_process().daemon


def sample_pymc(
    model: pm.Model,
    *,
    chains: int,
    draws: int,
    tune: int,
    cores: int | None,
    initvals: Sequence[dict],
    sample_seed: int,
    step=None,
    **kwargs,
) -> az.InferenceData:
    """``pm.sample`` with per-chain streams, honouring the active :func:`chain_plan`.

    ``initvals`` holds one starting point per chain of the full run and ``sample_seed`` comes
    from :func:`chain_seeds`.  Chain i draws from the same stream whether it runs alone or
    beside the others, so a subset of chains (``chain_plan(chain_ids=...)``) reproduces
    exactly the corresponding chains of a full run.  ``cores=None`` runs one process per
    chain up to the CPU count; in a daemonic process (a Dask worker) the chains run one after
    the other.

    Ctrl-C (KeyboardInterrupt) during sampling: when posterior draws were made, the result
    keeps them, ``posterior.attrs["interrupted"]`` is 1 and a
    :class:`SamplingInterruptedWarning` is issued; when none were (still tuning),
    KeyboardInterrupt is raised again.
    """
    plan = _PLAN.get()
    if plan is not None and plan.replay is not None:
        return _check_replay(plan.replay, chains, draws, kwargs.get("var_names"))
    ids = (tuple(range(chains)) if plan is None else plan.chain_ids)
    if ids[-1] >= chains:
        raise ValueError(f"chain ids {ids} out of range for a fit with {chains} chains")
    if len(initvals) != chains:
        raise ValueError(f"need one initial point per chain ({chains}), got {len(initvals)}")
    # PyMC gives the k-th chain of a call the k-th child of its seed's SeedSequence
    # (Generator.spawn); a sequence that has already spawned ids[0] children hands chains
    # ids[0], ids[0] + 1, ... exactly the streams they get in a run of all chains
    rng = np.random.Generator(np.random.PCG64(
        np.random.SeedSequence(sample_seed, n_children_spawned=ids[0])))
    if _in_daemon():
        cores = 1
    else:
        # PyMC's own default halves the CPU count (assuming hyper-threads), which runs two
        # chains one after the other on a 2-core machine: one process per chain instead
        cores = min(cores if cores is not None else (os.cpu_count() or 1), len(ids))
    idata = _sample_interruptible(step=step, draws=draws, tune=tune, chains=len(ids),
                                  cores=cores, initvals=[initvals[i] for i in ids],
                                  random_seed=rng, model=model, **kwargs)
    if plan is None:
        return idata
    raise ChainsSampled(_relabel_chains(idata, ids))


@contextmanager
def numpy_steps() -> Iterator[None]:
    """The setting for ``pm.sample`` with step methods that work in NumPy (the hybrid sampler,
    the hinge Gibbs sampler).

    - One BLAS thread: numpy's and scipy's OpenBLAS pools spin against each other on the
      steps' small matrices (a 2 × 2 triangular solve took 5 ms).
    - PyTensor's ``FAST_COMPILE`` mode for what PyMC compiles around such steps (the initial
      point and the traced variables, evaluated once per draw): compiling them to C took 13 s
      of a 20 s first fit with an empty compile cache, and saved nothing measurable per draw
      afterwards (a 1000-draw fit: 30 s either way, the same draws).
    """
    with threadpool_limits(limits=1, user_api="blas"), \
            pytensor.config.change_flags(mode="FAST_COMPILE"):
        yield


def _nuts_step(model: pm.Model, initvals: Sequence[dict], target_accept: float):
    """PyMC's NUTS as ``init="adapt_diag"`` builds it, from ALL chains' starting points.

    PyMC starts the diagonal mass-matrix adaptation at the mean of the chains' initial
    points; building the step here from every chain's point (cheap) rather than from those of
    the chains a process runs keeps chain i identical whether it runs alone or not.
    """
    from pymc.blocking import DictToArrayBijection
    from pymc.initial_point import make_initial_point_fns_per_chain
    from pymc.step_methods.hmc.quadpotential import QuadPotentialDiagAdapt

    fns = make_initial_point_fns_per_chain(model=model, overrides=list(initvals),
                                           jitter_rvs=set(), chains=len(initvals))
    points = [DictToArrayBijection.map(fn(0)).data for fn in fns]
    mean = np.mean(points, axis=0)
    potential = QuadPotentialDiagAdapt(mean.size, mean, np.ones_like(mean), 10)
    return pm.NUTS(model=model, potential=potential, target_accept=target_accept)


def pymc_stat_names(idata: az.InferenceData) -> az.InferenceData:
    """The sampler statistics under PyMC's names: nutpie calls the log density ``logp``,
    PyMC (and every reader here: the convergence report, MVM's best draw) ``lp``."""
    stats = idata.get("sample_stats")
    if stats is not None and "lp" not in stats and "logp" in stats:
        idata.sample_stats = stats.rename({"logp": "lp"})
    return idata


def _jax_chain_method(chains: int) -> str:
    import jax
    import pymc.sampling.jax  # noqa: F401 - sets XLA's host device count (read at first use)

    # one device per chain ("parallel", pmap) when there are enough, e.g. CPU host devices or
    # several GPUs; on one accelerator the chains run vectorised
    return "parallel" if jax.local_device_count() >= chains else "vectorized"


def run_sampler(
    built: BuiltModel,
    *,
    sampler: str,
    draws: int,
    tune: int,
    chains: int,
    cores: int | None,
    random_seed: int | None,
    trace_vars: Sequence[str],
    progressbar: bool = True,
    target_accept: float = 0.8,
    nuts_sampler: str = "pymc",
) -> az.InferenceData:
    """Sample the collapsed graph with ``pm.sample`` and return an ``InferenceData``.

    Every chain starts from its own dispersed initial point drawn with a seed derived from
    ``random_seed``, so a fit is reproducible and chains are not copies of each other.  With
    ``sampler="hybrid"`` or ``nuts_sampler="pymc"`` chain i is the same whether it runs
    alone (see :func:`chain_plan`) or with the others.  ``nuts_sampler="numpyro"`` or
    ``"blackjax"`` run NUTS through PyMC's JAX back-ends (on a GPU when JAX has one).  The
    hybrid sampler runs a pilot first, which restarts chains left far below the best one
    (:mod:`bayesmv.inference.restart`).
    """
    plan = _PLAN.get()
    if plan is not None and plan.replay is not None:  # draws made elsewhere: build no steps
        return _check_replay(plan.replay, chains, draws, trace_vars)
    seeds, sample_seed = chain_seeds(random_seed, chains)
    # the starting points come from an SVD: with a multi-threaded BLAS its round-off depends
    # on the thread count, and MCMC amplifies any difference, so a chain run in a Dask worker
    # (one BLAS thread) would leave from another point than the same chain run here
    with threadpool_limits(limits=1, user_api="blas"):
        initvals = [built.initial_values(np.random.default_rng(s)) for s in seeds]
    common = dict(draws=draws, tune=tune, chains=chains, var_names=list(trace_vars),
                  progressbar=progressbar, compute_convergence_checks=False,
                  return_inferencedata=True, discard_tuned_samples=not _KEEP_WARMUP.get())
    model = built.model
    if sampler == "hybrid":
        return _run_hybrid(built, initvals, sample_seed, cores, target_accept, common)
    if sampler != "nuts":
        raise ValueError(f"sampler must be 'hybrid' or 'nuts', got {sampler!r}")
    check_nuts_sampler(nuts_sampler)
    if nuts_sampler == "pymc":
        step = _nuts_step(model, initvals, target_accept)
        return sample_pymc(model, step=step, initvals=initvals, sample_seed=sample_seed,
                           cores=cores, **common)
    if plan is not None:
        raise ValueError(f"nuts_sampler={nuts_sampler!r} runs all chains in one program and "
                         "cannot run a chain on its own reproducibly; use nuts_sampler='pymc' "
                         "(or the hybrid sampler) to spread chains over workers")
    if nuts_sampler == "nutpie":
        return _flag_if_interrupted(pymc_stat_names(
            pm.sample(nuts_sampler="nutpie", target_accept=target_accept,
                      random_seed=sample_seed, model=model, **common)), chains, draws)
    # JAX: the same dispersed starting points as PyMC's NUTS, no extra jitter
    return pm.sample(nuts_sampler=nuts_sampler, target_accept=target_accept, initvals=initvals,
                     random_seed=sample_seed, model=model,
                     nuts_sampler_kwargs={"jitter": False,
                                          "chain_method": _jax_chain_method(chains)},
                     **common)


def _run_hybrid(built: BuiltModel, initvals: list[dict], sample_seed: int, cores: int | None,
                target_accept: float, common: dict) -> az.InferenceData:
    """The hybrid sampler, after a pilot warm-up that restarts chains left in a much
    lower-density region from the best chain (:mod:`bayesmv.inference.restart`).

    The pilot runs every chain, also under :func:`chain_plan`, so that the restart decision,
    and hence chain i, is the same whether chain i runs alone or with the others.  The run
    proper then makes the whole warm-up ``tune`` from the pilot's end points, so its
    adaptation is that of a run without the pilot.
    """
    model, chains, tune = built.model, common["chains"], common["tune"]
    sources = np.arange(chains)
    pilot = restart.pilot_length(tune) if chains > 1 else 0
    if pilot:
        pilot_tune = pilot - restart.COMPARISON_ITERATIONS  # the last iterations frozen
        steps = hybrid_steps(built, target_accept=target_accept, tune=pilot_tune)
        phase = dict(common, tune=pilot_tune,
                     draws=restart.COMPARISON_ITERATIONS, discard_tuned_samples=True,
                     var_names=[rv.name for rv in model.free_RVs])
        token = _PLAN.set(None)  # every chain, whichever of them this process keeps
        try:
            with numpy_steps():
                warm = sample_pymc(model, step=steps, initvals=initvals,
                                   sample_seed=sample_seed, cores=cores, **phase).posterior
        finally:
            _PLAN.reset(token)
        if warm.sizes["chain"] < chains or warm.sizes["draw"] < phase["draws"]:
            raise KeyboardInterrupt("sampling was interrupted while tuning; nothing was fitted")
        to_values = restart.value_point_function(model)
        sources = restart.restart_sources(restart.chain_log_densities(model, warm, to_values))
        initvals = restart.last_points(warm, to_values, sources)
        sample_seed = int(np.random.SeedSequence([sample_seed, 1]).generate_state(1)[0])
    steps = hybrid_steps(built, target_accept=target_accept, tune=tune)
    try:
        with numpy_steps():
            idata = sample_pymc(model, step=steps, initvals=initvals, sample_seed=sample_seed,
                                cores=cores, **common)
    except ChainsSampled as sampled:
        _record_restarts(sampled.idata, sources, pilot)
        raise
    return _record_restarts(idata, sources, pilot)


def _record_restarts(idata: az.InferenceData, sources: np.ndarray, pilot: int
                     ) -> az.InferenceData:
    idata.posterior.attrs["pilot_iterations"] = int(pilot)
    idata.posterior.attrs["warmup_restart_from"] = np.asarray(sources, dtype=int)
    idata.posterior.attrs["warmup_restarts"] = int(np.sum(sources != np.arange(len(sources))))
    return idata
