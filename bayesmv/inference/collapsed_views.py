"""The shared latent H with the view latents and every view's noise precision, all views'
loadings integrated out.

Where two views share the latent, the data pin their cross-covariance ``W_0 W_1ᵀ`` but not how
the explained variance splits between them: one view's loadings grow, the other's shrink, each
view's τ follows its own, and H turns to match.  One-block updates (H given the loadings, the
loadings given H, τ given both) follow that direction by small steps.
:class:`CollapsedViewsHMC` first draws each view's latent ``U_v`` from its conditional, then
moves ``(H, U, log τ)`` by HMC on their conditional with every view's loadings ``[W_v V_v]``
integrated out, then draws the loadings from their exact conditional and lets U go again (a
partially collapsed Gibbs step, van Dyk & Park 2008).

Per view (the ``n`` rows that observe it, ``x_n = [W V] z_n + ε`` with ``z_n = [h_n; u_n]``,
``ε ~ N(0, τ⁻¹ I)``, the rows of ``[W V]`` ``N(0, R⁻¹)`` with ``R = diag(r, η 1)``), the
features are independent given Z.  With ``A = R + τ ZᵀZ`` and ``G = Xᵀ Z``, Woodbury's
identity gives the view's term

    ½ n D log τ - ½ τ ‖X‖² - ½ D log det A + ½ τ² tr(A⁻¹ GᵀG) + ½ D log det R,

at the cost of ``Xᵀ Z`` (``O(n D (m + K))``) and one (m + K) × (m + K) factorisation.

Not in the default sweep (:func:`~bayesmv.inference.sample.hybrid_steps` says why).
"""

from __future__ import annotations

import numpy as np

from bayesmv.inference.gibbs import (
    draw_gaussian_from_precision,
    loadings_conditional,
    view_latent_conditional,
)
from bayesmv.inference.hmc import _HMCStep, hinge_terms
from bayesmv.inference.latent_column import view_residuals


class ViewLoadingsMarginal:
    """One view's term of the latents' conditional with the view's loadings integrated out
    (see the module docstring): ``X`` holds the rows that observe the view and ``prior`` the
    loadings' precision along each latent dimension (``diag R``)."""

    def __init__(self, X: np.ndarray, prior: np.ndarray) -> None:
        self.X, self.R = X, np.diag(np.asarray(prior, dtype=float))
        self.n, self.D = X.shape
        self.sq_norm = float(np.sum(X**2))

    def log_density(self, Z: np.ndarray, log_tau: float) -> tuple[float, np.ndarray, float]:
        """The term (without ``½ D log det R``, constant here) and its gradients w.r.t. Z
        and ``log τ``."""
        tau = float(np.exp(log_tau))
        B = Z.T @ Z
        A = self.R + tau * B
        A_inv = np.linalg.inv(A)
        G = self.X.T @ Z
        Y = G @ A_inv                                       # G A⁻¹
        YtY = Y.T @ Y
        quad = float(np.sum(G * Y))                         # tr(A⁻¹ GᵀG)
        n, D = self.n, self.D
        value = (0.5 * n * D * log_tau - 0.5 * tau * self.sq_norm
                 - 0.5 * D * np.linalg.slogdet(A)[1] + 0.5 * tau**2 * quad)
        # d A = τ (dZᵀ Z + Zᵀ dZ); d G = Xᵀ dZ
        grad_Z = -D * tau * Z @ A_inv + tau**2 * self.X @ Y - tau**3 * Z @ YtY
        d_tau = (0.5 * n * D / tau - 0.5 * self.sq_norm - 0.5 * D * float(np.sum(A_inv * B))
                 + tau * quad - 0.5 * tau**2 * float(np.sum(B * YtY)))
        return float(value), grad_Z, tau * d_tau


