"""check_convergence flags what it should, on InferenceData with known properties."""

import arviz as az
import numpy as np
import pytest

from bayesmv.diagnostics import ConvergenceWarning, check_convergence
from bayesmv.diagnostics.convergence import warn_if_not_converged


def _idata(f, diverging=None, **extra):
    post = {"f": f, **extra}
    stats = {"diverging": diverging} if diverging is not None else None
    return az.from_dict(posterior=post, sample_stats=stats,
                        dims={"f": ["sample", "task"]})


def test_independent_chains_pass():
    rng = np.random.default_rng(0)
    idata = _idata(rng.normal(size=(4, 500, 5, 1)), np.zeros((4, 500), bool),
                   tau=rng.gamma(5, size=(4, 500, 2)), H=rng.normal(size=(4, 500, 3)))
    report = check_convergence(idata)
    assert report.ok, report
    assert report.var_names == ("f", "tau")  # H is a rotation-invariant latent: not judged
    assert list(report.table.columns[:4]) == ["r_hat", "ess_bulk", "ess_tail", "mcse_mean"]
    assert len(report.table) == 5 + 2
    assert "ConvergenceReport [OK]" in repr(report) and "<b>" in report._repr_html_()


def test_disagreeing_chains_sticky_chains_and_divergences_fail():
    rng = np.random.default_rng(1)
    f = rng.normal(size=(2, 400, 3, 1))
    f[1] += 3.0  # the second chain sits elsewhere
    sticky = np.cumsum(rng.normal(size=(2, 400, 3, 1)), axis=1)  # random walks
    div = np.zeros((2, 400), bool)
    div[0, :7] = True
    bad_rhat = check_convergence(_idata(f))
    assert not bad_rhat.ok and any("R-hat" in w for w in bad_rhat.warnings)
    bad_ess = check_convergence(_idata(sticky))
    assert any("ess bulk" in w for w in bad_ess.warnings)
    with_div = check_convergence(_idata(rng.normal(size=(2, 400, 3, 1)), div))
    assert with_div.n_divergences == 7 and not with_div.ok
    with pytest.warns(ConvergenceWarning, match="7 divergent"):
        warn_if_not_converged(with_div)


def test_single_chain_is_reported_and_many_points_are_subsampled():
    rng = np.random.default_rng(2)
    report = check_convergence(_idata(rng.normal(size=(1, 300, 50, 1))), max_points=10)
    assert any("one chain" in w for w in report.warnings)
    assert len(report.table) == 10 and "10 evenly spaced" in report.note
