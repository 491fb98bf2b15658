"""The Polson–Scott augmentation integrates to the hinge pseudo-likelihood, and the λ draw
matches its generalised-inverse-Gaussian conditional (scipy.stats as the reference)."""

import numpy as np
import pytest
from scipy import integrate, stats

from bayesmv.components.likelihoods import (
    augmented_log_density,
    hinge_log_pseudolikelihood,
    hinge_probability,
)
from bayesmv.inference.gibbs import sample_lambda


@pytest.mark.parametrize("C", [0.1, 1.0, 3.0])
@pytest.mark.parametrize("yf", [-6.0, -1.0, 0.0, 0.5, 0.999, 1.0, 1.001, 2.0, 10.0, 40.0])
def test_augmentation_integrates_to_hinge(C, yf):
    # y = 1 and f = yf; the identity depends on y f only
    def integrand(lam):
        return np.exp(augmented_log_density(lam, yf, 1.0, C))

    a = C * (1.0 - yf)
    # split at the mode region so quad sees the peak even when it is narrow
    peak = max(abs(a), 1e-3)
    total = sum(integrate.quad(integrand, lo, hi, limit=400, epsabs=0, epsrel=1e-11)[0]
                for lo, hi in [(0, peak), (peak, 10 * peak + 10), (10 * peak + 10, np.inf)])
    expected = np.exp(hinge_log_pseudolikelihood(yf, 1.0, C))
    assert total == pytest.approx(expected, rel=1e-7, abs=1e-300)


def test_hinge_probability_is_normalised_likelihood():
    f = np.linspace(-3, 3, 13)
    C = 0.7
    lp = np.exp(hinge_log_pseudolikelihood(f, 1.0, C))
    ln = np.exp(hinge_log_pseudolikelihood(f, -1.0, C))
    np.testing.assert_allclose(hinge_probability(f, C), lp / (lp + ln), rtol=1e-12)
    np.testing.assert_allclose(hinge_probability(f, C) + hinge_probability(-f, C), 1.0)
    assert hinge_probability(np.array([0.0]), C)[0] == pytest.approx(0.5)


@pytest.mark.parametrize("a", [0.0, 1e-14, 0.05, 1.0, 7.5, -2.0])
def test_lambda_draws_match_gig(a):
    """λ ~ GIG(1/2, 1, a²): scipy's geninvgauss(p=1/2, b=|a|, scale=|a|); a = 0 is Gamma(1/2, 2)."""
    rng = np.random.default_rng(1)
    draws = sample_lambda(np.full(20000, a), rng)
    assert np.all(np.isfinite(draws)) and np.all(draws > 0)
    ref = (stats.gamma(0.5, scale=2.0) if abs(a) < 1e-10
           else stats.geninvgauss(0.5, abs(a), scale=abs(a)))
    assert stats.kstest(draws, ref.cdf).pvalue > 1e-3
    # the density the draw claims to come from is the augmented one, up to a constant in λ
    lam = np.array([0.3, 1.0, 2.5])
    log_target = augmented_log_density(lam, 1.0 - a, 1.0, 1.0)  # C(1 - y f) = a with C = 1
    diff = log_target - ref.logpdf(lam)
    np.testing.assert_allclose(diff, diff[0], atol=1e-9)
