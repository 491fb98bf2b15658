"""Feature maps: random Fourier features with a fixed or a learned spectral density.

``φ(h) = M^{-1/2} [cos(Ω h); sin(Ω h)]`` and ``φ̃ = [φ; 1]``; the rows ω_j of Ω are draws from
the kernel's spectral density (Bochner).  Two densities are offered:

* :class:`GaussianSpectral` — ω ~ N(0, s² I): the RBF kernel ``exp(-s² ||δ||² / 2)``.
* :class:`DPMixtureSpectral` — ω ~ Σ_k π_k N(μ_k, diag σ²_k) with truncated stick-breaking
  weights (a DP mixture, K components) and a conjugate normal–inverse-gamma base measure per
  dimension: the adaptive kernel of M³LAK.  Component assignments are summed out in the graph,
  so NUTS can sample it and the hybrid sampler's blocked Gibbs step targets the same posterior.

Why truncated stick-breaking rather than the paper's slice sampler: both samplers must target
*one* posterior (the tests compare them), ArviZ needs fixed-size variables, and with K = 20,
α = 1 the mass beyond the truncation is ≈ 4·M·exp(-(K-1)/α) ≈ 2·10⁻⁶ (Ishwaran & James 2001).
Why diagonal components: a mixture of diagonal Gaussians still approximates any spectral
density, its base measure is conjugate per dimension, and it costs K·m instead of K·m² numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.distributions.shape_utils import rv_size_is_none
from pytensor.tensor.random.op import RandomVariable
from scipy.special import expit

from bayesmv.components.base import (
    LATENT,
    VIEW_FEATURES,
    VIEWS,
    BuildContext,
    Component,
    ViewFeatures,
)
from bayesmv.components.linear import fill_missing, publish_view_features
from bayesmv.data import MultiViewData


def fourier_features(Z, Omega, *, constant: bool = True, xp=np):
    """``φ̃(Z) = [cos S, sin S, √M]/√M`` with ``S = Z Ωᵀ``, shape (..., 2M + 1); without
    ``constant``, ``φ(Z)`` of shape (..., 2M).

    The one definition of the map, for NumPy (``xp=np``) and for the model graph
    (``xp=pytensor.tensor``, with Ω of static shape ``(M, m)``).
    """
    S = Z @ Omega.T
    return fourier_features_of_phases(xp.cos(S), xp.sin(S), constant=constant, xp=xp)


def fourier_features_of_phases(cos, sin, *, constant: bool = True, xp=np):
    """``φ̃ = [cos S, sin S, √M]/√M`` (or ``φ`` without ``constant``) from the cosines and
    sines of the phases ``S = Z Ωᵀ``, along the last axis (for callers that need them again,
    e.g. for a gradient, or that damp them)."""
    M = cos.shape[-1] if xp is np else cos.type.shape[-1]
    # a Python float, not np.sqrt's float64 scalar, which would promote float32 phases; a
    # graph whose M is not static takes it from the tensor's shape
    root = math.sqrt(M) if M is not None else xp.sqrt(xp.cast(cos.shape[-1], cos.dtype))
    parts = [cos, sin]
    if constant:
        parts.append(xp.full((*cos.shape[:-1], 1), root, dtype=cos.dtype))
    return xp.concatenate(parts, axis=-1) / root


def stick_breaking_weights(sticks: np.ndarray) -> np.ndarray:
    """Weights of a truncated stick-breaking process from its K - 1 stick fractions."""
    sticks = np.asarray(sticks)
    remaining = np.concatenate([[1.0], np.cumprod(1.0 - sticks)])
    return np.concatenate([sticks, [1.0]]) * remaining


def _stick_breaking_weights_pt(sticks):
    remaining = pt.concatenate([pt.ones(1), pt.cumprod(1.0 - sticks)])
    return pt.concatenate([sticks, pt.ones(1)]) * remaining


def logsumexp(a: np.ndarray, axis: int, keepdims: bool = False) -> np.ndarray:
    """Plain NumPy log-sum-exp (scipy's array-API version costs ~0.3 ms a call here)."""
    top = np.max(a, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(a - top), axis=axis, keepdims=True)) + top
    return out if keepdims else np.squeeze(out, axis=axis)


