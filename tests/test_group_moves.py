"""The hybrid sampler's latent scale move (a group move) against the joint density it claims
to leave invariant, and the slice sampler that draws it."""

import numpy as np
import pytest
from scipy import stats

from bayesmv import M3LAK
from bayesmv.datasets import make_lvm_classification
from bayesmv.inference.group_moves import (
    apply_latent_scale,
    latent_scale_log_ratio,
    slice_sample_independent,
)
from bayesmv.inference.spec import HybridSpec


@pytest.fixture(scope="module", params=["dp_mixture", "gaussian"])
def model(request):
    X, y, _ = make_lvm_classification(n_samples=15, view_dims=(4, 3), latent_dim=2,
                                      view_latent_dim=1, random_state=0)
    X[1][[2, 5]] = np.nan
    est = M3LAK(latent_dim=2, n_features=3, view_latent_dim=1, n_components=3, C=0.8,
                spectral=request.param)
    built = est.build_model(X, y)
    rng = np.random.default_rng(5)
    point = built.initial_values(rng)
    point["beta"] = rng.normal(size=point["beta"].shape)
    if "dp_mu" in point:
        point["dp_mu"] = rng.normal(scale=0.3, size=point["dp_mu"].shape)
    # the model's joint density in natural coordinates (no log-transform Jacobians)
    return built, point, built.model.compile_logp(jacobian=False), HybridSpec.from_built(built)


def test_latent_scale_ratio_is_the_joint_change_plus_jacobian(model):
    """The move leaves every likelihood term unchanged; its log ratio equals the joint's change
    plus the log-Jacobian of the map in natural coordinates: per column j, H's N entries
    scale by 1/g, W's ΣD_v entries and Ω's M entries by g, the V ARD precisions by 1/g², and
    (DP) K means by g and K variances by g²."""
    built, point, logp, spec = model
    nat = spec.natural(point)
    N, m = nat["H"].shape
    M = nat["Omega"].shape[0]
    sum_D = sum(v.shape[1] for v in spec.views)
    K = spec.spectral.n_components if spec.is_dp else 0
    rng = np.random.default_rng(0)
    for _ in range(3):
        log_g = rng.normal(0.0, 0.4, size=m)
        moved = apply_latent_scale(spec, point, nat, np.exp(log_g))
        log_jac = np.sum((-N + sum_D + M - 2 * spec.n_views + K + 2 * K) * log_g)
        expected = float(logp(moved) - logp(point)) + log_jac
        ours = float(np.sum(latent_scale_log_ratio(spec, nat, log_g)))
        assert ours == pytest.approx(expected, rel=1e-9, abs=1e-8)


def test_latent_scale_move_keeps_decision_values(model):
    built, point, _, spec = model
    nat = spec.natural(point)
    g = np.array([0.5, 3.0])
    moved = spec.natural(apply_latent_scale(spec, point, nat, g))
    np.testing.assert_allclose(moved["H"] @ moved["Omega"].T, nat["H"] @ nat["Omega"].T)
    for v in range(spec.n_views):
        np.testing.assert_allclose(moved["H"] @ moved[f"W_{v}"].T, nat["H"] @ nat[f"W_{v}"].T)


def test_slice_sampler_draws_independent_targets_exactly():
    """Two coordinates with different targets (a Gamma's log and a shifted normal) updated
    together: after a chain of updates each marginal passes a KS test."""
    rng = np.random.default_rng(1)
    shape = 3.0

    def log_density(x):
        # x[0] = log u with u ~ Gamma(3, 1); x[1] ~ N(2, 0.5²)
        return np.array([shape * x[0] - np.exp(x[0]), -0.5 * ((x[1] - 2.0) / 0.5) ** 2])

    x, draws = np.zeros(2), []
    for _ in range(4000):
        x = slice_sample_independent(log_density, x, 0.3, rng)
        draws.append(x.copy())
    draws = np.array(draws)[::4]  # thin to near-independence for the KS test
    assert stats.kstest(np.exp(draws[:, 0]), stats.gamma(shape).cdf).pvalue > 1e-3
    assert stats.kstest(draws[:, 1], stats.norm(2.0, 0.5).cdf).pvalue > 1e-3

