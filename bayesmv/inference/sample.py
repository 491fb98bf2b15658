"""Running the samplers: the hybrid Gibbs + HMC scheme, or NUTS, inside ``pm.sample``."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

import arviz as az
import numpy as np
import pymc as pm
from threadpoolctl import threadpool_limits

from bayesmv.builder import BuiltModel
from bayesmv.inference.gibbs import BetaLambdaGibbs, DPMixtureGibbs, LatentVariableGibbs
from bayesmv.inference.hmc import FrequencyHMC, LatentHMC
from bayesmv.inference.spec import HybridSpec


def hybrid_steps(built: BuiltModel, target_accept: float = 0.8, tune: int = 0) -> list:
    """The paper's sampler (Alg. 1) as PyMC step methods, in the paper's order.

    β and λ (exact Gibbs) → Ω and H (HMC, λ and U integrated out) → DP mixture (blocked
    Gibbs) → U, W, V, r, τ (exact Gibbs).
    """
    spec = HybridSpec.from_built(built)
    model = built.model
    value = {v.name: v for v in model.value_vars}
    n_views = spec.n_views
    beta_vars = [value["beta"]] + ([value["v_log__"]] if spec.precision_prior else [])
    steps = [
        BetaLambdaGibbs(beta_vars, spec, model=model),
        FrequencyHMC([value["Omega"]], spec, n_tune=tune, target_accept=target_accept,
                     model=model),
        LatentHMC([value["H"]], spec, target_accept=target_accept, model=model),
    ]
    if spec.is_dp:
        steps.append(DPMixtureGibbs(
            [value["dp_sticks_logodds__"], value["dp_sigma2_log__"], value["dp_mu"]], spec,
            model=model))
    lvm = [value[f"{w}_{v}"] for v in range(n_views) for w in ("W", "V")]
    steps.append(LatentVariableGibbs(lvm + [value["tau_log__"], value["r_log__"]], spec,
                                     model=model))
    covered = {v.name for s in steps for v in s.vars}
    missing = set(value) - covered
    if missing:
        raise RuntimeError(f"hybrid sampler has no step for {sorted(missing)}")
    return steps


def nutpie_available() -> bool:
    return importlib.util.find_spec("nutpie") is not None


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
    ``random_seed``, so a fit is reproducible and chains are not copies of each other.
    """
    seeds = np.random.SeedSequence(random_seed).spawn(chains + 1)
    initvals = [built.initial_values(np.random.default_rng(s)) for s in seeds[:chains]]
    sample_seed = int(seeds[-1].generate_state(1)[0])
    common = dict(draws=draws, tune=tune, chains=chains, cores=cores, random_seed=sample_seed,
                  var_names=list(trace_vars), progressbar=progressbar,
                  compute_convergence_checks=False, return_inferencedata=True,
                  model=built.model)
    if sampler == "hybrid":
        steps = hybrid_steps(built, target_accept=target_accept, tune=tune)
        # numpy's and scipy's OpenBLAS pools spin against each other on small matrices
        # (a 2x2 triangular solve took 5 ms); the blocks are small, so one thread each
        with threadpool_limits(limits=1, user_api="blas"):
            return pm.sample(step=steps, initvals=initvals, **common)
    if sampler == "nuts":
        if nuts_sampler == "nutpie":
            common.pop("cores")
            return pm.sample(nuts_sampler="nutpie", target_accept=target_accept, **common)
        return pm.sample(initvals=initvals, target_accept=target_accept, init="adapt_diag",
                         **common)
    raise ValueError(f"sampler must be 'hybrid' or 'nuts', got {sampler!r}")