def diagonal_gaussian_component_logp(Omega: np.ndarray, mu: np.ndarray,
                                     sigma2: np.ndarray) -> np.ndarray:
    """Log-density of every frequency under every diagonal Gaussian mixture component.

    Parameters
    ----------
    Omega : ndarray of shape (M, m)
        The frequencies ω_j (rows).
    mu : ndarray of shape (K, m)
        Component means μ_k.
    sigma2 : ndarray of shape (K, m)
        Component variances σ²_k (per dimension).

    Returns
    -------
    ndarray of shape (M, K)
        ``log N(ω_j | μ_k, diag σ²_k)``; the mixture weights are not included.
    """
    return DiagonalGaussians(mu, sigma2).logp(Omega)


class DiagonalGaussians:
    """K diagonal Gaussians ``N(μ_k, diag σ²_k)`` with their constants computed once: the HMC
    step for Ω evaluates the mixture, and its gradient, at every leapfrog step."""

    def __init__(self, mu: np.ndarray, sigma2: np.ndarray) -> None:
        self.precision = 1.0 / sigma2
        self.mean_precision = mu * self.precision
        self.constant = -0.5 * np.sum(mu * self.mean_precision + np.log(2 * np.pi * sigma2),
                                      axis=1)

    def logp(self, Omega: np.ndarray) -> np.ndarray:
        """``log N(ω_j | μ_k, diag σ²_k)``, (M, K)."""
        # the square expanded into matrix products: no (M, K, m) temporary
        return (Omega @ self.mean_precision.T - 0.5 * ((Omega**2) @ self.precision.T)
                + self.constant)


class DiagonalNormalMixtureRV(RandomVariable):
    """Draws of :class:`DiagonalNormalMixture`: one component, then one normal, per batch entry."""

    name = "diagonal_normal_mixture"
    signature = "(k),(k,m),(k,m)->(m)"
    dtype = "floatX"
    _print_name = ("DiagNormalMixture", "\\operatorname{DiagNormalMixture}")

    @classmethod
    def rng_fn(cls, rng: np.random.Generator, weights: np.ndarray, mu: np.ndarray,
               sigma2: np.ndarray, size: tuple[int, ...] | None) -> np.ndarray:
        K, m = mu.shape[-2:]
        batch = (tuple(size) if size is not None else
                 np.broadcast_shapes(weights.shape[:-1], mu.shape[:-2], sigma2.shape[:-2]))
        weights = np.broadcast_to(weights, batch + (K,))
        mu = np.broadcast_to(mu, batch + (K, m))
        sigma2 = np.broadcast_to(sigma2, batch + (K, m))
        # inverse-CDF choice, since rng.choice takes a single probability vector; scaling u by
        # the total tolerates weights that sum to 1 only up to rounding
        cdf = np.cumsum(weights, axis=-1)
        u = rng.uniform(size=batch) * cdf[..., -1]
        z = np.minimum(np.sum(u[..., None] >= cdf, axis=-1), K - 1)[..., None, None]
        mu_z = np.take_along_axis(mu, z, axis=-2)[..., 0, :]
        sigma2_z = np.take_along_axis(sigma2, z, axis=-2)[..., 0, :]
        return mu_z + np.sqrt(sigma2_z) * rng.standard_normal(batch + (m,))


diagonal_normal_mixture = DiagonalNormalMixtureRV()


