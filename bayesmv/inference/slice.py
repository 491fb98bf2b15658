"""Univariate slice sampling (Neal 2003) of many independent coordinates at once."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def slice_sample_independent(log_density: Callable[[np.ndarray], np.ndarray], x0: np.ndarray,
                             width: float, rng: np.random.Generator,
                             max_steps_out: int = 64) -> np.ndarray:
    """One univariate slice-sampling update (Neal 2003) of each coordinate of ``x0``.

    ``log_density(x)`` returns one value per coordinate and coordinate i's value may depend
    on ``x[i]`` only (independent one-dimensional targets, updated together).  Stepping out
    uses the randomised split of at most ``max_steps_out`` steps, so each update leaves its
    target invariant.
    """
    x0 = np.asarray(x0, dtype=float)
    level = log_density(x0) - rng.exponential(size=x0.shape)
    left = x0 - width * rng.uniform(size=x0.shape)
    right = left + width
    left_steps = np.floor(max_steps_out * rng.uniform(size=x0.shape))
    right_steps = max_steps_out - 1 - left_steps
    for _ in range(max_steps_out):
        grow = (left_steps > 0) & (log_density(left) > level)
        if not grow.any():
            break
        left = np.where(grow, left - width, left)
        left_steps -= grow
    for _ in range(max_steps_out):
        grow = (right_steps > 0) & (log_density(right) > level)
        if not grow.any():
            break
        right = np.where(grow, right + width, right)
        right_steps -= grow
    x, pending = x0.copy(), np.ones(x0.shape, dtype=bool)
    while pending.any():
        proposal = left + rng.uniform(size=x0.shape) * (right - left)
        inside = log_density(proposal) > level
        take = pending & inside
        x[take] = proposal[take]
        shrink = pending & ~inside
        below = shrink & (proposal < x0)
        left = np.where(below, proposal, left)
        right = np.where(shrink & ~below, proposal, right)
        pending &= ~inside
    return x
