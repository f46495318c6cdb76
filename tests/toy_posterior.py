"""A test-only posterior kind, written as a plugin would be: one class following ``slangcli.gaussian.posteriors``.

The isotropic Gaussian ``N(mean, sigma^2 I)``, stored as ``mean : (D,)`` and ``log_sigma : (1,)`` under the
encoding-type ``isotropic-gaussian``. Not a useful family; a small one, so the test sees the machinery (the run
file's writer and reader, sampling, standard deviations, scoring) and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slangcli.gaussian.posteriors import MAX_ABS_LOG_SIGMA


@dataclass(frozen=True)
class IsotropicGaussian:
    """``N(mean, exp(2 log_sigma) I)``. ``mean : (D,)``, ``log_sigma : (1,)``."""

    mean: np.ndarray
    log_sigma: np.ndarray

    kind = "isotropic"
    encoding = "isotropic-gaussian"

    def stored_arrays(self) -> dict:
        return {"mean": self.mean, "log_sigma": self.log_sigma}

    @classmethod
    def from_group(cls, reader, group, model) -> "IsotropicGaussian":
        mean = reader.array(group, "mean", (model.n_params,))
        log_sigma = reader.array(group, "log_sigma", (1,))
        if not abs(log_sigma[0]) <= MAX_ABS_LOG_SIGMA:
            reader.fail(f"/posterior/log_sigma must lie in [-{MAX_ABS_LOG_SIGMA:g}, {MAX_ABS_LOG_SIGMA:g}]")
        return cls(mean=mean, log_sigma=log_sigma)

    @property
    def n_params(self) -> int:
        return self.mean.size

    def n_variational_params(self) -> int:
        return self.mean.size + 1

    def std(self) -> np.ndarray:
        return np.full(self.mean.size, np.exp(self.log_sigma[0]))

    def marginal_variances(self) -> np.ndarray:
        return self.std() ** 2

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        theta = rng.standard_normal((n, self.mean.size))
        theta *= np.exp(self.log_sigma[0])
        theta += self.mean
        return theta

    def quadratic_forms(self, X: np.ndarray) -> np.ndarray:
        return np.exp(2.0 * self.log_sigma[0]) * np.einsum("nd,nd->n", X, X)

    def kl_to_prior(self, prior_precision: np.ndarray) -> float:
        var = np.exp(2.0 * self.log_sigma[0])
        return 0.5 * float(np.sum(prior_precision * (var + self.mean**2)) - self.mean.size
                           - np.sum(np.log(prior_precision * var)))