class DiagonalNormalMixture(pm.Continuous):
    r"""Finite mixture of diagonal normals on :math:`\mathbb{R}^m`.

    .. math:: p(\omega) = \sum_k w_k \prod_d N(\omega_d; \mu_{kd}, \sigma^2_{kd})

    Parameters
    ----------
    weights : tensor of shape (..., K)
        Mixture weights (summing to one).
    mu, sigma2 : tensors of shape (..., K, m)
        Component means and variances.

    Notes
    -----
    Batch dimensions (``...``) broadcast against each other and against the value's leading
    dimensions in the log-density and in the draws alike: batch entry ``i`` is a draw from
    the mixture with parameters ``weights[i], mu[i], sigma2[i]``.
    """

    rv_op = diagonal_normal_mixture

    @classmethod
    def dist(cls, weights, mu, sigma2, **kwargs):
        return super().dist([pt.as_tensor_variable(weights), pt.as_tensor_variable(mu),
                             pt.as_tensor_variable(sigma2)], **kwargs)

    def support_point(rv, size, weights, mu, sigma2):
        # zero: the prior mean of ω under M³LAK's centred component means
        if rv_size_is_none(size):
            return pt.zeros_like(weights[..., :1] * mu[..., 0, :] * sigma2[..., 0, :])
        return pt.zeros(pt.concatenate([size, [mu.shape[-1]]]))

    def logp(value, weights, mu, sigma2):
        diff = pt.expand_dims(value, -2) - mu
        comp = -0.5 * pt.sum(diff**2 / sigma2 + pt.log(2 * np.pi * sigma2), axis=-1)
        return pt.logsumexp(comp + pt.log(weights), axis=-1)


@dataclass(frozen=True)
class ScaleRatio:
    """``r(ℓ) = a ℓ + b (e^{2sℓ} - 1)`` per latent column: the form of a spectral density's log
    ratio along the scale orbit ``Ω_{:d} → e^{ℓ_d} Ω_{:d}`` (its Jacobian included); calling it
    gives ``(r(ℓ), r'(ℓ))``."""

    a: float
    b: np.ndarray
    s: float

    def __call__(self, log_c) -> tuple[np.ndarray, np.ndarray]:
        log_c = np.asarray(log_c, dtype=float)
        return self.a * log_c + self.b * (np.exp(2.0 * self.s * log_c) - 1.0), self.gradient(log_c)

    def gradient(self, log_c: np.ndarray) -> np.ndarray:
        """``r'(ℓ)`` alone (HMC's inner forces need no value)."""
        return self.a + 2.0 * self.s * self.b * np.exp(2.0 * self.s * log_c)


class GaussianSpectral(Component):
    """ω ~ N(0, s² I) with ``s = bandwidth / sqrt(m)``: an RBF kernel on the latent space.

    The ``1/sqrt(m)`` default puts typical pairs of latent points (``||δ||² ≈ 2m`` under the
    N(0, I) prior) at kernel value ``exp(-bandwidth²)``.
    """

    def __init__(self, bandwidth: float = 1.0) -> None:
        self.bandwidth = bandwidth

    def scale(self, m: int) -> float:
        return self.bandwidth / np.sqrt(m)

    def build(self, ctx: BuildContext, n_frequencies: int, m: int, suffix: str = "",
              input_dim: str = "latent") -> pt.TensorVariable:
        return pm.Normal(f"Omega{suffix}", 0.0, self.scale(m), shape=(n_frequencies, m),
                         dims=("frequency", input_dim))

    def initial_values(self, n_frequencies: int, m: int, rng, suffix: str = ""
                       ) -> dict[str, np.ndarray]:
        return {f"Omega{suffix}": self.scale(m) * rng.standard_normal((n_frequencies, m))}

    def prior_logp_grad(self, Omega: np.ndarray, draw: dict) -> tuple[float, np.ndarray]:
        """log p(Ω) (up to a constant) and its gradient."""
        return self.prior_logp_grad_form(draw)(Omega)

    def prior_logp_grad_form(self, draw: dict):
        """:meth:`prior_logp_grad` as a function of Ω alone."""
        s2 = self.scale(draw["Omega"].shape[1]) ** 2
        return lambda Omega: (-0.5 * float(np.sum(Omega**2)) / s2, -Omega / s2)

    def prior_scale(self, draw: dict, m: int) -> np.ndarray:
        return np.full(m, self.scale(m))

    def rescale(self, draw: dict, c) -> tuple[dict, float | np.ndarray]:
        """Scale the frequencies by c; return the scaled draw's spectral parameters and the
        log of [prior ratio × Jacobian] of the move Ω → cΩ (see BetaLambdaGibbs).

        ``c`` is one number, or one per latent dimension (scaling Ω's columns); the log ratio
        is then one per column.
        """
        c = np.asarray(c, dtype=float)
        per_column = self.log_scale_ratio(draw, np.log(c))[0]
        return {}, per_column if c.ndim else float(np.sum(per_column))

    def log_scale_ratio(self, draw: dict, log_c) -> tuple[np.ndarray, np.ndarray]:
        """Per latent column, :meth:`rescale`'s log ratio at ``c = exp(log_c)`` and its
        derivative in ``log_c``: ``-½(c² - 1) Σ_k ω_kd² / s² + M log c``."""
        return self.log_scale_ratio_form(draw)(log_c)

    def log_scale_ratio_form(self, draw: dict) -> ScaleRatio:
        """:meth:`log_scale_ratio` as a function of ``log_c`` alone (its constants once)."""
        Omega = draw["Omega"]
        spread = np.sum(Omega**2, axis=0) / self.scale(Omega.shape[1]) ** 2
        return ScaleRatio(float(Omega.shape[0]), -0.5 * spread, 1.0)


