"""What the natural-gradient VI methods share: SLANG, and the full-Gaussian and mean-field updates it approximates.

All run the update (2) of the SLANG paper (Khan et al.'s VOGN/VON) with the schedule of the authors' code, and
differ only in the structure they keep for the precision ``P`` (the solve in the mean step follows from it). One
step with minibatch size M, S weight samples ``theta_s ~ q``, N training examples and ``c = N / (M S)``:

    g      = c sum_si g_si                                  (per-example NLL gradients g_si)
    P_new  = (1 - beta) P + beta (c G G^T + diag(lambda))   (projected on the method's structure)
    m      = rho m + (1 - rho) g,   m_hat = m / (1 - rho^t)
    mu_new = mu - alpha P_new^{-1} (m_hat + lambda mu)

with rates ``alpha_t, beta_t = r_0 / (1 + t^decay)``. The curvature factor ``G`` is either the per-example
gradients (``ef``, the empirical Fisher of eq. 2) or the per-example generalized Gauss-Newton factors
(``hessian``: ``MLP.ggn_factors``; for logistic regression the exact Hessian ``sum p (1 - p) x~ x~^T``, VON's
update). Only these columns change between the ``-ef`` and ``-hessian`` methods; the mean always follows the
gradient ``g``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from slangcli.methods.base import Problem, decayed, hyperparameter, require

CURVATURES = ("ef", "hessian")


@dataclass(frozen=True)
class Hyper:
    """Hyperparameters of the natural-gradient updates; defaults are the SLANG paper's logistic-regression ones."""

    samples: int = hyperparameter(12, "Monte-Carlo weight samples per step.", short="-S")
    lr: float = hyperparameter(0.05, "Initial rate alpha_0 of the mean.")
    beta: float = hyperparameter(0.05, "Initial rate beta_0 of the precision.")
    decay: float = hyperparameter(0.51, "Rates decay as r_0 / (1 + t^decay) at step t.")
    momentum: float = hyperparameter(0.9, "Momentum of the likelihood gradient.")
    init_precision: float = hyperparameter(1.0, "Initial diagonal precision of q.")

    def __post_init__(self):
        require(isinstance(self.samples, (int, np.integer)) and self.samples >= 1,
                f"--samples must be a whole number >= 1, got {self.samples}")
        require(0 < self.lr < np.inf, f"--lr must be positive and finite, got {self.lr}")
        require(0 < self.beta < 1, f"--beta must be in (0, 1), got {self.beta}")
        require(0 <= self.decay < np.inf, f"--decay must be >= 0 and finite, got {self.decay}")
        require(0 <= self.momentum < 1, f"--momentum must be in [0, 1), got {self.momentum}")
        require(0 < self.init_precision < np.inf,
                f"--init-precision must be positive and finite, got {self.init_precision}")


def rates(hyper: Hyper, t: int) -> tuple[float, float]:
    """``alpha_t, beta_t`` at step ``t >= 1``."""
    return decayed(hyper.lr, t, hyper.decay), decayed(hyper.beta, t, hyper.decay)


def curvature_terms(problem: Problem, theta: np.ndarray, X: np.ndarray, y: np.ndarray, curvature: str = "ef"):
    """Per-example NLL ``(S, M)``, the scaled gradient ``g = c G 1 : (D,)``, the curvature factor (a
    ``FactoredGrads`` whose ``G G^T`` is the unscaled curvature) and ``c = N / (M S)``.

    For a network without hidden layer the factor's columns are first combined over the samples
    (``FactoredGrads.combine_samples``), which keeps ``G G^T``.
    """
    model = problem.model
    S, M = theta.shape[0], X.shape[0]
    c = problem.n_data / (M * S)
    nll, fg = model.per_example_grads(theta, X, y)
    g = c * fg.sum().astype(float, copy=False)  # float64 whatever the network's precision
    if curvature == "hessian":
        fg = model.ggn_factors(theta, X)
    elif curvature != "ef":
        raise ValueError(f"unknown curvature {curvature!r}")
    if model.is_linear:
        fg = fg.combine_samples()
    return nll, g, fg, c


def mean_step(mu: np.ndarray, m: np.ndarray, g: np.ndarray, lam: np.ndarray, t: int, alpha: float, rho: float,
              solve: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Momentum on the likelihood gradient only (bias-corrected), then the preconditioned mean step (eq. 11).

    ``solve(v)`` applies the new precision's inverse. Returns ``(mu_new, m_new)``.
    """
    m = rho * m + (1.0 - rho) * g
    m_hat = m / (1.0 - rho**t)
    return mu - alpha * solve(m_hat + lam * mu), m
