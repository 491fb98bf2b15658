"""What the hybrid sampler's steps need to know about a built M³LAK-type graph.

The steps work on PyMC's *value* variables (log- or logit-transformed where the model says
so); :class:`HybridSpec` converts between a point and natural-space parameters in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit, logit

from bayesmv.builder import BuiltModel
from bayesmv.components.features import (
    DPMixtureSpectral,
    fourier_features_of_phases,
    stick_breaking_weights,
)


@dataclass
class HybridSpec:
    """Numeric description of the collapsed M³LAK graph, shared by all hybrid steps."""

    views: tuple[np.ndarray, ...]           # observed rows of each view
    observed_index: tuple[np.ndarray, ...]  # row indices of those observed rows
    patterns: np.ndarray                    # (n_patterns, V) distinct missing-view patterns
    pattern_of_row: np.ndarray              # (N,) index into patterns
    pattern_rows: tuple[np.ndarray, ...]    # the rows of each pattern
    targets: np.ndarray                     # (N, T) ±1
    C: float
    latent_dim: int
    view_latent_dim: int
    n_frequencies: int
    a_r: float
    b_r: float
    a_tau: float
    b_tau: float
    view_loading_precision: float
    spectral: object
    prior_precision: float
    precision_prior: tuple[float, float] | None
    #: the last few (H, Ω) -> cos and sin of ``H Ωᵀ`` (see phases); never pickled
    _phases: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def from_built(cls, built: BuiltModel) -> HybridSpec:
        b = built.builder
        data = built.context.data
        rep, fmap, comb, lik = b.representation, b.feature_map, b.combiner, b.likelihood
        idx = tuple(np.flatnonzero(data.observed[:, v]) for v in range(data.n_views))
        patterns, pattern = np.unique(data.observed, axis=0, return_inverse=True)
        latent_dim, view_latent_dim = built.context.state["latent_dims"]  # build's choice
        return cls(
            views=tuple(np.ascontiguousarray(X[i]) for X, i in zip(data.views, idx, strict=True)),
            observed_index=idx, patterns=patterns, pattern_of_row=pattern.reshape(-1),
            pattern_rows=tuple(np.flatnonzero(pattern.reshape(-1) == p)
                               for p in range(len(patterns))),
            targets=built.context.targets, C=float(lik.C), latent_dim=latent_dim,
            view_latent_dim=view_latent_dim, n_frequencies=fmap._param("n_frequencies"),
            a_r=rep.a_r, b_r=rep.b_r, a_tau=rep.a_tau, b_tau=rep.b_tau,
            view_loading_precision=rep._param("view_loading_precision"), spectral=fmap.spectral_,
            prior_precision=comb.prior_precision, precision_prior=comb.precision_prior,
        )

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_phases": {}}

    # ------------------------------------------------------------- features
    def phases(self, H: np.ndarray, Omega: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``cos S`` and ``sin S`` of the phases ``S = H Ωᵀ`` in double precision (read-only).

        Double-precision trigonometry is the costliest elementwise work of a sweep (16× its
        single-precision cost here), and consecutive steps evaluate the features at the same
        (H, Ω): the λ draw and the start of Ω's HMC after the bandwidth move, the start of
        H's HMC after Ω's.  The last four points are remembered, keyed by their exact bytes,
        so a repeat returns the very arrays computed the first time.
        """
        key = (H.shape, Omega.shape, H.tobytes(), Omega.tobytes())
        found = self._phases.get(key)
        if found is None:
            S = H @ Omega.T
            found = (np.cos(S), np.sin(S))
            for array in found:
                array.flags.writeable = False
            if len(self._phases) >= 4:
                self._phases.pop(next(iter(self._phases)))
            self._phases[key] = found
        return found

    def features(self, H: np.ndarray, Omega: np.ndarray) -> np.ndarray:
        """``φ̃(H)`` at frequencies Ω, double precision (see :meth:`phases`)."""
        return fourier_features_of_phases(*self.phases(H, Omega))

    @property
    def n_views(self) -> int:
        return len(self.views)

    @property
    def is_dp(self) -> bool:
        return isinstance(self.spectral, DPMixtureSpectral)

    # -------------------------------------------------------- point <-> natural
    def natural(self, point: dict) -> dict:
        """Natural-space parameters of a point (only what the steps need)."""
        # fresh (aligned) copies: in a parallel run PyMC hands over views of shared memory
        # whose alignment changes BLAS/SIMD summation order; the 1e-12 differences then grew
        # until a chain sampled in a worker process differed from the same chain run alone
        point = {k: np.array(v) for k, v in point.items()}
        nat = {"H": point["H"], "Omega": point["Omega"], "beta": point["beta"],
               "tau": np.exp(point["tau_log__"]), "r": np.exp(point["r_log__"])}
        for v in range(self.n_views):
            nat[f"W_{v}"] = point[f"W_{v}"]
            nat[f"V_{v}"] = point[f"V_{v}"]
        nat["v"] = (float(np.exp(point["v_log__"])) if self.precision_prior is not None
                    else self.prior_precision)
        if self.is_dp:
            sticks = expit(point["dp_sticks_logodds__"])
            nat["dp_sticks"] = sticks
            nat["dp_weights"] = stick_breaking_weights(sticks)
            nat["dp_sigma2"] = np.exp(point["dp_sigma2_log__"])
            nat["dp_mu"] = point["dp_mu"]
        return nat

    def scaled_frequencies(self, point: dict, nat: dict, c) -> dict:
        """The point with ``Ω → cΩ`` and the spectral prior's parameters moved with it (see
        the spectral density's ``rescale``); ``c`` is one factor or one per latent column."""
        new = dict(point)
        new["Omega"] = nat["Omega"] * c
        updates, _ = self.spectral.rescale(nat, c)
        if "dp_mu" in updates:
            new["dp_mu"] = updates["dp_mu"]
            new["dp_sigma2_log__"] = np.log(updates["dp_sigma2"])
        return new

    @staticmethod
    def encode_positive(x) -> np.ndarray:
        return np.log(np.asarray(x, dtype=float))

    @staticmethod
    def encode_unit(x) -> np.ndarray:
        return logit(np.clip(np.asarray(x, dtype=float), 1e-12, 1.0 - 1e-12))
