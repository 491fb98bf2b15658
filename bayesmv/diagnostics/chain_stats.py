"""Rank-normalised split R-hat, bulk and tail ESS and the MCSE of the mean, for many
quantities at once.

The definitions are Vehtari, Gelman, Simpson, Carpenter & Bürkner (2021) as ArviZ computes
them in ``az.summary(kind="diagnostics")``: the same split chains, Blom's rank offset, the
autocovariances by FFT, Geyer's initial positive and monotone sequences, the same quantile
rule and the same special cases (a constant array, NaN draws, one chain, fewer than four
draws).  ArviZ evaluates them one entry at a time in Python, and on a fit's labelled
posterior with an xarray selection per entry: 166 s for the 10 006 judged values of a
ten-class fit's 2 chains x 2000 draws.  Here every step runs on blocks of the whole
(quantity, chain, draw) array: 24 s for 16 006 such values, where ``az.summary`` on the same
plain array took 68 s (``benchmarks/convergence_table.py``).  ``tests/test_chain_stats.py``
checks every column against ArviZ's own summary.
"""

from __future__ import annotations

import numpy as np
from scipy import special, stats
from scipy.fft import next_fast_len

#: Blom's (1958) offset of the rank-normal transform (ArviZ's and Vehtari et al.'s)
BLOM_OFFSET = 3.0 / 8.0
#: quantities per block: bounds the temporaries (block x chains x draws numbers each)
BLOCK = 256
#: the columns of ``az.summary(kind="diagnostics")`` computed here
COLUMNS = ("r_hat", "ess_bulk", "ess_tail", "mcse_mean")


def _split(x: np.ndarray) -> np.ndarray:
    """Each chain's first and last ``draws // 2`` draws as two chains (the middle draw of an
    odd count is dropped); arrays here are (quantity, chain, draw)."""
    half = x.shape[2] // 2
    return np.concatenate([x[:, :, :half], x[:, :, x.shape[2] - half:]], axis=1)


def _z_scale(x: np.ndarray) -> np.ndarray:
    """Rank-normal scores of each quantity's pooled draws (average ranks for ties)."""
    q, c, d = x.shape
    ranks = stats.rankdata(x.reshape(q, c * d), method="average", axis=1)
    # ndtri is the standard normal quantile function (what norm.ppf evaluates)
    return special.ndtri((ranks - BLOM_OFFSET) / (c * d - 2 * BLOM_OFFSET + 1)).reshape(x.shape)


