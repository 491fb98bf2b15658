"""The hybrid sampler's group moves (latent scale, latent rotation, frequency scale) against
the joint density they claim to leave invariant, and the slice sampler that draws them."""

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from bayesmv import M3LAK
from bayesmv.components.latent import view_noise_terms
from bayesmv.datasets import make_lvm_classification
from bayesmv.inference.group_moves import (
    BandwidthTransportMove,
    FrequencyScaleMove,
    LatentRotationMove,
    LoadingScaleMove,
    _rotate_pairs,
    apply_latent_scale,
    draw_rotation_angles,
    frequency_prior_given_assignments,
    frequency_scale_log_density,
    latent_rotation_log_density,
    latent_scale_log_ratio,
    loading_scale_log_density,
    loading_scale_terms,
    slice_sample_independent,
)
from bayesmv.inference.spec import HybridSpec

# joint densities of small models, each evaluated a few times: no gcc (see conftest._ops_for)
pytestmark = pytest.mark.python_ops


def _build(spectral: str, latent_dim: int = 2):
    X, y, _ = make_lvm_classification(n_samples=15, view_dims=(4, 3), latent_dim=2,
                                      view_latent_dim=1, random_seed=0)
    X[1][[2, 5]] = np.nan
    est = M3LAK(latent_dim=latent_dim, n_frequencies=3, view_latent_dim=1, n_components=3,
                C=0.8, spectral=spectral)
    built = est.build_model(X, y)
    rng = np.random.default_rng(5)
    point = built.initial_values(rng)
    point["beta"] = rng.normal(size=point["beta"].shape)
    point["r_log__"] = rng.normal(size=point["r_log__"].shape)  # unequal ARD precisions
    if "dp_mu" in point:
        point["dp_mu"] = rng.normal(scale=0.3, size=point["dp_mu"].shape)
    # the model's joint density in natural coordinates (no log-transform Jacobians)
    return built, point, built.model.compile_logp(jacobian=False), HybridSpec.from_built(built)


@pytest.fixture(scope="module", params=["dp_mixture", "gaussian"])
def model(request):
    return _build(request.param)


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


def _loading_terms(spec, nat, j):
    """Per view, (A, B) of the loading scale move for column j, from the view's own rows."""
    terms = []
    for v, (Xo, idx) in enumerate(zip(spec.views, spec.observed_index, strict=True)):
        W, Ho = nat[f"W_{v}"], nat["H"][idx]
        Q = view_noise_terms(W, nat[f"V_{v}"], float(nat["tau"][v]))[1]
        terms.append(loading_scale_terms(W, Q, Ho.T @ Xo, Ho.T @ Ho, j))
    return np.array(terms)


def test_loading_scale_density_is_the_joint_change_plus_jacobian(model):
    """Scaling view v's loading column j by c_v and its ARD precision by 1/c_v² changes only
    that view's likelihood (U integrated out; a view with missing rows included) and the
    loadings' and ARD priors: the move's log density equals the joint's change plus the
    log-Jacobian in natural coordinates (D_v entries by c_v, one precision by c_v⁻²), and
    the views' densities add."""
    built, point, logp, spec = model
    nat = spec.natural(point)
    D = np.array([X.shape[1] for X in spec.views])
    rng = np.random.default_rng(2)
    for j in range(spec.latent_dim):
        terms = _loading_terms(spec, nat, j)
        for log_c in rng.normal(0.0, 0.6, size=(3, spec.n_views)):
            moved = dict(point)
            for v in range(spec.n_views):
                W = nat[f"W_{v}"].copy()
                W[:, j] *= np.exp(log_c[v])
                moved[f"W_{v}"] = W
            r_log = point["r_log__"].copy()
            r_log[:, j] -= 2.0 * log_c
            moved["r_log__"] = r_log
            expected = float(logp(moved) - logp(point)) + float(np.sum((D - 2) * log_c))
            density = [loading_scale_log_density(spec, nat["r"][:, j], terms[:, 0],
                                                 terms[:, 1], x)
                       for x in (log_c, np.zeros(spec.n_views))]
            assert float(np.sum(density[0] - density[1])) == pytest.approx(
                expected, rel=1e-9, abs=1e-8)