class CollapsedViewsTarget:
    """``log p(H, U, log τ | ·)`` with every view's loadings integrated out: the latents'
    N(0, I) priors, the hinge through ``f = φ(H) βᵀ``, each view's term and τ's Gamma prior
    (in log coordinates, with the Jacobian).  ``x = (vec H, vec U_0, …, log τ / σ)``, with
    ``σ_v = √(2 / (n_v D_v))``, about log τ_v's conditional sd, so that one step size serves
    every block."""

    #: the leapfrog's inner forces: the hinge's trigonometry in float32 (see hinge_terms)
    force_dtype = np.float32

    def __init__(self, spec, nat: dict, U: list) -> None:
        self.spec, self.beta, self.Omega = spec, nat["beta"], nat["Omega"]
        self.shapes = [nat["H"].shape] + [u.shape for u in U]
        eta = spec.view_loading_precision
        self.views = [ViewLoadingsMarginal(Xo, np.concatenate([nat["r"][v],
                                                               np.full(u.shape[1], eta)]))
                      for v, (Xo, u) in enumerate(zip(spec.views, U, strict=True))]
        self.sigma = np.array([np.sqrt(2.0 / (t.n * t.D)) for t in self.views])

    def pack(self, H: np.ndarray, U: list, log_tau: np.ndarray) -> np.ndarray:
        return np.concatenate([H.ravel(), *[u.ravel() for u in U], log_tau / self.sigma])

    def unpack(self, x: np.ndarray) -> tuple[np.ndarray, list, np.ndarray]:
        blocks, start = [], 0
        for shape in self.shapes:
            blocks.append(x[start:start + shape[0] * shape[1]].reshape(shape))
            start += shape[0] * shape[1]
        return blocks[0], blocks[1:], x[start:] * self.sigma

    def logp_grad(self, x: np.ndarray, dtype=np.float64) -> tuple[float, np.ndarray]:
        s = self.spec
        H, U, log_tau = self.unpack(x)
        m = H.shape[1]
        logl, dS = hinge_terms(H @ self.Omega.T, self.beta, s.targets, s.C, dtype)
        tau = np.exp(log_tau)
        value = float(np.sum(logl) - 0.5 * np.sum(H**2) - 0.5 * sum(np.sum(u**2) for u in U)
                      + np.sum(s.a_tau * log_tau - s.b_tau * tau))
        g_H, g_U = dS @ self.Omega - H, [-u for u in U]
        g_tau = s.a_tau - s.b_tau * tau
        for v, (term, idx) in enumerate(zip(self.views, s.observed_index, strict=True)):
            val, g_Z, g_t = term.log_density(np.concatenate([H[idx], U[v]], axis=1),
                                             float(log_tau[v]))
            value += val
            g_H[idx] += g_Z[:, :m]
            g_U[v] += g_Z[:, m:]
            g_tau[v] += g_t
        return value, np.concatenate([g_H.ravel(), *[g.ravel() for g in g_U],
                                      g_tau * self.sigma])


class CollapsedViewsHMC(_HMCStep):
    """H, the view latents and every view's τ by HMC with all views' loadings integrated
    out, then the loadings from their exact conditional (see the module docstring).  Writes
    H, τ and every ``W_v`` and ``V_v``."""

    def __init__(self, vars, spec, target_accept: float = 0.8, max_steps: int = 32, **kwargs):
        super().__init__(vars, spec, target_accept=target_accept, initial_step=0.05,
                         max_steps=max_steps, **kwargs)

    def step(self, point):
        s, nat, rng = self.spec, self.spec.natural(point), self.rng
        H0, U0 = nat["H"], []
        residuals = view_residuals(s, H0, [nat[f"W_{v}"] for v in range(s.n_views)])
        for v, E in enumerate(residuals):
            V = nat[f"V_{v}"]
            U0.append(draw_gaussian_from_precision(
                *view_latent_conditional(E @ V, V, float(nat["tau"][v])), rng).T)
        target = CollapsedViewsTarget(s, nat, U0)
        log_tau0 = np.array(point["tau_log__"], dtype=float)
        x, took, stat = self._transition(target, target.pack(H0, U0, log_tau0))
        # a rejected proposal keeps the exact old values (no round trip through x)
        H, U, log_tau = target.unpack(x) if took else (H0, U0, log_tau0)
        new = dict(point)
        new["H"], new["tau_log__"] = H, log_tau
        for v, (Xo, idx) in enumerate(zip(s.views, s.observed_index, strict=True)):
            WV = draw_gaussian_from_precision(*loadings_conditional(
                Xo, H[idx], U[v], nat["r"][v], s.view_loading_precision,
                float(np.exp(log_tau[v]))), rng).T
            new[f"W_{v}"], new[f"V_{v}"] = WV[:, :s.latent_dim], WV[:, s.latent_dim:]
        return new, [stat]
