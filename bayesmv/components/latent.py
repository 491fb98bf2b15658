"""Representations: how the views enter the model.

:class:`SharedLatent` is M³LAK's multi-view latent-variable model (Du et al., M³LAK)::

    h_n ~ N(0, I_m),   u_{v,n} ~ N(0, I_K),   x_{v,n} ~ N(W_v h_n + V_v u_{v,n}, τ_v⁻¹ I)
    W_v[:, j] ~ N(0, r_{vj}⁻¹ I),  r_{vj} ~ Gamma(a_r, b_r),
    V_v ~ N(0, η⁻¹),  τ_v ~ Gamma(a_τ, b_τ)

The collapsed graph integrates the view-specific latents ``u`` out, so that
``x_v | h ~ N(W_v h, Ψ_v)`` with ``Ψ_v = V_v V_vᵀ + τ_v⁻¹ I``, evaluated by Woodbury in O(D K²).
The augmented graph keeps ``U_v`` explicit (used by tests to check Gibbs conditionals).
A missing view of a sample simply drops out of that sample's likelihood.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.tensor.slinalg import solve_triangular

from bayesmv.components.base import LATENT, VIEWS, BuildContext, Component
from bayesmv.data import MultiViewData
from bayesmv.linalg import cho_solve_lower, cholesky_lower


def collapsed_view_logp(X, H, W, V, tau):
    """Σ_n log N(x_n | W h_n, V Vᵀ + τ⁻¹ I) in O(n D K) via Woodbury (PyTensor graph)."""
    n, D = X.shape[0], X.shape[1]
    K = V.shape[1]
    R = X - H @ W.T
    A = pt.eye(K) + tau * (V.T @ V)
    L = pt.linalg.cholesky(A)
    S = solve_triangular(L, (R @ V).T, lower=True)
    quad = tau * pt.sum(R**2) - tau**2 * pt.sum(S**2)
    logdet = 2.0 * pt.sum(pt.log(pt.diag(L))) - D * pt.log(tau)
    return -0.5 * (n * D * np.log(2 * np.pi) + n * logdet + quad)


def view_noise_terms(W, V, tau, xp=np) -> tuple:
    """Return ``(G, Q)`` with ``G = Wᵀ Ψ⁻¹ W`` and ``Q = Ψ⁻¹ W`` for ``Ψ = V Vᵀ + τ⁻¹ I``.

    ``xp`` is ``numpy`` (prediction, samplers) or ``pytensor.tensor`` (the graph on new rows):
    one definition for both.
    """
    # Ψ⁻¹ W = τ W - τ² V A⁻¹ Vᵀ W  (Woodbury; A is K × K, K small)
    Q = tau * W - tau**2 * (V @ view_noise_correction(W, V, tau, xp=xp))
    return W.T @ Q, Q


def view_noise_correction(W, V, tau, xp=np):
    """``A⁻¹ Vᵀ W`` with ``A = I + τ VᵀV`` (K × m): Woodbury's ``Ψ⁻¹ W = τ W - τ² V·(this)``,
    so ``X Ψ⁻¹ W`` follows from ``X W`` and ``X V`` without forming ``Ψ⁻¹ W`` anew."""
    K = V.shape[1]
    A = xp.eye(K) + tau * (V.T @ V)
    return xp.linalg.solve(A, V.T @ W)


def latent_precision(G: list, mask, xp=np):
    """``P = I + Σ_{v observed} W_vᵀ Ψ_v⁻¹ W_v``: the precision of ``h | x`` for a row that
    has the views in ``mask``."""
    m = G[0].shape[0]
    P = xp.eye(m)
    for v in np.flatnonzero(mask):
        P = P + G[v]
    return P


#: the largest shared latent dimension and the view-specific one that "auto" chooses
AUTO_LATENT_DIM, AUTO_VIEW_LATENT_DIM = 10, 1
#: the automatic m's cap grows as sqrt(N / AUTO_LATENT_ROWS) beyond this many rows, up to
#: AUTO_LATENT_DIM_MAX (see auto_latent_dims)
AUTO_LATENT_ROWS, AUTO_LATENT_DIM_MAX = 600, 16


def auto_latent_dims(view_sizes, view_latent_dim: int | None = None,
                     n_samples: int | None = None) -> tuple[int, int]:
    """The shared and view-specific latent dimensions ``(m, K)`` that ``"auto"`` chooses.

    ``K = 1`` (or ``view_latent_dim`` when given) and ``m = min(cap, D - 1 - K)`` with D the
    median view size (rounded down; ``D - 2`` for the default K): the largest latent that
    stays one dimension short of reproducing a typical view exactly.  The cap is 10 up to
    600 training rows and grows as ``10·sqrt(N / 600)`` beyond, up to 16 (from 1600 rows);
    without ``n_samples``, 10.

    Why not smaller: the classifier sees the views only through the shared latent, so a latent
    smaller than the views drops directions that may separate the classes.  On scikit-learn's
    breast-cancer data as three views of 10, m = 8 gave a test accuracy of 0.984 and a Brier
    score of 0.018 (mean of five 80/20 splits) where m = 5 gave 0.970 and 0.024, with the same
    convergence of the decision values.  On the UCI digits 0-4 against 5-9 (1600 training rows),
    m = 16 gave 0.985 and 0.011 on two splits where m = 10 gave 0.975-0.978 and 0.017, in the
    same time.  Why the cap, and why it grows with N: on the digits 3 vs 5 (300 rows) m = 16 was
    no more accurate than 10 and mixed worse (smallest bulk ESS of f 162-469 against 901-1476,
    R-hat up to 1.021); more rows pin a larger latent down.  Why not larger with more classes:
    on the ten UCI digits (1600 rows) m = 32 was more accurate than 16 on four splits (three
    with short chains, one with the defaults: 0.980 / 0.9925 / 0.985 / 0.9825 against 0.975 /
    0.985 / 0.975 / 0.9775, Brier 0.018-0.036 against 0.033-0.044), but its decision values did
    not converge (the defaults' 2 chains of 1000 + 2000: max R-hat 1.61, min bulk ESS 3, against
    1.025 and 169 at m = 16; m = 24: R-hat 1.63 on the 216-feature view's noise precision).  Why
    not larger than the views: a latent that can reproduce a view exactly (``m + K ≥ D_v``) lets
    that view's noise precision grow without bound and splits what the view says between ``h``
    and ``u_v`` in many nearly equivalent ways that the sampler crosses only rarely (on the
    breast-cancer views, m = 10, K = 5 gave R-hat of the decision values up to 1.9 with an ESS
    of 3).  And each view-specific column competes with the shared columns for the same variance
    even where no exact fit is possible: on the UCI digits 3 vs 5 (4 chains of 500 + 2000) K = 5
    gave a smallest bulk ESS of f of 111-781 over three seeds, and of 19-28 with the 6-feature
    view left out, where K = 1 gave 509-944 with the same test accuracy and Brier score.  K = 2
    converged fits that K = 1 did not (UCI digits 0 vs 8: τ's R-hat 1.74 → 1.007) but the
    second private column takes discriminative variance from the shared latent, which the
    classifier reads: on the digits 3 vs 5 (five 80/20 splits) accuracy 0.970 and Brier
    0.0236 against K = 1's 0.980 and 0.0202, and at 1600 rows a view's τ stopped mixing.
    """
    K = AUTO_VIEW_LATENT_DIM if view_latent_dim is None else int(view_latent_dim)
    typical = int(np.median(np.asarray(view_sizes)))
    cap = AUTO_LATENT_DIM
    if n_samples is not None:
        grown = round(AUTO_LATENT_DIM * np.sqrt(n_samples / AUTO_LATENT_ROWS))
        cap = int(np.clip(grown, AUTO_LATENT_DIM, AUTO_LATENT_DIM_MAX))
    return max(1, min(cap, typical - 1 - K)), K


class SharedLatent(Component):
    """Shared latent-variable representation (M³LAK's efficient multi-view LVM).

    Parameters
    ----------
    latent_dim : int or "auto"
        Dimension ``m`` of the shared latent ``h``; ``"auto"``: see :func:`auto_latent_dims`.
    view_latent_dim : int or "auto"
        Dimension ``K`` of each view-specific latent ``u_v`` (low-rank view noise);
        ``"auto"``: see :func:`auto_latent_dims`.
    a_r, b_r : float
        Gamma shape and rate of the ARD precisions of the columns of ``W_v``.
    a_tau, b_tau : float
        Gamma shape and rate of the view noise precisions ``τ_v``.
    view_loading_precision : float
        Prior precision of the entries of ``V_v``.
    eta : float or None
        Deprecated alias of ``view_loading_precision``; when given it takes precedence, with a
        ``FutureWarning``.
    """

    RENAMED = {"view_loading_precision": "eta"}

    def __init__(
        self,
        latent_dim: int = 20,
        view_latent_dim: int = 5,
        a_r: float = 0.1,
        b_r: float = 1e-5,
        a_tau: float = 1e-2,
        b_tau: float = 1e-5,
        view_loading_precision: float = 1e3,
        eta: float | None = None,
    ) -> None:
        self.latent_dim = latent_dim
        self.view_latent_dim = view_latent_dim
        self.a_r = a_r
        self.b_r = b_r
        self.a_tau = a_tau
        self.b_tau = b_tau
        self.view_loading_precision = view_loading_precision
        self.eta = eta

    def dims(self, view_sizes, n_samples: int | None = None) -> tuple[int, int]:
        """``(m, K)`` for views of these sizes and that many training rows, with ``"auto"``
        resolved."""
        # an explicit K leaves the automatic m room for it (see auto_latent_dims)
        K = None if self.view_latent_dim == "auto" else int(self.view_latent_dim)
        auto_m, auto_k = auto_latent_dims(view_sizes, K, n_samples)
        return auto_m if self.latent_dim == "auto" else int(self.latent_dim), auto_k

    # ------------------------------------------------------------------ graph
    consumes = (VIEWS,)
    produces = LATENT
    models_views = True

    def build(self, ctx: BuildContext, upstream=None) -> pt.TensorVariable:
        self._warn_renamed()
        data = ctx.data
        # the training rows' choice, also when building on new rows (auto_latent_dims reads N)
        m, K = ctx.fitted_state("latent_dims", lambda: self.dims(data.view_sizes,
                                                                 data.n_samples))
        n = data.n_samples
        ctx.add_coord("latent", m)
        if ctx.predicting:
            return self._build_new_rows(ctx, m, K)
        H = pm.Normal("H", 0.0, 1.0, shape=(n, m), dims=("sample", "latent"))
        tau, r = self._precisions(data.n_views, m)
        for v, Xv in enumerate(data.views):
            idx = np.flatnonzero(data.observed[:, v])
            X_obs = pm.Data(f"X_{v}", Xv[idx])
            W, V = self._loadings(v, Xv.shape[1], r, m, K)
            H_obs = H[idx]
            if ctx.augmented:
                U = pm.Normal(f"U_{v}", 0.0, 1.0, shape=(idx.size, K))
                pm.Normal(f"x_{v}", mu=H_obs @ W.T + U @ V.T, sigma=tau[v] ** -0.5,
                          observed=X_obs)
            else:
                pm.Potential(f"x_{v}_loglik", collapsed_view_logp(X_obs, H_obs, W, V, tau[v]))
        return H

    def _precisions(self, n_views: int, m: int):
        """The view noise precisions τ and the loadings' ARD precisions r."""
        tau = pm.Gamma("tau", alpha=self.a_tau, beta=self.b_tau, shape=n_views, dims="view")
        r = pm.Gamma("r", alpha=self.a_r, beta=self.b_r, shape=(n_views, m),
                     dims=("view", "latent"))
        return tau, r

    def _loadings(self, v: int, D: int, r, m: int, K: int):
        """View v's shared and view-specific loadings ``W_v`` (D × m) and ``V_v`` (D × K)."""
        W = pm.Normal(f"W_{v}", 0.0, 1.0 / pt.sqrt(r[v]), shape=(D, m))
        V = pm.Normal(f"V_{v}", 0.0, self._param("view_loading_precision")**-0.5, shape=(D, K))
        return W, V

    def _build_new_rows(self, ctx: BuildContext, m: int, K: int) -> pt.TensorVariable:
        """The latent of new rows as a graph of the global parameters: one draw from the exact
        conditional ``p(h | x, W, V, τ)`` (labels unseen), ``h = P⁻¹b + L⁻ᵀε`` with
        ``P = L Lᵀ`` per missing-view pattern and ``ε`` the input ``latent_noise`` (standard
        normals, one matrix per posterior draw, fed by the predictor)."""
        data = ctx.data
        n = data.n_samples
        tau, r = self._precisions(data.n_views, m)
        G, b = [], pt.zeros((n, m))
        for v, Xv in enumerate(data.views):
            W, V = self._loadings(v, Xv.shape[1], r, m, K)
            Gv, Qv = view_noise_terms(W, V, tau[v], xp=pt)
            G.append(Gv)
            rows = data.observed[:, v].astype(float)[:, None]
            b = b + rows * (pt.as_tensor(np.nan_to_num(Xv)) @ Qv)
        # one ε per draw shared by every row, so a row's prediction does not depend on the
        # other rows predicted with it (as M3LAK's own predictor)
        eps = pt.matrix("latent_noise", shape=(1, m), dtype="float64")
        ctx.state.setdefault("prediction_inputs", {})["latent_noise"] = eps
        patterns, pattern = np.unique(data.observed, axis=0, return_inverse=True)
        H = pt.zeros((n, m))
        for p, mask in enumerate(patterns):
            P = latent_precision(G, mask, xp=pt)
            L = pt.linalg.cholesky(P)
            h = (pt.linalg.solve(P, b.T)
                 + pt.linalg.solve_triangular(L.T, eps.T, lower=False)).T
            H = H + (pattern.reshape(-1) == p).astype(float)[:, None] * h
        return H

    def initial_values(self, ctx: BuildContext, rng: np.random.Generator,
                       jitter: float = 0.3) -> dict[str, np.ndarray]:
        """A dispersed start near a probabilistic-PCA solution (value-variable names).

        The factor model has a saddle at zero; starting from a jittered principal-component
        fit puts every chain in the basin of the posterior without fixing its rotation.
        """
        data = ctx.data
        m, K = ctx.state["latent_dims"]  # chosen by build
        # Column-mean imputation of missing rows only for the start; the model never sees it.
        Z = np.concatenate([np.where(data.observed[:, [v]], np.nan_to_num(Xv), 0.0)
                            for v, Xv in enumerate(data.views)], axis=1)
        k = min(m, min(Z.shape) - 1)
        U_svd, s, Vt = np.linalg.svd(Z - Z.mean(0), full_matrices=False)
        scale = np.sqrt(Z.shape[0])
        H = np.zeros((Z.shape[0], m))
        H[:, :k] = U_svd[:, :k] * scale
        H += jitter * rng.standard_normal(H.shape)
        loadings = np.zeros((Z.shape[1], m))
        loadings[:, :k] = (Vt[:k].T * s[:k]) / scale
        out: dict[str, np.ndarray] = {"H": H}
        start = 0
        tau = np.empty(data.n_views)
        r = np.empty((data.n_views, m))
        for v, Xv in enumerate(data.views):
            D = Xv.shape[1]
            W = loadings[start:start + D] + 0.01 * rng.standard_normal((D, m))
            start += D
            obs = data.observed[:, v]
            resid = Xv[obs] - H[obs] @ W.T
            tau[v] = 1.0 / max(float(np.mean(resid**2)), 1e-3)
            r[v] = np.clip(D / np.maximum(np.sum(W**2, axis=0), 1e-8), 1e-3, 1e6)
            out[f"W_{v}"] = W
            out[f"V_{v}"] = (self._param("view_loading_precision")**-0.5
                             * rng.standard_normal((D, K)))
        out["tau_log__"] = np.log(tau)
        out["r_log__"] = np.log(r)
        if ctx.augmented:
            for v in range(data.n_views):
                out[f"U_{v}"] = rng.standard_normal((int(data.observed[:, v].sum()), K))
        return out

    # ------------------------------------------------------------- prediction
    def latent_posterior(self, draw: dict[str, np.ndarray], data: MultiViewData
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Gaussian ``p(h* | x*)`` for one posterior draw, labels unseen.

        Returns ``(mean, chol, pattern)``: means (n, m), Cholesky factors of the precision
        per missing-view pattern (n_patterns, m, m) and each sample's pattern index (n,).
        """
        idx = [np.flatnonzero(data.observed[:, v]) for v in range(data.n_views)]
        patterns, pattern = np.unique(data.observed, axis=0, return_inverse=True)
        pattern = pattern.reshape(-1)
        mean, chols = latent_gaussian(draw, [X[i] for X, i in zip(data.views, idx, strict=True)],
                                      idx, patterns, pattern)
        return mean, chols, pattern


def latent_gaussian(draw: dict, observed_views, observed_index, patterns: np.ndarray,
                    pattern_of_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``p(h | x) ∝ N(h | 0, I) Π_{v observed} N(x_v | W_v h, Ψ_v)`` row by row.

    The precision ``P = I + Σ_{v observed} W_vᵀ Ψ_v⁻¹ W_v`` depends only on which views a row
    has, so it is factored once per missing-view pattern.  Returns the means (n, m) and the
    lower Cholesky factors of P per pattern (n_patterns, m, m).
    """
    m = draw["W_0"].shape[1]
    n = len(pattern_of_row)
    b = np.zeros((n, m))
    G = []
    for v, (Xo, idx) in enumerate(zip(observed_views, observed_index, strict=True)):
        Gv, Qv = view_noise_terms(draw[f"W_{v}"], draw[f"V_{v}"], float(draw["tau"][v]))
        G.append(Gv)
        b[idx] += Xo @ Qv
    chols = np.empty((len(patterns), m, m))
    mean = np.empty((n, m))
    for p, mask in enumerate(patterns):
        chols[p] = cholesky_lower(latent_precision(G, mask))
        rows = pattern_of_row == p
        mean[rows] = cho_solve_lower(chols[p], b[rows].T).T
    return mean, chols