def test_loading_scale_move_keeps_each_column_on_its_funnel(model):
    """One sweep of the move rescales each view's loading column and its ARD precision along
    ``r ‖w‖² = const`` and touches nothing else."""
    built, point, _, spec = model
    nat = spec.natural(point)
    step = LoadingScaleMove([built.model.rvs_to_values[built.model["r"]]], spec,
                            model=built.model, rng=np.random.default_rng(0))
    moved, stats_ = step.step(dict(point))
    new = spec.natural(moved)
    assert stats_[0]["loading_scale_change"] > 0
    for v in range(spec.n_views):
        norms, new_norms = (np.sum(x[f"W_{v}"] ** 2, axis=0) for x in (nat, new))
        np.testing.assert_allclose(new["r"][v] * new_norms, nat["r"][v] * norms, rtol=1e-10)
        ratio = new[f"W_{v}"] / nat[f"W_{v}"]
        np.testing.assert_allclose(ratio, np.broadcast_to(ratio[0], ratio.shape), rtol=1e-10)
    for name in set(point) - {"r_log__"} - {f"W_{v}" for v in range(spec.n_views)}:
        np.testing.assert_array_equal(moved[name], point[name])


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



def _frequency_prior(spec, nat, Omega):
    """log p(Ω | spectral parameters) written with scipy: the DP mixture of diagonal
    Gaussians (assignments summed out) or the isotropic Gaussian."""
    if not spec.is_dp:
        return stats.norm.logpdf(Omega, scale=spec.spectral.scale(Omega.shape[1])).sum()
    comp = np.array([stats.norm.logpdf(Omega, nat["dp_mu"][k], np.sqrt(nat["dp_sigma2"][k]))
                     .sum(axis=1) for k in range(spec.spectral.n_components)])
    return float(logsumexp(comp + np.log(nat["dp_weights"])[:, None], axis=0).sum())


def _rotated(spec, point, nat, pairs, theta):
    moved = dict(point)
    for name in ["H", "Omega"] + [f"W_{v}" for v in range(spec.n_views)]:
        moved[name] = _rotate_pairs(nat[name], pairs, theta)
    return moved


@pytest.mark.parametrize("latent_dim, pairs", [(2, [[1, 0]]), (4, [[2, 0], [1, 3]])])
def test_latent_rotation_density_is_the_joint_change(model, latent_dim, pairs):
    """Rotating pairs of latent columns in H, W and Ω leaves W h and Ω h unchanged and has unit
    Jacobian, so the move's log density differences are the joint's; the frequencies' prior
    enters given the DP assignments (the mixture swapped for the complete-data Gaussians,
    both written here with scipy).  Disjoint pairs add: the joint's change when both rotate
    is the sum of the pairs' densities."""
    spectral = "dp_mixture" if model[3].is_dp else "gaussian"
    built, point, logp, spec = model if latent_dim == 2 else _build(spectral, latent_dim)
    nat = spec.natural(point)
    mean, precision = frequency_prior_given_assignments(spec, nat, np.random.default_rng(3))
    pairs = np.array(pairs)
    rng = np.random.default_rng(4)
    thetas = rng.uniform(-np.pi, np.pi, size=(4, len(pairs)))
    ours, expected = [], []
    for t in thetas:
        moved = _rotated(spec, point, nat, pairs, t)
        np.testing.assert_allclose(moved["H"] @ moved["Omega"].T, nat["H"] @ nat["Omega"].T)
        np.testing.assert_allclose(moved["H"] @ moved["W_0"].T, nat["H"] @ nat["W_0"].T)
        complete = stats.norm.logpdf(moved["Omega"], mean, precision**-0.5).sum()
        expected.append(float(logp(moved)) - _frequency_prior(spec, nat, moved["Omega"])
                        + complete)
        ours.append(latent_rotation_log_density(spec, nat, mean, precision, pairs, t).sum())
    ours, expected = np.array(ours), np.array(expected)
    np.testing.assert_allclose(ours - ours[0], expected - expected[0], rtol=1e-9, atol=1e-8)


def test_latent_rotation_draws_each_angle_from_its_circular_conditional(model):
    """Two disjoint pairs of latent columns (four columns): each update from the current
    orientation draws the pair's angle from its conditional on the circle, normalised here on
    a grid from the move's density evaluated directly, by Kolmogorov–Smirnov; and the move
    itself keeps every decision value."""
    X, y, _ = make_lvm_classification(n_samples=12, view_dims=(4, 3), latent_dim=2,
                                      view_latent_dim=1, random_seed=1)
    spectral = "dp_mixture" if model[3].is_dp else "gaussian"
    built = M3LAK(latent_dim=4, n_frequencies=3, view_latent_dim=1, n_components=3,
                  spectral=spectral).build_model(X, y)
    spec = HybridSpec.from_built(built)
    rng = np.random.default_rng(6)
    point = built.initial_values(rng)
    point["r_log__"] = rng.normal(size=point["r_log__"].shape)
    nat = spec.natural(point)
    mean, precision = frequency_prior_given_assignments(spec, nat, rng)
    pairs = np.array([[2, 0], [1, 3]])
    draws = np.array([draw_rotation_angles(spec, nat, mean, precision, pairs, rng)
                      for _ in range(1500)])
    draws = (draws + np.pi) % (2 * np.pi) - np.pi
    grid = np.linspace(-np.pi, np.pi, 4001)
    for p in range(len(pairs)):
        logd = np.array([latent_rotation_log_density(spec, nat, mean, precision, pairs[[p]],
                                                     np.array([t]))[0] for t in grid])
        cdf = np.cumsum(np.exp(logd - logd.max()))
        cdf /= cdf[-1]
        assert stats.kstest(draws[:, p], lambda x, c=cdf: np.interp(x, grid, c)).pvalue > 1e-3
    step = LatentRotationMove([built.model.rvs_to_values[built.model["H"]]], spec,
                              model=built.model, rng=np.random.default_rng(7))
    moved = spec.natural(step.step(dict(point))[0])
    np.testing.assert_allclose(moved["H"] @ moved["Omega"].T, nat["H"] @ nat["Omega"].T,
                               atol=1e-12)
    np.testing.assert_allclose(moved["H"] @ moved["W_1"].T, nat["H"] @ nat["W_1"].T, atol=1e-12)


