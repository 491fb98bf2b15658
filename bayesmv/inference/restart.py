"""A pilot warm-up that restarts chains left in a region of much lower posterior density.

The hybrid sampler's factor model has states that its moves do not cross within a run: on
some data the views "share out" their private directions among the shared latent columns
differently per chain, and a chain that settles early in one share-out keeps it (on UCI
digits 0 vs 8 one view's log noise precision held 0.96 in two chains and 1.04 in the other
two through 3000 iterations, the second state 200-300 nats higher in log density).  Every
chain then looks stationary and R-hat flags the run.  So before the warm-up proper, every
chain runs a pilot (:func:`pilot_length`); over its last
:data:`COMPARISON_ITERATIONS` iterations (adaptation frozen) the chains' log densities are
compared, and a chain whose mean lies more than :data:`RESTART_SDS` pooled within-chain
standard deviations below the best chain's continues from the best chain's last state.
Every chain then makes the whole warm-up and its draws with its own random stream, exactly
as a run without the pilot would from those starting points.  This is what multi-path
Pathfinder's importance resampling of starting points does (Zhang et al. 2022): spend
iterations whose draws are discarded on reaching the region that holds the mass.  The
Markov kernel of the kept draws is unchanged, so the posterior sampled is the same; what
changes is where the chains begin.  Chains that agree are left as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pymc as pm
import pytensor

from bayesmv.inference.predict import of_free_variables

#: a chain restarts when its mean log density over the comparison stretch lies this many
#: pooled within-chain standard deviations below the best chain's.  The separated states
#: seen (digits 0 vs 8) lay 2-3 such deviations apart after a 500-iteration pilot.  Chains
#: of one state also differ by more than one deviation often (the log density moves slowly,
#: so a 100-iteration mean is noisy): 28 of 40 fits measured restarted some chain, most of
#: them with no state to leave.
RESTART_SDS = 1.0
#: iterations (adaptation frozen) at the pilot's end over which the chains' log densities
#: are compared
COMPARISON_ITERATIONS = 100
#: the log density is evaluated at every this-many-th of those iterations
COMPARISON_THIN = 5
#: the shortest warm-up (``tune``) that runs a pilot; a shorter one is a quick look
MIN_TUNE = 400
#: the pilot's length: half the warm-up, and at least this many iterations
MIN_PILOT = 200


def pilot_length(tune: int) -> int:
    """Iterations of the pilot before a warm-up of ``tune`` (0: no pilot).

    Half the warm-up (500 of the default 1000: about 17 % more iterations with the default
    2000 draws), at least :data:`MIN_PILOT`.  The pilot only has to bring the chains to
    their states, not to tune the steps for the draws, which the full warm-up that follows
    does.  A quarter was too short on digits 0 vs 8 (seed 1): after 250 iterations two of
    the chains in the lower state were still within a standard deviation of the best, kept
    their state and split τ (R-hat 1.53); after 500 all three moved and the fit converged.
    """
    return 0 if tune < MIN_TUNE else max(tune // 2, MIN_PILOT)


def restart_sources(log_density: np.ndarray, sds: float | None = None) -> np.ndarray:
    """The chain each chain continues from: itself, or the best chain when its mean log
    density lies more than ``sds`` pooled within-chain standard deviations below the best's.

    Parameters
    ----------
    log_density : ndarray of shape (chains, draws)
    sds : float, optional
        The threshold in pooled standard deviations; :data:`RESTART_SDS` by default.

    Returns
    -------
    ndarray of int, shape (chains,)
    """
    sds = RESTART_SDS if sds is None else sds
    log_density = np.asarray(log_density, dtype=float)
    keep = np.arange(len(log_density))
    finite = np.all(np.isfinite(log_density), axis=1)
    if not finite.any():  # nothing to compare against
        return keep
    mean = np.where(finite, log_density.mean(axis=1), -np.inf)
    pooled_sd = float(np.sqrt(np.mean(log_density[finite].var(axis=1))))
    best = int(np.argmax(mean))
    lagging = ~finite | (mean[best] - mean > sds * pooled_sd)
    return np.where(lagging, best, keep)


def value_point_function(model: pm.Model) -> Callable[[dict], dict[str, np.ndarray]]:
    """A function from a draw of the free variables (their names, constrained values, as a
    trace records them) to the model's value variables (transformed), compiled once."""
    free = list(model.free_RVs)
    forward = []
    for rv in free:
        transform = model.rvs_to_transforms.get(rv)
        forward.append(rv if transform is None else transform.forward(rv, *rv.owner.inputs))
    inputs, outputs = of_free_variables(model, forward)
    fn = pytensor.function(inputs, outputs, on_unused_input="ignore", mode="FAST_RUN")
    names = [model.rvs_to_values[rv].name for rv in free]
    rv_names = [rv.name for rv in free]

    def to_values(point: dict) -> dict[str, np.ndarray]:
        values = fn(*[point[n] for n in rv_names])
        return {n: np.asarray(v) for n, v in zip(names, values, strict=True)}

    return to_values


def chain_log_densities(model: pm.Model, posterior, to_values: Callable[[dict], dict],
                        thin: int = COMPARISON_THIN) -> np.ndarray:
    """The model's log density (what the sampler targets) at every ``thin``-th draw of each
    chain, shape (chains, draws // thin)."""
    logp = model.compile_logp(mode="FAST_RUN")
    rv_names = [rv.name for rv in model.free_RVs]
    arrays = {n: posterior[n].values for n in rv_names}
    chains, draws = arrays[rv_names[0]].shape[:2]
    picks = range(thin - 1, draws, thin)
    return np.array([[float(logp(to_values({n: a[c, d] for n, a in arrays.items()})))
                      for d in picks] for c in range(chains)])


def last_points(posterior, to_values: Callable[[dict], dict], sources: Sequence[int]
                ) -> list[dict[str, np.ndarray]]:
    """Each chain's starting point for the warm-up proper: the last draw of its source
    chain, as value variables."""
    names = list(posterior.data_vars)
    return [to_values({n: posterior[n].values[s, -1] for n in names}) for s in sources]
