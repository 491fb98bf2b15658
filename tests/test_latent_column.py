"""The latent-column move (one shared column with its ARD precisions, the loadings on it
integrated out) against the model's joint density and dense linear algebra."""

import numpy as np
import pytest
from scipy import stats

from bayesmv.inference.latent_column import (
    LatentColumnTarget,
    ViewColumnMarginal,
    view_residuals,
)

# joint densities of a small model, each evaluated a few times: no gcc (see conftest._ops_for)
pytestmark = pytest.mark.python_ops


def _target(spec, point, j):
    nat = spec.natural(point)
    W = [nat[f"W_{v}"] for v in range(spec.n_views)]
    return LatentColumnTarget(spec, nat, view_residuals(spec, nat["H"], W), j)


def _dense_loading_conditional(spec, nat, v, j):
    """Mean and covariance of w_vj | everything else, by dense algebra on Ψ = VVᵀ + τ⁻¹I."""
    idx, V, tau = spec.observed_index[v], nat[f"V_{v}"], float(nat["tau"][v])
    H, W = nat["H"][idx], nat[f"W_{v}"]
    E = spec.views[v] - H @ W.T + np.outer(H[:, j], W[:, j])
    psi_inv = np.linalg.inv(V @ V.T + np.eye(len(V)) / tau)
    A = float(H[:, j] @ H[:, j]) * psi_inv + nat["r"][v, j] * np.eye(len(V))
    cov = np.linalg.inv(A)
    return cov @ psi_inv @ E.T @ H[:, j], cov


@pytest.mark.parametrize("j", [0, 2])
def test_collapsed_density_is_the_joint_over_the_loadings_conditional(small_hybrid_model, j):
    """p(h_j, r_·j | rest) = p(h_j, r_·j, w_·j | rest) / p(w_·j | h_j, r_·j, rest) at any w:
    the target's differences between states equal the joint's (PyMC's graph) minus the dense
    Gaussian conditional of the loadings, plus log r for the target's log coordinates."""
    point, logp, spec = small_hybrid_model
    rng = np.random.default_rng(j)
    values = []
    for _ in range(3):
        moved = {k: np.array(val, copy=True) for k, val in point.items()}
        moved["H"][:, j] = rng.normal(size=len(moved["H"]))
        moved["r_log__"][:, j] = rng.normal(0.5, 1.0, size=spec.n_views)
        nat = spec.natural(moved)
        reference = float(logp(moved)) + float(np.sum(moved["r_log__"][:, j]))
        for v in range(spec.n_views):
            mean, cov = _dense_loading_conditional(spec, nat, v, j)
            reference -= stats.multivariate_normal(mean, cov).logpdf(nat[f"W_{v}"][:, j])
        target = _target(spec, moved, j)
        ours = target.logp_grad(target.pack(nat["H"][:, j], moved["r_log__"][:, j]))[0]
        values.append((ours, reference))
    values = np.array(values)
    np.testing.assert_allclose(values[1:, 0] - values[0, 0], values[1:, 1] - values[0, 1],
                               rtol=1e-9, atol=1e-8)


def test_gradient_is_the_density_s_derivative(small_hybrid_model, central_gradient):
    point, _, spec = small_hybrid_model
    target = _target(spec, point, 1)
    x = target.pack(spec.natural(point)["H"][:, 1], point["r_log__"][:, 1] + 0.3)
    _, grad = target.logp_grad(x)
    numeric = central_gradient(lambda y: target.logp_grad(y)[0], x)
    # the hinge is piecewise linear: a kink within the step would show; none at this state
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6)


def test_loadings_are_drawn_from_their_dense_conditional(small_hybrid_model):
    """The eigen-basis mean and symmetric root reproduce the dense mean and covariance."""
    point, _, spec = small_hybrid_model
    nat = spec.natural(point)
    target = _target(spec, point, 0)
    for v, (term, idx) in enumerate(zip(target.views, spec.observed_index, strict=True)):
        mean, cov = _dense_loading_conditional(spec, nat, v, 0)
        h, log_r = nat["H"][idx, 0], float(np.log(nat["r"][v, 0]))
        _, _, _, _, a_q, a_perp = term._parts(h, float(np.exp(log_r)))
        root = np.array([term.inverse_sqrt(e, a_q, a_perp) for e in np.eye(term.D)]).T
        np.testing.assert_allclose(root @ root.T, cov, rtol=1e-9, atol=1e-12)
        draws = [term.draw_loadings(h, log_r, np.random.default_rng(seed)) for seed in range(2)]
        noise = [np.random.default_rng(seed).standard_normal(term.D) for seed in range(2)]
        for draw, z in zip(draws, noise, strict=True):
            np.testing.assert_allclose(draw, mean + root @ z, rtol=1e-9, atol=1e-12)


def test_view_term_without_view_latent_matches_bayesian_pca_evidence():
    """With no view-specific loadings (Ψ = τ⁻¹I) the term is the log evidence of the rank-one
    model E = h wᵀ + noise, w ~ N(0, r⁻¹I), up to terms free of (h, r): each of the D
    columns of E is N(0, τ⁻¹I + r⁻¹ h hᵀ) (scipy's multivariate normal)."""
    rng = np.random.default_rng(0)
    E, tau = rng.normal(size=(7, 5)), 2.0
    term = ViewColumnMarginal(E, np.zeros((5, 1)), tau)
    values = []
    for _ in range(3):
        h, log_r = rng.normal(size=7), rng.normal()
        cov = np.eye(7) / tau + np.exp(-log_r) * np.outer(h, h)
        reference = stats.multivariate_normal(np.zeros(7), cov).logpdf(E.T).sum()
        values.append((term.log_density(h, log_r)[0], reference))
    values = np.array(values)
    np.testing.assert_allclose(values[1:, 0] - values[0, 0], values[1:, 1] - values[0, 1],
                               rtol=1e-9)
