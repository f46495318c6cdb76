"""Bayes by Backprop (Blundell et al. 2015): mean-field Gaussian VI by reparameterisation gradients and Adam.

``q(theta) = N(mu, diag(sigma^2))`` with ``sigma = exp(log_sigma)`` (the log keeps sigma positive without a
constraint; the posterior is stored as ``DiagonalGaussian(mean, log_sigma)``). The objective is the negative ELBO

    F(mu, log_sigma) = E_q[sum_n NLL_n(theta)] + KL(q || N(0, diag(lambda)^{-1})),

estimated on a minibatch of M of the N examples with S samples ``theta_s = mu + sigma * eps_s``,
``eps_s ~ N(0, I)``. With ``G_s = sum_i g_si`` the minibatch gradient at sample s and ``c = N / M``:

    dF/dmu        ~ (c / S) sum_s G_s                 + lambda mu
    dF/dlog_sigma ~ (c / S) sum_s G_s * eps_s * sigma + lambda sigma^2 - 1

(the KL part is exact: ``KL = 1/2 sum(lambda sigma^2 + lambda mu^2 - 1 - log(lambda sigma^2))``). Both are
unbiased, for any model and likelihood. Adam (Kingma and Ba 2014, with bias correction) updates ``(mu,
log_sigma)`` with a constant rate. Initialisation: ``mu`` from the model's layer initialisation, ``sigma =
init_std`` everywhere (0.01, as in the k-tied Normal paper's mean-field runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from slangcli.methods.base import Problem, require
from slangcli.posteriors import DiagonalGaussian


@dataclass(frozen=True)
class Hyper:
    samples: int = 12
    lr: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    init_std: float = 0.01

    def __post_init__(self):
        require(isinstance(self.samples, (int, np.integer)) and self.samples >= 1,
                f"--samples must be a whole number >= 1, got {self.samples}")
        require(0 < self.lr < np.inf, f"--lr must be positive and finite, got {self.lr}")
        require(0 <= self.beta1 < 1, f"--beta1 must be in [0, 1), got {self.beta1}")
        require(0 <= self.beta2 < 1, f"--beta2 must be in [0, 1), got {self.beta2}")
        require(0 < self.eps < np.inf, f"--eps must be positive and finite, got {self.eps}")
        require(0 < self.init_std < np.inf, f"--init-std must be positive and finite, got {self.init_std}")


class State(NamedTuple):
    mu: np.ndarray  # (D,)
    log_sigma: np.ndarray  # (D,)
    m: np.ndarray  # (2, D) Adam's first moment of the gradients in (mu, log_sigma)
    v: np.ndarray  # (2, D) Adam's second moment
    t: int  # steps taken


def init(rng: np.random.Generator, problem: Problem, hyper: Hyper) -> State:
    D = problem.model.n_params
    return State(mu=problem.model.init_mean(rng), log_sigma=np.full(D, np.log(hyper.init_std)),
                 m=np.zeros((2, D)), v=np.zeros((2, D)), t=0)


def gradient(state: State, eps: np.ndarray, problem: Problem, X: np.ndarray, y: np.ndarray):
    """The reparameterisation estimate of ``(dF/dmu, dF/dlog_sigma) : (2, D)`` at noise ``eps : (S, D)``, and the
    per-example NLL ``(S, M)`` at the samples."""
    S, M = eps.shape[0], X.shape[0]
    sigma = np.exp(state.log_sigma)
    theta = state.mu + sigma * eps
    nll, fg = problem.model.per_example_grads(theta, X, y)
    Gs = fg.sample_sums()  # (S, D)
    c = problem.n_data / (M * S)
    lam = problem.prior_precision
    grad = np.empty((2, state.mu.size))
    grad[0] = c * Gs.sum(0) + lam * state.mu
    grad[1] = c * np.einsum("sd,sd->d", Gs, eps) * sigma + lam * sigma**2 - 1.0
    return grad, nll


def step(rng: np.random.Generator, state: State, problem: Problem, X: np.ndarray, y: np.ndarray, hyper: Hyper):
    t = state.t + 1
    eps = rng.standard_normal((hyper.samples, state.mu.size))
    grad, nll = gradient(state, eps, problem, X, y)
    m = hyper.beta1 * state.m + (1.0 - hyper.beta1) * grad
    v = hyper.beta2 * state.v + (1.0 - hyper.beta2) * grad**2
    m_hat = m / (1.0 - hyper.beta1**t)
    v_hat = v / (1.0 - hyper.beta2**t)
    delta = hyper.lr * m_hat / (np.sqrt(v_hat) + hyper.eps)
    return State(state.mu - delta[0], state.log_sigma - delta[1], m, v, t), {"nll": float(nll.mean())}


def posterior(state: State) -> DiagonalGaussian:
    return DiagonalGaussian(mean=state.mu.copy(), log_sigma=state.log_sigma.copy())