def _rhat(x: np.ndarray) -> np.ndarray:
    """Potential scale reduction of (quantity, chain, draw) draws."""
    n = x.shape[2]
    within = np.mean(np.var(x, axis=2, ddof=1), axis=1)
    between = n * np.var(np.mean(x, axis=2), axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt((between / within + n - 1) / n)


def _autocov(x: np.ndarray) -> np.ndarray:
    """Autocovariance at every lag along the draws, by FFT, divided by n, averaged over the
    chains: (quantity, lag)."""
    n = x.shape[2]
    m = next_fast_len(2 * n)
    spectrum = np.fft.rfft(x - x.mean(axis=2, keepdims=True), n=m, axis=2)
    spectrum *= np.conjugate(spectrum)
    return np.fft.irfft(spectrum, n=m, axis=2)[:, :, :n].mean(axis=1) / n


def _ess(x: np.ndarray) -> np.ndarray:
    """Effective sample size of (quantity, chain, draw) draws, by Geyer's initial monotone
    sequence of the multi-chain autocorrelation (ArviZ's ``_ess``, vectorised)."""
    q, c, d = x.shape
    out = np.full(q, float(c * d))  # a constant quantity's (ArviZ's convention)
    varying = (x.max(axis=(1, 2)) - x.min(axis=(1, 2))) >= np.finfo(float).resolution
    if varying.any():
        out[varying] = _ess_varying(x[varying])
    return out


def _ess_varying(x: np.ndarray) -> np.ndarray:
    q, c, d = x.shape
    acov = _autocov(x)
    mean_var = acov[:, 0] * d / (d - 1.0)
    var_plus = mean_var * (d - 1.0) / d
    if c > 1:
        var_plus = var_plus + np.var(x.mean(axis=2), axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = 1.0 - (mean_var[:, None] - acov) / var_plus[:, None]
    rho[:, 0] = 1.0
    # pairs (rho[2j], rho[2j+1]) for j = 0 .. j_max: ArviZ's loop looks at pair j >= 1 while
    # the previous pair's sum is positive and 2j - 1 < draws - 3
    j_max = max((d - 3) // 2, 0)
    pairs = rho[:, : 2 * j_max + 2].reshape(q, j_max + 1, 2)
    sums = pairs.sum(axis=2)
    bad = ~(sums > 0)
    j_last = np.where(bad.any(axis=1), np.argmax(bad, axis=1), j_max)
    # the complete pairs before the last one looked at, made monotone (running minimum)
    running = np.minimum.accumulate(sums, axis=1)
    before_last = np.arange(j_max + 1)[None, :] < j_last[:, None]
    total = np.sum(np.where(before_last, running, 0.0), axis=1)
    # the last pair's first value enters on its own: kept when positive or when the pair was
    # stored (its sum non-negative), else zero (with no pair looked at it is rho[0] = 1)
    rows = np.arange(q)
    even = pairs[rows, j_last, 0]
    extra = np.where((even > 0) | (sums[rows, j_last] >= 0), even, 0.0)
    tau = np.maximum(-1.0 + 2.0 * total + extra, 1.0 / np.log10(c * d))
    ess = c * d / tau
    # non-finite draws make the autocorrelations, and so ArviZ's ESS, NaN
    ess[np.isnan(rho[:, 1])] = np.nan
    return ess


def diagnostics(values: np.ndarray) -> dict[str, np.ndarray]:
    """``r_hat``, ``ess_bulk``, ``ess_tail`` and ``mcse_mean`` of each quantity.

    Parameters
    ----------
    values : ndarray of shape (chain, draw, quantity)

    Returns
    -------
    dict of ndarray of shape (quantity,)
        What ``az.summary(kind="diagnostics")`` reports in those columns: NaN for a quantity
        with a NaN draw or fewer than four draws per chain, and an R-hat of NaN with one chain.
    """
    values = np.asarray(values, dtype=float)
    if values.ndim != 3:
        raise ValueError(f"values must have shape (chain, draw, quantity), got {values.shape}")
    q = values.shape[2]
    out = {k: np.full(q, np.nan) for k in COLUMNS}
    if values.shape[1] < 4:
        return out
    ok = np.flatnonzero(~np.isnan(values).any(axis=(0, 1)))
    for start in range(0, len(ok), BLOCK):
        cols = ok[start:start + BLOCK]
        # (quantity, chain, draw): every step works along contiguous draws
        block = _block(np.ascontiguousarray(values[:, :, cols].transpose(2, 0, 1)))
        for key in COLUMNS:
            out[key][cols] = block[key]
    return out


def _block(x: np.ndarray) -> dict[str, np.ndarray]:
    q, c, d = x.shape
    pooled = x.reshape(q, c * d)
    split = _split(x)
    z = _z_scale(split)
    low, high = np.quantile(pooled, [0.05, 0.95], axis=1)
    tail = np.minimum(_ess(_split((x <= low[:, None, None]).astype(float))),
                      _ess(_split((x <= high[:, None, None]).astype(float))))
    if c > 1:
        folded = np.abs(x - np.median(pooled, axis=1)[:, None, None])
        bulk, tail_rhat = _rhat(z), _rhat(_z_scale(_split(folded)))
        # Python's max(bulk, tail), as ArviZ takes it: a NaN tail (a folded quantity
        # constant in every chain) leaves the bulk's value
        r_hat = np.where(tail_rhat > bulk, tail_rhat, bulk)
    else:
        r_hat = np.full(q, np.nan)
    variance = np.sum((pooled - pooled.mean(axis=1, keepdims=True)) ** 2, axis=1) / (c * d - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        mcse = np.sqrt(variance / _ess(split))
    return {"r_hat": r_hat, "ess_bulk": _ess(z), "ess_tail": tail, "mcse_mean": mcse}


__all__ = ["COLUMNS", "diagnostics"]
