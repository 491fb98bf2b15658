"""Shared plumbing for model-graph components.

A component contributes random variables and potentials to a ``pm.Model`` (``build``) and
evaluates the same map with NumPy on one posterior draw (``evaluate``), which is what
prediction on new data needs.  Components communicate through :class:`BuildContext`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bayesmv.data import MultiViewData


@dataclass
class BuildContext:
    """What one ``ModelBuilder.build`` call knows while it adds the pieces.

    Attributes
    ----------
    data : MultiViewData
        The (standardised) training views.
    targets : ndarray of shape (n_samples, n_tasks)
        ±1 targets, one column per binary task.
    augmented : bool
        Build the data-augmented graph (explicit per-sample auxiliaries such as the hinge's
        λ and the view-specific latents U) instead of the collapsed one.
    initvals : dict
        Starting values proposed by the components (value-variable names to arrays).
    """

    data: MultiViewData
    targets: np.ndarray
    augmented: bool = False
    initvals: dict[str, np.ndarray] = field(default_factory=dict)
    rng: np.random.Generator = field(default_factory=np.random.default_rng)

    @property
    def n_samples(self) -> int:
        return self.data.n_samples

    @property
    def n_tasks(self) -> int:
        return int(self.targets.shape[1])


class Component:
    """Base class of the pieces: ``build`` adds variables to the open ``pm.Model`` and
    returns the tensor the next piece consumes; ``initial_values`` proposes a start."""
