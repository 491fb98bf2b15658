"""The HMC blocks leave their exact conditional invariant, hinge included.

With a one-dimensional latent (m = 1) the conditional of each latent row, and of a single
frequency, is a 1-D density that quadrature normalises exactly.  The density is written here
independently of the sampler (scipy.stats for the Gaussian parts, the paper's feature map
and hinge), and long chains of the step are compared with its CDF by Kolmogorov–Smirnov.
"""

import numpy as np
import pytest
from scipy import integrate, stats

from bayesmv import M3LAK
from bayesmv.inference.hmc import FrequencyHMC, LatentHMC
from bayesmv.inference.spec import HybridSpec


@pytest.fixture(scope="module")
def one_dim_model():
    rng = np.random.default_rng(0)
    n = 4
    X = [rng.normal(size=(n, 3)), rng.normal(size=(n, 2))]
    X[1][3] = np.nan  # the last sample misses view 1
    y = np.array([0, 1, 1, 0])
    est = M3LAK(latent_dim=1, n_features=2, view_latent_dim=1, n_components=2, C=1.5,
                standardize=False)
    built = est.build_model(X, y)
    point = built.initial_values(np.random.default_rng(1))
    point["beta"] = np.array([[1.2, -0.8, 0.5, 1.0, 0.3]])
    point["Omega"] = np.array([[1.1], [-0.6]])
    point["H"] = rng.normal(size=(n, 1))
    return built, point, HybridSpec.from_built(built)


def _features(h, Omega):
    S = np.outer(h, Omega[:, 0])
    M = Omega.shape[0]
    return np.concatenate([np.cos(S), np.sin(S), np.full((len(h), 1), np.sqrt(M))],
                          axis=1) / np.sqrt(M)


def _hinge(f, y, C):
    return -2 * C * np.maximum(0, 1 - y * f)


def _ks_pvalue(draws, log_density, lo=-12, hi=12):
    grid = np.linspace(lo, hi, 20001)
    logd = log_density(grid)
    dens = np.exp(logd - logd.max())
    cdf = integrate.cumulative_trapezoid(dens, grid, initial=0)
    cdf /= cdf[-1]
    return stats.kstest(draws, lambda x: np.interp(x, grid, cdf)).pvalue


def _run(step, point, name, n_iter, thin):
    step.tune = True
    for _ in range(300):  # adapt the step size, then freeze it
        point, _ = step.step(point)
    step.stop_tuning()
    out = []
    for i in range(n_iter):
        point, _ = step.step(point)
        if i % thin == 0:
            out.append(point[name].copy())
    return np.array(out)


def test_latent_hmc_samples_the_exact_row_conditional(one_dim_model):
    built, point, spec = one_dim_model
    nat = spec.natural(point)
    step = LatentHMC([built.model.rvs_to_values[built.model["H"]]], spec,
                     model=built.model, rng=np.random.default_rng(2))
    draws = _run(step, dict(point), "H", 6000, 6)[:, :, 0]  # (1000, n)
    for row in range(draws.shape[1]):
        def log_density(h, row=row):
            total = stats.norm.logpdf(h)
            for v, (Xv, obs) in enumerate(zip(spec.views, spec.observed_index, strict=True)):
                if row not in obs:
                    continue
                x = Xv[list(obs).index(row)]
                W, V, tau = nat[f"W_{v}"], nat[f"V_{v}"], nat["tau"][v]
                cov = V @ V.T + np.eye(len(x)) / tau
                total = total + stats.multivariate_normal(np.zeros(len(x)), cov).logpdf(
                    x[None, :] - np.outer(h, W[:, 0]))
            f = _features(h, nat["Omega"]) @ nat["beta"][0]
            return total + _hinge(f, spec.targets[row, 0], spec.C)

        assert _ks_pvalue(draws[:, row], log_density) > 1e-3, row


def test_frequency_hmc_samples_the_exact_conditional():
    """A one-frequency model: Ω is a scalar under its DP-mixture prior and the hinge."""
    rng = np.random.default_rng(3)
    X = [rng.normal(size=(6, 2)), rng.normal(size=(6, 2))]
    y = np.array([0, 1, 1, 0, 1, 0])
    est = M3LAK(latent_dim=1, n_features=1, view_latent_dim=1, n_components=2, C=2.0,
                standardize=False)
    built = est.build_model(X, y)
    spec = HybridSpec.from_built(built)
    point = built.initial_values(np.random.default_rng(4))
    point["beta"] = np.array([[1.5, -1.0, 0.2]])
    point["H"] = rng.normal(size=(6, 1))
    point["dp_mu"] = np.array([[0.8], [-0.5]])
    nat = spec.natural(point)
    step = FrequencyHMC([built.model.rvs_to_values[built.model["Omega"]]], spec,
                        model=built.model, rng=np.random.default_rng(5))
    draws = _run(step, dict(point), "Omega", 6000, 6)[:, 0, 0]
    h, y_pm, beta = nat["H"][:, 0], spec.targets[:, 0], nat["beta"][0]

    def log_density(w):
        prior = np.log(sum(wk * stats.norm.pdf(w, mk, np.sqrt(sk))
                           for wk, mk, sk in zip(nat["dp_weights"], nat["dp_mu"][:, 0],
                                                 nat["dp_sigma2"][:, 0], strict=True)))
        S = np.outer(w, h)  # M = 1: φ̃ = [cos ωh, sin ωh, 1]
        f = beta[0] * np.cos(S) + beta[1] * np.sin(S) + beta[2]
        return prior + _hinge(f, y_pm[None, :], spec.C).sum(axis=1)

    assert _ks_pvalue(draws, log_density, lo=-8, hi=8) > 1e-3
