"""The vectorised convergence statistics against ArviZ's own ``az.summary``, entry by entry."""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pytest

from bayesmv.diagnostics import chain_stats
from bayesmv.diagnostics.convergence import check_convergence, without_numba


def assert_same(ours: dict, theirs: dict) -> None:
    """Equal to rounding; an R-hat of chains each constant at its own value is infinite
    here and 1e15 or so in ArviZ (its within-chain variance is rounding)."""
    for column in chain_stats.COLUMNS:
        a, b = ours[column].copy(), theirs[column].copy()
        huge = b > 1e10
        assert np.all(a[huge] > 1e10), column
        a[huge] = b[huge] = 0.0
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True,
                                   err_msg=column)


def arviz_columns(values: np.ndarray) -> dict[str, np.ndarray]:
    """ArviZ's columns for (chain, draw, quantity) values, one quantity at a time."""
    with without_numba(), warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # its 0/0 on degenerate chains
        table = az.summary({"x": values}, kind="diagnostics", round_to="none")
    return {c: table[c].to_numpy(dtype=float) for c in chain_stats.COLUMNS}


def chains(rng, n_chains: int, n_draws: int) -> np.ndarray:
    """Quantities of every kind the estimators produce and a few ArviZ treats specially:
    AR(1) chains from white noise to slowly mixing, antithetic chains (negative lag-one
    correlation: Geyer's sequence stops at once), chains at different levels, heavy ties,
    a heavy tail, a constant, a quantity constant within each chain but not across them,
    a trend, and one with a NaN draw."""
    cols = []
    for phi in (0.0, 0.5, 0.9, 0.99, -0.6, -0.95):
        e = rng.standard_normal((n_chains, n_draws))
        x = np.empty_like(e)
        x[:, 0] = e[:, 0]
        for t in range(1, n_draws):
            x[:, t] = phi * x[:, t - 1] + e[:, t]
        cols.append(x)
    cols.append(rng.standard_normal((n_chains, n_draws)) + np.arange(n_chains)[:, None])
    cols.append(rng.integers(0, 3, (n_chains, n_draws)).astype(float))
    cols.append(rng.standard_cauchy((n_chains, n_draws)))
    cols.append(np.full((n_chains, n_draws), 2.5))
    cols.append(np.repeat(np.arange(n_chains, dtype=float)[:, None], n_draws, axis=1))
    cols.append(np.linspace(0, 1, n_draws)[None, :] + 0.1 * rng.standard_normal(
        (n_chains, n_draws)))
    nan = rng.standard_normal((n_chains, n_draws))
    nan[0, 1] = np.nan
    cols.append(nan)
    return np.stack(cols, axis=-1)


@pytest.mark.parametrize(("n_chains", "n_draws"), [(4, 500), (2, 201), (3, 37), (1, 100),
                                                     (2, 4), (2, 3)])
def test_every_column_equals_arviz(n_chains, n_draws):
    values = chains(np.random.default_rng(n_chains * 1000 + n_draws), n_chains, n_draws)
    assert_same(chain_stats.diagnostics(values), arviz_columns(values))


def test_more_quantities_than_a_block():
    """Quantities are processed in blocks; the columns do not depend on the blocking."""
    rng = np.random.default_rng(3)
    q = chain_stats.BLOCK + 7
    values = rng.standard_normal((2, 60, q)).cumsum(axis=1)
    values[:, :, 5] = 1.0  # a constant in the first block
    assert_same(chain_stats.diagnostics(values), arviz_columns(values))


def test_a_bad_shape_is_refused():
    with pytest.raises(ValueError, match=r"\(chain, draw, quantity\)"):
        chain_stats.diagnostics(np.zeros((2, 10)))


def test_the_convergence_table_has_arviz_labels_and_values():
    """check_convergence's table: ArviZ's row labels (coordinate values) and its numbers,
    for a variable with two dims and one with none."""
    rng = np.random.default_rng(5)
    f = rng.standard_normal((2, 80, 3, 2)).cumsum(axis=1)
    tau = rng.standard_normal((2, 80))
    idata = az.from_dict(posterior={"f": f, "tau": tau}, dims={"f": ["sample", "task"]},
                         coords={"sample": [10, 11, 12], "task": ["a", "b"]})
    idata.posterior.attrs["inference"] = "mcmc"
    report = check_convergence(idata)
    with without_numba():
        expected = az.summary(idata, var_names=["f", "tau"], kind="diagnostics",
                              round_to="none")
    assert list(report.table.index) == list(expected.index)
    assert report.table.index[0] == "f[10, a]"
    for column in chain_stats.COLUMNS:
        np.testing.assert_allclose(report.table[column], expected[column], rtol=1e-9)
    assert report.locations["f[12, b]"] == ("posterior", "f", {"sample": 12, "task": "b"})
