"""The interweaving move of the views' noise precisions against the joint density it claims to
leave invariant, and as a Markov kernel on a factor model without labels."""

import numpy as np
import pytest
from scipy import stats

from bayesmv import M3LAK
from bayesmv.components.latent import latent_gaussian
from bayesmv.datasets import make_lvm_classification
from bayesmv.inference.interweave import NoiseInterweavingMove, NoncentredNoiseDensity
from bayesmv.inference.spec import HybridSpec

# a small graph evaluated a few times: no gcc (see conftest._ops_for)
pytestmark = pytest.mark.python_ops


@pytest.fixture(scope="module")
def model():
    X, y, _ = make_lvm_classification(n_samples=15, view_dims=(4, 3), latent_dim=2,
                                      view_latent_dim=1, random_seed=0)
    X[1][[2, 5]] = np.nan  # two rows miss view 1: two patterns of the latent's precision
    est = M3LAK(latent_dim=2, n_frequencies=3, view_latent_dim=1, n_components=3, C=0.8)
    built = est.build_model(X, y)
    rng = np.random.default_rng(3)
    point = built.initial_values(rng)
    point["beta"] = rng.normal(size=point["beta"].shape)
    point["r_log__"] = rng.normal(size=point["r_log__"].shape)
    point["dp_mu"] = rng.normal(scale=0.3, size=point["dp_mu"].shape)
    return built, point, built.model.compile_logp(jacobian=False), HybridSpec.from_built(built)


def _log_det_precisions(spec, nat) -> float:
    """Σ_n log|L_n| of the latent's conditional precision, from latent_gaussian (which forms
    Ψ⁻¹W from the views themselves, not from the move's cached products)."""
    _, chols = latent_gaussian(nat, spec.views, spec.observed_index, spec.patterns,
                               spec.pattern_of_row)
    counts = np.bincount(spec.pattern_of_row, minlength=len(spec.patterns))
    return float(sum(c * np.sum(np.log(np.diag(L))) for c, L in zip(counts, chols, strict=True)))


@pytest.mark.parametrize("view", [0, 1])
def test_noncentred_density_is_the_joint_change_plus_jacobian(model, view):
    """(τ_v, H) → (τ_v', H(τ_v', ξ)) with ξ held: the density of (log τ_v, ξ) is the joint's
    times |∂H/∂ξ| = Π_n |L_n|⁻¹ times τ_v (log scale), so differences of ours equal the graph's
    joint differences plus those Jacobians; the moved H keeps ξ = Lᵀ(h - μ)."""
    built, point, logp, spec = model
    nat = spec.natural(point)
    density = NoncentredNoiseDensity(spec, nat)
    log_tau = float(np.log(nat["tau"][view]))
    ours0, H0 = density(view, log_tau)
    np.testing.assert_allclose(H0, nat["H"], atol=1e-10)
    base = float(logp(point)) - _log_det_precisions(spec, nat) + log_tau
    for step in (-0.7, 0.4, 1.5):
        ours, H = density(view, log_tau + step)
        moved = dict(point, H=H, tau_log__=point["tau_log__"].copy())
        moved["tau_log__"][view] += step
        nat_moved = spec.natural(moved)
        expected = (float(logp(moved)) - _log_det_precisions(spec, nat_moved)
                    + log_tau + step) - base
        assert ours - ours0 == pytest.approx(expected, rel=1e-9, abs=1e-8)
        # the same whitened coordinates at the moved point
        np.testing.assert_allclose(NoncentredNoiseDensity(spec, nat_moved).xi, density.xi,
                                   atol=1e-9)


