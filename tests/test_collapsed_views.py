"""The collapsed-views move (the shared latent, the view latents and every τ, all views'
loadings integrated out) against scipy's Gaussian densities and the model's joint density."""

import numpy as np
import pytest
from scipy import stats

from bayesmv.inference.collapsed_views import CollapsedViewsTarget, ViewLoadingsMarginal

# joint densities of a small model, each evaluated a few times: no gcc (see conftest._ops_for)
pytestmark = pytest.mark.python_ops


def test_view_term_is_the_gaussian_evidence_of_the_view():
    """Each of the D columns of X is N(0, Z R⁻¹ Zᵀ + τ⁻¹ I) (scipy's multivariate normal):
    the term equals their sum less ½ D log det R and the 2π's."""
    rng = np.random.default_rng(0)
    X, prior = rng.normal(size=(7, 4)), rng.gamma(2.0, 1.0, size=3)
    term = ViewLoadingsMarginal(X, prior)
    for _ in range(3):
        Z, log_tau = rng.normal(size=(7, 3)), rng.normal()
        cov = Z @ np.diag(1.0 / prior) @ Z.T + np.exp(-log_tau) * np.eye(7)
        dense = stats.multivariate_normal(np.zeros(7), cov).logpdf(X.T).sum()
        constant = 0.5 * 4 * np.sum(np.log(prior)) - 0.5 * X.size * np.log(2 * np.pi)
        assert term.log_density(Z, log_tau)[0] == pytest.approx(dense - constant, rel=1e-10)


def test_view_term_gradient_is_its_derivative(central_gradient):
    rng = np.random.default_rng(1)
    term = ViewLoadingsMarginal(rng.normal(size=(6, 5)), rng.gamma(2.0, 1.0, size=3))
    Z, log_tau = rng.normal(size=(6, 3)), 0.4
    _, g_Z, g_tau = term.log_density(Z, log_tau)
    numeric = central_gradient(lambda z: term.log_density(z, log_tau)[0], Z)
    np.testing.assert_allclose(g_Z, numeric, rtol=1e-6, atol=1e-6)
    numeric = central_gradient(lambda t: term.log_density(Z, float(t[0]))[0], [log_tau])
    assert g_tau == pytest.approx(float(numeric[0]), rel=1e-6, abs=1e-6)




def _log_conditionals(spec, nat, U):
    """log p(U | H, W, V, τ) - log p([W V] | H, U, τ, r), each view by dense algebra."""
    total = 0.0
    for v, (Xo, idx) in enumerate(zip(spec.views, spec.observed_index, strict=True)):
        H, W, V, tau = nat["H"][idx], nat[f"W_{v}"], nat[f"V_{v}"], float(nat["tau"][v])
        K = V.shape[1]
        cov_u = np.linalg.inv(np.eye(K) + tau * V.T @ V)
        means_u = (Xo - H @ W.T) @ V @ cov_u * tau
        total += sum(stats.multivariate_normal(mean, cov_u).logpdf(u)
                     for mean, u in zip(means_u, U[v], strict=True))
        Z = np.concatenate([H, U[v]], axis=1)
        precision = (np.diag(np.concatenate([nat["r"][v], np.full(K, spec.view_loading_precision)]))
                     + tau * Z.T @ Z)
        cov_wv = np.linalg.inv(precision)
        means_wv = tau * Xo.T @ Z @ cov_wv
        WV = np.concatenate([W, V], axis=1)
        total -= sum(stats.multivariate_normal(mean, cov_wv).logpdf(row)
                     for mean, row in zip(means_wv, WV, strict=True))
    return total


def test_collapsed_density_is_the_joint_over_the_loadings_conditional(small_hybrid_model):
    """p(H, U, τ | rest) = p(H, W, V, τ | rest) p(U | H, W, V, τ) / p([W V] | H, U, τ, rest)
    at any loadings: the target's differences between states equal those of the joint
    (PyMC's graph, U integrated out there) with the two dense conditionals, plus log τ for
    the target's log coordinates."""
    point, logp, spec = small_hybrid_model
    rng = np.random.default_rng(0)
    values = []
    for _ in range(3):
        moved = {k: np.array(val, copy=True) for k, val in point.items()}
        moved["H"] = rng.normal(size=moved["H"].shape)
        moved["tau_log__"] = rng.normal(0.5, 0.3, size=spec.n_views)
        nat = spec.natural(moved)
        U = [rng.normal(size=(len(idx), nat[f"V_{v}"].shape[1]))
             for v, idx in enumerate(spec.observed_index)]
        reference = (float(logp(moved)) + float(np.sum(moved["tau_log__"]))
                     + _log_conditionals(spec, nat, U))
        target = CollapsedViewsTarget(spec, nat, U)
        ours = target.logp_grad(target.pack(nat["H"], U, moved["tau_log__"]))[0]
        values.append((ours, reference))
    values = np.array(values)
    np.testing.assert_allclose(values[1:, 0] - values[0, 0], values[1:, 1] - values[0, 1],
                               rtol=1e-9, atol=1e-8)


def test_gradient_is_the_density_s_derivative(small_hybrid_model, central_gradient):
    point, _, spec = small_hybrid_model
    nat = spec.natural(point)
    rng = np.random.default_rng(1)
    U = [rng.normal(size=(len(idx), nat[f"V_{v}"].shape[1]))
         for v, idx in enumerate(spec.observed_index)]
    target = CollapsedViewsTarget(spec, nat, U)
    x = target.pack(nat["H"], U, point["tau_log__"] + 0.2)
    _, grad = target.logp_grad(x)
    numeric = central_gradient(lambda y: target.logp_grad(y)[0], x)
    # the hinge is piecewise linear: a kink within the step would show; none at this state
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-5)
