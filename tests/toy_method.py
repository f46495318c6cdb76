"""A test-only step method, written as a plugin would be: one module following ``slangcli.methods.base``.

Noisy SGD on the mean of a diagonal Gaussian whose standard deviation is fixed: ``theta_s = mu + sigma eps_s``,
``mu <- mu - lr (g_mu + lambda mu) / N`` with the reparameterisation gradient ``g_mu`` of the expected NLL. Not a good
method; a small one, so the test sees the machinery (options, checkpoints, resume, the gradient SNR) and nothing
else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from slangcli.gaussian.posteriors import DiagonalGaussian
from slangcli.methods.base import Problem, hyperparameter, require
from slangcli.methods.reparam import likelihood_gradients


@dataclass(frozen=True)
class Hyper:
    samples: int = hyperparameter(2, "Monte-Carlo weight samples per step.", short="-S")
    lr: float = hyperparameter(0.5, "Step size of the mean.")
    toy_sigma: float = hyperparameter(0.1, "The toy's fixed posterior standard deviation.")

    def __post_init__(self):
        require(self.toy_sigma > 0, f"--toy-sigma must be positive, got {self.toy_sigma}")


# the optional parts of the protocol (slangcli.methods.base.Method) it declares: its line in --help, the state
# checked after every step, and the gradient draws that make it take --snr (std_gradients, below)
description = "a test-only toy: noisy SGD on the mean, fixed standard deviation"
finite_fields = ("mu",)


class State(NamedTuple):
    mu: np.ndarray  # (D,)
    log_sigma: np.ndarray  # (D,), fixed at its initial value
    t: int


def init(rng: np.random.Generator, problem: Problem, hyper: Hyper) -> State:
    D = problem.model.n_params
    return State(mu=problem.model.init_mean(rng), log_sigma=np.full(D, np.log(hyper.toy_sigma)), t=0)


def step(rng: np.random.Generator, state: State, problem: Problem, X: np.ndarray, y: np.ndarray, hyper: Hyper):
    eps = rng.standard_normal((hyper.samples, state.mu.size))
    g_mu, _, nll = likelihood_gradients(state.mu, np.exp(state.log_sigma), eps, problem, X, y)
    mu = state.mu - hyper.lr * (g_mu + problem.prior_precision * state.mu) / problem.n_data
    return State(mu, state.log_sigma, state.t + 1), {"nll": float(nll.mean())}


def std_gradients(rng: np.random.Generator, state: State, problem: Problem, X: np.ndarray, y: np.ndarray,
                  hyper: Hyper, kl: float | None = None) -> list[np.ndarray]:
    """One draw of the expected NLL's gradient in ``log_sigma`` of each weight matrix (the toy never trains it,
    and has no KL term to weigh)."""
    eps = rng.standard_normal((hyper.samples, state.mu.size))
    sigma = np.exp(state.log_sigma)
    _, g_sigma, _ = likelihood_gradients(state.mu, sigma, eps, problem, X, y)
    return [(g_sigma * sigma)[s.W] for s in problem.model.layout.layers]


def posterior(state: State) -> DiagonalGaussian:
    return DiagonalGaussian(mean=state.mu.copy(), log_sigma=state.log_sigma.copy())
