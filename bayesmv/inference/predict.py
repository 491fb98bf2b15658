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
from pytensor.graph.replace import clone_replace

from bayesmv.builder import ModelBuilder
from bayesmv.data import MultiViewData


class GraphPredictor:
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
        model = built.model
        f = model["f"]
        rvs = list(model.free_RVs)
        holders = [rv.type(name=rv.name) for rv in rvs]
        f_of_draws = clone_replace(f, replace=dict(zip(rvs, holders, strict=True)))
        extra = built.context.state.get("prediction_inputs", {})
        self.names = [rv.name for rv in rvs]
        self.extra = {name: tuple(int(d) for d in var.type.shape) for name, var in extra.items()}
        self._fn = pytensor.function(holders + list(extra.values()), f_of_draws,
                                     on_unused_input="ignore")

    def __call__(self, draws: dict[str, np.ndarray], rng: np.random.Generator | None = None
                 ) -> np.ndarray:
        """``f`` (S, n, T) at S draws: ``draws[name]`` has shape (S, *shape) for every global
        variable; ``rng`` drives the per-row conditionals (a shared latent's ``h``)."""
        S = len(next(iter(draws.values())))
        rng = np.random.default_rng(0) if rng is None else rng
        out = []
        for s in range(S):
            args = [np.asarray(draws[n][s], dtype=float) for n in self.names]
            args += [rng.standard_normal(shape) for shape in self.extra.values()]
            out.append(self._fn(*args))
        return np.stack(out)