class DPMixtureSpectral(Component):
    """Truncated DP mixture of diagonal Gaussians as the spectral density.

    Parameters
    ----------
    n_components : int
        Truncation level K of the stick-breaking process.
    concentration : float, default 1.0
        DP concentration α (sticks ~ Beta(1, α)).
    kappa0 : float, default 100
        Prior precision scale of component means: μ_k | σ²_k ~ N(0, σ²_k / κ₀).  Large κ₀
        keeps the means near the origin, so the components differ mainly in their
        per-dimension bandwidths (a mixture of ARD RBF kernels) and a mean far from zero (an
        oscillating kernel) needs strong evidence.  With κ₀ = 1 the 20-dimensional components
        separated, frequencies could not change component, and M³LAK's chains kept different
        numbers of components (R-hat of that count 1.7-2.0 on the digits, ESS < 10; κ₀ = 100:
        1.05, ESS 90).
    a0 : float
        Inverse-gamma shape of the component variances σ²_kd.
    bandwidth : float
        Sets the inverse-gamma scale so that E[σ²] = bandwidth² / m (see GaussianSpectral).
    alpha : float or None, default None
        Deprecated alias of ``concentration``; when given it takes precedence, with a
        ``FutureWarning``.
    """

    RENAMED = {"concentration": "alpha"}

    def __init__(self, n_components: int = 20, concentration: float = 1.0,
                 kappa0: float = 100.0, a0: float = 3.0, bandwidth: float = 1.0,
                 alpha: float | None = None) -> None:
        self.n_components = n_components
        self.concentration = concentration
        self.kappa0 = kappa0
        self.a0 = a0
        self.bandwidth = bandwidth
        self.alpha = alpha

    def b0(self, m: int) -> float:
        return (self.a0 - 1.0) * self.bandwidth**2 / m

    def build(self, ctx: BuildContext, n_frequencies: int, m: int, suffix: str = "",
              input_dim: str = "latent") -> pt.TensorVariable:
        K = self.n_components
        ctx.add_coord("component", K)
        sticks = pm.Beta(f"dp_sticks{suffix}", 1.0, self._param("concentration"), shape=K - 1)
        weights = pm.Deterministic(f"dp_weights{suffix}", _stick_breaking_weights_pt(sticks),
                                   dims="component")
        sigma2 = pm.InverseGamma(f"dp_sigma2{suffix}", alpha=self.a0, beta=self.b0(m),
                                 shape=(K, m), dims=("component", input_dim))
        mu = pm.Normal(f"dp_mu{suffix}", 0.0, pt.sqrt(sigma2 / self.kappa0), shape=(K, m),
                       dims=("component", input_dim))
        # the M frequencies are the mixture's batch: i.i.d. given (weights, mu, sigma2)
        return DiagonalNormalMixture(f"Omega{suffix}", weights, mu, sigma2,
                                     shape=(n_frequencies, m), dims=("frequency", input_dim))

    def initial_values(self, n_frequencies: int, m: int, rng, suffix: str = ""
                       ) -> dict[str, np.ndarray]:
        K = self.n_components
        sticks = np.clip(rng.beta(1.0, self._param("concentration"), size=K - 1), 1e-6, 1 - 1e-6)
        sigma2 = np.full((K, m), self.b0(m) / (self.a0 - 1.0))
        mu = np.sqrt(sigma2 / self.kappa0) * 0.1 * rng.standard_normal((K, m))
        weights = stick_breaking_weights(sticks)
        z = rng.choice(K, size=n_frequencies, p=weights / weights.sum())
        Omega = mu[z] + np.sqrt(sigma2[z]) * rng.standard_normal((n_frequencies, m))
        return {f"dp_sticks{suffix}_logodds__": np.log(sticks) - np.log1p(-sticks),
                f"dp_sigma2{suffix}_log__": np.log(sigma2), f"dp_mu{suffix}": mu,
                f"Omega{suffix}": Omega}

    @staticmethod
    def weights_from_draw(draw: dict) -> np.ndarray:
        if "dp_weights" in draw:
            return np.asarray(draw["dp_weights"])
        return stick_breaking_weights(expit(draw["dp_sticks_logodds__"]))

    def prior_logp_grad(self, Omega: np.ndarray, draw: dict) -> tuple[float, np.ndarray]:
        """log p(Ω | π, μ, σ²) (the mixture, up to a constant) and its gradient."""
        return self.prior_logp_grad_form(draw)(Omega)

    def prior_logp_grad_form(self, draw: dict):
        """:meth:`prior_logp_grad` as a function of Ω alone, the components' constants
        computed once (an HMC trajectory for Ω evaluates it at every leapfrog step)."""
        components = DiagonalGaussians(draw["dp_mu"], draw["dp_sigma2"])
        log_weights = np.log(self.weights_from_draw(draw))

        def logp_grad(Omega: np.ndarray) -> tuple[float, np.ndarray]:
            comp = components.logp(Omega) + log_weights
            total = logsumexp(comp, axis=1, keepdims=True)
            resp = np.exp(comp - total)  # (M, K)
            # -Σ_k resp_jk (ω_j - μ_k) / σ²_k, as two matrix products
            grad = resp @ components.mean_precision - Omega * (resp @ components.precision)
            return float(total.sum()), grad

        return logp_grad

    def rescale(self, draw: dict, c) -> tuple[dict, float | np.ndarray]:
        """Joint move (Ω, μ, σ²) → (cΩ, cμ, c²σ²): new (μ, σ²) and log[prior ratio × Jacobian].

        The mixture density of Ω is invariant up to c^{-Mm}, which cancels Ω's Jacobian c^{Mm};
        what remains per (k, d) is the normal–inverse-gamma base measure's change plus the
        Jacobian c³ of (μ, σ²): ``-2 a₀ log c - b₀ (c⁻² - 1) / σ²``.  The components are
        diagonal, so ``c`` may also be one factor per latent dimension d (scaling column d of
        Ω, μ and σ²); the log ratio is then one per column.
        """
        c = np.asarray(c, dtype=float)
        sigma2 = draw["dp_sigma2"]
        per_column = self.log_scale_ratio(draw, np.log(c))[0]
        updates = {"dp_mu": c * draw["dp_mu"], "dp_sigma2": c**2 * sigma2}
        return updates, per_column if c.ndim else float(np.sum(per_column))

    def log_scale_ratio(self, draw: dict, log_c) -> tuple[np.ndarray, np.ndarray]:
        """Per latent column d, :meth:`rescale`'s log ratio at ``c = exp(log_c)`` and its
        derivative in ``log_c``: ``Σ_k [-2 a₀ log c - b₀ (c⁻² - 1) / σ²_kd]``."""
        return self.log_scale_ratio_form(draw)(log_c)

    def log_scale_ratio_form(self, draw: dict) -> ScaleRatio:
        """:meth:`log_scale_ratio` as a function of ``log_c`` alone (its constants once)."""
        sigma2 = draw["dp_sigma2"]
        K, m = sigma2.shape
        return ScaleRatio(-2.0 * self.a0 * K, -self.b0(m) * np.sum(1.0 / sigma2, axis=0), -1.0)

    def prior_scale(self, draw: dict, m: int) -> np.ndarray:
        """Per-dimension standard deviation of the current mixture (a mass-matrix scale)."""
        w = self.weights_from_draw(draw)[:, None]
        mu, sigma2 = draw["dp_mu"], draw["dp_sigma2"]
        mean = np.sum(w * mu, axis=0)
        return np.sqrt(np.sum(w * (sigma2 + mu**2), axis=0) - mean**2)