def test_frequency_scale_density_is_the_joint_change_plus_jacobian(model):
    """Scaling (Ω, μ, σ²) by (c, c, c²) with β and H held: the move's log density equals the
    joint's change plus the log-Jacobian in natural coordinates (Ω's M·m entries and, under
    the DP, K·m means by c and K·m variances by c²)."""
    built, point, logp, spec = model
    nat = spec.natural(point)
    M, m = nat["Omega"].shape
    Km = spec.spectral.n_components * m if spec.is_dp else 0
    step = FrequencyScaleMove([built.model.rvs_to_values[built.model["Omega"]]], spec,
                              model=built.model)
    for log_c in (-0.3, 0.1, 0.5):
        c = np.exp(log_c)
        moved = dict(point, Omega=c * nat["Omega"])
        if spec.is_dp:
            moved["dp_mu"] = c * nat["dp_mu"]
            moved["dp_sigma2_log__"] = np.log(c**2 * nat["dp_sigma2"])
        expected = float(logp(moved) - logp(point)) + (M * m + Km + 2 * Km) * log_c
        ours = (frequency_scale_log_density(spec, nat, log_c)
                - frequency_scale_log_density(spec, nat, 0.0))
        assert ours == pytest.approx(expected, rel=1e-9, abs=1e-8)
    moved, _ = step.step(dict(point))
    ratio = spec.natural(moved)["Omega"] / nat["Omega"]
    assert np.allclose(ratio, ratio.flat[0])  # one factor for every frequency


def test_bandwidth_transport_ratio_is_the_joint_change_plus_jacobian(model):
    """The move's log acceptance ratio equals the joint's change plus the log-Jacobian of
    the whole map in natural coordinates, the transport's part found numerically (the map
    applied to basis vectors); and the map from Ω' back to Ω inverts it."""
    built, point, logp, spec = model
    nat = spec.natural(point)
    M, m = nat["Omega"].shape
    K = spec.spectral.n_components if spec.is_dp else 0
    step = BandwidthTransportMove([built.model.rvs_to_values[built.model["Omega"]]], spec,
                                  model=built.model)
    # unequal tuning-average weights, as after tuning
    step.lam_average.total = np.random.default_rng(1).gamma(2.0, size=spec.targets.shape)
    step.lam_average.count = 1
    for log_c in (np.array([0.4, 0.0]), np.array([0.0, -0.3]), np.array([0.2, 0.5])):
        moved, ours, _ = step.propose(dict(point), nat, log_c, step.state(nat))
        source = step.gaussian_approximation(spec.features(nat["H"], nat["Omega"]), nat["v"])
        target = step.gaussian_approximation(
            spec.features(nat["H"], nat["Omega"] * np.exp(log_c)), nat["v"])
        beta = nat["beta"]
        offset = step.transport(np.zeros_like(beta), source, target)[0]
        columns = []
        for j in range(beta.shape[1]):
            unit = np.zeros_like(beta)
            unit[:, j] = 1.0
            columns.append(step.transport(unit, source, target)[0] - offset)
        transport_logdet = sum(np.linalg.slogdet(np.stack([c[t] for c in columns], axis=1))[1]
                               for t in range(beta.shape[0]))
        expected = (float(logp(moved) - logp(point)) + transport_logdet
                    + np.sum((M + 3 * K) * log_c))
        assert ours == pytest.approx(expected, rel=1e-9, abs=1e-8)
        back = step.transport(moved["beta"], target, source)[0]
        np.testing.assert_allclose(back, beta, rtol=1e-10, atol=1e-10)