def test_interweaving_leaves_a_factor_model_posterior_invariant():
    """On a tiny factor model with the label term switched off (C = 0 in the spec), the move
    alternated with exact draws of H | θ keeps the posterior of τ given the loadings: the draws
    of log τ_0 against quadrature of p(τ_0, τ_1 | W, V, X) with H and U integrated out,
    written with NumPy's determinant and solve (KS test)."""
    X, y, _ = make_lvm_classification(n_samples=12, view_dims=(3, 2), latent_dim=1,
                                      view_latent_dim=1, random_seed=1)
    built = M3LAK(latent_dim=1, n_frequencies=2, view_latent_dim=1, n_components=2
                  ).build_model(X, y)
    spec = HybridSpec.from_built(built)
    spec.C = 0.0
    rng = np.random.default_rng(0)
    point = built.initial_values(rng)
    step = NoiseInterweavingMove([built.model.value_vars[0]], spec, model=built.model,
                                 rng=np.random.default_rng(1))
    nat = spec.natural(point)
    W = np.concatenate([nat["W_0"], nat["W_1"]])
    Xall = np.concatenate(spec.views, axis=1)
    grid = np.linspace(-6.0, 8.0, 281)
    t0, t1 = np.meshgrid(np.exp(grid), np.exp(grid), indexing="ij")
    cov = np.broadcast_to(W @ W.T, t0.shape + (5, 5)).copy()
    cov[..., :3, :3] += nat["V_0"] @ nat["V_0"].T
    cov[..., 3:, 3:] += nat["V_1"] @ nat["V_1"].T
    cov[..., [0, 1, 2], [0, 1, 2]] += 1.0 / t0[..., None]
    cov[..., [3, 4], [3, 4]] += 1.0 / t1[..., None]
    quad = np.einsum("nd,...de,ne->...", Xall, np.linalg.inv(cov), Xall)
    log_post = (-0.5 * len(Xall) * np.linalg.slogdet(cov)[1] - 0.5 * quad
                + sum(stats.gamma(spec.a_tau, scale=1 / spec.b_tau).logpdf(t) + np.log(t)
                      for t in (t0, t1)))
    marginal = np.exp(log_post - log_post.max()).sum(axis=1)
    # the mass of each cell centred on its grid point (a plain cumulative sum is half a cell
    # ahead)
    cdf = (np.cumsum(marginal) - 0.5 * marginal) / marginal.sum()
    draws = []
    for i in range(3500):
        step.tune = i < 500  # the step sizes adapt, then stay
        mean, chols = latent_gaussian(spec.natural(point), spec.views, spec.observed_index,
                                      spec.patterns, spec.pattern_of_row)
        z = rng.standard_normal(mean.shape)
        point = dict(point, H=mean + np.linalg.solve(chols[0].T, z.T).T)
        point, _ = step.step(point)
        if not step.tune:
            draws.append(point["tau_log__"][0])
    assert stats.kstest(np.array(draws)[::3], lambda x: np.interp(x, grid, cdf)).pvalue > 1e-3


def test_views_per_step_moves_a_random_subset_of_the_views(model):
    """With ``views_per_step=1`` each step proposes for one view drawn at random: the other
    view's τ stays, both views get moved over a few steps, and H moves only with an accepted τ
    (it is the move's function of ξ). A bound below one is refused."""
    built, point, _, spec = model
    step = NoiseInterweavingMove([built.model.value_vars[0]], spec, views_per_step=1,
                                 model=built.model, rng=np.random.default_rng(5))
    moved = set()
    for _ in range(40):
        new, _ = step.step(point)
        changed = np.flatnonzero(new["tau_log__"] != point["tau_log__"])
        assert len(changed) <= 1
        assert (len(changed) == 1) == (not np.array_equal(new["H"], point["H"]))
        moved.update(changed.tolist())
        point = new
    assert moved == {0, 1}
    with pytest.raises(ValueError, match="views_per_step must be None or at least 1"):
        NoiseInterweavingMove([built.model.value_vars[0]], spec, views_per_step=0,
                              model=built.model)


def test_idle_tuning_leaves_the_first_tuning_iterations_alone(model):
    """``idle_tuning=3``: the first three tuning steps return the point unchanged and adapt
    nothing; then the move runs (and τ or H changes within a few steps); a new chain
    (``reset_tuning``) is idle again."""
    built, point, _, spec = model
    step = NoiseInterweavingMove([built.model.value_vars[0]], spec, idle_tuning=3,
                                 model=built.model, rng=np.random.default_rng(2))
    log_step = step.log_step.copy()
    for _ in range(3):
        new, _ = step.step(point)
        np.testing.assert_array_equal(new["tau_log__"], point["tau_log__"])
        np.testing.assert_array_equal(new["H"], point["H"])
    np.testing.assert_array_equal(step.log_step, log_step)
    moved = False
    for _ in range(10):
        new, _ = step.step(point)
        moved |= not np.array_equal(new["tau_log__"], point["tau_log__"])
    assert moved
    assert not np.array_equal(step.log_step, log_step)  # adapting now
    step.reset_tuning()
    new, _ = step.step(point)
    np.testing.assert_array_equal(new["tau_log__"], point["tau_log__"])
