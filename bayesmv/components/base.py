"""Shared plumbing for model-graph components.

A component contributes random variables and potentials to a ``pm.Model`` (``build``) and
evaluates the same map with NumPy on one posterior draw (``evaluate``), which is what
prediction on new data needs.  Components communicate through :class:`BuildContext`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytensor.tensor as pt

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
    """Base class: a piece of the graph with a prefix-free set of variable names."""

    #: names of the model variables the component creates (filled by ``build``)
    var_names: tuple[str, ...] = ()

    def get_config(self) -> dict[str, Any]:
        """JSON-serialisable constructor arguments (for saving fitted models)."""
        return dict(self.__dict__)


def as_tensor(x: Any) -> pt.TensorVariable:
    return pt.as_tensor_variable(np.asarray(x, dtype=float))
