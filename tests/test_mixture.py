"""Quantiles of the Monte-Carlo predictive mixture ``(1/S) sum_s N(f_s, sigma^2)`` (``slangcli.predictive.mixture``): checked
against the CDF at the returned point, against quantiles of draws from the mixture, and on degenerate mixtures.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special

from slangcli.predictive import mixture


def _mixture_cases():
    rng = np.random.default_rng(0)
    f = rng.standard_normal((500, 6)) * np.array([0.01, 0.3, 1.0, 3.0, 10.0, 1.0]) + np.array([0, 1, -2, 5, 0, 0])
    f[:, 5] = np.where(np.arange(500) < 150, -20.0, 20.0)  # two far-apart clusters (30 % / 70 %)
    return f


@pytest.mark.parametrize("p", [0.025, 0.05, 0.25, 0.5, 0.75, 0.95, 0.975])
def test_mixture_quantile_inverts_the_cdf(p):
    f, sigma = _mixture_cases(), 0.8
    q = mixture.quantile(p, f, sigma)
    np.testing.assert_allclose(mixture.cdf(q, f, sigma), p, rtol=0, atol=1e-13)


@pytest.mark.parametrize("p", [0.05, 0.5, 0.975])
def test_mixture_quantile_matches_sampled_quantiles(p):
    """Quantiles of 400 000 draws from each mixture (seeded): the sampling error of a quantile is below 0.03 of the
    spread here, and a Gaussian approximation of the bimodal mixture would miss by several units."""
    f, sigma = _mixture_cases(), 0.8
    rng = np.random.default_rng(1)
    n = 400_000
    which = rng.integers(0, f.shape[0], n)
    draws = f[which] + sigma * rng.standard_normal((n, f.shape[1]))
    expected = np.quantile(draws, p, axis=0)
    spread = draws.std(axis=0)
    q = mixture.quantile(p, f, sigma)
    np.testing.assert_array_less(np.abs(q - expected), 0.03 * spread)
    mean, _, total = mixture.moments(f, sigma)
    gaussian = mean + total * scipy.special.ndtri(p)
    assert abs(gaussian[5] - q[5]) > 1.0


def test_mixture_quantile_degenerate_cases():
    sigma = 0.5
    # one sample, or all samples equal: the quantile of a single Gaussian, exactly
    f = np.array([[1.0, -2.0, 3.0]])
    np.testing.assert_array_equal(mixture.quantile(0.9, f, sigma), f[0] + sigma * scipy.special.ndtri(0.9))
    same = np.full((40, 3), 2.0)
    np.testing.assert_array_equal(mixture.quantile(0.1, same, sigma), 2.0 + sigma * scipy.special.ndtri(0.1))
    # the median of a symmetric two-point mixture is its centre
    np.testing.assert_allclose(mixture.quantile(0.5, np.array([[-1.0], [1.0]]), sigma), 0.0, atol=1e-15)
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError):
            mixture.quantile(bad, f, sigma)
