"""``noise.standard_normal``: the float32 Box-Muller draws every training step uses.

Checked here: shape and dtype for odd and even sizes and several shapes; the same generator state gives the same
numbers and advances the generator; and the distribution on 2 million draws, with a fixed seed: mean, variance,
third and fourth moments within 4 standard errors of the normal's, a Kolmogorov-Smirnov test, tail frequencies
beyond 2 and 4, and no correlation between the two halves a Box-Muller pair fills.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from slangcli.gaussian import noise


@pytest.mark.parametrize("shape", [1, 2, 7, (3, 5), (2, 1000), (1, 2 * noise._BLOCK + 3)])
def test_shape_dtype_and_finite(shape):
    z = noise.standard_normal(np.random.default_rng(0), shape)
    assert z.shape == (shape if isinstance(shape, tuple) else (shape,)) and z.dtype == np.float32
    assert np.isfinite(z).all()


def test_deterministic_given_the_generator_and_advances_it():
    a = noise.standard_normal(np.random.default_rng(3), (4, 101))
    b = noise.standard_normal(np.random.default_rng(3), (4, 101))
    np.testing.assert_array_equal(a, b)
    rng = np.random.default_rng(3)
    first, second = noise.standard_normal(rng, 50), noise.standard_normal(rng, 50)
    assert not np.array_equal(first, second)


def test_sample_columns_are_the_transpose_of_a_row_draw():
    """``sample_columns(rng, D, S)`` is ``(D, S)``, Fortran-ordered, and holds the numbers of an ``(S, D)`` draw
    from the same generator state: sample s is row s of that draw, contiguous in memory."""
    Z = noise.sample_columns(np.random.default_rng(4), 37, 3)
    rows = noise.standard_normal(np.random.default_rng(4), (3, 37))
    assert Z.shape == (37, 3) and Z.flags.f_contiguous and Z.dtype == np.float32
    np.testing.assert_array_equal(Z, rows.T)


def test_distribution_is_standard_normal():
    n = 2_000_000
    z = noise.standard_normal(np.random.default_rng(11), n).astype(np.float64)
    se = 1.0 / np.sqrt(n)
    assert abs(z.mean()) < 4 * se
    assert abs(z.var() - 1.0) < 4 * np.sqrt(2.0) * se
    assert abs(np.mean(z**3)) < 4 * np.sqrt(15.0) * se
    assert abs(np.mean(z**4) - 3.0) < 4 * np.sqrt(96.0) * se
    assert scipy.stats.kstest(z, "norm").pvalue > 1e-3
    for c, p in [(2.0, 2 * scipy.stats.norm.sf(2.0)), (4.0, 2 * scipy.stats.norm.sf(4.0))]:
        assert abs(np.mean(np.abs(z) > c) - p) < 4 * np.sqrt(p / n)
    # a Box-Muller pair (r cos a, r sin a) is independent: uncorrelated, and so are the squares
    block = z[: 2 * noise._BLOCK]
    cos_half, sin_half = block[: noise._BLOCK], block[noise._BLOCK :]
    m = noise._BLOCK
    assert abs(np.corrcoef(cos_half, sin_half)[0, 1]) < 4 / np.sqrt(m)
    assert abs(np.corrcoef(cos_half**2, sin_half**2)[0, 1]) < 4 / np.sqrt(m)
