"""The presets' fitted model as a builder and a ``pm.Model``: ``builder_`` and ``model_``.

:class:`~bayesmv.MultiViewClassifier` keeps the builder it fitted (``builder_``: its pieces
with every hyper-parameter its criterion chose fixed) and that builder's graph on the training
rows (``model_``), for PyMC's own tools.  The presets fit through their own fast solvers, so
they hold the same two things through this mixin: each preset says how its fitted
attributes fix its builder (``_fitted_builder``), and ``model_`` is that builder's graph on
the standardised training rows, built when first read (the fast solvers do not need it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pymc as pm

    from bayesmv.builder import ModelBuilder


class FittedGraphMixin:
    """``builder_`` and ``model_`` for an estimator that defines ``_fitted_builder()`` and
    whose ``fit`` commits ``_graph_inputs`` (the standardised training views and the
    likelihood's targets) and ``_model`` (the graph, where ``fit`` built it anyway, else
    None)."""

    @property
    def builder_(self) -> ModelBuilder:
        """The fitted model as a :class:`~bayesmv.ModelBuilder`: the estimator's builder
        (``make_builder``) with every hyper-parameter the fit chose fixed at its chosen value.
        ``MultiViewClassifier(est.builder_)`` fits the same model with the generic engines."""
        self._check_fitted()
        return self._fitted_builder()

    @property
    def model_(self) -> pm.Model:
        """The fitted ``pm.Model``: ``builder_``'s graph on the standardised training rows,
        for PyMC's own tools (``pm.model_to_graphviz(est.model_)``,
        ``pm.sample_prior_predictive(model=est.model_)``).  Built when first read and kept;
        not saved, and so not available on a model read by ``load`` (the file does not hold
        the training rows): there, ``est.build_model(X, y).model`` builds the graph
        with the hyper-parameters left to the fit."""
        self._check_fitted()
        model = vars(self).get("_model")
        if model is None:
            inputs = vars(self).get("_graph_inputs")
            if inputs is None:
                raise AttributeError(
                    f"model_ of this {type(self).__name__} is not available: it is the graph "
                    "on the training rows, which a model read by load does not keep; "
                    "build_model(X_train, y_train).model builds the graph on given rows "
                    "(with the hyper-parameters a fit chooses left free)")
            model = self.builder_.build(*inputs).model
            vars(self)["_model"] = model
        return model

    def __getstate__(self) -> dict[str, Any]:
        # the graph is rebuilt from the training rows when read again, not copied or pickled
        state = dict(super().__getstate__())
        state.pop("_model", None)
        return state