class RandomFourierFeatures(Component):
    """Random Fourier features with a (learned) spectral density.

    On a shared latent ``h`` (M³LAK) the map is ``φ̃(h) = [cos Ωh; sin Ωh; √M] / √M``, one
    block with a constant.  On the views themselves each view gets its own frequencies
    ``Ω_v`` (variables ``Omega_v``, with ``m = D_v``) from its own copy of the spectral prior
    and its block ``[cos Ω_v x_v; sin Ω_v x_v] / √M`` (no constant: add one with the
    combiner, e.g. ``SumCombiner(flat_bias=True)``); a missing view's row is read as
    ``x_v = 0``.

    Parameters
    ----------
    n_frequencies : int, default 100
        Number M of frequencies (per view on the views).
    spectral : GaussianSpectral or DPMixtureSpectral
        Prior of the frequencies.
    n_features : int or None, default None
        Deprecated alias of ``n_frequencies``; when given it takes precedence, with a
        ``FutureWarning``.
    """

    consumes = (LATENT, VIEWS)
    produces = VIEW_FEATURES
    RENAMED = {"n_frequencies": "n_features"}

    def __init__(self, n_frequencies: int = 100, spectral: Component | None = None,
                 n_features: int | None = None) -> None:
        self.n_frequencies = n_frequencies
        self.spectral = spectral
        self.n_features = n_features

    @property
    def spectral_(self) -> Component:
        """The spectral prior (a :class:`DPMixtureSpectral` when ``spectral`` is None)."""
        return self.spectral if self.spectral is not None else DPMixtureSpectral()

    def build(self, ctx: BuildContext, Z) -> ViewFeatures:
        self._warn_renamed()
        self.spectral_._warn_renamed()
        M = self._param("n_frequencies")
        ctx.add_coord("frequency", M)
        if isinstance(Z, MultiViewData):
            views = [fill_missing(X) for X in Z.views]
            blocks = []
            for v, X in enumerate(views):
                ctx.add_coord(f"input_{v}", X.shape[1])
                Omega = self.spectral_.build(ctx, M, X.shape[1], suffix=f"_{v}",
                                             input_dim=f"input_{v}")
                blocks.append(fourier_features(pt.as_tensor(X), Omega, constant=False, xp=pt))
            return publish_view_features(ctx, blocks, None, [2 * M] * len(views))
        Omega = self.spectral_.build(ctx, M, ctx.sizes["latent"])
        return publish_view_features(ctx, [fourier_features(Z, Omega, xp=pt)], None, [2 * M + 1])

    def initial_values(self, ctx: BuildContext, rng) -> dict[str, np.ndarray]:
        if "latent" in ctx.sizes:
            return self.spectral_.initial_values(self._param("n_frequencies"),
                                                 ctx.sizes["latent"], rng)
        out: dict[str, np.ndarray] = {}
        for v, X in enumerate(ctx.data.views):
            out.update(self.spectral_.initial_values(self._param("n_frequencies"), X.shape[1], rng,
                                                     suffix=f"_{v}"))
        return out
