"""Gaussian posteriors over the flat parameter vector, as frozen dataclasses of arrays.

Each kind supplies what evaluation, comparison and compression need, at a cost linear in D:
drawing samples, marginal variances, per-input quadratic forms ``x^T Sigma x`` (for linear models), and the
KL divergence to the diagonal Gaussian prior (for the ELBO).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slangcli import lowrank


@dataclass(frozen=True)
class LowRankGaussian:
    """``N(mean, (U U^T + diag d)^{-1})``: SLANG's posterior (SLANG eq. 3). ``U : (D, L)``, ``d : (D,)``."""

    mean: np.ndarray
    U: np.ndarray
    d: np.ndarray

    kind = "lowrank"

    @property
    def n_params(self) -> int:
        return self.mean.size

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws, ``(n, D)``."""
        Z = rng.standard_normal((self.mean.size, n))
        return (self.mean[:, None] + lowrank.sample_noise(self.U, self.d, Z)).T

    def marginal_variances(self) -> np.ndarray:
        return lowrank.marginal_variances(self.U, self.d)

    def quadratic_forms(self, X: np.ndarray) -> np.ndarray:
        """``x_n^T Sigma x_n`` for each row of ``X : (N, D)``."""
        return lowrank.quadratic_forms(self.U, self.d, X)

    def kl_to_prior(self, prior_precision: np.ndarray) -> float:
        return lowrank.kl_to_diagonal_prior(self.mean, self.U, self.d, prior_precision)


POSTERIORS = {cls.kind: cls for cls in (LowRankGaussian,)}
